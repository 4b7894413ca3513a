"""The checker's invariants over one host's view of a store (tests/chaos/storeview.py). Each returns
the violations it found as lines that name the key or backup; an empty list means it holds.

- registered(): every registered backup's chain resolves and every object it names is stored at
  its size; every shipped binlog's objects too; binlogs have no hole that no gap marker explains.
- digests(): every object a backup manifest, a complete binlog manifest or an open binlog's
  partial manifest names is stored at its size and its bytes hash to the manifest's sha256 (each
  stored version read once).
- orphans(): what is stored that no manifest names (debris of killed runs).
- stale_holds(): a host lock or read lease the store says was last written longer ago than its
  own lease plus the margin plus `takeover`: its holder is gone and no run has taken it over or
  removed it (a dead holder's lock waits for the host's next run, a lease for the next
  retention run: `takeover` is how long the fleet's schedules let that take).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta

from storeview import (
    HostView,
    StoreReader,
    backup_pieces,
    binlog_pieces,
    hashed_backup_pieces,
    hashed_binlog_pieces,
)

MARGIN = timedelta(seconds=2)  # the product's STORE_CLOCK_MARGIN: one second on each store time
BINLOG_NUMBER = re.compile(r"\.(\d+)$")


def registered(view: HostView) -> list[str]:
    out = [f"unreadable manifest {u}" for u in view.unreadable]
    for bid in sorted(view.manifests):
        try:
            view.chain(bid)
        except AssertionError as exc:
            out.append(str(exc))
        out += _missing(view, f"backup {bid}", backup_pieces(view.manifests[bid]))
    for name in sorted(view.binlogs):
        out += _missing(view, f"binlog {name}", binlog_pieces(view.binlogs[name]))
    return out + _binlog_holes(view)


def _missing(view: HostView, what: str, needed: list[tuple[str, int]]) -> list[str]:
    out = []
    for key, size in needed:
        obj = view.objects.get(key)
        if obj is None:
            out.append(f"{what} needs {key}, which is gone")
        elif obj.size != size:
            out.append(f"{what} needs {key} at {size} bytes, it has {obj.size}")
    return out


def _binlog_holes(view: HostView) -> list[str]:
    """Shipped binlogs of one server are contiguous: retention deletes the oldest first, so a hole
    in the middle means a binlog some PITR needs was deleted (gaps the shipper recorded aside)."""
    numbers: dict[str, set[int]] = {}
    for name in view.binlogs:
        uuid, binlog = name.split("/", 1)
        if m := BINLOG_NUMBER.search(binlog):
            numbers.setdefault(uuid, set()).add(int(m.group(1)))
    gaps = [k for k in view.objects if "/gaps/" in k]
    out = []
    for uuid, have in numbers.items():
        holes = sorted(set(range(min(have), max(have) + 1)) - have)
        explained = [n for n in holes if any(f"/{uuid}/gaps/" in g and _in_gap(g, n) for g in gaps)]
        for n in sorted(set(holes) - set(explained)):
            out.append(f"{view.prefix}: binlog number {n} of server {uuid} is missing between shipped ones")
    return out


def _in_gap(key: str, number: int) -> bool:
    first, _, last = key.rsplit("/", 1)[1].removesuffix(".json").partition("..")
    a, b = BINLOG_NUMBER.search(first), BINLOG_NUMBER.search(last)
    return bool(a and b and int(a.group(1)) <= number <= int(b.group(1)))


def orphans(view: HostView) -> dict[str, list[str]]:
    """{backup directory id: its keys} of backup directories without a manifest, and
    {"binlogs": keys} of binlog objects that no binlog manifest (complete or partial) names."""
    base = view.prefix + "/backups/"
    out: dict[str, list[str]] = {}
    for key in view.objects:
        if key.startswith(base):
            bid = key[len(base) :].split("/", 1)[0]
            if bid not in view.manifests:
                out.setdefault(bid, []).append(key)
    named = {k for m in view.binlogs.values() for k, _ in binlog_pieces(m)}
    binlogs = view.prefix + "/binlogs/"
    stray = [
        k
        for k in view.objects
        if k.startswith(binlogs) and not k.endswith(".json") and k not in named and ".partial-" not in k
    ]
    if stray:
        out["binlogs"] = stray
    return out


def stale_holds(
    reader: StoreReader, view: HostView, margin: timedelta = MARGIN, takeover: timedelta = timedelta(0)
) -> list[str]:
    """Locks and leases held past their own lease (+ `takeover`) by the store's clock."""
    assert view.store_now is not None
    out = []
    for key, obj in view.objects.items():
        rel = key[len(view.prefix) + 1 :]
        if rel != "backup.lock" and not (rel.startswith("leases/") and rel.endswith(".json")):
            continue
        try:
            body = json.loads(reader.get_bytes(key))
            lease = timedelta(
                seconds=float(body.get("lease_seconds") or (120 if rel == "backup.lock" else 600))
            )
        except Exception:  # noqa: BLE001 - deleted meanwhile, or unreadable: the age alone tells
            lease = timedelta(seconds=120)
        age = view.store_now - obj.modified
        if age > lease + margin + takeover:
            out.append(
                f"{key} was last written {age.total_seconds():.0f} s ago, past its lease of {lease.total_seconds():.0f} s"
                + (
                    f" and {takeover.total_seconds():.0f} s for the next run to take it over"
                    if takeover
                    else ""
                )
            )
    return out


