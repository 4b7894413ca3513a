"""One backup run per host at a time: a lease object beside the host's backups.

Retention takes the same lock while it deletes (`HostLock(catalog, purpose="retention")`), so a
backup never chooses a parent that a retention run is deleting, and retention never deletes
while a backup of the host is registering its manifest.

Two runs of one host at once (the CLI during a scheduled run, a zombie task and its retry)
would race for the same backup id and object key (ids have one-second resolution), fork the
chain and double the load on the server. The first run creates
`<prefix>/<cluster>/<host>/backup.lock` with a create-only write (S3 `If-None-Match`); a second
run finds it and fails, naming the holder. The holder renews its lease while it runs. A lock
whose lease ran out, or whose process is gone from this machine, is taken over with a
compare-and-swap on its ETag, so a killed worker does not block its host for long. A holder
whose process is gone from this machine is proven dead (`dead_holder`): it will never write
again, so the run that took its lock may remove what it left (core/backup/run.py).

Fencing: a run that lost its lock (taken over after its lease ran out, or its renewals failed for
longer than the lease) must not act as the holder. The renewal thread records the loss, and
`confirm()` (called right before a manifest is written or anything is deleted) renews the lease
with a compare-and-swap on the ETag: it fails, naming the new holder, unless this run still holds
the lock, and on success the lease runs a full period from that moment.

Expiry uses the store's own clock, never two workers' clocks: a lock is stale when the store says
it was last written (renewed) longer ago than the holder's lease plus STORE_CLOCK_MARGIN (its
LastModified against the Date of the same response; both have one-second resolution). The
`expires_at` in the body is only for humans. A store that did not report the age falls back to
`expires_at` plus the margin.

Conditional writes are what makes the lock exclusive, and some S3-compatible stores ignore
If-None-Match / If-Match. Before the first lock of a store (endpoint and bucket) in a process, a
probe object checks both and the store is refused, naming it, when it ignores them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..common.crashpoints import crash_point
from ..common.processes import machine_id as _machine
from ..common.processes import process_gone
from ..common.processes import start_ticks as _start_ticks
from ..common.processes import this_process as this_process  # lease.py and callers import it from here
from ..storage.base import ObjectStore, StorageError
from .backups import Catalog

log = logging.getLogger(__name__)

LOCK_NAME = "backup.lock"
SHIP_LOCK_NAME = "binlog-ship.lock"  # one binlog shipper per host (core/binlog/ship.py)
DEFAULT_LEASE = timedelta(minutes=2)  # renewed every third of it while the run lives
# One second of resolution on each of the two store times, and a little more.
STORE_CLOCK_MARGIN = timedelta(seconds=2)
PROBE_NAME = ".xbp-conditional-write-probe"
_HELD: set[str] = set()  # tokens of the locks this process holds right now
_PROBED: set[tuple[str, str]] = set()  # (location, endpoint) of the stores that passed the probe
_PROBE_LOCK = threading.Lock()


class HostLockBusy(RuntimeError):
    """Another run holds the host's lock (or took it from this run); the message names it."""


def check_conditional_writes(store: ObjectStore, prefix: str) -> None:
    """Refuse a store that ignores If-None-Match or If-Match (StorageError naming it); once per
    store and endpoint in this process."""
    where = (store.location, store.endpoint_url or "")
    with _PROBE_LOCK:
        if where in _PROBED:
            return
        key = f"{prefix}/{PROBE_NAME}-{uuid.uuid4().hex}"
        try:
            problem = _probe(store, key)
        finally:
            with contextlib.suppress(Exception):
                store.delete([key])
        if problem:
            at = f" at {store.endpoint_url}" if store.endpoint_url else ""
            raise StorageError(
                f"{store.location}{at} ignores conditional writes: {problem}; two runs of a host could "
                f"both hold {LOCK_NAME}. Use a store that honours If-None-Match and If-Match "
                "(AWS S3 does; check your S3-compatible store's version)"
            )
        _PROBED.add(where)


def _probe(store: ObjectStore, key: str) -> str | None:
    etag = store.put_new(key, b"probe 1")
    if etag is None:
        return "a create-only write (If-None-Match: *) of a new key was refused"
    if store.put_new(key, b"probe 2") is not None:
        return "If-None-Match: * was ignored (a second create-only write replaced the object)"
    if store.put_new(key, b"probe 3", if_match='"00000000000000000000000000000000"') is not None:
        return "If-Match was ignored (a write naming a wrong ETag replaced the object)"
    if store.put_new(key, b"probe 4", if_match=etag) is None:
        return "a write with If-Match naming the current ETag was refused"
    return None


