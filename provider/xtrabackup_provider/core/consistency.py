"""Consistency before backups: pt-table-checksum runs, the replica diff query, replica health.

Backups are usually taken from a replica, and a replica that drifted from its source restores
the wrong data. pt-table-checksum runs on the source: its checksum queries replicate as
statements, so every replica computes its own CRC next to the source's in the `--replicate`
table. The gate then reads that table on the replica (the standard diff query) together with
the replica's health, without re-running the expensive checksum.

Airflow-free; the operator, the sensor, its trigger and the CLI are thin wrappers.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from .catalog import GateResult
from .mysql import MySQLTarget, ServerError, connect, defaults_file

if TYPE_CHECKING:
    from .config import ClusterConfig, FleetConfig, HostConfig

log = logging.getLogger(__name__)

DEFAULT_REPLICATE = "percona.checksums"
DEFAULT_DSN_TABLE = "percona.dsns"
TABLE_RE = re.compile(r"^[A-Za-z0-9_$]{1,64}\.[A-Za-z0-9_$]{1,64}$")
NAME_RE = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
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


class ChecksumGateError(RuntimeError):
    """The gate blocks a backup: replication stopped, lag, or stale/missing checksum results."""


# -- names and DSNs ------------------------------------------------------------------------------


def check_table_name(value: str, what: str) -> str:
    if not TABLE_RE.match(value):
        raise ValueError(f"{what} must be `database.table` (letters, digits, _ or $), not {value!r}")
    return value


def check_database_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise ValueError(f"database name {name!r} is not valid for pt-table-checksum filters")
    return name


def check_dsn(dsn: str) -> str:
    """A replica DSN for the dsn table: `h=host,P=port` (or `S=socket`); never a password.

    Credentials reach replicas through the defaults file (`F=`) that pt-table-checksum copies
    from the source's DSN, so the dsn table holds no secret.
    """
    parts: dict[str, str] = {}
    for part in dsn.split(","):
        key, eq, value = part.partition("=")
        if not eq or key not in ("h", "P", "S", "F", "u", "A") or not value or value != value.strip():
            raise ValueError(
                f"replica DSN {dsn!r}: each part is key=value with key h, P, S, F, u or A "
                "(e.g. 'h=10.0.0.12,P=3306'); passwords (p=) are not allowed, use a defaults file"
            )
        parts[key] = value
    if "h" not in parts and "S" not in parts:
        raise ValueError(f"replica DSN {dsn!r} names no host (h=) or socket (S=)")
    if "P" in parts and not parts["P"].isdigit():
        raise ValueError(f"replica DSN {dsn!r}: port P={parts['P']!r} is not a number")
    return dsn


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
    return ",".join(p for p in (where, f"F={_dsn_value(creds_path, 'defaults file path')}") if p)


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


def _quote_table(name: str) -> str:
    db, table = check_table_name(name, "table").split(".")
    return f"`{db}`.`{table}`"


# -- running pt-table-checksum -------------------------------------------------------------------


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
    chunk_time: float = 0.5
    max_lag_seconds: float = 1.0  # pt pauses while a replica lags more than this
    timeout_minutes: float = 240
    binary: str = "pt-table-checksum"


# Named alike in the fleet config's `checksum` section and on TableChecksumOperator.
OPTION_FIELDS = tuple(f for f in ChecksumOptions.__dataclass_fields__ if f != "replica_dsns")


def checksum_options(settings: Any, replica_dsns: Sequence[str]) -> ChecksumOptions:
    """Options from anything with the OPTION_FIELDS attributes (a ChecksumConfig, the operator)."""
    values = {name: getattr(settings, name) for name in OPTION_FIELDS}
    return ChecksumOptions(replica_dsns=tuple(replica_dsns), **values)


def checksum_argv(target: MySQLTarget, creds_path: str, opts: ChecksumOptions) -> list[str]:
    """argv for pt-table-checksum; credentials only by the defaults file path (F=)."""
    check_table_name(opts.replicate, "replicate")
    argv = [
        opts.binary,
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
    for flag, names in (("--databases", opts.databases), ("--ignore-databases", opts.ignore_databases)):
        if names:
            argv.append(f"{flag}={','.join(check_database_name(n) for n in names)}")
    return argv


def write_dsn_table(target: MySQLTarget, table: str, dsns: Sequence[str]) -> None:
    """Make the dsn table on the source list exactly `dsns` (rewritten only when it differs).

    Written with binary logging on: the schema must exist on the replicas too, because the
    checksum table pt creates next to it replicates.
    """
    for dsn in dsns:
        check_dsn(dsn)
    name = _quote_table(table)
    conn = connect(target)
    try:
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
        cur.execute(f"DELETE FROM {name}")
        cur.executemany(f"INSERT INTO {name} (dsn) VALUES (%s)", [(d,) for d in dsns])
        conn.commit()
    finally:
        conn.close()


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
            found.append(f"pt-table-checksum said: {self.stderr[-1000:]}")
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
        tail = (stderr.strip() or stdout.strip())[-3000:] or "<no output>"
        raise ConsistencyError(f"pt-table-checksum failed (exit status {code}): {tail}")
    return ChecksumRun(code, flags, tables, stderr.strip()[-3000:])


def run_checksum(target: MySQLTarget, opts: ChecksumOptions) -> ChecksumRun:
    """Run pt-table-checksum against the source `target` and return its structured result."""
    if opts.recursion_method == "dsn":
        if not opts.replica_dsns:
            raise ConsistencyError(
                "no replica DSNs for the dsn recursion method: give each replica host a checksum_gate "
                "(or its dsn), or set recursion_method to processlist or hosts"
            )
        write_dsn_table(target, opts.dsn_table, opts.replica_dsns)
    with defaults_file(target) as creds:
        argv = checksum_argv(target, creds, opts)
        log.info("running %s", " ".join(argv))  # no secret: credentials are in the F= file
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=opts.timeout_minutes * 60,
            )
        except FileNotFoundError as exc:
            raise ConsistencyError(
                f"{opts.binary} not found; install percona-toolkit on this worker"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ConsistencyError(
                f"pt-table-checksum against {target.address} did not finish within {opts.timeout_minutes:g} minutes; "
                "it was killed. Raise the timeout or narrow the databases"
            ) from exc
    run = interpret(proc.returncode, proc.stdout, proc.stderr)
    log.info("pt-table-checksum against %s: %s", target.address, run.summary())
    return run


# -- the gate, on the replica --------------------------------------------------------------------

_STATUS_ALIASES = {
    "io_running": ("Slave_IO_Running", "Replica_IO_Running"),
    "sql_running": ("Slave_SQL_Running", "Replica_SQL_Running"),
    "lag": ("Seconds_Behind_Master", "Seconds_Behind_Source"),
    "io_error": ("Last_IO_Error",),
    "sql_error": ("Last_SQL_Error",),
}


@dataclass(frozen=True)
class ReplicaHealth:
    is_replica: bool
    io_running: bool = False
    sql_running: bool = False
    seconds_behind: int | None = None
    io_error: str = ""
    sql_error: str = ""

    @classmethod
    def from_status(cls, status: dict[str, Any] | None) -> ReplicaHealth:
        """From a SHOW SLAVE/REPLICA STATUS row (MariaDB and MySQL column names)."""
        if not status:
            return cls(is_replica=False)

        def pick(key: str) -> Any:
            return next((status[c] for c in _STATUS_ALIASES[key] if c in status), None)

        lag = pick("lag")
        return cls(
            is_replica=True,
            io_running=str(pick("io_running")) == "Yes",
            sql_running=str(pick("sql_running")) == "Yes",
            seconds_behind=None if lag is None else int(lag),
            io_error=str(pick("io_error") or ""),
            sql_error=str(pick("sql_error") or ""),
        )


def replica_health(target: MySQLTarget) -> ReplicaHealth:
    import MySQLdb

    conn = connect(target)
    try:
        cur = conn.cursor()
        try:
            cur.execute("SHOW REPLICA STATUS")  # MariaDB 10.5+, MySQL 8.0.22+
        except MySQLdb.ProgrammingError:
            cur.execute("SHOW SLAVE STATUS")
        row = cur.fetchone()
        status = None if row is None else {c[0]: v for c, v in zip(cur.description, row, strict=True)}
    finally:
        conn.close()
    return ReplicaHealth.from_status(status)


@dataclass(frozen=True)
class TableDiff:
    table: str
    chunks: int
    count_diff: int  # replica rows minus source rows over the differing chunks


@dataclass(frozen=True)
class ChecksumFindings:
    replicate: str
    exists: bool
    chunks: int = 0
    newest: str | None = None  # UTC time of the newest result (the source's checksum time)
    age_seconds: int | None = None
    differing: tuple[TableDiff, ...] = ()


# The diff query from the pt-table-checksum documentation ("REPLICA CHECKS").
DIFF_WHERE = "master_cnt <> this_cnt OR master_crc <> this_crc OR ISNULL(master_crc) <> ISNULL(this_crc)"


def checksum_findings(target: MySQLTarget, replicate: str = DEFAULT_REPLICATE) -> ChecksumFindings:
    """Read this replica's own checksum table: freshness and the tables that differ."""
    import MySQLdb

    name = _quote_table(replicate)
    conn = connect(target)
    try:
        cur = conn.cursor()
        try:
            # Age on the server's clock: `ts` is the source's statement time, replicated. In
            # epoch seconds and shown in UTC, so no time zone or DST change skews it.
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(f"SELECT COUNT(*), MAX(ts), UNIX_TIMESTAMP() - UNIX_TIMESTAMP(MAX(ts)) FROM {name}")
        except MySQLdb.ProgrammingError as exc:
            if exc.args and exc.args[0] in (1049, 1146):  # unknown database / table
                return ChecksumFindings(replicate, exists=False)
            raise
        chunks, newest, age = cur.fetchone()
        cur.execute(
            f"SELECT CONCAT(db, '.', tbl), COUNT(*), COALESCE(SUM(this_cnt - master_cnt), 0) FROM {name}"
            f" WHERE {DIFF_WHERE} GROUP BY db, tbl ORDER BY db, tbl"
        )
        diffs = tuple(TableDiff(str(t), int(c), int(d)) for t, c, d in cur.fetchall())
    finally:
        conn.close()
    return ChecksumFindings(
        replicate,
        exists=True,
        chunks=int(chunks),
        newest=None if newest is None else newest.isoformat(sep=" "),
        age_seconds=None if age is None else int(age),
        differing=diffs,
    )


