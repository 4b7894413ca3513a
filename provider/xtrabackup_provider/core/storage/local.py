"""LocalStore: a directory as an object store (tests, air-gapped hosts).

Commits are crash-durable, so "manifest last" holds after a power cut too: a writer fsyncs its
file before renaming it into place and then fsyncs the directory (and every directory it had to
create, in its parent), so nothing committed later can reach the disk before it. A deletion
fsyncs the directories it removed from before returning, so a manifest deleted first stays
deleted even if the data deleted after it is what survives a crash.

A key the directory cannot hold (a name over 255 bytes, `a` beside `a/b`) is a StorageError
naming it, like every other refusal of a store.
"""

from __future__ import annotations

__all__ = ["LocalStore"]

import builtins
import contextlib
import os
import posixpath
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..common.files import fsync_dir, make_dirs, write_pieces
from .base import (
    Deleted,
    LockReader,
    MiB,
    ObjectInfo,
    PutOptions,
    StorageError,
    Versioned,
    WrittenSegment,
    check_key,
)

NAME_MAX = 255  # bytes in one file name


class LocalStore:
    supports_object_lock = False
    supports_archive = False
    endpoint_url: str | None = None

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = f"file://{self.root}"

    # A directory has no Object Lock, archive tiers or multipart uploads left open by a dead run
    # (a killed writer's `.partial-*` file is invisible to listing and reads).
    def abort_stale_uploads(self, prefix: str, older_than: timedelta) -> builtins.list[str]:
        return []

    def lock_reader(self) -> LockReader | None:
        return None

    def restore_object(self, key: str, days: int, tier: str) -> bool:
        raise StorageError(f"{self.location} has no archive tiers: {key} cannot need a restore")

    def _path(self, key: str) -> Path:
        if long := [name for name in check_key(key).split("/") if len(name.encode()) > NAME_MAX]:
            raise StorageError(
                f"{self.location}: key {key[:200]!r} has a name of {len(long[0].encode())} bytes; "
                f"a directory store holds names of at most {NAME_MAX}"
            )
        return self.root / key

    @contextlib.contextmanager
    def _named(self, key: str, doing: str) -> Iterator[None]:
        """An OSError the directory raises for `key` as a StorageError naming it."""
        try:
            yield
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(
                f"{self.location}: cannot {doing} {key[:200]!r}: {exc.strerror or exc} (a directory store "
                "cannot hold a key and a longer key through it, like a and a/b)"
            ) from exc

    def open_writer(self, key: str, options: PutOptions | None = None) -> _LocalWriter:
        path = self._path(key)
        with self._named(key, "write"):
            return _LocalWriter(path, self._named(key, "write"))

    def put_bytes(self, key: str, data: bytes, options: PutOptions | None = None) -> None:
        writer = self.open_writer(key, options)
        writer.write(data)
        writer.commit()

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise StorageError(f"{self.location}: no object {key!r}") from exc

    def read_chunks(self, key: str, chunk_size: int = 4 * MiB) -> Iterator[bytes]:
        path = self._path(key)
        try:
            fh = path.open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise StorageError(f"{self.location}: no object {key!r}") from exc
        with fh:
            while chunk := fh.read(chunk_size):
                yield chunk

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        if not path.is_file():
            return None
        st = path.stat()
        return ObjectInfo(key, st.st_size, "STANDARD", datetime.fromtimestamp(st.st_mtime, UTC))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # S3 semantics: a prefix is a plain string prefix, so search from its last complete directory.
        search = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not search.is_dir():
            return
        keys = []
        for dirpath, _dirs, files in os.walk(search):
            for name in files:
                key = posixpath.relpath(os.path.join(dirpath, name), self.root)
                if ".partial-" not in name and key.startswith(prefix):
                    keys.append(key)
        for key in sorted(keys):  # lexicographic, like S3's listing
            info = self.head(key)
            if info:
                yield info

    def delete(self, keys: Iterable[str]) -> Deleted:
        result = Deleted()
        touched: set[Path] = set()
        for key in keys:
            path = self._path(key)
            if not path.is_file():
                continue  # no such object (a directory of that name is none either)
            with contextlib.suppress(FileNotFoundError):
                size = path.stat().st_size
                path.unlink()
                result.keys += 1
                assert result.freed_bytes is not None
                result.freed_bytes += size
                touched.add(path.parent)
        for directory in sorted(touched):  # before the caller deletes anything that depended on these
            fsync_dir(directory)
        return result

    def put_new(self, key: str, data: bytes, if_match: str | None = None) -> str | None:
        """Conditional write (see S3Store.put_new); a lock on the directory makes it atomic.

        The bytes are written and synced before the lock is taken, so it is held only to compare and
        rename: a process stopped (SIGSTOP, a frozen VM) while holding it stops every other writer
        of the directory, e.g. the next run taking over a host lock whose lease that process lost.
        A lock held past DIR_LOCK_WAIT is an error naming the directory, never a wait forever."""
        path = self._path(key)
        with self._named(key, "write"):
            writer = _LocalWriter(path, self._named(key, "write"))
        try:
            writer.write(data)
            writer.sync()
            with self._named(key, "write"):
                dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                _lock_dir(dir_fd, path.parent, key)
                current = path.read_bytes() if path.is_file() else None
                if (current is None) != (if_match is None) or (
                    current is not None and _etag(current) != if_match
                ):
                    return None
                writer.rename()
            finally:
                os.close(dir_fd)  # also releases the flock
        finally:
            writer.abort()  # the temporary file, unless renamed
        fsync_dir(path.parent)  # the name is on disk before anything committed after it
        return _etag(data)

    def get_versioned(self, key: str) -> Versioned | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return None
        # One machine (or one file server) sets both times: its clock is the store's clock.
        now = time.time()
        return Versioned(
            data, _etag(data), timedelta(seconds=max(0.0, now - mtime)), datetime.fromtimestamp(now, UTC)
        )


DIR_LOCK_WAIT = 120.0  # seconds a conditional write waits for another writer's directory lock


def _lock_dir(dir_fd: int, directory: Path, key: str) -> None:
    """Take the directory's write lock, waiting at most DIR_LOCK_WAIT for another writer."""
    import fcntl

    deadline = time.monotonic() + DIR_LOCK_WAIT
    while True:
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise StorageError(
                    f"cannot write {key[:200]!r}: another process has held the write lock of {directory} for "
                    f"over {DIR_LOCK_WAIT:g} s (a stopped or frozen process? `fuser {directory}` names it); "
                    "nothing was written"
                ) from None
            time.sleep(0.01)


def _etag(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


class _LocalWriter:
    def __init__(self, path: Path, named: contextlib.AbstractContextManager[None]) -> None:
        make_dirs(path.parent)
        self.named = named  # what an OSError at commit becomes
        self.path = path
        self.tmp = path.with_name(f"{path.name}.partial-{uuid.uuid4().hex[:8]}")
        self.fh = self.tmp.open("wb")
        self.size = 0
        self.segments: list[WrittenSegment] = []  # a file holds any stream whole

    def write(self, data: bytes) -> None:
        write_pieces(self.fh, data)
        self.size += len(data)

    def commit(self) -> int:
        self.sync()
        self.rename()
        fsync_dir(self.path.parent)  # the name is on disk before anything committed after it
        return self.size

    def sync(self) -> None:
        """The bytes on disk before the name points at them."""
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()

    def rename(self) -> None:
        try:
            with self.named:
                os.replace(self.tmp, self.path)
        except StorageError:
            self.tmp.unlink(missing_ok=True)
            raise

    def abort(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)
