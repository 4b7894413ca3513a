"""The restore stream: stored bytes -> gpg --decrypt -> zstd -d -> extractor, sha256 checked.

With the zstd executable installed the stages are joined by OS pipes: Python only hashes the
stored bytes and writes them into the first stage, so several objects streaming at once do not
queue behind one interpreter for every decompressed byte. Without it, python-zstandard
decompresses in this process.
"""

from __future__ import annotations

import fcntl
import hashlib
import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from .process import (
    CHUNK,
    EOF,
    ChecksumMismatch,
    Handoff,
    PipelineError,
    Proc,
    ProgressFn,
    Worker,
    close_quietly,
    release_worker,
)

ZSTD = "zstd"
# `zstd -d -v` ends with "<source> : <n> bytes" once the whole stream is decompressed.
_ZSTD_SIZE = re.compile(r":\s*(\d+) bytes\s*$", re.MULTILINE)
PIPE_BYTES = 1024 * 1024  # pipe buffer between the stages (Linux default 64 KiB; capped by pipe-max-size)


class Cancelled(PipelineError):
    """A stream stopped because another stream of the same restore failed (that one is the story)."""


def cancellable(chunks: Iterable[bytes], *events: threading.Event | None) -> Iterator[bytes]:
    """`chunks`, stopping with Cancelled at the next chunk once any of `events` is set: streams that
    run side by side (the parts of one backup, the backups of a chain) stop when one of them fails."""
    watched = [e for e in events if e is not None]
    for chunk in chunks:
        if any(e.is_set() for e in watched):
            raise Cancelled("stopped: another stream of this restore failed")
        yield chunk


@dataclass(frozen=True)
class RestoreStreamResult:
    stored_bytes: int
    sha256: str
    raw_bytes: int
    seconds: float


@dataclass(frozen=True)
class _Decode:
    """What both decoders need besides the bytes: see stream_from_store."""

    decrypt_argv: list[str] | None
    pass_fds: tuple[int, ...]
    expected_sha256: str | None
    object_name: str
    consumer_name: str
    progress: ProgressFn | None
    quiet_consumer: bool = False


def stream_from_store(
    chunks: Iterable[bytes],
    consumer_argv: list[str],
    *,
    decrypt_argv: list[str] | None,
    pass_fds: tuple[int, ...] = (),
    expected_sha256: str | None = None,
    object_name: str = "object",
    consumer_name: str = "extractor",
    progress: ProgressFn | None = None,
    zstd_cli: bool | None = None,
    quiet_consumer: bool = False,
) -> RestoreStreamResult:
    """Feed stored bytes through gpg -d | zstd -d | consumer; check sha256 and every exit status.

    `quiet_consumer`: the consumer prints nothing when all is well, so a line on its stderr fails
    the stream even with exit status 0 (mbstream -x skips a file whose path would escape the
    target, says "invalid filename", stops extracting and exits 0).

    With the `zstd` executable on PATH (or `zstd_cli=True`), gpg, `zstd -d` and the consumer are
    joined by OS pipes and this process only hashes the stored bytes and writes them into the first
    stage: no decrypted or decompressed byte passes through Python. Without it (`zstd_cli=False`, or
    no `zstd` installed) python-zstandard decompresses in this process.

    `progress` gets the stored bytes read so far, after each chunk (it throttles itself)."""
    zstd = shutil.which(ZSTD) if zstd_cli is not False else None
    if zstd_cli and zstd is None:
        raise PipelineError(
            f"zstd -d of {object_name}: executable {ZSTD!r} not found; install it on this worker"
        )
    d = _Decode(decrypt_argv, pass_fds, expected_sha256, object_name, consumer_name, progress, quiet_consumer)
    if zstd is not None:
        return _stream_through_processes(chunks, consumer_argv, zstd, d)
    return _stream_in_process(chunks, consumer_argv, d)


