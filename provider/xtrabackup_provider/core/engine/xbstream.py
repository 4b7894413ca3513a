"""Check the framing of an xbstream (XBSTCK01) without writing anything: deep verify's last stage.

A chunk is: magic "XBSTCK01" (8 bytes), flags (1), type (1: 'P' payload, 'S' sparse, 'E' end of
file), path length (4, little endian) and path; then, except for 'E': for 'S' a sparse map
entry count (4), payload length (8), payload offset (8), CRC32 of sparse map + payload (4), the
sparse map (8 bytes per entry: skip, length) and the payload. An unknown type is an error unless
the chunk's "ignorable" flag is set.

Beyond what `mbstream -x` checks, this refuses paths that would escape the target directory,
payloads whose offsets do not continue the file, files never closed by an 'E' chunk, and a
stream without xtrabackup_checkpoints (it was cut short between two files).

Run as `python -m xtrabackup_provider.core.engine.xbstream < stream`: exit 0 and a JSON summary on
stdout, or exit 1 with the first problem on stderr.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from dataclasses import asdict, dataclass

MAGIC = b"XBSTCK01"
FLAG_IGNORABLE = 0x01
MAX_PATH = 512  # FN_REFLEN: the tools refuse longer paths
HEADER = struct.Struct("<8sBBI")  # magic, flags, type, path length
PAYLOAD_HEADER = struct.Struct("<QQI")  # length, offset, checksum
MAX_PAYLOAD = 1 << 31  # the tools write chunks of a few MiB; more means a corrupt length field
REQUIRED_FILE = "xtrabackup_checkpoints"


class XbstreamError(ValueError):
    """The stream is not well-formed; the message names the chunk offset and the file."""


@dataclass
class XbstreamSummary:
    chunks: int = 0
    files: int = 0
    payload_bytes: int = 0
    stream_bytes: int = 0


class XbstreamChecker:
    """Feed the stream in pieces of any size; `finish()` checks that it ended cleanly."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.next_offset: dict[str, int] = {}  # open files: where their next payload must start
        self.seen: set[str] = set()
        self.closed_with_data: set[str] = set()  # files whose payload ended with an 'E' chunk
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
        if self.summary.chunks == 0:
            raise XbstreamError("the stream is empty")
        if REQUIRED_FILE not in self.closed_with_data:
            # A lone end-of-file chunk names the file but holds none of it.
            raise XbstreamError(f"no {REQUIRED_FILE} (with its content) in the stream: it was cut short")
        self.summary.files = len(self.seen)
        self.summary.stream_bytes = self.base
        return self.summary

    def _chunk(self, at: int) -> int | None:
        """Bytes used by the complete chunk at `at`, or None if more input is needed."""
        buf, where = self.buf, self.base + at
        if len(buf) - at < HEADER.size:
            return None
        magic, flags, kind, path_len = HEADER.unpack_from(buf, at)
        if magic != MAGIC:
            raise XbstreamError(f"bad chunk magic {bytes(magic)!r} at offset {where:#x}")
        if path_len == 0 or path_len >= MAX_PATH:
            raise XbstreamError(f"chunk at offset {where:#x}: path length {path_len} is out of range")
        pos = at + HEADER.size
        if len(buf) - pos < path_len:
            return None
        path = self._path(bytes(buf[pos : pos + path_len]), where)
        pos += path_len
        if kind == ord("E"):
            self._end_of_file(path)
            return pos - at
        if kind not in (ord("P"), ord("S")) and not flags & FLAG_IGNORABLE:
            raise XbstreamError(f"chunk at offset {where:#x} ({path}): unknown type {kind:#x}")
        return self._payload(at, pos, chr(kind), path, where)

    def _payload(self, at: int, pos: int, kind: str, path: str, where: int) -> int | None:
        buf = self.buf
        entries = 0
        if kind == "S":
            if len(buf) - pos < 4:
                return None
            (entries,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        if len(buf) - pos < PAYLOAD_HEADER.size:
            return None
        length, offset, checksum = PAYLOAD_HEADER.unpack_from(buf, pos)
        if length > MAX_PAYLOAD or entries > MAX_PAYLOAD // 8:
            raise XbstreamError(
                f"chunk at offset {where:#x} ({path}): payload length {length} is implausible"
            )
        pos += PAYLOAD_HEADER.size
        end = pos + 8 * entries + length
        if len(buf) < end:
            return None
        body = memoryview(buf)[pos:end]
        try:
            if zlib.crc32(body) != checksum:
                raise XbstreamError(f"chunk at offset {where:#x} ({path}): payload CRC32 mismatch")
            if kind in ("P", "S"):
                self._advance(path, offset, length, body[: 8 * entries], where)
        finally:
            body.release()
        self.summary.chunks += 1
        self.summary.payload_bytes += length
        return end - at

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

    def _end_of_file(self, path: str) -> None:
        if self.next_offset.pop(path, 0) > 0:
            self.closed_with_data.add(path)
        self.seen.add(path)
        self.summary.chunks += 1

    @staticmethod
    def _path(raw: bytes, where: int) -> str:
        path = raw.decode("utf-8", errors="replace")
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or "\x00" in path:
            raise XbstreamError(
                f"chunk at offset {where:#x}: path {path!r} would escape the target directory"
            )
        return path


def check_stream(fd: int, chunk: int = 1 << 20) -> XbstreamSummary:
    checker = XbstreamChecker()
    while data := os.read(fd, chunk):
        checker.feed(data)
    return checker.finish()


def main() -> int:
    try:
        summary = check_stream(sys.stdin.fileno())
    except XbstreamError as exc:
        print(f"xbstream framing: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
