"""How the product starts its child processes: the environment each one gets, the open-files
limit they inherit, and what their stderr says when they fail.

Every process the core starts (the backup tools, gpg and the agent it forks, zstd, the
extractors, the xbstream checker, mariadb-binlog, the mariadb client, sandbox servers, dd,
pt-table-checksum) goes through `run()` or `popen()` here. The worker's own environment may hold
the GPG passphrase and cloud credentials; no child uses them (boto3 reads the credentials in
this process, gpg gets the passphrase through a pipe), and /proc/<pid>/environ shows a child's
environment for as long as it lives, the daemonised gpg-agent's after the run too. So a child
starts with `child_env()`: what locates programs, libraries, temporary files and the home
directory, and the time zone, plus what its caller sets on purpose (TZ=UTC for mariadb-binlog).

The backup tools keep every tablespace open: `raise_open_files_limit()` gives them the hard
limit, and `require_open_files()` refuses to start when even that is too low.

When a child fails, `summarize_stderr()` turns its stderr into the one line an error message
carries: the tool's own error lines first, page dumps and binary bytes dropped.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import subprocess
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

# Nothing secret lives here: where programs, libraries and temp files are (mariabackup and
# mariadbd write temp files to TMPDIR), the home directory (the client tools read their option
# files there) and the time zone. PYTHONPATH: the xbstream checker is this package, run by the
# same interpreter from a checkout that may not be installed.
PASSED = ("PATH", "HOME", "TMPDIR", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH")
# Messages in English whatever the worker's locale (stderr is parsed: "Broken pipe", zstd's byte
# count), text in UTF-8.
LOCALE = "C.UTF-8"


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: the variables of PASSED that are set, LC_ALL, and `extra`."""
    env = {name: os.environ[name] for name in PASSED if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env["LC_ALL"] = LOCALE
    env.update(extra or {})
    return env


# -- open files -----------------------------------------------------------------------------------------

# Besides one descriptor per tablespace, mariabackup / xtrabackup --backup need a few dozen of
# their own (redo log, system tablespace, undo, the stream, libraries).
OPEN_FILES_MARGIN = 64


class OpenFilesError(RuntimeError):
    """This worker's open-files limit cannot be raised far enough for a tool."""


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (the children inherit it) and
    return it. mariabackup --backup keeps every tablespace open; a worker usually starts with a
    soft limit of 1024, which a server with a thousand tables exceeds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        log.info("raised the open-files limit from %d to the hard limit %d for the tools", soft, wanted)
    return max(soft, wanted)


def require_open_files(count: int, what: str) -> int:
    """The open-files limit the tools get (raised to the hard limit), or OpenFilesError when `count`
    `what` (plus the tools' own descriptors) do not fit in it."""
    limit = raise_open_files_limit()
    if count + OPEN_FILES_MARGIN > limit:
        raise OpenFilesError(
            f"too many open files: {count} {what}, limit {limit}; raise LimitNOFILE in the worker's systemd unit "
            f"(or `ulimit -Hn` before starting it) to at least {count + OPEN_FILES_MARGIN}"
        )
    return limit


def run(
    argv: list[str], *, extra_env: Mapping[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run` with `child_env(extra_env)`."""
    return subprocess.run(argv, env=child_env(extra_env), **kwargs)


def popen(
    argv: list[str], *, extra_env: Mapping[str, str] | None = None, **kwargs: Any
) -> subprocess.Popen[Any]:
    """`subprocess.Popen` with `child_env(extra_env)`."""
    return subprocess.Popen(argv, env=child_env(extra_env), **kwargs)


def how_ended(returncode: int) -> str:
    """How a child ended, as a user reads it: `killed by signal 9` (an OOM kill, a kill -9), not
    the negative exit code subprocess reports ("exit -9")."""
    return f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"


# -- what a failed child's stderr says ------------------------------------------------------------------

# The tools' own error lines: mariabackup / xtrabackup ("[ERROR] InnoDB: ...", "Error number 24
# means ...", "FATAL ERROR: ..."), the clients, gpg, zstd, pt-table-checksum (Perl's die).
_CAUSE = re.compile(
    r"\[ERROR\]|FATAL|Error number|\berror\b|failed|Failed|Access denied|Can't|[Cc]annot|not empty|"
    r"unknown (?:option|variable)|corrupt|No space left|Permission denied|No such file|[Ii]nvalid|"
    r"Too many|No secret key|manipulated|unsupported|refused|[Tt]imeout|died|\bat .+ line \d+",
    re.IGNORECASE,
)
_FIRST = re.compile(r"\[ERROR\]|FATAL|Error number|\berror:", re.IGNORECASE)
_ERRNO = re.compile(r"Error number \d+ means")
_NOISE = re.compile(r"\[(?:Note|Warning)\]")
# "[00] 2026-12-01 11:16:23 " (mariabackup), "2026-12-01 11:16:23 0 " (InnoDB), anywhere in a line.
_STAMP = re.compile(r"\[\d{2}\] |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: \d+)? ")
# A page dump: "len 16384; hex 0000...; asc <raw page bytes>", up to the next message.
_HEXDUMP = re.compile(r"\s*len \d+; hex [0-9a-fA-F]*;?(?:\s*asc .*?(?=\[\d{2}\] \d{4}-|\n\S|$))?", re.DOTALL)
SUMMARY_CHARS = 1200
TAIL_BYTES = 256 * 1024


def tail_text(data: bytes, limit: int = TAIL_BYTES) -> str:
    """At most the last `limit` bytes of a tool's output as text, cut at a line start (`data` may
    hold one byte more than `limit`, to tell whether the cut falls on one)."""
    if len(data) > limit:
        cut = len(data) - limit
        if data[cut - 1 : cut] != b"\n":
            newline = data.find(b"\n", cut)
            cut = newline + 1 if newline >= 0 else len(data)
        data = data[cut:]
    return data.decode(errors="replace")


def summarize_stderr(text: str | bytes, limit: int = SUMMARY_CHARS) -> str:
    """One readable line from a tool's stderr: its own error lines first ([ERROR], Error number,
    FATAL, error:), then the other lines that name a cause (failed, Can't, not empty...), each once
    and without timestamps; page dumps and unprintable bytes dropped; the last line kept for
    context. Without any such line: the last few lines. Never more than `limit` characters."""
    if isinstance(text, bytes):
        text = tail_text(text)
    text = _HEXDUMP.sub("\n", text)
    lines: list[str] = []
    for raw in text.split("\n"):
        line = "".join(c for c in raw.replace("\t", " ") if c.isprintable()).strip()
        line = _STAMP.sub("", line).strip()
        # zstd -v's banner, and what is left of binary junk, say nothing.
        junk = not line or line.startswith("*** ") or sum(c.isalnum() for c in line) < len(line) / 3
        if not junk and line not in lines:
            lines.append(line)
    meaningful = [line for line in lines if not _NOISE.search(line)]
    # The errno explanation ("Error number 24 means 'Too many open files'") is the cause itself.
    first = sorted(
        (line for line in meaningful if _FIRST.search(line)), key=lambda line: not _ERRNO.search(line)
    )
    causes = first + [line for line in meaningful if _CAUSE.search(line) and line not in first]
    if not causes:
        causes = meaningful[-3:] or lines[-3:]
    elif meaningful and meaningful[-1] not in causes:
        causes.append(meaningful[-1])
    out = ""
    for line in causes:
        piece = line if not out else f"; {line}"
        if len(out) + len(piece) > limit:
            return (out + piece)[: limit - 3].rstrip() + "..."
        out += piece
    return out
