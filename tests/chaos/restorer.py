"""The checker's own restore: the stored objects -> gpg --decrypt -> zstd -d -> mbstream -x, then
mariabackup --prepare (the full, then each incremental), with the tools alone and none of the
product's restore code, so a backup the product would restore wrongly is caught.

The order of a backup's objects is the documented one: a one-stream backup is one object; a K-part
backup lists its data parts, then its tail, which is extracted last (it holds the renames and
removes of DDL during the backup). A stream stored in segments is their concatenation.

A shipped binlog is fetched the same way (fetch_binlog: its segments in offset order, decrypted and
decompressed), for the checker's `--to-position` points (the positions come from the binlog itself).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storeview import StoreReader, pieces

CHUNK = 1 << 20


class RestoreFailed(AssertionError):
    pass


@contextmanager
def decrypting_home(private_key: str, passphrase: str) -> Iterator[tuple[Path, Path]]:
    """A throwaway GNUPGHOME holding the private key, and a 0600 file with its passphrase (under
    /tmp: gpg-agent's socket path must stay short)."""
    home = Path(tempfile.mkdtemp(prefix="xbpchk-"))
    secret = home / "passphrase"
    secret.touch(mode=0o600)
    secret.write_text(passphrase)
    argv = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback"]
    imported = subprocess.run([*argv, "--passphrase-file", str(secret), "--import"], input=private_key.encode(),
                              capture_output=True)  # fmt: skip
    assert imported.returncode == 0, imported.stderr.decode(errors="replace")
    try:
        yield home, secret
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def extract(reader: StoreReader, obj: dict[str, Any], gpg: tuple[Path, Path] | None, into: Path) -> None:
    """One manifest object (all its pieces, in order) through the tools into `into`."""
    _pipe(reader, obj, gpg, ["mbstream", "-x", "-C", str(into)], None)


def fetch_binlog(
    reader: StoreReader, manifest: dict[str, Any], gpg: tuple[Path, Path] | None, out: Path
) -> Path:
    """A shipped binlog (complete, or what the open one's partial manifest holds) as the raw file
    `out`: its segments in offset order, each decrypted and decompressed by the tools."""
    segments = sorted(manifest.get("segments", []), key=lambda s: int(s["offset"]))
    with out.open("wb") as fh:
        for seg in segments:
            if fh.tell() != int(seg["offset"]):
                raise RestoreFailed(
                    f"{manifest.get('name')}: a segment at {seg['offset']}, {fh.tell()} bytes before it"
                )
            _pipe(reader, seg["object"], gpg, ["cat"], fh)
            fh.flush()
            fh.seek(0, 2)
    return out


def _pipe(reader: StoreReader, obj: dict[str, Any], gpg: tuple[Path, Path] | None, last: list[str],
          out: Any) -> None:  # fmt: skip
    stages: list[list[str]] = []
    if obj.get("encryption") == "gpg":
        assert gpg is not None, f"{obj['key']} is encrypted and no key was given"
        home, secret = gpg
        stages.append(["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback",
                       "--passphrase-file", str(secret), "--decrypt"])  # fmt: skip
    if obj.get("compression") == "zstd":
        stages.append(["zstd", "-dcq"])
    stages.append(last)
    procs: list[subprocess.Popen[bytes]] = []
    prev = subprocess.PIPE
    for n, argv in enumerate(stages):
        stdin = prev if not procs else procs[-1].stdout
        stdout = out if out is not None and n == len(stages) - 1 else subprocess.PIPE
        proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)
        if procs and procs[-1].stdout:
            procs[-1].stdout.close()
        procs.append(proc)
    error: list[BaseException] = []
    feeder = threading.Thread(target=_feed, args=(reader, obj, procs[0], error), daemon=True)
    feeder.start()
    out = [
        (p.args, p.wait(600), p.stderr.read().decode(errors="replace")[-500:] if p.stderr else "")
        for p in procs
    ]
    feeder.join()
    if error:
        raise RestoreFailed(f"{obj['key']}: reading it failed: {error[0]}")
    for argv, rc, err in out:
        if rc != 0:
            raise RestoreFailed(f"{obj['key']}: {argv[0]} exited {rc}: {err}")


def _feed(
    reader: StoreReader, obj: dict[str, Any], first: subprocess.Popen[bytes], error: list[BaseException]
) -> None:
    assert first.stdin is not None
    try:
        for key, size in pieces(obj):
            body = reader.client.get_object(Bucket=reader.bucket, Key=key)["Body"]
            got = 0
            while chunk := body.read(CHUNK):
                got += len(chunk)
                first.stdin.write(chunk)
            if got != size:
                raise RestoreFailed(f"{key}: {got} bytes, the manifest says {size}")
    except BaseException as exc:  # noqa: BLE001 - reported by the caller
        error.append(exc)
    finally:
        try:
            first.stdin.close()
        except OSError:
            pass


def ordered_objects(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    objs = list(manifest.get("objects", []))
    parts = sorted((o for o in objs if o.get("role") == "part"), key=lambda o: o["part"])
    tails = [o for o in objs if o.get("role") == "tail"]
    plain = [o for o in objs if o.get("role") is None]
    return plain + parts + tails


def mariabackup(*args: str) -> None:
    proc = subprocess.run(
        ["mariabackup", "--no-defaults", *args], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        tail = "\n".join(line for line in proc.stderr.splitlines()[-8:])
        raise RestoreFailed(f"mariabackup {' '.join(args[:2])} exited {proc.returncode}: {tail}")


def restore_chain(
    reader: StoreReader, chain: list[dict[str, Any]], gpg: tuple[Path, Path] | None, work: Path
) -> Path:
    """The chain's last backup, prepared, as a datadir under `work` (returned)."""
    base = work / "base"
    for n, manifest in enumerate(chain):
        into = base if n == 0 else work / f"inc{n}"
        into.mkdir(parents=True)
        for obj in ordered_objects(manifest):
            extract(reader, obj, gpg, into)
        if n == 0:
            mariabackup("--prepare", f"--target-dir={base}")
        else:
            mariabackup("--prepare", f"--target-dir={base}", f"--incremental-dir={into}")
            shutil.rmtree(into)
    return base
