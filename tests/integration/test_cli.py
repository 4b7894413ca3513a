"""The DBA CLI works with Airflow down: backup, list, restore, keygen, and clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from helpers import add_orders, seed_database, unique_name
from xtrabackup_provider.core.sandbox import SandboxServer, table_checksums

# Importing the CLI must not import Airflow: it has to work on a host where Airflow is broken.
RUN = (
    "import sys, runpy; sys.argv = ['xtrabackup-provider'] + sys.argv[1:]; "
    "from xtrabackup_provider import cli; rc = cli.main(sys.argv[1:]); "
    "assert 'airflow' not in sys.modules, 'the CLI imported airflow'; sys.exit(rc)"
)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    return subprocess.run(
        [sys.executable, "-c", RUN, *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=600,
    )


def test_backup_list_restore_round_trip_without_airflow(mariadb, tmp_path):
    db = unique_name("cli")
    seed_database(mariadb, db, rows=1000)
    keys = tmp_path / "keys"
    passphrase = {"XTRABACKUP_GPG_PASSPHRASE": "correct horse battery"}
    assert (
        cli(
            "keygen", "--uid", "CLI test <cli@example.invalid>", "--out-dir", str(keys), env=passphrase
        ).returncode
        == 0
    )
    assert oct((keys / "private.asc").stat().st_mode & 0o777) == "0o600"
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "encryption": {
                    "public_key_files": [str(keys / "public.asc")],
                    "private_key_file": str(keys / "private.asc"),
                },
                "policy": {"max_incremental_ratio": 10.0},
                "clusters": [
                    {
                        "name": "c1",
                        "hosts": [
                            {
                                "name": "db1",
                                "defaults_file": str(mariadb.write_client_defaults(tmp_path / "client.cnf")),
                            }
                        ],
                    }
                ],
            }
        )
    )
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    first = cli("backup", *common)
    assert first.returncode == 0, first.stderr
    add_orders(mariadb, db, 400)
    second = cli("backup", *common)
    assert second.returncode == 0, second.stderr
    assert "\tincremental\t" in second.stdout
    listing = json.loads(cli("list", *common, "--json").stdout)
    assert [b["kind"] for b in listing["backups"]] == ["full", "incremental"]
    expected = table_checksums(mariadb, [db])

    target = tmp_path / "restored" / "data"
    restored = cli("restore", *common, "--target-datadir", str(target), env=passphrase)
    assert restored.returncode == 0, restored.stderr
    with SandboxServer.on_datadir(target, tmp_path / "sb", server_id=990) as server:
        server.start()
        assert table_checksums(server, [db]) == expected

    again = cli("restore", *common, "--target-datadir", str(target), env=passphrase)
    assert again.returncode == 2 and "not an empty directory" in again.stderr


def test_bad_config_and_unknown_host_are_clear_errors(tmp_path):
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump({"storage": {"bucket": "b", "local_path": "/x"}, "clusters": []}))
    proc = cli("list", "--config", str(config), "--cluster", "c", "--host", "h")
    assert proc.returncode == 2
    assert str(config) in proc.stderr and "storage" in proc.stderr and "clusters" in proc.stderr
    good = tmp_path / "good.yaml"
    good.write_text(
        yaml.safe_dump(
            {"storage": {"local_path": str(tmp_path)}, "clusters": [{"name": "c", "hosts": [{"name": "h"}]}]}
        )
    )
    proc = cli("list", "--config", str(good), "--cluster", "c", "--host", "nope")
    assert proc.returncode == 2 and "cluster 'c' has no host 'nope'" in proc.stderr
    proc = cli(
        "restore",
        "--local-path",
        str(tmp_path / "empty"),
        "--cluster",
        "c",
        "--host",
        "h",
        "--target-datadir",
        str(tmp_path / "t"),
    )
    assert proc.returncode == 2 and "no backups at" in proc.stderr
    assert not Path(tmp_path / "t").exists()
