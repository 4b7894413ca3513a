"""The xbstream format (XBSTCK01): its chunk grammar for both tools, and a framing check that writes
nothing (deep verify's last stage).

Every chunk starts with magic "XBSTCK01" (8 bytes), flags (1), type (1) and a path (4-byte little
endian length, then the path). What follows depends on the type, and on the tool for 'S':

    'P' payload      length (8), offset (8), CRC32 of the payload (4), the payload
    'E' end of file  nothing
    'S' XtraBackup:  sparse: entry count (4), length (8), offset (8), CRC32 of map + payload (4),
                     the sparse map (8 bytes per entry: skip, length), the payload
    'S' MariaDB:     seek: offset (8), the file's next write position
    'D' MariaDB:     remove the path (a table dropped during the backup)
    'R' MariaDB:     rename: new path length (4), new path (a table renamed during the backup)

Flag 0x01 (ignorable) lets a reader skip a chunk type it does not know (its layout is then that of
'P'); MariaDB's flag 0x02 (rewrite) has a file that an 'E' chunk closed opened again with
truncation (without it mbstream fails to create the file and keeps the first copy). mariabackup 10.11 emits 'R', 'D' and rewrites for non-InnoDB tables changed
by DDL while it runs.

Beyond what `mbstream -x` checks, the framing check refuses paths that would escape the target
directory, payloads whose offsets do not continue the file, files never closed by an 'E' chunk,
and a stream without xtrabackup_checkpoints (it was cut short between two files). The streams of a
K-part backup (core/pipeline/split.py) are checked by their role: only part 0 holds the tool's
metadata files, and the tail (renames and removes) is empty when no DDL ran during the backup.

Run as `python -m xtrabackup_provider.core.engine.xbstream [--flavour F] [--role R] < stream`: exit
0 and a JSON summary on stdout, or exit 1 with the first problem on stderr.
"""

from __future__ import annotations

__all__ = ["checker_args"]

import argparse
import json
import os
import struct
import sys
import zlib
from dataclasses import asdict, dataclass
from typing import Literal

MAGIC = b"XBSTCK01"
FLAG_IGNORABLE = 0x01
FLAG_REWRITE = 0x02  # MariaDB: open the file with truncation
MAX_PATH = 512  # FN_REFLEN: the tools refuse longer paths
HEADER = struct.Struct("<8sBBI")  # magic, flags, type, path length
PAYLOAD_HEADER = struct.Struct("<QQI")  # length, offset, checksum
SPARSE_HEADER = struct.Struct("<IQQI")  # entries, length, offset, checksum
OFFSET = struct.Struct("<Q")  # MariaDB 'S': seek
LENGTH = struct.Struct("<I")  # MariaDB 'R': new path length
MAX_PAYLOAD = 1 << 31  # the tools write chunks of a few MiB; more means a corrupt length field
REQUIRED_FILE = "xtrabackup_checkpoints"
# The longest header: a rename names two paths.
MAX_HEAD = HEADER.size + MAX_PATH + LENGTH.size + MAX_PATH

StreamFlavour = Literal["mariabackup", "xtrabackup"]
FLAVOURS: tuple[StreamFlavour, ...] = ("mariabackup", "xtrabackup")
# What a stream is: a one-stream backup, part 0 of K, another data part, or the tail.
StreamRole = Literal["whole", "first-part", "part", "tail"]
ROLES: tuple[StreamRole, ...] = ("whole", "first-part", "part", "tail")


class XbstreamError(ValueError):
    """The stream is not well-formed; the message names the chunk offset and the file."""


@dataclass(frozen=True, slots=True)
class ChunkHead:
    """A chunk's header: everything before its payload (or sparse map)."""

    kind: str  # 'P', 'E', 'S', 'D', 'R', or an ignorable unknown letter
    flags: int
    path: str  # decoded with surrogateescape: the same bytes give the same str
    head_len: int  # bytes of the header
    body_len: int  # bytes after it: payload (+ sparse map)
    offset: int = 0  # 'P' / sparse 'S': the payload's file offset; MariaDB 'S': the seek offset
    length: int = 0  # payload bytes
    checksum: int = 0
    entries: int = 0  # sparse map entries
    new_path: str | None = None  # 'R'

    @property
    def carries_data(self) -> bool:
        return self.body_len > 0 or self.kind == "P"


def _decode(raw: bytes | memoryview) -> str:
    return bytes(raw).decode("utf-8", "surrogateescape")


