"""Build a replica from a backup: restore the newest (or a given) backup into the new host's empty
datadir, start its server, make it a replica of the source from the backup's GTID (CHANGE MASTER
TO ... MASTER_USE_GTID=slave_pos, core/binlog/replication.py), wait until it has caught up, and
optionally gate on a pt-table-checksum pass.

Refused before anything is downloaded: a datadir that is not empty, a backup that is not a
MariaDB one, and a source that has purged binlogs the backup's position needs (the error names
the first missing binlog and asks for a newer backup). The new server is started with the
host's own command (its init system: `systemctl start mariadb`), so it outlives this process;
it must come up on this datadir with a server_id of its own (both are checked).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..binlog.replication import (
    CatchUp,
    ReplicationSource,
    attach,
    check_binlogs_kept,
    wait_caught_up,
)
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import Source, Targets
from ..common import children
from ..db.checksum import ChecksumOptions, ChecksumRun, run_checksum
from ..db.server import MySQLTarget, ServerError, connect, server_facts
from .chain import RestoreRequest, check_target, read_chain, restore

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
    source_facts = server_facts(req.source_admin)
    # A backup of the source itself records the source's own binlog: the first one the replica needs.
    first_needed = backup.binlog_file if backup.server_uuid == source_facts.server_uuid else None
    check_binlogs_kept(
        req.source_admin, req.source, gtid, backup=f"backup {backup.backup_id}", first_needed=first_needed
    )
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
    if req.owner:
        _chown(req.target_datadir, req.owner)
    t0 = time.monotonic()
    start_server(req.start_command, req.replica, req.start_timeout)
    report.timings["start"] = time.monotonic() - t0
    report.server_id = _check_new_server(req, backup, source_facts.server_id)
    conn = connect(req.replica)
    try:
        attach(conn, req.source, gtid)
    finally:
        conn.close()
    if req.wait:
        report.caught_up = wait_for_replica(req)
        report.timings["catch_up"] = report.caught_up.seconds
    if req.checksum is not None:
        t0 = time.monotonic()
        report.checksum = checksum_gate(req.source_admin, req.checksum)
        report.timings["checksum"] = time.monotonic() - t0
    log.info(
        "provisioned %s from %s (GTID %s): %s",
        req.replica.address,
        backup.backup_id,
        gtid or "-",
        report.summary(),
    )
    return report


def wait_for_replica(req: ProvisionRequest) -> CatchUp:
    return wait_caught_up(
        lambda: connect(req.replica),
        req.source,
        req.source_admin,
        max_lag_seconds=req.max_lag_seconds,
        timeout=req.catch_up_timeout,
        poll=req.poll_seconds,
        what=f"the new replica at {req.replica.address}",
    )


def checksum_gate(source_admin: MySQLTarget, options: ChecksumOptions) -> dict[str, Any]:
    """pt-table-checksum on the source against the new replica; any differing chunk is an error."""
    run: ChecksumRun = run_checksum(source_admin, options)
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


def _refuse_flavour(backup: Manifest) -> None:
    if backup.engine_flavour != "mariabackup":
        raise ProvisionError(
            f"backup {backup.backup_id} was taken with {backup.engine_flavour}: provision-replica sets up MariaDB "
            "GTID replication (gtid_slave_pos, MASTER_USE_GTID) and cannot configure a MySQL replica"
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


def _check_new_server(req: ProvisionRequest, backup: Manifest, source_id: int) -> int:
    conn = connect(req.replica)
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@datadir, @@server_id")
        datadir, server_id = cur.fetchone()
    finally:
        conn.close()
    if os.path.realpath(str(datadir)) != os.path.realpath(req.target_datadir):
        raise ProvisionError(
            f"the server at {req.replica.address} runs on {datadir}, not on the restored {req.target_datadir}: "
            "its start command or configuration points elsewhere"
        )
    taken = {source_id: "the source's", backup.server_id: f"that of {backup.host}, whose backup this is"}
    if int(server_id) in taken:
        raise ProvisionError(
            f"the new server's server_id {server_id} is {taken[int(server_id)]}: a replica ignores events with its "
            "own server_id. Give it a server_id of its own in its configuration and start again"
        )
    return int(server_id)


def _chown(root: Path, owner: str) -> None:
    shutil.chown(root, owner, owner)
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            shutil.chown(os.path.join(dirpath, name), owner, owner)
