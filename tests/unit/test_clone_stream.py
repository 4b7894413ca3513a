"""The clone engine's pure parts: its xbstream writer and extractor (a round trip, what mbstream makes
of the same stream, streams it must refuse), the refusals, the metadata the backup verb reads, and
the policy that never plans an incremental for it."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from manifest_factory import make_manifest
from xtrabackup_provider.core.backup.decide import ChainPolicy, decide
from xtrabackup_provider.core.engine import clone
from xtrabackup_provider.core.engine.argv import prepare_steps
from xtrabackup_provider.core.engine.metadata import read_binlog_position, read_checkpoints
from xtrabackup_provider.core.engine.tools import detect_tool
from xtrabackup_provider.core.engine.xbstream import (
    HEADER,
    MAGIC,
    PAYLOAD_HEADER,
    XbstreamError,
    check_stream,
)


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and every directory (None) under root."""
    out: dict[str, bytes | None] = {}
    for here, dirs, files in os.walk(root):
        for d in dirs:
            out[str((Path(here) / d).relative_to(root))] = None
        for f in files:
            out[str((Path(here) / f).relative_to(root))] = (Path(here) / f).read_bytes()
    return out


@pytest.fixture
def datadir(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    (root / "shop").mkdir(parents=True)
    (root / "empty_schema").mkdir()
    (root / "#innodb_redo").mkdir()
    (root / "shop" / "orders.ibd").write_bytes(os.urandom(clone.CHUNK * 2 + 12345))
    (root / "shop" / "zero").write_bytes(b"")
    (root / "#innodb_redo" / "#ib_redo9").write_bytes(b"redo")
    (root / "xtrabackup_checkpoints").write_text("backup_type = full-prepared\nfrom_lsn = 0\nto_lsn = 9\n")
    return root


def _stream(root: Path) -> bytes:
    out = io.BytesIO()
    clone.write_stream(root, out)
    return out.getvalue()


def test_a_copy_comes_back_whole_with_its_empty_directories(datadir, tmp_path):
    data = _stream(datadir)
    clone.extract(io.BytesIO(data), tmp_path / "out")
    assert _tree(tmp_path / "out") == _tree(datadir)


def test_the_stream_passes_the_framing_check_and_mbstream_extracts_it(datadir, tmp_path):
    data = _stream(datadir)
    path = tmp_path / "s.xb"
    path.write_bytes(data)
    with path.open("rb") as fh:
        summary = check_stream(fh.fileno())
    assert summary.files == 5  # four files and the empty schema's marker
    mbstream = shutil.which("mbstream")
    if mbstream is None:
        pytest.skip("mbstream is not installed here (MariaDB's tools)")
    out = tmp_path / "mb"
    out.mkdir()
    with path.open("rb") as fh:
        subprocess.run([mbstream, "-x", "-C", str(out)], stdin=fh, check=True)
    assert (out / "shop" / "orders.ibd").read_bytes() == (datadir / "shop" / "orders.ibd").read_bytes()


def _chunk(kind: bytes, path: bytes, payload: bytes = b"", offset: int = 0, crc: int | None = None) -> bytes:
    head = HEADER.pack(MAGIC, 0, kind[0], len(path)) + path
    if kind == b"E":
        return head
    return (
        head
        + PAYLOAD_HEADER.pack(len(payload), offset, zlib.crc32(payload) if crc is None else crc)
        + payload
    )


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (_chunk(b"P", b"../escape", b"x") + _chunk(b"E", b"../escape"), "leaves the target"),
        (_chunk(b"P", b"/etc/escape", b"x") + _chunk(b"E", b"/etc/escape"), "leaves the target"),
        (_chunk(b"P", b"a", b"x", crc=1) + _chunk(b"E", b"a"), "bad CRC32"),
        (_chunk(b"P", b"a", b"x", offset=5) + _chunk(b"E", b"a"), "offset"),
        (_chunk(b"P", b"a", b"xyz"), "not closed"),
        (_chunk(b"P", b"a", b"xyz")[:-1], "ends inside a chunk"),
        (_chunk(b"E", b"a"), "never opened"),
        (HEADER.pack(MAGIC, 0, ord("D"), 1) + b"a", "unknown type"),
    ],
)
def test_the_extractor_refuses_what_is_not_a_whole_clone_stream(stream, message, tmp_path):
    with pytest.raises(XbstreamError, match=message):
        clone.extract(io.BytesIO(stream), tmp_path / "out")
    assert not (tmp_path / "escape").exists()


