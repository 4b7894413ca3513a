"""A K-part backup stream: producer -> split by file -> K x (zstd -> gpg -> object writer), plus
the tail (core/pipeline/split.py says what goes where).

One gpg process is single-threaded (about 265 MB/s here): K parts give K of them, and a restore
then runs K extractions at once. This thread reads the producer and splits; each part has a
compressor thread (python-zstandard releases the GIL), its own gpg and a thread that hashes and
stores what gpg writes. Queues are bounded, so memory is K x a few MiB whatever the size.

All or nothing: the first part that fails stops the others (the splitting thread and the waits
watch one shared event; every part's upload is then aborted), and the parts are committed only
when every stage of every part succeeded. A commit that fails after others succeeded hands the
committed ones to `discard`, which deletes them (or names what Object Lock keeps) before the
error is raised: no part of a failed backup is left as an object. K=1 is core/pipeline/to_store.py.
"""

from __future__ import annotations

import hashlib
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..common.crashpoints import crash_point
from ..engine.xbstream import StreamFlavour
from ..storage.base import ObjectWriter
from .process import EOF, Handoff, PipelineError, Proc, ProgressFn, Worker, read_chunks
from .split import PartPlan, Splitter
from .to_store import StreamResult

INBOX = 16  # pieces (at most 1 MiB each) waiting for a part's compressor


@dataclass(frozen=True)
class PartsResult:
    parts: list[StreamResult]  # the data parts, in order
    tail: StreamResult
    seconds: float


class _Part:
    """One part's zstd -> gpg -> writer, fed with `put` from the splitting thread."""

    def __init__(
        self,
        name: str,
        sink: ObjectWriter,
        encrypt_argv: list[str] | None,
        compressor: Any,
        failed: threading.Event,
        setup: Callable[[], None] | None = None,
    ) -> None:
        # `compressor` is this part's own: a ZstdCompressor's context is not shared between threads.
        self.name, self.sink, self.failed = name, sink, failed
        self.inbox: queue.Queue[Any] = queue.Queue(maxsize=INBOX)
        self.raw = self.stored = 0
        self.digest = hashlib.sha256()
        self.started = time.monotonic()
        self.gpg = (
            Proc(f"gpg --encrypt of {name}", encrypt_argv, stdin=subprocess.PIPE) if encrypt_argv else None
        )
        self.handoff = Handoff(self.gpg)
        self.setup = setup
        self.context = compressor
        self.failure: PipelineError | None = None  # the first of its threads' failures
        self.compressor = Worker(f"zstd {name}", self._signalling(f"zstd {name}", self._compress))
        self.store = Worker(f"store {name}", self._signalling(f"store {name}", self._store))
        self.compressor.start()
        self.store.start()

    def _signalling(self, name: str, fn: Callable[[], None]) -> Callable[[], None]:
        """`fn`, recording its failure and telling every sibling through the shared event."""

        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                self.failure = self.failure or PipelineError(f"{name} failed: {exc!r}")
                self.failure.__cause__ = self.failure.__cause__ or exc
                self.failed.set()
                raise

        return run

    def put(self, data: bytes | memoryview) -> None:
        self.raw += len(data)
        self._send(data)

    def _send(self, item: Any) -> None:
        while True:
            try:
                self.inbox.put(item, timeout=0.2)
                return
            except queue.Full:
                for worker in (self.compressor, self.store):
                    if not worker.is_alive():
                        if self.gpg and self.gpg.popen.poll() not in (None, 0):
                            self.gpg.check()  # a dead gpg is the usual cause and the real story
                        raise PipelineError(f"{worker.name} stopped: {worker.error!r}") from worker.error

    def close(self) -> None:
        self._send(EOF)

    def _compress(self) -> None:
        if self.setup:
            self.setup()  # first thing in this thread: the compressor's own workers inherit it
        cobj = self.context.compressobj(size=-1)
        try:
            while (item := self.inbox.get()) is not EOF:
                if out := cobj.compress(item):
                    self.handoff.put(out)
            self.handoff.put(cobj.flush())
        finally:
            self.handoff.close()

    def _store(self) -> None:
        gpg_out = self.gpg.popen.stdout if self.gpg else None
        source = read_chunks(gpg_out) if gpg_out else iter(self.handoff.queue.get, EOF)
        for chunk in source:
            self.digest.update(chunk)
            self.sink.write(chunk)
            self.stored += len(chunk)

    @property
    def running(self) -> bool:
        return self.compressor.is_alive() or self.store.is_alive()

    def join(self) -> None:
        """Wait for both threads; raise the first failure, gpg's own when gpg is the cause."""
        self.compressor.join()
        self.store.join()
        self.raise_failure()

    def raise_failure(self) -> None:
        for worker in (self.compressor, self.store):
            if worker.error:
                if self.gpg:
                    self.gpg.check()
                raise PipelineError(f"{worker.name} failed: {worker.error!r}") from worker.error
        if self.gpg:
            self.gpg.check()

    def result(self) -> StreamResult:
        return StreamResult(self.raw, self.stored, self.digest.hexdigest(), time.monotonic() - self.started)

    def release(self, timeout: float = 30) -> None:
        """After a failure: let both threads end. A compressor may wait on its inbox or on the
        hand-off to a store thread that died; the store thread on a hand-off nobody fills."""
        if self.gpg:
            self.gpg.kill()  # its reader and writer threads then see EOF / EPIPE
        deadline = time.monotonic() + timeout
        while (self.compressor.is_alive() or self.store.is_alive()) and time.monotonic() < deadline:
            if self.compressor.is_alive():
                _drop_one(self.handoff.queue)
                try:
                    self.inbox.put_nowait(EOF)
                except queue.Full:
                    _drop_one(self.inbox)
            else:
                try:
                    self.handoff.queue.put_nowait(EOF)
                except queue.Full:
                    _drop_one(self.handoff.queue)
            time.sleep(0.01)


