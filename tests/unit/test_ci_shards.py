"""CI's shards of a suite (scripts/shard.py): every test file runs in exactly one of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _shard(k: int, n: int, *dirs: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "scripts/shard.py", str(k), str(n), *dirs],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_every_file_is_in_exactly_one_shard():
    everything = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "integration").glob("test_*.py"))
    for n in (1, 2, 3):
        shards = [_shard(k, n, "tests/integration") for k in range(1, n + 1)]
        together = sorted(f for shard in shards for f in shard)
        assert together == everything, n
        assert all(shards), f"an empty shard of {n}"
