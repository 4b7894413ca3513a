"""Timelines: which server identity of a host continues which, and from which GTID.

A server restored to a point in time and promoted is a new timeline: it gets a new server_id
(so a new server identity and a new binlog directory, core/binlog/catalog.py) and GTIDs that
jump above every sequence the old timeline may have written, so no GTID or binlog name of the
old history is ever reused. The record is written by `promote` (core/pitr/promote.py):

    <prefix>/<cluster>/<host>/timelines/<server_uuid>.json

It names the parent identity, the fork GTID (the last transaction of the parent the new
timeline holds), and where the new one starts. It holds no secrets.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..catalog.backups import Catalog
from ..catalog.manifest import MAX_SERVER_ID, NAME_RE, SERVER_UUID_RE
from ..common.values import gtid_form
from ..storage.base import StorageError
from .catalog import BinlogError

TIMELINE_DIR = "timelines"
MAX_TIMELINE_BYTES = 64 * 1024


class Timeline(BaseModel):
    """One promoted server identity and the history it forked from."""

    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    cluster: str = Field(pattern=NAME_RE)
    host: str = Field(pattern=NAME_RE)
    server_uuid: str = Field(pattern=SERVER_UUID_RE)  # the new identity
    server_id: int = Field(ge=1, le=MAX_SERVER_ID)
    parent_server_uuid: str = Field(pattern=SERVER_UUID_RE)
    # MariaDB GTID positions; MySQL GTID sets (its gtid_executed at promotion, in all three).
    fork_gtid: str  # the parent's last transaction this timeline holds
    binlog_state: str  # @@gtid_binlog_state set at promotion (fork + the jump)
    start_gtid: str  # @@gtid_slave_pos set at promotion: where replicas of the new primary start
    parent_shipped_until: str = (
        ""  # the parent's newest shipped GTIDs at promotion (abandoned after the fork)
    )
    promoted_at: AwareDatetime

    @field_validator("fork_gtid", "start_gtid", "parent_shipped_until")
    @classmethod
    def _gtids(cls, value: str) -> str:
        gtid_form(value)  # either server's form
        return value

    def describe(self) -> str:
        return (
            f"{self.server_uuid} (server_id {self.server_id}) forked from {self.parent_server_uuid} at "
            f"{self.fork_gtid or '-'}, promoted {self.promoted_at:%Y-%m-%d %H:%M:%S} UTC, starts at {self.start_gtid}"
        )


def timeline_key(catalog: Catalog, server_uuid: str) -> str:
    return f"{catalog.host_prefix}/{TIMELINE_DIR}/{server_uuid}.json"


def write_timeline(catalog: Catalog, timeline: Timeline) -> str:
    key = timeline_key(catalog, timeline.server_uuid)
    catalog.store.put_bytes(key, timeline.model_dump_json(indent=2).encode())
    return key


def read_timeline(catalog: Catalog, server_uuid: str) -> Timeline | None:
    """The record of `server_uuid`, None when it has none; an unreadable record raises BinlogError."""
    key = timeline_key(catalog, server_uuid)
    if catalog.store.head(key) is None:
        return None
    where = f"{catalog.store.location}/{key}"
    try:
        data = catalog.store.get_bytes(key)
    except StorageError as exc:
        raise BinlogError(f"{where}: {exc}") from exc
    if len(data) > MAX_TIMELINE_BYTES:
        raise BinlogError(f"{where}: {len(data)} bytes, over the {MAX_TIMELINE_BYTES} limit")
    try:
        timeline = Timeline.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BinlogError(
            f"{where}: invalid: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        ) from None
    owner = (timeline.cluster, timeline.host, timeline.server_uuid)
    if owner != (catalog.cluster, catalog.host, server_uuid):
        raise BinlogError(f"{where}: describes {'/'.join(owner)}; it was copied or tampered with")
    return timeline


def timelines(catalog: Catalog) -> list[Timeline]:
    """Every timeline record of this host, oldest promotion first."""
    base = f"{catalog.host_prefix}/{TIMELINE_DIR}/"
    found = []
    for info in catalog.store.list(base):
        name = info.key[len(base) :]
        if name.endswith(".json") and "/" not in name:
            record = read_timeline(catalog, name[: -len(".json")])
            if record is not None:
                found.append(record)
    return sorted(found, key=lambda t: t.promoted_at)