@dataclass(frozen=True)
class GatePolicy:
    on_diff: Literal["fail", "skip", "mark"] = "fail"
    max_age: timedelta = timedelta(hours=26)
    max_lag_seconds: float = 300
    replicate: str = DEFAULT_REPLICATE


@dataclass(frozen=True)
class GateVerdict:
    """pass: back up. diff: differences (policy on_diff says fail/skip/mark). blocked: see reasons."""

    outcome: Literal["pass", "diff", "blocked"]
    reasons: tuple[str, ...]
    health: ReplicaHealth
    findings: ChecksumFindings
    policy: GatePolicy
    label: str = "the replica"

    @property
    def action(self) -> Literal["proceed", "fail", "skip"]:
        if self.outcome == "pass" or (self.outcome == "diff" and self.policy.on_diff == "mark"):
            return "proceed"
        if self.outcome == "diff" and self.policy.on_diff == "skip":
            return "skip"
        return "fail"

    @property
    def differing_tables(self) -> list[str]:
        return [d.table for d in self.findings.differing]

    def message(self) -> str:
        if self.outcome == "pass":
            return f"{self.label}: replication healthy and checksums clean"
        return f"{self.label}: " + "; ".join(self.reasons)

    def gate_results(self) -> list[GateResult]:
        """What the manifest records: replica health and the checksum finding."""
        h, f, p = self.health, self.findings, self.policy
        healthy = h.is_replica and h.io_running and h.sql_running and not _lagging(h, p)
        checksum_status: Literal["pass", "fail", "marked", "skipped"] = "fail"
        if self.outcome == "pass":
            checksum_status = "pass"
        elif self.outcome == "diff" and p.on_diff != "fail":
            checksum_status = "marked" if p.on_diff == "mark" else "skipped"
        return [
            GateResult(
                name="replica_health",
                status="pass" if healthy else "fail",
                detail={
                    "io_running": h.io_running,
                    "sql_running": h.sql_running,
                    "seconds_behind": h.seconds_behind,
                    "max_lag_seconds": p.max_lag_seconds,
                },
            ),
            GateResult(
                name="checksum",
                status=checksum_status,
                detail={
                    "replicate": f.replicate,
                    "newest_result": f.newest,
                    "age_seconds": f.age_seconds,
                    "max_age_hours": p.max_age.total_seconds() / 3600,
                    "chunks": f.chunks,
                    "differing_count": len(f.differing),
                    "differing_tables": self.differing_tables[:MAX_LISTED_TABLES],
                    "reasons": list(self.reasons),
                },
            ),
        ]

    def xcom(self) -> list[dict[str, Any]]:
        return [g.model_dump(mode="json") for g in self.gate_results()]


