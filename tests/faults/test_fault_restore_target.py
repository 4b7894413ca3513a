"""Two restores into one target: the second is refused at once, by name, and the first one's
restore is left exactly as it was (issue 38, item 3).

The first restore's download is held halfway by the S3 proxy, so the second one starts while the
first is between its check of the target and its move-back, however fast or loaded the machine
is. Before the fix the second one restored into the still-missing target, and the first then
failed at its move-back ("not an empty directory") and emptied the target: the restore that had
succeeded was gone. Real components: a MariaDB sandbox, mariabackup/mbstream, gpg, moto over HTTP,
the CLI in its own process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from faultkit import S3Proxy, s3_catalog, target, tmpfs

from helpers import RUN, cli, restore_with, restored_checksums, wait_for
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.pitr.from_standby import standby_point_in_time_restore
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.restore.chain import RestoreError, RestoreReport
from xtrabackup_provider.core.restore.standby import restore_standby, update_standby


@pytest.fixture(scope="module")
def backed_up(seeded, s3_server, gpg_keys) -> tuple[Catalog, Manifest, str, dict[str, int]]:
    """One encrypted full backup (restores only read it) and the checksums of its tables."""
    server, db = seeded
    bucket = s3_server.make_bucket(f"xbp-target-lock-{os.getpid()}")
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    manifest = run_backup(
        BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key])
    )
    return catalog, manifest, db, table_checksums(server, [db])


class HeldRestore:
    """A restore in a thread of this process whose backup download the proxy holds halfway, until
    `release()`."""

    def __init__(self, proxy: S3Proxy, catalog: Catalog, keys: Any, datadir: Path, **request: Any) -> None:
        self.request = request  # more RestoreRequest fields
        self.downloading = threading.Event()
        self.report: RestoreReport | None = None
        self.error: BaseException | None = None
        proxy.rule = self._stall_first_download
        self.proxy = proxy
        held = s3_catalog(proxy.endpoint_url, catalog.store.bucket)
        self.thread = threading.Thread(target=self._run, args=(held, keys, datadir), name="first-restore")

    def _stall_first_download(self, operation: str, path: str) -> str | None:
        if operation.startswith("GET ") and "/backup.xbstream" in path and not self.downloading.is_set():
            self.downloading.set()
            return "stall"
        return None

    def _run(self, catalog: Catalog, keys: Any, datadir: Path) -> None:
        try:
            self.report = restore_with(catalog, keys, datadir, **self.request)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        wait_for(
            lambda: self.downloading.is_set() or not self.thread.is_alive(),
            timeout=50,  # botocore gives up on a held answer after 60 s and asks again
            what="the first restore's download held",
        )
        assert self.thread.is_alive(), f"the first restore ended before its download was held: {self.error!r}"

    def release(self) -> None:
        self.proxy.released.set()
        self.thread.join(timeout=300)
        assert not self.thread.is_alive(), "the first restore did not finish"


@pytest.fixture
def held(proxy, backed_up, gpg_keys, tmp_path) -> Iterator[Callable[[Path], HeldRestore]]:
    started: list[HeldRestore] = []

    def start(datadir: Path, **request: Any) -> HeldRestore:
        run = HeldRestore(proxy, backed_up[0], gpg_keys, datadir, **request)
        started.append(run)
        run.start()
        return run

    yield start
    proxy.released.set()
    for run in started:
        run.thread.join(timeout=300)


def _files(datadir: Path) -> dict[str, tuple[int, int]]:
    """Every file under `datadir` with its size and mtime (what a second run could have touched)."""
    return {
        str(p.relative_to(datadir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(datadir.rglob("*"))
        if p.is_file()
    }


def _assert_first_restore_intact(
    first: HeldRestore, datadir: Path, backed_up: tuple[Catalog, Manifest, str, dict[str, int]], basedir: Path
) -> None:
    _catalog, manifest, db, expected = backed_up
    assert datadir.is_dir() and any(datadir.iterdir()), (
        f"the target {datadir} is empty: the second restore emptied the first one's restore "
        f"(the first ended with {first.error!r})"
    )
    assert first.error is None, f"the first restore failed: {first.error!r}"
    assert first.report is not None and first.report.chain == [manifest.backup_id]
    assert restored_checksums(datadir, basedir, [db]) == expected, (
        "the restored tables differ from the backup"
    )


def _assert_names_the_holder(message: str, datadir: Path) -> None:
    assert str(datadir) in message, f"the error does not name the target: {message}"
    assert "another restore" in message, f"the error does not say another restore holds it: {message}"
    assert f"pid {os.getpid()}" in message and socket.gethostname() in message, (
        f"the error does not say which run holds it: {message}"
    )


def test_a_second_restore_cli_into_a_target_being_restored_is_refused_and_leaves_the_first(
    held, backed_up, s3_server, gpg_keys, tmp_path
):
    catalog, _manifest, _db, _expected = backed_up
    datadir = tmp_path / "restore" / "data"
    first = held(datadir)  # between its check of the target and its move-back

    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    second = cli(
        "restore",
        *("--cluster", "c1", "--host", "db1", "--bucket", catalog.store.bucket),
        *("--endpoint-url", s3_server.endpoint_url, "--private-key-file", str(key)),
        *("--target-datadir", str(datadir)),
        env={"XTRABACKUP_GPG_PASSPHRASE": gpg_keys.passphrase},
    )
    first.release()

    _assert_first_restore_intact(first, datadir, backed_up, tmp_path / "sb")
    assert second.returncode == 2, (second.returncode, second.stderr)
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), second.stderr
    _assert_names_the_holder(lines[0], datadir)


def _refusal(run: Callable[[], object]) -> Exception | None:
    """What `run` raised (asserted by the test once the first restore has finished), or None."""
    try:
        run()
    except Exception as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def standby(backed_up, gpg_keys, tmp_path_factory) -> Path:
    """A standby of the backup (restores from it copy its base: it stays usable)."""
    directory = tmp_path_factory.mktemp("standby") / "standby"
    update_standby(backed_up[0], directory, private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase)
    return directory


def test_a_restore_from_the_standby_into_a_target_being_restored_is_refused_and_leaves_the_first(
    held, backed_up, standby, tmp_path
):
    datadir = tmp_path / "restore" / "data"
    first = held(datadir)
    refused = _refusal(lambda: restore_standby(backed_up[0], standby, datadir))
    first.release()

    _assert_first_restore_intact(first, datadir, backed_up, tmp_path / "sb")
    assert isinstance(refused, RestoreError), (
        f"the restore from the standby into the held target: {refused!r}"
    )
    _assert_names_the_holder(str(refused), datadir)


def test_a_point_in_time_restore_from_the_standby_into_a_target_being_restored_is_refused(
    held, backed_up, standby, gpg_keys, tmp_path
):
    catalog, manifest, _db, _expected = backed_up
    datadir = tmp_path / "restore" / "data"
    first = held(datadir)
    request = PitrRequest(
        catalog=catalog, target_datadir=datadir, target=PitrTarget.at_gtid(manifest.gtid or "")
    )
    refused = _refusal(lambda: standby_point_in_time_restore(request, standby))
    first.release()

    _assert_first_restore_intact(first, datadir, backed_up, tmp_path / "sb")
    assert isinstance(refused, RestoreError), f"the point-in-time restore from the standby: {refused!r}"
    _assert_names_the_holder(str(refused), datadir)


def test_a_point_in_time_restore_into_a_target_being_restored_is_refused_and_leaves_the_first(
    held, backed_up, gpg_keys, tmp_path
):
    catalog, manifest, _db, _expected = backed_up
    datadir = tmp_path / "restore" / "data"
    first = held(datadir)
    # The backup's own GTID: a point-in-time restore that needs no shipped binlog.
    request = PitrRequest(
        catalog=catalog,
        target_datadir=datadir,
        target=PitrTarget.at_gtid(manifest.gtid or ""),
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
    )
    try:
        point_in_time_restore(request)
    except Exception as exc:  # asserted below, once the first restore has finished
        refused: Exception | None = exc
    else:
        refused = None
    first.release()

    _assert_first_restore_intact(first, datadir, backed_up, tmp_path / "sb")
    assert isinstance(refused, RestoreError), f"the point-in-time restore into the held target: {refused!r}"
    _assert_names_the_holder(str(refused), datadir)


def test_the_finished_restore_is_left_untouched_by_a_later_restore_into_it(backed_up, gpg_keys, tmp_path):
    """After the first restore has finished, a second one is refused as before, and touches nothing."""
    catalog, _manifest, _db, _expected = backed_up
    datadir = tmp_path / "restore" / "data"
    restore_with(catalog, gpg_keys, datadir)
    before = _files(datadir)
    with pytest.raises(RestoreError, match="not an empty directory") as excinfo:
        restore_with(catalog, gpg_keys, datadir)
    assert str(datadir) in str(excinfo.value)
    assert _files(datadir) == before
    assert sorted(p.name for p in datadir.parent.iterdir()) == ["data"], (
        "a lock or scratch file was left beside it"
    )


@contextlib.contextmanager
def _mount_point_in_a_read_only_directory(root: Path) -> Iterator[Path]:
    """`root/data`, a filesystem of its own mounted in `root`, which is read-only: a datadir that
    is a mount point in a directory the restore may not write (/var/lib/mysql as the mysql user)."""
    with tmpfs(root, "8m"):
        (root / "data").mkdir()
        with tmpfs(root / "data", "1g"):
            subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
            yield root / "data"


def test_a_target_whose_parent_is_not_writable_is_held_itself(held, backed_up, gpg_keys, tmp_path):
    """No lock file can be made beside such a target: the target directory itself is locked, so a
    restore into it still works (its scratch elsewhere) and a second one is still refused."""
    with _mount_point_in_a_read_only_directory(tmp_path / "ro") as datadir:
        first = held(datadir, scratch_dir=tmp_path / "scratch1", move_back=False)
        refused = _refusal(
            lambda: restore_with(backed_up[0], gpg_keys, datadir, scratch_dir=tmp_path / "scratch2")
        )
        first.release()

        _assert_first_restore_intact(first, datadir, backed_up, tmp_path / "sb")
        assert isinstance(refused, RestoreError), f"the second restore into the held target: {refused!r}"
        message = str(refused)
        assert str(datadir) in message and "another restore" in message, message


def test_two_restore_clis_started_together_leave_one_restore_and_one_error_naming_the_target(
    backed_up, s3_server, gpg_keys, tmp_path
):
    """The issue's own reproduction: two `restore` processes into one new target, started
    together. Whichever comes second (held out, or finding the first one's finished restore) fails
    in one line naming the target; the restore that succeeded is there and starts."""
    catalog, _manifest, _db, _expected = backed_up
    datadir = tmp_path / "restore" / "data"
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    argv = [
        sys.executable,
        "-c",
        RUN,
        "restore",
        *("--cluster", "c1", "--host", "db1", "--bucket", catalog.store.bucket),
        *("--endpoint-url", s3_server.endpoint_url, "--private-key-file", str(key)),
        *("--target-datadir", str(datadir), "--create-parents"),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["XTRABACKUP_GPG_PASSPHRASE"] = gpg_keys.passphrase
    runs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in "ab"
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    done = [(run.returncode, out, err) for run, (out, err) in zip(runs, outputs, strict=True)]

    assert datadir.is_dir() and any(datadir.iterdir()), f"the target was emptied: {done}"
    assert sorted(rc for rc, _out, _err in done) == [0, 2], done
    assert restored_checksums(datadir, tmp_path / "sb", [backed_up[2]]) == backed_up[3]
    [(_rc, _out, err)] = [d for d in done if d[0] == 2]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(datadir) in errors[0], err
    assert "another restore" in errors[0] or "not an empty directory" in errors[0], err
