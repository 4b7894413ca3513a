"""Command lines of the docs' code blocks, for the tests that check or run them (tests/unit/test_docs.py,
tests/integration/test_runbook.py). No I/O of its own."""

from __future__ import annotations

import re

CLI = "xtrabackup-provider"


def code_lines(text: str) -> list[str]:
    """Command lines of the fenced blocks, continuation lines (`\\`) joined."""
    lines, joined, fenced = [], "", False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            continue
        joined += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            lines.append(joined)
            joined = ""
    return lines


def cli_lines(text: str) -> list[str]:
    """The code blocks' `xtrabackup-provider ...` lines (a `$ ` prompt dropped), with their
    trailing comments, in the order the page gives them."""
    lines = (re.sub(r"^\s*(\$\s+)?", "", line) for line in code_lines(text))
    return [line for line in lines if line.startswith(f"{CLI} ")]