@dataclass(frozen=True)
class Holder:
    token: str
    owner: str
    hostname: str
    pid: int
    acquired_at: str
    expires_at: str
    machine: str = ""
    pid_start: int | None = None
    purpose: str = "backup"  # what the holder does: "backup" or "retention"
    lease_seconds: float | None = None  # absent in locks of older releases: DEFAULT_LEASE
    # Holders proven dead before this one, whose leftovers it took on: handed on to the run that takes
    # the lock over from this one, should it die too before it cleaned up.
    dead_before: tuple[str, ...] = ()

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            raw: dict[str, Any] = json.loads(data)
            return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})
        except (ValueError, TypeError):
            return None  # an unreadable lock protects nothing: it is taken over

    @property
    def lease(self) -> timedelta:
        try:
            return timedelta(seconds=float(self.lease_seconds)) if self.lease_seconds else DEFAULT_LEASE
        except (TypeError, ValueError, OverflowError):
            return DEFAULT_LEASE

    def alive(self, now: datetime, age: timedelta | None = None) -> bool:
        """`age`: how long ago the store says the lock was last written (None: unknown)."""
        if self.token in _HELD:
            return True
        if self.machine and self.machine == _machine() and self.pid_start is not None:
            # Same machine: the process table is the truth, whatever the lease says.
            return self.pid != os.getpid() and _start_ticks(self.pid) == self.pid_start
        if age is not None:  # the store's clock: no two workers' clocks need to agree
            return age <= self.lease + STORE_CLOCK_MARGIN
        try:
            return now < datetime.fromisoformat(self.expires_at) + STORE_CLOCK_MARGIN
        except (ValueError, TypeError):  # not a time, or one without a zone: nothing to honour
            return False

    def gone(self) -> bool:
        """Proven dead: it ran on this machine and its process is gone. A lease that ran out proves
        nothing of the kind (a stalled holder elsewhere may still write objects)."""
        return self.token not in _HELD and process_gone(self.machine, self.pid, self.pid_start)

    def describe(self) -> str:
        return f"{self.owner} on {self.hostname} (pid {self.pid}) since {self.acquired_at}"


