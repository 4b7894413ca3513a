"""core/storage/partplan.py: the multipart plan keeps every stream within its memory bound,
10,000 parts per object and 5 TiB per object, at 1 GiB to 50 TB, size known or not.

Before this plan (main's `choose_part_size`, 4 parts in flight): 1 TB known needed 120 MiB parts
(600-720 MiB of buffers), 10 TB known 1.17 GiB parts (5.8-7.0 GiB) in one object over S3's 5 TiB,
50 TB known raised `cannot fit in 10,000 parts of at most 5 GiB`, and an unknown size fixed 64 MiB
parts, so any stream past 625 GiB failed at part 10,001.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtrabackup_provider.core.storage.base import MAX_PART_SIZE, MAX_PARTS, GiB, MiB, StorageError
from xtrabackup_provider.core.storage.partplan import (
    DEFAULT_MEMORY,
    MAX_OBJECT_SIZE,
    S3_MIN_PART_SIZE,
    PartLimits,
    PlanSummary,
    summarize,
)

TB = 10**12


def _within_s3(plan: PlanSummary, limits: PartLimits) -> None:
    assert all(1 <= n <= min(MAX_PARTS, limits.max_parts) for n in plan.parts), plan.parts
    assert plan.peak_memory <= limits.memory
    assert plan.largest_part <= MAX_PART_SIZE
    assert plan.largest_segment <= MAX_OBJECT_SIZE
    assert plan.segments == 1 or plan.smallest_part >= S3_MIN_PART_SIZE


# size, known?, segments, parts per segment (first, last), part size range
PLANS = [
    ("1 GiB", GiB, True, 1, (128, 128), (8 * MiB, 8 * MiB)),
    ("1 GiB", GiB, False, 1, (128, 128), (8 * MiB, 8 * MiB)),
    ("1 TB", TB, True, 1, (7948, 7948), (120 * MiB, 120 * MiB)),
    ("1 TB", TB, False, 1, (7757, 7757), (8 * MiB, 256 * MiB)),
    ("10 TB", 10 * TB, True, 4, (9976, 9975), (239 * MiB, 239 * MiB)),
    ("10 TB", 10 * TB, False, 5, (10000, 1285), (8 * MiB, 256 * MiB)),
    ("50 TB", 50 * TB, True, 20, (9975, 1976), (249 * MiB, 249 * MiB)),
    ("50 TB", 50 * TB, False, 20, (10000, 296), (8 * MiB, 256 * MiB)),
]


@pytest.mark.parametrize(("label", "size", "known", "segments", "parts", "part_sizes"), PLANS)
def test_the_plan_keeps_every_stream_within_512_mib_10000_parts_and_5_tib(
    label, size, known, segments, parts, part_sizes
):
    limits = PartLimits()
    plan = summarize(size, size if known else None, limits)
    print(
        f"{label} {'known' if known else 'unknown'}: {plan.segments} segment(s), parts per segment "
        f"{plan.parts[0]}..{plan.parts[-1]}, parts {plan.smallest_part // MiB}..{plan.largest_part // MiB} MiB, "
        f"peak {plan.peak_memory // MiB} MiB, largest segment {plan.largest_segment / 2**40:.2f} TiB"
    )
    _within_s3(plan, limits)
    assert limits.memory == DEFAULT_MEMORY == 512 * MiB
    assert (plan.segments, (plan.parts[0], plan.parts[-1])) == (segments, parts)
    assert (plan.smallest_part, plan.largest_part) == part_sizes


def test_a_stream_that_outgrows_its_estimate_still_fits():
    # 1 GiB expected (8 MiB parts), 10 TB written: the part grows past the estimate, then segments.
    plan = summarize(10 * TB, GiB)
    _within_s3(plan, PartLimits())
    assert plan.segments == 5 and plan.largest_part == 256 * MiB


def test_a_smaller_bound_gives_smaller_parts_and_more_segments():
    limits = PartLimits(memory=128 * MiB)
    plan = summarize(10 * TB, 10 * TB, limits)
    _within_s3(plan, limits)
    assert plan.largest_part <= 64 * MiB and plan.peak_memory <= 128 * MiB and plan.segments == 16


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 3 * GiB),
    expected=st.one_of(st.none(), st.integers(1, 3 * GiB)),
    max_parts=st.integers(1, 40),
    grow_every=st.integers(1, 8),
    memory_parts=st.integers(2, 12),
)
def test_any_size_and_any_estimate_stays_within_the_limits(
    size, expected, max_parts, grow_every, memory_parts
):
    # Scaled down (few parts per segment, a small bound) so that rollovers and growth happen often.
    limits = PartLimits(
        memory=memory_parts * S3_MIN_PART_SIZE,
        min_part=S3_MIN_PART_SIZE,
        max_parts=max_parts,
        grow_every=grow_every,
    )
    plan = summarize(size, expected, limits)
    _within_s3(plan, limits)
    assert plan.largest_part <= limits.part_cap


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory": 8 * MiB}, "upload memory 8 MiB is below"),
        ({"min_part": MiB}, "min_part"),
        ({"max_parts": 10_001}, "max_parts 10001"),
        ({"min_inflight": 0}, "min_inflight 0"),
    ],
)
def test_impossible_limits_are_refused_in_one_line(kwargs, message):
    with pytest.raises(StorageError, match=message) as err:
        PartLimits(**kwargs)
    assert "\n" not in str(err.value)
