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
        "an object missing, damaged (sha256) or not decryptable; a prepare that fails",
        "-",
    ),
    CheckInfo(
        "innochecksum",
        "all",
        "a page with a wrong checksum in any tablespace, pages no query reads included",
        "a page with a valid checksum but the wrong content (a tablespace from an older backup); rows lost "
        "without damage",
    ),
    CheckInfo(
        "check_table",
        f"quick: {QUICK_SAMPLE} random tables; full, deep: all",
        "damaged index pages, index and row mismatches",
        "rows lost alike from every index; at quick, the tables not in the sample",
    ),
    CheckInfo(
        "canary",
        "all",
        "a replica backed up before it applied the heartbeat its source wrote at backup start (stopped, "
        "or further behind than heartbeat_wait)",
        "-",
    ),
    CheckInfo(
        "row_counts",
        "all",
        "a count off by even one row in a table the backup counted (COUNT(*) on the source in a snapshot "
        "at the backup's own point, smallest tables first within impact.row_count_seconds): a table "
        "emptied, 1 % lost, a tablespace from an older backup",
        "tables the budget left uncounted (the report says how many); rows changed in place",
    ),
    CheckInfo(
        "position",
        "all",
        "binlog coordinates or GTID of the copy other than the manifest's; InnoDB's record of its last "
        "transaction past the manifest's position (a tool that misreported its position)",
        "a position wrong alike in the data and the manifest, inside what the server reported",
    ),
    CheckInfo(
        "source_shape",
        "all",
        "a table missing or extra, an engine changed, a GTID outside what the server reported around "
        "the backup; an uncounted table whose row estimate is off by more than 25 % and 16 rows "
        "(emptied, mostly lost)",
        "under 25 % lost from an uncounted table; uncounted InnoDB tables whose statistics are older "
        "than the source's last start; rows changed in place",
    ),
    CheckInfo(
        "roll_forward",
        "full, deep",
        "a backup that does not fit the host's shipped binlogs (another host's backup, a wrong start "
        "position), a shipped binlog missing, a replay that fails on the copy's rows",
        "damage to rows the binlogs after the backup never touch",
    ),
    CheckInfo(
        "replica_checksum",
        "deep",
        "any row that differs from the source (1 % of an uncounted table lost), in every table "
        "pt-table-checksum reads, once the copy caught up as the source's replica",
        "a damaged secondary-index page (pt-table-checksum reads rows by the primary key); the mysql, "
        "sys, heartbeat and percona schemas",
    ),
)


def coverage_markdown() -> str:
    """CHECKS as a markdown table."""
    rows = [f"| `{c.name}` | {c.levels} | {c.catches} | {c.misses} |" for c in CHECKS]
    head = ["| check | levels | catches | a pass does not rule out |", "| --- | --- | --- | --- |"]
    return "\n".join(head + rows) + "\n"
