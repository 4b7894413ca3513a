"""The `clone` engine's own parts, pure: MySQL's CLONE LOCAL copies the datadir into a staging
directory on the database host (core/backup/clone.py runs it); this module streams that copy as
xbstream ('P' payload and 'E' end chunks, which mbstream and xbstream extract as well), extracts
such a stream, moves an extracted copy into a datadir, and writes the metadata files every backup
carries (checkpoints, binlog position, info), so the backup verb and the restore read a clone as
any backup. A clone is consistent when copied: there is no prepare.

xbstream has no directories of their own: an empty one (a schema without tables) travels as an
empty marker file in it, which the extractor turns back into the directory.

Run as `python -m xtrabackup_provider.core.engine.clone stream DIR` (the stream on stdout),
`... extract DEST` (the stream on stdin) or `... copy-back SRC DEST [--move]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from ..common.files import WRITE_PIECE
from .tools import CLONE_VERSION
from .xbstream import HEADER, MAGIC, MAX_PATH, PAYLOAD_HEADER, ChunkHead, XbstreamError, read_head
from .xbtree import components

VERSION = CLONE_VERSION
MINIMUM_SERVER = (8, 0, 17)
EMPTY_DIR_MARK = ".xbp-empty-dir"
CHUNK = 4 << 20
# The extractor reads and writes a payload in pieces of this size: the decompressor before it runs
# on while a piece is written (reading a whole 4 MiB chunk first left it blocked on a full pipe
# for most of the time the chunk took to write: the two took turns instead of overlapping). Small
# writes, as tar's: see core/common/files.py WRITE_PIECE (1 GiB through this extractor took 5.6 to
# 9.5 s in 256 KiB pieces, 0.76 to 0.84 s in these).
PIECE = WRITE_PIECE
MODULE = "xtrabackup_provider.core.engine.clone"
PLUGIN_HINT = "INSTALL PLUGIN clone SONAME 'mysql_clone.so'"


def refusal(
    where: str, *, mariadb: bool, version: tuple[int, ...], plugin: str | None, backup_admin: bool
) -> str | None:
    """Why `clone` cannot back up this server, in one line, or None."""
    if mariadb:
        return f"{where}: flavour clone is MySQL's CLONE; this server is MariaDB: use flavour mariabackup"
    if tuple(version[:3]) < MINIMUM_SERVER:
        return f"{where}: flavour clone needs MySQL 8.0.17 or later; this server is {'.'.join(map(str, version))}"
    if plugin != "ACTIVE":
        state = "is not installed" if plugin is None else f"is {plugin}"
        return f"{where}: the clone plugin {state}: run {PLUGIN_HINT} on the server (or start it with --plugin-load-add=mysql_clone.so)"
    if not backup_admin:
        return f"{where}: the backup account lacks BACKUP_ADMIN, which CLONE needs: GRANT BACKUP_ADMIN ON *.* TO it"
    return None


def metadata_files(
    *, binlog_file: str, binlog_position: int, gtid: str, lsn: int, server_version: str, start: str, end: str
) -> dict[str, str]:
    """The files the backup verb reads (core/engine/metadata.py), written the tools' way. A server
    without a binlog gives no position (and the manifest records none)."""
    info = (
        f"tool_name = clone\ntool_version = {'.'.join(map(str, VERSION[:3]))}\n"
        f"server_version = {server_version}\nstart_time = {start}\nend_time = {end}\n"
    )
    files = {
        "xtrabackup_checkpoints": f"backup_type = full-prepared\nfrom_lsn = 0\nto_lsn = {lsn}\nlast_lsn = {lsn}\n"
    }
    if binlog_file:
        files["xtrabackup_binlog_info"] = f"{binlog_file}\t{binlog_position}\t{gtid}\n"
        info += f"binlog_pos = filename '{binlog_file}', position '{binlog_position}', GTID of the last change '{gtid}'\n"
    files["xtrabackup_info"] = info
    return files


def stream_argv(directory: str) -> list[str]:
    return [sys.executable, "-m", MODULE, "stream", directory]


def extract_argv(dest_dir: str) -> list[str]:
    return [sys.executable, "-m", MODULE, "extract", dest_dir]


def copy_back_argv(prepared_dir: str, datadir: str, *, move: bool) -> list[str]:
    return [sys.executable, "-m", MODULE, "copy-back", prepared_dir, datadir] + (["--move"] if move else [])


# -- stream -----------------------------------------------------------------------------------------


def _entries(root: Path) -> Iterator[tuple[str, Path | None]]:
    """(stream path, file) in a stable order; an empty directory gives its marker (file None)."""
    for here, dirs, files in os.walk(root):
        dirs.sort()
        rel = Path(here).relative_to(root)
        if not dirs and not files and rel != Path("."):
            yield str(rel / EMPTY_DIR_MARK), None
        for name in sorted(files):
            path = Path(here) / name
            if path.is_symlink() or not path.is_file():
                raise XbstreamError(f"{path} is not a regular file; the clone copy holds only files")
            yield str(rel / name) if rel != Path(".") else name, path


def _chunk(
    out: BinaryIO, kind: bytes, path: bytes, payload: bytes | memoryview = b"", offset: int = 0
) -> None:
    out.write(HEADER.pack(MAGIC, 0, kind[0], len(path)) + path)
    if kind == b"P":
        out.write(PAYLOAD_HEADER.pack(len(payload), offset, zlib.crc32(payload)))
        out.write(payload)


def write_stream(root: Path, out: BinaryIO) -> None:
    """Every file under `root` as xbstream chunks on `out`."""
    buffer = memoryview(bytearray(CHUNK))  # reused: no multi-MiB allocation per chunk
    for name, path in _entries(root):
        encoded = name.encode("utf-8", "surrogateescape")
        if len(encoded) >= MAX_PATH:
            raise XbstreamError(f"{name}: path longer than xbstream allows ({MAX_PATH - 1} bytes)")
        offset = 0
        if path is not None:
            with path.open("rb", buffering=0) as fh:
                while n := fh.readinto(buffer):
                    _chunk(out, b"P", encoded, buffer[:n], offset)
                    offset += n
        if offset == 0:
            _chunk(out, b"P", encoded)  # the file exists even when empty
        _chunk(out, b"E", encoded)


# -- extract ----------------------------------------------------------------------------------------


def _target(dest: Path, name: str) -> Path:
    parts = components(name)
    if not parts or "\0" in name or name.startswith("/") or ".." in parts:
        raise XbstreamError(f"refusing the stream path {name!r}: it leaves the target directory")
    return dest.joinpath(*parts)


class _ReadsInto(Protocol):
    def readinto(self, buffer: memoryview, /) -> int | None: ...


class _Exact:
    """Exact-length reads from the stream into one buffer this extractor reuses (no per-chunk
    allocation: fresh multi-MiB objects for every chunk cost more system time in page faults than
    the copying)."""

    def __init__(self, inp: _ReadsInto) -> None:
        self.inp = inp
        self.buffer = bytearray(PIECE)
        self.offset = 0  # stream bytes read so far

    def into(self, view: memoryview) -> int:
        """Fill `view`; the bytes read (fewer only at the end of the stream)."""
        got = 0
        while got < len(view):
            n = self.inp.readinto(view[got:])
            if not n:
                break
            got += n
        self.offset += got
        return got

    def payload(self, size: int, where: int) -> memoryview:
        """The next `size` bytes (at most PIECE), in the reused buffer (valid until the next call)."""
        view = memoryview(self.buffer)[:size]
        if self.into(view) < size:
            raise XbstreamError(f"the stream ends inside a chunk at offset {where:#x}")
        return view

    def copy(self, size: int, where: int, out: BinaryIO) -> int:
        """Write the next `size` bytes to `out` piece by piece; their CRC32."""
        crc = 0
        while size:
            piece = self.payload(min(size, PIECE), where)
            crc = zlib.crc32(piece, crc)
            out.write(piece)
            size -= len(piece)
        return crc

    def head(self, where: int) -> ChunkHead | None:
        """The next chunk's header ('P' or 'E'), or None at a clean end of the stream."""
        raw = bytearray(HEADER.size)
        got = self.into(memoryview(raw))
        if got == 0:
            return None
        if got < HEADER.size:
            raise XbstreamError(f"the stream ends inside a chunk at offset {where:#x}")
        read_head(raw, 0, "xtrabackup", where)  # bad magic or path length: its error
        kind, path_len = chr(raw[9]), HEADER.unpack_from(raw)[3]
        raw += self.payload(path_len, where)
        if kind == "P":
            raw += self.payload(PAYLOAD_HEADER.size, where)
        head = read_head(raw, 0, "xtrabackup", where)  # an unknown type: its error
        if head is None or head.kind not in ("P", "E"):
            raise XbstreamError(f"chunk at offset {where:#x}: type {kind!r} is not a clone's")
        return head


