"""Lines of a backup tool's log that mean it is not doing what it was asked.

mariabackup and xtrabackup compare the datadir they were given with the one the server they
reached reports (SHOW VARIABLES) and only warn when they differ; the server's then wins, so the
tool copies another directory than the one asked for, typically another server's. The backup
makes each of these warnings an error (core/backup/impact.py LockWatch kills the tool at once).
"""

from __future__ import annotations

import re

_NOT_ASKED = re.compile(
    r"option 'datadir' has different values"
    r"|option 'datadir' points to nonexistent directory"
    r"|MySQL variable 'datadir' points to nonexistent directory"
)
_STAMP = re.compile(r"^\[\d+\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")


def not_what_was_asked(line: str) -> str | None:
    """The line, without its timestamp, when it says the tool copies something else than asked."""
    if not _NOT_ASKED.search(line):
        return None
    return _STAMP.sub("", line.strip()).removeprefix("Warning: ").rstrip(":")
