"""Point-in-time recovery end to end: writes before, during and after a full and an incremental,
binlogs shipped encrypted to S3 (moto over HTTP), then restores to a time, a GTID and a position.
Between two targets: DDL, and temporary tables of two sessions with the same name, logged in
statement format and used after the binlog rotated. Every restore runs with both replay paths:
the server's replication applier (the default) and the mariadb-binlog | mariadb pipe.

Binlog event times have a resolution of one second, so the "known" transactions a target falls
between are committed at least a second apart.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import commit_known, iso_utc, root_target, unique_name
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget, make_plan
from xtrabackup_provider.core.pitr.recover import PitrRequest, fetch_binlogs, point_in_time_restore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@dataclass
class History:
    """The source's rows as they were right after each known transaction, and where it was."""

    server: SandboxServer
    catalog: Catalog
    db: str
    full: Manifest | None = None
    incremental: Manifest | None = None
    rows: dict[str, set[int]] = field(default_factory=dict)  # snapshot after a known transaction
    times: dict[str, int] = field(default_factory=dict)  # a target time after it, before the next
    gtids: dict[str, str] = field(default_factory=dict)
    positions: dict[str, str] = field(default_factory=dict)

    def ids(self) -> set[int]:
        return {r[0] for r in self.server.query(f"SELECT id FROM `{self.db}`.t")}

    def known(self, label: str) -> None:
        """Commit a known transaction, remember the state after it, and a target time just after it."""
        point = commit_known(self.server, self.db, label)
        self.rows[label], self.times[label] = set(point.rows), point.time
        self.gtids[label], self.positions[label] = point.gtid, point.position


class Writer(threading.Thread):
    """Inserts a row every few milliseconds until stopped: the writes during a backup."""

    def __init__(self, server: SandboxServer, db: str) -> None:
        super().__init__(daemon=True)
        self.server, self.db = server, db
        self.stop_event = threading.Event()
        self.count = 0

    def run(self) -> None:
        conn = self.server.connect()
        try:
            cur = conn.cursor()
            while not self.stop_event.is_set():
                cur.execute(f"INSERT INTO `{self.db}`.t (v) VALUES ('during')")
                self.count += 1
                time.sleep(0.005)
        finally:
            conn.close()

    def __enter__(self) -> Writer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.join(10)


