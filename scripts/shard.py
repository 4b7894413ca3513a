"""Print the test files of shard K of N (1-based) of the given directories, balanced by their
number of test functions (the suites spend most of their time waiting, so CI runs shards side
by side: scripts/ci.sh). Every file lands in exactly one shard, whatever files are added.

    python scripts/shard.py 1 2 tests/integration
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def shards(count: int, directories: list[str]) -> list[list[str]]:
    files = sorted(str(p) for d in directories for p in Path(d).glob("test_*.py"))
    weight = {
        f: max(1, len(re.findall(r"^\s*(?:async )?def test_", Path(f).read_text(), re.M))) for f in files
    }
    out: list[tuple[int, list[str]]] = [(0, []) for _ in range(count)]
    for f in sorted(files, key=lambda f: (-weight[f], f)):
        index = min(range(count), key=lambda i: out[i][0])
        out[index] = (out[index][0] + weight[f], [*out[index][1], f])
    return [sorted(fs) for _, fs in out]


if __name__ == "__main__":
    k, n, *dirs = sys.argv[1:]
    print("\n".join(shards(int(n), dirs)[int(k) - 1]))
