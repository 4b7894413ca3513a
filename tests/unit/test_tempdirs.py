"""Private temp dirs carry their owner (pid, its start time, machine and pid namespace); the next one
of a kind sweeps only those whose owner is proven dead (issue 38 item 7).

Before the fix (liveness by `kill(pid, 0)` on the pid in the name): the live GPG home of a process
in another pid namespace was swept (its pid is free here), the dir of a dead owner whose pid a new
process had taken was kept, and a dir an older release named after a free pid was swept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xtrabackup_provider.core.common.tempdirs import private_dir, private_workdir

# A process that makes a private dir through the product's own function, prints it, and waits
# for its stdin to close (or exits at once when told so).
MAKER = textwrap.dedent(
    """
    import os, sys
    from xtrabackup_provider.core.common.tempdirs import private_dir
    print(private_dir(sys.argv[1], sys.argv[2]), os.getpid(), flush=True)
    if sys.argv[3] == "wait":
        sys.stdin.read()
    """
)


def _made_by_a_dead_process(kind: str, root: Path) -> Path:
    out = subprocess.run(
        [sys.executable, "-c", MAKER, kind, str(root), "exit"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.split()[0])


def test_the_next_dir_of_a_kind_removes_those_of_dead_owners_only(tmp_path):
    debris = _made_by_a_dead_process("backup", tmp_path)
    (debris / "sub").mkdir()
    (debris / "sub" / "file").write_text("x")
    other_kind = _made_by_a_dead_process("binlog", tmp_path)
    # Names an older release wrote (the pid alone) prove nothing about their owner: kept.
    older = tmp_path / "xbp-backup-999999-abc123"
    older.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    link = tmp_path / f"{debris.name}-link"
    link.symlink_to(outside)

    seen = []
    mine = private_dir("backup", tmp_path, on_sweep=seen.append)
    again = private_dir("backup", tmp_path)  # this process's own dirs are never swept
    restore = private_dir("restore", tmp_path, label="20261202T000000Z-full", hidden=True)
    assert not debris.exists() and seen == [debris]
    assert mine.exists() and again.exists() and other_kind.exists() and older.exists()
    assert (outside / "keep").exists() and link.is_symlink()
    assert mine.name.startswith(f"xbp-backup-{os.getpid()}-") and oct(mine.stat().st_mode & 0o777) == "0o700"
    assert (
        restore.name.startswith(f".xbp-restore-{os.getpid()}-") and "-20261202T000000Z-full-" in restore.name
    )


def test_a_workdir_is_removed_when_its_block_ends(tmp_path):
    with private_workdir("backup", tmp_path) as work:
        (work / "lsn").mkdir()
    assert not work.exists()


needs_pid_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="a process in its own pid namespace needs root and unshare(1)",
)


def _in_new_pid_namespace(script: str, *args: str, **kw) -> subprocess.Popen[str]:
    """`script` runs as pid 1 of a new pid namespace (its own /proc), as in another container."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", script, *args]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kw)


def _pid_free_here() -> int:
    """A pid no process of this namespace has: the sweep here cannot take it for alive."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    return next(p for p in range(pid_max // 2, pid_max) if not Path(f"/proc/{p}").exists())


# pid 1 of the namespace: the next process it starts gets the pid it is given (ns_last_pid), makes
# its private dir, and waits for the test.
NAMESPACED_MAKER = textwrap.dedent(
    """
    import subprocess, sys
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(int(sys.argv[1]) - 1))
    sys.exit(subprocess.run([sys.executable, "-c", sys.argv[2], "gpg", sys.argv[3], "wait"]).returncode)
    """
)


@needs_pid_namespaces
def test_a_dir_of_a_live_process_in_another_pid_namespace_survives_a_sweep_here(tmp_path):
    """Two worker containers sharing /tmp: the other one's live GPG home is not ours to remove, even
    though its pid means nothing (or another process) here."""
    pid = _pid_free_here()
    other = _in_new_pid_namespace(NAMESPACED_MAKER, str(pid), MAKER, str(tmp_path))
    try:
        assert other.stdout is not None
        line = other.stdout.readline().split()
        theirs, their_pid = Path(line[0]), int(line[1])
        assert their_pid == pid and not Path(f"/proc/{pid}").exists(), "the pid must be free here"
        (theirs / "pubring.kbx").write_text("their keys")

        private_dir("gpg", tmp_path)  # sweeps the dead owners' GPG homes first

        assert (theirs / "pubring.kbx").read_text() == "their keys", "another namespace's live dir was swept"
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(timeout=30)
    assert other.returncode == 0


# pid 1 of the namespace: a first process makes its dir and exits; a second one gets the same pid
# (ns_last_pid) and keeps running; a third sweeps. Prints what is left.
PID_REUSE = textwrap.dedent(
    """
    import json, subprocess, sys
    maker, root = sys.argv[1], sys.argv[2]
    first = subprocess.run([sys.executable, "-c", maker, "gpg", root, "exit"], capture_output=True, text=True)
    dead, pid = first.stdout.split()
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(int(pid) - 1))
    reuser = subprocess.Popen([sys.executable, "-c", "import sys; print(flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    reuser.stdout.readline()
    sweeper = subprocess.run([sys.executable, "-c", maker, "gpg", root, "exit"], capture_output=True, text=True)
    reuser.stdin.close()
    reuser.wait()
    print(json.dumps({"dead": dead, "pid": int(pid), "reused": reuser.pid, "swept": sweeper.returncode == 0}))
    """
)


@needs_pid_namespaces
def test_a_dir_whose_pid_now_belongs_to_another_process_is_swept(tmp_path):
    """A pid reused by an unrelated process does not keep a dead owner's directory forever."""
    ns = _in_new_pid_namespace(PID_REUSE, MAKER, str(tmp_path))
    out, _ = ns.communicate(timeout=60)
    result = json.loads(out)
    assert result["swept"] and result["reused"] == result["pid"], result
    assert not Path(result["dead"]).exists(), "the dead owner's dir was kept because its pid was reused"


@pytest.fixture
def full_fs(tmp_path):
    """A directory on a filesystem with no free byte left (an 1 MB tmpfs, filled)."""
    path = tmp_path / "full"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {mounted.stderr.strip()}")
    subprocess.run(["dd", "if=/dev/zero", f"of={path / 'filler'}", "bs=64k"], capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_dir_on_a_full_filesystem_fails_naming_it_and_leaves_nothing(full_fs):
    with pytest.raises(OSError) as err:
        private_dir("binlog", full_fs)
    assert err.value.filename == str(full_fs), err.value  # the CLI's one line names it
    assert [p.name for p in full_fs.iterdir()] == ["filler"], "a directory without its owner record was left"


def test_a_full_tmpdir_is_an_error_naming_it_not_a_silent_move_to_tmp(full_fs, monkeypatch):
    import tempfile

    monkeypatch.setenv("TMPDIR", str(full_fs))
    monkeypatch.setattr(tempfile, "tempdir", None)  # the module caches its choice
    with pytest.raises(OSError) as err:
        private_dir("binlog")
    assert err.value.filename == str(full_fs), err.value