def _lagging(h: ReplicaHealth, p: GatePolicy) -> bool:
    return h.seconds_behind is None or h.seconds_behind > p.max_lag_seconds


def health_reasons(h: ReplicaHealth, p: GatePolicy) -> list[str]:
    if not h.is_replica:
        return ["it is not a replica (SHOW REPLICA STATUS is empty); a checksum_gate belongs on replicas"]
    reasons = []
    if not h.io_running:
        reasons.append(
            "the replication IO thread is not running"
            + (f" (Last_IO_Error: {h.io_error})" if h.io_error else "")
        )
    if not h.sql_running:
        reasons.append(
            "the replication SQL thread is not running"
            + (f" (Last_SQL_Error: {h.sql_error})" if h.sql_error else "")
            + "; fix it and START REPLICA SQL_THREAD"
        )
    if h.io_running and h.sql_running and _lagging(h, p):
        lag = "unknown" if h.seconds_behind is None else f"{h.seconds_behind}s"
        reasons.append(f"replication lag {lag} is over max_lag_seconds {p.max_lag_seconds:g}")
    return reasons


def freshness_reasons(f: ChecksumFindings, p: GatePolicy) -> list[str]:
    run = "run the mysql_table_checksum DAG (or `xtrabackup-provider checksum`) first"
    if not f.exists:
        return [f"no pt-table-checksum results on it ({f.replicate} does not exist); {run}"]
    if not f.chunks or f.age_seconds is None:
        return [f"{f.replicate} is empty; {run}"]
    max_age = p.max_age.total_seconds()
    if f.age_seconds > max_age:
        return [
            f"the newest pt-table-checksum result ({f.newest}) is {f.age_seconds / 3600:.1f}h old, "
            f"over max_age_hours {max_age / 3600:g}; {run}"
        ]
    return []


