"""Nothing around the tools steers them (issue 27, items 1, 2 and 4).

A database host where the user running the tools keeps an ordinary `~/.my.cnf` (and
`$MYSQL_HOME/my.cnf`) whose groups ([client], [mysqld], [mariadb-backup], [mariabackup],
[xtrabackup], [mysqlbinlog], [mariadb-binlog], [mysql], [mariadb-client]) point at another
MariaDB on the same machine: the decoy, which holds a schema of the same name with other rows.
Every verb that starts a tool runs here as the user runs it (the CLI, in a process whose HOME and
MYSQL_HOME are that directory), once with a password for the decoy in the file and once without.
Pass: the decoy's general log shows no connection attempt, and every result is db1's (rows,
server_uuid, server_id, GTIDs). Once more through Airflow: `airflow dags test` of the shipped
backup DAG in a process whose HOME is hostile.

Before the fix (kept in the report): the full, incremental and K-part backups connected
mariabackup to the decoy and registered its datadir as db1's; `binlogs ship` read the decoy's
binlog; `restore --replay pipe` sent db1's statements to the decoy.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import cli, commit_known, execute_unlogged
from replica_helpers import NewHost, new_host_dir
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.timeline import timelines
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.common.values import parse_gtid_pos
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget, server_facts
from xtrabackup_provider.core.restore.standby import update_standby
from xtrabackup_provider.core.storage.local import LocalStore

DB = "iso"  # the same schema name on db1 and on the decoy: a copy of the wrong server looks plausible
DECOY_MARK = "decoy_marker"  # a schema only the decoy has
VARIANTS = ("password", "no-password")
TOOL_GROUPS = (
    "client",
    "client-server",
    "client-mariadb",
    "mysqld",
    "mariadb",
    "server",
    "mariadb-backup",
    "mariabackup",
    "xtrabackup",
    "mysqlbinlog",
    "mariadb-binlog",
    "mysql",
    "mariadb-client",
    "mysqladmin",
    "mariadb-admin",
)


@dataclass
class World:
    """db1 (the host backed up), its decoy, the store, the keys and the fleet config."""

    db1: SandboxServer
    decoy: SandboxServer
    root: Path
    store: Path
    config: Path
    parts_config: Path  # the same fleet with policy.max_parts 2
    env: dict[str, str]  # what the CLI needs besides HOME (passphrase, passwords)
    db1_uuid: str
    db1_id: int
    private_key: Path
    general_log: Path
    catalog: Catalog = field(init=False)

    def __post_init__(self) -> None:
        self.catalog = Catalog(LocalStore(str(self.store)), "backups", "c1", "db1")

    def decoy_log_size(self) -> int:
        return self.general_log.stat().st_size

    def decoy_sessions_since(self, offset: int) -> list[str]:
        """Connection attempts the decoy logged since `offset` (denied ones included)."""
        with open(self.general_log, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
        return [line.strip() for line in text.splitlines() if "\tConnect\t" in line or " Connect\t" in line]

    def ids(self) -> set[int]:
        return {r[0] for r in self.db1.query(f"SELECT id FROM `{DB}`.t")}


@dataclass
class Hostile:
    variant: str
    home: Path
    world: World
    work: Path  # this variant's scratch directory

    @property
    def env(self) -> dict[str, str]:
        return {**self.world.env, "HOME": str(self.home), "MYSQL_HOME": str(self.home)}

    def run(
        self, *args: str, config: Path | None = None, cluster: str = "c1"
    ) -> subprocess.CompletedProcess[str]:
        """`xtrabackup-provider ARGS --config ... --cluster c1` with the hostile HOME; the decoy
        must not have seen a connection attempt meanwhile."""
        mark = self.world.decoy_log_size()
        proc = cli(*args, "--config", str(config or self.world.config), "--cluster", cluster, env=self.env)
        seen = self.world.decoy_sessions_since(mark)
        assert seen == [], f"{args[0]} reached the decoy: {seen[:4]}\n{proc.stderr[-3000:]}"
        return proc


def _hostile_cnf(decoy: SandboxServer, password: str | None) -> str:
    lines = []
    for group in TOOL_GROUPS:
        lines += [f"[{group}]", f"socket={decoy.socket}", f"port={decoy.port}", "user=root"]
        if password:
            lines.append(f"password={password}")
        if group in ("mysqld", "mariadb", "server", "mariadb-backup", "mariabackup", "xtrabackup"):
            lines.append(f"datadir={decoy.datadir}")
        lines.append("")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def world(mariadb_factory, gpg_keys, tmp_path_factory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("iso")
    db1 = mariadb_factory("iso-db1", root_password=secrets.token_urlsafe(16))
    decoy = mariadb_factory("iso-decoy", root_password=secrets.token_urlsafe(16))
    repl_password = secrets.token_urlsafe(16)
    db1.execute_script(
        f"CREATE DATABASE {DB}; USE {DB}; CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB;"
        "INSERT INTO t (v) SELECT 'db1' FROM seq_1_to_200;"
        f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{repl_password}';"
        "GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
    )
    decoy.execute_script(
        f"CREATE DATABASE {DB}; USE {DB}; CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB;"
        "INSERT INTO t (id, v) SELECT 5000 + seq, 'decoy' FROM seq_1_to_50;"
        f"CREATE DATABASE {DECOY_MARK}; CREATE TABLE {DECOY_MARK}.m (id INT PRIMARY KEY) ENGINE=InnoDB;"
        f"INSERT INTO {DECOY_MARK}.m VALUES (1);"
    )
    general_log = decoy.basedir / "general.log"
    decoy.query("SET GLOBAL general_log_file = %s", (str(general_log),))
    decoy.query("SET GLOBAL general_log = 1")
    public, private = root / "public.asc", root / "private.asc"
    public.write_text(gpg_keys.public_key)
    private.write_text(gpg_keys.private_key)
    private.chmod(0o600)
    defaults = db1.write_client_defaults(root / "db1-client.cnf")
    store = root / "store"
    config, parts_config = root / "fleet.yaml", root / "fleet-parts.yaml"
    fleet: dict[str, Any] = {
        "storage": {"local_path": str(store)},
        "encryption": {"public_key_files": [str(public)], "private_key_file": str(private)},
        "policy": {"max_incremental_ratio": 100.0, "part_min_gib": 0},
        "clusters": [
            {
                "name": "c1",
                "restore_workdir": str(root / "rt"),
                "replication": {"source": "db1", "user": "repl", "poll_seconds": 0.2, "max_lag_seconds": 2},
                "checksum": {"source": "db1", "databases": [DB]},
                "hosts": [
                    # The user's own client option file (with host/port for the replicas to reach it).
                    {"name": "db1", "defaults_file": str(defaults), "host": "127.0.0.1", "port": db1.port},
                ],
            }
        ],
    }
    config.write_text(yaml.safe_dump(fleet))
    fleet["policy"]["max_parts"] = 2
    parts_config.write_text(yaml.safe_dump(fleet))
    facts = server_facts(MySQLTarget(socket=str(db1.socket), user="root", password=db1.root_password))
    env = {
        "XTRABACKUP_GPG_PASSPHRASE": gpg_keys.passphrase,
        "XTRABACKUP_REPLICATION_PASSWORD": repl_password,
        "XBP_ISO_ROOT_PASSWORD": db1.root_password or "",
    }
    yield World(
        db1,
        decoy,
        root,
        store,
        config,
        parts_config,
        env,
        facts.server_uuid,
        facts.server_id,
        private,
        general_log,
    )


@pytest.fixture(scope="module", params=VARIANTS)
def hostile(request, world, tmp_path_factory) -> Hostile:
    work = Path(tmp_path_factory.mktemp(f"iso-{request.param}"))
    home = work / "home"
    home.mkdir()
    text = _hostile_cnf(world.decoy, world.decoy.root_password if request.param == "password" else None)
    (home / ".my.cnf").write_text(text)
    (home / "my.cnf").write_text(text)  # $MYSQL_HOME/my.cnf
    (home / ".my.cnf").chmod(0o600)
    return Hostile(request.param, home, world, work)


def _newest(world: World) -> Manifest:
    return world.catalog.get(world.catalog.backup_ids()[-1])


def _assert_db1s(world: World, manifest: Manifest) -> None:
    assert (manifest.server_uuid, manifest.server_id) == (world.db1_uuid, world.db1_id)
    gtid_servers = {int(part.split("-")[1]) for part in (manifest.gtid or "").split(",") if part}
    assert gtid_servers <= {world.db1_id}, manifest.gtid
    checked = manifest.extra["server_identity"]
    assert checked["server_uuid"] == world.db1_uuid and checked["server_id"] == world.db1_id
    assert Path(checked["datadir"]).resolve() == world.db1.datadir.resolve()
    assert checked["port"] == world.db1.port and checked["version"]


def _restored_rows(datadir: Path, basedir: Path) -> tuple[set[int], bool]:
    """The ids in iso.t of a restored datadir, and whether it holds the decoy's marker schema."""
    with SandboxServer.on_datadir(datadir, basedir, server_id=931) as restored:
        restored.start()
        ids = {r[0] for r in restored.query(f"SELECT id FROM `{DB}`.t")}
        marked = bool(restored.query(f"SHOW DATABASES LIKE '{DECOY_MARK}'"))
    return ids, marked


