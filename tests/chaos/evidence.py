"""Where a fault must show, and which fault explains a check alert.

Evidence: the task logs Airflow wrote (JSON lines with their own timestamps), the run's CLI logs,
and Airflow's audit log (`audit:<event>`: e.g. the "heartbeat timeout" the scheduler records for
a task whose worker died; the UI's Browse > Audit Log). A line counts for a fault when it was
written after the fault began and within its bound.

Alerts: the check DAG's host lines (WARNING / CRITICAL). Each finding of an alert (a failed
restore test, the RPO, the binlog lag, copies behind, an unreadable store) must be explained by a
fault that can cause that finding and had an effect (its victim and its evidence), on the alert's
cluster, and recent enough that the finding still lasts: the next scheduled run of what the fault
broke clears it (FINDINGS' bounds, from the fleet's schedules); a finding of the RPO or the binlog
lag is explained as well by the loss the checker's ledger measured itself then (tests/chaos/
ledger.py). The proxies' background faults explain a finding only when its text names the S3
error and one was answered in the minutes the check ran. Anything else is a false alert.

Missed alerts: a loss of the RPO or of shipping the ledger measured (past the fleet's thresholds
and a margin for the check's own sampling) that no alert of that finding and cluster named within
ALERT_WITHIN of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faults import Fault

ALERT = re.compile(r"\b(CRITICAL|WARNING|OK) (\w+)/(\w+): (.*)")
MIN = 60.0
# finding -> (pattern over the alert line, the fault kinds that can cause it, how long after a
# fault's end the finding can last). Restore tests run every 10 min and take up to 10 on a busy
# machine; binlog lag alerts after 6 min, shipping restarts every 5; copies and the RPO alert
# after 15 min, backups run every 4.
FINDINGS: dict[str, tuple[re.Pattern[str], frozenset[str], float]] = {
    "restore_test": (
        re.compile(r"the last restore test \(|no restore test has passed yet|restore test passed [^;]*, over"),
        frozenset({"kill_worker", "kill_tool", "restart_db", "scratch_full", "reseed_replica", "s3_partition",
                   "damage_object", "kill_scheduler", "kill_redis", "spool_full", "restart_s3"}),
        25 * MIN,
    ),
    "rpo": (
        re.compile(r"over the RPO|no restorable backup"),
        frozenset({"kill_worker", "kill_tool", "kill_cli", "restart_db", "clock_skew", "reseed_replica", "s3_partition",
                   "pause_past_lease", "kill_scheduler", "kill_redis", "spool_full", "clock_ahead", "restart_s3",
                   "worker_clock"}),
        25 * MIN,
    ),
    "binlogs": (
        re.compile(r"binlogs shipped up to [^;]*, over|no binlog is shipped|binlog gap |binlog lag unknown|"
                   r"cannot read the shipped binlogs|cannot read the binlog gaps"),
        frozenset({"kill_worker", "restart_db", "reseed_replica", "s3_partition", "kill_redis", "spool_full",
                   "restart_s3", "pause_shipper"}),
        16 * MIN,
    ),
    "copies": (
        re.compile(r"copy target \S+ cannot be read|copies on \S+: \d+ backup\(s\) behind, the oldest finished (?P<age>[^,;]+) ago"),
        # worker_clock: a backup registered 20 minutes behind has "finished" 20 minutes before its copy.
        frozenset({"kill_worker", "kill_tool", "s3_partition", "kill_redis", "spool_full", "restart_s3", "worker_clock"}),
        25 * MIN,
    ),
    "storage": (
        re.compile(r"cannot read the catalog|unreadable manifest|unreadable restore report|cannot read the restore tests|not restorable: "),
        frozenset({"s3_partition", "damage_object", "restart_s3"}),
        5 * MIN,
    ),
}  # fmt: skip
COPIES_LIMIT = 0.25 * 3600  # the fleet's copies_max_behind_hours
# The fleet's check thresholds (fleet.py: binlog_max_lag_minutes 6, rpo_hours 0.25); a loss counts
# for a missed alert once past them by a margin (the check measures from the replica, every 5 min),
# and must be alerted within ALERT_WITHIN (the check's schedule twice).
LOSSES = {"binlogs": (6 * MIN, 3 * MIN), "rpo": (15 * MIN, 5 * MIN)}
ALERT_WITHIN = 10 * MIN
PROXY_NEAR = 5 * MIN  # a check run's own requests: the proxy fault that can have failed one
S3_ERROR = re.compile(
    r"InternalError|SlowDown|\b50[03]\b|reset by peer|Connection was closed|IncompleteRead|Read timeout|"
    r"ResponseStreamingError|Connection broken|Could not connect"
)


def lines(work: Path, since: float) -> Iterator[tuple[float, str, str]]:
    """(time, file, text) of every log line written at or after `since`."""
    for path in (work / "airflow" / "logs").rglob("*"):
        if path.is_file() and path.stat().st_mtime >= since:
            for raw in path.read_text(errors="replace").splitlines():
                t = _stamp(raw)
                if t is not None and t >= since:
                    yield t, str(path), raw
    for path in (work / "cli").glob("*.log") if (work / "cli").is_dir() else []:
        t = float(path.name.split("-", 1)[0])
        if t >= since:
            for raw in path.read_text(errors="replace").splitlines():
                yield t, str(path), raw


def _stamp(raw: str) -> float | None:
    if not raw.startswith("{"):
        return None
    try:
        value = json.loads(raw).get("timestamp")
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def find(work: Path, fault: Fault, stack: Any = None) -> str | None:
    """Where the fault's evidence shows within its bound (None: not yet / not at all)."""
    if fault.evidence is None:
        return "no victim"
    if fault.evidence.startswith("audit:"):
        return _audit(stack, fault, fault.evidence.removeprefix("audit:"))
    found = []
    for evidence in (fault.evidence, *fault.more_evidence):
        pattern = re.compile(evidence)
        hit = next((f"{Path(p).name}: {raw[:200]}" for t, p, raw in lines(work, fault.t0)
                    if t <= fault.t0 + fault.bound_s and fault.where in p and pattern.search(raw)), None)  # fmt: skip
        if hit is None:
            return None
        found.append(hit)
    return " | ".join(found)


