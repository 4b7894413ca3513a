"""Exact row counts are the backup's own: read in the snapshot opened when the tool logs that it holds
BACKUP STAGE BLOCK_COMMIT, and kept only when that snapshot is at the backup's binlog position."""

from __future__ import annotations

from helpers import root_target, unique_name
from xtrabackup_provider.core.db.rowcounts import SnapshotCounter

LOCKED = "[00] 2026-12-03 08:00:00 Acquired locks for BACKUP STAGE BLOCK_COMMIT"


def _position(server) -> tuple[str, int]:
    file, pos = server.query("SHOW MASTER STATUS")[0][:2]
    return str(file), int(pos)


def test_counts_see_the_snapshot_and_are_kept_only_at_the_backups_position(mariadb):
    db = unique_name("rc")
    mariadb.execute_script(
        f"CREATE DATABASE `{db}`; CREATE TABLE `{db}`.t (id INT PRIMARY KEY) ENGINE=InnoDB;"
        f"INSERT INTO `{db}`.t SELECT seq FROM `{db}`.seq_1_to_10;"
        f"CREATE TABLE `{db}`.aria (id INT PRIMARY KEY) ENGINE=Aria;"
    )
    with SnapshotCounter(root_target(mariadb), budget_seconds=5) as counter:
        counter.on_line("[00] 2026-12-03 08:00:00 Starting BACKUP STAGE BLOCK_COMMIT")  # not yet granted
        counter.on_line(LOCKED)
        at_backup = _position(mariadb)  # nothing wrote since: the position the backup records
        mariadb.query(f"INSERT INTO `{db}`.t VALUES (11), (12)")  # after the backup's point
        counts = counter.finish(*at_backup)
    assert counts.rows[f"{db}.t"] == 10, "rows committed after the snapshot are not the backup's"
    assert f"{db}.aria" not in counts.rows, "only InnoDB counts are in the snapshot"
    assert counts.summary["at"] == f"{at_backup[0]}:{at_backup[1]}" and counts.summary["not_counted"] == 0

    with SnapshotCounter(root_target(mariadb), budget_seconds=5) as late:
        before = _position(mariadb)  # the backup's position ...
        mariadb.query(f"INSERT INTO `{db}`.t VALUES (13)")  # ... a commit, then the snapshot
        late.on_line(LOCKED)
        missed = late.finish(*before)
    assert missed.rows == {} and "opened after the backup lock was released" in missed.summary["skipped"]

    never = SnapshotCounter(root_target(mariadb), budget_seconds=5)
    with never:
        assert never.finish(*before).summary["skipped"].startswith("mariabackup never logged")
    with SnapshotCounter(root_target(mariadb), 0) as off:
        off.on_line(LOCKED)
        assert off.finish(*before).summary == {"skipped": "impact.row_count_seconds is 0"}
    xtrabackup = SnapshotCounter(root_target(mariadb), 5, flavour="xtrabackup")
    with xtrabackup:
        assert "xtrabackup has no BACKUP STAGE" in xtrabackup.finish(*before).summary["skipped"]