def extract(inp: _ReadsInto, dest: Path) -> int:
    """Write the files of a 'P'/'E' stream under `dest`; the number of files. Anything else (other
    chunk types, a bad CRC, a gap, a cut) is an error naming the file."""
    dest.mkdir(parents=True, exist_ok=True)
    stream = _Exact(inp)
    done = 0
    open_files: dict[str, tuple[BinaryIO, int]] = {}
    try:
        while (head := stream.head(where := stream.offset)) is not None:
            path = _target(dest, head.path)
            fh, offset = open_files.get(head.path) or (None, 0)
            if head.kind == "P":
                if head.offset != offset:
                    raise XbstreamError(f"chunk at offset {where:#x} ({head.path}): bad CRC32 or offset")
                if fh is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fh = path.open("xb")
                    open_files[head.path] = (fh, offset)
                # Written as it arrives, checked at its end: a bad CRC fails the extraction (exit
                # status 1), and with it the restore, which removes what it extracted.
                if stream.copy(head.body_len, where, fh) != head.checksum:
                    raise XbstreamError(f"chunk at offset {where:#x} ({head.path}): bad CRC32 or offset")
                open_files[head.path] = (fh, offset + head.body_len)
            else:
                if fh is None:
                    raise XbstreamError(f"chunk at offset {where:#x}: end of {head.path}, never opened")
                fh.close()
                del open_files[head.path]
                if path.name == EMPTY_DIR_MARK:
                    path.unlink()
                done += 1
        if open_files:
            raise XbstreamError(f"the stream ends with {sorted(open_files)[0]} not closed: it was cut short")
    finally:
        for fh, _ in open_files.values():
            fh.close()
    return done


def copy_back(source: Path, target: Path, *, move: bool) -> None:
    """Every entry of the extracted copy into the (empty) datadir: renamed with `move`."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        dest = target / entry.name
        if move:
            shutil.move(entry, dest)
        elif entry.is_dir():
            shutil.copytree(entry, dest, symlinks=False)
        else:
            shutil.copy2(entry, dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("stream").add_argument("directory")
    sub.add_parser("extract").add_argument("dest")
    back = sub.add_parser("copy-back")
    back.add_argument("source")
    back.add_argument("target")
    back.add_argument("--move", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "stream":
            write_stream(Path(args.directory), sys.stdout.buffer)
            sys.stdout.buffer.flush()
        elif args.command == "extract":
            with open(sys.stdin.fileno(), "rb", closefd=False) as inp:
                extract(inp, Path(args.dest))
        else:
            copy_back(Path(args.source), Path(args.target), move=args.move)
    except (OSError, XbstreamError) as exc:
        print(f"clone {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
