"""pipeline.py with small real processes: producer -> zstd -> store, and store -> zstd -d -> consumer."""

from __future__ import annotations

import hashlib
import shlex

import pytest

from xtrabackup_provider.core.pipeline import PipelineError, stream_from_store, stream_to_store
from xtrabackup_provider.core.storage import LocalStore

KEY = "c1/db1/backups/20261101T103000Z-full/backup.xbstream.zst"


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "bucket")


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def test_round_trip_is_exact(store, tmp_path):
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
    )
    assert out.read_bytes() == original
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(original).hexdigest()
    assert (back.stored_bytes, back.sha256, back.raw_bytes) == (len(stored), result.sha256, len(original))


def test_compressible_stream_is_stored_smaller(store):
    result = stream_to_store(sh("head -c 2000000 /dev/zero"), store.open_writer(KEY), encrypt_argv=None)
    assert result.raw_bytes == 2_000_000
    assert result.stored_bytes < 100_000


def test_empty_producer_round_trips_to_empty_output(store, tmp_path):
    out = tmp_path / "out.bin"
    result = stream_to_store(sh("true"), store.open_writer(KEY), encrypt_argv=None)
    assert result.raw_bytes == 0
    stream_from_store(
        store.read_chunks(KEY),
        sh(f"cat > {shlex.quote(str(out))}"),
        decrypt_argv=None,
        expected_sha256=result.sha256,
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


def test_wrong_expected_sha256_names_the_object(store, tmp_path):
    stored_object(store)
    with pytest.raises(PipelineError) as exc:
        stream_from_store(
            store.read_chunks(KEY),
            sh(f"cat > {tmp_path / 'out'}"),
            decrypt_argv=None,
            expected_sha256="0" * 64,
            object_name=KEY,
        )
    assert KEY in str(exc.value) and "does not match" in str(exc.value)


def test_failing_consumer_raises_with_its_status(store):
    sha = stored_object(store)
    with pytest.raises(PipelineError) as exc:
        stream_from_store(
            store.read_chunks(KEY),
            sh("echo 'disk full' >&2; exit 7"),
            decrypt_argv=None,
            expected_sha256=sha,
            consumer_name="mbstream -x",
        )
    assert (
        "mbstream -x" in str(exc.value)
        and "exit status 7" in str(exc.value)
        and "disk full" in str(exc.value)
    )


def test_failing_consumer_on_a_large_stream_raises_with_its_status(store):
    result = stream_to_store(sh("head -c 6000000 /dev/urandom"), store.open_writer(KEY), encrypt_argv=None)
    with pytest.raises(PipelineError, match="exit status 7"):
        stream_from_store(
            store.read_chunks(KEY, chunk_size=64 * 1024),
            sh("head -c 10 >/dev/null; exit 7"),
            decrypt_argv=None,
            expected_sha256=result.sha256,
        )


def test_damaged_object_is_reported_as_damaged(store, tmp_path):
    store.put_bytes(KEY, b"this is not zstd at all" * 100)
    with pytest.raises(PipelineError, match=f"{KEY}: zstd could not decompress it"):
        stream_from_store(
            store.read_chunks(KEY), sh(f"cat > {tmp_path / 'out'}"), decrypt_argv=None, object_name=KEY
        )