def read_head(
    buf: bytes | bytearray | memoryview, at: int, flavour: StreamFlavour, where: int
) -> ChunkHead | None:
    """The header of the chunk at `buf[at:]`, or None if `buf` ends before it does. `where` is its
    offset in the stream, for errors. Raises XbstreamError for bad magic, a path length out of range,
    an implausible payload length, or a type this flavour does not have (unless ignorable)."""
    have = len(buf) - at
    if have < HEADER.size:
        return None
    magic, flags, kind_byte, path_len = HEADER.unpack_from(buf, at)
    if magic != MAGIC:
        raise XbstreamError(f"bad chunk magic {bytes(magic)!r} at offset {where:#x}")
    if path_len == 0 or path_len >= MAX_PATH:
        raise XbstreamError(f"chunk at offset {where:#x}: path length {path_len} is out of range")
    pos = HEADER.size + path_len
    if have < pos:
        return None
    path = _decode(memoryview(buf)[at + HEADER.size : at + pos])
    kind = chr(kind_byte)
    if kind == "E" or (kind == "D" and flavour == "mariabackup"):
        return ChunkHead(kind, flags, path, pos, 0)
    if kind == "S" and flavour == "mariabackup":
        if have < pos + OFFSET.size:
            return None
        (offset,) = OFFSET.unpack_from(buf, at + pos)
        return ChunkHead(kind, flags, path, pos + OFFSET.size, 0, offset=offset)
    if kind == "R" and flavour == "mariabackup":
        if have < pos + LENGTH.size:
            return None
        (new_len,) = LENGTH.unpack_from(buf, at + pos)
        if new_len == 0 or new_len >= MAX_PATH:
            raise XbstreamError(
                f"chunk at offset {where:#x} ({path}): new path length {new_len} is out of range"
            )
        end = pos + LENGTH.size + new_len
        if have < end:
            return None
        new_path = _decode(memoryview(buf)[at + pos + LENGTH.size : at + end])
        return ChunkHead(kind, flags, path, end, 0, new_path=new_path)
    if kind == "S":  # XtraBackup: sparse
        if have < pos + SPARSE_HEADER.size:
            return None
        entries, length, offset, checksum = SPARSE_HEADER.unpack_from(buf, at + pos)
        head = ChunkHead(
            kind,
            flags,
            path,
            pos + SPARSE_HEADER.size,
            8 * entries + length,
            offset,
            length,
            checksum,
            entries,
        )
    elif kind == "P" or flags & FLAG_IGNORABLE:
        if have < pos + PAYLOAD_HEADER.size:
            return None
        length, offset, checksum = PAYLOAD_HEADER.unpack_from(buf, at + pos)
        head = ChunkHead(kind, flags, path, pos + PAYLOAD_HEADER.size, length, offset, length, checksum)
    else:
        raise XbstreamError(f"chunk at offset {where:#x} ({path}): unknown type {kind_byte:#x} for {flavour}")
    if head.length > MAX_PAYLOAD or head.entries > MAX_PAYLOAD // 8:
        raise XbstreamError(
            f"chunk at offset {where:#x} ({path}): payload length {head.length} is implausible"
        )
    return head


@dataclass
class XbstreamSummary:
    chunks: int = 0
    files: int = 0
    payload_bytes: int = 0
    stream_bytes: int = 0