def _first_failure(parts: list[_Part]) -> None:
    """Raise the failure of the part that failed (the shared event is set): gpg's own when gpg
    exited with an error (the usual cause and the real story), else the thread's."""
    failing = next(p for p in parts if p.failure is not None)
    if failing.gpg and failing.gpg.popen.poll() not in (None, 0):
        failing.gpg.check()
    assert failing.failure is not None
    raise failing.failure


def _join_all(parts: list[_Part], failed: threading.Event) -> None:
    """Wait for every part; the first that fails ends the wait for the others (they are aborted)."""
    while any(p.running for p in parts):
        if failed.wait(0.05):
            _first_failure(parts)
    for part in parts:
        part.join()


def _commit_all(parts: list[_Part], discard: Callable[[list[int]], list[str]] | None) -> None:
    """Commit every part in order; if one fails, the committed ones are discarded and named."""
    committed: list[int] = []
    for i, part in enumerate(parts):
        try:
            part.sink.commit()
            crash_point("parts.between_commits")
        except BaseException as exc:
            if not committed:
                raise
            raise PipelineError(
                f"{part.name} could not be committed ({exc}); {_discarded(parts, committed, discard)}"
            ) from exc
        committed.append(i)


def _discarded(
    parts: list[_Part], committed: list[int], discard: Callable[[list[int]], list[str]] | None
) -> str:
    names = ", ".join(parts[i].name for i in committed)
    if discard is None:
        return f"{names} were committed already and stay until retention removes them"
    try:
        kept = discard(committed)
    except Exception as exc:  # noqa: BLE001 - the commit failure is the story; say what is left
        return (
            f"{names} were committed already and could not be removed ({exc}): no manifest names them, "
            "retention removes them after its grace period"
        )
    if kept:
        return (
            f"of the parts committed already ({names}), Object Lock keeps {', '.join(kept)} until its "
            "retention ends (no manifest names them; the rest was removed)"
        )
    return f"the parts committed already ({names}) were removed; nothing was registered"


def _drop_one(q: queue.Queue[Any]) -> None:
    try:
        q.get_nowait()
    except queue.Empty:
        pass


def stream_to_parts(
    producer_argv: list[str],
    sinks: list[ObjectWriter],
    tail_sink: ObjectWriter,
    *,
    encrypt_argv: list[str] | None,
    flavour: StreamFlavour,
    plan: PartPlan | None = None,
    level: int = 3,
    threads: int = 1,  # zstd worker threads per data part
    producer_env: dict[str, str] | None = None,
    producer_name: str = "backup tool",
    progress: ProgressFn | None = None,
    producer_watch: Callable[[Proc], None] | None = None,
    compress_setup: Callable[[], None] | None = None,
    discard: Callable[[list[int]], list[str]] | None = None,
) -> PartsResult:
    """Run the producer, split its stream into len(sinks) parts and a tail, and store each part as
    its own zstd + gpg object; commit all of them only if everything succeeded.

    `producer_watch` and `compress_setup` are stream_to_store's (the latter runs first in each
    part's compressor thread). `discard(indices)` deletes committed streams (the tail is index
    len(sinks)) after a later commit failed, and returns what Object Lock keeps."""
    import zstandard

    if len(sinks) < 2:
        raise ValueError("a K-part stream needs at least 2 parts; one part is stream_to_store")
    started = time.monotonic()
    producer: Proc | None = None
    parts: list[_Part] = []
    failed = threading.Event()
    try:
        producer = Proc(producer_name, producer_argv, stdin=subprocess.DEVNULL, extra_env=producer_env)
        if producer_watch:
            producer_watch(producer)
        for i, sink in enumerate(sinks):
            compressor = zstandard.ZstdCompressor(level=level, threads=max(1, threads))
            parts.append(
                _Part(f"part {i} of {len(sinks)}", sink, encrypt_argv, compressor, failed, compress_setup)
            )
        tail = zstandard.ZstdCompressor(level=level)
        parts.append(_Part("the tail", tail_sink, encrypt_argv, tail, failed, compress_setup))
        splitter = Splitter([p.put for p in parts[:-1]], parts[-1].put, flavour, plan)
        raw = 0
        assert producer.popen.stdout is not None
        for chunk in read_chunks(producer.popen.stdout):
            if failed.is_set():
                _first_failure(parts)  # a part failed: stop reading the tool, abort the others
            raw += len(chunk)
            splitter.feed(chunk)
            if progress:
                progress(raw)
        producer.check()  # before the split's own verdict: a tool that died cut the stream short
        splitter.finish()
        for part in parts:
            part.close()
        _join_all(parts, failed)
        _commit_all(parts, discard)
    except BaseException:
        if producer:
            producer.kill()
        for part in parts:
            part.release()
        for part in parts:
            part.sink.abort()
        if len(parts) < len(sinks) + 1:
            for sink in [*sinks, tail_sink][len(parts) :]:
                sink.abort()
        raise
    finally:
        if producer:
            producer.close()
        for part in parts:
            if part.gpg:
                part.gpg.close()
    results = [p.result() for p in parts]
    return PartsResult(results[:-1], results[-1], time.monotonic() - started)
