"""Docs that are generated from the code stay current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_operator_reference_is_current():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/gen_operator_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