class XbstreamChecker:
    """Feed the stream in pieces of any size; `finish()` checks that it ended cleanly.

    `flavour` says what 'S' means and whether 'R'/'D' exist; `role` what the stream must hold
    (ROLES). After `finish()`, `seen` holds every path a chunk named (renamed-to names too)."""

    def __init__(self, flavour: StreamFlavour = "mariabackup", role: StreamRole = "whole") -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown xbstream flavour {flavour!r}; expected one of {', '.join(FLAVOURS)}")
        if role not in ROLES:
            raise ValueError(f"unknown xbstream role {role!r}; expected one of {', '.join(ROLES)}")
        self.flavour: StreamFlavour = flavour
        self.role: StreamRole = role
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.next_offset: dict[str, int] = {}  # open files: where their next payload must start
        self.seen: set[str] = set()
        self.closed_with_data: set[str] = set()  # files whose payload ended with an 'E' chunk
        self.closed: set[str] = set()  # files on disk after an 'E' chunk: only a rewrite reopens them
        self.summary = XbstreamSummary()

    def feed(self, data: bytes) -> None:
        self.buf += data
        cursor = 0
        while (used := self._chunk(cursor)) is not None:
            cursor += used
        del self.buf[:cursor]
        self.base += cursor

    def finish(self) -> XbstreamSummary:
        if self.buf:
            raise XbstreamError(
                f"stream ends inside a chunk at offset {self.base:#x} ({len(self.buf)} bytes left over)"
            )
        if self.next_offset:
            raise XbstreamError(f"files never closed by an end-of-file chunk: {sorted(self.next_offset)[:5]}")
        if self.summary.chunks == 0 and self.role != "tail":
            raise XbstreamError("the stream is empty")
        if self.role in ("whole", "first-part") and REQUIRED_FILE not in self.closed_with_data:
            # A lone end-of-file chunk names the file but holds none of it.
            raise XbstreamError(f"no {REQUIRED_FILE} (with its content) in the stream: it was cut short")
        self.summary.files = len(self.seen)
        self.summary.stream_bytes = self.base
        return self.summary

    def _chunk(self, at: int) -> int | None:
        """Bytes used by the complete chunk at `at`, or None if more input is needed."""
        where = self.base + at
        head = read_head(self.buf, at, self.flavour, where)
        if head is None or len(self.buf) - at < head.head_len + head.body_len:
            return None
        path = self._path(head.path, where)
        if head.kind == "E":
            self._end_of_file(path)
        elif head.kind in ("D", "R") and path in self.next_offset:
            raise XbstreamError(
                f"chunk at offset {where:#x} ({path}): a {'remove' if head.kind == 'D' else 'rename'} chunk "
                "for a file still open; mbstream does not apply it"
            )
        elif head.kind == "D":
            self.closed.discard(path)
            self.closed_with_data.discard(path)
            self.seen.add(path)
        elif head.kind == "R":
            assert head.new_path is not None
            new = self._path(head.new_path, where)
            for names in (self.closed, self.closed_with_data):
                if path in names:
                    names.discard(path)
                    names.add(new)
            self.seen.update((path, new))
        elif head.kind == "S" and self.flavour == "mariabackup":
            self.next_offset[path] = head.offset
            self.seen.add(path)
        else:
            self._payload(at, head, path, where)
            return head.head_len + head.body_len
        self.summary.chunks += 1
        return head.head_len

    def _payload(self, at: int, head: ChunkHead, path: str, where: int) -> None:
        start = at + head.head_len
        body = memoryview(self.buf)[start : start + head.body_len]
        try:
            if zlib.crc32(body) != head.checksum:
                raise XbstreamError(f"chunk at offset {where:#x} ({path}): payload CRC32 mismatch")
            if head.kind in ("P", "S"):
                self._reopen(path, head.flags, where)
                self._advance(path, head.offset, head.length, body[: 8 * head.entries], where)
        finally:
            body.release()
        self.summary.chunks += 1
        self.summary.payload_bytes += head.length

    def _advance(self, path: str, offset: int, length: int, sparse: memoryview, where: int) -> None:
        expected = self.next_offset.get(path, 0)
        if offset != expected:
            raise XbstreamError(
                f"chunk at offset {where:#x} ({path}): payload offset {offset} does not continue the file "
                f"(expected {expected})"
            )
        span = length
        if sparse:
            pairs = list(struct.iter_unpack("<II", sparse))
            if sum(n for _skip, n in pairs) != length:
                raise XbstreamError(
                    f"chunk at offset {where:#x} ({path}): sparse map does not match the payload"
                )
            span = sum(skip + n for skip, n in pairs)
        self.next_offset[path] = offset + span
        self.seen.add(path)

    def _reopen(self, path: str, flags: int, where: int) -> None:
        """mbstream creates a file it has not open with O_EXCL: a closed file sent again fails to
        create ("File exists"), and mbstream exits 0 with the old copy, unless the chunk has
        MariaDB's rewrite flag (the file is then opened with truncation)."""
        if path not in self.closed or path in self.next_offset:
            return
        if self.flavour == "mariabackup" and not flags & FLAG_REWRITE:
            raise XbstreamError(
                f"chunk at offset {where:#x} ({path}): sent again without the rewrite flag after its "
                "end-of-file chunk; mbstream would keep the first copy"
            )
        self.closed.discard(path)
        self.closed_with_data.discard(path)

    def _end_of_file(self, path: str) -> None:
        if self.next_offset.pop(path, 0) > 0:
            self.closed_with_data.add(path)
        self.closed.add(path)
        self.seen.add(path)
        self.summary.chunks += 1

    @staticmethod
    def _path(path: str, where: int) -> str:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or "\x00" in path:
            raise XbstreamError(
                f"chunk at offset {where:#x}: path {path!r} would escape the target directory"
            )
        return path


def check_stream(fd: int, chunk: int = 1 << 20, checker: XbstreamChecker | None = None) -> XbstreamSummary:
    checker = checker or XbstreamChecker()
    while data := os.read(fd, chunk):
        checker.feed(data)
    return checker.finish()


def checker_args(flavour: StreamFlavour, role: StreamRole = "whole") -> list[str]:
    """The arguments of `main` for a check of `flavour` (verify runs it as a pipeline stage)."""
    return ["--flavour", flavour, "--role", role]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xtrabackup_provider.core.engine.xbstream")
    parser.add_argument("--flavour", choices=FLAVOURS, default="mariabackup")
    parser.add_argument("--role", choices=ROLES, default="whole")
    args = parser.parse_args(argv)
    checker = XbstreamChecker(args.flavour, args.role)
    try:
        summary = check_stream(sys.stdin.fileno(), checker=checker)
    except XbstreamError as exc:
        print(f"xbstream framing: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
