"""Build a replica from a backup: restore the newest (or a given) backup into the new host's empty
datadir, start its server, make it a replica of the source from the backup's GTID (CHANGE MASTER
TO ... MASTER_USE_GTID=slave_pos, core/binlog/replication.py), wait until it has caught up, and
optionally gate on a pt-table-checksum pass.

Refused before anything is downloaded: a datadir that is not empty, a backup of an engine it does
not build from (mariabackup on MariaDB, clone on MySQL), a replication account that cannot log in to the source from this host (where the
new server's IO thread will connect from) or may not read its binlogs, a new server's account
(it comes with the restored data: the source's accounts) without the privileges provisioning
uses on it, and a source that has purged binlogs the backup's position needs (the error names
the first missing binlog and asks for a newer backup), and a server that already answers at the
new server's address (the source, or the old replica still running: the new one is not started
yet). The new server is started with the host's own command (its init system: `systemctl start
mariadb`), so it outlives this process; it must come up on this datadir with a server_id of its
own (both are checked).

Once replication starts, the replica's threads are watched (core/db/replica.py): an IO or SQL
error that persists for `grace_seconds` fails the run naming Last_IO_Errno / Last_SQL_Errno,
even without waiting for the catch-up. On any failure after the restore, the server it started
is stopped (SHUTDOWN through the new server's account) and the message says what is left;
`clean_on_failure` also empties the datadir, which held nothing before the run. Only a server this
run proved its own is ever stopped: one that answered on the restored datadir, and still does, with
the same server_id and pid file, on the connection that sends the SHUTDOWN. Any other is left
running and the message says where it runs.
"""

from __future__ import annotations

__all__ = ["provision_replica"]

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..binlog.replication import (
    CatchUp,
    ReplicationError,
    ReplicationSource,
    attach,
    check_binlogs_kept,
    check_source_login,
    purged_or_raise,
    wait_caught_up,
    watch_for,
)
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import Source, Targets
from ..common import children
from ..db.checksum import ChecksumOptions, ChecksumRun, run_checksum
from ..db.dialect import dialect_for
from ..db.grants import GrantsUnreadable, account_grants, client_hosts
from ..db.replica import (
    GRACE_SECONDS,
    ReplicaError,
    ReplicaState,
    ReplicaThreadError,
    ReplicaWatch,
    read_state,
    wait_running,
)
from ..db.server import MySQLTarget, ServerError, ServerFacts, answered, connect
from ..db.session import Session
from .chain import RestoreRequest, check_target, empty_dir, read_chain, restore

log = logging.getLogger(__name__)


class ProvisionError(RuntimeError):
    """The replica cannot be built or did not come up; the message says what to do."""


@dataclass
class ProvisionRequest:
    catalog: Catalog  # the backups to build from (any host of the cluster)
    target_datadir: Path  # the new host's datadir: must be empty
    source: ReplicationSource  # the source as replicas reach it, and the replication account
    source_admin: MySQLTarget  # an account on the source: binlog list, catch-up target, pt-table-checksum
    replica: MySQLTarget  # the new server once it runs (the restored data brings the source's accounts)
    start_command: list[
        str
    ]  # starts the new server on target_datadir, e.g. ["systemctl", "start", "mariadb"]
    backup_id: str | None = None  # None: the newest backup
    private_key: str | None = None
    passphrase: str | None = field(default=None, repr=False)
    binary: str | None = None  # mariabackup for the prepare
    owner: str | None = None  # chown the restored datadir to this user (the server's, e.g. mysql)
    scratch_dir: Path | None = None
    max_free_memory_pct: int = 50
    start_timeout: float = 600
    wait: bool = True  # wait for the catch-up here (the DAG waits in a sensor instead)
    max_lag_seconds: float = 5
    catch_up_timeout: float = 4 * 3600
    poll_seconds: float = 5
    checksum: ChecksumOptions | None = None  # gate on pt-table-checksum; replica_dsns says how pt reaches it
    source_name: str = "primary"  # the name of `catalog`'s storage target
    fallbacks: list[Source] = field(default_factory=list)  # further targets (core/catalog/targets.py)
    grace_seconds: float = GRACE_SECONDS  # a replication thread error lasting this long fails the run
    clean_on_failure: bool = False  # after a failure, also empty the datadir (the stopped server's)
    binlog_binary: str | None = None  # the binlog client (None: the source family's)


