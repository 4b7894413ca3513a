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
compare-and-swap on its ETag, so a killed worker does not block its host for long.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .backups import Catalog

log = logging.getLogger(__name__)

LOCK_NAME = "backup.lock"
DEFAULT_LEASE = timedelta(minutes=2)  # renewed every third of it while the run lives
_HELD: set[str] = set()  # tokens of the locks this process holds right now


class HostLockBusy(RuntimeError):
    """Another run holds the host's lock; the message names it and when its lease ends."""


def _machine() -> str:
    """Which machine and PID namespace a pid number means something in."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "/".join(parts)


def _start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): a pid with another start time is another process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
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

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            raw: dict[str, Any] = json.loads(data)
            return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})
        except (ValueError, TypeError):
            return None  # an unreadable lock protects nothing: it is taken over

    def alive(self, now: datetime) -> bool:
        if self.token in _HELD:
            return True
        if self.machine and self.machine == _machine() and self.pid_start is not None:
            # Same machine: the process table is the truth, whatever the lease says.
            return self.pid != os.getpid() and _start_ticks(self.pid) == self.pid_start
        try:
            return now < datetime.fromisoformat(self.expires_at)
        except (ValueError, TypeError):  # not a time, or one without a zone: nothing to honour
            return False

    def describe(self) -> str:
        return f"{self.owner} on {self.hostname} (pid {self.pid}) since {self.acquired_at}"


class HostLock:
    """`with HostLock(catalog):` holds the host's backup lock; HostLockBusy if another run has it.

    `purpose` names what the holder does ("backup", "retention"): it is written into the lock and
    into the error another run gets."""

    def __init__(self, catalog: Catalog, lease: timedelta = DEFAULT_LEASE, purpose: str = "backup") -> None:
        self.purpose = purpose
        self.store = catalog.store
        self.key = f"{catalog.host_prefix}/{LOCK_NAME}"
        self.what = f"{catalog.cluster}/{catalog.host}"
        self.lease = lease
        self.token = uuid.uuid4().hex
        self.etag: str | None = None
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
        )
        return json.dumps(asdict(holder), indent=2).encode()

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def acquire(self) -> None:
        now = datetime.now(UTC)
        body = self._body(now)
        etag = self.store.put_new(self.key, body)
        if etag is None:
            etag = self._take_over(now, body)
        self.etag = etag
        _HELD.add(self.token)
        self._renewer = threading.Thread(target=self._renew, name="host-lock", daemon=True)
        self._renewer.start()

    def _take_over(self, now: datetime, body: bytes) -> str:
        current = self.store.get_versioned(self.key)
        if current is None:  # released in the meantime
            etag = self.store.put_new(self.key, body)
        else:
            data, current_etag = current
            holder = Holder.parse(data)
            if holder is not None and holder.token == self.token:
                return current_etag  # our own create, retried after its answer was lost
            if holder is not None and holder.alive(now):
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
            etag = self.store.put_new(self.key, body, if_match=current_etag)
        if etag is None:
            raced = self.store.get_versioned(self.key)
            if raced is None and (etag := self.store.put_new(self.key, body)) is not None:
                return etag  # the winner of the race has already released it
            raced = raced or self.store.get_versioned(self.key)
            winner = Holder.parse(raced[0]) if raced else None
            raise HostLockBusy(
                f"{self.purpose} of {self.what} cannot start: another {winner.purpose if winner else 'run'} "
                f"of {self.what} took the lock {self.where} at the same moment"
                + (f": {winner.describe()}" if winner else "")
            )
        return etag

    def _renew(self) -> None:
        while not self._stop.wait(self.lease.total_seconds() / 3):
            try:
                etag = self.store.put_new(self.key, self._body(datetime.now(UTC)), if_match=self.etag)
            except Exception as exc:  # noqa: BLE001 - the endpoint may be back before the lease ends
                log.warning("could not renew the lock %s: %s", self.where, exc)
                continue
            if etag is None:
                log.error(
                    "lost the lock %s to another run; this run goes on but is no longer exclusive", self.where
                )
                return
            self.etag = etag

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        _HELD.discard(self.token)
        try:
            current = self.store.get_versioned(self.key)
            if current is not None and current[1] == self.etag:
                self.store.delete([self.key])
        except Exception as exc:  # noqa: BLE001 - never mask the run's own outcome
            log.warning(
                "could not release the lock %s (%s); the next run of %s takes it over",
                self.where,
                exc,
                self.what,
            )
