"""Tagged GTIDs (MySQL 8.3+: `uuid:tag:N`, written after `SET gtid_next='AUTOMATIC:tag'` or
`'uuid:tag:N'`) end to end on a real MySQL 9.7 (issue 36): the GTID set model agrees with the
server's own GTID_SUBSET / GTID_SUBTRACT and prints sets as the server does; shipping records the
tagged GTIDs in each binlog manifest's set (checked against SHOW BINLOG EVENTS and gtid_executed);
`binlogs events` lists and filters the tagged transactions; PITR to a set holding tagged GTIDs
stops exactly there, by the pipe, by `restore --to-gtid` from a clone backup and by the restore
test's roll-forward, the restored CHECKSUM TABLE being the source's at that point; and a tagged
GTID event the reader cannot parse is an error naming the binlog and the offset.

Before tagged GTID events were decoded, shipping recorded the untagged GTIDs only (with a warning),
`binlogs events` stopped at the first tagged event with an error, and a replay to a set holding
tagged GTIDs never found a binlog reaching it."""

from __future__ import annotations

import json
import logging
import random
import secrets
import shutil
from pathlib import Path

import pytest
import yaml

from helpers import cli, cli_capture, root_target, ship_mysql_binlogs, unique_name
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.events import BinlogFormatError, summarize
from xtrabackup_provider.core.binlog.listing import transactions
from xtrabackup_provider.core.binlog.ship import is_shipped, lag_target
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.common.values import GtidSet, MysqlGtid
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.pitr.mysql_pipe import replay_mysql
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, fetch_binlogs
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql

U2 = "9b2f8a10-0000-11f1-81ec-02fc00000001"  # another source's uuid, for sets only
HUGE = 9_000_000_000_000_000_000  # a transaction number whose serialised form takes nine bytes


def _executed(server) -> str:
    return "".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split())


def _uuid(server) -> str:
    return str(server.query("SELECT @@server_uuid")[0][0])


def _tagged(tag: str, sql: str) -> str:
    """`sql` (one transaction) under the next GTID of `tag`, then back to untagged GTIDs."""
    return f"SET gtid_next = 'AUTOMATIC:{tag}'; {sql}; SET gtid_next = 'AUTOMATIC';"


def _explicit(gtid: str, sql: str) -> str:
    return f"SET gtid_next = '{gtid}'; {sql}; SET gtid_next = 'AUTOMATIC';"


def _server_gtids(server, binlog: str) -> list[str]:
    """The GTIDs of `binlog` as the server lists them (Gtid and Gtid_tagged_log_event rows)."""
    rows = server.query(f"SHOW BINLOG EVENTS IN '{binlog}'")
    return [str(r[5]).split("'")[1] for r in rows if str(r[2]).startswith("Gtid")]


# -- the GTID set model against the server's own functions ------------------------------------------


def _random_set(rng: random.Random, uuid: str) -> str:
    """A set as a user could write it: sources in any order, tags in any case, overlapping ranges."""
    parts = []
    for _ in range(rng.randint(0, 4)):
        source = rng.choice([uuid, uuid.upper(), U2])
        words = [source]
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.5:
                words.append(rng.choice(["audit", "AUDIT", "b_2", "_x", "z9", "a" * 32]))
            first = rng.randint(1, 30)
            words.append(f"{first}-{first + rng.randint(0, 6)}" if rng.random() < 0.6 else str(first))
        parts.append(":".join(words))
    return ",".join(parts)


def _server_form(server, text: str) -> str:
    return "".join(str(server.query("SELECT GTID_SUBTRACT(%s, '')", (text,))[0][0]).split())


