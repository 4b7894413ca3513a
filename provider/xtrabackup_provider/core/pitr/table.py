"""Table-level restore: tables as they were at a point in time (or in a backup), put into a live
server under new names with InnoDB transportable tablespaces, touching nothing else there.

The steps (`restore_tables`):
0. Names, before anything is fetched: each table and new name is `schema.table` of letters,
   digits, `_` and `$`, 64 characters at most each (the default `<table>_restored` included; a
   trailing newline is refused, not taken as the end of the name), and each table is in the
   backup's own table list (its manifest's source shape; with a point in time, a table missing
   there must be named by a shipped binlog after the backup: created or renamed later).
1. Live checks, before anything is restored: every new name is free and its schema exists,
   `innodb_file_per_table` is ON, the account may skip the binlog (`sql_log_bin=0`), and the live
   datadir is on this machine (the files are copied into it, so this runs on the database host).
2. The whole backup chain (and the binlogs up to the target) is restored into a private scratch
   datadir (core/restore/chain.py, core/pitr/recover.py); a socket-only sandbox starts on it.
3. Sandbox: each table must exist and be InnoDB (others are refused by name: dump them from the
   sandbox instead), without FULLTEXT indexes (an imported FTS tablespace is unusable and
   rebuilding the index crashed 10.11) and without sub-partitions. `SHOW CREATE TABLE` gives the
   copy's DDL (the live table may be altered or gone), a digest of every row the expected content;
   `FLUSH TABLES ... FOR EXPORT` writes each tablespace's `.cfg`; `.ibd` + `.cfg` are staged;
   `UNLOCK TABLES`. The page size must be the live server's.
4. Live, one session with `sql_log_bin=0` (CREATE / DISCARD / IMPORT would reach the replicas,
   which have no files to import: they stop) and `foreign_key_checks=0`: `CREATE TABLE` the new
   name from the sandbox DDL (FOREIGN KEY clauses dropped: their names are schema-wide and they
   would tie the copy to the live parent; ROW_FORMAT made explicit: the live default may differ),
   `DISCARD TABLESPACE`, copy the files where the live server keeps the new tablespace (owner and
   group of the schema directory, mode 0660), `IMPORT TABLESPACE`, remove the `.cfg`.
   Partitioned tables (10.11 has no DISCARD for them, nor per-partition syntax): per partition a
   plain table `CREATE ... LIKE` + `REMOVE PARTITIONING` takes the tablespace, then `EXCHANGE
   PARTITION` moves it into the empty partitioned copy (10.11 validates every row doing so).
   Then the copy's digest must equal the sandbox's.
   On any failure every table this run created is dropped again and its files removed; what
   could not be dropped or removed is named in the error, with the statement to run by hand.

MySQL (the live server's version says which; a backup of the other family is refused by name):
steps 2 and 3 run in one sandbox, core/pitr/table_mysql.py (MySQL's PITR: the newest MySQL backup
before the target, restored, the binlogs applied to a MySQL GTID set, a time or a position by
`replay` (the applier, or mysqlbinlog | mysql), then the export from a mysqld started on it). Its dictionary names
tablespaces plainly (information_schema.innodb_tablespaces + innodb_datafiles), and a partitioned
table's files are discarded and imported whole, without the per-partition exchange.

The copies exist on the live server only (unlogged): a logged statement that touches them (an
UPDATE, an ALTER, an `INSERT ... SELECT` in statement format) breaks the replicas; copy rows back
with `SET SESSION binlog_format=ROW` (docs/RUNBOOK.md).
"""

from __future__ import annotations

import difflib
import errno
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import Source, Targets
from ..common.tempdirs import private_dir
from ..db.dialect import Dialect
from ..db.sandbox import SANDBOX_REDO_BYTES, SandboxServer, quote_ident, stop_orphans
from ..db.server import MySQLTarget
from ..db.session import Session
from ..restore.chain import RestoreRequest, plan_chain, read_chain, restore
from ..restore.server_program import ServerProgramError, backup_dialect, check_server_program
from .moments import MomentFilter, MomentsRequest, list_moments
from .plan import PitrError, PitrTarget
from .recover import PitrRequest, point_in_time_restore, read_plan
from .table_mysql import MysqlTablePlan, mysql_sandbox, plan_mysql, table_lease

log = logging.getLogger(__name__)

SANDBOX_SERVER_ID = 4_100_000_001
_NAME = re.compile(r"[A-Za-z0-9_$]{1,64}")  # fullmatch: "$" would admit a trailing newline
MAX_NAME = 64
_FOREIGN_KEY = re.compile(r",\s*CONSTRAINT\s+`(?:[^`]|``)*`\s+FOREIGN KEY[^\n]*", re.I)


