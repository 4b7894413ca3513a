"""Split one xbstream into K xbstreams, by file, in one pass: how a K-part backup is cut.

Each data part is a valid xbstream that `mbstream -x` extracts on its own, and the K parts are
extracted at once into the same directory, so a file's chunks all go to one part: mbstream creates
a file with O_EXCL, so a second part writing the same file fails ("File exists") and exits 0 with
the data missing. A file's part is fixed at its first chunk: the plan's (largest files first, from
the datadir's sizes, `plan_parts`), else the part that has had the fewest bytes so far; the tool's
metadata files go to part 0.

MariaDB's rename ('R') and remove ('D') chunks (DDL during the backup) go to a tail stream, with
every later chunk of a path they touch (the path, its directories, what is under it): applied
inside a part they could race another part. The tail is extracted after the data parts, so each
path still sees its chunks in stream order, as with one stream (`Splitter` has the rules). Payload
bytes are passed on as slices of the piece read; only a chunk header (at most about 1 KiB) is ever
held back. Deep verify checks the parts the same way a restore extracts them
(`engine.xbstream.check_parts`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.metadata import BINLOG_INFO_FILES, CHECKPOINT_FILES, INFO_FILES
from ..engine.xbstream import (
    LENGTH,
    MAGIC,
    MAX_HEAD,
    PAYLOAD_HEADER,
    SPARSE_HEADER,
    ChunkHead,
    StreamFlavour,
    XbstreamError,
    read_head,
)
from ..engine.xbtree import components

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


TAIL = -1
Names = tuple[str, ...]


def _names(path: str) -> Names:
    return tuple(components(path))


def _needs(path: str) -> tuple[Names | None, Names | None]:
    """(the directory that must exist before the extractor creates `path`, the one it then makes):
    mbstream makes a file's directory with one mkdir, so its parent must exist (the directory
    itself when the path's last directory name is ".")."""
    names = path.split("/")[:-1]
    while names and names[-1] == "":
        names = names[:-1]
    if not names:
        return None, None
    made = _names("/".join(names))
    if names[-1] == ".":
        return made, None
    return made[:-1], made


class Splitter:
    """Feed the stream in pieces of any size; `sinks[i]` gets part i's bytes, `tail` the tail's.

    Data parts are extracted at once, then the tail: what goes where keeps every extraction the
    one-stream extraction (tests/unit/test_split.py checks it with the real mbstream for generated
    streams). Paths are compared by the names they walk (`./d/t` is `d/t`). A path goes to the tail
    if a rename or remove named it, one of its directories or anything under it; a file still open
    keeps its part (its writes go to the file whatever its name became). A file whose directory's
    parent no part has made yet (`a/b/f` before any `a/...`) goes to the tail too."""

    def __init__(self, sinks: list[Sink], tail: Sink, flavour: StreamFlavour, plan: PartPlan | None = None):
        self.sinks, self.tail, self.flavour = sinks, tail, flavour
        self.plan = plan.owner if plan and plan.parts == len(sinks) else {}
        self.routed = [0] * len(sinks)  # xbstream bytes per data part
        self.tail_bytes = 0
        self.added = 0  # bytes the splitter wrote into the tail itself (see `_unstale`)
        self.owner: dict[Names, int] = {}  # a file's part
        self.made: list[set[Names]] = [{()} for _ in sinks]  # directories each part makes
        self.dirs: set[Names] = set()  # directories the data parts make
        self.tailed: set[Names] = set()  # paths the tail owns
        self.above_tailed: set[Names] = set()  # their directories
        self.open: dict[str, int] = {}  # a path the extractor of that part (or the tail) has open
        self.tail_open: dict[str, int] = {}  # the tail's open files: their next offset
        self.tail_stale = False  # a rename went to the tail and no payload after it
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
        part = self.open.get(head.path)
        if part is None:
            part = self._place(head)
        if head.kind == "E":
            self.open.pop(head.path, None)
        elif head.kind not in ("R", "D") or self.flavour != "mariabackup":
            self.open[head.path] = part
        if part != TAIL:
            self.routed[part] += size
            return self.sinks[part]
        self._tail_chunk(head)
        self.tail_bytes += size
        return self.tail

    def _place(self, head: ChunkHead) -> int:
        names = _names(head.path)
        if self.flavour == "mariabackup" and head.kind in ("R", "D"):
            self._to_tail(names)
            if head.new_path is not None:
                self._to_tail(_names(head.new_path))
            return TAIL
        if self._touches_tail(names):
            self._to_tail(names)
            return TAIL
        part = self.owner.get(names)
        if part is not None:
            return part
        needs, makes = _needs(head.path)
        candidates = [i for i in range(len(self.sinks)) if needs is None or needs in self.made[i]]
        # A directory no part made yet, that an earlier rename or remove reached into: in the stream
        # it did not exist for them, after the data parts it would.
        if not candidates or (makes in self.above_tailed and makes not in self.dirs):
            self._to_tail(names)
            return TAIL
        part = self._assign("/".join(names), candidates)
        self.owner[names] = part
        if makes is not None:
            self.made[part].add(makes)
            self.dirs.add(makes)
        return part

    def _touches_tail(self, names: Names) -> bool:
        return (
            () in self.tailed
            or names in self.above_tailed
            or any(names[:n] in self.tailed for n in range(1, len(names) + 1))
        )

    def _to_tail(self, names: Names) -> None:
        self.tailed.add(names)
        self.above_tailed.update(names[:n] for n in range(1, len(names)))

    def _tail_chunk(self, head: ChunkHead) -> None:
        """mbstream checks an end-of-file chunk against the last payload's checksum, which a rename
        chunk overwrites (core/engine/xbstream.py): if the payload that came between went to a data
        part, the tail gets an empty payload chunk for the closing file first."""
        if head.kind == "R" and self.flavour == "mariabackup":
            self.tail_stale = True
        elif head.kind == "E":
            if self.tail_stale:
                self._unstale(head)
            self.tail_open.pop(head.path, None)
        elif head.kind == "S" and self.flavour == "mariabackup":
            self.tail_open[head.path] = head.offset
        elif head.kind != "D":
            self.tail_stale = False
            self.tail_open[head.path] = head.offset + head.length

    def _unstale(self, head: ChunkHead) -> None:
        raw = head.path.encode("utf-8", "surrogateescape")
        chunk = (
            MAGIC
            + bytes([head.flags, ord("P")])
            + LENGTH.pack(len(raw))
            + raw
            + PAYLOAD_HEADER.pack(0, self.tail_open.get(head.path, 0), 0)
        )
        self.tail(chunk)
        self.added += len(chunk)
        self.tail_stale = False

    def _assign(self, path: str, candidates: list[int]) -> int:
        if path in METADATA and 0 in candidates:
            return 0
        planned = self.plan.get(path)
        if planned is not None and planned in candidates:
            return planned
        return min(candidates, key=self.routed.__getitem__)