@dataclass
class ProvisionReport:
    backup_id: str
    chain: list[str]
    target_datadir: str
    gtid_start: str
    source: str
    server_id: int = 0
    caught_up: CatchUp | None = None
    checksum: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)  # what came from another storage target, and why

    def summary(self) -> dict[str, Any]:
        """Small JSON-able facts for XCom and the CLI."""
        return {
            "backup_id": self.backup_id,
            "chain": self.chain,
            "target_datadir": self.target_datadir,
            "gtid_start": self.gtid_start,
            "source": self.source,
            "server_id": self.server_id,
            "caught_up_gtid": self.caught_up.gtid if self.caught_up else None,
            "caught_up_seconds": round(self.caught_up.seconds, 2) if self.caught_up else None,
            "lag_seconds": self.caught_up.lag if self.caught_up else None,
            "checksum": self.checksum,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
            "fallbacks": self.fallbacks,
        }


def provision_replica(req: ProvisionRequest) -> ProvisionReport:
    check_target(req.target_datadir)
    targets = Targets.of(req.catalog, req.source_name, req.fallbacks)
    chain = read_chain(targets, req.backup_id)
    backup = chain[-1]
    _refuse_flavour(backup)
    gtid = backup.gtid or ""
    source_facts = _check_source(req, backup, gtid)
    report = ProvisionReport(
        backup.backup_id, [m.backup_id for m in chain], str(req.target_datadir), gtid, req.source.describe()
    )
    report.fallbacks = targets.notes
    restored = restore(
        RestoreRequest(
            catalog=targets.first.catalog,
            target_datadir=req.target_datadir,
            backup_id=backup.backup_id,
            private_key=req.private_key,
            passphrase=req.passphrase,
            binary=req.binary,
            scratch_dir=req.scratch_dir,
            max_free_memory_pct=req.max_free_memory_pct,
        ),
        targets,
    )
    report.timings.update({k: v for k, v in restored.timings.items() if k != "scratch_cleanup"})
    started = _Started()
    try:
        # A session with the source after the restore (the catch-up, pt's dsn table), opened if needed.
        with Session(req.source_admin) as source_db:
            _bring_up(req, source_db, backup, source_facts.server_id, report, started)
    except BaseException as exc:
        left = clean_up(req, started.proven)
        if not isinstance(exc, Exception):
            log.error("provisioning interrupted: %s", left)
            raise
        raise _with_cleanup(exc, left) from exc
    log.info(
        "provisioned %s from %s (GTID %s): %s",
        req.replica.address,
        backup.backup_id,
        gtid or "-",
        report.summary(),
    )
    return report


def _check_source(req: ProvisionRequest, backup: Manifest, gtid: str) -> ServerFacts:
    """Before anything is restored, through one session with the source (core/db/session.py; none
    is held idle on it while the restore runs): the replication account logs in and reads a binlog,
    no server answers at the new one's address yet, its account has what provisioning runs there,
    and the source still has the binlogs from `gtid` on."""
    with Session(req.source_admin) as source_db:
        source_facts = source_db.facts
        try:
            check_source_login(req.source, source_db, binary=req.binlog_binary, what="the new replica")
        except ReplicationError as exc:
            raise ReplicationError(f"{exc}. Nothing was restored") from None
        refuse_occupied(req.replica, source_facts)
        check_replica_account(source_db, req.replica, source_facts.version)
        # A backup of the source itself records the source's own binlog: the first one the replica needs.
        first_needed = backup.binlog_file if backup.server_uuid == source_facts.server_uuid else None
        check_binlogs_kept(
            source_db, req.source, gtid, backup=f"backup {backup.backup_id}", first_needed=first_needed
        )
        return source_facts


@dataclass(frozen=True)
class NewServer:
    """What proves a server is the one this run started: it runs on the restored datadir."""

    datadir: str
    server_id: int
    pid_file: str


@dataclass
class _Started:
    proven: NewServer | None = None  # set once the server at the replica's address is proven ours


