"""MySQL's restore-table and the restore test's roll-forward by either replay method, on MySQL 9.7;
and point-in-time recovery over binlogs written with gtid_mode OFF refused by name.

A source (GTID mode ON, the clone plugin): a clone backup, then writes across a binlog rotation, a
stop point (its gtid_executed and every table's CHECKSUM TABLE: the reference), the accident and
more writes, all shipped. `restore-table` with `replay="applier"` (the CLI's and the request's
default) and with `"pipe"` brings a table back as it was at the stop (by GTID set, by time): its
CHECKSUM TABLE is the reference's, and the report says how the binlogs were applied. The restore
test's roll-forward by each method takes the restored copy to the source's final gtid_executed,
every table's CHECKSUM TABLE the source's. Before, MySQL's restore-table and roll-forward took
`--replay applier` (the default) and silently replayed by the pipe; restore-test had no --replay.

A second source started with gtid_mode OFF (its transactions anonymous, its shipped binlogs with
no GTIDs recorded): `restore --to-time / --to-position / --to-gtid`, restore-table and the roll-
forward are refused in one line naming the binlog and saying what to do, before anything is
restored (the roll-forward passed before, "nothing shipped after the backup")."""

from __future__ import annotations

import secrets
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from helpers import cli_capture, clone_backup, root_target, ship_mysql_binlogs, unique_name
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, quote_ident, table_checksums
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.pitr.table import TableRestoreRequest, restore_tables
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql

_ROWS = "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {n})"


def _executed(server: SandboxServer) -> str:
    return "".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split())


def _checksum(server: SandboxServer, db: str, table: str) -> int:
    return int(server.query(f"CHECKSUM TABLE {quote_ident(db)}.{quote_ident(table)}")[0][1])


def _config(tmp_path: Path, server: SandboxServer, store: Path) -> Path:
    defaults = server.write_client_defaults(tmp_path / "client.cnf")
    host = {
        "name": "db1",
        "flavour": "clone",
        "binlog_binary": shutil.which("mysqlbinlog"),
        "defaults_file": str(defaults),
    }
    config = {
        "storage": {"local_path": str(store)},
        "encryption": {"enabled": False},
        "clusters": [{"name": "c1", "hosts": [host], "restore_workdir": str(tmp_path / "rt")}],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class History:
    server: SandboxServer
    catalog: Catalog
    store: Path
    backup: Manifest
    db: str
    at_stop: str  # gtid_executed at the stop
    stop_time: datetime  # after the stop, before the accident
    at_stop_sums: dict[str, int]  # CHECKSUM TABLE of every table at the stop: the reference
    final: str  # gtid_executed at the end (what the roll-forward reaches)
    final_sums: dict[str, int]


@pytest.fixture(scope="module")
def history(mysql_factory, tmp_path_factory) -> History:
    server = mysql_factory("applyv", root_password=secrets.token_urlsafe(12))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    base = tmp_path_factory.mktemp("applyv")
    catalog = Catalog(LocalStore(str(base / "store")), "backups", "c1", "db1")
    db = unique_name("av")
    server.execute_script(
        f"SET SESSION cte_max_recursion_depth = 5000; CREATE DATABASE {db};"
        f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(64), KEY kv (v));"
        f"INSERT INTO {db}.t {_ROWS.format(n=2000)} SELECT n, SHA2(n, 256) FROM s;"
        f"CREATE TABLE {db}.u (id INT PRIMARY KEY, n INT);"
    )
    backup = clone_backup(server, catalog, base / "staging")
    server.execute_script(
        f"SET SESSION cte_max_recursion_depth = 5000;"
        f"INSERT INTO {db}.t {_ROWS.format(n=1000)} SELECT 2000 + n, SHA2(-n, 256) FROM s;"
        f"UPDATE {db}.t SET v = CONCAT('x', id) WHERE id % 7 = 0; FLUSH BINARY LOGS;"
        f"INSERT INTO {db}.u {_ROWS.format(n=300)} SELECT n, n * n FROM s;"
        f"DELETE FROM {db}.t WHERE id % 11 = 0;"
    )
    at_stop, at_stop_sums = _executed(server), table_checksums(server, [db])
    time.sleep(1.1)  # binlog times are whole seconds: the accident is stamped after the stop time
    stop_time = datetime.now(UTC).replace(microsecond=0)
    time.sleep(1.1)
    server.execute_script(
        f"DELETE FROM {db}.t WHERE id > 100; UPDATE {db}.u SET n = 0; FLUSH BINARY LOGS;"
        f"INSERT INTO {db}.u VALUES (5000, 1);"
    )
    server.query("FLUSH BINARY LOGS")
    assert ship_mysql_binlogs(catalog, server).shipped
    final, final_sums = _executed(server), table_checksums(server, [db])
    assert final_sums != at_stop_sums
    yield History(
        server, catalog, base / "store", backup, db, at_stop, stop_time, at_stop_sums, final, final_sums
    )
    mysql_factory.discard(server)


