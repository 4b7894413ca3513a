"""Evidence that a restored copy holds the source's data, from sources other than the backup's
own metadata files: every InnoDB page checksum (innochecksum, offline), exact row counts taken on
the source at the backup's own point (core/db/rowcounts.py), the source's tables as it reported
them at backup time (catalog/shape.py) against the restored copy, and InnoDB's own record of its
last binlog position against the manifest. Each check gives a CheckResult; the restore test
(restore_test.py) runs them and names the ones that failed.

`row_counts`: every table the backup counted has exactly that many rows in the restored copy.

`source_shape` (statistics, for what was not counted exactly):
- tables: every table the source reported both before and after the backup exists in the
  restored copy with the same engine, and the restored copy has no table the source did not
  report (tables created or dropped while the backup ran may be either way);
- rows of the tables not counted exactly: the restored copy's estimate, after a fresh ANALYZE on
  the copy, within ROW_TOLERANCE of the larger of it and the source's plus STATS_LAG_ROWS (a table
  of 1000 rows that came back empty fails). The source's TABLE_ROWS is InnoDB's n_rows, which every
  insert and delete moves, so it stays close after a bulk load, a TRUNCATE or a mass DELETE; but
  reopening a table reloads the persisted estimate, which lags by up to the changes InnoDB lets pass
  before it recounts (16 + 10 %; the 5,000-table case of the matrix met it: tables evicted from
  the cache), and a restart may reload one from before such a change: InnoDB tables whose
  statistics are older than the source's last start (SourceShape.stale_statistics) are not compared;
- sizes are not compared: data_length and index_length change only when InnoDB recomputes its
  statistics (seconds to minutes after a bulk load, or never before a restart), so the source's
  can be a thousand times off what the copy holds. The detection matrix (docs/BENCHMARKS.md)
  found no fault that sizes caught and the row counts or estimates missed;
- GTID: in every domain, the restored copy's position lies between the positions the server
  reported right before and right after the backup (MySQL: the restored GTID set holds the set
  executed before the backup and lies within the set executed after it).
"""

from __future__ import annotations

__all__ = ["CheckResult"]

import logging
import os
import struct
import subprocess
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..catalog.manifest import Manifest
from ..catalog.shape import SourceShape, TableShape
from ..common import children
from ..common.values import GtidSet, binlog_number, gtid_form, parse_gtid_pos
from ..db.sandbox import SandboxServer, quote_ident
from ..db.shape import table_shapes, tables_sql

log = logging.getLogger(__name__)

ROW_TOLERANCE = 0.25  # estimates agree within 25 % of the larger (the matrix: docs/BENCHMARKS.md) ...
# ... plus the changes InnoDB lets pass before it recounts (16 + 10 %): a table evicted from its
# cache and reopened reloads the persisted estimate, which may lag the table by that much.
STATS_LAG_ROWS = 16
ANALYZE_BATCH = 100  # tables per ANALYZE statement on the restored copy
MAX_LISTED = 5  # problems named per check; the count is always exact
TRX_SYS_PAGE = 5  # of the system tablespace: where the doublewrite buffer is described
DOUBLEWRITE_FROM_END = 200  # TRX_SYS_DOUBLEWRITE: this many bytes before the page's end
DOUBLEWRITE_MAGIC = 536853855
INNODB_POSITION_FILE = "xtrabackup_binlog_pos_innodb"  # written by prepare from InnoDB's trx header

Status = Literal["pass", "fail", "skipped"]


@dataclass
class CheckResult:
    """One check of a restore test: what it compared, and why it failed."""

    name: str
    status: Status
    reasons: list[str] = field(default_factory=list)
    note: str = ""  # what was compared, or why the check did not run
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, reasons: list[str], note: str = "", **detail: Any) -> CheckResult:
        return cls(name, "fail" if reasons else "pass", list(reasons), note, dict(detail))

    @classmethod
    def skipped(cls, name: str, why: str) -> CheckResult:
        return cls(name, "skipped", [], why)

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _listed(items: list[str]) -> str:
    more = f" (and {len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else ""
    return "; ".join(items[:MAX_LISTED]) + more


# -- innochecksum ----------------------------------------------------------------------------------


def tablespaces(datadir: Path) -> list[Path]:
    """Every InnoDB tablespace of a datadir: the system tablespace, undo tablespaces, .ibd files."""
    found = sorted(p for p in datadir.glob("ibdata*") if p.is_file())
    found += sorted(p for p in datadir.glob("undo[0-9]*") if p.is_file())
    for root, _dirs, files in os.walk(datadir):
        found += sorted(Path(root) / f for f in files if f.endswith(".ibd"))
    return found