def _bring_up(
    req: ProvisionRequest,
    source_db: Session,
    backup: Manifest,
    source_id: int,
    report: ProvisionReport,
    started: _Started,
) -> None:
    """Start the restored server, make it a replica, watch it start, wait and check (as asked)."""
    if req.owner:
        _chown(req.target_datadir, req.owner)
    t0 = time.monotonic()
    start_server(req.start_command, req.replica, req.start_timeout)
    report.timings["start"] = time.monotonic() - t0
    started.proven = _prove_new_server(req)
    report.server_id = _check_server_id(req, backup, source_id, started.proven)
    conn = connect(req.replica)
    try:
        attach(conn, req.source, report.gtid_start)
    finally:
        conn.close()
    try:  # even without the wait: a login the IO thread keeps failing fails here
        wait_running(lambda: _state(req), _watch(req), poll=min(req.poll_seconds, 1.0))
    except ReplicaThreadError as exc:
        raise purged_or_raise(exc) from None
    if req.wait:
        report.caught_up = wait_for_replica(req, source_db)
        report.timings["catch_up"] = report.caught_up.seconds
    if req.checksum is not None:
        t0 = time.monotonic()
        watch = _watch(req)
        report.checksum = checksum_gate(
            req.source_admin, req.checksum, lambda: watch.check(_state(req)), source_db
        )
        report.timings["checksum"] = time.monotonic() - t0


def _with_cleanup(exc: Exception, left: str) -> Exception:
    """The same kind of error (a replica's keeps its thread and errno), its message saying what is left."""
    message = f"{exc}. {left}"
    if isinstance(exc, ReplicaThreadError):
        return type(exc)(message, exc.thread, exc.errno, exc.error)
    if isinstance(exc, (ReplicaError, ProvisionError)):
        return type(exc)(message)
    return ProvisionError(message)


def _what(req: ProvisionRequest) -> str:
    return f"the new replica at {req.replica.address}"


def _state(req: ProvisionRequest) -> ReplicaState:
    return read_state(lambda: connect(req.replica))


def _watch(req: ProvisionRequest) -> ReplicaWatch:
    return watch_for(_what(req), req.source, req.grace_seconds)


# What provisioning runs on the new server through its account, and the privileges that takes, are
# the dialect's (core/db/dialect.py replica_setup_privileges): MariaDB's and MySQL's names differ.


def check_replica_account(source_admin: MySQLTarget | Session, replica: MySQLTarget, version: str) -> None:
    """The new server's account, as the source's grant tables have it (the restored data brings
    them), must hold what provisioning runs on it. Skipped, with a warning, when the source's
    account may not read the grant tables or the account is in a defaults file."""
    if replica.defaults_file and replica.password is None:
        log.warning(
            "the new server's account is in %s: its privileges are not checked", replica.defaults_file
        )
        return
    try:
        grants = account_grants(source_admin, replica.user, client_hosts(replica))
    except GrantsUnreadable as exc:
        log.warning("the new server's account is not checked before the restore: %s", exc)
        return
    where = f"the source {source_admin.address}"
    if grants is None:
        raise ProvisionError(
            f"the new server's account {replica.user} (connecting as {' or '.join(client_hosts(replica))}) does not "
            f"exist on {where}; the restored data brings the source's accounts: create it there, take a new "
            "backup and provision from it. Nothing was restored"
        )
    dialect = dialect_for(version)
    covered = dialect.super_covers if "SUPER" in grants.privileges else ()
    missing = [p for p in dialect.replica_setup_privileges if not grants.has(p) and p not in covered]
    if not missing:
        return
    if grants.roles:
        log.warning("%s lacks %s directly; a role may grant them", grants.account, ", ".join(missing))
        return
    raise ProvisionError(
        f"the new server's account {grants.account} lacks {', '.join(missing)} on {where} (the restored data "
        f"brings the source's accounts), which provisioning needs on the new server ({dialect.replica_setup_statements}): "
        f"GRANT {', '.join(missing)} ON *.* TO {grants.account} on "
        "the source, take a new backup and provision from it. Nothing was restored"
    )