class TableRestoreError(RuntimeError):
    """One line naming the table, host or file and what to do; the live server is as it was."""


@dataclass(frozen=True)
class TableName:
    schema: str
    table: str

    @classmethod
    def parse(cls, text: str, what: str) -> TableName:
        schema, dot, table = text.partition(".")
        if not dot or not _NAME.fullmatch(schema) or not _NAME.fullmatch(table):
            raise TableRestoreError(
                f"{what} {text!r}: give schema.table (letters, digits, _ and $ only, 64 at most each)"
            )
        return cls(schema, table)

    def sql(self) -> str:
        return f"`{self.schema}`.`{self.table}`"

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass
class TableRestoreRequest:
    catalog: Catalog
    live: MySQLTarget  # the account from the fleet config that creates the copies
    tables: list[str]  # schema.table as in the backup
    new_names: list[str] = field(default_factory=list)  # schema.table per table; default <table>_restored
    target: PitrTarget | None = None  # None: the backup itself
    backup_id: str | None = None  # None: the newest (before the target)
    private_key: str | None = None
    passphrase: str | None = None
    binary: str | None = None
    binlog_binary: str = "mariadb-binlog"
    scratch_dir: Path | None = None  # holds a full restore of the server; default: the temp dir
    replay: str = "applier"
    replay_threads: int = 4
    max_free_memory_pct: int = 50
    source_name: str = "primary"  # the name of `catalog`'s storage target
    fallbacks: list[Source] = field(default_factory=list)  # further targets (core/catalog/targets.py)


@dataclass
class RestoredTable:
    source: str  # schema.table in the backup
    created: str  # schema.table on the live server
    digest: str  # content_digest(), equal in the sandbox and on the live server
    partitions: list[str] = field(default_factory=list)
    dropped_foreign_keys: list[str] = field(default_factory=list)


@dataclass
class TableRestoreReport:
    backup_id: str
    target: str  # the point in time, or "backup <id>"
    reached_gtid: str
    live: str
    tables: list[RestoredTable] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)  # what came from another storage target, and why
    replay: str = ""  # how the binlogs were applied (applier / pipe; "" when none were)


@dataclass
class _Export:
    source: TableName
    new: TableName
    ddl: str
    columns: list[str]
    digest: str
    partitions: list[str]
    files: dict[str, dict[str, Path]]  # partition name ("" for none) -> ".ibd" / ".cfg" -> staged copy


def restore_tables(req: TableRestoreRequest) -> TableRestoreReport:
    pairs = _pairs(req)
    targets = Targets.of(req.catalog, req.source_name, req.fallbacks)
    with Session(req.live) as db:  # the live server's one session (issue 36)
        dialect = db.dialect
        backup, need, mysql_plan = _planned(req, targets, dialect)
        _check_family(backup, dialect, req.live)
        _check_in_backup(req, backup, [source for source, _ in pairs])
        live = _check_live(db, pairs, dialect)
        db.close()  # not held idle while the copy is restored (hours): the import opens it anew
        return _restore(req, db, pairs, targets, live, backup, need, mysql_plan)


def _restore(
    req: TableRestoreRequest,
    db: Session,
    pairs: list[tuple[TableName, TableName]],
    targets: Targets,
    live: _Live,
    backup: Manifest,
    need: int,
    mysql_plan: MysqlTablePlan | None,
) -> TableRestoreReport:
    """Steps 2 to 4: the copy restored and exported in a sandbox, imported through `db`."""
    report = TableRestoreReport("", "", "", req.live.address)
    report.fallbacks = targets.notes
    work = private_dir("tables", req.scratch_dir, on_sweep=stop_orphans)
    try:
        free = _check_room(need, work)
        try:
            exports = _restore_and_export(req, work, pairs, live, report, targets, backup, mysql_plan)
        except Exception as exc:
            if not _out_of_disk(exc):
                raise
            raise TableRestoreError(
                f"the sandbox {work} ran out of disk: it had {_size(free)} free, the restore needs the backup and "
                f"binlogs (about {_size(need)}) plus the replay server's {_size(SANDBOX_REDO_BYTES)} redo log and "
                "room to prepare: give --scratch-dir a directory on a filesystem with more free space; the live "
                "server was not touched"
            ) from exc
        t0 = time.monotonic()
        report.tables = _import(db, live, exports)
        report.timings["import"] = time.monotonic() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


