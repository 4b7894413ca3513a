"""The stores as the checker sees them: plain boto3 listings and the documented JSON formats.

Nothing here imports the product: a manifest is read as JSON (its documented fields: backup_id,
kind, parent_id, chain_root, gtid, objects[].key/size/segments, binlog manifests' segments), so
a bug in the product's own catalog code cannot hide from the checker.

Layout (README "Storage layout"):
    <prefix>/<cluster>/<host>/backups/<id>/manifest.json (+ its objects)
    <prefix>/<cluster>/<host>/binlogs/<uuid>/<name>.json (+ .partial.json, gaps/...)
    <prefix>/<cluster>/<host>/backup.lock, leases/<token>.json, timelines/<uuid>.json
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any


@dataclass(frozen=True)
class Obj:
    key: str
    size: int
    modified: datetime


@dataclass
class HostView:
    """One host's prefix on one store, read at one moment."""

    prefix: str  # <prefix>/<cluster>/<host>
    objects: dict[str, Obj]
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)  # backup id -> manifest
    binlogs: dict[str, dict[str, Any]] = field(default_factory=dict)  # "<uuid>/<name>" -> manifest
    partials: dict[str, dict[str, Any]] = field(default_factory=dict)  # the open binlogs' partial manifests
    unreadable: list[str] = field(default_factory=list)
    store_now: datetime | None = None  # the store's clock (Date header) when it was listed

    def chain(self, backup_id: str) -> list[dict[str, Any]]:
        """Root full .. backup_id; raises AssertionError naming the first missing link."""
        out = []
        bid: str | None = backup_id
        while bid is not None:
            m = self.manifests.get(bid)
            if m is None:
                raise AssertionError(
                    f"{self.prefix}: {out[-1]['backup_id']} needs {bid}, which has no manifest"
                )
            out.append(m)
            bid = m.get("parent_id")
            if len(out) > 10_000:
                raise AssertionError(f"{self.prefix}: a cycle in the chain of {backup_id}")
        out.reverse()
        if out[0].get("kind") != "full":
            raise AssertionError(f"{self.prefix}: the chain of {backup_id} starts at a {out[0].get('kind')}")
        return out


def pieces(obj: dict[str, Any]) -> list[tuple[str, int]]:
    """(key, size) of every stored object that holds one manifest object (its segments or itself)."""
    return [(key, size) for key, size, _sha in hashed_pieces(obj)]


def hashed_pieces(obj: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(key, size, sha256) of each stored object holding one manifest object: segment 0 is `key`,
    segment i `key.s<iii>` (the documented layout: a segment's key follows from its place)."""
    segments = obj.get("segments")
    if segments:
        return [
            (obj["key"] if i == 0 else f"{obj['key']}.s{i:03d}", int(s["size"]), str(s.get("sha256")))
            for i, s in enumerate(segments)
        ]
    return [(obj["key"], int(obj["size"]), str(obj.get("sha256")))]


def backup_pieces(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    out = [p for o in manifest.get("objects", []) for p in pieces(o)]
    side = manifest.get("option_files")
    if side:
        out += pieces(side["object"])
    return out


def binlog_pieces(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    return [p for seg in manifest.get("segments", []) for p in pieces(seg["object"])]


def hashed_backup_pieces(manifest: dict[str, Any]) -> list[tuple[str, int, str]]:
    out = [p for o in manifest.get("objects", []) for p in hashed_pieces(o)]
    side = manifest.get("option_files")
    if side:
        out += hashed_pieces(side["object"])
    return out


def hashed_binlog_pieces(manifest: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [p for seg in manifest.get("segments", []) for p in hashed_pieces(seg["object"])]


class StoreReader:
    """A bucket read directly (not through the fault proxy) with a plain boto3 client."""

    def __init__(self, client: Any, bucket: str, name: str = "primary") -> None:
        self.client, self.bucket, self.name = client, bucket, name

    def list(self, prefix: str) -> dict[str, Obj]:
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                out[o["Key"]] = Obj(o["Key"], int(o["Size"]), o["LastModified"])
        return out

    def get_json(self, key: str) -> dict[str, Any]:
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        data = json.loads(body)
        assert isinstance(data, dict), f"{key}: not a JSON object"
        return data

    def get_bytes(self, key: str) -> bytes:
        return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def store_now(self) -> datetime:
        head = self.client.list_objects_v2(Bucket=self.bucket, MaxKeys=1)
        return parsedate_to_datetime(head["ResponseMetadata"]["HTTPHeaders"]["date"])

    def host(self, prefix: str) -> HostView:
        view = HostView(prefix, self.list(prefix + "/"), store_now=self.store_now())
        backups, binlogs = prefix + "/backups/", prefix + "/binlogs/"
        for key in view.objects:
            try:
                if (
                    key.startswith(backups)
                    and key.endswith("/manifest.json")
                    and key[len(backups) :].count("/") == 1
                ):
                    m = self.get_json(key)
                    view.manifests[key[len(backups) :].split("/")[0]] = m
                elif key.startswith(binlogs) and key.endswith(".json") and "/gaps/" not in key:
                    m = self.get_json(key)
                    into = view.partials if key.endswith(".partial.json") else view.binlogs
                    into[f"{m['server_uuid']}/{m['name']}"] = m
            except self.client.exceptions.NoSuchKey:
                continue  # deleted between the listing and the read (retention is running)
            except (ValueError, KeyError, AssertionError) as exc:
                view.unreadable.append(f"{key}: {exc}")
        return view


def window_binlogs(view: HostView, full: dict[str, Any]) -> list[dict[str, Any]]:
    """The binlog manifests a PITR from `full` replays: its server's, from the binlog its position
    names on, numbered without a hole, up to the open binlog's partial (a complete manifest wins
    over a stale partial of the same binlog). A binlog of that server numbered before the full's
    is another history: the server's binlogs restarted at .000001 (a re-seed under the same
    server_id) and no replay from the full reads it. No position: every binlog of the server."""
    server = full.get("server_uuid")
    mine: dict[str, tuple[dict[str, Any], bool]] = {}
    for partial, group in ((False, view.binlogs), (True, view.partials)):
        for m in group.values():
            if m.get("server_uuid") == server:
                mine.setdefault(str(m.get("name")), (m, partial))
    start = full.get("binlog_file")
    if not start:
        return [m for m, _partial in mine.values()]
    base, digits = str(start).rsplit(".", 1)
    number, out = int(digits), []
    while (found := mine.get(f"{base}.{number:0{len(digits)}d}")) is not None:
        out.append(found[0])
        if found[1]:  # the open binlog: nothing after it is shipped yet
            break
        number += 1
    return out