class HostLock:
    """`with HostLock(catalog):` holds the host's backup lock; HostLockBusy if another run has it.

    `purpose` names what the holder does ("backup", "retention"): it is written into the lock and
    into the error another run gets."""

    def __init__(
        self,
        catalog: Catalog,
        lease: timedelta = DEFAULT_LEASE,
        purpose: str = "backup",
        name: str = LOCK_NAME,
    ) -> None:
        self.purpose = purpose
        self.store = catalog.store
        self.key = f"{catalog.host_prefix}/{name}"  # one lock per name: backups, binlog shipping
        self.what = f"{catalog.cluster}/{catalog.host}"
        self.lease = lease
        self.token = uuid.uuid4().hex
        self.etag: str | None = None
        self.lost: str | None = None  # why this run no longer holds the lock (sticky)
        self.dead_holder: Holder | None = None  # the holder this run took the lock from, proven dead
        self.dead_before: tuple[str, ...] = ()  # its token and those it took on: theirs to clean up
        self._mutex = threading.Lock()  # one conditional write of the lock at a time
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.acquired_at = datetime.now(UTC)

    @property
    def where(self) -> str:
        return f"{self.store.location}/{self.key}"

    def _body(self, now: datetime) -> bytes:
        pid = os.getpid()
        holder = Holder(
            token=self.token,
            owner=f"xtrabackup-provider {self.purpose} of {self.what}",
            hostname=socket.gethostname(),
            pid=pid,
            acquired_at=self.acquired_at.isoformat(),
            expires_at=(now + self.lease).isoformat(),
            machine=_machine(),
            pid_start=_start_ticks(pid),
            purpose=self.purpose,
            lease_seconds=self.lease.total_seconds(),
            dead_before=self.dead_before,
        )
        return json.dumps(asdict(holder), indent=2).encode()

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def acquire(self) -> None:
        check_conditional_writes(self.store, self.key.rsplit("/", 1)[0])
        now = datetime.now(UTC)
        body = self._body(now)
        etag = self.store.put_new(self.key, body)
        if etag is None:
            etag = self._take_over(now, body)
        self.etag = etag
        _HELD.add(self.token)
        self._renewer = threading.Thread(target=self._renew, name="host-lock", daemon=True)
        self._renewer.start()

    def clock_ahead(self) -> timedelta | None:
        """How far this worker's clock is ahead of the store's (the Date of its answer to reading
        the lock just written; one-second resolution), or None when the store does not say."""
        try:
            current = self.store.get_versioned(self.key)
        except StorageError as exc:  # a check, not the backup: the run goes on without it
            log.warning("could not read the store's clock from %s: %s", self.where, exc)
            return None
        if current is None or current.store_now is None:
            return None
        return datetime.now(UTC) - current.store_now

    def _take_over(self, now: datetime, body: bytes) -> str:
        current = self.store.get_versioned(self.key)
        if current is None:  # released in the meantime
            etag = self.store.put_new(self.key, body)
        else:
            current_etag = current.etag
            holder = Holder.parse(current.data)
            if holder is not None and holder.token == self.token:
                return current_etag  # our own create, retried after its answer was lost
            if holder is not None and holder.alive(now, current.age):
                raise HostLockBusy(
                    f"{self.purpose} of {self.what} cannot start: another {holder.purpose} of {self.what} "
                    f"is running: {holder.describe()}; its lease runs until "
                    f"{holder.expires_at} and is renewed while it runs. If that run is gone, retry after "
                    f"the lease ends or delete {self.where}"
                )
            log.warning(
                "taking over the stale lock %s of %s",
                self.where,
                holder.describe() if holder else "an unreadable holder",
            )
            if holder is not None and holder.gone():
                # Taken on before the takeover is written, so the lock says it at once.
                self.dead_before = (holder.token, *holder.dead_before)
                body = self._body(now)
            etag = self.store.put_new(self.key, body, if_match=current_etag)
            if etag is not None and holder is not None and holder.gone():
                self.dead_holder = holder
            elif etag is None:
                self.dead_before = ()
            crash_point("lock.after_takeover")
        if etag is None:
            raced = self.store.get_versioned(self.key)
            if raced is None and (etag := self.store.put_new(self.key, body)) is not None:
                return etag  # the winner of the race has already released it
            raced = raced or self.store.get_versioned(self.key)
            winner = Holder.parse(raced.data) if raced else None
            raise HostLockBusy(
                f"{self.purpose} of {self.what} cannot start: another {winner.purpose if winner else 'run'} "
                f"of {self.what} took the lock {self.where} at the same moment"
                + (f": {winner.describe()}" if winner else "")
            )
        return etag

    def _renew(self) -> None:
        failing_since: float | None = None
        while not self._stop.wait(self.lease.total_seconds() / 3):
            try:
                self._renew_once()
            except HostLockBusy:
                log.error("%s; this run will register and delete nothing", self.lost)
                return
            except Exception as exc:  # noqa: BLE001 - the endpoint may be back before the lease ends
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.lease.total_seconds():
                    self.lost = (
                        f"{self.purpose} of {self.what} lost the host lock {self.where}: it could not be "
                        f"renewed for longer than its lease ({exc}), so another run may hold it now"
                    )
                    log.error("%s; this run will register and delete nothing", self.lost)
                    return
                log.warning("could not renew the lock %s: %s", self.where, exc)
                continue
            failing_since = None

    def _renew_once(self) -> None:
        """Rewrite the lock if it is still ours (compare-and-swap); HostLockBusy if it is not."""
        with self._mutex:
            if self.lost:
                raise HostLockBusy(self.lost)
            etag = self.store.put_new(self.key, self._body(datetime.now(UTC)), if_match=self.etag)
            if etag is None:
                current = self.store.get_versioned(self.key)
                holder = Holder.parse(current.data) if current else None
                now_held = f"; it is now held by {holder.describe()}" if holder else "; it is gone"
                self.lost = (
                    f"{self.purpose} of {self.what} lost the host lock {self.where} to another run{now_held}"
                )
                raise HostLockBusy(self.lost)
            self.etag = etag

    def confirm(self, action: str) -> None:
        """Fencing, right before `action` (a manifest write, a deletion): renew the lease if this
        run still holds the lock, else raise HostLockBusy saying that nothing was done."""
        try:
            self._renew_once()
        except HostLockBusy as exc:
            raise HostLockBusy(
                f"{exc}; not {action}: nothing was registered or deleted by this run"
            ) from None
        except Exception as exc:
            raise HostLockBusy(
                f"{self.purpose} of {self.what} cannot confirm that it still holds the host lock {self.where} "
                f"({exc}); not {action}: nothing was registered or deleted by this run"
            ) from exc

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        _HELD.discard(self.token)
        crash_point("lock.before_release")
        if self.lost:
            return  # the lock belongs to another run now: never delete it
        try:
            current = self.store.get_versioned(self.key)
            if current is not None and current.etag == self.etag:
                self.store.delete([self.key])  # every version, on a versioned bucket
        except Exception as exc:  # noqa: BLE001 - never mask the run's own outcome
            log.warning(
                "could not release the lock %s (%s); the next run of %s takes it over",
                self.where,
                exc,
                self.what,
            )
