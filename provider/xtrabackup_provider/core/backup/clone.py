"""The clone engine's server side: refuse a server it cannot copy, then CLONE LOCAL into a private
staging directory on the database host, settle the copy, and hand the backup verb the argv that
streams it (core/engine/clone.py). The staging directory is removed when the block ends, whatever
ends it; one a killed run left is removed by the next clone there (core/common/tempdirs.py), after
the clone or the settling server it may have left running is stopped.

Settling: a LOCAL clone records no binlog position or GTID set of its own (the donor's
performance_schema.clone_status has them empty). A server started once on the copy (socket only,
no binlog, no grants) finishes the clone's recovery and reports them in its own clone_status:
the position the copy is consistent at, read from the copy itself. The copy is then consistent as
stored, so a restore is fetch + extract with no prepare.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..common.tempdirs import private_dir
from ..db.sandbox import SandboxServer, stop_orphans
from ..db.server import MySQLTarget, ServerFacts, connection
from ..db.session import Session
from ..engine import clone
from ..engine.tools import EngineError

# The server: the backup verb's session (core/db/session.py), or its connection details.
Server = MySQLTarget | Session

log = logging.getLogger(__name__)

KIND = "clone"
MiB = 1 << 20
LEFTOVER_CLONE_WAIT = 60  # seconds a dead run's clone gets to stop after KILL QUERY
SETTLE_REDO_BYTES = 2 * 48 * MiB  # the settling server's redo (core/db/sandbox.py's)
_LSN = re.compile(r"Log sequence number\s+(\d+)")
# What the settling server wrote that is not the source's: its identity and its certificates.
_SETTLER_FILES = ("auto.cnf", "*.pem")
# It serves one query on its socket: no TLS certificates and RSA key pairs to generate (four RSA
# keys, 0.2 to 0.8 s of a settle's CPU on a busy 2-core host) that would only be removed again.
# `loose-`: a server without one of these options (sha256_password is deprecated) starts anyway.
_SETTLER_NO_KEYS = (
    "--loose-auto-generate-certs=OFF",
    "--loose-sha256-password-auto-generate-rsa-keys=OFF",
    "--loose-caching-sha2-password-auto-generate-rsa-keys=OFF",
)


@dataclass(frozen=True)
class Settled:
    binlog_file: str
    binlog_position: int
    gtid: str
    lsn: int


def check_clone(target: Server, facts: ServerFacts, where: str) -> None:
    """Refuse, before anything starts, a server the clone engine cannot copy: one line."""
    version = tuple(int(p) for p in re.findall(r"\d+", facts.version)[:3])
    plugin, backup_admin = None, False
    if not facts.is_mariadb:
        with connection(target) as conn:
            cur = conn.cursor()
            cur.execute("SELECT PLUGIN_STATUS FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'clone'")
            row = cur.fetchone()
            plugin = str(row[0]) if row else None
            backup_admin = any(_grants_backup_admin(line) for line in _grants(cur))
    problem = clone.refusal(
        where, mariadb=facts.is_mariadb, version=version, plugin=plugin, backup_admin=backup_admin
    )
    if problem:
        raise EngineError(f"{problem}; nothing was backed up")


def _grants(cur: Any) -> list[str]:
    """The account's grants; MySQL's SHOW GRANTS (no FOR) includes its active roles' privileges."""
    cur.execute("SHOW GRANTS")
    return [str(row[0]) for row in cur.fetchall()]


def _grants_backup_admin(grant: str) -> bool:
    """A global grant line of SHOW GRANTS that gives BACKUP_ADMIN (by name or ALL PRIVILEGES)."""
    what, _, on = grant.partition(" ON ")
    if not on.startswith("*.*"):
        return False
    privileges = {p.strip().upper() for p in what.removeprefix("GRANT ").split(",")}
    return "BACKUP_ADMIN" in privileges or "ALL PRIVILEGES" in privileges


@contextmanager
def cloned(
    target: Server,
    facts: ServerFacts,
    lsn_dir: Path,
    *,
    staging_root: str | None = None,
    mysqld: str | None = None,
) -> Iterator[list[str]]:
    """Clone the server into a private staging directory and yield the argv streaming the copy;
    the checkpoints, binlog position and info files land in the copy and in `lsn_dir`."""
    where = target.address
    staging = private_dir(KIND, staging_root, on_sweep=lambda path: _stop_leftovers(target, path))
    try:
        _check_space(target, staging, where)
        copy = staging / "data"
        started = datetime.now(UTC)
        _clone(target, copy, where)
        settled = _settle(target, copy, staging / "settle", facts, mysqld)
        files = clone.metadata_files(
            binlog_file=settled.binlog_file,
            binlog_position=settled.binlog_position,
            gtid=settled.gtid,
            lsn=settled.lsn,
            server_version=facts.version,
            start=f"{started:%Y-%m-%d %H:%M:%S}",
            end=f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S}",
        )
        for name, text in files.items():
            (copy / name).write_text(text)
            (lsn_dir / name).write_text(text)
        yield clone.stream_argv(str(copy))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def needed_bytes(target: Server) -> int:
    """What the copy takes: the server's InnoDB tablespaces (CLONE copies InnoDB only), the redo
    the settling server writes, and a tenth more for what changes while it copies."""
    with connection(target) as conn:
        cur = conn.cursor()
        cur.execute("SELECT COALESCE(SUM(ALLOCATED_SIZE), 0) FROM information_schema.INNODB_TABLESPACES")
        data = int(cur.fetchone()[0])
    return data + data // 10 + SETTLE_REDO_BYTES