# -- backups ---------------------------------------------------------------------------------------------


def test_backups_full_incremental_and_k_parts_copy_db1(hostile):
    world = hostile.world
    full = hostile.run("backup", "--host", "db1", "--kind", "full")
    assert full.returncode == 0, full.stderr
    _assert_db1s(world, _newest(world))
    world.db1.query("INSERT INTO t (v) SELECT 'inc' FROM seq_1_to_20", database=DB)
    inc = hostile.run("backup", "--host", "db1", "--kind", "incremental")
    assert inc.returncode == 0, inc.stderr
    assert _newest(world).kind == "incremental"
    _assert_db1s(world, _newest(world))
    world.db1.query("INSERT INTO t (v) SELECT 'parts' FROM seq_1_to_20", database=DB)
    parts = hostile.run("backup", "--host", "db1", "--kind", "full", config=world.parts_config)
    assert parts.returncode == 0, parts.stderr
    newest = _newest(world)
    assert newest.format_version == 2 and len(newest.objects) == 3
    _assert_db1s(world, newest)
    # the task log names what was checked
    assert f"server {world.db1_uuid}" in parts.stderr and f"server_id {world.db1_id}" in parts.stderr
    # what a restore of it holds is db1's
    target = hostile.work / "parts" / "data"
    restored = hostile.run("restore", "--host", "db1", "--target-datadir", str(target), "--create-parents")
    assert restored.returncode == 0, restored.stderr
    ids, marked = _restored_rows(target, hostile.work / "sb-parts")
    assert ids == world.ids() and not marked