_NO_SPACE = re.compile(r"No space left on device|\berror 28\b|Errcode: 28|errno 28", re.IGNORECASE)


def _out_of_disk(exc: BaseException) -> bool:
    """True when the failure, or one it came from, is a full filesystem (ENOSPC, the server's error 28)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if _NO_SPACE.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


def _planned(
    req: TableRestoreRequest, targets: Targets, dialect: Dialect
) -> tuple[Manifest, int, MysqlTablePlan | None]:
    """From manifests alone: the backup the restore starts from, the uncompressed size of its
    chain and the binlogs up to the target (a floor of the sandbox's disk use), and for a MySQL
    server with a target, MySQL's replay plan."""
    if req.target is not None and not dialect.is_mariadb:
        mysql = plan_mysql(
            targets,
            req.target,
            req.backup_id,
            req.binlog_binary,
            req.replay,
            req.replay_threads,
        )
        chain = plan_chain(targets.first.catalog, mysql.backup.backup_id)
        return mysql.backup, sum(m.raw_bytes for m in chain) + sum(b.size for b in mysql.binlogs), mysql
    if req.target is not None:
        plan = read_plan(targets, req.target, req.backup_id)
        chain = plan_chain(targets.first.catalog, plan.backup.backup_id)
        return plan.backup, sum(m.raw_bytes for m in chain) + sum(b.size for b in plan.binlogs), None
    chain = read_chain(targets, req.backup_id)
    return chain[-1], sum(m.raw_bytes for m in chain), None


def _check_family(backup: Manifest, dialect: Dialect, target: MySQLTarget) -> None:
    """A tablespace moves only between servers of one family (MariaDB's and MySQL's InnoDB files
    and dictionaries differ), and the sandbox's server program must open the backup's datadir."""
    theirs = backup_dialect(backup)
    if theirs.family != dialect.family:
        raise TableRestoreError(
            f"backup {backup.backup_id} is of {theirs.name} and {target.address} runs {dialect.name}: tables move "
            "only into a server of the backup's family; restore them into one, or dump them from a restored copy"
        )
    try:
        check_server_program(backup)
    except ServerProgramError as exc:
        raise TableRestoreError(f"{exc}; nothing was restored") from None


def _check_room(need: int, work: Path) -> int:
    """Refuse before restoring when the sandbox's filesystem cannot even hold the chain and binlogs
    (their uncompressed sizes: a floor; the replay server's redo log and the prepare need more, and
    running out later is named too). Returns the free bytes."""
    free = shutil.disk_usage(work).free
    if free < need:
        raise TableRestoreError(
            f"the sandbox {work} has {_size(free)} free, the backup and binlogs restore to about {_size(need)}: "
            "give --scratch-dir a directory on a filesystem with more free space (nothing was restored)"
        )
    return free


def _check_in_backup(req: TableRestoreRequest, backup: Manifest, tables: list[TableName]) -> None:
    """Each table must be in the backup's own table list (its manifest's source shape), or, with a
    point in time, be named by a shipped binlog after it (created or renamed later)."""
    shape = backup.source_shape
    if shape is None or shape.truncated:
        log.warning(
            "backup %s records no complete table list: the table names are checked after the restore",
            backup.backup_id,
        )
        return
    listed = {t.name for t in shape.tables} | set(shape.changed_during_backup)
    for table in tables:
        if str(table) in listed or (req.target is not None and _named_after(req, backup, table)):
            continue
        near = [n for n in listed if n.casefold() == str(table).casefold()]
        near = near or difflib.get_close_matches(str(table), sorted(listed), n=1)
        later = "" if req.target is None else " and no shipped binlog after it names it"
        raise TableRestoreError(
            f"{table} is not in backup {backup.backup_id} (the tables it recorded when it was taken){later}"
            + (f"; did you mean {near[0]}?" if near else "; check the name (SHOW TABLES).")
            + " Nothing was restored"
        )


def _named_after(req: TableRestoreRequest, backup: Manifest, table: TableName) -> bool:
    """Whether a transaction in the binlogs shipped after `backup` names `table` (or cannot be read
    for its tables): the table may be created after the backup."""
    listing = MomentsRequest(
        req.catalog,
        MomentFilter(tables={str(table)}),
        private_key=req.private_key,
        passphrase=req.passphrase,
        backup_id=backup.backup_id,
        scratch_dir=req.scratch_dir,
        source_name=req.source_name,
        fallbacks=req.fallbacks,
    )
    try:
        return next(iter(list_moments(listing)), None) is not None
    except PitrError:
        return False


def _restore_and_export(
    req: TableRestoreRequest,
    work: Path,
    pairs: list[tuple[TableName, TableName]],
    live: _Live,
    report: TableRestoreReport,
    targets: Targets,
    backup: Manifest,
    mysql_plan: MysqlTablePlan | None,
) -> list[_Export]:
    """Steps 2 and 3 (the sandbox only): restore into `work`, export the tables' files."""
    t0 = time.monotonic()
    datadir = work / "data"
    common: dict[str, Any] = {
        "catalog": targets.first.catalog,
        "target_datadir": datadir,
        "backup_id": req.backup_id,
        "private_key": req.private_key,
        "passphrase": req.passphrase,
        "binary": req.binary,
        "max_free_memory_pct": req.max_free_memory_pct,
    }
    if not live.dialect.is_mariadb:
        with table_lease(targets, backup, mysql_plan):  # retention keeps what the restore and replay read
            return _mysql_restore_and_export(
                req, work, pairs, live, report, targets, backup, mysql_plan, common
            )
    if req.target is not None:
        pitr = point_in_time_restore(
            PitrRequest(
                target=req.target,
                binlog_binary=req.binlog_binary,
                replay=req.replay,
                replay_threads=req.replay_threads,
                **common,
            ),
            targets,
        )
        report.backup_id, report.target, report.reached_gtid = (
            pitr.backup_id,
            pitr.target,
            pitr.reached_gtid,
        )
        report.replay = pitr.replay
    else:
        restored = restore(RestoreRequest(**common), targets)
        report.backup_id, report.target = restored.backup_id, f"backup {restored.backup_id}"
        report.reached_gtid = restored.gtid or ""
    report.timings["restore"] = time.monotonic() - t0
    t0 = time.monotonic()
    exports = _export(datadir, work, pairs, live)
    report.timings["export"] = time.monotonic() - t0
    return exports


def _mysql_restore_and_export(
    req: TableRestoreRequest,
    work: Path,
    pairs: list[tuple[TableName, TableName]],
    live: _Live,
    report: TableRestoreReport,
    targets: Targets,
    backup: Manifest,
    plan: MysqlTablePlan | None,
    common: dict[str, Any],
) -> list[_Export]:
    """MySQL's steps 2 and 3 (core/pitr/table_mysql.py): the backup restored, one sandbox that
    replays to the target and then exports (MySQL's replay runs in a started server)."""
    t0 = time.monotonic()
    common["backup_id"] = backup.backup_id  # the one planned (the newest before the target)
    restored = restore(RestoreRequest(**common), targets)
    report.backup_id = restored.backup_id
    report.target = plan.target.describe() if plan else f"backup {restored.backup_id}"
    datadir = Path(common["target_datadir"])
    with mysql_sandbox(
        targets,
        backup,
        datadir,
        work / "srv",
        plan,
        scratch_dir=work,
        private_key=req.private_key,
        passphrase=req.passphrase,
    ) as (db, reached, how):
        report.reached_gtid, report.replay = reached, how
        report.timings["restore"] = time.monotonic() - t0
        t0 = time.monotonic()
        with db.use() as conn:
            exports = _export_from(conn.cursor(), datadir, work, pairs, live)
    report.timings["export"] = time.monotonic() - t0
    return exports


def _pairs(req: TableRestoreRequest) -> list[tuple[TableName, TableName]]:
    sources = [TableName.parse(t, "table") for t in req.tables]
    if not sources:
        raise TableRestoreError("name at least one table (schema.table)")
    if req.new_names and len(req.new_names) != len(sources):
        raise TableRestoreError(
            f"{len(sources)} table(s) but {len(req.new_names)} new name(s): give one new name per table, or none"
        )
    news = [TableName.parse(n, "new name") for n in req.new_names] or [_default_name(s) for s in sources]
    for what, names in (("table", sources), ("new name", news)):
        seen = {str(n).lower() for n in names}
        if len(seen) != len(names):
            raise TableRestoreError(f"a {what} is named twice: {', '.join(map(str, names))}")
    clash = {str(n).lower() for n in news} & {str(s).lower() for s in sources}
    if clash:
        raise TableRestoreError(
            f"{', '.join(sorted(clash))}: a new name must differ from the tables restored (nothing is written "
            "into an existing table)"
        )
    return list(zip(sources, news, strict=True))


def _default_name(source: TableName) -> TableName:
    name = f"{source.table}_restored"
    if len(name) > MAX_NAME:
        raise TableRestoreError(
            f"the default new name of {source}, {name} is {len(name)} characters, over MariaDB's {MAX_NAME}: "
            "give one with --as"
        )
    return TableName(source.schema, name)


@dataclass
class _Live:
    datadir: Path
    page_size: int
    owner: dict[str, tuple[int, int]]  # schema -> (uid, gid) of its directory
    dialect: Dialect
    default_row_format: str  # innodb_default_row_format: what a CREATE without ROW_FORMAT gets


def _check_live(db: Session, pairs: list[tuple[TableName, TableName]], dialect: Dialect) -> _Live:
    """Step 1 on the live server, through its session."""
    with db.use() as conn:
        return _check_live_on(conn.cursor(), db.target, pairs, dialect)


def _check_live_on(
    cur: Any, target: MySQLTarget, pairs: list[tuple[TableName, TableName]], dialect: Dialect
) -> _Live:
    cur.execute(
        "SELECT @@datadir, @@innodb_page_size, @@innodb_file_per_table, @@global.innodb_default_row_format"
    )
    datadir, page_size, per_table, row_format = cur.fetchone()
    if int(per_table) != 1:
        raise TableRestoreError(
            f"{target.address} runs with innodb_file_per_table=OFF: a new table would go into the system "
            "tablespace, which cannot take an imported one. SET GLOBAL innodb_file_per_table=ON (and in its "
            "config) first"
        )
    owner = {}
    for _, new in pairs:
        cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (new.schema,))
        if not cur.fetchone():
            raise TableRestoreError(
                f"schema {new.schema} does not exist on {target.address}; create it or name another schema for "
                f"{new}"
            )
        cur.execute(
            "SELECT table_type FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (new.schema, new.table),
        )
        if cur.fetchone():
            raise TableRestoreError(
                f"{new} already exists on {target.address}; a restore never writes into an existing table: "
                "give another name (--as)"
            )
        directory = Path(datadir) / _schema_dir(new.schema)
        if not directory.is_dir():
            raise TableRestoreError(
                f"the datadir of {target.address} ({datadir}) is not on this machine ({directory} missing): "
                "run the table restore on the database host"
            )
        if not os.access(directory, os.W_OK):
            raise TableRestoreError(
                f"cannot write into {directory} (the datadir of {target.address}): run as the server's user "
                "or root"
            )
        st = directory.stat()
        owner[new.schema] = (st.st_uid, st.st_gid)
    try:
        cur.execute("SET SESSION sql_log_bin = 0")
    except Exception as exc:  # MySQLdb.OperationalError: the account lacks the privilege
        raise TableRestoreError(
            f"{target.user} on {target.address} may not SET sql_log_bin=0 ({exc.args[-1] if exc.args else exc}): "
            f"the copies must not reach the replicas; grant {dialect.skip_binlog_privilege} to that account"
        ) from None
    return _Live(Path(datadir), int(page_size), owner, dialect, str(row_format))