def _restore_table(h: History, tmp_path: Path, new: str, target: PitrTarget, replay: str):
    return restore_tables(
        TableRestoreRequest(
            catalog=h.catalog,
            live=root_target(h.server),
            tables=[f"{h.db}.t"],
            new_names=[f"{h.db}.{new}"],
            target=target,
            scratch_dir=tmp_path,
            binlog_binary=shutil.which("mysqlbinlog") or "mysqlbinlog",
            replay=replay,
        )
    )


def test_restore_table_by_the_applier_and_by_the_pipe_equals_the_source_at_the_gtid(history, tmp_path):
    h = history
    before = _executed(h.server)
    try:
        for replay in ("applier", "pipe"):
            report = _restore_table(h, tmp_path, f"t_{replay}", PitrTarget.at_gtid(h.at_stop), replay)
            assert report.replay.startswith(replay), (replay, report.replay)
            assert report.reached_gtid == h.at_stop, replay
            assert _checksum(h.server, h.db, f"t_{replay}") == h.at_stop_sums[f"{h.db}.t"], replay
        assert _executed(h.server) == before, "the restore wrote into the live binlog"
        assert not list(tmp_path.glob("xbp-*")), "the scratch restore was left behind"
    finally:
        h.server.query(f"DROP TABLE IF EXISTS {h.db}.t_applier, {h.db}.t_pipe")


def test_the_cli_restores_a_table_to_a_time_by_the_applier_by_default(history, tmp_path, capsys):
    h = history
    config = _config(tmp_path, h.server, h.store)
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    try:
        rc, out, err = cli_capture(
            capsys,
            "restore-table",
            *common,
            *("--table", f"{h.db}.t", "--as", f"{h.db}.t_at_time", "--scratch-dir", str(tmp_path)),
            *("--to-time", h.stop_time.strftime("%Y-%m-%dT%H:%M:%SZ")),
        )
        assert rc == 0, err
        assert f"GTID {h.at_stop}, binlogs applied by applier: 4 worker(s)" in out, out
        assert _checksum(h.server, h.db, "t_at_time") == h.at_stop_sums[f"{h.db}.t"]
    finally:
        h.server.query(f"DROP TABLE IF EXISTS {h.db}.t_at_time")


def _restored_copy(h: History, where: Path) -> Path:
    datadir = where / "data"
    restore(RestoreRequest(catalog=h.catalog, target_datadir=datadir, backup_id=h.backup.backup_id))
    return datadir


def _sums_of(datadir: Path, basedir: Path, db: str) -> tuple[dict[str, int], str]:
    with SandboxServer.on_datadir(datadir, basedir, server_id=901, family="mysql", log_bin=False) as copy:
        copy.start()
        return table_checksums(copy, [db]), _executed(copy)


def test_the_roll_forward_by_the_applier_and_by_the_pipe_reaches_the_source(history, tmp_path):
    h = history
    for replay in ("applier", "pipe"):
        datadir = _restored_copy(h, tmp_path / replay)
        result = ShippedBinlogs(h.catalog, replay=replay)(datadir, h.backup, tmp_path / replay / "scratch")
        assert result.status == "pass", (replay, result.reasons)
        assert result.detail["replay"].startswith(replay), (replay, result.detail)
        assert result.detail["gtid"] == h.final, replay
        sums, executed = _sums_of(datadir, tmp_path / replay / "sb", h.db)
        assert (sums, executed) == (h.final_sums, h.final), replay


def test_the_cli_restore_test_rolls_forward_by_the_applier(history, tmp_path, capsys):
    h = history
    config = _config(tmp_path, h.server, h.store)
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    rc, out, err = cli_capture(
        capsys, "restore-test", *common, "--level", "full", "--backup-id", h.backup.backup_id, "--no-report"
    )
    assert rc == 0, out + err
    rolled = next(line for line in out.splitlines() if line.startswith("roll_forward"))
    assert "PASS" in rolled and "(applier: 4 worker(s)" in rolled and h.final in rolled, rolled


