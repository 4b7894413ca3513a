"""What a killed backup run left, removed by the next run of the host when the killed run is
proven dead.

A run killed between its objects and its manifest (SIGKILL, an OOM kill, a K-part commit cut
between two parts) leaves a backup directory without a manifest: debris that retention removes
after `debris_grace_days`, because in general nothing proves its writer stopped (a run whose
lease ran out may be a stalled process that still writes). When the next run took the host lock
from a holder whose process is gone from this machine (core/catalog/lock.py, `Holder.gone`),
that proof exists: the holder will never write again, and every directory without a manifest
whose id is not older than the moment it took the lock is its attempt (the lock lets one backup
run at a time, ids follow the clock of this machine). Those directories are removed at once,
under the lock; Object Lock may keep some objects, which are named and left to retention.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from ..catalog.backups import Catalog
from ..catalog.lock import Holder
from ..catalog.manifest import BACKUP_ID_RE, MANIFEST_NAME
from ..common.crashpoints import crash_point
from ..storage.base import Deleted

log = logging.getLogger(__name__)


def remove_abandoned(catalog: Catalog, dead: Holder | None) -> list[str]:
    """Remove the backup directories `dead` (a backup run proven dead) stored without a manifest;
    the ids removed."""
    if dead is None or dead.purpose != "backup":
        return []
    try:
        since = datetime.fromisoformat(dead.acquired_at).strftime("%Y%m%dT%H%M%SZ")
    except (TypeError, ValueError):
        return []  # a holder of an unknown form: its debris waits for retention
    prefix = f"{catalog.host_prefix}/backups/"
    dirs: dict[str, list[str]] = defaultdict(list)
    for info in catalog.store.list(prefix):
        backup_id, _, name = info.key[len(prefix) :].partition("/")
        if name and BACKUP_ID_RE.match(backup_id):
            dirs[backup_id].append(name)
    removed = []
    for backup_id, names in sorted(dirs.items()):
        if backup_id[:16] < since or MANIFEST_NAME in names:
            continue
        keys = [catalog.object_key(backup_id, n) for n in names]
        crash_point("abandoned.before_removal")
        done = catalog.store.delete(keys) or Deleted()
        kept = (
            f"; Object Lock keeps {', '.join(done.retained)} until its retention ends"
            if done.retained
            else ""
        )
        log.warning(
            "removed the abandoned attempt %s of %s (its process is gone from this machine): %d object(s), "
            "no manifest%s",
            catalog.describe(backup_id),
            dead.describe(),
            len(keys),
            kept,
        )
        removed.append(backup_id)
    return removed