def _schema_dir(schema: str) -> str:
    """The directory the server keeps `schema` in: both families' file-name encoding keeps
    letters, digits and `_`, and writes `$` (the only other character a name may have here) as
    `@0024`."""
    return schema.replace("$", "@0024")


def _export(
    datadir: Path, work: Path, pairs: list[tuple[TableName, TableName]], live: _Live
) -> list[_Export]:
    server = SandboxServer.on_datadir(datadir, work / "srv", server_id=SANDBOX_SERVER_ID, log_bin=False)
    server.start()
    try:
        conn = server.connect()
        try:
            return _export_from(conn.cursor(), datadir, work, pairs, live)
        finally:
            conn.close()
    finally:
        server.stop()


def _export_from(
    cur: Any, datadir: Path, work: Path, pairs: list[tuple[TableName, TableName]], live: _Live
) -> list[_Export]:
    """Step 3 on the running sandbox over `datadir`: describe, FLUSH ... FOR EXPORT, stage the files."""
    try:
        cur.execute("SELECT @@innodb_page_size")
        page = int(cur.fetchone()[0])
        if page != live.page_size:
            raise TableRestoreError(
                f"the backup has innodb_page_size={page}, the live server {live.page_size}: its tablespaces cannot "
                "be imported there; dump the tables from a restored copy instead"
            )
        exports = [_describe(cur, source, new, live) for source, new in pairs]
        stage = work / "stage"
        stage.mkdir()
        cur.execute("FLUSH TABLES " + ", ".join(s.sql() for s, _ in pairs) + " FOR EXPORT")
        try:
            for ex in exports:
                _stage(cur, datadir, stage, ex, live.dialect)
        finally:
            cur.execute("UNLOCK TABLES")
        return exports
    except Exception as exc:
        if _plain_failure(exc):
            raise TableRestoreError(
                f"exporting from the restored copy failed: {_sql_error(exc)}; the live server was not touched"
            ) from None
        raise


