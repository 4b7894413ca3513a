"""The xbstream framing check (deep verify's last stage) agrees with the real `mbstream -x`: it accepts
a stream exactly when mbstream extracts it (exit status 0, nothing said), and the tree it says the
stream makes is the tree mbstream leaves. Beyond mbstream it refuses only what its docstring lists
(a stream cut short, a path that leaves the target). XtraBackup's xbstream cannot be installed here:
its grammar is checked against the format as documented (the 'S' sparse chunk, no D/R/seek)."""

from __future__ import annotations

import os
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xbstream_build import (
    CHECKPOINTS,
    CHECKPOINTS_TEXT,
    checkpoints,
    end,
    head,
    mbstream_x,
    payload,
    remove,
    rename,
    seek,
    whole_file,
)
from xbstream_strategies import accepted_streams, streams
from xtrabackup_provider.core.engine.xbstream import XbstreamChecker, XbstreamError


def _check(stream: bytes, flavour: str = "mariabackup", role: str = "whole") -> XbstreamChecker:
    checker = XbstreamChecker(flavour, role)  # type: ignore[arg-type]
    for at in range(0, len(stream), 7):  # odd pieces: every header straddles a boundary somewhere
        checker.feed(stream[at : at + 7])
    checker.finish()
    return checker


def _agree(stream: bytes) -> XbstreamChecker | XbstreamError:
    real = mbstream_x(stream)
    try:
        checker = _check(stream)
    except XbstreamError as exc:
        assert not real.ok, f"the check refused what mbstream extracts: {exc}"
        return exc
    assert real.ok, f"the check accepted what mbstream refuses: {real.stderr.strip()}"
    assert checker.tree.files() == real.sizes
    assert checker.tree.dirs() == real.dirs
    return checker


# Streams `mbstream -x` does not extract (issue 33 item 1), each after a good xtrabackup_checkpoints:
# the check accepted every one of them.
REFUSED = {
    "path ./a (invalid filename)": whole_file("./a", b"x"),
    "path . (invalid filename)": whole_file(".", b"x"),
    "path a/./b (no directory a)": whole_file("a/./b", b"x"),
    "path a/ (is a directory)": whole_file("a/", b"x"),
    "a 300-byte file name (too long)": whole_file("a" * 300, b"x"),
    "the end-of-file chunk of b twice (file exists)": whole_file("b", b"x") + end("b"),
    "a seek reopening a closed file without the rewrite flag": (
        whole_file("b", b"x") + seek("b", 0) + payload("b", b"y") + end("b")
    ),
    "a rename onto a file still open, then its end (invalid checksum)": (
        payload("a", b"x") + whole_file("b", b"y") + rename("b", "a") + end("a")
    ),
    "an ignorable unknown chunk (mbstream writes it: out-of-order chunk)": (
        payload("a", b"x") + payload("a", b"z", kind=b"Q", flags=1) + end("a")
    ),
}


@pytest.mark.parametrize("stream", REFUSED.values(), ids=REFUSED.keys())
def test_what_mbstream_does_not_extract_the_check_refuses(stream):
    assert isinstance(_agree(checkpoints() + stream), XbstreamError)


# Streams mbstream extracts, with what they leave: the check accepts them and says the same tree.
EXTRACTED = {
    "an ignorable unknown chunk at the file's offset is written": (
        payload("a", b"x") + payload("a", b"z", offset=1, kind=b"Q", flags=1) + end("a"),
        {"a": 2},
    ),
    "a rename onto an open file: later payload goes to the replaced file": (
        payload("a", b"x")
        + whole_file("b", b"qq")
        + rename("b", "a")
        + payload("a", b"y", offset=1)
        + end("a"),
        {"a": 2},
    ),
    "a//b is a/b": (whole_file("d/x", b"1") + whole_file("d//b", b"xyz"), {"d/x": 1, "d/b": 3}),
    "a seek back then a write overwrites": (
        payload("c", b"abcdef") + seek("c", 2) + payload("c", b"XY", offset=2) + end("c"),
        {"c": 6},
    ),
    "a seek past the end then a write leaves a hole": (
        seek("c", 10) + payload("c", b"ab", offset=10) + end("c"),
        {"c": 12},
    ),
    "the rewrite flag on the seek reopens with truncation": (
        whole_file("b", b"xyz") + seek("b", 0, flags=2) + payload("b", b"q") + end("b"),
        {"b": 1},
    ),
    "a lone end-of-file chunk makes an empty file": (end("n"), {"n": 0}),
}


@pytest.mark.parametrize(("stream", "sizes"), EXTRACTED.values(), ids=EXTRACTED.keys())
def test_what_mbstream_extracts_the_check_accepts_with_the_same_tree(stream, sizes):
    checker = _agree(checkpoints() + stream)
    assert isinstance(checker, XbstreamChecker)
    assert checker.tree.files() == {CHECKPOINTS: len(CHECKPOINTS_TEXT), **sizes}


def test_checkpoints_only_seeked_and_never_written_are_not_a_whole_backup():
    """mbstream extracts it as an empty file; the stream holds no checkpoints."""
    stream = whole_file("ibdata1", b"\0" * 100) + seek(CHECKPOINTS, 10) + end(CHECKPOINTS)
    real = mbstream_x(stream)
    assert real.ok and real.files[CHECKPOINTS] == b""
    with pytest.raises(XbstreamError, match="no xtrabackup_checkpoints"):
        _check(stream)