@pytest.fixture(scope="module")
def history(mariadb_factory, s3_server, gpg_keys) -> History:
    server = mariadb_factory("pitr", root_password=secrets.token_urlsafe(16))
    bucket = s3_server.make_bucket(f"xbp-pitr-{secrets.token_hex(6)}")
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )
    h = History(server, catalog, unique_name("pitr"))
    server.query(f"CREATE DATABASE `{h.db}`")
    server.query(f"CREATE TABLE `{h.db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
    server.query(f"INSERT INTO `{h.db}`.t (v) SELECT 'before' FROM seq_1_to_200", database=h.db)
    backup = dict(catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key])

    with Writer(server, h.db) as writer:
        h.full = run_backup(BackupRequest(kind="full", **backup))
    assert writer.count > 0, "no write happened during the full backup"
    h.known("A")  # between the full and the incremental
    h.known("B")
    server.query("FLUSH BINARY LOGS")  # the replay crosses binlog files
    with Writer(server, h.db) as writer:
        h.incremental = run_backup(BackupRequest(kind="incremental", **backup))
    assert writer.count > 0, "no write happened during the incremental"
    # After the incremental: an account (replayed GRANTs must work), then known transactions.
    server.execute_script(
        f"CREATE USER app@'%' IDENTIFIED BY 'app-pw'; GRANT SELECT ON `{h.db}`.* TO app@'%';"
    )
    h.known("C")
    _ddl_and_temporary_tables_across_binlogs(server, h.db)
    for label in ("D", "E", "F"):
        h.known(label)
    h.positions["inside G"] = _multi_statement_transaction(server, h.db)
    h.known("H")
    ship_binlogs(
        ShipRequest(
            catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
    )
    return h


def _ddl_and_temporary_tables_across_binlogs(server: SandboxServer, db: str) -> None:
    """An ALTER, and two sessions' temporary tables of one name logged in statement format: created
    in one binlog, used (INSERT ... SELECT into t) after FLUSH BINARY LOGS, in the next one."""
    server.query(f"ALTER TABLE `{db}`.t ADD COLUMN extra INT NOT NULL DEFAULT 7")
    sessions = [server.connect(), server.connect()]
    try:
        for n, conn in enumerate(sessions):
            cur = conn.cursor()
            cur.execute("SET SESSION binlog_format = 'STATEMENT'")  # ROW would not log temporary tables
            cur.execute(f"CREATE TEMPORARY TABLE `{db}`.tmp (v VARCHAR(64)) ENGINE=InnoDB")
            cur.execute(f"INSERT INTO `{db}`.tmp VALUES ('temp {n} a'), ('temp {n} b')")
        server.query("FLUSH BINARY LOGS")
        for n, conn in enumerate(sessions):
            cur = conn.cursor()
            cur.execute(f"INSERT INTO `{db}`.t (v, extra) SELECT v, {n} FROM `{db}`.tmp")
            cur.execute(f"DROP TEMPORARY TABLE `{db}`.tmp")
    finally:
        for conn in sessions:
            conn.close()


def _multi_statement_transaction(server: SandboxServer, db: str) -> str:
    """Three statements in one transaction; returns FILE:POS of an event inside it (a target there
    replays nothing of it: the pipe rolls the cut transaction back, the applier stops before it)."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("BEGIN")
        for value in ("G1", "G2", "G3"):
            cur.execute(f"INSERT INTO `{db}`.t (v) VALUES (%s)", (value,))
        cur.execute("COMMIT")
        cur.execute("SELECT @@last_gtid")
        gtid = cur.fetchone()[0]
        cur.execute("SHOW MASTER STATUS")
        file = cur.fetchone()[0]
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}'")
        events = cur.fetchall()
    finally:
        conn.close()
    start = next(i for i, e in enumerate(events) if e[2] == "Gtid" and str(gtid) in str(e[5]))
    rows = [e for e in events[start:] if e[2] == "Write_rows_v1"]
    return f"{file}:{rows[1][1]}"  # the second INSERT's row event


def _restored_ids(datadir: Path, basedir: Path, db: str) -> tuple[set[int], list[tuple[str, str]]]:
    ids, accounts, _ = _restored_state(datadir, basedir, db)
    return ids, accounts


def _restored_state(datadir: Path, basedir: Path, db: str) -> tuple[set[int], list[tuple[str, str]], str]:
    with SandboxServer.on_datadir(datadir, basedir, server_id=977) as restored:
        restored.start()
        ids = {r[0] for r in restored.query(f"SELECT id FROM `{db}`.t")}
        accounts = [(str(u), str(h)) for u, h in restored.query("SELECT user, host FROM mysql.user")]
        gtid = str(restored.query("SELECT @@gtid_slave_pos")[0][0] or "")
    return ids, accounts, gtid


@pytest.fixture(params=["applier", "pipe"])
def replay(request) -> str:
    return str(request.param)


def _pitr(history: History, gpg_keys, tmp_path: Path, target: PitrTarget, replay: str = "applier"):
    datadir = tmp_path / "restored" / "data"
    report = point_in_time_restore(
        PitrRequest(
            catalog=history.catalog,
            target_datadir=datadir,
            target=target,
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
            replay=replay,
        )
    )
    assert not list(datadir.glob("mysql-bin.*")), "the replay leaves no binlog of its own in the datadir"
    assert not list(datadir.glob("relay-bin.*")), "nor relay logs"
    ids, accounts, gtid = _restored_state(datadir, tmp_path / "sb", history.db)
    if report.transactions:
        assert report.replay == replay
        assert gtid == report.reached_gtid, "the restored datadir's gtid_slave_pos is the GTID reached"
    return report, ids, accounts


def test_restore_to_a_time_after_the_incremental_gives_exactly_the_rows_committed_before_it(
    history, gpg_keys, tmp_path, replay
):
    report, ids, accounts = _pitr(
        history, gpg_keys, tmp_path, PitrTarget.at_time(iso_utc(history.times["C"])), replay
    )
    assert report.backup_id == history.incremental.backup_id, "the newest backup before the target"
    assert ids == history.rows["C"]
    assert ("app", "%") in accounts, "a replayed CREATE USER / GRANT must apply"
    assert not [u for u, _ in accounts if u.startswith("xbp_pitr")], "the replay account is dropped"
    assert report.reached_gtid == history.gtids["C"]


def test_restore_to_a_time_before_the_incremental_replays_from_the_full(history, gpg_keys, tmp_path, replay):
    report, ids, _ = _pitr(
        history, gpg_keys, tmp_path, PitrTarget.at_time(iso_utc(history.times["A"])), replay
    )
    assert report.backup_id == history.full.backup_id
    assert ids == history.rows["A"]
    assert (
        len(report.binlogs) >= 1
        and report.start == f"{history.full.binlog_file}:{history.full.binlog_position}"
    )


def test_restore_to_a_gtid(history, gpg_keys, tmp_path, replay):
    report, ids, _ = _pitr(history, gpg_keys, tmp_path, PitrTarget.at_gtid(history.gtids["D"]), replay)
    assert ids == history.rows["D"]
    assert report.reached_gtid == history.gtids["D"]


def test_restore_to_a_time_after_ddl_and_temporary_tables_across_binlogs(history, gpg_keys, tmp_path, replay):
    report, ids, _ = _pitr(
        history, gpg_keys, tmp_path, PitrTarget.at_time(iso_utc(history.times["E"])), replay
    )
    assert ids == history.rows["E"], "rows inserted from the two sessions' temporary tables are there"
    assert len(history.rows["E"]) >= len(history.rows["C"]) + 4 + 2
    assert report.reached_gtid == history.gtids["E"]


def test_a_position_inside_a_transaction_replays_none_of_it(history, gpg_keys, tmp_path, replay):
    target = PitrTarget.at_position(history.positions["inside G"])
    report, ids, _ = _pitr(history, gpg_keys, tmp_path, target, replay)
    assert ids == history.rows["F"]
    assert report.reached_gtid == history.gtids["F"]


def test_cli_restores_to_a_binlog_position(history, gpg_keys, tmp_path, monkeypatch, capsys, replay):
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    store = history.catalog.store
    assert isinstance(store, S3Store)
    datadir = tmp_path / "restored" / "data"
    rc = cli_main(
        [
            "restore",
            *("--cluster", "c1", "--host", "db1", "--bucket", store.bucket),
            *(
                "--endpoint-url",
                store.client.meta.endpoint_url,
                "--target-datadir",
                str(datadir),
                "--create-parents",
            ),
            *("--private-key-file", str(key), "--to-position", history.positions["E"]),
            *("--replay", replay),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"GTID {history.gtids['E']}" in out
    ids, _ = _restored_ids(datadir, tmp_path / "sb", history.db)
    assert ids == history.rows["E"]


def test_a_target_beyond_the_shipped_binlogs_is_refused_and_leaves_the_target_empty(
    history, gpg_keys, tmp_path
):
    unshipped = commit_known(history.server, history.db, "not shipped")  # in the past, never shipped
    datadir = tmp_path / "restored" / "data"
    with pytest.raises(PitrError, match="Ship binlogs first"):
        point_in_time_restore(
            PitrRequest(
                catalog=history.catalog,
                target_datadir=datadir,
                target=PitrTarget.at_time(iso_utc(unshipped.time)),
                private_key=gpg_keys.private_key,
            )
        )
    assert not datadir.exists() or not any(datadir.iterdir())


def test_a_target_in_the_future_is_refused_as_such_with_the_current_time(history, gpg_keys, tmp_path):
    datadir = tmp_path / "restored" / "data"
    future = PitrTarget.at_time(iso_utc(int(time.time()) + 3600))
    with pytest.raises(PitrError) as excinfo:
        point_in_time_restore(
            PitrRequest(
                catalog=history.catalog,
                target_datadir=datadir,
                target=future,
                private_key=gpg_keys.private_key,
            )
        )
    message = str(excinfo.value)
    assert f"{future.describe()} is in the future" in message and "it is now " in message, message
    assert not datadir.exists()


def test_decrypted_binlogs_in_the_scratch_are_readable_by_their_owner_only(history, gpg_keys, tmp_path):
    """A binlog may hold `CREATE USER ... IDENTIFIED BY` in clear once decrypted."""
    target = PitrTarget.at_gtid(history.gtids["D"])
    plan = make_plan(history.catalog, target)
    request = PitrRequest(
        catalog=history.catalog,
        target_datadir=tmp_path / "restored",
        target=target,
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
    )
    files = fetch_binlogs(request, plan.binlogs, tmp_path / "scratch" / "binlogs")
    assert files and b"IDENTIFIED BY" in b"".join(f.read_bytes() for f in files)
    modes = {f.name: oct(f.stat().st_mode & 0o777) for f in files}
    assert set(modes.values()) == {"0o600"}, modes