def digests(reader: StoreReader, view: HostView, cache: dict[tuple[str, int, str], str]) -> list[str]:
    """Every object a manifest names (backups, complete binlogs, the open binlogs' partials) is
    stored at its size with the manifest's sha256. `cache` ((key, size, LastModified) -> sha256)
    keeps each stored version from being read twice. A piece whose manifest went meanwhile
    (retention, or a partial dropped once its binlog was shipped whole) is not judged."""
    named: list[tuple[str, str, list[tuple[str, int, str]]]] = []
    for bid, m in sorted(view.manifests.items()):
        named.append((f"backup {bid}", f"{view.prefix}/backups/{bid}/manifest.json", hashed_backup_pieces(m)))
    for name, m in sorted(view.binlogs.items()):
        named.append((f"binlog {name}", _binlog_key(view, m, partial=False), hashed_binlog_pieces(m)))
    for name, m in sorted(view.partials.items()):
        named.append(
            (f"open binlog {name} (partial)", _binlog_key(view, m, partial=True), hashed_binlog_pieces(m))
        )
    out = []
    for what, manifest_key, needed in named:
        for key, size, sha in needed:
            problem = _digest_problem(reader, view, cache, key, size, sha)
            if problem and _still_there(reader, manifest_key):
                out.append(f"{what} needs {key}: {problem}")
    return out


def intact_binlogs(
    reader: StoreReader, view: HostView, cache: dict[tuple[str, int, str], str]
) -> list[dict[str, object]]:
    """The complete and partial binlog manifests whose every object is stored with its sha256:
    what a replay can use (the others are violations of digests())."""
    return [
        m
        for m in (*view.binlogs.values(), *view.partials.values())
        if not any(_digest_problem(reader, view, cache, k, n, h) for k, n, h in hashed_binlog_pieces(m))
    ]


def _binlog_key(view: HostView, m: dict[str, object], partial: bool) -> str:
    return f"{view.prefix}/binlogs/{m.get('server_uuid')}/{m.get('name')}" + (
        ".partial.json" if partial else ".json"
    )


def _digest_problem(reader: StoreReader, view: HostView, cache: dict[tuple[str, int, str], str], key: str,
                    size: int, sha: str) -> str | None:  # fmt: skip
    obj = view.objects.get(key)
    if obj is None:
        try:  # listed before the manifest was read: a newer piece is looked for directly
            head = reader.client.head_object(Bucket=reader.bucket, Key=key)
        except Exception:  # noqa: BLE001 - not there
            return "it is gone"
        stored, stamp = int(head["ContentLength"]), str(head["LastModified"])
    else:
        stored, stamp = obj.size, str(obj.modified)
    if stored != size:
        return f"it holds {stored} bytes, the manifest says {size}"
    ident = (key, size, stamp)
    if ident not in cache:
        digest = hashlib.sha256()
        try:
            body = reader.client.get_object(Bucket=reader.bucket, Key=key)["Body"]
            while chunk := body.read(1 << 20):
                digest.update(chunk)
        except Exception:  # noqa: BLE001 - deleted meanwhile: judged by whether its manifest is
            return "it is gone"
        cache[ident] = digest.hexdigest()
    if cache[ident] != sha:
        return f"its bytes hash to {cache[ident][:16]}..., the manifest says {sha[:16]}..."
    return None


def _still_there(reader: StoreReader, key: str) -> bool:
    try:
        reader.client.head_object(Bucket=reader.bucket, Key=key)
    except Exception:  # noqa: BLE001 - gone
        return False
    return True