# -- gtid_mode OFF ---------------------------------------------------------------------------------


@dataclass
class Anonymous:
    server: SandboxServer
    catalog: Catalog
    store: Path
    backup: Manifest
    db: str
    binlog: str  # the backup's binlog: transactions without GTIDs after the backup
    position: str  # FILE:POS after the last write


@pytest.fixture(scope="module")
def anonymous(mysql_factory, tmp_path_factory) -> Anonymous:
    server = mysql_factory(
        "gtidoff",
        root_password=secrets.token_urlsafe(12),
        extra_args=["--gtid-mode=OFF", "--enforce-gtid-consistency=OFF"],
    )
    assert server.query("SELECT @@global.gtid_mode")[0][0] == "OFF"
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    base = tmp_path_factory.mktemp("gtidoff")
    catalog = Catalog(LocalStore(str(base / "store")), "backups", "c1", "db1")
    db = unique_name("ao")
    server.execute_script(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT);")
    backup = clone_backup(server, catalog, base / "staging")
    time.sleep(1.1)  # a time target after the backup (whole seconds) exists
    server.execute_script(f"INSERT INTO {db}.t VALUES (1, 1), (2, 2); UPDATE {db}.t SET v = 3 WHERE id = 1;")
    file, pos = server.query("SHOW BINARY LOG STATUS")[0][:2]
    server.query("FLUSH BINARY LOGS")
    assert ship_mysql_binlogs(catalog, server).shipped
    yield Anonymous(server, catalog, base / "store", backup, db, str(backup.binlog_file), f"{file}:{pos}")
    mysql_factory.discard(server)


def test_pitr_over_binlogs_without_gtids_is_refused_naming_the_binlog(anonymous, tmp_path, capsys):
    a = anonymous
    config = _config(tmp_path, a.server, a.store)
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    rc, out, err = cli_capture(capsys, "binlogs", "list", *common)
    assert rc == 0 and any(a.binlog in line and "-..-" in line for line in out.splitlines()), out
    uuid = str(a.server.query("SELECT @@server_uuid")[0][0])
    for flag, value in (
        ("--to-time", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
        ("--to-position", a.position),
        ("--to-gtid", f"{uuid}:1-3"),
    ):
        target = tmp_path / flag.strip("-")
        rc, out, err = cli_capture(capsys, "restore", *common, "--target-datadir", str(target), flag, value)
        assert rc != 0, (flag, out)
        last = err.strip().splitlines()[-1]
        assert f"binlog {a.binlog} of server {uuid} holds transactions without GTIDs" in last, (flag, err)
        assert "set gtid_mode=ON" in last and "nothing was restored" in last, (flag, last)
        assert "Traceback" not in err, err
        assert not target.exists(), f"{flag}: the target was written"


def test_restore_table_over_binlogs_without_gtids_is_refused_naming_the_binlog(anonymous, tmp_path):
    a = anonymous
    tables = a.server.query(f"SHOW TABLES FROM {a.db}")
    with pytest.raises(PitrError, match=rf"^binlog {a.binlog} of server .* holds transactions without GTIDs"):
        restore_tables(
            TableRestoreRequest(
                catalog=a.catalog,
                live=root_target(a.server),
                tables=[f"{a.db}.t"],
                target=PitrTarget.at_position(a.position),
                scratch_dir=tmp_path,
                binlog_binary=shutil.which("mysqlbinlog") or "mysqlbinlog",
            )
        )
    assert a.server.query(f"SHOW TABLES FROM {a.db}") == tables
    assert not list(tmp_path.glob("xbp-*")), "something was restored"


def test_the_roll_forward_over_binlogs_without_gtids_fails_naming_the_binlog(anonymous, tmp_path):
    a = anonymous
    datadir = tmp_path / "copy" / "data"
    restore(RestoreRequest(catalog=a.catalog, target_datadir=datadir, backup_id=a.backup.backup_id))
    result = ShippedBinlogs(a.catalog)(datadir, a.backup, tmp_path / "copy" / "scratch")
    assert result.status == "fail", result
    assert result.reasons[0].startswith(f"binlog {a.binlog} of server "), result.reasons
    assert "without GTIDs" in result.reasons[0] and "gtid_mode=ON" in result.reasons[0]
