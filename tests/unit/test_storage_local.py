"""storage.py (key checks, LocalStore; part sizing is tests/unit/test_partplan.py) and mysql.py's private defaults file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from xtrabackup_provider.core.db.server import MySQLTarget, ServerError, defaults_file
from xtrabackup_provider.core.storage.base import MiB, StorageError, check_key
from xtrabackup_provider.core.storage.local import LocalStore

# ---------------------------------------------------------------------------------------------
# keys


@pytest.mark.parametrize(
    "key",
    ["", "/abs/key", "a//b", "a/", "../x", "a/../b", "a/./b", ".", "..", "a/b/..", "a\x00b"],
)
def test_check_key_refuses_unsafe_keys(key):
    with pytest.raises(StorageError, match="unsafe object key"):
        check_key(key)


@pytest.mark.parametrize(
    "key", ["a", "p/c1/db1/backups/20261101T103000Z-full/manifest.json", "a/.hidden", "a..b"]
)
def test_check_key_accepts_plain_relative_keys(key):
    assert check_key(key) == key


def test_local_store_refuses_escaping_keys(tmp_path):
    store = LocalStore(tmp_path / "root")
    for key in ("../outside", "/etc/x", "a//b"):
        with pytest.raises(StorageError):
            store.put_bytes(key, b"x")
        with pytest.raises(StorageError):
            store.head(key)
    assert not (tmp_path / "outside").exists()


# ---------------------------------------------------------------------------------------------
# LocalStore


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "bucket")


def test_writer_data_is_invisible_until_commit(store):
    key = "c1/db1/backups/x/backup.xbstream.zst"
    writer = store.open_writer(key)
    writer.write(b"hello ")
    writer.write(b"world")
    assert store.head(key) is None
    assert list(store.list("")) == []
    assert list(store.list("c1/db1/backups/x/")) == []
    with pytest.raises(StorageError, match="no object"):
        store.get_bytes(key)
    assert writer.commit() == 11
    assert store.get_bytes(key) == b"hello world"
    info = store.head(key)
    assert info is not None and (info.key, info.size) == (key, 11)
    assert [i.key for i in store.list("")] == [key]
    assert files_under(store.root) == [key]


def test_writer_abort_leaves_no_object(store):
    key = "c1/db1/backups/x/backup.xbstream.zst"
    writer = store.open_writer(key)
    writer.write(b"partial data")
    writer.abort()
    assert store.head(key) is None
    assert list(store.list("")) == []
    assert files_under(store.root) == []


def test_commit_replaces_an_existing_object_whole(store):
    store.put_bytes("k", b"old contents that are longer")
    writer = store.open_writer("k")
    writer.write(b"new")
    assert store.get_bytes("k") == b"old contents that are longer"
    writer.commit()
    assert store.get_bytes("k") == b"new"


def test_list_by_prefix(store):
    keys = ["c1/db1/backups/a/m.json", "c1/db1/backups/b/m.json", "c1/db10/backups/c/m.json", "c2/db1/x"]
    for key in keys:
        store.put_bytes(key, key.encode())
    assert sorted(i.key for i in store.list("")) == sorted(keys)
    assert sorted(i.key for i in store.list("c1/db1/")) == keys[:2]
    # like S3, a prefix is a string prefix, not a directory
    assert sorted(i.key for i in store.list("c1/db")) == keys[:3]
    assert sorted(i.key for i in store.list("c1/db1/backups/a")) == keys[:1]
    assert list(store.list("nothing/here/")) == []
    assert {i.size for i in store.list("c2/")} == {len(b"c2/db1/x")}


def test_list_prefix_naming_a_directory_is_still_a_string_prefix(store):
    keys = ["c1/db1/a", "c1/db1.old", "c1/db10/b"]
    for key in keys:
        store.put_bytes(key, b"x")
    assert [i.key for i in store.list("c1/db1")] == sorted(keys)  # what S3Store returns for this prefix


def test_delete_removes_objects_and_ignores_missing(store):
    store.put_bytes("a/1", b"1")
    store.put_bytes("a/2", b"2")
    store.delete(["a/1", "a/missing"])
    assert [i.key for i in store.list("a/")] == ["a/2"]


def test_read_chunks_round_trip(store):
    data = os.urandom(3 * MiB + 17)
    store.put_bytes("big/object", data)
    chunks = list(store.read_chunks("big/object", chunk_size=MiB))
    assert b"".join(chunks) == data
    assert [len(c) for c in chunks] == [MiB, MiB, MiB, 17]
    assert list(store.read_chunks("big/object")) == [data]


def test_read_chunks_of_a_missing_object_names_it(store):
    with pytest.raises(StorageError, match="no object 'nope/x'"):
        list(store.read_chunks("nope/x"))


def test_empty_object(store):
    store.put_bytes("empty", b"")
    assert store.get_bytes("empty") == b""
    assert list(store.read_chunks("empty")) == []
    info = store.head("empty")
    assert info is not None and info.size == 0


# ---------------------------------------------------------------------------------------------
# mysql.defaults_file


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_defaults_file_is_private_holds_the_password_and_is_removed(private_tmp):
    target = MySQLTarget(host="db1.internal", port=3307, user="backup", password="s3cr3t-pw")
    with defaults_file(target) as path:
        assert "s3cr3t-pw" not in path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        text = Path(path).read_text()
        assert text.splitlines() == [
            "[client]",
            'user="backup"',
            'password="s3cr3t-pw"',
            'host="db1.internal"',
            "port=3307",
        ]
    assert not os.path.exists(path)
    assert not os.path.exists(os.path.dirname(path))
    assert list(private_tmp.iterdir()) == []
    assert "s3cr3t-pw" not in repr(target)


def test_defaults_file_is_removed_when_the_body_fails(private_tmp):
    target = MySQLTarget(password="pw")
    with pytest.raises(RuntimeError), defaults_file(target) as path:
        raise RuntimeError("backup failed")
    assert not os.path.exists(path)
    assert list(private_tmp.iterdir()) == []


def test_defaults_file_with_socket(private_tmp):
    target = MySQLTarget(socket="/run/mysqld/mysqld.sock", user="root", password=None)
    with defaults_file(target) as path:
        assert Path(path).read_text().splitlines() == [
            "[client]",
            'user="root"',
            'socket="/run/mysqld/mysqld.sock"',
        ]


@pytest.mark.parametrize(
    ("password", "written"),
    [
        ('pa"ss', r'password="pa\"ss"'),
        ("back\\slash", r'password="back\\slash"'),
        ("ends with \\", r'password="ends with \\"'),
        ("it's # not a comment ", 'password="it\'s # not a comment "'),
    ],
)
def test_defaults_file_quotes_special_characters(private_tmp, password, written):
    with defaults_file(MySQLTarget(password=password)) as path:
        assert written in Path(path).read_text().splitlines()


@pytest.mark.parametrize("password", ["line1\nline2", "x\r[mysqld]"])
def test_defaults_file_refuses_newlines_and_leaves_nothing(private_tmp, password):
    with pytest.raises(ServerError, match="line break"), defaults_file(MySQLTarget(password=password)):
        pass
    assert list(private_tmp.iterdir()) == []


def test_existing_defaults_file_is_used_as_is_and_kept(private_tmp):
    existing = private_tmp / "my.cnf"
    existing.write_text("[client]\nuser=x\n")
    with defaults_file(MySQLTarget(defaults_file=str(existing))) as path:
        assert path == str(existing)
    assert existing.read_text() == "[client]\nuser=x\n"


def test_a_writer_stopped_while_holding_the_directory_lock_is_an_error_naming_it_not_a_hang(
    tmp_path, monkeypatch
):
    """A shipper SIGSTOPped (or its VM frozen) inside a conditional write of the host lock held the
    directory's flock: the next run's takeover waited forever (a loaded CI run: 300 s, then killed)."""
    import signal
    import subprocess
    import sys
    import threading

    from xtrabackup_provider.core.storage import local
    from xtrabackup_provider.core.storage.base import StorageError

    store = LocalStore(tmp_path / "store")
    store.put_bytes("backups/c1/db1/backup.lock", b"{}")
    directory = tmp_path / "store" / "backups" / "c1" / "db1"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, signal, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); os.kill(os.getpid(), signal.SIGSTOP)",
            str(directory),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(local, "DIR_LOCK_WAIT", 1.0, raising=False)
        outcome: list[object] = []

        def write() -> None:
            try:
                outcome.append(store.put_new("backups/c1/db1/backup.lock", b"{}", if_match=None))
            except StorageError as exc:
                outcome.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(timeout=20)
        assert not writer.is_alive(), "the conditional write still waits for the stopped process's lock"
        (error,) = outcome
        assert isinstance(error, StorageError), error
        assert str(directory) in str(error) and "nothing was written" in str(error), error
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
