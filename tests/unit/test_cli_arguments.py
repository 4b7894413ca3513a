"""CLI arguments that would do nothing (or something else than asked) are refused before anything is
read: exit 2, one line `error: --flag 'value': ...` naming the argument, the value shown with repr
(issue 33 item 5)."""

from __future__ import annotations

import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xtrabackup_provider import cli


@pytest.fixture(scope="module")
def store_dir(catalog_dir) -> str:
    """A directory store with backups and no binlogs: a filter that is dropped lists nothing."""
    return catalog_dir


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory, store_dir) -> str:
    path = tmp_path_factory.mktemp("cfg") / "fleet.yaml"
    config = {
        "storage": {"local_path": store_dir, "prefix": "backups-prod"},
        "encryption": {"enabled": False},
        "clusters": [{"name": "c1", "hosts": [{"name": "db1"}]}, {"name": "c2", "hosts": [{"name": "db9"}]}],
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _host_args(store_dir: str) -> list[str]:
    return ["--local-path", store_dir, "--prefix", "backups-prod", "--cluster", "c1", "--host", "db1"]


def _refused(capsys, monkeypatch, argv: list[str], flag: str, value: str) -> str:
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    try:
        rc = cli.main(argv)
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2 and out == "", (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert flag in lines[0] and repr(value)[:40] in lines[0], lines[0]
    return lines[0]


EVENTS_CASES = {
    "no kind": (["--kind", ""], "--kind", ""),
    "only a comma": (["--kind", ","], "--kind", ","),
    "two words": (["--kind", "DROP TABLE"], "--kind", "DROP TABLE"),
    "punctuation": (["--kind", "DROP;"], "--kind", "DROP;"),
    "blank kind": (["--kind", " "], "--kind", " "),
    "no table": (["--table", ""], "--table", ""),
    "a schema without its table": (["--table", "d."], "--table", "d."),
    "a table without its schema": (["--table", ".t1"], "--table", ".t1"),
    "no schema": (["--schema", ""], "--schema", ""),
    "no server": (["--server", ""], "--server", ""),
    "a newline only": (["--server", "\n"], "--server", "\n"),
    "times reversed": (
        ["--since", "2026-11-02T00:00:00Z", "--until", "2026-11-01T00:00:00Z"],
        "--since",
        "2026-11-02T00:00:00+00:00",
    ),
    "GTIDs reversed": (["--gtid-from", "0-1-10", "--gtid-to", "0-1-5"], "--gtid-from", "0-1-10"),
    "no GTID": (["--gtid-from", ","], "--gtid-from", ","),
    "a repetition past the regex engine": (["--grep", "a{4294967296}"], "--grep", "a{4294967296}"),
    "an unclosed group": (["--grep", "("], "--grep", "("),
    "groups nested past the parser": (["--grep", "(" * 5000 + ")" * 5000], "--grep", "(" * 5000 + ")" * 5000),
}


@pytest.mark.parametrize(("extra", "flag", "value"), EVENTS_CASES.values(), ids=EVENTS_CASES.keys())
def test_binlogs_events_refuses_a_filter_that_would_filter_nothing(
    store_dir, capsys, monkeypatch, extra, flag, value
):
    _refused(capsys, monkeypatch, ["binlogs", "events", *_host_args(store_dir), *extra], flag, value)


def test_check_refuses_an_empty_cluster_instead_of_checking_every_cluster(fleet_file, capsys, monkeypatch):
    _refused(capsys, monkeypatch, ["check", "--config", fleet_file, "--cluster", ""], "--cluster", "")


OTHER_VERBS = {
    "list --prefix ''": (
        ["list", "--local-path", "{store}", "--cluster", "c1", "--host", "db1", "--prefix", ""],
        "--prefix",
    ),
    "verify --local-path ' '": (
        ["verify", "--local-path", " ", "--cluster", "c1", "--host", "db1"],
        "--local-path",
    ),
    "list --config ''": (["list", "--config", "", "--cluster", "c1", "--host", "db1"], "--config"),
    "report --out ''": (["report", "--config", "{fleet}", "--cluster", "c1", "--out", ""], "--out"),
    "copy --target-store ''": (
        ["copy", "--config", "{fleet}", "--cluster", "c1", "--host", "db1", "--target-store", ""],
        "--target-store",
    ),
    "binlogs list --host ''": (
        ["binlogs", "list", "--local-path", "{store}", "--cluster", "c1", "--host", ""],
        "--host",
    ),
}


@pytest.mark.parametrize(("argv", "flag"), OTHER_VERBS.values(), ids=OTHER_VERBS.keys())
def test_no_verb_takes_an_empty_value_as_no_value(store_dir, fleet_file, capsys, monkeypatch, argv, flag):
    argv = [a.format(store=store_dir, fleet=fleet_file) for a in argv]
    value = argv[argv.index(flag) + 1]
    _refused(capsys, monkeypatch, argv, flag, value)


# -- generated values ---------------------------------------------------------------------------------

BLANK = st.text(alphabet=" \t\n\r\x0b\x0c", max_size=4)
VALUE_FLAGS = [
    "--kind",
    "--table",
    "--schema",
    "--server",
    "--grep",
    "--gtid-from",
    "--gtid-to",
    "--backup-id",
]


@settings(
    derandomize=True,
    max_examples=int(os.environ.get("XBP_PROPERTY_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    flag=st.sampled_from(VALUE_FLAGS),
    value=st.one_of(BLANK, st.text(max_size=12), st.from_regex(r"[a-z]{1,4}\.[a-z]{0,3}|,+|\(+")),
)
def test_any_value_of_an_events_filter_is_used_or_refused_in_one_line(
    store_dir, capsys, monkeypatch, flag, value
):
    """A value is either a filter that can match something, or refused in one line that shows any
    value quoted; a blank one is always refused naming the flag (it would be no filter)."""
    if "\x00" in value:
        return  # argv cannot carry NUL
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    try:
        rc = cli.main(
            ["binlogs", "events", *_host_args(store_dir), f"{flag}={value}"]
        )  # a value may start with -
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc in (0, 2), (rc, err)
    if not value.strip():
        assert rc == 2
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert not any(c in lines[0] for c in "\t\r\x0b\x0c"), f"a value not shown with repr: {lines[0]!r}"
        if not value.strip():
            assert flag in lines[0] and repr(value) in lines[0], lines[0]


def test_the_restore_says_how_each_flavours_copy_becomes_a_replica():
    """A clone copy holds its GTIDs in gtid_executed: `SET GLOBAL gtid_purged` (printed before for
    every MySQL restore) fails there, so it is told to use auto-position alone."""
    from xtrabackup_provider.cli.backups import replica_advice

    assert "gtid_slave_pos = '0-1-5'" in replica_advice("mariabackup", "0-1-5")
    assert "gtid_purged = 'u:1-5'" in replica_advice("xtrabackup", "u:1-5")
    clone = replica_advice("clone", "u:1-5")
    assert "gtid_purged" not in clone and "SOURCE_AUTO_POSITION = 1" in clone
