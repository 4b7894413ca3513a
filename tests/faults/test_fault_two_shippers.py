"""Two shippers of one server (issue 38 item 2): a CLI `binlogs ship`, or a task the scheduler thinks
dead, racing the DAG's follower. On main: A uploads a binlog, B uploads the same binlog to the same
key (GPG output differs per run) and writes its manifest, A writes its manifest last: A's sha256 now
names B's bytes, and PITR and copies refuse that binlog. Each shipper here is its own process,
paused (SIGSTOP) between its upload and its manifest as a stalled worker would be."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SHIP = textwrap.dedent(
    """
    import faulthandler, os, signal, sys
    faulthandler.register(signal.SIGUSR1)  # the test asks a shipper that hangs where it is
    from datetime import timedelta
    from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
    from xtrabackup_provider.core.catalog.backups import Catalog
    from xtrabackup_provider.core.db.server import MySQLTarget
    from xtrabackup_provider.core.storage.local import LocalStore

    kw = {"lease": timedelta(seconds=float(os.environ["LEASE"]))} if os.environ.get("LEASE") else {}
    report = ship_binlogs(ShipRequest(
        catalog=Catalog(LocalStore(sys.argv[1]), "backups", "c1", "db1"),
        target=MySQLTarget(host=None, socket=sys.argv[2], user="root", password=os.environ["PW"]),
        public_keys=[open(sys.argv[3]).read()],
        accept_new_server=True,
        **kw,
    ))
    print("shipped", report.shipped)
    """
)


def _start(store: Path, server, key_file: Path, elsewhere: bool = False, **env: str) -> subprocess.Popen[str]:
    """A shipping process; `elsewhere`: as on another worker (its own host name), whose process
    table this one cannot read, so only its lease tells whether it still holds the lock."""
    argv = [sys.executable, "-c", SHIP, str(store), str(server.socket), str(key_file)]
    if elsewhere:
        argv = ["unshare", "--uts", "sh", "-c", 'hostname other-worker && exec "$0" "$@"', *argv]
    return subprocess.Popen(
        argv,
        env={**os.environ, "PW": server.root_password, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_stopped(proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    raise AssertionError("the first shipper never reached its pause between upload and manifest")


def _finish(proc: subprocess.Popen[str], server, timeout: float = 300) -> tuple[str, str]:
    """The shipper's output once it ended; one that hangs is asked for its stack (faulthandler)
    and the server's processlist is shown with it (CI saw a second shipper hang once, at load 24)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        out, err = proc.communicate()
        threads = server.query("SHOW FULL PROCESSLIST")
        raise AssertionError(
            f"shipper pid {proc.pid} still ran after {timeout:g} s:\n{err}\nserver: {threads}"
        ) from None


def _manifests_name_their_own_bytes(store: Path) -> dict[str, bool]:
    """Each complete binlog manifest -> whether every object it names holds the bytes it says."""
    verdict = {}
    for manifest in store.glob("backups/c1/db1/binlogs/*/*.json"):
        if manifest.name.endswith(".partial.json"):
            continue
        data = json.loads(manifest.read_text())
        verdict[data["name"]] = all(
            hashlib.sha256((store / seg["object"]["key"]).read_bytes()).hexdigest() == seg["object"]["sha256"]
            for seg in data["segments"]
        )
    return verdict


@pytest.fixture
def server_with_binlogs(mariadb_factory):
    server = mariadb_factory("twoship", root_password=secrets.token_urlsafe(12))
    server.execute_script(
        "CREATE DATABASE ts; CREATE TABLE ts.t (id INT PRIMARY KEY); INSERT INTO ts.t VALUES (1), (2);"
    )
    server.query("FLUSH BINARY LOGS")
    yield server
    mariadb_factory.discard(server)


def test_a_second_shipper_is_refused_while_the_first_holds_the_server(
    server_with_binlogs, gpg_keys, tmp_path
):
    key_file = tmp_path / "pub.asc"
    key_file.write_text(gpg_keys.public_key)
    store = tmp_path / "store"
    first = _start(store, server_with_binlogs, key_file, XBP_PAUSE_AT="binlog.after_object")
    try:
        _wait_stopped(first)
        second = _start(store, server_with_binlogs, key_file)
        out, err = _finish(second, server_with_binlogs)
        print(out, err)
    finally:
        first.send_signal(signal.SIGCONT)
    out1, err1 = first.communicate(timeout=300)
    print(out1, err1)
    assert first.returncode == 0, err1
    verdict = _manifests_name_their_own_bytes(store)
    assert verdict and all(verdict.values()), f"a manifest names bytes it did not upload: {verdict}"
    assert second.returncode != 0 and "another binlog shipping of c1/db1 is running" in err
    assert f"pid {first.pid}" in err


def test_a_shipper_paused_past_its_lease_registers_nothing_and_every_manifest_names_its_own_object(
    server_with_binlogs, gpg_keys, tmp_path
):
    """A is stopped between its upload and its manifest for longer than its lease: B takes the
    server over and ships; A, resumed, finds it lost its lease and writes no manifest."""
    key_file = tmp_path / "pub.asc"
    key_file.write_text(gpg_keys.public_key)
    store = tmp_path / "store"
    first = _start(
        store, server_with_binlogs, key_file, elsewhere=True, XBP_PAUSE_AT="binlog.after_object", LEASE="2"
    )
    try:
        _wait_stopped(first)
        time.sleep(5)  # past the lease (2 s) and the store clock margin (2 s)
        second = _start(store, server_with_binlogs, key_file, LEASE="2")
        out, err = _finish(second, server_with_binlogs)
        print(out, err)
        assert second.returncode == 0, err
    finally:
        first.send_signal(signal.SIGCONT)
    out1, err1 = first.communicate(timeout=300)
    print(out1, err1)
    verdict = _manifests_name_their_own_bytes(store)
    assert verdict and all(verdict.values()), f"a manifest names bytes it did not upload: {verdict}"
    assert first.returncode != 0 and "lost" in err1 and "nothing was registered" in err1
