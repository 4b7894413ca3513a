"""`binlogs list` over every storage target of a host (core/catalog/targets.py): what each target
holds, merged, so that a primary target that is down or was emptied still shows the copies'
binlogs, with a problem naming the target that could not be read."""

from __future__ import annotations

from typing import Any

from ..catalog.targets import Targets
from ..common.values import binlog_number
from .ship import list_binlogs


def list_binlogs_on(targets: Targets) -> dict[str, Any]:
    """list_binlogs' shape, over the targets: per server each binlog from the first target that
    has it, with `targets` naming each target that does; the gaps and problems of all of them.
    Adds `targets` (per target its location, or the error reading it) and `problems` (the targets
    that could not be read)."""
    problems: list[str] = []
    errors: dict[str, str] = {}
    servers: dict[str, dict[str, Any]] = {}
    for source, listing in targets.each(list_binlogs, problems, errors):
        for server in listing["servers"]:
            merged = servers.setdefault(
                server["server_uuid"], server | {"binlogs": [], "gaps": [], "problems": [], "timeline": None}
            )
            merged["timeline"] = merged["timeline"] or server["timeline"]
            known = {b["name"]: b for b in merged["binlogs"]}
            for row in server["binlogs"]:
                if row["name"] in known:
                    known[row["name"]]["targets"].append(source.name)
                else:
                    merged["binlogs"].append(row | {"targets": [source.name]})
            merged["gaps"] += [g for g in server["gaps"] if g not in merged["gaps"]]
            where = f"{source.name}: " if targets.many else ""
            merged["problems"] += [where + p for p in server["problems"]]
    for server in servers.values():
        server["binlogs"].sort(key=lambda b: binlog_number(b["name"]))
    found = {
        s.name: {"location": s.catalog.describe()} | ({"error": errors[s.name]} if s.name in errors else {})
        for s in targets.sources
    }
    return {"servers": [servers[u] for u in sorted(servers)], "targets": found, "problems": problems}