def _widen(fh: IO[bytes] | None) -> None:
    """A larger pipe buffer: fewer wake-ups of each stage per MiB (Linux only, best effort)."""
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if fh is None or setpipe is None:
        return
    try:
        fcntl.fcntl(fh.fileno(), setpipe, PIPE_BYTES)
    except OSError:
        pass  # above /proc/sys/fs/pipe-max-size for an unprivileged user: keep the default


def _stream_through_processes(
    chunks: Iterable[bytes],
    consumer_argv: list[str],
    zstd: str,
    d: _Decode,
) -> RestoreStreamResult:
    """gpg -d | zstd -d | consumer joined by OS pipes; Python hashes and feeds the stored bytes."""
    started = time.monotonic()
    stages: list[Proc] = []  # upstream first
    digest = hashlib.sha256()
    stored = 0
    stopped_early = False
    try:
        gpg = _gpg_stage(d.decrypt_argv, d.pass_fds, d.object_name)
        if gpg:
            stages.append(gpg)
            _widen(gpg.popen.stdout)
        zstd_in: Any = gpg.popen.stdout if gpg else subprocess.PIPE
        unzstd = Proc(f"zstd -d of {d.object_name}", [zstd, "-d", "-v", "--no-progress", "-c"], stdin=zstd_in)
        stages.append(unzstd)
        if gpg and gpg.popen.stdout:
            gpg.popen.stdout.close()  # zstd holds the read end now: gpg sees EPIPE if zstd dies
        _widen(unzstd.popen.stdout)
        consumer = Proc(d.consumer_name, consumer_argv, stdin=unzstd.popen.stdout, stdout=subprocess.DEVNULL)
        stages.append(consumer)
        assert unzstd.popen.stdout is not None
        unzstd.popen.stdout.close()
        head = stages[0].popen.stdin
        assert head is not None
        _widen(head)
        try:
            for chunk in chunks:
                digest.update(chunk)
                stored += len(chunk)
                try:
                    head.write(chunk)
                except BrokenPipeError:
                    stopped_early = True  # a stage died; its exit status below says which and why
                    break
                if d.progress:
                    d.progress(stored)
        finally:
            close_quietly(head)
        for proc in stages:
            proc.wait()
        _check_stages(stages, unzstd, d.object_name, d.consumer_name)
        _check_quiet(consumer, d)
        if stopped_early:
            raise PipelineError(f"{stages[0].name} exited before reading the whole of {d.object_name}")
        _check_sha256(digest, d.expected_sha256, d.object_name)
        sizes = _ZSTD_SIZE.findall(unzstd.stderr_tail(4096))
        raw = int(sizes[-1]) if sizes else -1
    except BaseException:
        for proc in stages:
            proc.kill()
        raise
    finally:
        for proc in stages:
            proc.close()
    return RestoreStreamResult(stored, digest.hexdigest(), raw, time.monotonic() - started)


def _gpg_stage(decrypt_argv: list[str] | None, pass_fds: tuple[int, ...], object_name: str) -> Proc | None:
    # Named after the object: several objects are decrypted at once in a chain restore, and gpg's
    # own integrity errors ("message has been manipulated") must say which one failed.
    if not decrypt_argv:
        return None
    return Proc(f"gpg --decrypt of {object_name}", decrypt_argv, stdin=subprocess.PIPE, pass_fds=pass_fds)


def _check_sha256(digest: Any, expected: str | None, object_name: str) -> None:
    """Called once every stage succeeded: the bytes decrypt, decompress and extract cleanly, so a
    different sha256 says the manifest and the object disagree, not which of them changed."""
    if expected and digest.hexdigest() != expected:
        raise ChecksumMismatch(
            f"{object_name}: sha256 {digest.hexdigest()} differs from the manifest's {expected}, although "
            "the object decrypts, decompresses and extracts cleanly: the manifest and the object disagree "
            "(was the manifest edited?)"
        )


def _check_quiet(consumer: Proc, d: _Decode) -> None:
    if d.quiet_consumer and (said := consumer.stderr_summary()):
        raise PipelineError(
            f"{d.consumer_name} exited 0 but reported a problem with {d.object_name}: {said}; "
            "what it extracted is not the whole backup"
        )