def doublewrite_pages(path: Path) -> tuple[int, set[int]]:
    """(page size, pages of the doublewrite buffer) of a system tablespace, from its TRX_SYS page;
    (16384, empty) when there is none. Its pages are copies of other tablespaces' pages, which
    innochecksum 10.11 reports as invalid ("page id mismatch"); InnoDB checks them itself at recovery."""
    try:
        with open(path, "rb") as fh:
            for size in (16384, 4096, 8192, 32768, 65536):
                fh.seek(TRX_SYS_PAGE * size + size - DOUBLEWRITE_FROM_END + 10)
                raw = fh.read(12)
                if len(raw) == 12:
                    magic, first, second = struct.unpack(">III", raw)
                    if magic == DOUBLEWRITE_MAGIC:
                        return size, {*range(first, first + 64), *range(second, second + 64)}
    except OSError:
        pass
    return 16384, set()


def _ranges(skip: set[int], pages: int) -> list[tuple[int, int]]:
    """Inclusive page ranges of 0..pages-1 without the pages in `skip`."""
    ranges, start = [], None
    for page in range(pages):
        if page in skip:
            if start is not None:
                ranges.append((start, page - 1))
                start = None
        elif start is None:
            start = page
    if start is not None:
        ranges.append((start, pages - 1))
    return ranges


def _innochecksum_one(binary: str, path: Path, system: bool) -> str | None:
    """None when every page's checksum is right, else what innochecksum said."""
    argvs = [[binary, str(path)]]
    if system:
        size, skip = doublewrite_pages(path)
        if skip:
            pages = path.stat().st_size // size
            argvs = [
                [binary, f"--start-page={a}", f"--end-page={b}", str(path)] for a, b in _ranges(skip, pages)
            ]
    for argv in argvs:
        proc = children.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            said = " ".join((proc.stdout + " " + proc.stderr).split())
            return said[:300] or f"exit status {proc.returncode}"
    return None


def innochecksum_check(datadir: Path, binary: str = "innochecksum", workers: int = 2) -> CheckResult:
    """innochecksum over every tablespace of a datadir no server has open (it reads the files
    offline: run it before the sandbox starts). Pages that CHECK TABLE never reads (free pages,
    change-buffer bitmaps, undo) are checked too; the system tablespace's doublewrite buffer is not
    (doublewrite_pages)."""
    files = tablespaces(datadir)
    if not files:
        return CheckResult.of("innochecksum", [f"no InnoDB tablespace found in {datadir}"])
    try:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            said = list(pool.map(lambda p: _innochecksum_one(binary, p, p.name == "ibdata1"), files))
    except FileNotFoundError:
        return CheckResult.of(
            "innochecksum",
            [
                f"{binary} not found on this worker: it comes with the server (package mariadb-server-core or mysql-server-core)"
            ],
        )
    bad = [f"{p.relative_to(datadir)}: {s}" for p, s in zip(files, said, strict=True) if s is not None]
    size = sum(p.stat().st_size for p in files)
    note = f"{len(files)} tablespace(s), {size // (1024 * 1024)} MiB"
    reasons = [f"innochecksum found bad pages in {len(bad)} tablespace(s): {_listed(bad)}"] if bad else []
    return CheckResult.of("innochecksum", reasons, note, tablespaces=len(files), bad=bad[:50])


# -- exact row counts -----------------------------------------------------------------------------


def row_counts_check(server: SandboxServer, manifest: Manifest) -> CheckResult:
    """COUNT(*) of every table the backup counted (Manifest.table_rows), compared exactly."""
    counted = manifest.table_rows
    how = manifest.extra.get("row_counts") or {}
    if not counted:
        why = how.get("skipped") or "the backup recorded none (taken by an older version)"
        return CheckResult.skipped("row_counts", f"no exact row counts: {why}")
    # Names come from the manifest, which anyone with write access to the bucket can edit: only
    # names the restored copy itself lists reach SQL, and as identifiers.
    present = {f"{s}.{t}": (str(s), str(t)) for s, t in server.query(_BASE_TABLES_SQL)}
    wrong, missing, unreadable = [], [], []
    for name, expected in counted.items():
        if name not in present:
            missing.append(name)
            continue
        schema, table = present[name]
        try:
            got = int(server.query(f"SELECT COUNT(*) FROM {quote_ident(schema)}.{quote_ident(table)}")[0][0])
        except Exception as exc:  # noqa: BLE001 - a table the copy cannot read is this check's failure
            unreadable.append(f"{name}: {exc}")
            continue
        if got != expected:
            wrong.append(f"{name}: {got} rows, {expected} at the backup")
    found = [
        (wrong, f"row counts differ in {{n}} of {len(counted)} table(s)"),
        (missing, "{n} counted table(s) missing from the restored copy"),
        (unreadable, "{n} counted table(s) cannot be counted in the copy"),
    ]
    reasons = [f"{text.format(n=len(items))}: {_listed(items)}" for items, text in found if items]
    left = how.get("not_counted")
    note = (
        f"{len(counted)} table(s) counted on the source at {how.get('at') or 'the backup point'}, compared exactly"
        + (
            f"; {left} larger table(s) left to source_shape (budget {how.get('budget_seconds')}s)"
            if left
            else ""
        )
    )
    return CheckResult.of("row_counts", reasons, note, compared=len(counted), not_counted=left or 0)


