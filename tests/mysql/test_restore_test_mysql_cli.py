"""`xtrabackup-provider restore-test` on a clone host, as a user runs it: a fleet config with
`flavour: clone`, a backup, binlogs shipped after it, and `restore-test --level full` passing with
the copy rolled forward to the source's GTID set. On main it failed at `restore` ("cannot open a
MySQL datadir")."""

from __future__ import annotations

import json
import secrets
import shutil

import pytest
import yaml

from helpers import cli, unique_name

pytestmark = pytest.mark.mysql


@pytest.fixture(scope="module")
def server(mysql_factory):
    server = mysql_factory("rt-cli", root_password=secrets.token_urlsafe(16))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    yield server
    mysql_factory.discard(server)


def test_restore_test_level_full_of_a_clone_host_through_the_cli(server, tmp_path):
    db = unique_name("rtcli")
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20));"
        f" INSERT INTO {db}.t VALUES (1, 'one'), (2, 'two'), (3, 'three');"
    )
    config = tmp_path / "fleet.yaml"
    host = {
        "name": "db1",
        "flavour": "clone",
        "binlog_binary": shutil.which("mysqlbinlog"),
        "defaults_file": str(server.write_client_defaults(tmp_path / "client.cnf")),
    }
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "encryption": {"enabled": False},
                "clusters": [{"name": "c1", "restore_workdir": str(tmp_path / "rt"), "hosts": [host]}],
            }
        )
    )
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    backup = cli("backup", *common)
    assert backup.returncode == 0, backup.stderr
    server.execute_script(
        f"INSERT INTO {db}.t VALUES (4, 'four'); FLUSH BINARY LOGS; DELETE FROM {db}.t WHERE id = 2;"
    )
    shipped = cli("binlogs", "ship", *common, "--flush")
    assert shipped.returncode == 0, shipped.stderr
    executed = "".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split())

    proc = cli("restore-test", *common, "--level", "full", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdict"] == "pass"
    checks = {r["name"]: r for r in report["results"]}
    assert checks["roll_forward"]["status"] == "pass" and checks["roll_forward"]["detail"]["gtid"] == executed
    assert checks["check_table"]["status"] == "pass" and checks["position"]["status"] == "pass"