def _damaged(object_name: str, detail: str) -> PipelineError:
    return PipelineError(f"{object_name}: zstd could not decompress it ({detail}); the object is damaged")


def _check_stages(stages: list[Proc], unzstd: Proc, object_name: str, consumer_name: str) -> None:
    """Raise for the stage that caused a failure. A stage that died of a broken pipe is a victim of
    one further down; of the others, the first upstream is the cause (the rest got its bad output)."""
    failed = [p for p in stages if p.popen.returncode != 0]
    if not failed:
        return
    causes = [p for p in failed if not p.broken_pipe()]
    if not causes:  # the consumer left early and said why (mbstream: "invalid filename ../x", exit 0)
        said = stages[-1].stderr_summary()
        raise PipelineError(
            f"{consumer_name} exited before reading the whole of {object_name}"
            + (f": {said}" if said else "")
        )
    cause = causes[0]
    if cause is unzstd:
        raise _damaged(object_name, cause.stderr_summary() or "no stderr")
    cause.check()


def _stream_in_process(
    chunks: Iterable[bytes],
    consumer_argv: list[str],
    d: _Decode,
) -> RestoreStreamResult:
    """gpg -d | python-zstandard | consumer, for workers without the zstd executable."""
    import zstandard

    started = time.monotonic()
    procs: list[Proc] = []
    digest = hashlib.sha256()
    counts = {"stored": 0, "raw": 0}
    feeder: Worker | None = None
    handoff = Handoff(None)
    try:
        gpg = _gpg_stage(d.decrypt_argv, d.pass_fds, d.object_name)
        consumer = Proc(d.consumer_name, consumer_argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        procs = [p for p in (gpg, consumer) if p]
        handoff = Handoff(gpg)

        def feed() -> None:
            try:
                for chunk in chunks:
                    digest.update(chunk)
                    counts["stored"] += len(chunk)
                    handoff.put(chunk)
                    if d.progress:
                        d.progress(counts["stored"])
            finally:
                handoff.close()

        feeder = Worker("feed", feed)
        feeder.start()
        plain: Any = gpg.popen.stdout if gpg else _QueueReader(handoff.queue)
        assert consumer.popen.stdin is not None
        dctx = zstandard.ZstdDecompressor()
        try:
            with dctx.stream_reader(plain, read_size=CHUNK, read_across_frames=True, closefd=False) as reader:
                while block := reader.read(CHUNK):
                    counts["raw"] += len(block)
                    consumer.popen.stdin.write(block)
        except zstandard.ZstdError as exc:
            raise _damaged(d.object_name, str(exc)) from exc
        except BrokenPipeError:
            consumer.check()  # the extractor died: its own error says why (disk full, bad stream)
            raise PipelineError(
                f"{d.consumer_name} exited before reading the whole of {d.object_name}"
            ) from None
        finally:
            close_quietly(consumer.popen.stdin)
        feeder.join()
        if feeder.error and not isinstance(feeder.error, BrokenPipeError):
            raise feeder.error  # a download failed: that is the cause, not gpg's truncated input
        for proc in procs:
            proc.check()
        _check_quiet(consumer, d)
        _check_sha256(digest, d.expected_sha256, d.object_name)
    except BaseException:
        for proc in procs:
            proc.kill()
        release_worker(feeder, handoff.queue)
        raise
    finally:
        for proc in procs:
            proc.close()
    return RestoreStreamResult(
        counts["stored"], digest.hexdigest(), counts["raw"], time.monotonic() - started
    )


class _QueueReader:
    """File-like read() over a queue of chunks (used when there is no gpg stage)."""

    def __init__(self, q: queue.Queue[Any]) -> None:
        self.q = q
        self.buf = b""
        self.done = False

    def read(self, size: int = -1) -> bytes:
        while not self.done and (size < 0 or len(self.buf) < size):
            item = self.q.get()
            if item is EOF:
                self.done = True
            else:
                self.buf += item
        if size < 0:
            out, self.buf = self.buf, b""
        else:
            out, self.buf = self.buf[:size], self.buf[size:]
        return out