def _describe(cur: Any, source: TableName, new: TableName, live: _Live) -> _Export:
    dump = live.dialect.dump_program
    cur.execute(
        "SELECT engine, row_format, table_type FROM information_schema.tables WHERE table_schema = %s "
        "AND table_name = %s",
        (source.schema, source.table),
    )
    row = cur.fetchone()
    if row is None:
        raise TableRestoreError(
            f"{source} does not exist in the backup at that point; check the name (SHOW TABLES in {source.schema}) "
            "or choose another point in time"
        )
    engine, row_format, table_type = row
    if table_type != "BASE TABLE":
        raise TableRestoreError(
            f"{source} is a {table_type.lower()}, not a table: re-create it from its definition"
        )
    if engine != "InnoDB":
        raise TableRestoreError(
            f"{source} is {engine}: only InnoDB tables move as tablespaces; restore the backup to a scratch datadir "
            f"and copy it with {dump}"
        )
    cur.execute(f"SHOW CREATE TABLE {source.sql()}")
    ddl = cur.fetchone()[1]
    if re.search(r"\bFULLTEXT\b", ddl, re.I):
        raise TableRestoreError(
            f"{source} has a FULLTEXT index: its tablespace cannot be imported usably; restore the backup to a "
            f"scratch datadir and copy the table with {dump}"
        )
    cur.execute(
        "SELECT partition_name, subpartition_name FROM information_schema.partitions WHERE table_schema = %s "
        "AND table_name = %s AND partition_name IS NOT NULL ORDER BY partition_ordinal_position",
        (source.schema, source.table),
    )
    parts = cur.fetchall()
    if any(sub for _, sub in parts):
        raise TableRestoreError(
            f"{source} has sub-partitions, which this restore does not import; copy it with {dump} from a "
            "restored scratch datadir"
        )
    cur.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        "ORDER BY ordinal_position",
        (source.schema, source.table),
    )
    columns = [r[0] for r in cur.fetchall()]
    digest = content_digest(cur, source, columns)
    ddl = copy_ddl(ddl, new, row_format, live_default=live.default_row_format)
    return _Export(source, new, ddl, columns, digest, [p for p, _ in parts], {})


