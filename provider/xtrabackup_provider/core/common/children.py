"""How the product starts its child processes: the environment each one gets, the options a
MySQL/MariaDB tool reads, the open-files limit they inherit, and what their stderr says when they fail.

Every process the core starts (the backup tools, gpg and the agent it forks, zstd, the
extractors, the xbstream checker, mariadb-binlog, the mariadb client, sandbox servers, dd,
pt-table-checksum) goes through `run()` or `popen()` here. The worker's own environment may hold
the GPG passphrase and cloud credentials; no child uses them (boto3 reads the credentials in
this process, gpg gets the passphrase through a pipe), and /proc/<pid>/environ shows a child's
environment for as long as it lives, the daemonised gpg-agent's after the run too. So a child
starts with `child_env()`: what locates programs, libraries and temporary files, and the time
zone, plus what its caller sets on purpose (TZ=UTC for mariadb-binlog).

Only our settings reach a tool. A MySQL or MariaDB program reads /etc/my.cnf, /etc/mysql/*,
$MYSQL_HOME/my.cnf, ~/.my.cnf (and MySQL's ~/.mylogin.cnf, even with --no-defaults) unless its
first option says otherwise; `--defaults-extra-file` only adds a file to that list, so a host's
~/.my.cnf could steer mariabackup to another server. Hence: every child gets a private, empty
HOME (`private_home()`) and no MYSQL_HOME, MYSQL_PWD or MYSQL_TEST_LOGIN_FILE; and `check_tool_options()`
refuses to start a program of OPTION_FILE_READERS whose first option is not `--defaults-file=`
(a file we wrote, or the one the host's config names) or `--no-defaults`, or pt-table-checksum
without `--config` first (it reads ~/.percona-toolkit.conf otherwise). mbstream, xbstream and
innochecksum read no option file (checked with strace on MariaDB 10.11: mbstream and innochecksum
even refuse --no-defaults).

The backup tools keep every tablespace open: `raise_open_files_limit()` gives them the hard
limit, and `require_open_files()` refuses to start when even that is too low.

When a child fails, `summarize_stderr()` turns its stderr into the one line an error message
carries: the tool's own error lines first, page dumps and binary bytes dropped.
"""

from __future__ import annotations

__all__ = ["run", "popen", "summarize_stderr"]

import atexit
import logging
import os
import re
import resource
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .tempdirs import HOME, OWNER, private_dir

log = logging.getLogger(__name__)

