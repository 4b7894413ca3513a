"""Gentle on production and what it cost, with the real mariabackup, gpg and MariaDB: the tool, gpg
and the zstd threads run under the host's nice/ionice, the tool gets --throttle and --parallel,
the upload cap holds the upload back, a throttle the tool rejects is one line and no harm; the
locks the tool held are in the manifest; and the server's option files travel with the backup."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from helpers import restore_with, restored_checksums, root_target, seed_database, unique_name
from xtrabackup_provider.core.backup.impact import ImpactSettings
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.restore.option_files import option_files_dir
from xtrabackup_provider.core.storage.local import LocalStore


def _stat(path: Path) -> tuple[str, int, int] | None:
    """(comm, ppid, nice) from /proc/<pid>[/task/<tid>]/stat."""
    try:
        text = (path / "stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return comm, int(fields[1]), int(fields[16])  # state ppid ... nice is field 19 of the line


class Sampler:
    """A backup's progress callback (the main thread, after each chunk): what runs, and how nicely."""

    def __init__(self) -> None:
        self.children: dict[str, dict[str, Any]] = {}
        self.thread_nice: dict[int, int] = {}

    def __call__(self, _done: int) -> None:
        me = os.getpid()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and (st := _stat(proc)) and st[1] == me and st[0] not in self.children:
                argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
                ionice = subprocess.run(
                    ["ionice", "-p", proc.name], capture_output=True, text=True
                ).stdout.strip()
                self.children[st[0]] = {"nice": st[2], "argv": argv, "ionice": ionice}
        for task in Path(f"/proc/{me}/task").iterdir():
            if st := _stat(task):
                self.thread_nice[int(task.name)] = st[2]


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")


def test_the_tool_gpg_and_the_zstd_threads_run_as_gently_as_asked_and_the_locks_are_recorded(
    mariadb, catalog, gpg_keys, tmp_path
):
    db = unique_name("gentle")
    seed_database(mariadb, db, rows=3000)
    sampler = Sampler()
    impact = ImpactSettings(throttle=5000, parallel=3, nice=9, ionice="idle")
    m = run_backup(
        BackupRequest(
            catalog, root_target(mariadb), public_keys=[gpg_keys.public_key], impact=impact, progress=sampler
        )
    )
    tool, gpg = sampler.children["mariabackup"], sampler.children["gpg"]
    assert tool["nice"] == 9 and gpg["nice"] == 9
    assert "idle" in tool["ionice"]
    assert "--throttle=5000" in tool["argv"] and "--parallel=3" in tool["argv"]
    # The zstd stage and the compressor's own threads are niced; the thread that uploads is not.
    assert 9 in sampler.thread_nice.values()
    assert sampler.thread_nice[os.getpid()] == 0

    assert m.impact is not None
    assert (m.impact.throttle, m.impact.parallel, m.impact.nice, m.impact.ionice) == (5000, 3, 9, "idle")
    stages = [p.name for p in m.impact.locks]
    assert stages == [f"BACKUP STAGE {s}" for s in ("START", "FLUSH", "BLOCK_DDL", "BLOCK_COMMIT")]
    blocked = m.impact.blocked_seconds
    assert set(blocked) == {"commits", "ddl", "non_transactional_writes"}
    # The stages nest: commits are blocked inside the DDL block, DDL inside the FLUSH one.
    assert blocked["commits"] <= blocked["ddl"] <= blocked["non_transactional_writes"]
    assert catalog.get(m.backup_id).impact == m.impact  # as stored

    target = tmp_path / "restored" / "data"
    restore_with(catalog, gpg_keys, target)
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=941) == table_checksums(mariadb, [db])


def test_a_throttle_the_tool_rejects_is_one_line_and_the_backup_runs_without_it(
    mariadb, catalog, gpg_keys, caplog
):
    sampler = Sampler()
    impact = ImpactSettings(throttle=2**64, nice=5)  # over mariabackup's int64 option range
    with caplog.at_level(logging.WARNING):
        m = run_backup(
            BackupRequest(
                catalog,
                root_target(mariadb),
                public_keys=[gpg_keys.public_key],
                impact=impact,
                progress=sampler,
            )
        )
    # the row counter's own warning (no snapshot under a loaded machine) is not the throttle's
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and not r.name.endswith("rowcounts")
    ]
    assert len(warnings) == 1, warnings
    assert (
        f"host c1/db1: mariabackup {m.engine_major}" in warnings[0]
        and f"rejects --throttle={2**64}" in warnings[0]
    )
    assert "Error while setting value" in warnings[0] and "set impact.throttle" in warnings[0]
    assert m.impact is not None and m.impact.throttle is None and m.impact.warnings == warnings
    assert m.impact.nice == 5  # the other bounds still hold
    assert not [a for a in sampler.children["mariabackup"]["argv"] if a.startswith("--throttle")]
    assert catalog.backup_ids() == [m.backup_id]


