"""Evidence that a restored copy holds the source's data, from sources other than the backup's
own metadata files: every InnoDB page checksum (innochecksum, offline), the source's tables as
it reported them at backup time (catalog/shape.py) against the restored copy, and InnoDB's own
record of its last binlog position against the manifest. Each check gives a CheckResult; the
restore test (restore_test.py) runs them and names the ones that failed.

Tolerances of the source-shape comparison (InnoDB row counts and sizes are statistics, and the
restored copy reads the statistics persisted at the backup while the source reports its live
ones):
- tables: every table the source reported both before and after the backup exists in the
  restored copy with the same engine, and the restored copy has no table the source did not
  report (tables created or dropped while the backup ran may be either way);
- rows: within ROW_TOLERANCE of the source's estimate, or ROW_SLACK rows;
- data + index bytes: within a factor SIZE_FACTOR of the source's, or SIZE_SLACK bytes;
- GTID: in every domain, the restored copy's position lies between the positions the server
  reported right before and right after the backup.
"""

from __future__ import annotations

__all__ = ["CheckResult"]

import logging
import os
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..catalog.manifest import Manifest
from ..catalog.shape import SourceShape, TableShape
from ..common import children
from ..common.values import binlog_number, parse_gtid_pos
from ..db.sandbox import SandboxServer, quote_ident
from ..db.shape import table_shapes, tables_sql

log = logging.getLogger(__name__)

ROW_TOLERANCE = 0.5  # |restored - source| <= 50 % of the source's estimate ...
ROW_SLACK = 1000  # ... or this many rows (small tables, statistics of a few pages)
SIZE_FACTOR = 2.0  # restored data + index bytes within [source / 2, source * 2] ...
SIZE_SLACK = 4 * 1024 * 1024  # ... or this many bytes
MAX_ANALYZED = 1000  # tables re-analyzed on the restored copy when their statistics look stale
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
                f"{binary} not found on this worker: it comes with mariadb-server (package mariadb-server-core)"
            ],
        )
    bad = [f"{p.relative_to(datadir)}: {s}" for p, s in zip(files, said, strict=True) if s is not None]
    size = sum(p.stat().st_size for p in files)
    note = f"{len(files)} tablespace(s), {size // (1024 * 1024)} MiB"
    reasons = [f"innochecksum found bad pages in {len(bad)} tablespace(s): {_listed(bad)}"] if bad else []
    return CheckResult.of("innochecksum", reasons, note, tablespaces=len(files), bad=bad[:50])


# -- the source's shape ----------------------------------------------------------------------------


def rows_close(source: int, restored: int) -> bool:
    return abs(restored - source) <= max(ROW_SLACK, ROW_TOLERANCE * source)


def size_close(source: int, restored: int) -> bool:
    low, high = source / SIZE_FACTOR - SIZE_SLACK, source * SIZE_FACTOR + SIZE_SLACK
    return low <= restored <= high


def compare_shape(shape: SourceShape, restored: list[TableShape]) -> list[str]:
    """Every way the restored tables differ from what the source reported (tolerances: module doc)."""
    changed = set(shape.changed_during_backup)
    have = {t.name: t for t in restored}
    recorded = {t.name: t for t in shape.tables}
    missing, engines, rows, sizes = [], [], [], []
    for name, src in recorded.items():
        if name in changed:
            continue
        got = have.get(name)
        if got is None:
            missing.append(name)
            continue
        if got.engine.lower() != src.engine.lower():
            engines.append(f"{name} is {got.engine or '?'}, the source's was {src.engine or '?'}")
        if not rows_close(src.rows, got.rows):
            rows.append(f"{name}: about {got.rows} rows, the source reported {src.rows}")
        source_bytes, restored_bytes = src.data_bytes + src.index_bytes, got.data_bytes + got.index_bytes
        if not size_close(source_bytes, restored_bytes):
            sizes.append(
                f"{name}: {restored_bytes} bytes of data and indexes, the source reported {source_bytes}"
            )
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
        problems.append(f"row counts differ beyond the tolerance: {_listed(rows)}")
    if sizes:
        problems.append(f"sizes differ beyond the tolerance: {_listed(sizes)}")
    return problems


def gtid_window(shape: SourceShape, restored_gtid: str | None) -> list[str]:
    """The restored GTID must lie between what the server reported before and after the backup."""
    try:
        before, after = parse_gtid_pos(shape.gtid_before), parse_gtid_pos(shape.gtid_after)
        got = parse_gtid_pos(restored_gtid)
    except ValueError:
        return []  # MySQL GTID sets: compared as text by the position check
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


def shape_check(shape: SourceShape | None, server: SandboxServer, restored_gtid: str | None) -> CheckResult:
    """The restored copy (a running sandbox) against the source's shape. The restored copy reads
    the InnoDB statistics persisted at the backup, which may predate the table's last big change:
    tables outside the tolerance get a fresh ANALYZE (on the copy, never the source) and a second look."""
    if shape is None:
        return CheckResult.skipped(
            "source_shape", "the manifest records no source shape (the backup was taken by an older version)"
        )
    restored = table_shapes(server.query(tables_sql()))
    stale = [t for t in restored if t.engine.lower() == "innodb" and _off(shape, t)]
    for table in stale[:MAX_ANALYZED]:
        server.query(f"ANALYZE TABLE {quote_ident(table.schema_name)}.{quote_ident(table.table)}")
    if stale:
        restored = table_shapes(server.query(tables_sql()))
    reasons = compare_shape(shape, restored) + gtid_window(shape, restored_gtid)
    note = (
        f"{len(shape.tables)} table(s) reported by the source"
        + (
            f", {len(shape.changed_during_backup)} changed during the backup"
            if shape.changed_during_backup
            else ""
        )
        + (f", {min(len(stale), MAX_ANALYZED)} re-analyzed" if stale else "")
        + f"; GTID {shape.gtid_before or '-'} .. {shape.gtid_after or '-'}"
    )
    return CheckResult.of(
        "source_shape", reasons, note, tables=len(shape.tables), restored_tables=len(restored)
    )


def _off(shape: SourceShape, restored: TableShape) -> bool:
    src = next((t for t in shape.tables if t.name == restored.name), None)
    if src is None:
        return False
    return not rows_close(src.rows, restored.rows) or not size_close(
        src.data_bytes + src.index_bytes, restored.data_bytes + restored.index_bytes
    )


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
