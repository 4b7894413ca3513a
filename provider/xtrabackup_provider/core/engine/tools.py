"""The engines: XtraBackup / MariaBackup (`--version` output -> tool version -> capabilities) and
`clone` (MySQL's CLONE, no tool: core/engine/clone.py). What an engine can do is its capabilities,
which the verbs ask instead of its name.

Everything here is pure except `detect_tool`, so the rules for every flavour are unit-testable
without the tools installed.
"""

from __future__ import annotations

__all__ = ["Capabilities"]

import re
from dataclasses import dataclass
from typing import Literal

from ..common import children

Flavour = Literal["mariabackup", "xtrabackup", "clone"]
FLAVOURS: tuple[Flavour, ...] = ("mariabackup", "xtrabackup", "clone")
# The clone engine's own format version (what its manifests record as the engine's version): a
# clone needs no tool of a matching series at restore, only its extractor (core/engine/clone.py).
CLONE_VERSION = (1, 0, 0, 0)
# Percona versions read "8.0.35-33": the part after the dash is the Percona build.
_XB_VERSION = re.compile(r"xtrabackup version (\d+)\.(\d+)\.(\d+)(?:-(\d+))?")
_MB_VERSION = re.compile(r"(?:based on MariaDB server|mariabackup.*?Ver) (\d+)\.(\d+)\.(\d+)")


class EngineError(RuntimeError):
    """The backup tool is missing, unsupported, or its metadata is unreadable."""


@dataclass(frozen=True)
class ToolVersion:
    flavour: Flavour
    version: tuple[int, int, int, int]  # major, minor, patch, percona build (0 for MariaDB, clone)
    binary: str = ""

    @property
    def text(self) -> str:
        major, minor, patch, build = self.version
        base = f"{major}.{minor}.{patch}"
        return f"{base}-{build}" if self.flavour == "xtrabackup" else base

    @property
    def major(self) -> str:
        """Series a chain must stay within, e.g. '8.0' or '10.11'."""
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.for_version(self)

    def stream_tool(self) -> str:
        """The extractor for this flavour's xbstream format."""
        return {"mariabackup": "mbstream", "clone": "clone extract"}.get(self.flavour, "xbstream")


@dataclass(frozen=True)
class Capabilities:
    apply_log_only: bool  # prepare steps may (and for chains must) use --apply-log-only
    plain_prepare_after_apply_log_only: bool  # safe to run a lone --prepare after one (pre 8.0.30)
    prepare_parallel: bool  # --parallel honoured at --prepare (8.0.35-33+)
    estimate_memory: bool  # --estimate-memory at backup, --use-free-memory-pct at prepare
    prepared_base_accepts_incrementals: bool  # MariaBackup 10.5+: a fully prepared base can go on
    metadata_prefix: str = "xtrabackup_"  # mariadb-backup 11.1+ (MDEV-18931): mariadb_backup_checkpoints, ...
    incremental: bool = True  # can continue a chain (clone: fulls only)
    prepare: bool = True  # a restore prepares what it extracted (clone: consistent as copied)
    own_stream: bool = False  # the product streams, extracts and copies back itself (clone)

    @classmethod
    def for_version(cls, tool: ToolVersion) -> Capabilities:
        v = tool.version
        if tool.flavour == "clone":
            return cls(False, False, False, False, False, incremental=False, prepare=False, own_stream=True)
        if tool.flavour == "mariabackup":
            modern = v[:2] >= (10, 5)
            return cls(
                apply_log_only=not modern,
                plain_prepare_after_apply_log_only=not modern,
                prepare_parallel=False,
                estimate_memory=False,
                prepared_base_accepts_incrementals=modern,
                metadata_prefix="mariadb_backup_" if v[:2] >= (11, 1) else "xtrabackup_",
            )
        return cls(
            apply_log_only=True,
            plain_prepare_after_apply_log_only=v[:3] < (8, 0, 30),
            prepare_parallel=v >= (8, 0, 35, 33),
            estimate_memory=v >= (8, 0, 32, 26),
            prepared_base_accepts_incrementals=False,
        )


