"""The CLI's `provision-replica` and deep `restore-test` keep the replication and admin passwords
out of every argv, log line, the new replica's general log and the environment of the server it
starts; the deep restore test's sandbox listens on no TCP port while it replicates."""

from __future__ import annotations

import logging
import secrets
import uuid
from pathlib import Path

import yaml
from faultkit import ProcScanner, listening_addresses

from helpers import root_target, seed_database, unique_name
from replica_helpers import NewHost, WriteLoad, new_host_dir
from xtrabackup_provider.cli.main import main as cli_main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.storage.local import LocalStore


def _fleet(tmp_path: Path, source, host: NewHost) -> Path:
    config = {
        "storage": {"local_path": str(tmp_path / "store")},
        "encryption": {"enabled": False},
        "policy": {"heartbeat": False},
        "clusters": [
            {
                "name": "c1",
                "restore_workdir": "/tmp",
                "replication": {"source": "db1", "user": "repl", "poll_seconds": 0.2, "max_lag_seconds": 2},
                "hosts": [
                    {
                        "name": "db1",
                        "host": "127.0.0.1",
                        "port": source.port,
                        "user": "root",
                        "password_env": "XBP_TEST_SOURCE_PASSWORD",
                    },
                    {
                        "name": "db3",
                        "socket": str(host.socket),
                        "host": "127.0.0.1",
                        "port": host.port,
                        "user": "root",
                        "password_env": "XBP_TEST_SOURCE_PASSWORD",
                        "datadir": str(host.datadir),
                        "provision": {"start_command": host.start_command},
                    },
                ],
            }
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_provision_and_deep_restore_test_keep_passwords_out_and_listen_on_no_tcp_port(
    mariadb_factory, tmp_path, monkeypatch, capsys, caplog
):
    source = mariadb_factory("fault-prov", root_password=secrets.token_urlsafe(16))
    repl = f"r{uuid.uuid4().hex}"
    source.execute_script(
        f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{repl}'; GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
        "GRANT SELECT, PROCESS, SUPER, REPLICATION CLIENT ON *.* TO root@'127.0.0.1';"
    )
    db = unique_name("fp")
    seed_database(source, db, rows=1000)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    run_backup(BackupRequest(catalog=catalog, target=root_target(source), allow_unencrypted=True))
    WriteLoad(source, db).burst(300)
    host = NewHost(new_host_dir(), server_id=7501)
    with open(host.cnf, "a") as cnf:  # everything the new server is sent, in its general log
        cnf.write(f"general-log=1\ngeneral-log-file={host.basedir / 'general.log'}\n")
    config = _fleet(tmp_path, source, host)
    monkeypatch.setenv("XTRABACKUP_REPLICATION_PASSWORD", repl)
    monkeypatch.setenv("XBP_TEST_SOURCE_PASSWORD", source.root_password)
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    passwords = {"replication password": repl, "root password": source.root_password}
    sandboxes: dict[int, list[str]] = {}

    def watch(pid: int, argv: list[str]) -> None:
        if argv and argv[0].endswith("mariadbd") and "--skip-grant-tables" in argv:
            sandboxes.setdefault(pid, []).extend(listening_addresses(pid))

    caplog.set_level(logging.DEBUG)
    try:
        # The harness's own environment holds both passwords; the scan looks at every argv.
        with ProcScanner(passwords, watch=watch, environ=False) as scan:
            common = ["--config", str(config), "--cluster", "c1"]
            rc_provision = cli_main(["provision-replica", *common, "--host", "db3"])
            provisioned = capsys.readouterr()
            rc_test = cli_main(["restore-test", *common, "--host", "db1", "--level", "deep"])
            tested = capsys.readouterr()
        assert rc_provision == 0, provisioned.err
        assert "db3: built from" in provisioned.out and "table(s) equal" in provisioned.out
        assert rc_test == 0, tested.out + tested.err
        assert "replica_checksum PASS" in tested.out and "passed" in tested.out.splitlines()[-1]
        assert scan.samples > 50 and not scan.errors and scan.sightings == [], scan.sightings
        assert sandboxes, "the deep level's sandbox was seen"
        assert all(not found for found in sandboxes.values()), f"a sandbox listened on TCP: {sandboxes}"
        server_pid = int(host.pid_file.read_text())
        environ = Path(f"/proc/{server_pid}/environ").read_bytes()
        general = (host.basedir / "general.log").read_text(errors="replace")
        assert "CHANGE MASTER" not in general, "the session that sends the password is not logged"
        for label, secret in passwords.items():
            for where, text in (
                ("the log", caplog.text),
                ("stdout/stderr", provisioned.out + provisioned.err + tested.out + tested.err),
                ("the new replica's general log", general),
            ):
                assert secret not in text, f"{label} in {where}"
            assert secret.encode() not in environ, f"{label} in the new server's environment"
    finally:
        host.destroy()
        mariadb_factory.discard(source)