# -- binlogs ---------------------------------------------------------------------------------------------


def test_binlogs_ship_batch_and_continuous_read_db1s_binlogs(hostile):
    world = hostile.world
    point = commit_known(world.db1, DB, f"before ship {hostile.variant}")
    batch = hostile.run("binlogs", "ship", "--host", "db1", "--flush")
    assert batch.returncode == 0, batch.stderr
    assert BinlogCatalog(world.catalog, world.db1_uuid).index().covers_gtid(parse_gtid_pos(point.gtid))
    world.db1.query(f"INSERT INTO {DB}.t (v) VALUES ('during continuous')")
    follow = hostile.run("binlogs", "ship", "--host", "db1", "--continuous", "3", "--progress-interval", "1")
    assert follow.returncode == 0, follow.stderr
    shipped = BinlogCatalog(world.catalog, world.db1_uuid).index().shipped()
    assert shipped and all(m.server_uuid == world.db1_uuid and m.server_id == world.db1_id for m in shipped)
    for m in shipped:
        for gtid in (m.gtid_first, m.gtid_last):
            assert all(int(p.split("-")[1]) == world.db1_id for p in (gtid or "").split(",") if p), m
    # nothing was shipped under another server's name
    servers = {p.name for p in (world.store / "backups" / "c1" / "db1" / "binlogs").iterdir()}
    assert servers == {world.db1_uuid}, servers