def test_the_upload_cap_holds_the_upload_back(mariadb, catalog, gpg_keys):
    seed_database(mariadb, unique_name("capped"), rows=2000)
    rate = 128 * 1024
    m = run_backup(
        BackupRequest(
            catalog,
            root_target(mariadb),
            public_keys=[gpg_keys.public_key],
            impact=ImpactSettings(max_upload_bytes_per_second=rate),
        )
    )
    assert m.impact is not None and m.impact.max_upload_bytes_per_second == rate
    assert m.stored_bytes > 2 * rate  # so at this rate the upload had to wait
    assert m.impact.upload_wait_seconds > 0


def _host_config(etc: Path) -> Path:
    """A server config laid out the Debian way, with what goes wrong in real ones."""
    (etc / "conf.d").mkdir(parents=True)
    (etc / "my.cnf").write_text(
        "[mysqld]\nmax_connections = 151\n!includedir conf.d\n!include extra.cnf\n"
        "!include missing.cnf\n!include conf.d\n"
    )
    (etc / "conf.d" / "50-server.cnf").write_text("[mysqld]\ninnodb_buffer_pool_size = 64M\n")
    (etc / "conf.d" / "60-galera.cnf").write_text("[galera]\n")
    (etc / "conf.d" / "README").write_text("not an option file: the server skips it\n")
    (etc / "extra.cnf").write_text("[client]\npassword = s3cret-in-my-cnf\n")
    return etc / "my.cnf"


def test_option_files_go_encrypted_with_the_backup_and_come_back_next_to_the_datadir(
    mariadb, catalog, gpg_keys, tmp_path, caplog
):
    my_cnf = _host_config(tmp_path / "etc" / "mysql")
    before = {p: p.read_bytes() for p in my_cnf.parent.rglob("*") if p.is_file()}
    with caplog.at_level(logging.WARNING):
        m = run_backup(
            BackupRequest(
                catalog, root_target(mariadb), public_keys=[gpg_keys.public_key], option_files=[str(my_cnf)]
            )
        )
    etc = my_cnf.parent
    assert m.option_files is not None
    assert m.option_files.files == [
        str(etc / "my.cnf"),
        str(etc / "conf.d" / "50-server.cnf"),
        str(etc / "conf.d" / "60-galera.cnf"),
        str(etc / "extra.cnf"),
    ]
    assert m.option_files.skipped == [
        f"{etc}/missing.cnf: No such file or directory",
        f"{etc}/conf.d: Is a directory",
    ]
    warned = [r.getMessage() for r in caplog.records if r.name.endswith("option_files")]
    assert len(warned) == 2 and all("option file not saved with the backup" in w for w in warned)
    side = catalog.store.get_bytes(m.option_files.object.key)
    assert b"s3cret-in-my-cnf" not in side and m.option_files.object.encryption == "gpg"

    target = tmp_path / "restored" / "data"
    report = restore_with(catalog, gpg_keys, target)
    saved = option_files_dir(target)
    assert sorted(report.option_files) == sorted(str(saved / f.lstrip("/")) for f in m.option_files.files)
    for path, data in before.items():
        if str(path) in m.option_files.files:
            assert (saved / str(path).lstrip("/")).read_bytes() == data
        assert path.read_bytes() == data  # the live configuration is never touched
    assert oct(saved.stat().st_mode & 0o777) == "0o700"


def test_an_unencrypted_backup_does_not_store_the_option_files(mariadb, catalog, tmp_path, caplog):
    my_cnf = _host_config(tmp_path / "etc")
    with caplog.at_level(logging.WARNING):
        m = run_backup(
            BackupRequest(catalog, root_target(mariadb), allow_unencrypted=True, option_files=[str(my_cnf)])
        )
    assert m.option_files is None
    assert any("not encrypted, so its option files are not saved" in r.getMessage() for r in caplog.records)
