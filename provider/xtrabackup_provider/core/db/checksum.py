"""pt-table-checksum runs on the source.

Backups are usually taken from a replica, and a replica that drifted from its source restores
the wrong data. pt-table-checksum runs on the source: its checksum queries replicate as
statements, so every replica computes its own CRC next to the source's in the `--replicate`
table (db.gate reads it on the replica). Airflow-free; the operator and the CLI are thin wrappers.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..common import children
from .dsn import (
    DEFAULT_DSN_TABLE,
    DEFAULT_REPLICATE,
    check_database_name,
    check_dsn,
    check_table_name,
    quote_table,
)
from .heartbeat import LOCAL_SCHEMA
from .server import MySQLTarget, connection, defaults_file

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

MAX_LISTED_TABLES = 50  # differing tables named in XCom / manifests; the count is always exact
# pt-table-checksum 3.x exit status: 0, 255 (fatal) or a bitmask of these flags.
EXIT_FLAGS = {
    1: "ERROR",
    2: "ALREADY_RUNNING",
    4: "CAUGHT_SIGNAL",
    8: "NO_SLAVES_FOUND",
    16: "TABLE_DIFF",
    32: "SKIP_CHUNK",
    64: "SKIP_TABLE",
    128: "REPLICATION_STOPPED",
}
FATAL = 255
_FLAG_ADVICE = {
    "ERROR": "a table could not be checksummed",
    "CAUGHT_SIGNAL": "pt-table-checksum was interrupted by a signal; results are incomplete",
    "NO_SLAVES_FOUND": "no replica was found, so nothing was compared; list the replicas "
    "(checksum_gate on each replica host, or its dsn) or change recursion_method",
    "REPLICATION_STOPPED": "replication is stopped on a replica; pt-table-checksum gave up "
    "(--fail-on-stopped-replication) instead of waiting forever",
    "SKIP_CHUNK": "some chunks were skipped (lock waits or oversized chunks); their rows were not compared",
    "SKIP_TABLE": "some tables were skipped; their rows were not compared",
}
# Results are unusable with these; skipped chunks/tables only leave gaps worth a warning.
_BLOCKING_FLAGS = ("ERROR", "CAUGHT_SIGNAL", "NO_SLAVES_FOUND", "REPLICATION_STOPPED")


class ConsistencyError(RuntimeError):
    """pt-table-checksum could not run or crashed, or a setting is invalid; the message says which."""


def _dsn_value(value: str, what: str) -> str:
    # DSN values cannot be quoted: a comma or '=' would split them.
    if any(c in value for c in ",=\n"):
        raise ConsistencyError(f"{what} {value!r} contains ',' or '=', which a pt DSN cannot hold")
    return value


def source_dsn(target: MySQLTarget, creds_path: str) -> str:
    """The source's DSN: where to connect, and the 0600 defaults file holding the credentials."""
    if target.socket:
        where = f"S={_dsn_value(target.socket, 'socket path')}"
    elif target.host:
        where = f"h={_dsn_value(target.host, 'host')},P={target.port}"
    else:
        where = ""  # the defaults file names the server
    # The session character set goes in the DSN (A=, copied to the replicas' DSNs), never in the
    # shared [client] file: mariadb-binlog refuses default-character-set there.
    charset = f"A={_dsn_value(target.charset, 'charset')}" if target.charset else ""
    return ",".join(p for p in (where, charset, f"F={_dsn_value(creds_path, 'defaults file path')}") if p)


def replica_dsn(target: MySQLTarget) -> str:
    """How pt-table-checksum on the source reaches this replica: over TCP when a host is known.

    Always h= and P= together: a missing P would be copied from the source's DSN.
    """
    if target.host and target.host != "localhost":
        return f"h={_dsn_value(target.host, 'host')},P={target.port}"
    if target.socket:
        return f"S={_dsn_value(target.socket, 'socket path')}"
    raise ConsistencyError(
        f"cannot tell pt-table-checksum how to reach replica {target.address}: give its host and port"
    )


@dataclass(frozen=True)
class ChecksumOptions:
    replicate: str = DEFAULT_REPLICATE
    # dsn: the replicas listed in `dsn_table` (written on the source before each run). Sandboxes
    # and NATed replicas share an address with non-default ports, where `processlist` pairs the
    # replica's host with the *source's* port and finds nothing; `hosts` needs report_host/port.
    recursion_method: Literal["dsn", "processlist", "hosts"] = "dsn"
    dsn_table: str = DEFAULT_DSN_TABLE
    replica_dsns: Sequence[str] = ()
    databases: Sequence[str] = ()
    ignore_databases: Sequence[str] = ()
    ignore_tables: Sequence[str] = ()  # `database.table`
    chunk_time: float = 0.5
    max_lag_seconds: float = 1.0  # pt pauses while a replica lags more than this
    timeout_minutes: float = 240
    binary: str = "pt-table-checksum"


# Named alike in the fleet config's `checksum` section and on TableChecksumOperator.
OPTION_FIELDS = tuple(f for f in ChecksumOptions.__dataclass_fields__ if f != "replica_dsns")


