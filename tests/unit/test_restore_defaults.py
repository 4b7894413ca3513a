"""Defaults of a restore that depend on the worker."""

from __future__ import annotations

import os

from xtrabackup_provider.core.restore.chain import RestoreRequest, default_parallel_downloads


def test_objects_streamed_at_once_follow_the_usable_cores(monkeypatch):
    for cores, expected in ((1, 2), (2, 2), (3, 3), (4, 4), (64, 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        assert default_parallel_downloads() == expected


def test_a_request_leaves_the_choice_to_the_worker_unless_told():
    assert RestoreRequest.__dataclass_fields__["parallel_downloads"].default is None
