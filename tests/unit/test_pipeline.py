"""pipeline.py with small real processes: producer -> zstd -> store, and store -> zstd -d -> consumer."""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from xtrabackup_provider.core.pipeline.from_store import stream_from_store
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.pipeline.to_store import stream_to_store
from xtrabackup_provider.core.storage.base import StorageError
from xtrabackup_provider.core.storage.local import LocalStore

KEY = "c1/db1/backups/20261101T103000Z-full/backup.xbstream.zst"


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "bucket")


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


# stream_from_store decodes with the zstd executable when it is installed (OS pipes, nothing through
# Python) and with python-zstandard otherwise: every restore-side guarantee is checked on both.
DECODERS = [pytest.param(True, id="zstd-cli"), pytest.param(False, id="python-zstandard")]


@pytest.fixture(params=DECODERS)
def zstd_cli(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_round_trip_is_exact(store, tmp_path, zstd_cli):
    src, out = tmp_path / "src.bin", tmp_path / "out.bin"
    seen: list[int] = []
    result = stream_to_store(
        sh(f"head -c 3000000 /dev/urandom | tee {shlex.quote(str(src))}; printf hello"),
        store.open_writer(KEY),
        encrypt_argv=None,
        progress=seen.append,
    )
    original = src.read_bytes() + b"hello"
    stored = store.get_bytes(KEY)
    assert result.raw_bytes == len(original) == 3_000_005
    assert result.stored_bytes == len(stored) == store.head(KEY).size
    assert result.sha256 == hashlib.sha256(stored).hexdigest()
    assert seen and seen == sorted(seen) and seen[-1] <= result.raw_bytes

    back = stream_from_store(
        store.read_chunks(KEY, chunk_size=256 * 1024),
        sh(f"cat > {shlex.quote(str(out))}"),
        decrypt_argv=None,
        expected_sha256=result.sha256,
        object_name=KEY,
        zstd_cli=zstd_cli,
    )
    assert out.read_bytes() == original
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(original).hexdigest()
    assert (back.stored_bytes, back.sha256, back.raw_bytes) == (len(stored), result.sha256, len(original))


def test_compressible_stream_is_stored_smaller(store):
    result = stream_to_store(sh("head -c 2000000 /dev/zero"), store.open_writer(KEY), encrypt_argv=None)
    assert result.raw_bytes == 2_000_000
    assert result.stored_bytes < 100_000


def test_empty_producer_round_trips_to_empty_output(store, tmp_path, zstd_cli):
    out = tmp_path / "out.bin"
    result = stream_to_store(sh("true"), store.open_writer(KEY), encrypt_argv=None)
    assert result.raw_bytes == 0
    stream_from_store(
        store.read_chunks(KEY),
        sh(f"cat > {shlex.quote(str(out))}"),
        decrypt_argv=None,
        expected_sha256=result.sha256,
        zstd_cli=zstd_cli,
    )
    assert out.read_bytes() == b""


def assert_nothing_stored(store: LocalStore) -> None:
    assert store.head(KEY) is None
    assert list(store.list("")) == []
    assert not [p for p in store.root.rglob("*") if p.is_file()]  # no .partial debris either


def test_failing_producer_raises_with_status_and_stderr_and_commits_nothing(store):
    with pytest.raises(PipelineError) as exc:
        stream_to_store(
            sh("printf abc; echo boom >&2; exit 3"),
            store.open_writer(KEY),
            encrypt_argv=None,
            producer_name="mariabackup",
        )
    msg = str(exc.value)
    assert "mariabackup" in msg and "exit status 3" in msg and "boom" in msg
    assert_nothing_stored(store)


def test_producer_failing_after_much_output_commits_nothing(store):
    with pytest.raises(PipelineError, match="exit status 1"):
        stream_to_store(sh("head -c 5000000 /dev/urandom; exit 1"), store.open_writer(KEY), encrypt_argv=None)
    assert_nothing_stored(store)


def test_producer_killed_by_signal_reports_the_signal(store):
    with pytest.raises(PipelineError, match="killed by signal 9"):
        stream_to_store(sh("printf abc; kill -KILL $$"), store.open_writer(KEY), encrypt_argv=None)
    assert_nothing_stored(store)


def test_missing_producer_executable_is_named(store):
    with pytest.raises(PipelineError, match="'no-such-backup-tool' not found"):
        stream_to_store(["no-such-backup-tool"], store.open_writer(KEY), encrypt_argv=None)
    assert_nothing_stored(store)


def stored_object(store: LocalStore, payload: bytes = b"payload " * 1000) -> str:
    return stream_to_store(
        sh(f"printf %s {shlex.quote(payload.decode())}"), store.open_writer(KEY), encrypt_argv=None
    ).sha256


def test_wrong_expected_sha256_names_the_object(store, tmp_path, zstd_cli):
    stored_object(store)
    with pytest.raises(PipelineError) as exc:
        stream_from_store(
            store.read_chunks(KEY),
            sh(f"cat > {tmp_path / 'out'}"),
            decrypt_argv=None,
            expected_sha256="0" * 64,
            object_name=KEY,
            zstd_cli=zstd_cli,
        )
    assert KEY in str(exc.value) and "the manifest and the object disagree" in str(exc.value)


def test_failing_consumer_raises_with_its_status(store, zstd_cli):
    sha = stored_object(store)
    with pytest.raises(PipelineError) as exc:
        stream_from_store(
            store.read_chunks(KEY),
            sh("echo 'disk full' >&2; exit 7"),
            decrypt_argv=None,
            expected_sha256=sha,
            consumer_name="mbstream -x",
            zstd_cli=zstd_cli,
        )
    assert (
        "mbstream -x" in str(exc.value)
        and "exit status 7" in str(exc.value)
        and "disk full" in str(exc.value)
    )


def test_failing_consumer_on_a_large_stream_raises_with_its_status(store, zstd_cli):
    result = stream_to_store(sh("head -c 6000000 /dev/urandom"), store.open_writer(KEY), encrypt_argv=None)
    with pytest.raises(PipelineError, match="exit status 7"):
        stream_from_store(
            store.read_chunks(KEY, chunk_size=64 * 1024),
            sh("head -c 10 >/dev/null; exit 7"),
            decrypt_argv=None,
            expected_sha256=result.sha256,
            zstd_cli=zstd_cli,
        )


def test_damaged_object_is_reported_as_damaged(store, tmp_path, zstd_cli):
    store.put_bytes(KEY, b"this is not zstd at all" * 100)
    with pytest.raises(PipelineError, match=f"{KEY}: zstd could not decompress it"):
        stream_from_store(
            store.read_chunks(KEY),
            sh(f"cat > {tmp_path / 'out'}"),
            decrypt_argv=None,
            object_name=KEY,
            zstd_cli=zstd_cli,
        )


# -- the restore side: which stage failed, and nothing left running ------------------------------------


def _children() -> set[int]:
    """Live (or unreaped) child processes of this test process."""
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            found.add(int(entry))
    return found


def big_object(store: LocalStore, size: int = 6_000_000) -> str:
    return stream_to_store(
        sh(f"head -c {size} /dev/urandom"), store.open_writer(KEY), encrypt_argv=None
    ).sha256


def test_round_trip_through_a_decrypt_stage(store, tmp_path, zstd_cli):
    """A first stage (standing in for gpg --decrypt) in front of zstd: the bytes come out exact."""
    sha = big_object(store)
    out = tmp_path / "out"
    result = stream_from_store(
        store.read_chunks(KEY, chunk_size=300_000),
        sh(f"cat > {shlex.quote(str(out))}"),
        decrypt_argv=["cat"],
        expected_sha256=sha,
        object_name=KEY,
        zstd_cli=zstd_cli,
    )
    assert result.sha256 == sha and result.raw_bytes == 6_000_000
    assert out.stat().st_size == 6_000_000


def test_failing_decrypt_stage_is_named_after_the_object(store, tmp_path, zstd_cli):
    sha = big_object(store)
    before = _children()
    with pytest.raises(PipelineError) as exc:
        stream_from_store(
            store.read_chunks(KEY, chunk_size=64 * 1024),
            sh(f"cat > {tmp_path / 'out'}"),
            decrypt_argv=sh(
                "head -c 100 >/dev/null; echo 'gpg: decryption failed: No secret key' >&2; exit 2"
            ),
            expected_sha256=sha,
            object_name=KEY,
            zstd_cli=zstd_cli,
        )
    msg = str(exc.value)
    assert f"gpg --decrypt of {KEY}" in msg and "exit status 2" in msg and "No secret key" in msg, msg
    assert _children() <= before, "a stage process was left behind"


def test_garbage_from_a_failing_decrypt_stage_blames_the_decrypt_stage(store, tmp_path, zstd_cli):
    """gpg streams plaintext before it can check the integrity tag: when it says the message was
    manipulated, zstd (and the extractor) also fail on what they got, but gpg is the cause."""
    sha = big_object(store)
    script = "cat >/dev/null; head -c 200000 /dev/urandom; echo 'gpg: WARNING: message was manipulated!' >&2; exit 2"
    with pytest.raises(PipelineError) as exc:
        stream_from_store(
            store.read_chunks(KEY),
            sh("cat >/dev/null"),
            decrypt_argv=sh(script),
            expected_sha256=sha,
            object_name=KEY,
            zstd_cli=zstd_cli,
        )
    msg = str(exc.value)
    if zstd_cli:
        assert f"gpg --decrypt of {KEY}" in msg and "manipulated" in msg, msg
    else:  # python-zstandard stops at the first bad block, before gpg has exited
        assert KEY in msg and ("manipulated" in msg or "zstd could not decompress" in msg), msg


def test_consumer_that_stops_reading_without_an_error_is_a_failure(store, zstd_cli):
    sha = big_object(store)
    with pytest.raises(PipelineError, match="exited before reading the whole of"):
        stream_from_store(
            store.read_chunks(KEY, chunk_size=64 * 1024),
            sh("head -c 10 >/dev/null"),
            decrypt_argv=None,
            expected_sha256=sha,
            object_name=KEY,
            consumer_name="mbstream -x",
            zstd_cli=zstd_cli,
        )


def test_download_error_is_raised_as_the_cause_and_no_process_is_left(store, tmp_path, zstd_cli):
    big_object(store)

    def failing() -> Iterator[bytes]:
        chunks = store.read_chunks(KEY, chunk_size=256 * 1024)
        yield next(chunks)
        yield next(chunks)
        raise StorageError("connection reset while reading the object")

    before = _children()
    with pytest.raises(StorageError, match="connection reset"):
        stream_from_store(
            failing(),
            sh(f"cat > {tmp_path / 'out'}"),
            decrypt_argv=["cat"],
            object_name=KEY,
            zstd_cli=zstd_cli,
        )
    assert _children() <= before, "a stage process was left behind"


def test_damaged_object_leaves_no_process_behind(store, tmp_path, zstd_cli):
    store.put_bytes(KEY, b"this is not zstd at all" * 300_000)  # 6.9 MB: more than the pipes hold
    before = _children()
    with pytest.raises(PipelineError, match=f"{KEY}: zstd could not decompress it"):
        stream_from_store(
            store.read_chunks(KEY, chunk_size=64 * 1024),
            sh(f"cat > {tmp_path / 'out'}"),
            decrypt_argv=None,
            object_name=KEY,
            zstd_cli=zstd_cli,
        )
    assert _children() <= before, "a stage process was left behind"


def test_zstd_cli_required_but_missing_is_a_clear_error(store, tmp_path, monkeypatch):
    sha = big_object(store, 1000)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(PipelineError, match="'zstd' not found"):
        stream_from_store(
            store.read_chunks(KEY), ["/bin/cat"], decrypt_argv=None, expected_sha256=sha, zstd_cli=True
        )


def test_without_the_zstd_executable_python_zstandard_decodes(store, tmp_path, monkeypatch):
    sha = big_object(store, 1_000_000)
    out = tmp_path / "out"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no zstd (nor sh): absolute paths only
    result = stream_from_store(
        store.read_chunks(KEY),
        ["/bin/dd", f"of={out}", "status=none"],
        decrypt_argv=None,
        expected_sha256=sha,
    )
    assert result.raw_bytes == 1_000_000 and out.stat().st_size == 1_000_000