# -- restores --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def known_point(hostile):
    """A transaction on db1 shipped after the backups: the PITR target of the restores below."""
    world = hostile.world
    point = commit_known(world.db1, DB, f"pitr {hostile.variant}")
    world.db1.query(f"INSERT INTO {DB}.t (v) VALUES ('after the point')")
    shipped = hostile.run("binlogs", "ship", "--host", "db1", "--flush")
    assert shipped.returncode == 0, shipped.stderr
    return point


@pytest.mark.parametrize("replay", ["pipe", "applier"])
def test_restore_to_a_gtid_with_each_replay_holds_db1s_rows(hostile, known_point, replay):
    target = hostile.work / f"pitr-{replay}" / "data"
    proc = hostile.run(
        "restore",
        *("--host", "db1", "--target-datadir", str(target), "--create-parents"),
        *("--to-gtid", known_point.gtid, "--replay", replay),
    )
    assert proc.returncode == 0, proc.stderr
    ids, marked = _restored_rows(target, hostile.work / f"sb-{replay}")
    assert ids == set(known_point.rows) and not marked


def test_restore_table_into_db1(hostile, known_point):
    world = hostile.world
    new = f"t_{hostile.variant.replace('-', '_')}"
    proc = hostile.run(
        "restore-table",
        *("--host", "db1", "--table", f"{DB}.t", "--as", f"{DB}.{new}"),
        *("--to-gtid", known_point.gtid, "--scratch-dir", str(hostile.work)),
    )
    assert proc.returncode == 0, proc.stderr
    assert {r[0] for r in world.db1.query(f"SELECT id FROM {DB}.{new}")} == set(known_point.rows)
    assert not world.decoy.query(f"SHOW TABLES IN {DB} LIKE '{new}'")
    # Unlogged like its creation (core/pitr/table.py): the replicas built later never had it.
    execute_unlogged(world.db1, f"DROP TABLE {DB}.{new}")


@pytest.mark.parametrize("level", ["quick", "full", "deep"])
def test_restore_test_at_every_level_passes_on_db1s_backup(hostile, known_point, level):
    proc = hostile.run("restore-test", "--host", "db1", "--level", level, "--no-report")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout.splitlines()[-1], proc.stdout


# -- replicas, checksum, promote, standby ----------------------------------------------------------------


@pytest.fixture(scope="module")
def replica_host(hostile) -> Iterator[NewHost]:
    host = NewHost(new_host_dir(), server_id=7700 + VARIANTS.index(hostile.variant))
    try:
        yield host
    finally:
        host.destroy()


def _with_replica(hostile: Hostile, host: NewHost) -> Path:
    """The fleet config plus host db3, built as a replica of db1 and gated by the checksum."""
    fleet = yaml.safe_load(hostile.world.config.read_text())
    fleet["clusters"][0]["hosts"].append(
        {
            "name": "db3",
            "socket": str(host.socket),
            "host": "127.0.0.1",
            "port": host.port,
            "user": "root",
            "password_env": "XBP_ISO_ROOT_PASSWORD",
            "datadir": str(host.datadir),
            "provision": {"start_command": host.start_command},
            "checksum_gate": {"dsn": f"h=127.0.0.1,P={host.port}"},
        }
    )
    path = hostile.work / "fleet-db3.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def test_provision_replica_and_checksum_reach_only_db1_and_the_new_replica(
    hostile, known_point, replica_host
):
    world = hostile.world
    config = _with_replica(hostile, replica_host)
    built = hostile.run("provision-replica", "--host", "db3", config=config)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "db3: built from" in built.stdout
    replica = replica_host.server(world.db1.root_password)
    assert {r[0] for r in replica.query(f"SELECT id FROM {DB}.t")} == world.ids()
    checked = hostile.run("checksum", "--host", "db3", config=config)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{DB}.t" in checked.stdout and "gate: pass" in checked.stdout


