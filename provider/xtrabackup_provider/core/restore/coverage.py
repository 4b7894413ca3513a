"""What each check of a restore test can and cannot catch, per level: the table a user reads
before trusting a green result. The HTML report renders it (core/report/html.py), the docs hold
it (docs/BENCHMARKS.md, kept equal by a test), and the detection matrix measures it
(tests/integration/test_detection_matrix.py).
"""

from __future__ import annotations

from dataclasses import dataclass

QUICK_SAMPLE = 50  # tables CHECK TABLE reads at level quick


@dataclass(frozen=True)
class CheckInfo:
    name: str
    levels: str  # which levels run it
    catches: str
    misses: str  # what a pass does not rule out


# What a green result proves, per check, as measured by the detection matrix
# (tests/integration/test_detection_matrix.py, docs/BENCHMARKS.md).
CHECKS = (
    CheckInfo(
        "chain",
        "all",
        "a missing or mismatched link (an incremental skipped, an LSN gap, another server's link), "
        "from the manifests before anything is downloaded",
        "-",
    ),
    CheckInfo(
        "restore",
        "all",
        "an object missing, damaged (sha256), not decryptable; a prepare that fails",
        "-",
    ),
    CheckInfo(
        "innochecksum",
        "all",
        "a page with a wrong checksum in any tablespace, pages no query reads included",
        "pages with a valid checksum but wrong content (a table from another backup), lost rows",
    ),
    CheckInfo(
        "check_table",
        f"quick: {QUICK_SAMPLE} random tables; full, deep: all",
        "broken index structures and index/row mismatches",
        "rows missing consistently from every index; at quick, the tables not sampled",
    ),
    CheckInfo(
        "canary",
        "all",
        "a replica backed up before it applied the heartbeat written at backup start (stopped, far behind)",
        "-",
    ),
    CheckInfo(
        "row_counts",
        "all",
        "any table counted at backup time (smallest first, impact.row_count_seconds on the source, at the "
        "backup's own point) whose row count differs by even one: emptied, rows lost, an older copy",
        "tables left uncounted by the budget; rows changed in place with the same count",
    ),
    CheckInfo(
        "position",
        "all",
        "restored binlog coordinates or GTID other than the manifest's; InnoDB's last transaction past "
        "the manifest's position (a backup recorded at the wrong position)",
        "a position wrong the same way in the data and the manifest but within what the server reported",
    ),
    CheckInfo(
        "source_shape",
        "all",
        "a table missing or extra, an engine changed, a GTID outside what the server reported around "
        "the backup; an uncounted table whose row estimate is off by more than 25 % (emptied, mostly lost)",
        "losses under 25 % in uncounted tables; content changes; tables created or dropped during the backup",
    ),
    CheckInfo(
        "roll_forward",
        "full, deep",
        "a backup that does not fit the host's shipped binlogs (another host's backup, a wrong start "
        "position), a shipped binlog missing, a replay that fails on the copy's rows",
        "data the binlogs after the backup never touch",
    ),
    CheckInfo(
        "replica_checksum",
        "deep",
        "any row that differs from the source, in every table pt-table-checksum reads, after the copy "
        "caught up as the source's replica",
        "the mysql, sys, heartbeat and percona schemas",
    ),
)


def coverage_markdown() -> str:
    """CHECKS as a markdown table."""
    rows = [f"| `{c.name}` | {c.levels} | {c.catches} | {c.misses} |" for c in CHECKS]
    head = ["| check | levels | catches | a pass does not rule out |", "| --- | --- | --- | --- |"]
    return "\n".join(head + rows) + "\n"
