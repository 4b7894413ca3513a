"""The restore's own error, apart from the verbs, so that the locks (standby_lock.py) and the
chain restore (chain.py) can both raise it without importing each other."""

from __future__ import annotations


class RestoreError(RuntimeError):
    """The restore cannot go on; the message names the backup, object or directory."""
