"""The docs stay true: the generated operator reference is current, every `xtrabackup-provider`
command they show parses with the CLI's own parser, and the README stays a short front page."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from doc_commands import CLI, cli_lines
from xtrabackup_provider.cli.main import build_parser
from xtrabackup_provider.cli.options import BadArgument

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted({REPO / "README.md", *(REPO / "docs").glob("*.md")} - {REPO / "docs" / "changelog.md"})
# What a placeholder of the docs (`ID`, `N`, `DIR`, ...) becomes when its option checks its value.
EXAMPLES = ("20261130T103000Z-full", "1", "2026-11-30T10:15:00Z", "0-1-4242", "mysql-bin.000042:1234", "x")


def test_operator_reference_is_current():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/gen_operator_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_readme_is_a_short_front_page():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert text.index("make demo") < text.index("## ")  # the two commands come first
    assert "| capability | state |" in text and "## Where to go next" in text


def documented_commands() -> list[tuple[str, str, bool]]:
    """(page, command text after `xtrabackup-provider `, whole?) for each line of a code block that
    runs the CLI (whole: every required argument must be there) and each inline `xtrabackup-provider
    ...` (a verb and its options, maybe not all of them)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for line in cli_lines(text):
            found.append((page.name, line.removeprefix(f"{CLI} "), True))
        for span in re.findall(rf"`{CLI} ([^`]+)`", text):
            found.append((page.name, span, False))
    return found


def _groups(text: str) -> list[tuple[int, int]]:
    """(start, end) of each top-level `[...]` group (nested groups belong to theirs)."""
    spans, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            start = i if depth == 0 else start
            depth += 1
        elif char == "]" and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans


def _keep(text: str, chosen: set[int]) -> str:
    """`text` with the top-level groups of index in `chosen` put in (their brackets, nested ones
    too, removed) and every other group left out."""
    out, last = [], 0
    for index, (start, end) in enumerate(_groups(text)):
        out.append(text[last:start])
        if index in chosen:
            out.append(" " + text[start + 1 : end - 1].replace("[", " ").replace("]", " ") + " ")
        last = end
    return "".join(out) + text[last:]


def _variants(command: str) -> list[list[str]]:
    """The argv lists a usage line stands for: the comment and a shell pipe dropped, each
    `a | b` of options one at a time, `[optional]` groups all left out, each put in alone, all put
    in; the first of `x|y` alternatives."""
    command = command.split(" #", 1)[0].strip()
    head, *alternatives = re.split(r" \| (?=-)", command)
    head = re.split(r" \| ", head)[0]  # `... | sh`
    out = []
    for base in [head] + [re.sub(r"(?:--[\w-]+(?: \S+)?)$", alt, head) for alt in alternatives]:
        count = len(_groups(base))
        for chosen in [set(), *({i} for i in range(count)), set(range(count))]:
            out.append([w.split("|")[0] for w in shlex.split(_keep(base, chosen))])
    return out


def _actions(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The subparser that argv's verbs (`binlogs ship`) select."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser


def _fill(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Placeholders (`ID`, `N`, `DIR`) become values the option's own type accepts."""
    options = {s: a for a in _actions(parser, argv)._actions for s in a.option_strings}
    out = list(argv)
    for i, word in enumerate(argv[1:], 1):
        action = options.get(argv[i - 1])
        if action is None or not re.fullmatch(r"[A-Z][A-Z_]*", word):
            continue
        if action.choices:
            out[i] = next(iter(action.choices))
            continue
        for example in EXAMPLES:
            try:
                (action.type or str)(example)
            except (argparse.ArgumentTypeError, ValueError, TypeError, BadArgument):
                continue
            out[i] = example
            break
    return out


def _check(parser: argparse.ArgumentParser, argv: list[str], whole: bool) -> str | None:
    """None if the parser accepts argv; else why not."""
    try:
        if whole:
            parser.parse_args(argv)
        else:
            sub = _actions(parser, argv)
            known = {s for a in sub._actions for s in a.option_strings}
            unknown = [w.split("=")[0] for w in argv if w.startswith("--") and w.split("=")[0] not in known]
            assert sub is not parser or not argv, f"no such command: {argv[0]}"
            assert not unknown, f"no such option: {unknown}"
    except SystemExit:
        return "the parser refused it (its message is above)"
    except BadArgument as exc:  # a value the option refuses (cli/options.py require_values)
        return str(exc)
    except AssertionError as exc:
        return str(exc)
    return None


def test_the_docs_show_the_commands():
    commands = documented_commands()
    pages = {page for page, _, _ in commands}
    assert {"README.md", "RUNBOOK.md", "cli.md"} <= pages, pages
    assert len([c for c in commands if c[2]]) > 30


@pytest.mark.parametrize(("page", "command", "whole"), documented_commands())
def test_a_documented_command_parses(page, command, whole, capsys):
    parser = build_parser()
    for argv in _variants(command):
        argv = _fill(parser, argv)
        problem = _check(parser, argv, whole)
        assert problem is None, f"{page}: `{CLI} {shlex.join(argv)}`: {problem}\n{capsys.readouterr().err}"


def test_the_restore_test_check_table_in_the_docs_is_current():
    """docs/BENCHMARKS.md holds the table the HTML report renders (core/restore/coverage.py)."""
    from xtrabackup_provider.core.restore.coverage import coverage_markdown
    from xtrabackup_provider.core.restore.evidence import ROW_TOLERANCE

    assert coverage_markdown() in (REPO / "docs/BENCHMARKS.md").read_text()
    assert f"{ROW_TOLERANCE:.0%}".replace("%", " %") in coverage_markdown()
