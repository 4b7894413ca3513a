"""Read leases: a restore, PITR or standby update in progress names what it reads, so retention
keeps it until the reader is done.

A lease is `<prefix>/<cluster>/<host>/leases/<token>.json` naming backup ids and binlogs
(`<server_uuid>/<binlog name>`, as retention names them), who holds it and its lease length. The
holder rewrites it every third of the lease while it runs and deletes it when done; a lease the
store says was last written longer ago than its lease plus STORE_CLOCK_MARGIN is dead (the
store's own clock, as for the host lock), so a killed restore blocks retention for one lease at
most. So is, at once, a lease whose holder ran on this machine and whose process is gone (the
host lock's rule, core/catalog/lock.py `process_gone`): a retention run or `retention apply` on
the reader's machine frees what a killed restore held without waiting for its lease. Any number
of readers may hold leases at once; they never block a backup.

The race with retention is closed by order, not by a lock: the reader writes its lease and then
checks that every manifest it read still exists (`ReadLease.check`: the backups' and the
binlogs'); retention, under the host lock, drops leased items from its plan, deletes the
manifests, reads the leases again and keeps the data of any item leased meanwhile
(core/retention/apply.py). Either the reader sees its manifest gone and stops before
downloading, or retention sees the lease and keeps the data.

So a lease that cannot be written (a worker whose credentials may only read, a full quota) is
an error: nothing tells retention that the read is going on. `unleased_ok` (the CLI's
`--without-read-lease`) accepts that risk; the log then says what retention may delete.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..common.crashpoints import crash_point
from ..storage.base import StorageError
from .backups import Catalog
from .lock import STORE_CLOCK_MARGIN, process_gone, this_process
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


class LeaseError(CatalogError):
    """The read lease could not be written (the message names it and the option that accepts it)."""


@dataclass
class ReadLease:
    """`with ReadLease(catalog, "restore", backups=[...]):` while the chain is read. Binlogs are
    named `<server_uuid>/<binlog>`; `binlog_manifest` maps such a name to the keys of its manifests
    (the binlog layer's, core/binlog/catalog.py: complete, or the open binlog's partial one; any
    of them shows it is stored), for `check`."""

    catalog: Catalog
    purpose: str  # "restore", "point-in-time restore", "standby update"
    backups: Iterable[str] = ()
    binlogs: Iterable[str] = ()
    lease: timedelta = DEFAULT_READ_LEASE
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    unleased_ok: bool = False  # go on without a lease when it cannot be written (logged)
    binlog_manifest: Callable[[str], Sequence[str]] | None = None

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
            **this_process(),
        }
        return json.dumps(body, indent=2).encode()

    def __enter__(self) -> ReadLease:
        try:
            self.catalog.store.put_bytes(self.key, self._body())
        except StorageError as exc:  # e.g. a restore worker whose credentials may only read
            what = ", ".join((*self.backups, *self.binlogs))
            if not self.unleased_ok:
                raise LeaseError(
                    f"could not write the read lease {self.catalog.store.location}/{self.key} ({exc}): retention "
                    f"would not know this {self.purpose} reads {what}. Let this worker write under "
                    f"{self.catalog.host_prefix}/{LEASES_DIR}/, or accept the risk (--without-read-lease)"
                ) from exc
            log.warning(
                "could not write the read lease %s (%s); going on without it as asked (--without-read-lease): "
                "retention may delete %s while this %s reads it",
                self.key,
                exc,
                what,
                self.purpose,
            )
            return self
        crash_point("lease.after_write")
        self._renewer = threading.Thread(target=self._renew, name="read-lease", daemon=True)
        self._renewer.start()
        return self

    def check(self) -> None:
        """After the lease is written: every leased backup and binlog must still have its
        manifest, or retention deleted it before it could see the lease (CatalogError naming it)."""
        for bid in self.backups:
            if not self.catalog.exists(bid):
                raise CatalogError(
                    f"backup {bid} was deleted (retention) while this {self.purpose} started; "
                    f"nothing was downloaded: choose another backup"
                )
        if self.binlogs and self.binlog_manifest is None:
            raise ValueError("a lease naming binlogs needs binlog_manifest to check them")
        for name in self.binlogs:
            assert self.binlog_manifest is not None
            if all(self.catalog.store.head(key) is None for key in self.binlog_manifest(name)):
                raise CatalogError(
                    f"binlog {name} was deleted (retention) while this {self.purpose} started; nothing was "
                    "downloaded: choose a later point in time, or a backup whose binlogs are still stored"
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
    plus STORE_CLOCK_MARGIN (the store's clock), or whose holder's process is gone from this
    machine, belongs to a reader that is gone."""
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
        expired = current.age is not None and current.age > lease + STORE_CLOCK_MARGIN
        if expired or process_gone(raw.get("machine"), raw.get("pid"), raw.get("pid_start")):
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
        crash_point("lease.before_removal")
        catalog.store.delete(dead)
        log.info("removed %d read lease(s) of readers that are gone", len(dead))
    return dead


def leased_items(catalog: Catalog) -> dict[str, str]:
    """Item name (backup id, `<server_uuid>/<binlog>`) -> why it is kept, for retention."""
    reasons: dict[str, str] = {}
    for lease in live_leases(catalog):
        for name in (*lease.backups, *lease.binlogs):
            reasons.setdefault(name, lease.reason())
    return reasons