def test_tagged_gtid_sets_parse_print_and_compare_as_the_server_does(mysql):
    uuid = _uuid(mysql)
    db = unique_name("ts")
    mysql.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY);"
        + _tagged("Audit", f"INSERT INTO {db}.t VALUES (1)")
        + _explicit(f"{uuid}:batch_7:5", f"INSERT INTO {db}.t VALUES (2)")
        + _tagged("audit", f"INSERT INTO {db}.t VALUES (3)")
    )
    executed = _executed(mysql)
    assert executed == f"{uuid}:1-2:audit:1-2:batch_7:5", executed  # tags lower case, untagged first
    assert str(GtidSet.parse(executed)) == executed
    assert MysqlGtid.of(f"{uuid}:batch_7", 5) in GtidSet.parse(executed)
    assert MysqlGtid.of(f"{uuid}:batch_7", 4) not in GtidSet.parse(executed)

    for bad in (
        f"{uuid}:tag:1:",
        f"{uuid}:9tag:1",
        f"{uuid}:{'t' * 33}:1",
        f"{uuid}:ta-g:1",
        f"{uuid}:tag:0",
        f"{uuid}::1",
    ):
        with pytest.raises(Exception, match="Malformed GTID set"):
            mysql.query("SELECT GTID_SUBTRACT(%s, '')", (bad,))
        with pytest.raises(ValueError, match="GTID set"):
            GtidSet.parse(bad)

    rng = random.Random(36)
    for _ in range(60):
        a_text, b_text = _random_set(rng, uuid), _random_set(rng, uuid)
        a, b = GtidSet.parse(a_text), GtidSet.parse(b_text)
        assert str(a) == _server_form(mysql, a_text), a_text
        both = ",".join(t for t in (a_text, b_text) if t)
        ((subset, minus, union),) = mysql.query(
            "SELECT GTID_SUBSET(%s, %s), GTID_SUBTRACT(%s, %s), GTID_SUBTRACT(%s, '')",
            (a_text, b_text, a_text, b_text, both),
        )
        assert (a <= b) == bool(subset), (a_text, b_text)
        assert str(a - b) == "".join(str(minus).split()), (a_text, b_text)
        assert str(a | b) == "".join(str(union).split()), (a_text, b_text)
        for gtid in (f"{uuid}:audit:3", f"{uuid}:3", f"{U2}:b_2:5"):
            (inside,) = mysql.query("SELECT GTID_SUBSET(%s, %s)", (gtid, a_text))[0]
            source, _, number = gtid.rpartition(":")
            assert (MysqlGtid.of(source, int(number)) in a) == bool(inside), (gtid, a_text)


# -- shipping and binlogs events ---------------------------------------------------------------------


def _config(tmp_path: Path, server, flavour: str = "xtrabackup") -> Path:
    host = {
        "name": "db1",
        "flavour": flavour,
        "binlog_binary": shutil.which("mysqlbinlog"),
        "defaults_file": str(server.write_client_defaults(tmp_path / "client.cnf")),
    }
    config = {
        "storage": {"local_path": str(tmp_path / "store")},
        "encryption": {"enabled": False},
        "clusters": [{"name": "c1", "hosts": [host]}],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _events(capsys, common: list[str], *more: str) -> list[dict]:
    rc, out, err = cli_capture(capsys, "binlogs", "events", *common, "--json", *more)
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_tagged_gtids_are_shipped_in_the_manifests_and_listed_by_binlogs_events(
    mysql, tmp_path, capsys, caplog
):
    uuid = _uuid(mysql)
    db = unique_name("tl")
    mysql.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v TEXT);"
        f"INSERT INTO {db}.t VALUES (1, 'a');"
        + _tagged("audit", f"INSERT INTO {db}.t VALUES (2, 'b')")
        + f"INSERT INTO {db}.t VALUES (3, 'c'); FLUSH BINARY LOGS;"
        + _explicit(f"{uuid}:Batch_7:5", f"UPDATE {db}.t SET v = 'z' WHERE id = 1")
        + _explicit(f"{uuid}:huge:{HUGE}", f"INSERT INTO {db}.t VALUES (5, 'e')")
        + _tagged("audit", f"DROP TABLE {db}.t")
        + f"CREATE TABLE {db}.u (id INT); FLUSH BINARY LOGS;"
    )
    executed = _executed(mysql)
    assert executed == f"{uuid}:1-5:audit:1-2:batch_7:5:huge:{HUGE}", executed
    closed = [r[0] for r in mysql.query("SHOW BINARY LOGS")][:-1]
    common = ["--config", str(_config(tmp_path, mysql)), "--cluster", "c1", "--host", "db1"]
    caplog.set_level(logging.WARNING)
    rc, out, err = cli_capture(capsys, "binlogs", "ship", *common)
    assert rc == 0, err
    assert not [r for r in caplog.records if "tagged" in r.getMessage()], caplog.text

    # Each manifest's set is what the server lists for the binlog; together, gtid_executed.
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    binlogs = BinlogCatalog(catalog, uuid)
    logged = GtidSet()
    for name in closed:
        before, held = binlogs.read(name).gtid_sets()
        assert before == logged, name  # its Previous_gtids: what the binlogs before it hold
        assert held == GtidSet.parse(",".join(_server_gtids(mysql, name))), name
        logged = logged | held
    assert str(logged) == executed
    assert is_shipped(catalog, lag_target(root_target(mysql), executed))
    rc, out, err = cli_capture(capsys, "binlogs", "list", *common)
    assert rc == 0 and f"{uuid}:1-4:audit:1" in out, out

    listed = _events(capsys, common)
    everything = [g for name in closed for g in _server_gtids(mysql, name)]
    assert [m["gtid"] for m in listed][-len(everything) :] == everything
    ours = {m["gtid"]: m for m in listed}
    assert ours[f"{uuid}:audit:1"]["kinds"] == ["INSERT"]
    assert ours[f"{uuid}:batch_7:5"]["kinds"] == ["UPDATE"]
    assert ours[f"{uuid}:huge:{HUGE}"]["kinds"] == ["INSERT"]
    (drop,) = _events(capsys, common, "--kind", "DROP")
    assert drop["gtid"] == f"{uuid}:audit:2" and f"DROP TABLE `{db}`.`t`" in drop["summary"], drop
    assert drop["to_gtid"] == f"{uuid}:1-4:audit:1:batch_7:5:huge:{HUGE}"  # every transaction before it
    window = _events(capsys, common, "--gtid-from", f"{uuid}:AUDIT:2", "--gtid-to", f"{uuid}:audit:2")
    assert [m["gtid"] for m in window] == [f"{uuid}:audit:2"]
    rc, out, err = cli_capture(capsys, "binlogs", "events", *common, "--table", f"{db}.t")
    assert rc == 0 and f"{uuid}:batch_7:5" in out and f"{uuid}:audit:2" in out, out + err