def checksum_options(settings: Any, replica_dsns: Sequence[str]) -> ChecksumOptions:
    """Options from anything with the OPTION_FIELDS attributes (a ChecksumConfig, the operator);
    one it lacks keeps its default."""
    values = {name: getattr(settings, name) for name in OPTION_FIELDS if hasattr(settings, name)}
    return ChecksumOptions(replica_dsns=tuple(replica_dsns), **values)


NO_CONFIG = os.devnull  # pt-table-checksum's --config: read this (empty) file instead of its defaults


def checksum_argv(target: MySQLTarget, creds_path: str, opts: ChecksumOptions) -> list[str]:
    """argv for pt-table-checksum; credentials only by the defaults file path (F=, which DBD::mysql
    reads alone). `--config` first: no /etc/percona-toolkit or ~/.percona-toolkit.conf option."""
    check_table_name(opts.replicate, "replicate")
    argv = [
        opts.binary,
        f"--config={NO_CONFIG}",
        source_dsn(target, creds_path),
        f"--replicate={opts.replicate}",
        # Replicas log in ROW format (the sandbox and most GTID setups). pt sets STATEMENT on its
        # own session, which is all one level of replicas needs; the check only matters for
        # replicas of replicas, whose own binlog would carry the rows instead of the statements.
        "--no-check-binlog-format",
        # Exit 128 rather than wait forever for a stopped replica.
        "--fail-on-stopped-replication",
        "--no-version-check",  # no call home from a database worker
        f"--chunk-time={opts.chunk_time:g}",
        f"--max-lag={opts.max_lag_seconds:g}",
    ]
    if opts.recursion_method == "dsn":
        db, table = check_table_name(opts.dsn_table, "dsn_table").split(".")
        argv.append(f"--recursion-method=dsn=D={db},t={table}")
    elif opts.recursion_method in ("processlist", "hosts"):
        argv.append(f"--recursion-method={opts.recursion_method}")
    else:
        raise ConsistencyError(
            f"recursion_method must be dsn, processlist or hosts, not {opts.recursion_method!r}"
        )
    # Each host's heartbeat rows are its own (written unlogged, core/db/heartbeat.py): never compared.
    ignored = [*opts.ignore_databases, *([] if LOCAL_SCHEMA in opts.ignore_databases else [LOCAL_SCHEMA])]
    for flag, names in (("--databases", opts.databases), ("--ignore-databases", ignored)):
        if names:
            argv.append(f"{flag}={','.join(check_database_name(n) for n in names)}")
    if opts.ignore_tables:
        argv.append(
            f"--ignore-tables={','.join(check_table_name(t, 'ignore_tables') for t in opts.ignore_tables)}"
        )
    return argv


def write_dsn_table(target: MySQLTarget | Session, table: str, dsns: Sequence[str]) -> None:
    """Make the dsn table on the source list exactly `dsns` (rewritten only when it differs).

    Written with binary logging on: the schema must exist on the replicas too, because the
    checksum table pt creates next to it replicates.
    """
    for dsn in dsns:
        check_dsn(dsn)
    name = quote_table(table)
    with connection(target) as conn:
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {name.split('.')[0]}")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {name} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
            " parent_id INT NULL, dsn VARCHAR(255) NOT NULL) ENGINE=InnoDB"
        )
        cur.execute(f"SELECT dsn FROM {name} ORDER BY id")
        if [row[0] for row in cur.fetchall()] == list(dsns):
            return
        conn.autocommit(False)
        try:
            cur.execute(f"DELETE FROM {name}")
            cur.executemany(f"INSERT INTO {name} (dsn) VALUES (%s)", [(d,) for d in dsns])
            conn.commit()
        except BaseException:
            with suppress(Exception):
                conn.rollback()
            raise
        finally:
            with suppress(Exception):
                conn.autocommit(True)  # a session goes on as it was


@dataclass(frozen=True)
class TableChecksum:
    """One row of pt-table-checksum's result table."""

    table: str
    errors: int
    diffs: int  # chunks that differ on at least one replica
    rows: int
    diff_rows: int
    chunks: int
    skipped: int
    seconds: float


@dataclass(frozen=True)
class ChecksumRun:
    exit_code: int
    flags: tuple[str, ...]
    tables: tuple[TableChecksum, ...]
    stderr: str = ""

    @property
    def differing(self) -> list[TableChecksum]:
        return [t for t in self.tables if t.diffs]

    @property
    def problems(self) -> list[str]:
        """Reasons the results cannot be trusted (the run must count as failed)."""
        found = [f"{f}: {_FLAG_ADVICE[f]}" for f in self.flags if f in _BLOCKING_FLAGS]
        if found and self.stderr:
            found.append(f"pt-table-checksum said: {children.summarize_stderr(self.stderr)}")
        return found

    @property
    def warnings(self) -> list[str]:
        return [f"{f}: {_FLAG_ADVICE[f]}" for f in self.flags if f in ("SKIP_CHUNK", "SKIP_TABLE")]

    @property
    def ok(self) -> bool:
        return not self.differing and not self.problems

    def summary(self) -> dict[str, Any]:
        """Small JSON-able facts for XCom, logs and the CLI (differing tables capped)."""
        differing = self.differing
        return {
            "exit_code": self.exit_code,
            "flags": list(self.flags),
            "tables": len(self.tables),
            "rows": sum(t.rows for t in self.tables),
            "chunks": sum(t.chunks for t in self.tables),
            "differing_count": len(differing),
            "differing_tables": [t.table for t in differing[:MAX_LISTED_TABLES]],
            "problems": self.problems,
            "warnings": self.warnings,
        }


