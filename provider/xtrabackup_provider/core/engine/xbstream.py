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

Flag 0x01 (ignorable) lets a reader meet a chunk type it does not know, laid out as 'P': mbstream
treats it as a payload (writes it), XtraBackup's xbstream opens the file and checks the offset but
writes nothing. MariaDB's flags 0x02 (rewrite, alone) open a file the chunk finds closed with truncation
(without it mbstream fails to create the file: "File exists"). mariabackup 10.11 emits 'R', 'D',
seeks and rewrites for non-InnoDB tables changed by DDL while it runs.

The check accepts a stream exactly when `mbstream -x` extracts it (exit status 0 and nothing said;
it says "File exists" or "invalid filename", stops and exits 0), and `tree` is what it extracts
(core/engine/xbtree.py): tests/unit/test_xbstream_agreement.py replays generated streams through
the real mbstream. Beyond mbstream it refuses: a path with a NUL byte, an absolute path or a ".."
component (mbstream renames and removes follow them out of the target), a rename or remove of the
target directory itself, files never closed by an 'E' chunk and a stream without
xtrabackup_checkpoints (mariadb-backup 11.1+: mariadb_backup_checkpoints) with content (it was cut
short), and payloads over 2 GiB (the tools write a few MiB). Offsets up to 2^63 are accepted; a
target filesystem may allow less (ext4: 16 TiB). XtraBackup's xbstream is checked from the format
as documented (it is not installable here).

A K-part backup (core/pipeline/split.py) is checked by role: each data part ('part') on its own
(no renames or removes; it may be empty: its only file was dropped during the backup), then the
tail onto the tree of all parts (`--base`, see `Tree.merge`), which must hold the checkpoints.

Run as `python -m xtrabackup_provider.core.engine.xbstream [--flavour F] [--role R] [--base TREE]
[--tree-out TREE] < stream`: exit 0 and a JSON summary on stdout (the tree, as JSON, in --tree-out),
or exit 1 with the first problem on stderr.
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

from .metadata_names import CHECKPOINT_FILES
from .xbtree import File, Tree, TreeError, components

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
MAX_OFFSET = 1 << 63  # lseek() fails from here (a filesystem's own limit may be lower)
PAGE_FLAGS = slice(54, 58)  # FIL_PAGE_DATA + FSP_SPACE_FLAGS: an InnoDB page 0's tablespace flags
# The checkpoints file, under the name of the tool that wrote it (mariadb-backup 11.1+: mariadb_backup_*).
REQUIRED_FILES = CHECKPOINT_FILES
# The longest header: a rename names two paths.
MAX_HEAD = HEADER.size + MAX_PATH + LENGTH.size + MAX_PATH

StreamFlavour = Literal["mariabackup", "xtrabackup"]
FLAVOURS: tuple[StreamFlavour, ...] = ("mariabackup", "xtrabackup")
# What a stream is: a one-stream backup, a data part of a K-part backup, or its tail.
StreamRole = Literal["whole", "part", "tail"]
ROLES: tuple[StreamRole, ...] = ("whole", "part", "tail")


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
    if path_len >= MAX_PATH:
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


@dataclass
class _Open:
    """A file the extractor has open: its inode and where its next payload must start."""

    file: File
    offset: int = 0
    ibd: bool = False  # mbstream punches holes in a page-compressed .ibd and truncates it at close
    compressed: bool | None = False  # None: mbstream read the flags past the payload (undefined)
    written: bool = False


