"""Parsers of the metadata files the tools write (checkpoints, info, binlog position); tolerant:
unknown keys kept, blank lines and comments ignored. Each file is read under either name
(metadata_names.py): xtrabackup_* or mariadb-backup 11.1+'s mariadb_backup_*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .metadata_names import BINLOG_INFO_FILES, CHECKPOINT_FILES, INFO_FILES
from .tools import EngineError


def parse_key_values(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Checkpoints:
    backup_type: str
    from_lsn: int
    to_lsn: int
    last_lsn: int
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def incremental(self) -> bool:
        return self.from_lsn != 0


def parse_checkpoints(text: str, source: str = "xtrabackup_checkpoints") -> Checkpoints:
    kv = parse_key_values(text)
    try:
        return Checkpoints(
            backup_type=kv.get("backup_type", ""),
            from_lsn=int(kv["from_lsn"]),
            to_lsn=int(kv["to_lsn"]),
            last_lsn=int(kv.get("last_lsn", kv["to_lsn"])),
            extra={k: v for k, v in kv.items() if k not in {"backup_type", "from_lsn", "to_lsn", "last_lsn"}},
        )
    except (KeyError, ValueError) as exc:
        raise EngineError(
            f"{source}: missing or non-numeric LSN field ({exc}); content: {text[:200]!r}"
        ) from exc


@dataclass(frozen=True)
class BinlogPosition:
    file: str | None = None
    position: int | None = None
    gtid: str | None = None


_BINLOG_POS_INFO = re.compile(
    r"filename '(?P<file>[^']*)', position '(?P<pos>\d+)'(?:, GTID of the last change '(?P<gtid>[^']*)')?"
)


def parse_binlog_info(text: str) -> BinlogPosition:
    """xtrabackup_binlog_info / mariadb_backup_binlog_info: `<file>\\t<position>[\\t<gtid set>]`; the GTID set may wrap lines."""
    parts = text.strip().split(None, 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return BinlogPosition()
    gtid = "".join(parts[2].split()) if len(parts) == 3 else None
    return BinlogPosition(parts[0], int(parts[1]), gtid or None)


def parse_binlog_pos(value: str) -> BinlogPosition:
    """The `binlog_pos` value of xtrabackup_info / mariadb_backup_info."""
    m = _BINLOG_POS_INFO.search(value)
    if not m:
        return BinlogPosition()
    return BinlogPosition(m["file"], int(m["pos"]), m["gtid"] or None)


@dataclass(frozen=True)
class BackupInfo:
    fields: dict[str, str]

    @property
    def server_version(self) -> str:
        return self.fields.get("server_version", "")

    @property
    def tool_version(self) -> str:
        return self.fields.get("tool_version", "")

    @property
    def binlog(self) -> BinlogPosition:
        return parse_binlog_pos(self.fields.get("binlog_pos", ""))

    @property
    def start_time(self) -> str:
        return self.fields.get("start_time", "")

    @property
    def end_time(self) -> str:
        return self.fields.get("end_time", "")


def parse_info(text: str) -> BackupInfo:
    return BackupInfo(parse_key_values(text))


def find_metadata(directory: Path, names: tuple[str, ...]) -> Path | None:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    return None


def read_checkpoints(directory: Path) -> Checkpoints:
    path = find_metadata(directory, CHECKPOINT_FILES)
    if path is None:
        raise EngineError(
            f"no {' or '.join(CHECKPOINT_FILES)} in {directory}: the backup tool did not finish"
        )
    return parse_checkpoints(path.read_text(), str(path))


def read_info(directory: Path) -> BackupInfo:
    path = find_metadata(directory, INFO_FILES)
    return parse_info(path.read_text()) if path else BackupInfo({})


def read_binlog_position(directory: Path) -> BinlogPosition:
    path = find_metadata(directory, BINLOG_INFO_FILES)
    if path:
        pos = parse_binlog_info(path.read_text())
        if pos.file:
            return pos
    return read_info(directory).binlog