_BASE_TABLES_SQL = (
    "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
)


# -- the source's shape ----------------------------------------------------------------------------


def rows_close(source: int, restored: int) -> bool:
    """Two row estimates of one table agree: within ROW_TOLERANCE of the larger, and the rows
    InnoDB's own recount rule lets its estimate lag (an empty copy of a table of 1000 rows fails)."""
    return abs(restored - source) <= ROW_TOLERANCE * max(source, restored) + STATS_LAG_ROWS


def not_estimated(shape: SourceShape, exact: Collection[str] = ()) -> set[str]:
    """Tables whose row estimates are not compared: counted exactly (row_counts), or InnoDB tables
    whose statistics the source may not have recounted since they changed (stale_statistics;
    unknown: every InnoDB table)."""
    if shape.stale_statistics is None:
        return set(exact) | {t.name for t in shape.tables if t.engine.lower() == "innodb"}
    return set(exact) | set(shape.stale_statistics)


def compare_shape(shape: SourceShape, restored: list[TableShape], exact: Collection[str] = ()) -> list[str]:
    """Every way the restored tables differ from what the source reported (tolerances: module
    doc). Tables in `exact` were counted exactly (row_counts): their estimates are not compared,
    nor those of not_estimated()."""
    changed = set(shape.changed_during_backup)
    have = {t.name: t for t in restored}
    recorded = {t.name: t for t in shape.tables}
    exact = not_estimated(shape, exact)
    missing, engines, rows = [], [], []
    for name, src in recorded.items():
        if name in changed:
            continue
        got = have.get(name)
        if got is None:
            missing.append(name)
            continue
        if got.engine.lower() != src.engine.lower():
            engines.append(f"{name} is {got.engine or '?'}, the source's was {src.engine or '?'}")
        if name not in exact and not rows_close(src.rows, got.rows):
            rows.append(f"{name}: about {got.rows} rows, the source reported {src.rows}")
    extra = [] if shape.truncated else sorted(set(have) - set(recorded) - changed)
    problems = []
    if missing:
        problems.append(f"{len(missing)} table(s) the source had are missing: {_listed(missing)}")
    if extra:
        hint = (
            " (the source reported no table at all: the backup account may lack SELECT, and "
            "information_schema lists only the tables an account may read)"
            if not recorded
            else ""
        )
        problems.append(f"{len(extra)} table(s) the source did not have: {_listed(extra)}{hint}")
    if engines:
        problems.append(f"engines differ: {_listed(engines)}")
    if rows:
        problems.append(
            f"row estimates differ by more than {ROW_TOLERANCE:.0%} in {len(rows)} table(s) not counted exactly: "
            f"{_listed(rows)}"
        )
    return problems


def gtid_window(shape: SourceShape, restored_gtid: str | None) -> list[str]:
    """The restored GTID must lie between what the server reported before and after the backup."""
    try:
        if gtid_form(restored_gtid) == "mysql":
            return mysql_gtid_window(shape, str(restored_gtid))
    except ValueError:
        return []  # neither form: the position check names it
    try:
        before, after = parse_gtid_pos(shape.gtid_before), parse_gtid_pos(shape.gtid_after)
        got = parse_gtid_pos(restored_gtid)
    except ValueError:
        return []
    problems = []
    for domain, gtid in got.items():
        low, high = before.get(domain), after.get(domain)
        if high is None or gtid.seq > high.seq:
            problems.append(
                f"domain {domain}: the restored copy is at {gtid}, after what the server reported when the backup "
                f"ended ({high or 'nothing in that domain'})"
            )
        elif low is not None and gtid.seq < low.seq:
            problems.append(
                f"domain {domain}: the restored copy is at {gtid}, before what the server reported when the backup "
                f"started ({low})"
            )
    for domain, gtid in before.items():
        if domain not in got:
            problems.append(
                f"domain {domain}: the server was at {gtid} before the backup, the restored copy has no GTID there"
            )
    return problems


def mysql_gtid_window(shape: SourceShape, restored_gtid: str) -> list[str]:
    """MySQL: the restored copy's GTID set holds every transaction the server had executed before the
    backup began and none it had not executed when it ended (before <= restored <= after)."""
    try:
        got = GtidSet.parse(restored_gtid, "the restored GTID set")
        before = GtidSet.parse(shape.gtid_before, "the GTID set before the backup")
        after = GtidSet.parse(shape.gtid_after, "the GTID set after the backup")
    except ValueError as exc:
        return [str(exc)]
    problems = []
    if shape.gtid_after and not got <= after:
        problems.append(
            f"the restored copy holds {got - after}, which the server had not executed when the backup ended "
            f"({after or 'nothing'})"
        )
    if not before <= got:
        problems.append(
            f"the restored copy lacks {before - got}, which the server had executed before the backup started"
        )
    return problems


