"""Counting the connections a verb opens to the servers it starts itself (the replay server of a
point-in-time restore, restore-table's sandbox), by each server: every sandbox the block starts
writes a general log to a file of the test's, read after the verb stopped the server. Its
connections are told apart by what they said: the sandbox's own readiness probe (a login and
nothing else: SandboxServer.start), the replay client (the binlog client's output, and the check
that it reaches the sandbox) and the verb's own."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xtrabackup_provider.core.db.sandbox import SandboxServer

# What the replay client says on its connections (the general log's words).
CLIENT = ("@OLD_COMPLETION_TYPE", "SELECT @@server_id, @@socket")
# What MySQLdb itself sends on connecting (no statement of the verb's).
LOGIN = re.compile(r"^(SET (autocommit|NAMES)\b|set autocommit=)", re.I)
_LINE = re.compile(r"^(?:\S+\s+\S+\s+|\S+Z\s+|\s+)(\d+)\s+(\w[\w ]*?)\t(.*)$")


@dataclass
class Opened:
    """The connections one sandbox accepted."""

    log: Path
    probes: int = 0  # logins that ran nothing (the readiness probe of SandboxServer.start)
    client: int = 0  # the replay client's (mariadb / mysql with the binlog client's output)
    ours: list[list[str]] = field(default_factory=list)  # the verb's own: what each said first

    def __str__(self) -> str:
        said = "; ".join(" | ".join(lines[:4]) for lines in self.ours)
        return f"{len(self.ours)} of the verb's own ({said}), {self.probes} probe(s), {self.client} by the client"


def read(log: Path) -> Opened:
    said: dict[int, list[str]] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if m:  # other lines: a header, or a statement's continuation
            said.setdefault(int(m.group(1)), []).append(f"{m.group(2).strip()} {m.group(3)}"[:100])
    opened = Opened(log)
    for lines in said.values():
        if not lines[0].startswith("Connect") or "Access denied" in lines[0]:
            continue
        statements = [ln for ln in lines[1:] if ln.startswith("Query")]
        if any(word in ln for word in CLIENT for ln in statements):
            opened.client += 1
        elif all(LOGIN.match(ln.removeprefix("Query ")) for ln in statements):
            opened.probes += 1
        else:
            opened.ours.append(lines)
    return opened


@contextlib.contextmanager
def sandbox_connections(monkeypatch: pytest.MonkeyPatch, logs: Path) -> Iterator[list[Opened]]:
    """Every sandbox started in the block logs its connections to `logs`; afterwards the list holds
    what each accepted, in the order they were started."""
    logs.mkdir(parents=True, exist_ok=True)
    server_args = SandboxServer.server_args
    numbers = itertools.count(1)
    started: list[Path] = []

    def logged(self: SandboxServer) -> list[str]:
        path = logs / f"sandbox-{next(numbers)}.log"
        started.append(path)
        return [*server_args(self), "--general-log=1", f"--general-log-file={path}"]

    found: list[Opened] = []
    with monkeypatch.context() as patch:
        patch.setattr(SandboxServer, "server_args", logged)
        yield found
    found.extend(read(path) for path in started if path.exists())
    for opened in found:  # what each connection did, when a count is off
        print(opened.log.name, opened)
