"""Segments: one byte stream stored as consecutive objects `KEY`, `KEY.s001`, `KEY.s002`, ...

A stream longer than one object may hold (10,000 parts under the memory bound, or S3's 5 TiB:
core/storage/partplan.py) continues in the next segment. The writer reports each segment's key,
size and sha256 after commit (`ObjectWriter.segments`); the manifest records them, so a reader
knows every key to fetch, delete, copy, lock or restore from an archive tier, and a missing or
altered segment is refused by its own key. A one-segment stream is the object `KEY` alone, as it
always was.
"""

from __future__ import annotations

__all__ = ["one_object"]

import contextlib
import hashlib
from collections.abc import Iterator, Sequence

from .base import ObjectStore, ObjectWriter, StorageError, WrittenSegment


def check_segments_present(store: ObjectStore, pieces: Sequence[WrittenSegment]) -> None:
    """Refuse, naming the first one, a segment that is missing or whose size is not the recorded one."""
    for seg in pieces:
        info = store.head(seg.key)
        if info is None:
            raise StorageError(
                f"{store.location}: segment {seg.key} of a {len(pieces)}-segment stream is missing"
            )
        if info.size != seg.size:
            raise StorageError(
                f"{store.location}: segment {seg.key} holds {info.size} bytes, the manifest says {seg.size}"
            )


def read_segments(store: ObjectStore, pieces: Sequence[WrittenSegment]) -> Iterator[bytes]:
    """The stream's bytes, segment after segment: every segment is checked present with its size
    before the first byte, and each one's sha256 as it ends, so a missing or altered segment is
    refused by its key (the caller still checks the whole stream's sha256)."""
    check_segments_present(store, pieces)
    for seg in pieces:
        digest, size = hashlib.sha256(), 0
        for chunk in store.read_chunks(seg.key):
            digest.update(chunk)
            size += len(chunk)
            yield chunk
        if size != seg.size or digest.hexdigest() != seg.sha256:
            raise StorageError(
                f"{store.location}: segment {seg.key} read {size} bytes with sha256 {digest.hexdigest()}, "
                f"the manifest says {seg.size} bytes, {seg.sha256}: it was altered or damaged"
            )


def one_object(store: ObjectStore, writer: ObjectWriter, key: str) -> None:
    """After `writer.commit()`, where the caller records one object: refuse (and remove) a stream
    the store had to split into segments, instead of recording its first segment alone."""
    if not writer.segments:
        return
    keys = [s.key for s in writer.segments]
    with contextlib.suppress(StorageError):
        store.delete(keys)
    raise StorageError(
        f"{store.location}/{key} was stored as {len(keys)} segments, but what it holds is recorded "
        "as one object: raise the store's upload memory (part size) limits; the segments were removed"
    )
