"""docs/RUNBOOK.md, "A dropped table back, replicas included", run as written on a real primary and
replica: `DROP TABLE shop.orders` replicated, the binlogs shipped; the section's first shell block
runs on the primary's host (its `~/.my.cnf` reaches the primary), its second on the replica's (its
`~/.my.cnf` reaches the replica). Afterwards both servers hold `shop.orders` as it was right before
the DROP, the replica never saw `orders_restored`, and it still replicates."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

from helpers import root_target, start_replication, wait_caught_up
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.storage.local import LocalStore

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "RUNBOOK.md"
SECTION = "### A dropped table back, replicas included"


def _blocks() -> list[str]:
    text = RUNBOOK.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start) if "\n## " in text[start:] else len(text)
    following = text.find("\n### ", start + len(SECTION))
    section = text[start : min(end, following) if following > 0 else end]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def _home(root: Path, name: str, server: SandboxServer) -> dict[str, str]:
    """A shell environment whose HOME holds a DBA's ~/.my.cnf for `server` (root over its socket)."""
    home = root / name
    home.mkdir()
    cnf = home / ".my.cnf"
    cnf.write_text(f"[client]\nuser=root\npassword={server.root_password}\nsocket={server.socket}\n")
    cnf.chmod(0o600)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {"HOME": str(home), "PATH": path, "LC_ALL": "C.UTF-8"}


def _checksum(server: SandboxServer, table: str) -> int | None:
    return server.query(f"CHECKSUM TABLE {table}")[0][1]


def test_the_runbook_brings_a_dropped_table_back_on_the_primary_and_its_replicas(mariadb_factory, tmp_path):
    blocks = _blocks()
    assert len(blocks) == 2, "the section's primary block and replica block"
    primary = mariadb_factory("rb-primary", root_password=secrets.token_urlsafe(12))
    replica = mariadb_factory("rb-replica", root_password=secrets.token_urlsafe(12))
    start_replication(primary, replica)
    primary.execute_script(
        "CREATE DATABASE shop; USE shop;"
        "CREATE TABLE shop.orders (id INT PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(10,2), note VARCHAR(40),"
        " KEY customer (customer)) ENGINE=InnoDB;"
        "INSERT INTO shop.orders SELECT seq, seq % 37, seq * 1.25, CONCAT('order ', seq) FROM seq_1_to_2000;"
        "CREATE TABLE shop.other (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO shop.other VALUES (1), (2);"
    )
    store = tmp_path / "store"
    catalog = Catalog(LocalStore(store), "backups", "main", "db1")
    run_backup(BackupRequest(catalog=catalog, target=root_target(primary), allow_unencrypted=True))
    primary.query(
        "INSERT INTO shop.orders SELECT seq, seq % 37, seq, 'after the backup' FROM seq_2001_to_2300",
        database="shop",
    )
    primary.query("UPDATE shop.orders SET note = 'changed' WHERE id % 10 = 0")
    wait_caught_up(primary, replica)
    before = _checksum(primary, "shop.orders")
    primary.query("DROP TABLE shop.orders")
    primary.query("INSERT INTO shop.other VALUES (3)")  # life goes on after the accident
    ship_binlogs(
        ShipRequest(catalog=catalog, target=root_target(primary), allow_unencrypted=True, flush=True)
    )
    wait_caught_up(primary, replica)
    assert replica.query("SHOW TABLES FROM shop LIKE 'orders'") == [], "the replica applied the DROP"

    work = tmp_path / "work"
    work.mkdir()
    (work / "fleet.yaml").write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(store)},
                "encryption": {"enabled": False},
                "clusters": [
                    {
                        "name": "main",
                        "hosts": [
                            {"name": "db1", "socket": str(primary.socket), "password_env": "DB1_PASSWORD"}
                        ],
                    }
                ],
            }
        )
    )
    env = _home(tmp_path, "home-db1", primary) | {"DB1_PASSWORD": primary.root_password or ""}
    for name, block, where in (
        ("primary", blocks[0], env),
        ("replica", blocks[1], _home(tmp_path, "home-db2", replica)),
    ):
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block], cwd=work, env=where, capture_output=True, text=True
        )
        print(f"--- {name} block:\n{proc.stdout}{proc.stderr}")
        assert proc.returncode == 0, proc.stderr
        if name == "primary":
            wait_caught_up(primary, replica)
    assert _checksum(primary, "shop.orders") == before
    assert _checksum(replica, "shop.orders") == before
    assert primary.query("SHOW TABLES FROM shop LIKE 'orders_restored'") == []
    status = replica.query("SELECT @@gtid_slave_pos")[0][0]
    assert status == primary.query("SELECT @@gtid_binlog_pos")[0][0]
    running = {r[0]: r[1] for r in replica.query("SHOW STATUS LIKE 'Slave_running'")}
    assert running == {"Slave_running": "ON"}
