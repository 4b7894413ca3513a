"""Archived backups: find a chain's objects in GLACIER / DEEP_ARCHIVE, request their restore,
and read the restore's progress from HEAD's `x-amz-restore` header.

An archived object is unreadable until a restore job has made a temporary copy of it:
`ongoing-request="true"` while the job runs, `ongoing-request="false", expiry-date="..."` once
the copy can be read (until the expiry date). GLACIER_IR is readable at once and never needs this.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Literal

from .base import ARCHIVE_CLASSES, ObjectInfo, ObjectStore

log = logging.getLogger(__name__)

TIERS = ("Standard", "Bulk", "Expedited")
State = Literal["readable", "archived", "restoring", "restored", "missing"]
WAITING: frozenset[str] = frozenset({"archived", "restoring"})
_ONGOING = re.compile(r'ongoing-request\s*=\s*"(true|false)"')
_EXPIRY = re.compile(r'expiry-date\s*=\s*"([^"]+)"')


class GlacierError(RuntimeError):
    """A restore cannot be requested or did not complete; the message names the object."""


@dataclass(frozen=True)
class ObjectState:
    key: str
    state: State
    storage_class: str = "STANDARD"
    expiry: datetime | None = None  # when a restored copy stops being readable

    def row(self) -> dict[str, str | None]:
        """A small JSON-able row for XCom, reports and the CLI."""
        expiry = self.expiry.isoformat() if self.expiry else None
        return {"key": self.key, "state": self.state, "storage_class": self.storage_class, "expiry": expiry}


def parse_restore_header(header: str | None) -> tuple[bool | None, datetime | None]:
    """(ongoing, expiry) from `x-amz-restore`; ongoing is None when no restore was ever requested."""
    if not header:
        return None, None
    ongoing = _ONGOING.search(header)
    expiry = _EXPIRY.search(header)
    when = None
    if expiry:
        try:
            when = parsedate_to_datetime(expiry.group(1))
        except (TypeError, ValueError):
            when = None
    return (ongoing.group(1) == "true") if ongoing else None, when


def object_state(key: str, info: ObjectInfo | None) -> ObjectState:
    if info is None:
        return ObjectState(key, "missing")
    if info.storage_class not in ARCHIVE_CLASSES:
        return ObjectState(key, "readable", info.storage_class)
    ongoing, expiry = parse_restore_header(info.restore)
    if ongoing is None:
        return ObjectState(key, "archived", info.storage_class)
    return ObjectState(key, "restoring" if ongoing else "restored", info.storage_class, expiry)


def key_states(store: ObjectStore, keys: Iterable[str]) -> list[ObjectState]:
    return [object_state(key, store.head(key)) for key in keys]


def waiting(states: Iterable[ObjectState]) -> list[ObjectState]:
    return [s for s in states if s.state in WAITING]


def check_tier(tier: str, states: Iterable[ObjectState]) -> None:
    if tier not in TIERS:
        raise GlacierError(f"restore tier {tier!r} is not one of {', '.join(TIERS)}")
    for s in states:
        if tier == "Expedited" and s.storage_class == "DEEP_ARCHIVE":
            raise GlacierError(
                f"{s.key} is in DEEP_ARCHIVE, which has no Expedited tier; use Standard (12 h) or Bulk (48 h)"
            )


def request_restores(
    store: ObjectStore, states: list[ObjectState], tier: str, days: int
) -> list[ObjectState]:
    """Request a restore of every archived object not already being restored; returns the new states."""
    missing = [s.key for s in states if s.state == "missing"]
    if missing:
        raise GlacierError(f"objects named by the manifests are missing from {store.location}: {missing}")
    todo = [s for s in states if s.state == "archived"]
    check_tier(tier, todo)
    if not todo:
        return states
    if not store.supports_archive:
        raise GlacierError(f"{store.location} cannot restore archived objects")
    for s in todo:
        started = store.restore_object(s.key, days, tier)
        verb = "requested" if started else "already running:"
        log.info("%s restore of %s/%s (%s tier, %d days)", verb, store.location, s.key, tier, days)
    return key_states(store, [s.key for s in states])


def lost_restores(states: Iterable[ObjectState]) -> list[str]:
    """Archived objects nobody is restoring: waiting for them would never end."""
    return [s.key for s in states if s.state in ("archived", "missing")]


def wait_for_restores(
    store: ObjectStore,
    keys: list[str],
    *,
    poll: float,
    timeout: float,
    on_poll: Callable[[list[ObjectState]], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[ObjectState]:
    """Poll until every object is readable; GlacierError on timeout or when a restore is lost."""
    deadline = time.monotonic() + timeout
    while True:
        states = key_states(store, keys)
        if on_poll:
            on_poll(states)
        if lost := lost_restores(states):
            raise GlacierError(
                f"no restore is running for {lost} (never requested, or the restored copy expired); request it again"
            )
        if not waiting(states):
            return states
        if time.monotonic() >= deadline:
            pending = [s.key for s in waiting(states)]
            raise GlacierError(f"restores still running after {timeout:.0f}s: {pending}")
        sleep(poll)