class XbstreamChecker:
    """Feed the stream in pieces of any size; `finish()` checks that it ended cleanly.

    `flavour` says what 'S' means and whether 'R'/'D' exist; `role` what the stream must hold
    (ROLES); `base` the tree the stream is extracted onto (a K-part backup's tail goes onto what
    its data parts made). `tree` is what the extractor makes of it (core/engine/xbtree.py)."""

    def __init__(
        self, flavour: StreamFlavour = "mariabackup", role: StreamRole = "whole", base: Tree | None = None
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown xbstream flavour {flavour!r}; expected one of {', '.join(FLAVOURS)}")
        if role not in ROLES:
            raise ValueError(f"unknown xbstream role {role!r}; expected one of {', '.join(ROLES)}")
        self.flavour: StreamFlavour = flavour
        self.role: StreamRole = role
        self.onto_parts = base is not None
        self.tree = base if base is not None else Tree()
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.open: dict[str, _Open] = {}  # by the path's bytes, as the extractor keys them
        # mbstream checks an end-of-file chunk against the last payload's checksum, over data a
        # rename chunk overwrites with its new name: (that checksum, the CRC32 of the data).
        self.stale = (0, 0)
        self.summary = XbstreamSummary()

    def feed(self, data: bytes) -> None:
        self.buf += data
        cursor = 0
        while (used := self._chunk(cursor)) is not None:
            cursor += used
        del self.buf[:cursor]
        self.base += cursor

    def finish(self) -> XbstreamSummary:
        """The extractor closes what is still open when the stream ends; `tree` then shows what it
        made, whatever this raises."""
        if self.buf:
            raise XbstreamError(
                f"stream ends inside a chunk at offset {self.base:#x} ({len(self.buf)} bytes left over)"
            )
        left_open = sorted(self.open)
        for path in left_open:
            self._close(path, self.base)
        if left_open:
            raise XbstreamError(f"files never closed by an end-of-file chunk: {left_open[:5]}")
        if self.summary.chunks == 0 and self.role == "whole":
            raise XbstreamError("the stream is empty")
        # A lone end-of-file chunk or a seek names the file but holds none of it.
        wants_checkpoints = self.role == "whole" or self.onto_parts
        if wants_checkpoints and not any(self._has_content(name) for name in REQUIRED_FILES):
            raise XbstreamError(
                f"no {' or '.join(REQUIRED_FILES)} (with its content) in the stream: it was cut short"
            )
        self.summary.files = len(self.tree.files())
        self.summary.stream_bytes = self.base
        return self.summary

    def _has_content(self, path: str) -> bool:
        node = self.tree.lookup(path)
        return isinstance(node, File) and node.size > 0

    def _chunk(self, at: int) -> int | None:
        """Bytes used by the complete chunk at `at`, or None if more input is needed."""
        where = self.base + at
        head = read_head(self.buf, at, self.flavour, where)
        if head is None or len(self.buf) - at < head.head_len + head.body_len:
            return None
        mariadb = self.flavour == "mariabackup"
        path = self._path(head, where)
        try:
            if mariadb and head.kind in ("D", "R"):
                self._remove_or_rename(head, path, where)
            elif head.kind == "E":
                self._end_of_file(path, head.flags, where)
            elif mariadb and head.kind == "S":
                self._seek(path, head, where)
            else:
                self._payload(at, head, path, where)
        except TreeError as exc:
            raise XbstreamError(f"chunk at offset {where:#x} ({path}): {exc}") from None
        self.summary.chunks += 1
        return head.head_len + head.body_len

    def _path(self, head: ChunkHead, where: int) -> str:
        """The chunk's path, refused where the extractor fails on it or it would leave the target."""
        names_only = self.flavour == "mariabackup" and head.kind in ("D", "R")
        for path in (head.path, head.new_path):
            if path is None:
                continue
            problem = None
            if "\x00" in path:
                problem = "holds a NUL byte (the extractor would cut the name there)"
            elif path.startswith("/") or ".." in path.split("/"):
                problem = "would escape the target directory"
            elif names_only and not components(path):
                problem = "names the target directory itself"
            elif not names_only and self.flavour == "mariabackup" and path.startswith("."):
                problem = "starts with '.': mbstream refuses it (invalid filename) and stops"
            if problem:
                raise XbstreamError(f"chunk at offset {where:#x}: path {path!r} {problem}")
        return head.path

    def _entry(self, path: str, flags: int) -> _Open:
        """The open file `path` names, opened as the extractor opens it if it is not open yet."""
        entry = self.open.get(path)
        if entry is None:
            mariadb = self.flavour == "mariabackup"
            # mbstream truncates only when the flags are the rewrite flag alone
            file = self.tree.create(path, truncate=mariadb and flags == FLAG_REWRITE)
            entry = self.open[path] = _Open(file, ibd=mariadb and path.endswith(".ibd"))
        return entry

    def _remove_or_rename(self, head: ChunkHead, path: str, where: int) -> None:
        what = "remove" if head.kind == "D" else "rename"
        if path in self.open:
            raise TreeError(f"a {what} chunk for a file still open; mbstream does not apply it and stops")
        if self.role == "part":
            raise TreeError(f"a {what} chunk in a data part: they belong in the tail (after every part)")
        if head.new_path is None:
            self.tree.remove(path)
            return
        self.tree.rename(path, head.new_path)
        self.stale = (self.stale[0], zlib.crc32(head.new_path.encode("utf-8", "surrogateescape") + b"\0"))

    def _end_of_file(self, path: str, flags: int, where: int) -> None:
        self._entry(path, flags)
        if self.stale[0] != self.stale[1]:
            raise TreeError(
                "an end-of-file chunk after a rename chunk with no payload chunk between: mbstream checks it "
                "against the last payload's checksum over the rename's new name (invalid checksum) and fails"
            )
        self._close(path, where)

    def _close(self, path: str, where: int) -> None:
        entry = self.open.pop(path)
        if entry.compressed:
            entry.file.size = entry.offset  # truncated at the write position
        elif entry.compressed is None and entry.offset != entry.file.size:
            raise XbstreamError(
                f"chunk at offset {where:#x} ({path}): its size after extraction is undefined (mbstream "
                "read the page-compression flags past a first payload of 54-57 bytes)"
            )

    def _seek(self, path: str, head: ChunkHead, where: int) -> None:
        entry = self._entry(path, head.flags)
        if head.offset >= MAX_OFFSET:
            raise TreeError(f"a seek to offset {head.offset}, past the largest file offset: mbstream fails")
        entry.offset = head.offset

    def _payload(self, at: int, head: ChunkHead, path: str, where: int) -> None:
        entry = self._entry(path, head.flags)
        known = head.kind == "P" or head.kind == "S"  # 'S' here: XtraBackup's sparse payload
        start = at + head.head_len
        body = memoryview(self.buf)[start : start + head.body_len]
        try:
            if self.flavour == "mariabackup" or known:
                if zlib.crc32(body) != head.checksum:
                    raise TreeError("payload CRC32 mismatch")
                self.stale = (head.checksum, head.checksum)
            if head.offset != entry.offset:
                raise TreeError(
                    f"payload offset {head.offset} does not continue the file (expected {entry.offset})"
                )
            if self.flavour == "mariabackup" or known:  # XtraBackup writes nothing of an unknown type
                self._write(entry, head, body)
        finally:
            body.release()
        self.summary.payload_bytes += head.length

    def _write(self, entry: _Open, head: ChunkHead, body: memoryview) -> None:
        span = head.length
        if head.entries:
            pairs = list(struct.iter_unpack("<II", body[: 8 * head.entries]))
            if sum(n for _skip, n in pairs) != head.length:
                raise TreeError("sparse map does not match the payload")
            span = sum(skip + n for skip, n in pairs)
        if entry.offset + span >= MAX_OFFSET:
            raise TreeError("the payload ends past the largest file offset")
        if entry.ibd and not entry.written:
            entry.compressed = _page_compressed(body[: PAGE_FLAGS.stop])
        entry.written = True
        entry.offset += span
        if head.length:  # an empty write at a seek past the end leaves the size
            entry.file.size = max(entry.file.size, entry.offset)


def _page_compressed(first: memoryview) -> bool | None:
    """Whether mbstream treats an .ibd as page-compressed, from its first payload: FSP_SPACE_FLAGS
    (big-endian, in page 0) with PAGE_COMPRESSION, or full_crc32 with a compression algorithm."""
    if len(first) < PAGE_FLAGS.start:
        return False
    if len(first) < PAGE_FLAGS.stop:
        return None
    flags = int.from_bytes(first[PAGE_FLAGS], "big")
    return bool(flags & 1 << 16) or bool(flags & 0x10 and flags & 0xE0)


def check_stream(fd: int, chunk: int = 1 << 20, checker: XbstreamChecker | None = None) -> XbstreamSummary:
    checker = checker or XbstreamChecker()
    while data := os.read(fd, chunk):
        checker.feed(data)
    return checker.finish()


def merge_parts(trees: dict[str, Tree]) -> Tree:
    """The tree the data parts of a K-part backup leave, extracted at once; XbstreamError if a path
    is in two of them (the extractions would race)."""
    try:
        return Tree.merge(trees)
    except TreeError as exc:
        raise XbstreamError(str(exc)) from None


def check_parts(parts: list[bytes], tail: bytes, flavour: StreamFlavour = "mariabackup") -> Tree:
    """A K-part backup in memory, checked as deep verify checks it: each data part on its own, the
    tail onto their merged tree. Returns the tree a restore extracts."""
    trees = {}
    for n, data in enumerate(parts):
        checker = XbstreamChecker(flavour, "part")
        try:
            checker.feed(data)
            checker.finish()
        except XbstreamError as exc:
            raise XbstreamError(f"part {n} of {len(parts)}: {exc}") from None
        trees[f"part {n}"] = checker.tree
    checker = XbstreamChecker(flavour, "tail", merge_parts(trees))
    try:
        checker.feed(tail)
        checker.finish()
    except XbstreamError as exc:
        raise XbstreamError(f"the tail: {exc}") from None
    return checker.tree


def checker_args(
    flavour: StreamFlavour, role: StreamRole = "whole", base: str | None = None, tree_out: str | None = None
) -> list[str]:
    """The arguments of `main` for a check of `flavour` (verify runs it as a pipeline stage)."""
    return (
        ["--flavour", flavour, "--role", role]
        + (["--base", base] if base else [])
        + (["--tree-out", tree_out] if tree_out else [])
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xtrabackup_provider.core.engine.xbstream")
    parser.add_argument("--flavour", choices=FLAVOURS, default="mariabackup")
    parser.add_argument("--role", choices=ROLES, default="whole")
    parser.add_argument("--base", help="a tree (JSON) the stream is extracted onto")
    parser.add_argument("--tree-out", help="write the tree the stream makes (JSON) here")
    args = parser.parse_args(argv)
    try:
        base = Tree.load(open(args.base, encoding="utf-8").read()) if args.base else None
        checker = XbstreamChecker(args.flavour, args.role, base)
        summary = check_stream(sys.stdin.fileno(), checker=checker)
    except XbstreamError as exc:
        print(f"xbstream framing: {exc}", file=sys.stderr)
        return 1
    if args.tree_out:
        with open(args.tree_out, "w", encoding="utf-8") as out:
            out.write(checker.tree.dump())
    print(json.dumps(asdict(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
