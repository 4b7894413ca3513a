"""Continuous binlog shipping: follow the server live for a bounded time (an RPO of seconds).

One run first ships every closed binlog (as a batch run does, gaps included), then follows the
open binlog with `mariadb-binlog --read-from-remote-server --raw --stop-never`, which writes
each event to a local copy as the server sends it. A poll loop watches that directory:

- a copy with a later copy beside it is closed: it is shipped in full and its segments dropped;
- the newest copy is the open binlog: every `progress_interval` seconds the bytes it gained
  are stored as one more segment and its partial manifest rewritten.

The run ends after `duration` seconds (a DAG schedules the next one: e.g. 55 minutes, hourly).
The next run resumes where this one stopped: it adopts the open binlog's stored segments after
checking them against the fresh copy, and only stores what is new.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import threading
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

from ..common import children
from ..common.files import sha256_range
from ..common.values import binlog_number
from ..db.server import defaults_file
from .catalog import BinlogError, BinlogManifest
from .events import BinlogSummary, summarize
from .ship import (
    BinlogShipper,
    ShipReport,
    ShipRequest,
    check_same_file,
    download_argv,
    master_position,
    server_binlogs,
)

log = logging.getLogger(__name__)

_REPLICA_ID_BASE = 4_000_000_000


def default_replica_server_id(cluster: str, host: str) -> int:
    """A stable replication client id per host, far above the ids real servers use.

    Two replication clients with one server_id make the server drop the older connection,
    so the follower must never share a real replica's id.
    """
    return _REPLICA_ID_BASE + zlib.crc32(f"{cluster}/{host}".encode()) % 200_000_000


class _Follower:
    """The local copies written by one `--stop-never` process, and what of them is stored."""

    def __init__(self, shipper: BinlogShipper, directory: Path, progress_interval: float) -> None:
        self.shipper = shipper
        self.dir = directory
        self.interval = progress_interval
        self.current: str | None = None
        self.summary = BinlogSummary()
        self.partial: BinlogManifest | None = None
        self.pending: BinlogManifest | None = None  # a stored partial not yet checked against the copy
        self.last_upload = 0.0

    def copies(self) -> list[Path]:
        files = [p for p in self.dir.iterdir() if p.is_file()]
        return sorted(files, key=lambda p: binlog_number(p.name))

    def sweep(self, final: bool = False) -> None:
        files = self.copies()
        for path in files[:-1]:
            self.finish(path)
        if files:
            self.progress(files[-1], force=final)

    def finish(self, path: Path) -> None:
        summary = summarize(path, self.summary if path.name == self.current else None)
        if not summary.closed:
            # Only a server crash leaves a binlog without rotate/stop; the next batch run checks it
            # against the server's own size instead.
            log.warning("%s has a successor but no rotate event; leaving it to the next run", path.name)
            return
        known = self.partial if path.name == self.current else self.shipper.index().partial.get(path.name)
        if known is not None and known is not self.partial:
            check_same_file(self.shipper.where, known, summary)  # stored by an earlier run: not adopted
        self.shipper.ship_complete(path, path.name, summary, known)
        path.unlink()
        if path.name == self.current:
            self.current, self.partial, self.pending = None, None, None

    def progress(self, path: Path, *, force: bool) -> None:
        if path.name != self.current:
            self.current, self.summary, self.partial = path.name, BinlogSummary(), None
            self.pending = self.shipper.index().partial.get(path.name)
        now = time.monotonic()
        if not force and now - self.last_upload < self.interval:
            return
        # The server's position first, then the copy: if the copy holds that position, every
        # event written before `seen` is in it.
        seen = datetime.now(UTC)
        file, position = master_position(self.shipper.db, self.shipper.dialect)
        self.summary = summarize(path, self.summary)
        if self.pending is not None and not self.adopt(path):
            return
        stored = self.partial.size if self.partial else 0
        covers = seen if (file == path.name and self.summary.size >= position) else None
        if self.summary.size > stored or (self.partial is not None and covers is not None):
            covers = covers or (self.partial.covers_until if self.partial else None)
            self.partial = self.shipper.ship_progress(path, path.name, self.summary, self.partial, covers)
        self.last_upload = now

    def adopt(self, path: Path) -> bool:
        """Continue a partial stored by an earlier run once the copy is long enough to check it."""
        pending = self.pending
        assert pending is not None
        check_same_file(self.shipper.where, pending, self.summary)  # never store another history over it
        if self.summary.size < pending.size:
            return False  # the fresh copy has not caught up with what is stored yet
        same = all(sha256_range(path, s.offset, s.raw_size) == s.raw_sha256 for s in pending.segments)
        if same:
            self.partial = pending
        else:
            log.warning("stored segments of %s differ from the server's copy; storing it afresh", path.name)
            self.shipper.bcat.drop_partial(pending)
        self.pending = None
        return True


def ship_continuous(
    req: ShipRequest,
    duration: float,
    progress_interval: float = 10.0,
    *,
    stop: threading.Event | None = None,
    poll_interval: float = 0.1,
) -> ShipReport:
    """Ship closed binlogs, then follow the server for `duration` seconds; resumable. The duration
    counts from the start of the following: taking the shipping lock and the closed binlogs first
    do not shorten it."""
    stop = stop or threading.Event()
    with BinlogShipper(req) as shipper:
        shipper.run_batch()
        index = shipper.index()
        logs = [name for name, _ in server_binlogs(shipper.db)]
        first = next(
            (n for n in logs if n not in index.complete and n not in shipper.report.not_ours), logs[-1]
        )
        directory = Path(tempfile.mkdtemp(prefix="stream-", dir=shipper.scratch))
        follower = _Follower(shipper, directory, progress_interval)
        replica_id = req.replica_server_id or default_replica_server_id(req.catalog.cluster, req.catalog.host)
        with defaults_file(req.target, shipper.client) as creds, tempfile.TemporaryFile() as stderr:
            argv = download_argv(
                shipper.binary,
                creds,
                directory,
                first,
                stop_never=True,
                replica_server_id=replica_id,
                id_option=shipper.dialect.binlog_follow_id_option,
            )
            log.info("following %s from %s for %.0fs", shipper.where, first, duration)
            proc = children.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
            deadline = time.monotonic() + duration
            try:
                _follow(follower, proc, deadline, stop, poll_interval)
            finally:
                died = proc.poll()
                _terminate(proc)
            follower.sweep(final=True)
            if died is not None:
                stderr.seek(0)
                tail = children.summarize_stderr(stderr.read())
                raise BinlogError(
                    f"{shipper.binary} stopped following {shipper.where} ({children.how_ended(died)}): "
                    f"{tail or '(no stderr)'}; "
                    "what it received was shipped, and the next run resumes from there"
                )
        shipper.report.open_binlog = follower.current
        return shipper.report


def _follow(
    follower: _Follower, proc: subprocess.Popen[bytes], deadline: float, stop: threading.Event, poll: float
) -> None:
    while proc.poll() is None and not stop.is_set() and time.monotonic() < deadline:
        follower.sweep()
        stop.wait(min(poll, max(0.0, deadline - time.monotonic())))


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