def clean_up(req: ProvisionRequest, proven: NewServer | None) -> str:
    """After a failure past the restore: stop the server this run started and proved its own
    (SHUTDOWN through its account) and, with clean_on_failure, empty the datadir. Any other server
    is left as it is. Returns what was done and what is left."""
    datadir = req.target_datadir
    if proven is None:
        return (
            f"It stopped no server (none at {req.replica.address} was proven to run on {datadir}); {datadir} "
            "holds the restored backup: if the start command started a server on it, stop that with the host's "
            f"own command (e.g. systemctl stop mariadb), then empty {datadir} before provisioning again"
        )
    stopped = stop_server(req.replica, proven, req.start_timeout)
    if stopped is not None:
        return (
            f"Could not stop the new server at {req.replica.address} ({stopped}): stop it with the host's own "
            f"command (e.g. systemctl stop mariadb), then empty {datadir} before provisioning again"
        )
    if req.clean_on_failure:
        empty_dir(datadir, remove=False)
        return f"It stopped the new server and emptied {datadir}"
    return (
        f"It stopped the new server; {datadir} holds the restored backup: empty {datadir} before provisioning "
        "again (the next run refuses a datadir that is not empty), or run with clean_on_failure "
        "(--clean-on-failure)"
    )


def stop_server(replica: MySQLTarget, proven: NewServer, timeout: float) -> str | None:
    """SHUTDOWN the server this run proved its own, on a connection that proves it again (the same
    datadir, server_id and pid file), and wait until its pid file is gone; None once stopped, else
    why not. Whatever else answers at the address is left running."""
    try:
        conn = connect(replica)
    except ServerError as exc:
        return str(exc)
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@datadir, @@server_id, @@pid_file")
        now = _new_server(*cur.fetchone())
        if now != proven:
            return (
                f"the server answering there now runs on {now.datadir} with server_id {now.server_id}, not the one "
                f"this run started on {proven.datadir} (server_id {proven.server_id}): it was left running"
            )
        cur.execute("SHUTDOWN")
    except Exception as exc:  # noqa: BLE001 - MySQLdb: no SHUTDOWN privilege, a dropped connection
        return f"SHUTDOWN failed: {exc}"
    finally:
        conn.close()
    pid_file = Path(proven.pid_file)
    deadline = time.monotonic() + timeout
    while pid_file.exists():
        if time.monotonic() > deadline:
            return f"it still runs {timeout:.0f}s after SHUTDOWN ({pid_file} is there)"
        time.sleep(0.2)
    return None


def _new_server(datadir: Any, server_id: Any, pid_file: Any) -> NewServer:
    real = os.path.realpath(str(datadir))
    pid = Path(str(pid_file))
    return NewServer(real, int(server_id), str(pid if pid.is_absolute() else Path(real) / pid))


def refuse_occupied(replica: MySQLTarget, source: ServerFacts) -> None:
    """The new server is not started yet: a server answering at its address is another one (the
    source reached by mistake, or the old replica still running). Refused before the restore, so
    that nothing this run does can touch it."""
    try:
        conn = connect(replica)
    except ServerError as exc:
        if not answered(exc):
            return
        raise ProvisionError(
            f"a server already answers at {replica.address} ({exc.__cause__}), where the new server is to be "
            "started: stop it (the new host's server must be stopped and its datadir empty) or point the new "
            "host's connection at the new server's address. Nothing was restored"
        ) from None
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@datadir, @@server_id, @@version")
        datadir, server_id, version = cur.fetchone()
    finally:
        conn.close()
    it = f"server {version} on {datadir} with server_id {server_id}"
    same_dir = os.path.realpath(str(datadir)) == os.path.realpath(source.datadir)
    if int(server_id) == source.server_id and same_dir:
        it = f"the source ({it})"
    raise ProvisionError(
        f"a server already answers at {replica.address}: {it}. The new server is started by this run and must "
        "not be running yet: point the new host's connection at the new server's address, or stop the old "
        "server on the new host first. Nothing was restored"
    )


