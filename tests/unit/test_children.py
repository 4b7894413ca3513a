"""Child processes: the environment they start with, and what their stderr is summarised to."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtrabackup_provider.core.common import children
from xtrabackup_provider.core.common.tempdirs import OWNER
from xtrabackup_provider.core.engine.argv import PrepareStep, PrepareTuning
from xtrabackup_provider.core.engine.tools import ToolVersion
from xtrabackup_provider.core.restore.prepare import PrepareError, run_step

SECRETS = {
    "XTRABACKUP_GPG_PASSPHRASE": "pp-secret",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "sk-secret",
    "AWS_SESSION_TOKEN": "st-secret",
    "XBP_DB_PASSWORD": "db-secret",
}


def test_a_child_sees_none_of_the_workers_secrets_only_what_it_needs(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    proc = children.run(
        [sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
        capture_output=True,
        text=True,
        extra_env={"TZ": "UTC"},
    )
    seen = json.loads(proc.stdout)
    assert not set(SECRETS) & set(seen), seen
    assert not [v for v in seen.values() if "secret" in v]
    assert seen["TMPDIR"] == "/var/tmp" and seen["TZ"] == "UTC" and seen["LC_ALL"] == children.LOCALE
    assert "PATH" in seen and "LANG" not in seen
    assert set(seen) <= {*children.PASSED, "LC_ALL", "HOME"}


def test_a_child_gets_a_private_empty_home_and_nothing_that_points_a_client_elsewhere(monkeypatch, tmp_path):
    hostile = tmp_path / "home"
    hostile.mkdir()
    (hostile / ".my.cnf").write_text("[client]\nsocket=/elsewhere.sock\n")
    steering = {
        "HOME": str(hostile),
        "MYSQL_HOME": str(hostile),
        "MYSQL_PWD": "pw-secret",
        "MYSQL_TEST_LOGIN_FILE": str(hostile / ".mylogin.cnf"),
        "MYSQL_UNIX_PORT": "/elsewhere.sock",
        "MYSQL_TCP_PORT": "3307",
        "MYSQL_HOST": "elsewhere",
    }
    for name, value in steering.items():
        monkeypatch.setenv(name, value)
    show = "import os, json; print(json.dumps([dict(os.environ), os.listdir(os.environ['HOME'])]))"
    seen, listed = json.loads(
        children.run([sys.executable, "-c", show], capture_output=True, text=True).stdout
    )
    assert not {k for k in steering if k != "HOME"} & set(seen), seen
    home = Path(seen["HOME"])
    # nothing but the record that keeps it from another container's sweeps (core/common/tempdirs.py)
    assert home != hostile and listed == [OWNER] and oct(home.stat().st_mode & 0o777) == "0o700"
    # A child that writes into its HOME does not hand that to the next one.
    (home / ".my.cnf").write_text("[client]\nsocket=/elsewhere.sock\n")
    assert children.child_env()["HOME"] != str(home)
    with pytest.raises(ValueError, match="MYSQL_HOME"):
        children.child_env({"MYSQL_HOME": str(hostile)})


@pytest.mark.parametrize(
    "argv",
    [
        ["mariabackup", "--backup", "--target-dir=/x"],  # reads /etc/mysql and ~/.my.cnf
        ["mariabackup", "--defaults-extra-file=/c.cnf", "--backup"],  # adds a file, still reads ~/.my.cnf
        ["/usr/bin/mariadb", "--defaults-file=/c.cnf", "--defaults-extra-file=/d.cnf"],
        ["ionice", "-c", "2", "-n", "7", "nice", "-n", "10", "mariabackup", "--backup"],
        ["mariadb-binlog", "--read-from-remote-server", "--raw", "mysql-bin.000001"],
        ["mariadbd", "--datadir=/x", "--no-defaults"],  # not first: ignored by the server
        ["pt-table-checksum", "h=db1,F=/c.cnf"],  # reads ~/.percona-toolkit.conf
    ],
)
def test_a_tool_that_would_read_option_files_we_did_not_choose_is_not_started(argv):
    with pytest.raises(children.ToolOptionsError, match="refusing to start"):
        children.run(argv, capture_output=True)


@pytest.mark.parametrize(
    "argv",
    [
        ["mariabackup", "--defaults-file=/c.cnf", "--backup"],
        [
            "nice",
            "-n",
            "10",
            "ionice",
            "-c",
            "3",
            "/usr/bin/xtrabackup",
            "--defaults-file=/c.cnf",
            "--backup",
        ],
        ["mariadb", "--no-defaults", "--version"],
        ["/usr/bin/pt-table-checksum", "--config=/dev/null", "h=db1,F=/c.cnf"],
        ["mbstream", "-x", "-C", "/var/lib/mysql"],  # reads no option file (nor takes --no-defaults)
        ["innochecksum", "/var/lib/mysql/mysql/db.ibd"],
        ["zstd", "-d", "-c"],
    ],
)
def test_tools_given_only_our_options_pass_the_check(argv):
    children.check_tool_options(argv)


# -- stderr summaries: shaped like what mariabackup 10.11, gpg and zstd print --------------------------

_T = "2026-12-01 11:16:23"
OPEN_FILES = (
    f"""[00] {_T} Connecting to MariaDB server host: localhost, user: root, password: set, port: 3306
