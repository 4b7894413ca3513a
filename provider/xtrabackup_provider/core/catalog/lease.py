"""Read leases: a restore, PITR or standby update in progress names what it reads, so retention
keeps it until the reader is done.

A lease is `<prefix>/<cluster>/<host>/leases/<token>.json` naming backup ids and binlogs
(`<server_uuid>/<binlog name>`, as retention names them), who holds it and its lease length. The
holder rewrites it every third of the lease while it runs and deletes it when done; a lease the
store says was last written longer ago than its lease plus STORE_CLOCK_MARGIN is dead (the
store's own clock, as for the host lock), so a killed restore blocks retention for one lease at
most. Any number of readers may hold leases at once; they never block a backup.

The race with retention is closed by order, not by a lock: the reader writes its lease and then
checks that every manifest it read still exists (`ReadLease.check`); retention, under the host
lock, drops leased items from its plan, deletes the manifests, reads the leases again and keeps
the data of any item leased meanwhile (core/retention/apply.py). Either the reader sees its
manifest gone and stops before downloading, or retention sees the lease and keeps the data.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..common.crashpoints import crash_point
from ..storage.base import StorageError
from .backups import Catalog
from .lock import STORE_CLOCK_MARGIN
from .manifest import CatalogError

log = logging.getLogger(__name__)

LEASES_DIR = "leases"
DEFAULT_READ_LEASE = timedelta(minutes=10)


@dataclass(frozen=True)
class LeaseInfo:
    key: str
    purpose: str
    holder: str
    backups: tuple[str, ...]
    binlogs: tuple[str, ...]
    written: str  # when the holder last renewed it (its own clock; for humans)

    def reason(self) -> str:
        return f"under a read lease of a running {self.purpose} ({self.holder}, renewed {self.written})"


@dataclass
class ReadLease:
    """`with ReadLease(catalog, "restore", backups=[...]):` while the chain is read."""

    catalog: Catalog
    purpose: str  # "restore", "point-in-time restore", "standby update"
    backups: Iterable[str] = ()
    binlogs: Iterable[str] = ()
    lease: timedelta = DEFAULT_READ_LEASE
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        self.backups, self.binlogs = tuple(self.backups), tuple(self.binlogs)
        self.key = f"{self.catalog.host_prefix}/{LEASES_DIR}/{self.token}.json"
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _body(self) -> bytes:
        body = {
            "purpose": self.purpose,
            "holder": f"{socket.gethostname()} pid {os.getpid()}",
            "backups": list(self.backups),
            "binlogs": list(self.binlogs),
            "lease_seconds": self.lease.total_seconds(),
            "written": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        return json.dumps(body, indent=2).encode()

    def __enter__(self) -> ReadLease:
        try:
            self.catalog.store.put_bytes(self.key, self._body())
        except StorageError as exc:  # e.g. a restore worker whose credentials may only read
            log.warning(
                "could not write the read lease %s (%s): retention does not know this %s is reading %s",
                self.key,
                exc,
                self.purpose,
                ", ".join(self.backups),
            )
            return self
        self._renewer = threading.Thread(target=self._renew, name="read-lease", daemon=True)
        self._renewer.start()
        return self

    def check(self) -> None:
        """After the lease is written: every leased backup must still have its manifest, or
        retention deleted it before it could see the lease (CatalogError naming it)."""
        for bid in self.backups:
            if not self.catalog.exists(bid):
                raise CatalogError(
                    f"backup {bid} was deleted (retention) while this {self.purpose} started; "
                    f"nothing was downloaded: choose another backup"
                )

    def _renew(self) -> None:
        while not self._stop.wait(self.lease.total_seconds() / 3):
            try:
                self.catalog.store.put_bytes(self.key, self._body())
            except Exception as exc:  # noqa: BLE001 - the run goes on; retention may then delete
                log.warning("could not renew the read lease %s: %s", self.key, exc)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._renewer is None:
            return  # never written
        self._renewer.join()
        crash_point("lease.before_release")
        try:
            self.catalog.store.delete([self.key])
        except Exception as exc:  # noqa: BLE001 - never mask the run's own outcome
            log.warning("could not remove the read lease %s (%s); it expires by itself", self.key, exc)


def live_leases(catalog: Catalog) -> list[LeaseInfo]:
    """Every lease of the host that is still renewed (by the store's clock)."""
    return scan_leases(catalog)[0]


def scan_leases(catalog: Catalog) -> tuple[list[LeaseInfo], list[str]]:
    """(the live leases, the keys of dead ones): a lease not renewed for longer than its length
    plus STORE_CLOCK_MARGIN (the store's clock) belongs to a reader that is gone."""
    prefix = f"{catalog.host_prefix}/{LEASES_DIR}/"
    live, dead = [], []
    for info in catalog.store.list(prefix):
        current = catalog.store.get_versioned(info.key)
        if current is None:
            continue
        try:
            raw: dict[str, Any] = json.loads(current.data)
            lease = timedelta(seconds=float(raw.get("lease_seconds") or DEFAULT_READ_LEASE.total_seconds()))
        except (ValueError, TypeError, OverflowError):
            log.warning("ignoring the unreadable read lease %s", info.key)
            continue
        if current.age is not None and current.age > lease + STORE_CLOCK_MARGIN:
            dead.append(info.key)  # its holder is gone
            continue
        with contextlib.suppress(TypeError, ValueError):
            live.append(
                LeaseInfo(
                    info.key,
                    str(raw.get("purpose", "restore")),
                    str(raw.get("holder", "?")),
                    tuple(str(b) for b in raw.get("backups", ())),
                    tuple(str(b) for b in raw.get("binlogs", ())),
                    str(raw.get("written", "?")),
                )
            )
    return live, dead


def remove_dead_leases(catalog: Catalog) -> list[str]:
    """Delete the leases of readers that are gone (a killed restore never deletes its own):
    retention already ignores them, so this only keeps the leases folder from growing."""
    dead = scan_leases(catalog)[1]
    if dead:
        catalog.store.delete(dead)
        log.info("removed %d expired read lease(s) of readers that are gone", len(dead))
    return dead


def leased_items(catalog: Catalog) -> dict[str, str]:
    """Item name (backup id, `<server_uuid>/<binlog>`) -> why it is kept, for retention."""
    reasons: dict[str, str] = {}
    for lease in live_leases(catalog):
        for name in (*lease.backups, *lease.binlogs):
            reasons.setdefault(name, lease.reason())
    return reasons
