"""The deep restore test: the restored copy becomes a replica of the host's source, catches up,
and pt-table-checksum run on the source finds no chunk that differs.

The sandbox stays socket-only (--skip-networking): its replication thread connects out to the
source as a client, and pt-table-checksum reaches it through the dsn table with `S=<socket>`
(and `h=localhost`, so the socket is used instead of the source's host copied from the source's
DSN) with a 0600 option file of its own. Replicated GRANT / CREATE USER need the grant tables,
so the sandbox turns them on and pt connects with a throwaway account (db/sandbox.py).

Not compared: the `mysql` and `sys` schemas (each server's own accounts, replication state and
install timestamps: two servers installed apart differ there), the provider's heartbeat schema
(written per host) and the `percona` schema (pt's own tables). pt-table-checksum's queries replicate to every replica of
the source, as in any pt-table-checksum run; the results go to their own table
(RESTORE_REPLICATE), so the consistency gate's `percona.checksums` is left alone.

Before anything is restored (`preflight`), the replication account logs in to the source from
this worker and reads a binlog, as provision-replica checks it (core/binlog/replication.py).
Every wait on the sandbox replica goes through the thread watcher (core/db/replica.py): the
catch-up, and pt-table-checksum's run, which pt itself may prolong for a replica whose SQL thread
stopped (on a damaged page: `Index for table 'victim' is corrupt`). A thread error that is final
or lasts `grace_seconds` fails the check naming Last_IO_Errno / Last_SQL_Errno and its message.
"""

from __future__ import annotations

__all__ = ["SourceCompare"]

import logging
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..binlog.replication import ReplicationSource, attach, check_source_login, wait_caught_up, watch_for
from ..db.checksum import ChecksumOptions, run_checksum
from ..db.heartbeat import HEARTBEAT_TABLE
from ..db.replica import GRACE_SECONDS, read_state, thread_problem
from ..db.sandbox import SandboxServer, privileged_account
from ..db.server import MySQLTarget, connect, defaults_file
from ..db.session import Session
from .evidence import CheckResult

log = logging.getLogger(__name__)

NAME = "replica_checksum"
RESTORE_REPLICATE = "percona.xbp_restore_checksums"
RESTORE_DSN_TABLE = "percona.xbp_restore_dsns"
REPLICA_SERVER_ID = 4_000_000_002
IGNORED_SCHEMAS = ("mysql", "sys", HEARTBEAT_TABLE[0], "percona")
WHAT = "the restored copy (the deep restore test's replica)"


@dataclass
class SourceCompare:
    """The deep check (core.restore.restore_test.DeepCompare) against one source."""

    source: ReplicationSource  # the source as replicas reach it, and the replication account
    source_admin: MySQLTarget  # pt-table-checksum's account on the source (and the catch-up target)
    max_lag_seconds: float = 5
    catch_up_timeout: float = 3600
    poll_seconds: float = 1.0
    checksum: ChecksumOptions = field(default_factory=ChecksumOptions)
    grace_seconds: float = GRACE_SECONDS  # a replication thread error lasting this long fails the check
    binlog_binary: str | None = None  # None: the source family's binlog client

    def preflight(self) -> None:
        """Before the restore: the replication account logs in to the source from this worker."""
        # One session with the source before the restore and one after it (core/db/session.py):
        # none is held idle on the source while the restore runs, which may take hours.
        with Session(self.source_admin) as db:
            check_source_login(self.source, db, binary=self.binlog_binary, what=WHAT)

    def __call__(self, datadir: Path, basedir: Path, gtid: str) -> CheckResult:
        with Session(self.source_admin) as db:
            return self._replicate(db, datadir, basedir, gtid)

    def _replicate(self, db: Session, datadir: Path, basedir: Path, gtid: str) -> CheckResult:
        basedir.mkdir(parents=True, exist_ok=True)
        # The restored copy is the source's family (a clone of MySQL opens in mysqld only).
        dialect = db.dialect
        server = SandboxServer.on_datadir(
            datadir,
            basedir,
            server_id=REPLICA_SERVER_ID,
            log_bin=False,
            extra_args=[dialect.skip_replica_start_option],
            family=dialect.family,
        )
        try:
            server.start()
            account = privileged_account(server, "xbp_rt")
            conn = connect(account)
            try:
                attach(conn, self.source, gtid)
            finally:
                conn.close()
            caught = wait_caught_up(
                lambda: connect(account),
                self.source,
                db,
                max_lag_seconds=self.max_lag_seconds,
                timeout=self.catch_up_timeout,
                poll=self.poll_seconds,
                what=WHAT,
                grace=self.grace_seconds,
            )
            log.info("the restored copy caught up with %s in %.1fs", self.source.describe(), caught.seconds)
            return self._compare(db, server, account, caught.seconds, gtid)
        finally:
            server.stop()
            shutil.rmtree(basedir, ignore_errors=True)

    def _compare(
        self, db: Session, server: SandboxServer, account: MySQLTarget, caught_up: float, gtid: str
    ) -> CheckResult:
        with defaults_file(account) as creds:
            options = replace(
                self.checksum,
                replicate=RESTORE_REPLICATE,
                recursion_method="dsn",
                dsn_table=RESTORE_DSN_TABLE,
                replica_dsns=(f"h=localhost,S={server.socket},F={creds}",),
                databases=tuple(self.checksum.databases),
                ignore_databases=(*self.checksum.ignore_databases, *IGNORED_SCHEMAS),
            )
            watch = watch_for(WHAT, self.source, self.grace_seconds)
            run = run_checksum(
                self.source_admin,
                options,
                watch=lambda: watch.check(read_state(lambda: connect(account))),
                db=db,
            )
        # pt may have given up on the replica itself (REPLICATION_STOPPED): name the replica's error.
        problem = thread_problem(read_state(lambda: connect(account)))
        summary = run.summary()
        note = (
            f"caught up from GTID {gtid or '-'} in {caught_up:.1f}s; pt-table-checksum: {summary['tables']} table(s), "
            f"{summary['chunks']} chunk(s), {summary['rows']} row(s)"
        )
        reasons = []
        if run.differing:
            reasons.append(
                f"pt-table-checksum found {len(run.differing)} table(s) that differ from the source: "
                + "; ".join(f"{t.table} ({t.diffs} chunk(s))" for t in run.differing[:5])
            )
        reasons += run.problems
        if problem is not None:
            reasons.append(problem.line(WHAT, self.source.describe(), 0))
        return CheckResult.of(NAME, reasons, note, checksum=summary, caught_up_seconds=round(caught_up, 2))