def _check_space(target: Server, staging: Path, where: str) -> None:
    need, free = needed_bytes(target), shutil.disk_usage(staging).free
    if need > free:
        raise EngineError(
            f"{where}: the clone needs about {need // MiB} MiB in {staging.parent} (the server's data), "
            f"which has {free // MiB} MiB free: free space there or point the worker's TMPDIR at a "
            "larger filesystem; nothing was backed up"
        )


def _clone(target: Server, copy: Path, where: str) -> None:
    import MySQLdb

    log.info("CLONE LOCAL DATA DIRECTORY = %s", copy)
    with connection(target) as conn:
        try:
            conn.cursor().execute("CLONE LOCAL DATA DIRECTORY = %s", (str(copy),))
        except MySQLdb.Error as exc:
            raise EngineError(
                f"{where}: CLONE LOCAL into {copy} failed: {exc}; nothing was backed up"
            ) from exc


def server_layout(target: Server) -> list[str]:
    """The source's settings a server on its copy must share to open it."""
    with connection(target) as conn:
        cur = conn.cursor()
        cur.execute("SELECT @@innodb_page_size, @@innodb_data_file_path, @@lower_case_table_names")
        page, data_file_path, lower = cur.fetchone()
    return [
        f"--innodb-page-size={page}",
        f"--innodb-data-file-path={data_file_path}",
        f"--lower-case-table-names={lower}",
    ]


def settling_server(
    copy: Path, basedir: Path, server_id: int, layout: list[str], mysqld: str | None
) -> SandboxServer:
    """The server started once on a copy (socket only, no binlog, no grants, no keys): not started."""
    return SandboxServer.on_datadir(
        copy,
        basedir,
        server_id=server_id,
        family="mysql",
        log_bin=False,
        extra_args=["--plugin-load-add=mysql_clone.so", *_SETTLER_NO_KEYS, *layout],
        mariadbd=mysqld or "mysqld",
    )


def _settle(target: Server, copy: Path, basedir: Path, facts: ServerFacts, mysqld: str | None) -> Settled:
    """Start a server on the copy once: it finishes the clone and reports the copy's position."""
    server = settling_server(copy, basedir, facts.server_id, server_layout(target), mysqld)
    try:
        server.start()
    except FileNotFoundError as exc:
        raise EngineError(
            f"{server.mariadbd!r} not found on this worker: the clone engine starts it once on the copy "
            "(socket only) to read the copy's binlog position; install MySQL's server there or set the "
            "host's `binary` to its mysqld; nothing was backed up"
        ) from exc
    try:
        rows = server.query(
            "SELECT STATE, BINLOG_FILE, BINLOG_POSITION, GTID_EXECUTED FROM performance_schema.clone_status"
        )
        status = server.query("SHOW ENGINE INNODB STATUS")[0][2]
    finally:
        server.stop()
    for pattern in _SETTLER_FILES:
        for path in copy.glob(pattern):
            path.unlink()
    state, binlog_file, position, gtid = rows[-1] if rows else ("none", "", 0, "")
    if state != "Completed":
        raise EngineError(
            f"the clone in {copy} did not complete (clone_status: {state}); nothing was backed up"
        )
    m = _LSN.search(status)
    return Settled(
        str(binlog_file or ""), int(position or 0), "".join(str(gtid or "").split()), int(m[1]) if m else 0
    )


def _stop_leftovers(target: Server, path: Path) -> None:
    """A dead run's staging directory: its settling server and a clone still writing there stop
    before it is removed."""
    stop_orphans(path)
    with suppress(Exception), connection(target) as conn:  # the server may be down: nothing writes there
        cur = conn.cursor()
        deadline = time.monotonic() + LEFTOVER_CLONE_WAIT
        while time.monotonic() < deadline:
            cur.execute(
                "SELECT PID FROM performance_schema.clone_status WHERE STATE = 'In Progress'"
                " AND DESTINATION LIKE CONCAT(%s, '%%')",
                (str(path),),
            )
            running = cur.fetchall()
            if not running:
                return
            for (pid,) in running:
                log.warning("stopping the clone a dead run left writing into %s (connection %s)", path, pid)
                cur.execute(f"KILL QUERY {int(pid)}")
            time.sleep(0.2)  # until the server says it stopped: nothing writes there while it is removed
