"""`restore --to-time` over the binlogs of a replica that was killed (SIGKILL) and restarted.

Found by the chaos run (seed 390202): transactions the source committed just before T reached the
replica only after its restart. They sit in the replica's next binlog, stamped with the source's
(earlier) time, behind that file's Format_description event, which is stamped at the restart,
after T. A time stop that looked at every event (as `mariadb-binlog --stop-datetime` does) ended
at that format event: the pipe silently left those transactions out, and the applier's plan
ended in the crashed binlog, which has no Rotate event, so the SQL thread read on into the next
relay log under the old name and overran its UNTIL position. What a DBA means by --to-time on a
replica's binlogs: every transaction the source committed before T is in, none after, whichever
replay method runs.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import (
    KnownPoint,
    commit_known,
    iso_utc,
    root_target,
    slave_status,
    start_replication,
    unique_name,
    wait_caught_up,
)
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@dataclass
class KilledReplica:
    catalog: Catalog
    db: str
    crashed: KnownPoint  # A: the last transaction in the binlog the crash cut, before B
    before: KnownPoint  # B: committed on the source while the replica was dead, before T
    after: KnownPoint  # C: committed after T


@pytest.fixture(scope="module")
def killed_replica(mariadb_factory, s3_server, gpg_keys) -> KilledReplica:
    source = mariadb_factory("tp-src", root_password=secrets.token_urlsafe(16))
    replica = mariadb_factory("tp-rep", root_password=secrets.token_urlsafe(16))
    start_replication(source, replica)
    bucket = s3_server.make_bucket(f"xbp-tpitr-{secrets.token_hex(6)}")
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c2", "r1"
    )
    db = unique_name("tpitr")
    source.query(f"CREATE DATABASE `{db}`")
    source.query(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
    wait_caught_up(source, replica)
    run_backup(
        BackupRequest(
            kind="full", catalog=catalog, target=root_target(replica), public_keys=[gpg_keys.public_key]
        )
    )
    for n in range(19):  # some transactions in the replica's binlog before the crash
        source.query(f"INSERT INTO `{db}`.t (v) VALUES ('a{n}')")
    crashed = commit_known(source, db, "A")
    wait_caught_up(source, replica)
    replica.kill()  # a crash: its binlog ends after its last transaction, without a Rotate event
    before = commit_known(source, db, "B")  # returns once the clock is past B's second
    while time.time() < before.time + 1.2:  # the restart (its new binlog's format event) is stamped after T
        time.sleep(0.05)
    replica.start()
    if slave_status(replica).get("Slave_SQL_Running") != "Yes":
        replica.query("START SLAVE")
    wait_caught_up(source, replica)  # B reaches the replica now, in its new binlog, stamped before T
    after = commit_known(source, db, "C")
    for n in range(60):  # the new binlog grows past the crashed one's end (the chaos run's overrun)
        source.query(f"INSERT INTO `{db}`.t (v) VALUES (REPEAT('c{n}', 20))")
    wait_caught_up(source, replica)
    ship_binlogs(
        ShipRequest(
            catalog=catalog, target=root_target(replica), public_keys=[gpg_keys.public_key], flush=True
        )
    )
    return KilledReplica(catalog, db, crashed, before, after)


@pytest.mark.parametrize("replay", ["applier", "pipe"])
@pytest.mark.parametrize("upto", ["crashed", "before"])
def test_to_time_on_a_restarted_replica_restores_what_the_source_committed_before_it(
    killed_replica, gpg_keys, tmp_path: Path, replay, upto
):
    """`before`: T after B (in the new binlog behind a format event stamped after T): A and B
    are in. `crashed`: T after A, before B: the replay ends with the binlog the crash cut, and
    the next one (shipped, holding B) must not be read on into."""
    k = killed_replica
    point = getattr(k, upto)
    datadir = tmp_path / "restored" / "data"
    report = point_in_time_restore(
        PitrRequest(
            catalog=k.catalog,
            target_datadir=datadir,
            target=PitrTarget.at_time(iso_utc(point.time)),
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
            replay=replay,
        )
    )
    with SandboxServer.on_datadir(datadir, tmp_path / "sb", server_id=979) as restored:
        restored.start()
        ids = {r[0] for r in restored.query(f"SELECT id FROM `{k.db}`.t")}
    assert ids == set(point.rows), (
        f"rows committed before T missing: {sorted(set(point.rows) - ids)}; "
        f"after T present: {sorted(ids - set(point.rows))}"
    )
    assert report.reached_gtid == point.gtid