def test_a_tagged_gtid_event_the_reader_cannot_parse_is_an_error_naming_the_binlog_and_offset(
    mysql, tmp_path
):
    db = unique_name("tb")
    mysql.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY);"
        + _tagged("audit", f"INSERT INTO {db}.t VALUES (1)")
        + "FLUSH BINARY LOGS;"
    )
    name = [r[0] for r in mysql.query("SHOW BINARY LOGS")][-2]
    (at,) = [r[1] for r in mysql.query(f"SHOW BINLOG EVENTS IN '{name}'") if r[2] == "Gtid_tagged_log_event"]
    datadir = Path(str(mysql.query("SELECT @@datadir")[0][0]))
    good = tmp_path / "good" / name
    good.parent.mkdir()
    shutil.copyfile(datadir / name, good)
    assert summarize(good).mysql_gtid_set == GtidSet.parse(",".join(_server_gtids(mysql, name)))
    assert [str(t.gtid) for t in transactions([good])][-1].endswith(":audit:1")

    # The event's serialised size says it ends before its transaction number: not readable.
    bad = tmp_path / name
    data = bytearray(good.read_bytes())
    data[at + 19 + 1] = 0x10  # payload size 8 (varint 8 << 1)
    bad.write_bytes(bytes(data))
    with pytest.raises(BinlogFormatError) as exc:
        list(transactions([bad]))
    message = str(exc.value)
    assert name in message and f"offset {at}" in message and "tagged GTID" in message, message
    assert "\n" not in message
    assert summarize(bad).mysql_unread_at == at  # shipping ships it, naming where its reading stopped


# -- point-in-time recovery ---------------------------------------------------------------------------


def _history(server, db: str) -> tuple[dict[str, int], str]:
    """Untagged and tagged transactions over two binlogs, up to the stop; then the DROP and one more
    after it. Returns the checksums and gtid_executed at the stop."""
    uuid = _uuid(server)
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v TEXT); CREATE TABLE {db}.u (id INT);"
        f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');"
        + _tagged("audit", f"INSERT INTO {db}.t VALUES (3, 'c')")
        + "FLUSH BINARY LOGS;"
        + f"INSERT INTO {db}.t VALUES (4, 'd');"
        + _explicit(f"{uuid}:fix:7", f"UPDATE {db}.t SET v = 'z' WHERE id = 1")
        + _tagged("audit", f"DELETE FROM {db}.t WHERE id = 2")
    )
    at_stop = table_checksums(server, [db]), _executed(server)
    server.execute_script(
        _tagged("audit", f"DROP TABLE {db}.t") + f"INSERT INTO {db}.u VALUES (1); FLUSH BINARY LOGS;"
    )
    return at_stop


