"""Property-based checks of the boundary: every parser and model either accepts a value it can
work with, or refuses it with its own error (ValueError, ConfigError, CatalogError, PitrError,
BinlogFormatError, XbstreamError), never another exception; and what it accepts survives the
code built on it (conversions, comparisons, the PITR plan, the CLI). Fixed seeds (derandomize),
so the suite is reproducible and new code is fuzzed too.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import struct
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers import xbstream
from manifest_factory import make_manifest
from xtrabackup_provider import cli
from xtrabackup_provider.cli.options import utc_time
from xtrabackup_provider.core.binlog.catalog import BinlogError, BinlogIndex, BinlogManifest
from xtrabackup_provider.core.binlog.events import MAGIC, BinlogFormatError, iter_events
from xtrabackup_provider.core.catalog.chain import resolve_chain
from xtrabackup_provider.core.catalog.manifest import CatalogError, manifest_summary, parse_manifest
from xtrabackup_provider.core.common.values import (
    EARLIEST,
    LATEST,
    binlog_number,
    format_gtid_pos,
    gtid_reached,
    parse_gtid_pos,
    parse_utc,
)
from xtrabackup_provider.core.config.load import load_config, parse_config
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.config.wiring import chain_policy
from xtrabackup_provider.core.engine.xbstream import XbstreamChecker, XbstreamError
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget, choose_backup, plan_binlogs

SETTINGS = settings(
    derandomize=True,
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Values a hostile or careless writer puts anywhere: edges of every type, digits of other scripts.
WEIRD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "..",
        "../x",
        "/abs",
        "a//b",
        "\x00",
        "\u00b2",
        "\u0664\u0662",
        "0-1-1",
        "0-1-\u00b2",
        "4294967296-1-1",
        "0-1-18446744073709551616",
        "mysql-bin.000001",
        "mysql-bin.\u0660\u0660\u0660\u0660\u0660\u0661",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "2026-11-30T10:15:00",
        "2026-11-30T10:15:00Z",
        "x" * 5000,
        "nan",
        "inf",
    ]
)
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**32 - 1, 2**32, 2**63, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, -1e300, math.inf, -math.inf]),
    WEIRD_TEXT,
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a JSON-like tree (the places a mutation can hit)."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for n, value in enumerate(node):
            found += _paths(value, (*prefix, n))
    return found


def _mutate(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(tree)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


# -- GTIDs, binlog names, times ---------------------------------------------------------------------


@SETTINGS
@given(st.one_of(WEIRD_TEXT, st.text(max_size=60), st.from_regex(r"[0-9]{1,21}-[0-9]{1,21}-[0-9]{1,21}")))
def test_gtid_text_is_parsed_within_mariadbs_ranges_or_refused(text):
    try:
        pos = parse_gtid_pos(text)
    except ValueError:
        return
    for gtid in pos.values():
        assert 0 <= gtid.domain < 2**32 and 0 <= gtid.server_id < 2**32 and 0 <= gtid.seq < 2**64
    assert parse_gtid_pos(format_gtid_pos(pos)) == pos
    assert gtid_reached(pos, pos)


@SETTINGS
@given(
    st.integers(0, 2**32 + 2),
    st.integers(0, 2**32 + 2),
    st.integers(0, 2**64 + 2),
    st.sampled_from(["", "\u0661"]),
)
def test_a_gtid_outside_the_ranges_or_with_other_digits_is_refused(domain, server, seq, extra):
    text = f"{domain}-{server}-{seq}{extra}"
    inside = domain < 2**32 and server < 2**32 and seq < 2**64 and not extra
    if inside:
        assert str(parse_gtid_pos(text)[domain]) == text
    else:
        with pytest.raises(ValueError):
            parse_gtid_pos(text)
    with pytest.raises(PitrError) if not inside else contextlib.nullcontext():
        PitrTarget.at_gtid(text)


@SETTINGS
@given(st.one_of(WEIRD_TEXT, st.text(max_size=40)))
def test_binlog_names_and_positions_are_parsed_or_refused(text):
    try:
        base, number = binlog_number(text)
    except ValueError:
        pass
    else:
        assert text == f"{base}.{text.rsplit('.', 1)[1]}" and number >= 0 and text.isascii()
    try:
        target = PitrTarget.at_position(text)
    except PitrError:
        return
    assert target.position is not None and 4 <= target.position < 2**63


def _iso(value: datetime) -> str:
    return value.isoformat()


OFFSETS = st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-23 * 60 - 59, 23 * 60 + 59))


@SETTINGS
@given(
    st.one_of(
        WEIRD_TEXT,
        st.text(max_size=40),
        st.datetimes().map(_iso),
        st.datetimes(timezones=OFFSETS).map(_iso),
    )
)
def test_times_are_aware_utc_inside_the_calendar_or_refused(text):
    try:
        when = parse_utc(text, "--to-time")
    except ValueError as exc:
        assert "--to-time" in str(exc)
        when = None
    if when is not None:
        assert when.tzinfo is UTC and EARLIEST <= when < LATEST
        when - timedelta(days=36_500)  # retention looks back this far
        when + timedelta(days=36_500)
    for parse, error in ((PitrTarget.at_time, PitrError), (utc_time, argparse.ArgumentTypeError)):
        try:
            parse(text)
        except error:
            assert when is None
        else:
            assert when is not None


# -- files: binlogs and xbstreams ---------------------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_after_the_binlog_magic_are_walked_or_refused(data):
    try:
        events = list(iter_events(io.BytesIO(MAGIC + data)))
    except BinlogFormatError:
        return
    assert all(4 <= e.offset < e.end <= 4 + len(data) for e, _ in events)


def _stream() -> bytes:
    return xbstream([("ibdata1", b"\0" * 100), ("xtrabackup_checkpoints", b"backup_type = full-backuped\n")])


@SETTINGS
@given(st.one_of(st.binary(max_size=300), st.tuples(st.integers(0, 299), st.integers(0, 255))))
def test_any_stream_is_checked_or_refused_by_the_xbstream_checker(case):
    if isinstance(case, tuple):  # one byte of a good stream changed
        good = bytearray(_stream())
        at, value = case
        good[at % len(good)] = value
        data = bytes(good)
    else:
        data = case
    checker = XbstreamChecker()
    try:
        checker.feed(data)
        summary = checker.finish()
    except XbstreamError:
        return
    assert summary.files >= 1 and summary.stream_bytes == len(data)


def test_a_lone_end_of_file_chunk_is_not_the_checkpoints_file():
    name = b"xtrabackup_checkpoints"
    lone_end = b"XBSTCK01\x00E" + struct.pack("<I", len(name)) + name
    for stream in (lone_end, xbstream([("ibdata1", b"\0" * 100)]) + lone_end):
        checker = XbstreamChecker()
        checker.feed(stream)
        with pytest.raises(XbstreamError, match="no xtrabackup_checkpoints"):
            checker.finish()
    checker = XbstreamChecker()
    checker.feed(_stream())
    assert checker.finish().files == 2


# -- manifests ----------------------------------------------------------------------------------------


def _good_manifest() -> dict[str, Any]:
    m = make_manifest(
        "20261101T000000Z-full",
        engine_flavour="mariabackup",
        engine_version="10.11.19",
        engine_major="10.11",
        binlog_file="mysql-bin.000001",
        binlog_position=4,
        gtid="0-1-10",
    )
    return json.loads(m.to_json())


GOOD_MANIFEST = _good_manifest()
TARGETS = [
    PitrTarget.at_time("2026-11-02T00:00:00Z"),
    PitrTarget.at_gtid("0-1-20"),
    PitrTarget.at_position("mysql-bin.000002:4"),
]


@SETTINGS
@given(st.sampled_from(_paths(GOOD_MANIFEST)), WEIRD)
def test_a_manifest_with_any_field_changed_is_usable_or_refused_by_name(path, value):
    body = _mutate(GOOD_MANIFEST, path, value)
    try:
        data = json.dumps(body).encode()
    except (TypeError, ValueError):
        return
    try:
        m = parse_manifest(data, "store/manifest.json")
    except CatalogError as exc:
        assert "store/manifest.json" in str(exc)
        return
    manifest_summary([m])
    assert parse_manifest(m.to_json(), "again") == m
    try:
        resolve_chain({m.backup_id: m}, m.backup_id)
    except CatalogError:
        pass
    for target in TARGETS:
        try:
            choose_backup([m], target)
        except PitrError:
            pass


def _good_binlog() -> dict[str, Any]:
    obj = GOOD_MANIFEST["objects"][0] | {"key": "backups-prod/c1/db1/binlogs/u1/mysql-bin.000001.zst"}
    return {
        "name": "mysql-bin.000001",
        "cluster": "c1",
        "host": "db1",
        "server_uuid": "u1",
        "server_id": 1,
        "complete": True,
        "size": 100,
        "sha256": "ab" * 32,
        "events": 3,
        "first_event_time": "2026-11-01T00:00:00+00:00",
        "last_event_time": "2026-11-01T01:00:00+00:00",
        "covers_until": "2026-11-01T01:00:00+00:00",
        "gtid_first": "0-1-11",
        "gtid_last": "0-1-20",
        "segments": [{"offset": 0, "raw_size": 100, "raw_sha256": "ab" * 32, "object": obj}],
        "shipped_at": "2026-11-01T02:00:00+00:00",
    }


GOOD_BINLOG = _good_binlog()


@SETTINGS
@given(st.sampled_from(_paths(GOOD_BINLOG)), WEIRD)
def test_a_binlog_manifest_with_any_field_changed_is_usable_or_refused(path, value):
    from pydantic import ValidationError

    body = _mutate(GOOD_BINLOG, path, value)
    try:
        m = BinlogManifest.model_validate_json(json.dumps(body))
    except (ValidationError, TypeError, ValueError):
        return
    m.gtids()
    index = BinlogIndex.of(m.server_uuid, [m])
    index.covers_gtid(parse_gtid_pos("0-1-15"))
    index.chain_from(m.name)
    backup = make_manifest(
        "20261101T000000Z-full",
        binlog_file=m.name,
        binlog_position=4,
        gtid="0-1-10",
        server_uuid=m.server_uuid,
    )
    for target in TARGETS:
        try:
            plan_binlogs(index, backup, target)
        except (PitrError, BinlogError):
            pass


# -- the fleet config ---------------------------------------------------------------------------------

GOOD_CONFIG = {
    "storage": {"local_path": "/srv/backups", "prefix": "backups", "object_lock": {"retain_days": 35}},
    "policy": {"full_every_days": 7, "max_incremental_ratio": 0.5},
    "retention": {"keep_last_chains": 2, "pitr_days": 7},
    "clusters": [
        {
            "name": "main",
            "checksum": {"source": "db1", "timeout_minutes": 240, "max_lag_seconds": 1},
            "binlogs": {"mode": "batch", "lag_timeout_minutes": 60, "storage_class": "STANDARD"},
            "hosts": [
                {"name": "db1", "defaults_file": "/root/.my.cnf"},
                {
                    "name": "db2",
                    "socket": "/run/mysqld/mysqld.sock",
                    "checksum_gate": {"max_age_hours": 26, "wait_minutes": 30, "poke_seconds": 60},
                },
            ],
        }
    ],
}


def _derived(config: Any) -> None:
    """What the DAGs, sensors and the CLI compute from an accepted config."""
    chain_policy(config.policy)
    config.pools()
    lock = config.storage.object_lock
    if lock:
        datetime.now(UTC) + timedelta(days=lock.retain_days)
    timedelta(seconds=config.storage.glacier_poll_seconds)
    for cluster in config.clusters:
        if cluster.binlogs:
            timedelta(seconds=cluster.binlogs.lag_timeout_minutes * 60 + 60)
            timedelta(seconds=cluster.binlogs.continuous_minutes * 60 + 1800)
        if cluster.checksum:
            timedelta(minutes=cluster.checksum.timeout_minutes)
        for host in cluster.hosts:
            if gate := host.checksum_gate:
                timedelta(hours=gate.max_age_hours)
                timedelta(seconds=gate.wait_minutes * 60 + 60)
                timedelta(seconds=gate.poke_seconds)


@SETTINGS
@given(st.sampled_from(_paths(GOOD_CONFIG)), WEIRD)
def test_a_config_with_any_field_changed_works_or_is_refused_in_one_line(path, value):
    try:
        config = parse_config(_mutate(GOOD_CONFIG, path, value), "fleet.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("fleet.yaml: ") and "\n" not in str(exc)
        return
    _derived(config)


@SETTINGS
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_any_file_as_a_config_loads_or_is_refused_in_one_line(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cfg") / "fleet.yaml"
    path.write_bytes(data)
    try:
        _derived(load_config(path))
    except ConfigError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)


# -- the CLI's arguments ------------------------------------------------------------------------------

FLAG_VALUES = {
    "--cluster": st.one_of(st.just("c1"), WEIRD_TEXT),
    "--host": st.one_of(st.just("db1"), WEIRD_TEXT),
    "--prefix": st.one_of(st.just("backups-prod"), WEIRD_TEXT),
    "--backup-id": st.one_of(st.just("20261101T000000Z-full"), st.just("latest"), WEIRD_TEXT),
    "--to-time": st.one_of(WEIRD_TEXT, st.datetimes(timezones=OFFSETS).map(_iso)),
    "--to-gtid": st.one_of(WEIRD_TEXT, st.from_regex(r"[0-9]{1,12}-[0-9]{1,12}-[0-9]{1,21}", fullmatch=True)),
    "--to-position": st.one_of(WEIRD_TEXT, st.from_regex(r"mysql-bin\.[0-9]{6}:[0-9]{1,20}", fullmatch=True)),
    "--at": st.one_of(WEIRD_TEXT, st.datetimes(timezones=OFFSETS).map(_iso)),
}
COMMANDS = [
    ["list"],
    ["verify"],
    ["binlogs", "list"],
    ["retention", "plan", "--at"],
    ["restore", "--backup-id"],
    ["restore", "--to-time"],
    ["restore", "--to-gtid"],
    ["restore", "--to-position"],
]


@SETTINGS
@given(
    command=st.sampled_from(COMMANDS),
    values=st.fixed_dictionaries(FLAG_VALUES),
    weird=st.sets(st.sampled_from(["--cluster", "--host", "--prefix"])),
)
def test_any_cli_arguments_end_in_a_result_or_one_error_line(
    command, values, weird, catalog_dir, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    argv = [*command[:-1]] if command[-1].startswith("--") else list(command)
    if command[-1].startswith("--"):
        argv += [command[-1], values[command[-1]]]
    argv += ["--local-path", catalog_dir]
    for flag, default in (("--cluster", "c1"), ("--host", "db1"), ("--prefix", "backups-prod")):
        argv += [flag, values[flag] if flag in weird else default]
    if command[0] == "restore":
        target = tmp_path / f"t{os.getpid()}"
        argv += ["--target-datadir", str(target)]
    assume(all("\x00" not in a for a in argv))  # argv cannot carry NUL
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse refused a flag: usage and one error line
        rc = exc.code
        assert rc == 2
    captured = capsys.readouterr()
    assert rc in (0, 1, 2), (argv, rc, captured.err[-500:])
    if rc == 2:
        last = captured.err.rstrip().splitlines()[-1]
        assert "error: " in last, (argv, captured.err[-500:])
    if command[0] == "restore":
        assert not (tmp_path / f"t{os.getpid()}").exists()
