"""The processes of a stream: each one's stderr kept in a temp file (a full pipe never blocks
it), exit statuses checked, and the threads that move bytes between them.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

from ..common import children

CHUNK = 1024 * 1024
EOF = object()
ProgressFn = Callable[[int], None]


class PipelineError(RuntimeError):
    """A stage of the stream failed; the message names the stage, its exit status and stderr."""

    object_key = ""  # the stored object it failed on, when the raiser knows (a backup has several)


class ChecksumMismatch(PipelineError):
    """Every stage succeeded, but the stored bytes' sha256 is not the one the manifest records."""


class Proc:
    """A pipeline process whose stderr goes to a temp file, so a full pipe never blocks it."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        stdin: Any = None,
        stdout: Any = subprocess.PIPE,
        pass_fds: tuple[int, ...] = (),
        extra_env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.name = name
        self.stderr = tempfile.TemporaryFile()
        try:
            self.popen = children.popen(
                argv,
                stdin=stdin,
                stdout=stdout,
                stderr=self.stderr,
                pass_fds=pass_fds,
                extra_env=extra_env,
                cwd=cwd,
            )
        except FileNotFoundError as exc:
            self.stderr.close()
            raise PipelineError(
                f"{name}: executable {argv[0]!r} not found; install it on this worker"
            ) from exc

    def stderr_tail(self, limit: int = 1500) -> str:
        """The raw end of its stderr (at most `limit` bytes, from a line start)."""
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - limit - 1))
        return children.tail_text(self.stderr.read(), limit).strip()

    def stderr_summary(self) -> str:
        """What its stderr says, as one line: the tool's own error lines first."""
        return children.summarize_stderr(self.stderr_tail(children.TAIL_BYTES))

    def broken_pipe(self) -> bool:
        """Did it fail only because the stage after it stopped reading (SIGPIPE or EPIPE)?"""
        rc = self.popen.returncode
        return rc == -signal.SIGPIPE or (rc != 0 and "broken pipe" in self.stderr_tail(300).lower())

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()

    def wait(self) -> int:
        return self.popen.wait()

    def check(self) -> None:
        rc = self.wait()
        if rc != 0:
            how = children.how_ended(rc)
            raise PipelineError(f"{self.name} failed ({how}): {self.stderr_summary() or '(no stderr)'}")

    def close(self) -> None:
        self.kill()
        self.wait()
        self.stderr.close()


class Worker(threading.Thread):
    """A thread that records its exception instead of losing it."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        super().__init__(name=name, daemon=True)
        self._fn = target
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            self.error = exc


def read_chunks(fh: IO[bytes]) -> Iterable[bytes]:
    fd = fh.fileno()
    while chunk := os.read(fd, CHUNK):
        yield chunk


class Handoff:
    """Where a worker thread sends its bytes: into the stdin of the next stage (gpg) when there is
    one, else into a bounded queue that the calling thread drains. `close()` ends the stream."""

    def __init__(self, stage: Proc | None) -> None:
        self.pipe = stage.popen.stdin if stage is not None else None
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=8)

    def put(self, data: bytes) -> None:
        if self.pipe is not None:
            self.pipe.write(data)
        else:
            self.queue.put(data)

    def close(self) -> None:
        if self.pipe is not None:
            close_quietly(self.pipe)
        else:
            self.queue.put(EOF)


def release_worker(worker: Worker | None, handoff: queue.Queue[Any], timeout: float = 30) -> None:
    """After a failure, drain the hand-off queue so a worker blocked on it can finish and exit."""
    if worker is None:
        return
    deadline = time.monotonic() + timeout
    while worker.is_alive() and time.monotonic() < deadline:
        try:
            handoff.get(timeout=0.05)
        except queue.Empty:
            pass
    worker.join(timeout=1)


def close_quietly(fh: IO[bytes]) -> None:
    try:
        fh.close()
    except BrokenPipeError:
        pass