def _audit(stack: Any, fault: Fault, event: str) -> str | None:
    """Airflow's audit log names one of the fault's victims with `event` within the bound."""
    rows = (
        stack.db("SELECT dttm, dag_id, task_id, run_id, extra FROM log WHERE event = ?", event)
        if stack
        else []
    )
    victims = {tuple(v) for v in fault.victims}
    for dttm, dag_id, task_id, run_id, extra in rows:
        t = _db_time(dttm)
        if (dag_id, task_id, run_id) in victims and fault.t0 <= t <= fault.t0 + fault.bound_s:
            return f"Airflow audit log: {event} of {dag_id}.{task_id} ({run_id}): {str(extra)[:120]}"
    return None


def _db_time(value: str) -> float:
    when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


# -- alerts ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    t: float
    status: str
    cluster: str
    line: str


@dataclass(frozen=True)
class ProxyFault:
    t: float
    endpoint: str
    fault: str


def alerts(work: Path, since: float) -> list[Alert]:
    """Every host line the check DAG logged (OK lines too: a host's first OK starts its watch)."""
    out = []
    for t, path, raw in lines(work, since):
        if "mysql_backup_check_" not in path:
            continue
        try:
            event = str(json.loads(raw).get("event", ""))
        except ValueError:
            continue
        if m := ALERT.search(event):
            out.append(Alert(t, m.group(1), m.group(2), event))
    return sorted(out, key=lambda a: a.t)


def findings(line: str) -> list[str]:
    """The kinds of non-OK findings an alert line holds."""
    out = []
    for name, (pattern, _kinds, _bound) in FINDINGS.items():
        for m in pattern.finditer(line):
            age = m.groupdict().get("age")
            if age is None or _seconds(age) > COPIES_LIMIT:
                out.append(name)
                break
    return out


def _seconds(text: str) -> float:
    """core/report/html.py's fmt_seconds, read back ("4 min 07 s", "57.3 s", "1 h 02 min", "2 d 3 h")."""
    units = {"d": 86400, "h": 3600, "min": 60, "s": 1}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+) (d|h|min|s)\b", text))


# cluster -> (time, shipping lag s, newest backup's age s), as the checker's ledger measured them
History = dict[str, list[tuple[float, float, float]]]