def test_the_extractor_runs_as_a_child_and_says_why_it_failed(tmp_path):
    proc = subprocess.run(
        clone.extract_argv(str(tmp_path / "out")), input=_chunk(b"P", b"a", b"xyz"), capture_output=True
    )
    assert proc.returncode == 1 and b"cut short" in proc.stderr


def test_metadata_is_read_as_any_backup_s(tmp_path):
    files = clone.metadata_files(
        binlog_file="mysql-bin.000003",
        binlog_position=4711,
        gtid="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-180",
        lsn=123456,
        server_version="9.7.4",
        start="2026-12-05 01:00:00",
        end="2026-12-05 01:00:03",
    )
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert read_checkpoints(tmp_path).to_lsn == 123456 and read_checkpoints(tmp_path).from_lsn == 0
    pos = read_binlog_position(tmp_path)
    assert (pos.file, pos.position, pos.gtid) == (
        "mysql-bin.000003",
        4711,
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-180",
    )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mariadb": True}, "this server is MariaDB: use flavour mariabackup"),
        ({"version": (8, 0, 16)}, "needs MySQL 8.0.17 or later"),
        ({"plugin": None}, "INSTALL PLUGIN clone SONAME 'mysql_clone.so'"),
        ({"plugin": "DISABLED"}, "is DISABLED"),
        ({"backup_admin": False}, "lacks BACKUP_ADMIN"),
    ],
)
def test_refusals_are_one_line(kw, message):
    args = {"mariadb": False, "version": (9, 7, 4), "plugin": "ACTIVE", "backup_admin": True} | kw
    problem = clone.refusal("host c1/db1", **args)
    assert problem and message in problem and "\n" not in problem
    assert (
        clone.refusal("host c1/db1", mariadb=False, version=(8, 0, 17), plugin="ACTIVE", backup_admin=True)
        is None
    )


def test_the_engine_has_no_prepare_and_no_tool_to_find():
    tool = detect_tool("clone", "/nonexistent/binary")
    assert prepare_steps(tool, "/base", []) == []
    assert not tool.capabilities.incremental


def test_the_policy_never_plans_an_incremental_for_clone():
    full = make_manifest(
        "20261201T000000Z-full", engine_flavour="clone", engine_version="1.0.0", engine_major="1.0"
    )
    now = datetime(2026, 12, 1, 1, tzinfo=UTC)
    assert decide([full], ChainPolicy(), now, engine=("xtrabackup", "8.0")).kind == "full"
    d = decide([full], ChainPolicy(), now, full.server_uuid, engine=("clone", "1.0"))
    assert d.kind == "full" and "full backups only" in d.reason and d.continuable is None


@pytest.mark.parametrize("move", [False, True])
def test_copy_back_fills_the_datadir_with_the_extracted_copy(datadir, tmp_path, move):
    expected = _tree(datadir)
    proc = subprocess.run(
        clone.copy_back_argv(str(datadir), str(tmp_path / "data"), move=move), capture_output=True
    )
    assert proc.returncode == 0, proc.stderr
    assert _tree(tmp_path / "data") == expected
    assert (list(datadir.iterdir()) == []) is move


def test_a_stream_arriving_in_odd_pieces_through_a_pipe_comes_back_whole(datadir, tmp_path):
    """The extractor as the restore runs it (a child reading a pipe) with the stream written in
    pieces that split headers and payloads anywhere, and a payload longer than its read buffer."""
    big = os.urandom(clone.CHUNK + 4097)
    data = _stream(datadir) + _chunk(b"P", b"shop/big.ibd", big) + _chunk(b"E", b"shop/big.ibd")
    proc = subprocess.Popen(
        clone.extract_argv(str(tmp_path / "out")), stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None
    at, step = 0, 1
    while at < len(data):
        proc.stdin.write(data[at : at + step])
        proc.stdin.flush()
        at += step
        step = step * 7 % 65521 + 1  # 1, 8, 57, ... never a chunk boundary on purpose
    proc.stdin.close()
    assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
    expected = _tree(datadir) | {"shop/big.ibd": big}
    assert _tree(tmp_path / "out") == expected
