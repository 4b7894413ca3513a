"""The multipart plan: each part's size, how many parts may be in flight, and when a stream rolls
over to its next segment, so that one stream's upload holds at most `PartLimits.memory` bytes of
buffers (512 MiB by default) at any size up to 50 TB and beyond, known at the start or not.

S3 allows 10,000 parts per upload, parts of 5 MiB..5 GiB (the last may be smaller) and objects of
at most 5 TiB. A writer holds the part being filled plus the parts in flight, so under a bound B
a part is at most B / (1 + min_inflight): 256 MiB for 512 MiB and one part in flight, and one
object then holds at most 10,000 x 256 MiB = 2.44 TiB. No single object reaches 50 TB under that
bound (nor under S3's 5 TiB cap), so a stream is stored as *segments*: consecutive objects of one
byte stream, `KEY`, `KEY.s001`, `KEY.s002`, ... (core/storage/segments.py), each its own
multipart upload.

`PartSizer.next()` is the whole decision, pure (no I/O), fed with the size of each part sent:
- size known: one constant part size per stream, ceil(size x slack / segments / 10,000) (>= 8 MiB,
  <= the cap), segments = ceil(size x slack / what one segment holds);
- size unknown, or the stream outgrew its estimate: start at 8 MiB (or the planned size) and
  double every `grow_every` parts up to the cap; a new segment at 10,000 parts or 5 TiB; later
  segments start at the cap (the stream is known to be big by then).
Parts in flight = min(max_inflight, B / part - 1), at least min_inflight.
Some S3-compatible stores (Cloudflare R2) want equal parts within an upload: the known-size plan
is constant, but a grown unknown-size stream mixes sizes (S3 and MinIO accept that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .base import DEFAULT_MEMORY_MIB, MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE, GiB, MiB, StorageError

TiB = 1024 * GiB
MAX_OBJECT_SIZE = 5 * TiB  # S3's cap on one object, however it was uploaded
S3_MIN_PART_SIZE = 5 * MiB  # S3 refuses a smaller part unless it is the upload's last
DEFAULT_MEMORY = DEFAULT_MEMORY_MIB * MiB


@dataclass(frozen=True)
class PartLimits:
    """What one stream's writer may use. `max_parts` below 10,000 makes segments small (tests)."""

    memory: int = DEFAULT_MEMORY  # buffers one stream holds: the part being filled + those in flight
    max_inflight: int = 4
    min_inflight: int = 1
    max_parts: int = MAX_PARTS  # parts per segment
    min_part: int = MIN_PART_SIZE
    grow_every: int = 1000  # size unknown (or past the estimate): double the part every this many parts
    slack: float = 1.25  # size known: room for the stream to outgrow the estimate

    def __post_init__(self) -> None:
        if not 1 <= self.min_inflight <= self.max_inflight:
            raise StorageError(
                f"upload parts in flight: min_inflight {self.min_inflight} and max_inflight "
                f"{self.max_inflight} must satisfy 1 <= min <= max"
            )
        if not S3_MIN_PART_SIZE <= self.min_part <= MAX_PART_SIZE:
            raise StorageError(f"upload min_part {self.min_part} must be between 5 MiB and 5 GiB")
        if self.memory < (1 + self.min_inflight) * self.min_part:
            raise StorageError(
                f"upload memory {self.memory // MiB} MiB is below (1 + min_inflight) x the smallest part "
                f"({(1 + self.min_inflight) * self.min_part // MiB} MiB): raise the upload memory setting"
            )
        if not 1 <= self.max_parts <= MAX_PARTS or self.grow_every < 1 or self.slack < 1:
            raise StorageError(
                f"upload max_parts {self.max_parts} must be 1..10,000, grow_every >= 1 and slack >= 1"
            )

    @property
    def part_cap(self) -> int:
        """The largest part: the bound shared by the part being filled and min_inflight in flight."""
        return max(self.min_part, min(MAX_PART_SIZE, self.memory // (1 + self.min_inflight) // MiB * MiB))

    @property
    def segment_cap(self) -> int:
        """The most one segment can hold: max_parts of the largest part, and never over 5 TiB."""
        return min(MAX_OBJECT_SIZE, self.max_parts * self.part_cap)

    def inflight(self, part: int) -> int:
        return max(self.min_inflight, min(self.max_inflight, self.memory // part - 1))


@dataclass(frozen=True)
class KnownPlan:
    """The constant-part plan of a stream of about `expected` bytes."""

    part_size: int
    inflight: int
    segments: int
    segment_bytes: int  # what a segment is filled to before the next starts (0: one segment)

    @property
    def memory(self) -> int:
        return (self.inflight + 1) * self.part_size


def plan_known(expected: int, limits: PartLimits) -> KnownPlan:
    target = expected * limits.slack
    segments = max(1, math.ceil(target / limits.segment_cap))
    part = min(
        limits.part_cap, max(limits.min_part, math.ceil(target / segments / limits.max_parts / MiB) * MiB)
    )
    segment_bytes = 0 if segments == 1 else math.ceil(target / segments / part) * part
    return KnownPlan(part, limits.inflight(part), segments, segment_bytes)


@dataclass(frozen=True)
class PartStep:
    size: int  # bytes of the next part (the stream's last part may be shorter)
    inflight: int  # parts allowed in flight while this one fills
    new_segment: bool  # this part starts the next segment


@dataclass
class PartSizer:
    """Decides the size of each part and when a new segment starts. Call `next()` for the part to
    fill, then `sent(size)` with what it really held."""

    limits: PartLimits = field(default_factory=PartLimits)
    expected: int | None = None
    segment: int = field(default=0, init=False)
    parts_in_segment: int = field(default=0, init=False)
    bytes_in_segment: int = field(default=0, init=False)
    total: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.plan = plan_known(self.expected, self.limits) if self.expected else None
        self.estimate = math.floor(self.expected * self.limits.slack) if self.expected else 0

    def next(self) -> PartStep:
        size = self._size()
        within = self.plan is not None and self.total + size <= self.estimate
        if self.parts_in_segment and (
            self.parts_in_segment >= self.limits.max_parts
            or self.bytes_in_segment + size > MAX_OBJECT_SIZE
            or (
                within
                and self.plan
                and self.plan.segment_bytes
                and self.bytes_in_segment + size > self.plan.segment_bytes
            )
        ):
            self.segment += 1
            self.parts_in_segment = self.bytes_in_segment = 0
            size = self._size()
            return PartStep(size, self.limits.inflight(size), True)
        return PartStep(size, self.limits.inflight(size), False)

    def sent(self, size: int) -> None:
        self.parts_in_segment += 1
        self.bytes_in_segment += size
        self.total += size

    def _size(self) -> int:
        lim = self.limits
        start = self.plan.part_size if self.plan else lim.min_part
        if self.plan and self.total < self.estimate:
            return start  # constant while the estimate holds
        if self.segment:
            return lim.part_cap
        return min(lim.part_cap, start << min(32, self.parts_in_segment // lim.grow_every))


@dataclass(frozen=True)
class PlanSummary:
    """What a stream of `size` bytes would be stored as (computed part by part, no I/O)."""

    size: int
    expected: int | None
    parts: list[int]  # parts per segment
    smallest_part: int  # of the parts before each segment's last
    largest_part: int
    peak_memory: int  # (in flight + 1) x part, the most the writer may hold
    largest_segment: int

    @property
    def segments(self) -> int:
        return len(self.parts)


def summarize(size: int, expected: int | None, limits: PartLimits | None = None) -> PlanSummary:
    """Run the sizer over a stream of `size` bytes (arithmetic only: ~0.2 s for 50 TB)."""
    sizer = PartSizer(limits or PartLimits(), expected)
    parts, seg_bytes = [0], [0]
    smallest, largest, peak, left = size, 0, 0, size
    while left > 0 or not parts[0]:
        step = sizer.next()
        if step.new_segment:
            parts.append(0)
            seg_bytes.append(0)
        this = min(step.size, left)
        sizer.sent(this)
        parts[-1] += 1
        seg_bytes[-1] += this
        left -= this
        if left:
            smallest = min(smallest, this)
        largest = max(largest, step.size)
        peak = max(peak, (step.inflight + 1) * step.size)
    return PlanSummary(size, expected, parts, smallest, largest, peak, max(seg_bytes))