def shape_check(
    shape: SourceShape | None,
    server: SandboxServer,
    restored_gtid: str | None,
    exact: Collection[str] = (),
) -> CheckResult:
    """The restored copy (a running sandbox) against the source's shape. The copy's InnoDB
    statistics are those persisted before the backup (a table bulk-loaded since looks empty, one
    emptied since looks full): every InnoDB table compared by estimate gets a fresh ANALYZE on the
    copy (never the source, never binlogged) first."""
    if shape is None:
        return CheckResult.skipped(
            "source_shape", "the manifest records no source shape (the backup was taken by an older version)"
        )
    restored = table_shapes(server.query(tables_sql()))
    recorded = {t.name for t in shape.tables}
    skip = not_estimated(shape, exact)
    estimated = [
        t for t in restored if t.engine.lower() == "innodb" and t.name in recorded and t.name not in skip
    ]
    for i in range(0, len(estimated), ANALYZE_BATCH):
        names = ", ".join(
            f"{quote_ident(t.schema_name)}.{quote_ident(t.table)}" for t in estimated[i : i + ANALYZE_BATCH]
        )
        server.query(f"ANALYZE NO_WRITE_TO_BINLOG TABLE {names}")
    if estimated:
        restored = table_shapes(server.query(tables_sql()))
    reasons = compare_shape(shape, restored, exact) + gtid_window(shape, restored_gtid)
    by_estimate = len([t for t in shape.tables if t.name not in skip])
    stale = len(skip - set(exact))
    note = (
        f"{len(shape.tables)} table(s) reported by the source, {by_estimate} compared by row estimate"
        + (f" ({len(estimated)} re-analyzed on the copy)" if estimated else "")
        + (f", {stale} not (statistics from before the source's last start)" if stale else "")
        + (
            f", {len(shape.changed_during_backup)} changed during the backup"
            if shape.changed_during_backup
            else ""
        )
        + f"; GTID {shape.gtid_before or '-'} .. {shape.gtid_after or '-'}"
    )
    return CheckResult.of(
        "source_shape",
        reasons,
        note,
        tables=len(shape.tables),
        restored_tables=len(restored),
        by_estimate=by_estimate,
        largest_deviation=largest_deviation(shape, restored, skip),
    )


def largest_deviation(shape: SourceShape, restored: list[TableShape], exact: Collection[str] = ()) -> float:
    """The largest |restored - source| / max(restored, source) among the tables compared by
    estimate: what the detection matrix records to justify ROW_TOLERANCE."""
    have = {t.name: t.rows for t in restored}
    ratios = [
        abs(have[t.name] - t.rows) / max(have[t.name], t.rows)
        for t in shape.tables
        if t.name in have
        and t.name not in exact
        and t.name not in shape.changed_during_backup
        and max(have[t.name], t.rows) > 0
    ]
    return round(max(ratios, default=0.0), 4)


# -- InnoDB's own binlog position ------------------------------------------------------------------


def innodb_position(datadir: Path) -> tuple[str, int] | None:
    """The binlog file and position InnoDB recorded with its last committed transaction (prepare
    writes them to xtrabackup_binlog_pos_innodb); None when the source had no binlog."""
    path = datadir / INNODB_POSITION_FILE
    try:
        parts = path.read_text().split()
    except OSError:
        return None
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return os.path.basename(parts[0]), int(parts[1])


def innodb_position_problems(datadir: Path, manifest: Manifest, checks: dict[str, Any]) -> list[str]:
    """InnoDB's record must not be past the manifest's binlog position: a replay or a replica
    starting there would apply those transactions a second time. It may be before it (writes to
    other engines after the last InnoDB commit move the server's position on)."""
    pos = innodb_position(datadir)
    if pos is None or not manifest.binlog_file or manifest.binlog_position is None:
        return []
    checks["innodb_binlog_position"] = f"{pos[0]}:{pos[1]}"
    try:
        (ibase, inum), (mbase, mnum) = binlog_number(pos[0]), binlog_number(manifest.binlog_file)
    except ValueError:
        return []
    if ibase != mbase or (inum, pos[1]) > (mnum, manifest.binlog_position):
        return [
            f"InnoDB's own record of its last transaction is at {pos[0]}:{pos[1]}, after the manifest's "
            f"{manifest.binlog_file}:{manifest.binlog_position}: the manifest does not describe this data"
        ]
    return []
