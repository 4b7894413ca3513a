"""The consistency gate on a replica, before its backup: replica health and the newest
pt-table-checksum results in its own `--replicate` table (the standard diff query), without
re-running the expensive checksum. Airflow-free; the sensor, its trigger and the CLI wrap it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from ..catalog.manifest import GateResult
from .checksum import MAX_LISTED_TABLES
from .dsn import DEFAULT_REPLICATE, quote_table
from .server import MySQLTarget, ServerError, connection, dialect_on
from .session import Session


class ChecksumGateError(RuntimeError):
    """The gate blocks a backup: replication stopped, lag, or stale/missing checksum results."""


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


def replica_health(target: MySQLTarget | Session) -> ReplicaHealth:
    with connection(target) as conn:
        cur = conn.cursor()
        cur.execute(dialect_on(target, conn).replica_status)
        row = cur.fetchone()
        status = None if row is None else {c[0]: v for c, v in zip(cur.description, row, strict=True)}
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


# The diff query from the pt-table-checksum documentation ("REPLICA CHECKS"), over the source's
# columns as the pt that made the table named them: master_cnt/_crc, or source_cnt/_crc (3.6+).
def diff_where(source: str = "master") -> str:
    return f"{source}_cnt <> this_cnt OR {source}_crc <> this_crc OR ISNULL({source}_crc) <> ISNULL(this_crc)"


def checksum_findings(target: MySQLTarget | Session, replicate: str = DEFAULT_REPLICATE) -> ChecksumFindings:
    """Read this replica's own checksum table: freshness and the tables that differ (a session's
    time_zone is left at UTC)."""
    import MySQLdb

    name = quote_table(replicate)
    with connection(target) as conn:
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
        cur.execute(f"SELECT * FROM {name} LIMIT 0")
        source = "source" if "source_cnt" in {c[0] for c in cur.description} else "master"
        cur.execute(
            f"SELECT CONCAT(db, '.', tbl), COUNT(*), COALESCE(SUM(this_cnt - {source}_cnt), 0) FROM {name}"
            f" WHERE {diff_where(source)} GROUP BY db, tbl ORDER BY db, tbl"
        )
        diffs = tuple(TableDiff(str(t), int(c), int(d)) for t, c, d in cur.fetchall())
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
    """Query the replica (one session) and evaluate the gate."""
    try:
        with Session(target) as db:
            health = replica_health(db)
            findings = checksum_findings(db, policy.replicate)
    except ServerError:
        raise
    except Exception as exc:  # a MySQLdb error mid-query: name the server
        raise ServerError(f"checking {label} at {target.address}: {exc}") from exc
    return evaluate_gate(health, findings, policy, label)
