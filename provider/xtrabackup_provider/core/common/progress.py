"""Throttled progress logging: bytes, rate and ETA, at most once per interval."""

from __future__ import annotations

import logging
import time


class ProgressLogger:
    def __init__(
        self,
        log: logging.Logger,
        what: str,
        expected_bytes: int | None = None,
        interval: float = 10.0,
        basis: str = "estimate from the datadir size",  # where expected_bytes comes from
    ) -> None:
        self.log, self.what, self.expected, self.interval = log, what, expected_bytes, interval
        self.basis = basis
        self.started = self.last = time.monotonic()

    def __call__(self, done_bytes: int) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        self.last = now
        rate = done_bytes / max(now - self.started, 1e-6)
        eta = ""
        if self.expected and rate > 0 and done_bytes < self.expected:
            eta = f", ETA {(self.expected - done_bytes) / rate:.0f}s ({self.basis})"
        self.log.info("%s: %.1f MiB at %.1f MiB/s%s", self.what, done_bytes / 2**20, rate / 2**20, eta)