def _stage(cur: Any, datadir: Path, stage: Path, ex: _Export, dialect: Dialect) -> None:
    """Copy the exported `.ibd` + `.cfg` of the table, or of each of its partitions, into `stage`."""
    wanted = _tablespaces(cur, dialect, ex.source, ex.partitions)
    for name, filename in _tablespace_files(cur, dialect, ex.source):
        if name.lower() not in wanted:
            continue  # another table whose name the LIKE matched too (`_` is a wildcard there)
        part = wanted[name.lower()]
        src = (datadir / filename).resolve()
        for ext in (".ibd", ".cfg"):
            path = src.with_suffix(ext)
            if not path.is_file():
                raise TableRestoreError(f"{path} is missing after FLUSH TABLES {ex.source} FOR EXPORT")
            staged = stage / f"{len(list(stage.iterdir()))}{ext}"
            shutil.copyfile(path, staged)
            ex.files.setdefault(part, {})[ext] = staged
    missing = [part for part in wanted.values() if part not in ex.files]
    if missing:
        what = (
            ", ".join(f"partition {quote_ident(p)}" for p in missing) if ex.partitions else "its tablespace"
        )
        raise TableRestoreError(
            f"{ex.source} in the restored copy has no tablespace file for {what}; copy it with {dialect.dump_program} from a "
            "restored scratch datadir"
        )


def _tablespace_name(cur: Any, dialect: Dialect, table: TableName) -> str:
    """InnoDB's name of `table`'s tablespace: `schema/table`, on MariaDB each in the file-name encoding."""
    if not dialect.tablespace_names_encoded:
        return f"{table.schema}/{table.table}"
    return f"{_filename(cur, table.schema)}/{_filename(cur, table.table)}"


def _tablespaces(cur: Any, dialect: Dialect, table: TableName, partitions: list[str]) -> dict[str, str]:
    """InnoDB's names (lower-cased) of `table`'s tablespaces -> the partition each holds ("" for
    none): `schema/table#p#part` per partition (MariaDB: `#P#` and the file-name encoding; MySQL:
    the partition's name lower-cased; compared without case)."""
    prefix = _tablespace_name(cur, dialect, table)
    if not partitions:
        return {prefix.lower(): ""}
    encode = (lambda part: _filename(cur, part)) if dialect.tablespace_names_encoded else (lambda part: part)
    return {f"{prefix}#p#{encode(part)}".lower(): part for part in partitions}