[00] {_T} open files limit requested 0, set to 1024
[00] {_T} mariabackup: using the following InnoDB configuration:
{_T} 0 [Note] InnoDB: Using io_uring
[00] {_T} mariabackup: Generating a list of tablespaces
"""
    + 2
    * f"""{_T} 0 [ERROR] InnoDB: Operating system error number 24 in a file operation.
{_T} 0 [ERROR] InnoDB: Error number 24 means 'Too many open files'
{_T} 0 [Note] InnoDB: Some operating system error numbers are described at https://mariadb.com/docs/
{_T} 0 [ERROR] InnoDB: File ./many/t874.ibd: 'open' returned OS error 224.
"""
    + f"""{_T} 0 [Warning] InnoDB: Cannot open './many/t874.ibd'.
[00] FATAL ERROR: {_T} Failed to validate first page of the file many/t874, error 61
"""
)

_PAGE = bytes(range(256)) * 64  # a 16 KiB page: every byte value, newlines and NULs included
CORRUPTED_PAGE = (
    "".join(f"[00] {_T} Streaming ./mysql/t{n}.ibd\n[00] {_T}         ...done\n" for n in range(30)).encode()
    + 10 * f"[00] {_T} Database page corruption detected at page 4, retrying...\n".encode()
    + f"[00] {_T} Error: failed to read page after 10 retries. File ./e/orders.ibd seems to be corrupted.\n".encode()
    + b" len 16384; hex "
    + _PAGE.hex().encode()
    + b"; asc "
    + _PAGE
    + f";[00] {_T} mariabackup: xtrabackup_copy_datafile() failed.\n".encode()
    + f"[00] FATAL ERROR: {_T} mariabackup: Error: failed to copy datafile.\n".encode()
)


def test_the_errno_explanation_comes_first_and_notes_and_repeats_go():
    summary = children.summarize_stderr(OPEN_FILES)
    assert summary.startswith("[ERROR] InnoDB: Error number 24 means 'Too many open files'"), summary
    assert "FATAL ERROR: Failed to validate first page of the file many/t874, error 61" in summary
    assert "[Note]" not in summary and _T not in summary and "\n" not in summary
    assert summary.count("Error number 24 means") == 1


def test_a_page_dump_and_its_raw_bytes_never_reach_the_message():
    summary = children.summarize_stderr(CORRUPTED_PAGE)
    assert summary.startswith(
        "Error: failed to read page after 10 retries. File ./e/orders.ibd seems to be corrupted."
    ), summary
    assert "FATAL ERROR: mariabackup: Error: failed to copy datafile." in summary
    assert summary.isprintable() and "hex" not in summary and "asc" not in summary, summary
    assert summary.count("retrying") == 1 and "Streaming" not in summary


def test_a_tail_starts_at_a_line_and_a_message_without_error_words_keeps_its_last_lines():
    assert children.tail_text(b"first line\nsecond\nthird\n", 12) == "third\n"
    assert children.tail_text(b"first line\nsecond\nthird\n", 13) == "second\nthird\n"
    only = f"[00] {_T} Original data directory /srv/data is not empty!\n"
    assert children.summarize_stderr(only) == "Original data directory /srv/data is not empty!"
    plain = "zstd: /*stdin*\\: unsupported format\n"
    assert children.summarize_stderr(plain) == "zstd: /*stdin*\\: unsupported format"
    assert children.summarize_stderr("a\nb\nc\nd\n") == "b; c; d"
    assert children.summarize_stderr("") == ""


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.binary(max_size=4000) | st.text(max_size=4000))
def test_any_stderr_gives_one_printable_bounded_line(data):
    summary = children.summarize_stderr(data, 300)
    assert len(summary) <= 300 and summary.isprintable()


def test_a_tool_killed_by_a_signal_is_named_with_the_signal(tmp_path):
    """What a user reads when the OOM killer (or a kill -9) stops mariabackup --prepare in a
    restore: the tool and the signal, not "prepare of ... failed (exit -9)" (found by the chaos
    run's kill_tool, whose evidence is "mariabackup ... killed by signal 9")."""
    tool_binary = tmp_path / "mariabackup"  # a process killed by SIGKILL, as the fault does it
    tool_binary.write_text("#!/bin/sh\nkill -9 $$\n")
    tool_binary.chmod(0o755)
    tool = ToolVersion("mariabackup", (10, 11, 6, 0), binary=str(tool_binary))
    with pytest.raises(PrepareError) as info:
        run_step(tool, PrepareStep(str(tmp_path / "base"), None, False), PrepareTuning())
    assert str(info.value).startswith(
        f"mariabackup --prepare of {tmp_path / 'base'} failed (killed by signal 9)"
    )
    assert children.how_ended(1) == "exit status 1"


def test_a_tools_stderr_summary_never_repeats_a_password_hash():
    """mariabackup without RELOAD prints the account's grants, password hash included; the one
    line an error quotes from its stderr (and so the logs) must not carry it (issue 38 review)."""
    stderr = (
        "[00] 2026-12-05 01:50:00 Error: missing required privilege RELOAD on *.*\n"
        "[00] 2026-12-05 01:50:00 Current privileges, as reported by 'SHOW GRANTS': \"GRANT SELECT ON *.* TO "
        "`bk`@`localhost` IDENTIFIED BY PASSWORD '*F47C9A3CE1B5C7E0E1E4D4A4B3C2D1E0F9A8B7C6'\"\n"
        "ALTER USER x IDENTIFIED WITH caching_sha2_password AS '$A$005$abcdefghijklmnopqrst'\n"
    )
    line = children.summarize_stderr(stderr)
    assert "RELOAD" in line
    assert "F47C9A3CE1B5" not in line and "abcdefghijklmnopqrst" not in line, line
