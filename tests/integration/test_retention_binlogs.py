"""Retention over binlogs really shipped from a MariaDB server (mariabackup, binlog shipping, gpg,
S3 through moto over HTTP): what the plan keeps and deletes, what apply really removes from the
bucket, and that point-in-time recovery still works from what is kept.

The history (one server, binlog files 1..5):

    file 1   schema and seed rows                            | written by the "old" session,
    file 2   B1 full, transaction A                          | whose clock is set 3 h back
    file 3   B2 incremental (of B1), transaction B           |
    file 4   B3 full (the newest chain), more rows           real clock from here on
    file 5   B4 incremental (of B3), transaction C

The old session runs `SET TIMESTAMP` three hours back: the server stamps its events, the Rotate
that closes each of its binlogs included, as if written then. So files 1-3 end well before the
newest chain starts, further than BINLOG_CLOCK_SLACK (1 h), inside which retention keeps binlogs
whatever their file for clock skew between the database and the worker. Backup manifests carry
the real times. Each test works on its own copy of the bucket.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from helpers import KnownPoint, commit_known, iso_utc, root_target, take_backup, unique_name
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.common.values import binlog_number
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget, make_plan
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import (
    BINLOG_CLOCK_SLACK,
    DAY,
    Plan,
    PlanItem,
    RetentionPolicy,
)
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client

BACKDATE = timedelta(hours=3)


@dataclass
class Shipped:
    catalog: Catalog  # the original: tests plan and apply on copies (see _copy)
    db: str
    server_uuid: str
    b1: Manifest
    b2: Manifest
    b3: Manifest
    b4: Manifest
    a: KnownPoint  # between B1 and B2 (old clock: target its GTID)
    c: KnownPoint  # after B4 (real clock: target its time)
    binlogs: list[str]  # every shipped binlog, oldest first


@pytest.fixture(scope="module")
def shipped(mariadb_factory, s3_server, gpg_keys) -> Iterator[Shipped]:
    server = mariadb_factory("retbl", root_password=secrets.token_urlsafe(16))
    try:
        yield _history(server, s3_server, gpg_keys)
    finally:
        mariadb_factory.discard(server)


def _history(server: SandboxServer, s3_server, gpg_keys) -> Shipped:
    bucket = s3_server.make_bucket(f"xbp-retbl-{secrets.token_hex(6)}")
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )
    db = unique_name("retbl")

    def ship(flush: bool = False) -> list[str]:
        request = ShipRequest(
            catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key], flush=flush
        )
        return ship_binlogs(request).shipped

    old = server.connect()  # the session with its clock three hours back
    try:
        cur = old.cursor()
        cur.execute("SET TIMESTAMP = %s", (int((datetime.now(UTC) - BACKDATE).timestamp()),))
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
        cur.execute(f"USE `{db}`")
        cur.execute("INSERT INTO t (v) SELECT 'before' FROM seq_1_to_200")
        cur.execute("FLUSH BINARY LOGS")  # closes file 1
        b1 = take_backup(server, catalog, gpg_keys, "full")
        a = commit_known(server, db, "A", conn=old)
        cur.execute(f"INSERT INTO `{db}`.t (v) VALUES ('after A')")  # so B2 is after A: PITR to A uses B1
        cur.execute("FLUSH BINARY LOGS")  # closes file 2
        shipped = ship()
        b2 = take_backup(server, catalog, gpg_keys, "incremental")
        commit_known(server, db, "B", conn=old)
        cur.execute("FLUSH BINARY LOGS")  # closes file 3
        shipped += ship()
    finally:
        old.close()
    b3 = take_backup(server, catalog, gpg_keys, "full")
    server.query("INSERT INTO t (v) SELECT 'new chain' FROM seq_1_to_50", database=db)
    shipped += ship(flush=True)  # closes and ships file 4
    b4 = take_backup(server, catalog, gpg_keys, "incremental")
    c = commit_known(server, db, "C")
    server.query(f"INSERT INTO `{db}`.t (v) VALUES ('after C')")
    shipped += ship(flush=True)  # file 5

    assert (b2.parent_id, b4.parent_id) == (b1.backup_id, b3.backup_id)
    assert [_seq(m.binlog_file) for m in (b1, b2, b3, b4)] == [2, 3, 4, 5], "the history above"
    assert [_seq(n) for n in shipped] == [1, 2, 3, 4, 5]
    index = BinlogCatalog(catalog, b1.server_uuid).index()
    for name in shipped[:3]:  # the old session's binlogs end (Rotate) long before B3
        last = index.complete[name].last_event_time
        assert last is not None and last < b3.started_at - BINLOG_CLOCK_SLACK, (name, last)
    return Shipped(catalog, db, b1.server_uuid, b1, b2, b3, b4, a, c, shipped)


def test_keeping_the_newest_chain_deletes_the_binlogs_before_it_and_pitr_from_it_still_works(
    shipped, s3_server, gpg_keys, tmp_path
):
    catalog = _copy(s3_server, shipped.catalog)
    b1, b2, b3, b4 = shipped.b1, shipped.b2, shipped.b3, shipped.b4
    policy = RetentionPolicy(keep_last_chains=1, pitr_days=0, min_age_days=0)
    plan = plan_host(catalog, policy, datetime.now(UTC))

    backups, binlogs = _verdicts(plan, "backup"), _verdicts(plan, "binlog")
    assert {bid: action for bid, (action, _) in backups.items()} == {
        b1.backup_id: "delete",
        b2.backup_id: "delete",
        b3.backup_id: "keep",
        b4.backup_id: "keep",
    }
    names = shipped.binlogs  # files 1..5; B3 (the kept chain's oldest backup) starts in file 4
    assert {n: binlogs[n][0] for n in names} == {
        names[0]: "delete",
        names[1]: "delete",
        names[2]: "delete",
        names[3]: "keep",
        names[4]: "keep",
    }
    for name in names[:3]:
        assert binlogs[name][1].startswith(f"ends before the oldest kept backup {b3.backup_id} started")
    assert binlogs[names[3]][1].startswith(f"needed for PITR from {b3.backup_id}")
    assert not [i for i in plan.items if i.kind not in ("backup", "binlog")], "no debris, nothing else"

    gone, kept = _keys(plan, "delete"), _keys(plan, "keep")
    report = apply_plan(catalog, plan, confirm=True)
    assert sorted(report.deleted) == sorted(
        [b1.backup_id, b2.backup_id, *(_name(shipped, n) for n in names[:3])]
    )
    left = _listing(catalog)
    assert not gone & left, f"deleted objects still stored: {sorted(gone & left)}"
    assert kept <= left, f"kept objects missing: {sorted(kept - left)}"
    assert any(k.endswith(f"/{names[0]}.json") for k in gone) and any(k.endswith(".zst.gpg") for k in gone)
    assert catalog.backup_ids() == [b3.backup_id, b4.backup_id]
    index = BinlogCatalog(catalog, shipped.server_uuid).index()
    assert sorted(index.complete) == names[3:] and not index.problems
    assert not plan_host(catalog, policy, datetime.now(UTC)).deletes, "a second run deletes nothing"

    # The kept backup rolls forward to a time after it, to exactly the rows the source had then.
    datadir = tmp_path / "restored" / "data"
    restored = _pitr(catalog, gpg_keys, datadir, PitrTarget.at_time(iso_utc(shipped.c.time)))
    assert restored.backup_id == b4.backup_id and restored.binlogs == [names[4]]
    assert _restored_ids(datadir, tmp_path / "sb", shipped.db) == shipped.c.rows
    # A point before the kept chain is honestly gone, named as such before anything is fetched.
    with pytest.raises(PitrError, match="no backup with binlog coordinates before"):
        make_plan(catalog, PitrTarget.at_gtid(shipped.a.gtid))


def test_a_pitr_window_over_the_older_chain_keeps_every_backup_and_binlog_it_needs(
    shipped, s3_server, gpg_keys, tmp_path
):
    catalog = _copy(s3_server, shipped.catalog)
    b1, b2, b3 = shipped.b1, shipped.b2, shipped.b3
    names = shipped.binlogs
    now = datetime.now(UTC)
    # A window starting before B1, and one starting between B2 and B3 (B2 is then its base).
    whole = (now - b1.started_at + timedelta(minutes=1)) / DAY
    from_b2 = (now - (b2.finished_at + (b3.finished_at - b2.finished_at) / 2)) / DAY
    for days, b2_reason in ((whole, "inside the"), (from_b2, "base of the")):
        policy = RetentionPolicy(keep_last_chains=1, pitr_days=days, min_age_days=0)
        plan = plan_host(catalog, policy, now)
        backups, binlogs = _verdicts(plan, "backup"), _verdicts(plan, "binlog")
        assert {action for action, _ in backups.values()} == {"keep"}, backups
        assert backups[b2.backup_id][1].startswith(b2_reason), backups[b2.backup_id]
        # B1 starts in file 2: from there on every binlog stays; file 1 ends before it.
        assert {n: binlogs[n][0] for n in names} == {n: "keep" if n != names[0] else "delete" for n in names}
        assert (
            binlogs[names[1]][1]
            == f"needed for PITR from {b1.backup_id} (its binlog position is in or before this file)"
        )

    report = apply_plan(catalog, plan, confirm=True)
    assert report.deleted == [_name(shipped, names[0])]
    assert catalog.backup_ids() == [m.backup_id for m in (b1, b2, b3, shipped.b4)]
    assert sorted(BinlogCatalog(catalog, shipped.server_uuid).index().complete) == names[1:]
    assert _keys(plan, "keep") <= _listing(catalog)

    # The oldest point of the window: B1 rolled forward to transaction A, the rows the source had then.
    datadir = tmp_path / "restored" / "data"
    restored = _pitr(catalog, gpg_keys, datadir, PitrTarget.at_gtid(shipped.a.gtid))
    assert restored.backup_id == b1.backup_id and restored.binlogs == [names[1]]
    assert restored.reached_gtid == shipped.a.gtid
    assert _restored_ids(datadir, tmp_path / "sb", shipped.db) == shipped.a.rows


# -- helpers ---------------------------------------------------------------------------------------


def _copy(s3_server, source: Catalog) -> Catalog:
    """The host's objects, keys unchanged, in a new bucket: each test plans and deletes on its own."""
    store = source.store
    assert isinstance(store, S3Store)
    bucket = s3_server.make_bucket(f"xbp-retbl-{secrets.token_hex(6)}")
    for info in store.list(source.host_prefix + "/"):
        store.client.copy_object(
            Bucket=bucket, Key=info.key, CopySource={"Bucket": store.bucket, "Key": info.key}
        )
    return Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )


def _seq(binlog: str | None) -> int:
    assert binlog
    return binlog_number(binlog)[1]


def _name(shipped: Shipped, binlog: str) -> str:
    return f"{shipped.server_uuid}/{binlog}"


def _verdicts(plan: Plan, kind: str) -> dict[str, tuple[str, str]]:
    """name -> (action, reason); binlogs by file name."""
    return {
        i.name.rpartition("/")[2] if kind == "binlog" else i.name: (i.action, i.reason)
        for i in _items(plan, kind)
    }


def _items(plan: Plan, kind: str) -> list[PlanItem]:
    return [i for i in plan.items if i.kind == kind]


def _keys(plan: Plan, action: str) -> set[str]:
    return {k for i in plan.items if i.action == action for k in i.keys}


def _listing(catalog: Catalog) -> set[str]:
    return {i.key for i in catalog.store.list(catalog.host_prefix + "/")}


def _pitr(catalog: Catalog, gpg_keys, datadir: Path, target: PitrTarget):
    return point_in_time_restore(
        PitrRequest(
            catalog=catalog,
            target_datadir=datadir,
            target=target,
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )
    )


def _restored_ids(datadir: Path, basedir: Path, db: str) -> frozenset[int]:
    with SandboxServer.on_datadir(datadir, basedir, server_id=978) as restored:
        restored.start()
        return frozenset(r[0] for r in restored.query(f"SELECT id FROM `{db}`.t"))