@pytest.mark.parametrize("name", ["xtrabackup_checkpoints", "mariadb_backup_checkpoints"])
def test_a_whole_backup_holds_the_checkpoints_under_either_tools_name(name):
    """mariadb-backup 11.1+ writes mariadb_backup_checkpoints (MDEV-18931); a stream of 11.8 was
    refused as cut short before (tests/integration/test_verify.py on 11.8)."""
    stream = whole_file(name, CHECKPOINTS_TEXT) + whole_file("ibdata1", b"\0" * 100)
    assert _check(stream).tree.files()[name] == len(CHECKPOINTS_TEXT)
    with pytest.raises(XbstreamError, match="no xtrabackup_checkpoints or mariadb_backup_checkpoints"):
        _check(whole_file("mariadb_backup_info", b"x = 1\n") + whole_file("ibdata1", b"\0" * 100))


def test_an_ignorable_r_chunk_in_an_xtrabackup_stream_is_checked_not_an_assertion_error():
    """XtraBackup has no rename chunk: 'R' flagged ignorable is an unknown type. Its xbstream opens
    the file, checks the offset, and writes nothing (no checksum check for an unknown type)."""
    stream = checkpoints() + payload("db/x", b"zz", kind=b"R", flags=1, crc=7) + end("db/x")
    checker = _check(stream, "xtrabackup")
    assert checker.tree.files()["db/x"] == 0
    with pytest.raises(XbstreamError, match="does not continue"):
        _check(checkpoints() + payload("db/x", b"", offset=3, kind=b"R", flags=1) + end("db/x"), "xtrabackup")


# -- generated streams, replayed through the real mbstream -----------------------------------------------

EXAMPLES = int(os.environ.get("XBP_PROPERTY_EXAMPLES", "100"))
GENERATED = settings(
    derandomize=True,
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Refusals beyond mbstream (the checker's docstring): mbstream may extract these.
STRICTER = ("never closed", "no xtrabackup_checkpoints", "escape the target", "NUL byte", "target directory")


@GENERATED
@given(st.one_of(streams(), accepted_streams()))
def test_any_stream_is_accepted_exactly_when_mbstream_extracts_it_and_the_tree_is_the_same(stream):
    real = mbstream_x(stream)
    checker = XbstreamChecker()
    try:
        checker.feed(stream)
        checker.finish()
    except XbstreamError as exc:
        if any(reason in str(exc) for reason in STRICTER):
            if real.ok and ("never closed" in str(exc) or "no xtrabackup" in str(exc)):
                assert checker.tree.files() == real.sizes and checker.tree.dirs() == real.dirs
            return
        assert not real.ok, f"the check refused what mbstream extracts: {exc}"
        return
    assert real.ok, f"the check accepted what mbstream refuses: {real.stderr.strip()}"
    assert checker.tree.files() == real.sizes
    assert checker.tree.dirs() == real.dirs


# -- XtraBackup's grammar (from the format as documented: its xbstream is not installable here) -------------


def _sparse(path: str, pairs: list[tuple[int, int]], data: bytes, offset: int = 0) -> bytes:
    """XtraBackup's 'S': entries, payload length, offset, CRC32 of map + payload, the map, the payload."""
    smap = b"".join(struct.pack("<II", skip, n) for skip, n in pairs)
    body = smap + data
    return head(b"S", path) + struct.pack("<IQQI", len(pairs), len(data), offset, zlib.crc32(body)) + body


def test_an_xtrabackup_stream_reads_sparse_chunks_and_has_no_rename_remove_or_seek():
    stream = checkpoints() + _sparse("db/t.ibd", [(0, 4), (100, 2)], b"abcdef") + end("db/t.ibd")
    checker = _check(stream, "xtrabackup")
    assert checker.tree.files()["db/t.ibd"] == 106  # 4 bytes, a hole of 100, 2 bytes
    with pytest.raises(XbstreamError, match="sparse map does not match the payload"):
        _check(checkpoints() + _sparse("db/t.ibd", [(0, 4)], b"abcdef") + end("db/t.ibd"), "xtrabackup")
    for chunk in (remove("db/t.ibd"), rename("a", "b"), seek("a", 0)):
        with pytest.raises(XbstreamError, match="unknown type|ends inside a chunk"):
            _check(checkpoints() + chunk, "xtrabackup")


def test_an_xtrabackup_stream_has_no_rewrite_flag_and_no_leading_dot_rule():
    """A file sent again fails to create whatever its flags (no truncation); a name starting with '.'
    is mbstream's rule only; an absolute path is refused ("absolute path not allowed")."""
    with pytest.raises(XbstreamError, match="sent again"):
        _check(checkpoints() + whole_file("a", b"1") + whole_file("a", b"2", flags=2), "xtrabackup")
    assert _check(checkpoints() + whole_file(".hidden", b"1"), "xtrabackup").tree.files()[".hidden"] == 1
    with pytest.raises(XbstreamError, match="escape the target"):
        _check(checkpoints() + whole_file("/etc/x", b"1"), "xtrabackup")
