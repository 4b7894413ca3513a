"""Hypothesis strategies for xbstreams: chunk sequences an extractor meets (right, wrong and
hostile), and streams the framing check accepts (built chunk by chunk, keeping what it accepts).
The tests replay them through the real mbstream, so steering by the check biases nothing."""

from __future__ import annotations

from hypothesis import strategies as st

from xbstream_build import CHECKPOINTS, checkpoints, end, payload, remove, rename, seek
from xtrabackup_provider.core.engine.xbstream import XbstreamChecker, XbstreamError

DIRS, FILES = ["d", "e"], ["a", "b", "t.ibd", CHECKPOINTS]
# Odd spellings; ".." climbs at most one level: mbstream runs two levels below its sandbox.
ODD = [
    "./a",
    "d//b",
    "d/./b",
    "a/",
    "d/",
    ".",
    "",
    "x" * 256,
    "d/" + "y" * 256,
    "..",
    "../q",
    "d/..",
    "d/../b",
    "a\x00b",
]


def _path(draw) -> str:
    """Mostly files in a directory or two (often the same ones), sometimes an odd spelling or a
    directory used as a file."""
    roll = draw(st.integers(0, 19))
    if roll < 2:
        return draw(st.sampled_from(ODD))
    if roll < 3:
        return "/".join(draw(st.lists(st.sampled_from(DIRS + FILES), min_size=1, max_size=3)))
    dirs = draw(st.sampled_from([[], [], [], ["d"], ["d"], ["e"], ["d", "e"]]))
    return "/".join([*dirs, draw(st.sampled_from(FILES))])


def _data(draw) -> bytes:
    if draw(st.integers(0, 7)) == 0:  # page 0 of an InnoDB tablespace, maybe page-compressed
        page = bytearray(draw(st.sampled_from([60, 200])))
        page[54:58] = draw(st.sampled_from([0, 1 << 16, 0x30, 0x10])).to_bytes(4, "big")
        return bytes(page)
    return draw(st.binary(max_size=40))


def _chunk(draw, offsets: dict[str, int]) -> bytes:
    """One chunk (or a whole file); `offsets` is the writer's view of the files open."""
    op = draw(st.sampled_from("FFFFPPPEESDRQ"))
    path = _path(draw)
    flags = draw(st.sampled_from([0, 0, 0, 2, 2, 1, 3]))
    if op == "F" and path not in offsets:  # a whole file: payload and end
        return payload(path, _data(draw), flags=flags) + end(path)
    if op in "PQF":
        data = _data(draw)
        offset = offsets.get(path, 0) + (draw(st.integers(0, 1)) if draw(st.integers(0, 9)) == 0 else 0)
        crc = 12345 if draw(st.integers(0, 39)) == 0 else None
        offsets[path] = offset + len(data)
        if op == "Q":  # an unknown type, flagged ignorable
            return payload(path, data, offset, flags | 1, b"Q", crc)
        return payload(path, data, offset, flags, b"P", crc)
    if op == "E":
        offsets.pop(path, None)
        return end(path, flags)
    if op == "S":
        offset = draw(st.sampled_from([0, 0, 2, 64, 1 << 63]))
        offsets[path] = offset
        return seek(path, offset, flags)
    if op == "D":
        return remove(path)
    return rename(path, _path(draw))


@st.composite
def streams(draw) -> bytes:
    """Chunks an extractor meets, mostly after a good xtrabackup_checkpoints."""
    out = bytearray(checkpoints() if draw(st.booleans()) or draw(st.booleans()) else b"")
    offsets: dict[str, int] = {}
    for _ in range(draw(st.integers(1, 12))):
        out += _chunk(draw, offsets)
    return bytes(out)


def _accepted(stream: bytes) -> XbstreamChecker | None:
    checker = XbstreamChecker()
    try:
        checker.feed(stream)
    except XbstreamError:
        return None
    return checker


@st.composite
def accepted_streams(draw, most: int = 16) -> bytes:
    """A stream the check accepts: each drawn chunk is kept only if the stream so far still passes,
    and what is open at the end is closed."""
    out = checkpoints()
    offsets: dict[str, int] = {}
    for _ in range(draw(st.integers(1, most))):
        mine = dict(offsets)
        chunk = _chunk(draw, mine)
        if _accepted(out + chunk) is not None:
            out, offsets = out + chunk, mine
    checker = _accepted(out)
    assert checker is not None
    for path, entry in sorted(checker.open.items()):  # an empty payload first: a rename may be last
        out += payload(path, b"", entry.offset) + end(path)
    return out