# Nothing secret lives here: where programs, libraries and temp files are (mariabackup and
# mariadbd write temp files to TMPDIR) and the time zone. PYTHONPATH: the xbstream checker is this
# package, run by the same interpreter from a checkout that may not be installed. Never HOME: a
# child gets private_home() instead, and nothing that points a MySQL client at a server or file.
PASSED = ("PATH", "TMPDIR", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH")
NEVER = (
    "HOME",
    "MYSQL_HOME",
    "MYSQL_PWD",
    "MYSQL_TEST_LOGIN_FILE",
    "MYSQL_HOST",
    "MYSQL_TCP_PORT",
    "MYSQL_UNIX_PORT",
)
# Messages in English whatever the worker's locale (stderr is parsed: "Broken pipe", zstd's byte
# count), text in UTF-8.
LOCALE = "C.UTF-8"


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: the variables of PASSED that are set, a private empty
    HOME, LC_ALL, and `extra` (which may not set any of NEVER)."""
    if bad := sorted(set(extra or ()) & set(NEVER)):
        raise ValueError(f"a child process may not be given {', '.join(bad)}: only our settings reach a tool")
    env = {name: os.environ[name] for name in PASSED if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(private_home())
    env["LC_ALL"] = LOCALE
    env.update(extra or {})
    return env


_home: tuple[int, Path] | None = None  # (the pid that made it, the directory)


def private_home() -> Path:
    """An empty 0700 directory of this process, the HOME of every child: no ~/.my.cnf,
    ~/.mylogin.cnf or ~/.percona-toolkit.conf of the worker's user reaches a tool. A new one when
    something wrote into it, or after a fork (the parent's may be swept when it exits)."""
    global _home
    if _home is None or _home[0] != os.getpid() or not _empty(_home[1]):
        _home = (os.getpid(), private_dir(HOME))
        atexit.register(_remove_home, *_home)
    return _home[1]


def _remove_home(pid: int, path: Path) -> None:
    if os.getpid() == pid:  # not in a forked child that inherited this exit handler
        shutil.rmtree(path, ignore_errors=True)


def _empty(path: Path) -> bool:
    """Nothing in it but its owner record (core/common/tempdirs.py)."""
    try:
        with os.scandir(path) as entries:
            return all(entry.name == OWNER for entry in entries)
    except OSError:
        return False


# Programs that read MySQL/MariaDB option files unless their first option is --defaults-file or
# --no-defaults (matched by the program's file name, after any WRAPPERS).
OPTION_FILE_READERS = frozenset(
    {
        "mariabackup",
        "mariadb-backup",
        "xtrabackup",
        "mariadb",
        "mysql",
        "mariadb-binlog",
        "mysqlbinlog",
        "mariadb-admin",
        "mysqladmin",
        "mariadbd",
        "mysqld",
        "mariadb-install-db",
        "mysql_install_db",
        "mariadb-dump",
        "mysqldump",
    }
)
PERCONA_TOOLKIT = "pt-"  # pt-table-checksum & co: --config first, or ~/.percona-toolkit.conf is read
WRAPPERS = frozenset({"nice", "ionice", "setsid", "taskset", "chrt"})  # (impact.py puts the first two)


class ToolOptionsError(RuntimeError):
    """A MySQL/MariaDB tool would read option files we did not choose; it was not started."""


def program(argv: list[str]) -> tuple[str, list[str]]:
    """The program an argv runs, past nice/ionice & co and their options, and its arguments."""
    i = 0
    while i < len(argv) and os.path.basename(argv[i]) in WRAPPERS:
        i += 1
        while i < len(argv) and (argv[i].startswith("-") or argv[i].isdigit()):
            i += 1
    return (os.path.basename(argv[i]), argv[i + 1 :]) if i < len(argv) else ("", [])


def check_tool_options(argv: list[str]) -> None:
    """Refuse an argv in which a MySQL/MariaDB program reads option files we did not choose."""
    name, args = program(argv)
    first = args[0] if args else ""
    if name in OPTION_FILE_READERS:
        if not (first.startswith("--defaults-file=") or first == "--no-defaults") or any(
            a.startswith("--defaults-extra-file") for a in args
        ):
            raise ToolOptionsError(
                f"refusing to start {name}: its first option must be --defaults-file=<ours> or --no-defaults "
                f"and it takes no --defaults-extra-file (got {first or 'nothing'!r}); otherwise it reads the "
                "host's option files (/etc/mysql, ~/.my.cnf), which can point it at another server"
            )
    elif name.startswith(PERCONA_TOOLKIT) and not first.startswith("--config="):
        raise ToolOptionsError(
            f"refusing to start {name}: its first option must be --config=<file>, or it reads "
            "/etc/percona-toolkit and ~/.percona-toolkit.conf"
        )


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
    """`subprocess.run` with `child_env(extra_env)`, once `check_tool_options(argv)` passed."""
    check_tool_options(argv)
    return subprocess.run(argv, env=child_env(extra_env), **kwargs)


def popen(
    argv: list[str], *, extra_env: Mapping[str, str] | None = None, **kwargs: Any
) -> subprocess.Popen[Any]:
    """`subprocess.Popen` with `child_env(extra_env)`, once `check_tool_options(argv)` passed."""
    check_tool_options(argv)
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


# A password or its hash in what a tool prints: mariabackup without a privilege prints the account's
# SHOW GRANTS (`IDENTIFIED BY PASSWORD '*F47C...'`), a server echoes statements in its errors.
# A string literal may hold '' and backslash escapes.
_CREDENTIAL = re.compile(
    r"(\bIDENTIFIED\b[^'\n]{0,80}?|PASSWORD\s*(?:=\s*|\(\s*)?)'(?:[^'\\\n]|\\.|'')*'", re.IGNORECASE
)


def hide_credentials(text: str) -> str:
    """`text` with every quoted password or password hash after IDENTIFIED / PASSWORD hidden."""
    return _CREDENTIAL.sub(r"\1'***'", text)


def summarize_stderr(text: str | bytes, limit: int = SUMMARY_CHARS) -> str:
    """One readable line from a tool's stderr: its own error lines first ([ERROR], Error number,
    FATAL, error:), then the other lines that name a cause (failed, Can't, not empty...), each once
    and without timestamps; page dumps and unprintable bytes dropped; the last line kept for
    context. Without any such line: the last few lines. Never more than `limit` characters."""
    if isinstance(text, bytes):
        text = tail_text(text)
    text = _HEXDUMP.sub("\n", text)
    text = hide_credentials(text)
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