def test_promote_a_restored_server(hostile, known_point):
    """The applier PITR's datadir, started as a server, promoted: the new timeline forks from db1."""
    world = hostile.world
    datadir = hostile.work / "pitr-applier" / "data"
    assert datadir.is_dir(), "runs after test_restore_to_a_gtid_with_each_replay_holds_db1s_rows"
    before = {t.server_uuid for t in timelines(world.catalog)}
    with SandboxServer.on_datadir(
        datadir, hostile.work / "sb-promote", server_id=8800 + VARIANTS.index(hostile.variant),
        skip_grant_tables=False, root_password=world.db1.root_password,
    ) as server:  # fmt: skip
        server.start()
        creds = server.write_client_defaults(hostile.work / "promoted.cnf")
        proc = hostile.run("promote", "--host", "db1", "--defaults-file", str(creds))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        new = [t for t in timelines(world.catalog) if t.server_uuid not in before]
        assert len(new) == 1 and new[0].parent_server_uuid == world.db1_uuid, new
        assert new[0].server_id == int(server.query("SELECT @@server_id")[0][0])
        assert {r[0] for r in server.query(f"SELECT id FROM {DB}.t")} == set(known_point.rows)


def test_standby_update_and_restore_from_it(hostile, monkeypatch, gpg_keys):
    world = hostile.world
    standby = hostile.work / "standby"
    for name, value in hostile.env.items():  # this process runs the update, as the operator does
        monkeypatch.setenv(name, value)
    mark = world.decoy_log_size()
    report = update_standby(
        world.catalog, standby, private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase
    )
    assert world.decoy_sessions_since(mark) == []
    assert report.newest == world.catalog.backup_ids()[-1]
    target = hostile.work / "from-standby" / "data"
    proc = hostile.run(
        "restore", "--host", "db1", "--target-datadir", str(target), "--create-parents", "--from-standby",
        str(standby),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ids, marked = _restored_rows(target, hostile.work / "sb-standby")
    manifest = world.catalog.get(report.newest)
    assert not marked and ids <= world.ids() and ids
    assert manifest.server_uuid == world.db1_uuid


# -- an Airflow worker -----------------------------------------------------------------------------------


def test_the_backup_dag_in_an_airflow_process_with_a_hostile_home(world, airflow_home, gpg_keys, tmp_path):
    """`airflow dags test` of the shipped backup DAG: the operator runs in an Airflow process whose
    HOME holds the file with the decoy's password."""
    hostile = Hostile("password", tmp_path / "home", world, tmp_path)
    hostile.home.mkdir()
    (hostile.home / ".my.cnf").write_text(_hostile_cnf(world.decoy, world.decoy.root_password))
    (hostile.home / "my.cnf").write_text(_hostile_cnf(world.decoy, world.decoy.root_password))
    fleet = {
        "storage": {"local_path": str(world.store), "prefix": "airflow"},
        "encryption": {"gpg_conn_id": "iso_gpg"},
        "policy": {"heartbeat": False},
        "clusters": [
            {"name": "isoaf", "schedule": None, "hosts": [{"name": "db1", "mysql_conn_id": "iso_mysql"}]},
        ],
    }
    config = tmp_path / "airflow-fleet.yaml"
    config.write_text(yaml.safe_dump(fleet))
    mysql = {
        "conn_type": "mysql",
        "host": "localhost",
        "login": "root",
        "password": world.db1.root_password,
        "extra": {"unix_socket": str(world.db1.socket)},
    }
    gpg = {"conn_type": "gpgkeys", "extra": {"public_keys": [gpg_keys.public_key]}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("XTRABACKUP")}
    env |= {
        "HOME": str(hostile.home),
        "MYSQL_HOME": str(hostile.home),
        "AIRFLOW_HOME": str(airflow_home),
        "XTRABACKUP_FLEET_CONFIG": str(config),
        "AIRFLOW_CONN_ISO_MYSQL": json.dumps(mysql),
        "AIRFLOW_CONN_ISO_GPG": json.dumps(gpg),
    }
    airflow = Path(sys.executable).with_name("airflow")
    argv = [str(airflow)] if airflow.exists() else [sys.executable, "-m", "airflow"]
    mark = world.decoy_log_size()
    proc = subprocess.run(
        [*argv, "dags", "test", "mysql_backup_isoaf", "--conf", json.dumps({"kind": "full"})],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert world.decoy_sessions_since(mark) == []
    catalog = Catalog(LocalStore(str(world.store)), "airflow", "isoaf", "db1")
    ids = catalog.backup_ids()
    assert proc.returncode == 0 and len(ids) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    _assert_db1s(world, catalog.get(ids[0]))
    target = tmp_path / "airflow-restore" / "data"
    restored = hostile.run(
        "restore", "--host", "db1", "--target-datadir", str(target), "--create-parents",
        "--private-key-file", str(world.private_key), config=config, cluster="isoaf",
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    ids_restored, marked = _restored_rows(target, tmp_path / "sb-airflow")
    assert not marked and ids_restored <= world.ids() and ids_restored


# -- a server that is not the host's is refused before a byte is read ---------------------------------------


def _pointed_at_decoy(world: World, tmp_path: Path, **host: Any) -> Path:
    """The fleet config with host db1's connection going to the decoy (a moved socket, a wrong file)."""
    fleet = yaml.safe_load(world.config.read_text())
    fleet["storage"]["local_path"] = str(tmp_path / "store")
    fleet["clusters"][0]["hosts"] = [
        {
            "name": "db1",
            "socket": str(world.decoy.socket),
            "user": "root",
            "password_env": "XBP_ISO_DECOY_PASSWORD",
            **host,
        }
    ]
    path = tmp_path / "fleet-decoy.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def _objects(store: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file()) if store.exists() else []
    )


def test_a_backup_that_reaches_another_server_is_refused_before_a_byte_is_streamed(world, tmp_path):
    env = {**world.env, "XBP_ISO_DECOY_PASSWORD": world.decoy.root_password or ""}
    store = tmp_path / "store"
    # The host's config names db1's datadir; the server reached runs on the decoy's.
    config = _pointed_at_decoy(world, tmp_path, datadir=str(world.db1.datadir))
    proc = cli("backup", "--config", str(config), "--cluster", "c1", "--host", "db1", env=env)
    assert proc.returncode == 2, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert f"config names datadir {world.db1.datadir}" in line and str(world.decoy.datadir) in line, line
    assert "nothing was backed up" in line and _objects(store) == []
    # db1 backed up into this store first: the decoy is not a server the host's catalog knows.
    db1_config = tmp_path / "fleet-db1.yaml"
    fleet = yaml.safe_load(world.config.read_text())
    fleet["storage"]["local_path"] = str(store)
    db1_config.write_text(yaml.safe_dump(fleet))
    first = cli("backup", "--config", str(db1_config), "--cluster", "c1", "--host", "db1", env=env)
    assert first.returncode == 0, first.stderr
    before = _objects(store)
    config = _pointed_at_decoy(world, tmp_path)
    proc = cli("backup", "--config", str(config), "--cluster", "c1", "--host", "db1", env=env)
    assert proc.returncode == 2, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    decoy_uuid = server_facts(MySQLTarget(socket=str(world.decoy.socket), password=world.decoy.root_password))
    assert decoy_uuid.server_uuid in line and world.db1_uuid in line and "--new-server" in line, line
    assert _objects(store) == before
    # The DBA says the host's server really is new: backed up, and the manifest says so.
    proc = cli("backup", "--config", str(config), "--cluster", "c1", "--host", "db1", "--new-server", env=env)
    assert proc.returncode == 0, proc.stderr
    catalog = Catalog(LocalStore(str(store)), "backups", "c1", "db1")
    newest = catalog.get(catalog.backup_ids()[-1])
    assert newest.server_uuid == decoy_uuid.server_uuid and newest.kind == "full"
    assert "new server" in newest.extra["server_identity"]["basis"]


def test_shipping_from_a_server_the_host_does_not_know_is_refused(world, tmp_path):
    env = {**world.env, "XBP_ISO_DECOY_PASSWORD": world.decoy.root_password or ""}
    store = tmp_path / "store"
    fleet = yaml.safe_load(world.config.read_text())
    fleet["storage"]["local_path"] = str(store)
    (tmp_path / "fleet-db1.yaml").write_text(yaml.safe_dump(fleet))
    first = cli("binlogs", "ship", "--config", str(tmp_path / "fleet-db1.yaml"), "--cluster", "c1", "--host", "db1",
                "--flush", env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr
    config = _pointed_at_decoy(world, tmp_path)
    proc = cli(
        "binlogs", "ship", "--config", str(config), "--cluster", "c1", "--host", "db1", "--flush", env=env
    )
    assert proc.returncode == 2, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert "does not know" in line and world.db1_uuid in line and "no binlog was shipped" in line, line
    assert {p.name for p in (store / "backups" / "c1" / "db1" / "binlogs").iterdir()} == {world.db1_uuid}


def test_the_tools_datadir_warning_stops_it_and_nothing_is_stored(world, tmp_path):
    """mariabackup given a datadir that is not the server's warns and copies the server's: the warning
    kills it at once, the stream fails and nothing is committed."""
    from xtrabackup_provider.core.backup.impact import LockWatch
    from xtrabackup_provider.core.db.server import defaults_file
    from xtrabackup_provider.core.engine.argv import BackupOptions, backup_argv
    from xtrabackup_provider.core.engine.tools import detect_tool
    from xtrabackup_provider.core.engine.warnings import not_what_was_asked
    from xtrabackup_provider.core.pipeline.process import PipelineError
    from xtrabackup_provider.core.pipeline.to_store import stream_to_store

    elsewhere = tmp_path / "not-the-datadir"
    elsewhere.mkdir()
    (tmp_path / "lsn").mkdir()
    (tmp_path / "scratch").mkdir()
    store = LocalStore(str(tmp_path / "store"))
    target = MySQLTarget(socket=str(world.db1.socket), user="root", password=world.db1.root_password)
    watch = LockWatch("mariabackup", refuse=not_what_was_asked)
    opts = BackupOptions(
        datadir=str(elsewhere), lsn_dir=str(tmp_path / "lsn"), scratch_dir=str(tmp_path / "scratch")
    )
    with defaults_file(target) as creds, pytest.raises(PipelineError):
        stream_to_store(
            backup_argv(detect_tool("mariabackup"), creds, opts),
            store.open_writer("b/backup.xbstream.zst"),
            encrypt_argv=None,
            producer_watch=watch.attach,
        )
    watch.phases()
    assert watch.refused and "option 'datadir' has different values" in watch.refused, watch.refused
    assert str(elsewhere) in watch.refused and str(world.db1.datadir) in watch.refused, watch.refused
    assert _objects(tmp_path / "store") == []


def test_the_replay_client_must_reach_the_restore_sandbox(world, tmp_path):
    from xtrabackup_provider.core.db.server import defaults_file
    from xtrabackup_provider.core.pitr.replay import ReplayError, check_client_reaches, client_argv

    sandbox = SandboxServer(tmp_path / "sb", tmp_path / "sb" / "data", 1, 4_100_000_000)
    db1 = MySQLTarget(socket=str(world.db1.socket), user="root", password=world.db1.root_password)
    with defaults_file(db1) as creds, pytest.raises(ReplayError) as info:
        check_client_reaches(client_argv("mariadb", creds), sandbox)
    message = str(info.value)
    assert f"reached server_id {world.db1_id} at {world.db1.socket}" in message, message
    assert f"not the restore sandbox (server_id 4100000000 at {sandbox.socket})" in message
