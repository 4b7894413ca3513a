"""How the product starts its child processes: the environment each one gets.

Every process the core starts (the backup tools, gpg and the agent it forks, zstd, the
extractors, the xbstream checker, mariadb-binlog, the mariadb client, sandbox servers, dd,
pt-table-checksum) goes through `run()` or `popen()` here. The worker's own environment may hold
the GPG passphrase and cloud credentials; no child uses them (boto3 reads the credentials in
this process, gpg gets the passphrase through a pipe), and /proc/<pid>/environ shows a child's
environment for as long as it lives, the daemonised gpg-agent's after the run too. So a child
starts with `child_env()`: what locates programs, libraries, temporary files and the home
directory, and the time zone, plus what its caller sets on purpose (TZ=UTC for mariadb-binlog).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import Any

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