def evaluate_gate(
    health: ReplicaHealth, findings: ChecksumFindings, policy: GatePolicy, label: str = "the replica"
) -> GateVerdict:
    """Pure: health and findings -> the verdict. Health and freshness block before diffs count."""
    blocked = health_reasons(health, policy) + freshness_reasons(findings, policy)
    if blocked:
        return GateVerdict("blocked", tuple(blocked), health, findings, policy, label)
    if findings.differing:
        names = ", ".join(
            f"{d.table} ({d.chunks} chunk{'s' if d.chunks != 1 else ''})"
            for d in findings.differing[:MAX_LISTED_TABLES]
        )
        more = len(findings.differing) - MAX_LISTED_TABLES
        reason = (
            f"pt-table-checksum found differences from the source in {len(findings.differing)} "
            f"table(s): {names}{f' and {more} more' if more > 0 else ''}"
        )
        return GateVerdict("diff", (reason,), health, findings, policy, label)
    return GateVerdict("pass", (), health, findings, policy, label)


def check_replica(target: MySQLTarget, policy: GatePolicy, label: str = "the replica") -> GateVerdict:
    """Query the replica and evaluate the gate."""
    try:
        health = replica_health(target)
        findings = checksum_findings(target, policy.replicate)
    except ServerError:
        raise
    except Exception as exc:  # a MySQLdb error mid-query: name the server
        raise ServerError(f"checking {label} at {target.address}: {exc}") from exc
    return evaluate_gate(health, findings, policy, label)


# -- from the fleet config (the CLI; the DAGs pass the same values as primitives) ----------------


@dataclass
class ClusterChecksum:
    source: HostConfig
    options: ChecksumOptions
    gated: dict[str, GatePolicy] = field(default_factory=dict)  # replica host name -> its policy


def gate_policy(cluster: ClusterConfig, host: HostConfig) -> GatePolicy | None:
    gate = host.checksum_gate
    if gate is None:
        return None
    return GatePolicy(
        on_diff=gate.on_diff,
        max_age=timedelta(hours=gate.max_age_hours),
        max_lag_seconds=gate.max_lag_seconds,
        replicate=cluster.checksum.replicate if cluster.checksum else DEFAULT_REPLICATE,
    )


def cluster_checksum(config: FleetConfig, cluster_name: str) -> ClusterChecksum:
    """The checksum as the fleet config describes it, with CLI connection details for replicas."""
    from .factory import SetupError

    cluster = config.cluster(cluster_name)
    spec = cluster.checksum
    if spec is None:
        raise SetupError(
            f"{config.source}: cluster {cluster_name!r} has no `checksum` section (source, schedule...)"
        )
    source = spec.source if not isinstance(spec.source, str) else config.find_host(cluster_name, spec.source)
    gated = {h.name: p for h in cluster.hosts if h.name != source.name and (p := gate_policy(cluster, h))}
    dsns = []
    for host in cluster.hosts:
        if host.name in gated and host.checksum_gate is not None:
            if host.checksum_gate.dsn:
                dsns.append(host.checksum_gate.dsn)
            elif host.host:
                dsns.append(replica_dsn(MySQLTarget(host=host.host, port=host.port)))
            else:
                raise SetupError(
                    f"{config.source}: host {host.name!r}: set checksum_gate.dsn or host/port so "
                    "pt-table-checksum on the source can reach this replica"
                )
    options = checksum_options(spec, dsns)
    return ClusterChecksum(source, options, gated)


def run_configured_checksum(
    config: FleetConfig, cluster_name: str, host_name: str
) -> tuple[ChecksumRun, GateVerdict | None]:
    """The CLI's `checksum`: run on the cluster's source, then check `host_name` when it is gated."""
    from .factory import cli_target

    spec = cluster_checksum(config, cluster_name)
    host = config.find_host(cluster_name, host_name)
    run = run_checksum(cli_target(spec.source, config.source), spec.options)
    policy = spec.gated.get(host.name)
    if policy is None:
        return run, None
    label = f"replica {cluster_name}/{host.name}"
    return run, check_replica(cli_target(host, config.source), policy, label)