def _tablespace_files(cur: Any, dialect: Dialect, table: TableName) -> list[tuple[str, str]]:
    """(tablespace name, data file relative to the datadir) of `table` and its partitions, and of
    any table whose name the LIKE matches too (`_` is a wildcard there): callers match names."""
    prefix = _tablespace_name(cur, dialect, table)
    cur.execute(dialect.tablespace_files, (prefix, f"{prefix}#P#%"))
    return [(str(name), str(path)) for name, path in cur.fetchall()]


def _filename(cur: Any, name: str) -> str:
    """`name` as the server writes it into file and tablespace names (`p 1` -> `p@00201`, `$` ->
    `@0024`): asked of the server, which owns that encoding."""
    cur.execute("SELECT CONVERT(CONVERT(%s USING filename) USING binary)", (name,))
    return bytes(cur.fetchone()[0]).decode("ascii")


def copy_ddl(ddl: str, new: TableName, row_format: str | None, *, live_default: str | None = None) -> str:
    """SHOW CREATE TABLE of the restored table, for `new`: the name replaced, and ROW_FORMAT made
    explicit (the imported tablespace has it) unless it is the live server's default anyway, at the
    end of the table options, before any PARTITION BY. Only when needed: an explicit ROW_FORMAT
    changes CHECKSUM TABLE of a table of fixed-size columns alone (MySQL 9.7), rows equal, so the
    copy would not compare equal to its original."""
    ddl = re.sub(r"^CREATE TABLE `(?:[^`]|``)*`", lambda _: f"CREATE TABLE {new.sql()}", ddl, count=1)
    needed = row_format and (live_default is None or row_format.lower() != live_default.lower())
    if row_format and needed and not re.search(r"\bROW_FORMAT=", ddl):
        ddl = re.sub(
            r"^(\) ENGINE=.*)$",
            lambda m: f"{m.group(1)} ROW_FORMAT={row_format.upper()}",
            ddl,
            count=1,
            flags=re.M,
        )
    return ddl


def content_digest(cur: Any, table: TableName, columns: list[str]) -> str:
    """`rows:<N> sum:<S>`: S sums 60 bits of each row's SHA-256 over QUOTE() of every column (NULL
    stays distinct from 'NULL'; SHA2, not MD5: MySQL 9.x has no MD5). Computed from values alone:
    CHECKSUM TABLE is not, it differed between a table whose .frm has a FOREIGN KEY and its imported
    copy without one, rows equal."""
    row = "CONCAT_WS(',', " + ", ".join("QUOTE(`" + c.replace("`", "``") + "`)" for c in columns) + ")"
    cur.execute(
        f"SELECT COUNT(*), SUM(CAST(CONV(LEFT(SHA2({row}, 256), 15), 16, 10) AS UNSIGNED)) FROM {table.sql()}"
    )
    count, total = cur.fetchone()
    return f"rows:{count} sum:{total or 0}"


def drop_foreign_keys(ddl: str) -> tuple[str, list[str]]:
    """The DDL without its FOREIGN KEY clauses, and the names of those dropped."""
    names = re.findall(r",\s*CONSTRAINT\s+`((?:[^`]|``)*)`\s+FOREIGN KEY", ddl, re.I)
    return _FOREIGN_KEY.sub("", ddl), names


def _import(db: Session, live: _Live, exports: list[_Export]) -> list[RestoredTable]:
    """Step 4 on the live server, in one block of its session: the sql_log_bin=0 it sets first is
    never lost to a connection opened anew between the statements it keeps from the replicas."""
    with db.use() as conn:
        return _import_on(conn.cursor(), db.target, live, exports)