def decode_exit(code: int) -> tuple[str, ...]:
    """Flag names set in an exit status (empty for 0 and for the fatal 255)."""
    if code in (0, FATAL) or code < 0:
        return ()
    return tuple(name for bit, name in EXIT_FLAGS.items() if code & bit)


_HEADER = ["TS", "ERRORS", "DIFFS", "ROWS", "DIFF_ROWS", "CHUNKS", "SKIPPED", "TIME", "TABLE"]


def parse_results(stdout: str) -> list[TableChecksum]:
    """The per-table result table pt-table-checksum prints on stdout."""
    rows: list[TableChecksum] = []
    in_table = False
    for line in stdout.splitlines():
        fields = line.split(None, 8)
        if fields == _HEADER:
            in_table = True
            continue
        if not in_table or len(fields) != 9:
            continue
        try:
            _ts, errors, diffs, nrows, diff_rows, chunks, skipped, secs = fields[:8]
            rows.append(
                TableChecksum(
                    fields[8].strip(),
                    int(errors),
                    int(diffs),
                    int(nrows),
                    int(diff_rows),
                    int(chunks),
                    int(skipped),
                    float(secs),
                )
            )
        except ValueError:
            continue  # a warning line that happens to have nine words
    return rows


def interpret(code: int, stdout: str, stderr: str) -> ChecksumRun:
    """Exit status + output -> a structured run; raises ConsistencyError for a crash.

    A Perl `die` exits with errno (e.g. 11), which looks like a bitmask. pt never sets
    ALREADY_RUNNING without --pid (which we do not pass), and sets TABLE_DIFF or ERROR only
    with a table row showing them, so anything else is a crash, not a result.
    """
    tables = tuple(parse_results(stdout))
    flags = decode_exit(code)
    unexplained = (
        code == FATAL
        or code < 0
        or "ALREADY_RUNNING" in flags
        or ("TABLE_DIFF" in flags and not any(t.diffs for t in tables))
        or ("ERROR" in flags and not any(t.errors for t in tables))
    )
    if unexplained:
        tail = children.summarize_stderr(stderr) or children.summarize_stderr(stdout) or "<no output>"
        raise ConsistencyError(f"pt-table-checksum failed (exit status {code}): {tail}")
    return ChecksumRun(code, flags, tables, stderr.strip()[-3000:])


def run_checksum(
    target: MySQLTarget,
    opts: ChecksumOptions,
    *,
    watch: Callable[[], object] | None = None,
    watch_every: float = 2.0,
    db: Session | None = None,
) -> ChecksumRun:
    """Run pt-table-checksum against the source `target` and return its structured result.

    `watch`, called every `watch_every` seconds while pt runs, raises to stop it: pt waits for a
    replica whose SQL thread stopped (it ended at once in one run, waited over six minutes in
    another), so the caller watches the replica (core/db/replica.py) and pt is killed on its error.
    `db`: the caller's session with `target` (session.py), for what is read or written before pt runs.
    """
    if opts.recursion_method == "dsn":
        if not opts.replica_dsns:
            raise ConsistencyError(
                "no replica DSNs for the dsn recursion method: give each replica host a checksum_gate "
                "(or its dsn), or set recursion_method to processlist or hosts"
            )
        write_dsn_table(db or target, opts.dsn_table, opts.replica_dsns)
    with defaults_file(target) as creds:
        argv = checksum_argv(target, creds, opts)
        log.info("running %s", " ".join(argv))  # no secret: credentials are in the F= file
        try:
            proc = children.popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except FileNotFoundError as exc:
            raise ConsistencyError(
                f"{opts.binary} not found; install percona-toolkit on this worker"
            ) from exc
        stdout, stderr = _communicate(proc, target, opts, watch, watch_every)
    run = interpret(proc.returncode, stdout, stderr)
    log.info("pt-table-checksum against %s: %s", target.address, run.summary())
    return run


def _communicate(
    proc: subprocess.Popen[str],
    target: MySQLTarget,
    opts: ChecksumOptions,
    watch: Callable[[], object] | None,
    every: float,
) -> tuple[str, str]:
    """pt's output once it exits; killed when `watch` raises or the timeout passes."""
    deadline = time.monotonic() + opts.timeout_minutes * 60
    while True:
        try:
            return proc.communicate(timeout=every if watch else max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            pass  # retrying communicate() loses no output
        try:
            if time.monotonic() >= deadline:
                raise ConsistencyError(
                    f"pt-table-checksum against {target.address} did not finish within {opts.timeout_minutes:g} "
                    "minutes; it was killed. Raise the timeout or narrow the databases"
                )
            if watch is not None:
                watch()
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
