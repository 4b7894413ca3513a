"""One-pass backup stream: producer -> zstd -> gpg -> object writer.

Nothing is staged on disk. Chunks are bounded (1 MiB) and so are the queues between threads,
so memory stays flat whatever the database size. Every process's exit status is checked; a
failure carries the tail of that process's stderr and the sink is aborted, never committed.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..storage.base import ObjectWriter
from .process import (
    EOF,
    Handoff,
    PipelineError,
    Proc,
    ProgressFn,
    Worker,
    read_chunks,
    release_worker,
)


@dataclass(frozen=True)
class StreamResult:
    raw_bytes: int  # what the producer emitted
    stored_bytes: int  # what reached the sink
    sha256: str  # of the stored bytes
    seconds: float


def stream_to_store(
    producer_argv: list[str],
    sink: ObjectWriter,
    *,
    encrypt_argv: list[str] | None,
    level: int = 3,
    threads: int = 0,
    producer_env: dict[str, str] | None = None,  # variables the producer needs besides child_env()
    producer_name: str = "backup tool",
    progress: ProgressFn | None = None,
    producer_watch: Callable[[Proc], None] | None = None,
    compress_setup: Callable[[], None] | None = None,
) -> StreamResult:
    """Run producer | zstd | gpg and write the result to `sink`; commit only if every stage succeeded.

    `producer_watch` is called with the producer's Proc once it runs (to follow its log);
    `compress_setup` first thing in the zstd stage's thread (before the compressor starts its own)."""
    import zstandard

    started = time.monotonic()
    procs: list[Proc] = []
    raw = {"bytes": 0}
    digest = hashlib.sha256()
    stored = 0
    worker: Worker | None = None
    handoff = Handoff(None)
    try:
        producer = Proc(producer_name, producer_argv, stdin=subprocess.DEVNULL, extra_env=producer_env)
        procs.append(producer)
        if producer_watch:
            producer_watch(producer)
        gpg = Proc("gpg --encrypt", encrypt_argv, stdin=subprocess.PIPE) if encrypt_argv else None
        if gpg:
            procs.append(gpg)
        handoff = Handoff(gpg)
        compressor = zstandard.ZstdCompressor(level=level, threads=threads if threads else -1)

        def compress() -> None:
            if compress_setup:
                compress_setup()
            cobj = compressor.compressobj(size=-1)
            try:
                assert producer.popen.stdout is not None
                for chunk in read_chunks(producer.popen.stdout):
                    raw["bytes"] += len(chunk)
                    if out := cobj.compress(chunk):
                        handoff.put(out)
                handoff.put(cobj.flush())
            finally:
                handoff.close()

        worker = Worker("zstd", compress)
        worker.start()
        source = read_chunks(gpg.popen.stdout) if gpg and gpg.popen.stdout else iter(handoff.queue.get, EOF)
        for chunk in source:
            digest.update(chunk)
            sink.write(chunk)
            stored += len(chunk)
            if progress:
                progress(raw["bytes"])
        worker.join()
        if worker.error:
            # The compressor stopped reading: a dead gpg is the usual cause and the real story.
            producer.kill()
            if gpg:
                gpg.check()
            raise PipelineError(f"zstd stage failed: {worker.error!r}") from worker.error
        for proc in procs:
            proc.check()
        sink.commit()
    except BaseException:
        for proc in procs:
            proc.kill()
        release_worker(worker, handoff.queue)
        sink.abort()
        raise
    finally:
        for proc in procs:
            proc.close()
    return StreamResult(raw["bytes"], stored, digest.hexdigest(), time.monotonic() - started)
