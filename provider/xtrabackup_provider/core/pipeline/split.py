"""Split one xbstream into K xbstreams, by file, in one pass: how a K-part backup is cut.

Each data part is a valid xbstream that `mbstream -x` extracts on its own, and the K parts are
extracted at once into the same directory, so a file's chunks all go to one part: mbstream creates
a file with O_EXCL, so a second part writing the same file fails ("File exists") and exits 0 with
the data missing. A path's part is fixed at its first chunk: the plan's (largest files first, from
the datadir's sizes, `plan_parts`), else the part that has had the fewest bytes so far; the tool's
metadata files go to part 0, so part 0 alone holds xtrabackup_checkpoints.

MariaDB's rename ('R') and remove ('D') chunks (DDL during the backup) go to a tail stream, with
every later chunk of any path they name, old or new: applied inside a part they could race another
part (a rename onto a name another part still writes). The tail is extracted after the data parts,
so each path still sees its chunks in stream order, as with one stream. Payload bytes are passed on
as slices of the piece read; only a chunk header (at most about 1 KiB) is ever held back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.metadata import BINLOG_INFO_FILES, CHECKPOINT_FILES, INFO_FILES
from ..engine.xbstream import MAX_HEAD, SPARSE_HEADER, ChunkHead, StreamFlavour, XbstreamError, read_head

Sink = Callable[[bytes | memoryview], None]
# The tool's own files (read back from part 0): checkpoints, info, binlog position, its my.cnf.
METADATA = frozenset(
    {
        *CHECKPOINT_FILES,
        *INFO_FILES,
        *BINLOG_INFO_FILES,
        "backup-my.cnf",
        "xtrabackup_galera_info",
        "mariadb_backup_galera_info",
        "xtrabackup_slave_info",
        "mariadb_backup_slave_info",
    }
)
# In the datadir, but not streamed at that size (the redo log is preallocated; the stream holds the
# redo copied during the backup) or not streamed at all: left out of the plan.
UNPLANNED_PREFIXES = ("ib_logfile", "aria_log", "#", "ddl_recovery", "mysql-bin.", "relay-bin.", "ibtmp")
LONGEST_HEAD = MAX_HEAD + SPARSE_HEADER.size
# A part is worth adding while it lowers the largest part by more than this share.
WORTH_A_PART = 0.9


class SplitError(ValueError):
    """The stream cannot be split (it is not well-formed); the message names the chunk's offset."""


@dataclass(frozen=True)
class PartPlan:
    """Which data part each datadir file goes to, and the bytes each part is expected to get."""

    parts: int
    owner: dict[str, int]
    expected: list[int]

    @property
    def largest_share(self) -> float:
        total = sum(self.expected)
        return max(self.expected) / total if total else 1.0


def plan_parts(datadir: str | None, max_parts: int, *, incremental: bool = False) -> PartPlan:
    """Files largest first, each to the least loaded part (LPT), with as many parts (up to
    `max_parts`) as still lower the largest part: a file is never split, so one large table bounds
    the speed-up of every part-parallel stage. An incremental's stream carries `<file>.delta`,
    whose size is unknown: it is planned at the file's size (an upper bound)."""
    sizes: dict[str, int] = {}
    if datadir:
        for dirpath, _dirs, files in os.walk(datadir):
            rel = os.path.relpath(dirpath, datadir)
            for name in files:
                path = name if rel == "." else f"{rel}/{name}"
                if path in METADATA or name.startswith(UNPLANNED_PREFIXES):
                    continue
                try:
                    size = os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    continue
                sizes[path + ".delta" if incremental and name.endswith(".ibd") else path] = size
    order = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
    best = _lpt(order, 1)
    if not sum(best.expected):
        return best  # nothing to balance: one stream
    for k in range(2, max(1, max_parts) + 1):
        candidate = _lpt(order, k)
        if max(candidate.expected) > WORTH_A_PART * max(best.expected):
            break
        best = candidate
    return best


def _lpt(order: list[tuple[str, int]], k: int) -> PartPlan:
    loads = [0] * k
    owner: dict[str, int] = {}
    for path, size in order:
        part = min(range(k), key=loads.__getitem__)
        owner[path] = part
        loads[part] += size
    return PartPlan(k, owner, loads)


class Splitter:
    """Feed the stream in pieces of any size; `sinks[i]` gets part i's bytes, `tail` the tail's."""

    def __init__(self, sinks: list[Sink], tail: Sink, flavour: StreamFlavour, plan: PartPlan | None = None):
        self.sinks, self.tail, self.flavour = sinks, tail, flavour
        self.plan = plan.owner if plan and plan.parts == len(sinks) else {}
        self.routed = [0] * len(sinks)  # xbstream bytes per data part
        self.tail_bytes = 0
        self.owner: dict[str, int] = {}
        self.in_tail: set[str] = set()  # paths a rename or remove named
        self.pending = bytearray()  # the start of a header that straddles two pieces
        self.left = 0  # payload bytes of the current chunk still to pass on
        self.sink: Sink = tail
        self.offset = 0  # stream offset of the next header

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        at, end = 0, len(view)
        while at < end:
            if self.left:
                n = min(self.left, end - at)
                self.sink(view[at : at + n])
                self.left -= n
                at += n
                continue
            held = len(self.pending)
            self.pending += view[at : at + LONGEST_HEAD - held]
            try:
                head = read_head(self.pending, 0, self.flavour, self.offset)
            except XbstreamError as exc:
                raise SplitError(f"cannot split the backup stream: {exc}") from exc
            if head is None:  # the longest header fits in LONGEST_HEAD: the piece ended inside it
                assert len(self.pending) - held == end - at
                at = end
                continue
            self.sink = self._route(head)
            self.sink(bytes(self.pending[: head.head_len]))
            at += head.head_len - held
            self.pending.clear()
            self.left = head.body_len
            self.offset += head.head_len + head.body_len

    def finish(self) -> None:
        if self.pending or self.left:
            raise SplitError(f"the backup stream ends inside a chunk at offset {self.offset:#x}")

    def _route(self, head: ChunkHead) -> Sink:
        size = head.head_len + head.body_len
        if head.kind in ("R", "D") or head.path in self.in_tail:
            self.in_tail.add(head.path)
            if head.new_path is not None:
                self.in_tail.add(head.new_path)
            self.tail_bytes += size
            return self.tail
        part = self.owner.get(head.path)
        if part is None:
            part = self._assign(head.path)
            self.owner[head.path] = part
        self.routed[part] += size
        return self.sinks[part]

    def _assign(self, path: str) -> int:
        if path in METADATA:
            return 0
        planned = self.plan.get(path)
        if planned is not None:
            return planned
        return min(range(len(self.sinks)), key=self.routed.__getitem__)
