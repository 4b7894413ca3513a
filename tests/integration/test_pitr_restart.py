"""PITR across binlogs a server restart closed: one ended by a clean shutdown (a Stop event, no
Rotate naming the next file) and one cut by a SIGKILL (no last event at all). Found by the chaos
run (`restart_db` of the shipping host): the applier's SQL thread learns the next binlog's name
only from a Rotate event, so it stood at the end of the first file and the PITR failed with "the
binlogs end early". Such a window is replayed by the pipe, and says so; a target that is the last
event of the last file (nothing after it for UNTIL to see) is reached by the applier. Both methods
restore exactly the rows committed before the target.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import KnownPoint, commit_known, root_target, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@dataclass
class Restarted:
    catalog: Catalog
    db: str
    points: dict[str, KnownPoint]


@pytest.fixture(scope="module")
def restarted(mariadb_factory, s3_server, gpg_keys) -> Restarted:
    server = mariadb_factory("restarted", root_password=secrets.token_urlsafe(16))
    bucket = s3_server.make_bucket(f"xbp-restart-{secrets.token_hex(6)}")
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )
    db = unique_name("restart")
    server.query(f"CREATE DATABASE `{db}`")
    server.query(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
    backup = dict(kind="full", catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key])
    run_backup(BackupRequest(**backup))
    points = {"A": commit_known(server, db, "A")}
    server.stop()  # a clean shutdown: the binlog ends with a Stop event
    server.start()
    points["B"] = commit_known(server, db, "B")
    server.kill()  # a crash: the binlog ends after its last transaction, nothing more
    server.start()
    points["B2"] = commit_known(server, db, "B2")  # so that the next backup is past B
    run_backup(BackupRequest(**backup))  # C's window starts here: no restart before C
    points["C"] = commit_known(server, db, "C")
    server.kill()  # C is the last event of its binlog
    server.start()
    points["D"] = commit_known(server, db, "D")
    files = {label: point.position.split(":")[0] for label, point in points.items()}
    assert len({files[label] for label in "ABCD"}) == 4, f"each restart opens a new binlog: {files}"
    ship_binlogs(
        ShipRequest(
            catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
    )
    return Restarted(catalog, db, points)


@pytest.mark.parametrize("replay", ["applier", "pipe"])
@pytest.mark.parametrize(("label", "crosses"), [("B", True), ("C", False), ("D", True)])
def test_pitr_across_a_restart_restores_the_rows_committed_before_the_target(
    restarted, gpg_keys, tmp_path: Path, replay, label, crosses
):
    point = restarted.points[label]
    datadir = tmp_path / "restored" / "data"
    report = point_in_time_restore(
        PitrRequest(
            catalog=restarted.catalog,
            target_datadir=datadir,
            target=PitrTarget.at_gtid(point.gtid),
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
            replay=replay,
        )
    )
    assert report.reached_gtid == point.gtid
    assert report.replay == ("pipe" if crosses else replay), (
        "a window across a restart is replayed by the pipe"
    )
    with SandboxServer.on_datadir(datadir, tmp_path / "sb", server_id=978) as restored:
        restored.start()
        ids = {r[0] for r in restored.query(f"SELECT id FROM `{restarted.db}`.t")}
        gtid = str(restored.query("SELECT @@gtid_slave_pos")[0][0] or "")
    assert ids == set(point.rows)
    assert gtid == point.gtid
