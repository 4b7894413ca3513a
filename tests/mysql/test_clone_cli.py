"""The clone engine through the DBA CLI, as a user runs it: a fleet config with `flavour: clone`,
`backup` (always a full), `--kind incremental` refused in one line, `restore`, and a MySQL server
started on the restored datadir with the source's data. A server without the clone plugin is
refused by the CLI in one line that says what to run."""

from __future__ import annotations

import json
import secrets

import pytest
import yaml

from helpers import cli, unique_name
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums

pytestmark = pytest.mark.mysql


@pytest.fixture(scope="module")
def server(mysql_factory):
    server = mysql_factory("clone-cli", root_password=secrets.token_urlsafe(16))
    yield server
    mysql_factory.discard(server)


def _config(tmp_path, server, keys=None) -> list[str]:
    config = tmp_path / "fleet.yaml"
    encryption = (
        {"public_key_files": [str(keys / "public.asc")], "private_key_file": str(keys / "private.asc")}
        if keys
        else {"enabled": False}
    )
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "encryption": encryption,
                "clusters": [
                    {
                        "name": "c1",
                        "hosts": [
                            {
                                "name": "db1",
                                "flavour": "clone",
                                "defaults_file": str(server.write_client_defaults(tmp_path / "client.cnf")),
                            }
                        ],
                    }
                ],
            }
        )
    )
    return ["--config", str(config), "--cluster", "c1", "--host", "db1"]


def test_without_the_plugin_the_cli_says_what_to_run(server, tmp_path):
    common = _config(tmp_path, server)
    proc = cli("backup", *common)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "INSTALL PLUGIN clone SONAME 'mysql_clone.so'" in lines[0], proc.stderr
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("manifest.json"))


def test_backup_and_restore_with_the_cli(server, tmp_path):
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    db = unique_name("cli")
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20));"
        f" INSERT INTO {db}.t VALUES (1, 'one'), (2, 'two'), (3, 'three');"
    )
    keys = tmp_path / "keys"
    passphrase = {"XTRABACKUP_GPG_PASSPHRASE": "correct horse battery"}
    assert (
        cli("keygen", "--uid", "Clone <c@example.invalid>", "--out-dir", str(keys), env=passphrase).returncode
        == 0
    )
    common = _config(tmp_path, server, keys)
    first = cli("backup", *common)
    assert first.returncode == 0, first.stderr
    second = cli("backup", *common)
    assert second.returncode == 0, second.stderr
    refused = cli("backup", *common, "--kind", "incremental")
    assert refused.returncode != 0 and "full backups only" in refused.stderr
    assert [line for line in refused.stderr.splitlines() if line.startswith("error:")] == [
        "error: an incremental was requested but the clone engine takes full backups only; "
        "ask for a full (kind full or auto)"
    ], refused.stderr
    listing = json.loads(cli("list", *common, "--json").stdout)
    assert [b["kind"] for b in listing["backups"]] == ["full", "full"]
    expected = table_checksums(server, [db])
    gtid = listing["backups"][-1].get("gtid")

    target = tmp_path / "restored" / "data"
    restored = cli("restore", *common, "--target-datadir", str(target), "--create-parents", env=passphrase)
    assert restored.returncode == 0, restored.stderr
    sandbox = SandboxServer.on_datadir(target, tmp_path / "sb", server_id=991, family="mysql")
    sandbox.start()
    with sandbox:
        assert table_checksums(sandbox, [db]) == expected
        if gtid:
            assert sandbox.query("SELECT @@gtid_executed")[0][0].replace("\n", "") == gtid