def explain(alert: Alert, faults: list[Fault], proxy: list[ProxyFault], history: History | None = None,
            lag_floor: Callable[[str, float], float] | None = None) -> list[str]:  # fmt: skip
    """What explains each finding of the alert; a finding nothing explains is named "UNEXPLAINED".
    `lag_floor(cluster, t)`: the least shipping lag the ledger proves at `t` (between its sweeps)."""
    out = []
    kinds = findings(alert.line) or ["unrecognised"]
    for finding in kinds:
        why = (
            _lag_proven(finding, alert, lag_floor)
            or _measured(finding, alert, history or {})
            or _explains(finding, alert, faults, proxy)
        )
        out.append(f"{finding}: {why}" if why else f"{finding}: UNEXPLAINED")
    return out


def _lag_proven(finding: str, alert: Alert, lag_floor: Callable[[str, float], float] | None) -> str | None:
    if finding != "binlogs" or lag_floor is None:
        return None
    least = lag_floor(alert.cluster, alert.t)
    if least < LOSSES["binlogs"][0] / 2:
        return None
    return f"the ledger: the oldest acknowledged transaction not shipped had waited at least {least:.0f} s"


def _measured(finding: str, alert: Alert, history: History) -> str | None:
    """The ledger's own measure of the loss the finding names, near the alert (half its threshold:
    the check measures from the replica, between the ledger's sweeps)."""
    if finding not in LOSSES:
        return None
    threshold, _margin = LOSSES[finding]
    column = 1 if finding == "binlogs" else 2
    near = [r for r in history.get(alert.cluster, []) if alert.t - 5 * MIN <= r[0] <= alert.t + 3 * MIN]
    worst = max(near, key=lambda r: r[column], default=None)
    if worst is None or worst[column] < threshold / 2:
        return None
    what = "shipping lag" if finding == "binlogs" else "newest backup's age"
    return f"the ledger measured a {what} of {worst[column]:.0f} s at {_hms(worst[0])}"


def losses(history: History) -> list[tuple[str, str, float, float]]:
    """(cluster, finding, began, ended) of each loss of the RPO or of shipping the ledger measured."""
    out = []
    for cluster, rows in history.items():
        for finding, (threshold, margin) in LOSSES.items():
            column = 1 if finding == "binlogs" else 2
            began = None
            for t, *values in [*rows, (float("inf"), 0.0, 0.0)]:
                over = values[column - 1] > threshold + margin
                if over and began is None:
                    began, ended = t, t
                elif over:
                    ended = t
                elif began is not None:
                    out.append((cluster, finding, began, ended))
                    began = None
    return out


def missed(history: History, seen: list[Alert]) -> list[str]:
    """Each loss no alert of its finding on its cluster named within ALERT_WITHIN of it; a loss too
    close to the last check of its cluster to have been alerted yet is not judged."""
    out = []
    for cluster, finding, began, ended in losses(history):
        mine = [a for a in seen if a.cluster == cluster]
        if not mine or began + ALERT_WITHIN > max(a.t for a in mine):
            continue
        if not any(
            a.status != "OK"
            and finding in findings(a.line)
            and began - ALERT_WITHIN <= a.t <= ended + ALERT_WITHIN
            for a in mine
        ):
            out.append(
                f"{cluster}: {finding} lost from {_hms(began)} to {_hms(ended)} (the ledger), no alert named it"
            )
    return out


def _explains(finding: str, alert: Alert, faults: list[Fault], proxy: list[ProxyFault]) -> str | None:
    if finding not in FINDINGS:
        return None
    _pattern, kinds, bound = FINDINGS[finding]
    for f in faults:
        if f.kind not in kinds or alert.cluster not in f.clusters:
            continue
        if f.evidence is None or f.seen is None:
            continue  # no victim, or its effect never showed: it explains nothing
        if (
            f.kind in ("s3_partition", "restart_s3")
            and f.note.split(":")[0] == "offsite"
            and finding != "copies"
        ):
            continue  # the offsite copies' endpoint: only the copies can suffer
        if f.t0 <= alert.t <= f.t1 + bound:
            return f"{f.kind} {f.target} at {_hms(f.t0)}"
    if S3_ERROR.search(alert.line):
        near = [p for p in proxy if p.t <= alert.t <= p.t + PROXY_NEAR]
        if near:
            return f"the S3 proxy's {near[-1].fault} on {near[-1].endpoint} at {_hms(near[-1].t)} (named in the alert)"
    return None


def _hms(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%SZ")
