"""K-part streams (core/pipeline/split.py, to_parts.py) with the real mbstream: every part is a valid
xbstream, K concurrent `mbstream -x` into one directory and then the tail give what one `mbstream -x`
of the whole stream gives, and a failure commits no part."""

from __future__ import annotations

import hashlib
import os
import shlex
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers import xbstream
from xbstream_build import CHECKPOINTS, checkpoints, end, mbstream_x, payload, remove, rename, whole_file
from xbstream_strategies import accepted_streams
from xtrabackup_provider.core.engine.xbstream import XbstreamChecker, XbstreamError, check_parts
from xtrabackup_provider.core.pipeline.from_store import stream_from_store
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.pipeline.split import PartPlan, SplitError, Splitter, plan_parts
from xtrabackup_provider.core.pipeline.to_parts import stream_to_parts
from xtrabackup_provider.core.storage.local import LocalStore

PREFIX = "c1/db1/backups/20261101T103000Z-full/"


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _extract(streams: list[bytes], into: Path) -> None:
    """Extract the streams at once into one directory, as a K-part restore does."""
    into.mkdir(exist_ok=True)
    procs = [
        subprocess.Popen(["mbstream", "-x", "-C", str(into)], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in streams
    ]
    for proc, data in zip(procs, streams, strict=True):
        _, err = proc.communicate(data)
        assert proc.returncode == 0 and not err, err


def _op(kind: bytes, path: bytes, new: bytes = b"") -> bytes:
    rest = struct.pack("<I", len(new)) + new if kind == b"R" else b""
    return b"XBSTCK01\x00" + kind + struct.pack("<I", len(path)) + path + rest


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> bytes:
    """A stream by the real mbstream -c (several multi-chunk files, nested directories), then
    MariaDB's rename and remove chunks as DDL during a backup leaves them."""
    src = tmp_path_factory.mktemp("src")
    files = {
        "xtrabackup_checkpoints": b"backup_type = full-backuped\nfrom_lsn = 0\n",
        "backup-my.cnf": b"[mysqld]\n",
        "ibdata1": hashlib.sha256(b"i").digest() * 400_000,  # 12.8 MB: two 10 MiB chunks
        "db/big.ibd": bytes(range(256)) * 30_000,
        "db/mid.ibd": b"m" * 3_000_000,
        "db/a.MAD": b"aria",
        "db/gone.frm": b"frm",
        **{f"db/s{i}.frm": str(i).encode() * 100 for i in range(20)},
    }
    for name, data in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    made = subprocess.run(["mbstream", "-c", *files], cwd=src, capture_output=True, check=True).stdout
    again = xbstream([("db/b.MAD", b"aria, rebuilt")])
    again = again[:8] + b"\x02" + again[9:]  # sent again with the rewrite flag: opened with truncation
    ops = _op(b"R", b"db/a.MAD", b"db/b.MAD") + _op(b"D", b"db/gone.frm") + again
    return made + ops


def _split(data: bytes, k: int, piece: int) -> tuple[list[bytes], bytes, Splitter]:
    parts = [bytearray() for _ in range(k)]
    tail = bytearray()
    splitter = Splitter([p.extend for p in parts], tail.extend, "mariabackup")
    for at in range(0, len(data), piece):
        splitter.feed(data[at : at + piece])
    splitter.finish()
    return [bytes(p) for p in parts], bytes(tail), splitter


@pytest.mark.parametrize("piece", [13, 4096, 1 << 20])
def test_k_parts_extracted_at_once_then_the_tail_equal_one_stream(stream, tmp_path, piece):
    parts, tail, splitter = _split(stream, 3, piece)
    whole, split = tmp_path / "whole", tmp_path / "split"
    _extract([stream], whole)
    _extract(parts, split)
    _extract([tail], split)
    assert _tree(split) == _tree(whole)
    seen = []
    for part in parts:  # each part is well-formed on its own; only part 0 has the metadata
        checker = XbstreamChecker(role="part")
        checker.feed(part)
        checker.finish()
        seen.append(set(checker.tree.files()))
    assert {"xtrabackup_checkpoints", "backup-my.cnf"} <= seen[0]
    assert not (seen[0] & seen[1] or seen[1] & seen[2] or seen[0] & seen[2]), "a file in two parts"
    assert all(parts) and sum(splitter.routed) + splitter.tail_bytes == len(stream) and not splitter.added
    # as deep verify checks them: the tail onto the parts' tree, which then is the restore's
    restored = check_parts(parts, tail)
    assert restored.files() == {path: len(data) for path, data in _files(split).items()}
    # the rename, the remove, and the rewrite of the renamed name
    assert (split / "db/b.MAD").read_bytes() == b"aria, rebuilt" and not (split / "db/a.MAD").exists()


def test_any_piece_size_splits_the_same(stream):
    small = xbstream([(f"db/f{i}", bytes([i]) * (i * 7)) for i in range(1, 12)]) + _op(b"D", b"db/f3")
    expected = _split(small, 2, len(small))[:2]
    for piece in range(1, 60):  # every header straddles two pieces at some size
        assert _split(small, 2, piece)[:2] == expected


def test_a_stream_cut_inside_a_chunk_or_with_an_unknown_chunk_type_is_not_split(stream):
    with pytest.raises(SplitError, match="ends inside a chunk"):
        _split(stream[:-3], 2, 4096)
    with pytest.raises(SplitError, match="unknown type 0x51"):
        _split(stream + _op(b"Q", b"db/x"), 2, 4096)


def test_the_plan_puts_large_files_apart_and_stops_adding_parts_that_do_not_help(tmp_path):
    (tmp_path / "db").mkdir()
    for name, size in {"db/a.ibd": 600, "db/b.ibd": 500, "db/c.ibd": 100, "ib_logfile0": 5000}.items():
        (tmp_path / name).write_bytes(b"x" * size)
    two = plan_parts(str(tmp_path), 2)
    assert two.parts == 2 and two.owner["db/a.ibd"] != two.owner["db/b.ibd"]
    assert "ib_logfile0" not in two.owner  # preallocated redo: not what the stream carries
    # A third part would still hold a.ibd (600 of 1200): not worth it.
    assert plan_parts(str(tmp_path), 4).parts == 2
    assert plan_parts(None, 4).parts == 1


def _writers(store: LocalStore, k: int):
    keys = [f"{PREFIX}backup.p{i}of{k}.xbstream.zst" for i in range(k)] + [
        f"{PREFIX}backup.tail.xbstream.zst"
    ]
    return keys, [store.open_writer(key) for key in keys]


def test_stream_to_parts_stores_each_part_and_a_restore_of_them_equals_one_stream(stream, tmp_path):
    store = LocalStore(tmp_path / "bucket")
    src = tmp_path / "stream.xb"
    src.write_bytes(stream)
    keys, writers = _writers(store, 2)
    result = stream_to_parts(
        ["cat", str(src)], writers[:-1], writers[-1], encrypt_argv=None, flavour="mariabackup"
    )
    assert sum(p.raw_bytes for p in result.parts) + result.tail.raw_bytes == len(stream)
    for key, res in zip(keys, [*result.parts, result.tail], strict=True):
        stored = store.get_bytes(key)
        assert res.stored_bytes == len(stored) and res.sha256 == hashlib.sha256(stored).hexdigest()
    out = tmp_path / "out"
    out.mkdir()
    for key, res in zip(keys, [*result.parts, result.tail], strict=True):
        stream_from_store(
            store.read_chunks(key),
            ["mbstream", "-x", "-C", str(out)],
            decrypt_argv=None,
            expected_sha256=res.sha256,
            quiet_consumer=True,
        )
    whole = tmp_path / "whole"
    _extract([stream], whole)
    assert _tree(out) == _tree(whole)


@pytest.mark.parametrize(
    ("script", "error"),
    [
        (
            "cat {src}; echo 'mariabackup: disk full' >&2; exit 3",
            "backup tool failed .exit status 3.*disk full",
        ),
        ("head -c 100000 {src}", "ends inside a chunk"),
        ("cat {src}; printf XBSTCK01", "ends inside a chunk"),
    ],
)
def test_a_failed_k_part_stream_commits_no_part(stream, tmp_path, script, error):
    store = LocalStore(tmp_path / "bucket")
    src = tmp_path / "stream.xb"
    src.write_bytes(stream)
    keys, writers = _writers(store, 2)
    with pytest.raises((PipelineError, SplitError), match=error):
        stream_to_parts(
            ["sh", "-c", script.format(src=shlex.quote(str(src)))],
            writers[:-1],
            writers[-1],
            encrypt_argv=None,
            flavour="mariabackup",
        )
    assert [store.head(key) for key in keys] == [None, None, None]
    assert not list(store.list(PREFIX))


def test_a_dead_encryption_stage_fails_the_stream_by_name_and_commits_no_part(stream, tmp_path):
    store = LocalStore(tmp_path / "bucket")
    src = tmp_path / "stream.xb"
    src.write_bytes(stream)
    keys, writers = _writers(store, 2)
    with pytest.raises(PipelineError, match="gpg --encrypt of part . of 2 failed .exit status 2.*no key"):
        stream_to_parts(
            ["cat", str(src)],
            writers[:-1],
            writers[-1],
            encrypt_argv=["sh", "-c", "head -c 10 >/dev/null; echo 'gpg: no key' >&2; exit 2"],
            flavour="mariabackup",
        )
    assert not list(store.list(PREFIX))


def test_k_is_bounded_by_the_setting_the_size_the_cores_and_an_upload_cap(tmp_path):
    from xtrabackup_provider.core.backup.impact import ImpactSettings
    from xtrabackup_provider.core.backup.run import BackupRequest, choose_parts, usable_cores
    from xtrabackup_provider.core.catalog.backups import Catalog
    from xtrabackup_provider.core.db.server import MySQLTarget

    datadir = tmp_path / "data"
    (datadir / "db").mkdir(parents=True)
    for name in ("a", "b", "c", "d"):
        (datadir / "db" / f"{name}.ibd").write_bytes(b"x" * 100_000)

    def k(**request) -> int:
        req = BackupRequest(Catalog(LocalStore(tmp_path / "s"), "b", "c1", "db1"), MySQLTarget(), **request)
        plan = choose_parts(req, str(datadir), incremental=False)
        return 1 if plan is None else plan.parts

    assert k() == 1  # max_parts defaults to 1: one stream, as before K parts
    assert k(max_parts=4) == 1  # 400 kB of datadir is under one part_min_bytes (8 GiB)
    assert k(max_parts=4, part_min_bytes=200_000) == min(2, usable_cores())
    assert k(max_parts=4, part_min_bytes=0) == min(4, usable_cores())
    # An upload cap bounds one writer: K writers would upload K times as fast.
    capped = ImpactSettings(max_upload_bytes_per_second=1 << 20)
    assert k(max_parts=4, part_min_bytes=0, impact=capped) == 1


class _FailingWriter:
    """An ObjectWriter whose store refuses the data after the first MiB (an S3 outage, a full disk)."""

    def __init__(self, inner) -> None:
        self.inner, self.written = inner, 0

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.written > 1 << 20:
            raise OSError(28, "No space left on device")
        self.inner.write(data)

    def commit(self) -> int:
        return self.inner.commit()

    def abort(self) -> None:
        self.inner.abort()


def test_a_store_that_fails_mid_part_fails_the_stream_and_commits_no_part(stream, tmp_path):
    """Without encryption the compressor hands its output to the store thread through a queue: a
    dead store thread must not leave it (and the backup) waiting forever."""
    store = LocalStore(tmp_path / "bucket")
    src = tmp_path / "stream.xb"
    # 24 MiB that do not compress, in the first file: part 0's output fills the queue
    src.write_bytes(xbstream([("db/noise.ibd", os.urandom(24 << 20))]) + stream)
    keys, writers = _writers(store, 2)
    writers[0] = _FailingWriter(writers[0])
    with pytest.raises(PipelineError, match="No space left on device"):
        stream_to_parts(
            ["cat", str(src)],
            writers[:-1],
            writers[-1],
            encrypt_argv=None,
            flavour="mariabackup",
            level=1,
        )
    assert not list(store.list(PREFIX))


# -- issue 33 item 2: parts the check refuses, or a restore that differs from one stream's ------------

SPLIT_CASES = {
    # the remove sent the checkpoints to the tail: part 0 was refused ("no xtrabackup_checkpoints")
    "a remove of xtrabackup_checkpoints before it is written": (
        remove(CHECKPOINTS) + checkpoints() + whole_file("db/t.ibd", b"t" * 100),
        None,
    ),
    # the rename sent the rest of db/a to the tail: "files never closed" in the part, "File exists"
    "a rename onto a file still open": (
        checkpoints()
        + payload("db/a", b"x")
        + whole_file("db/b", b"qq")
        + rename("db/b", "db/a")
        + payload("db/a", b"y", offset=1)
        + end("db/a"),
        None,
    ),
    # the tail removed d/t.frm after a part had written it
    "D ./d/t.frm then the file": (checkpoints() + remove("./d/t.frm") + whole_file("d/t.frm", b"frm"), None),
    # part 1's only planned file was dropped during the backup: an empty part was refused
    "a part whose only planned file vanished": (
        checkpoints() + whole_file("db/a.ibd", b"a" * 100),
        PartPlan(2, {"db/a.ibd": 0, "db/gone.ibd": 1}, [100, 100]),
    ),
}


def _split_into(
    stream: bytes, k: int, plan: PartPlan | None = None, piece: int = 4096
) -> tuple[list[bytes], bytes]:
    parts = [bytearray() for _ in range(k)]
    tail = bytearray()
    splitter = Splitter([p.extend for p in parts], tail.extend, "mariabackup", plan)
    for at in range(0, len(stream), piece):
        splitter.feed(stream[at : at + piece])
    splitter.finish()
    return [bytes(p) for p in parts], bytes(tail)


def _same_restore(stream: bytes, k: int, plan: PartPlan | None = None, piece: int = 4096) -> None:
    """The K parts pass deep verify's check, and extracting them (at once, then the tail) with the
    real mbstream gives what extracting the one stream gives."""
    whole_check = XbstreamChecker()
    whole_check.feed(stream)
    whole_check.finish()
    whole = mbstream_x(stream)
    assert whole.ok, whole.stderr
    parts, tail = _split_into(stream, k, plan, piece)
    tree = check_parts(parts, tail)
    assert tree.files() == whole_check.tree.files() and tree.dirs() == whole_check.tree.dirs()
    split = mbstream_x(parts, then=tail)
    assert split.ok, split.stderr
    assert split.files == whole.files and split.dirs == whole.dirs


@pytest.mark.parametrize(("stream", "plan"), SPLIT_CASES.values(), ids=SPLIT_CASES.keys())
def test_a_split_stream_verifies_and_restores_as_the_one_stream(stream, plan):
    _same_restore(stream, 2, plan)


SPLIT_EXAMPLES = int(os.environ.get("XBP_PROPERTY_EXAMPLES", "15"))


@settings(
    derandomize=True,
    max_examples=SPLIT_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(accepted_streams(), st.sampled_from([7, 4096]), st.data())
def test_any_stream_the_check_accepts_restores_the_same_from_1_to_4_parts(stream, piece, data):
    checker = XbstreamChecker()
    checker.feed(stream)
    try:
        checker.finish()
    except XbstreamError:
        assume(False)  # the generated chunks removed the checkpoints: not a backup
    for k in range(1, 5):
        planned = data.draw(
            st.dictionaries(st.sampled_from(sorted(checker.tree.files())), st.integers(0, k - 1))
        )
        _same_restore(stream, k, PartPlan(k, planned, [1] * k), piece)