def _import_on(cur: Any, target: MySQLTarget, live: _Live, exports: list[_Export]) -> list[RestoredTable]:
    created: list[TableName] = []
    placed: list[Path] = []
    done: list[RestoredTable] = []
    try:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("SET SESSION foreign_key_checks = 0")
        for ex in exports:
            ddl, dropped = drop_foreign_keys(ex.ddl)
            try:
                cur.execute(ddl)
            except Exception as exc:
                raise TableRestoreError(
                    f"creating {ex.new} on {target.address} failed: {_sql_error(exc)}"
                ) from None
            created.append(ex.new)
            owner = live.owner[ex.new.schema]
            if ex.partitions and not live.dialect.discards_partitioned:
                for n, part in enumerate(ex.partitions):
                    plain = TableName(ex.new.schema, f"xbp_part{n}_{ex.new.table}"[:64])
                    cur.execute(f"CREATE TABLE {plain.sql()} LIKE {ex.new.sql()}")
                    created.append(plain)
                    cur.execute(f"ALTER TABLE {plain.sql()} REMOVE PARTITIONING")
                    _import_into(cur, live, plain, {"": ex.files[part]}, [], owner, placed)
                    cur.execute(
                        f"ALTER TABLE {ex.new.sql()} EXCHANGE PARTITION {quote_ident(part)} WITH TABLE {plain.sql()}"
                    )
                    cur.execute(f"DROP TABLE {plain.sql()}")
                    created.remove(plain)
            else:  # a plain table, or (MySQL) all of a partitioned table's files at once
                _import_into(cur, live, ex.new, ex.files, ex.partitions, owner, placed)
            digest = content_digest(cur, ex.new, ex.columns)
            if digest != ex.digest:
                raise TableRestoreError(
                    f"{ex.new} on {target.address} holds {digest}, the restored {ex.source} {ex.digest}: "
                    "the import is not the restored table"
                )
            done.append(RestoredTable(str(ex.source), str(ex.new), digest, ex.partitions, dropped))
            log.info("restored %s as %s on %s (%s)", ex.source, ex.new, target.address, digest)
    except BaseException as failure:
        left = _roll_back(cur, created, placed, target)
        if _plain_failure(failure):
            raise TableRestoreError(
                f"importing into {target.address} failed: {_sql_error(failure)}; {left}"
            ) from None
        if isinstance(failure, TableRestoreError):
            raise TableRestoreError(f"{failure}; {left}") from None
        log.error("table restore interrupted: %s", left)
        raise
    finally:
        for path in placed:
            if path.suffix == ".cfg":
                path.unlink(missing_ok=True)  # IMPORT leaves it behind
    return done


def _roll_back(cur: Any, created: list[TableName], placed: list[Path], target: MySQLTarget) -> str:
    """Drop what this run created (unlogged, as created) and remove the files it placed; says
    what was done, and names what could not be undone with the statement that does it by hand."""
    failed = []
    for name in reversed(created):
        try:
            cur.execute(f"DROP TABLE IF EXISTS {name.sql()}")
        except Exception as exc:  # noqa: BLE001 - named in the error; the original failure stays first
            failed.append(f"could not drop {name} ({_sql_error(exc)})")
    for path in placed:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            failed.append(f"could not remove {path} ({exc.strerror})")
    if failed:
        tables = " ".join(f"DROP TABLE {n.sql()};" for n in created)
        return (
            "; ".join(failed)
            + f": it is on {target.address} now; remove it by hand (SET SESSION sql_log_bin=0; {tables})"
        )
    return "the tables this run created were dropped again" if created else "nothing was created"


def _import_into(
    cur: Any,
    live: _Live,
    name: TableName,
    files: dict[str, dict[str, Path]],
    partitions: list[str],
    owner: tuple[int, int],
    placed: list[Path],
) -> None:
    """DISCARD the new table's tablespace(s), put the staged files (partition, "" for none ->
    `.ibd` / `.cfg`) where the live server keeps each, IMPORT."""
    wanted = _tablespaces(cur, live.dialect, name, partitions)
    where = {
        wanted[ts.lower()]: (live.datadir / path).resolve()
        for ts, path in _tablespace_files(cur, live.dialect, name)
        if ts.lower() in wanted
    }
    if set(where) != set(wanted.values()):
        raise TableRestoreError(
            f"{name} has no tablespace of its own on the live server; nothing was imported"
        )
    cur.execute(f"ALTER TABLE {name.sql()} DISCARD TABLESPACE")
    for part, ibd in where.items():
        for ext in (".ibd", ".cfg"):
            dst = ibd.with_suffix(ext)
            placed.append(dst)
            shutil.copyfile(files[part][ext], dst)
            os.chown(dst, *owner)
            os.chmod(dst, 0o660)
    try:
        cur.execute(f"ALTER TABLE {name.sql()} IMPORT TABLESPACE")
    except Exception as exc:
        raise TableRestoreError(f"importing {name} failed: {_sql_error(exc)}") from None


def _plain_failure(exc: BaseException) -> bool:
    """A server or file error (to be said in one line), not one of ours or an interrupt."""
    return isinstance(exc, OSError) or type(exc).__module__.startswith("MySQLdb")


def _sql_error(exc: BaseException) -> str:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return f"{args[0]} {args[1]}" if len(args) == 2 else str(exc)