@pytest.fixture
def pair(mysql_factory):
    source = mysql_factory("tagsrc", root_password=secrets.token_urlsafe(12))
    replay = mysql_factory("tagdst", root_password=secrets.token_urlsafe(12))
    try:
        yield source, replay
    finally:
        mysql_factory.discard(source)
        mysql_factory.discard(replay)


def test_the_pipe_replays_to_a_tagged_gtid_and_stops_there(pair, tmp_path):
    source, replay = pair
    uuid, db = _uuid(source), unique_name("tp")
    expected, at_stop = _history(source, db)
    assert at_stop.startswith(f"{uuid}:1-") and at_stop.endswith(":audit:1-2:fix:7"), at_stop
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    assert ship_mysql_binlogs(catalog, source).shipped
    shipped = BinlogCatalog(catalog, uuid).index().shipped()
    files = fetch_binlogs(
        PitrRequest(catalog, tmp_path / "unused", PitrTarget("time")), shipped, tmp_path / "copies"
    )
    account = root_target(replay)
    first = GtidSet.parse(at_stop).intervals()[uuid][0][1] - 1  # before the INSERT of row 4
    held = replay_mysql(account, files, PitrTarget.at_gtid(f"{uuid}:1-{first}:audit:1"))
    assert str(held) == f"{uuid}:1-{first}:audit:1"
    reached = replay_mysql(account, files, PitrTarget.at_gtid(at_stop))
    assert str(reached) == at_stop
    assert table_checksums(replay, [db]) == expected
    assert replay.query(f"SELECT COUNT(*) FROM {db}.u")[0][0] == 0


def test_a_clone_backup_is_restored_to_a_tagged_gtid_and_rolled_forward_over_tagged_binlogs(
    mysql_factory, tmp_path
):
    source = mysql_factory("tagclone", root_password=secrets.token_urlsafe(12))
    try:
        _from_a_clone_backup(source, tmp_path)
    finally:
        mysql_factory.discard(source)


def _from_a_clone_backup(source, tmp_path: Path) -> None:
    source.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    source.execute_script(_tagged("setup", "CREATE DATABASE before_backup"))
    common = ["--config", str(_config(tmp_path, source, "clone")), "--cluster", "c1", "--host", "db1"]
    backup = cli("backup", *common)
    assert backup.returncode == 0, backup.stderr
    db = unique_name("tc")
    expected, at_stop = _history(source, db)
    shipped = cli("binlogs", "ship", *common)
    assert shipped.returncode == 0, shipped.stderr
    events = cli("binlogs", "events", *common, "--kind", "DROP", "--json")
    assert events.returncode == 0, events.stderr
    (drop,) = [json.loads(line) for line in events.stdout.splitlines()]
    assert drop["to_gtid"] == at_stop  # "stop before the DROP": what the source had executed then

    target = tmp_path / "restored" / "data"
    one = cli(
        "restore", *common, "--target-datadir", str(target), "--create-parents", "--to-gtid", drop["gtid"]
    )
    assert one.returncode != 0 and not target.exists(), one.stderr
    (line,) = [line for line in one.stderr.splitlines() if line.startswith("error:")]
    assert f"before GTID {drop['gtid']}" in line and "the whole GTID set to reach" in line, line
    restored = cli(
        "restore", *common, "--target-datadir", str(target), "--create-parents", "--to-gtid", drop["to_gtid"]
    )
    assert restored.returncode == 0, restored.stderr
    assert f"reached GTID set {at_stop}" in restored.stdout, restored.stdout
    sandbox = SandboxServer.on_datadir(target, tmp_path / "sb", server_id=994, family="mysql")
    sandbox.start()
    with sandbox:
        assert table_checksums(sandbox, [db]) == expected
        assert _executed(sandbox) == at_stop
        assert sandbox.query(f"SELECT COUNT(*) FROM {db}.u")[0][0] == 0

    # The restore test's roll-forward replays every shipped transaction, the tagged ones too.
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    (manifest,) = catalog.manifests()
    report = run_restore_test(
        RestoreTestRequest(
            catalog, tmp_path / "rt", manifest.backup_id, level="full", roll_forward=ShippedBinlogs(catalog)
        )
    )
    assert report.verdict == "pass", report.reasons
    (rolled,) = [r for r in report.results if r["name"] == "roll_forward"]
    assert rolled["status"] == "pass" and rolled["detail"]["gtid"] == _executed(source), rolled