# The server family each flavour copies, and what to install instead of a tool that cannot.
_FAMILY = {"mariabackup": "mariadb", "xtrabackup": "mysql", "clone": "mysql"}
_PACKAGE = {
    "mariabackup": "mariadb-backup",
    "xtrabackup": "Percona XtraBackup",
    "clone": "MySQL's clone plugin",
}


def check_tool_for_server(tool: ToolVersion, family: str, server: tuple[int, int, int]) -> None:
    """Refuse, before anything starts, a tool that cannot copy this server: the other family's, or
    one older than the server (an older tool does not know the server's redo and data formats:
    mariadb-backup must be of the server's series or newer, XtraBackup 8.x of its release or newer).
    """
    name = f"{'MariaDB' if family == 'mariadb' else 'MySQL'} {'.'.join(map(str, server))}"
    package = _PACKAGE[tool.flavour]
    if _FAMILY[tool.flavour] != family:
        other = "mariabackup" if family == "mariadb" else "xtrabackup (or clone)"
        raise EngineError(
            f"{tool.binary or tool.flavour} is {tool.flavour} {tool.text}, which cannot back up {name}: "
            f"set the host's flavour to {other}"
        )
    if tool.capabilities.own_stream:
        return  # clone: the server copies itself (its plugin and privileges: core/backup/clone.py)
    # mariadb-backup: its series (the patch release may differ); XtraBackup: the server's release.
    width = 2 if tool.flavour == "mariabackup" else 3
    if tool.version[:width] < server[:width]:
        wanted = ".".join(map(str, server[:width]))
        raise EngineError(
            f"{tool.binary or tool.flavour} is {tool.flavour} {tool.text}, older than the server ({name}): "
            f"install {package} {wanted} or newer on this worker, or set the host's `binary` to it"
        )


def takes_incrementals(flavour: str) -> bool:
    """Whether the engine can continue a chain (the clone engine takes fulls only)."""
    flavours: dict[str, Flavour] = {f: f for f in FLAVOURS}
    known = flavours.get(flavour)
    return known is None or Capabilities.for_version(ToolVersion(known, (0, 0, 0, 0))).incremental


def stream_flavour(flavour: str) -> Literal["mariabackup", "xtrabackup"]:
    """The xbstream dialect of a flavour's stream: the clone engine writes XtraBackup's 'P'/'E' chunks."""
    return "mariabackup" if flavour == "mariabackup" else "xtrabackup"


def parse_tool_version(output: str) -> ToolVersion:
    """Parse `xtrabackup --version` / `mariabackup --version` output (tools print to stderr)."""
    if m := _XB_VERSION.search(output):
        major, minor, patch, build = (int(g) if g else 0 for g in m.groups())
        return ToolVersion("xtrabackup", (major, minor, patch, build))
    if m := _MB_VERSION.search(output):
        major, minor, patch = (int(g) for g in m.groups())
        return ToolVersion("mariabackup", (major, minor, patch, 0))
    raise EngineError(f"cannot read a backup tool version from: {output.strip()[:200]!r}")


def detect_tool(flavour: Flavour, binary: str | None = None) -> ToolVersion:
    """Run `<tool> --version` and return its flavour, version and binary path (clone: no tool)."""
    if flavour == "clone":
        return ToolVersion("clone", CLONE_VERSION)
    binary = binary or flavour
    try:
        argv = [binary, "--no-defaults", "--version"]  # a host's [mariabackup] group must not break it
        proc = children.run(argv, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise EngineError(
            f"backup tool {binary!r} not found on this worker; install {flavour} "
            f"or set the host's `binary` to its path"
        ) from exc
    tool = parse_tool_version(proc.stdout + proc.stderr)
    if tool.flavour != flavour:
        raise EngineError(
            f"{binary!r} is {tool.flavour} {tool.text}, but the host is configured as {flavour}"
        )
    return ToolVersion(tool.flavour, tool.version, binary)
