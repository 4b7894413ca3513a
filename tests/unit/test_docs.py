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


def test_the_restore_test_check_table_in_the_docs_is_current():
    """docs/BENCHMARKS.md holds the table the HTML report renders (core/restore/coverage.py)."""
    from xtrabackup_provider.core.restore.coverage import coverage_markdown
    from xtrabackup_provider.core.restore.evidence import ROW_TOLERANCE

    assert coverage_markdown() in (REPO / "docs/BENCHMARKS.md").read_text()
    assert f"{ROW_TOLERANCE:.0%}".replace("%", " %") in coverage_markdown()