def wait_for_replica(req: ProvisionRequest, source_db: Session | None = None) -> CatchUp:
    return wait_caught_up(
        lambda: connect(req.replica),
        req.source,
        source_db or req.source_admin,
        max_lag_seconds=req.max_lag_seconds,
        timeout=req.catch_up_timeout,
        poll=req.poll_seconds,
        what=_what(req),
        grace=req.grace_seconds,
    )


def checksum_gate(
    source_admin: MySQLTarget,
    options: ChecksumOptions,
    watch: Callable[[], object] | None = None,
    source_db: Session | None = None,
) -> dict[str, Any]:
    """pt-table-checksum on the source against the new replica; any differing chunk is an error.
    `watch` (the replica's thread watcher) stops pt when the replica stops replicating."""
    run: ChecksumRun = run_checksum(source_admin, options, watch=watch, db=source_db)
    summary = run.summary()
    if run.differing or run.problems:
        tables = ", ".join(summary["differing_tables"][:10])
        raise ProvisionError(
            "pt-table-checksum found the new replica different from the source"
            + (f" in {len(run.differing)} table(s): {tables}" if run.differing else "")
            + (f"; {'; '.join(run.problems)}" if run.problems else "")
            + ". Do not put it in service: rebuild it from a newer backup"
        )
    return summary


# Engines whose restored copy provisioning has been proven to start and attach: mariabackup on MariaDB
# (gtid_slave_pos, MASTER_USE_GTID), clone on MySQL (the copy's own gtid_executed, SOURCE_AUTO_POSITION).
PROVISION_FLAVOURS = ("mariabackup", "clone")


def _refuse_flavour(backup: Manifest) -> None:
    if backup.engine_flavour not in PROVISION_FLAVOURS:
        raise ProvisionError(
            f"backup {backup.backup_id} was taken with {backup.engine_flavour}: provision-replica builds replicas "
            "from mariabackup (MariaDB) and clone (MySQL) backups only: back the source up with flavour clone "
            "and provision from that backup. Nothing was restored"
        )


def start_server(argv: list[str], replica: MySQLTarget, timeout: float) -> None:
    """Run the host's start command, then wait until the server accepts its account."""
    if not argv:
        raise ProvisionError("no start command for the new server (e.g. systemctl start mariadb)")
    log.info("starting the new server: %s", " ".join(argv))
    # The server it starts lives on, and /proc shows its environment: children.run passes on
    # nothing secret.
    try:
        proc = children.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise ProvisionError(f"start command {argv[0]!r} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise ProvisionError(f"start command {' '.join(argv)} did not return within {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise ProvisionError(
            f"start command {' '.join(argv)} exited {proc.returncode}: {children.summarize_stderr(proc.stderr or proc.stdout)}"
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            connect(replica).close()
            return
        except ServerError as exc:
            if time.monotonic() > deadline:
                raise ProvisionError(
                    f"the new server did not accept a connection at {replica.address} within {timeout:.0f}s: {exc}. "
                    "The restored data holds the source's accounts: connect with one of them"
                ) from exc
        time.sleep(0.5)


def _prove_new_server(req: ProvisionRequest) -> NewServer:
    """The server now answering at the replica's address runs on the restored datadir: the one
    this run started. Anything else is not ours (nothing will stop it)."""
    conn = connect(req.replica)
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@datadir, @@server_id, @@pid_file")
        found = _new_server(*cur.fetchone())
    finally:
        conn.close()
    if found.datadir != os.path.realpath(req.target_datadir):
        raise ProvisionError(
            f"the server at {req.replica.address} runs on {found.datadir}, not on the restored {req.target_datadir}: "
            "its start command or configuration points elsewhere"
        )
    return found


def _check_server_id(req: ProvisionRequest, backup: Manifest, source_id: int, new: NewServer) -> int:
    taken = {source_id: "the source's", backup.server_id: f"that of {backup.host}, whose backup this is"}
    if new.server_id in taken:
        raise ProvisionError(
            f"the new server's server_id {new.server_id} is {taken[new.server_id]}: a replica ignores events with "
            "its own server_id. Give it a server_id of its own in its configuration and start again"
        )
    return new.server_id


def _chown(root: Path, owner: str) -> None:
    shutil.chown(root, owner, owner)
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            shutil.chown(os.path.join(dirpath, name), owner, owner)
