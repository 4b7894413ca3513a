"""The saved option files of a backup, written next to a restored datadir for the DBA.

They go to `<target datadir>.option-files/<their path on the host>` (0700 directory, 0600 files),
never over a live configuration: nothing is written outside that directory, an existing non-empty
one is left alone, and only regular files with relative, dot-free names are taken from the tar.
A failure here is one warning: the restored data does not depend on it.
"""

from __future__ import annotations

import logging
import os
import tarfile
from pathlib import Path

from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest, read_stored
from ..common.tempdirs import private_workdir
from ..pipeline.from_store import stream_from_store
from ..pipeline.gpg import GpgHome, passphrase_pipe
from ..storage.base import StorageError, check_key

log = logging.getLogger(__name__)

SUFFIX = ".option-files"


def option_files_dir(target_datadir: Path) -> Path:
    return target_datadir.parent / f"{target_datadir.name}{SUFFIX}"


def restore_option_files(
    catalog: Catalog,
    manifest: Manifest,
    target_datadir: Path,
    private_key: str | None,
    passphrase: str | None,
) -> list[str]:
    """Write the backup's option files next to `target_datadir`; the paths written (none, with a
    warning, when they cannot be)."""
    saved = manifest.option_files
    if saved is None:
        return []
    dest = option_files_dir(target_datadir)
    try:
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            log.warning("%s exists and is not empty; the saved option files were not written there", dest)
            return []
        if not private_key:
            log.warning(
                "the saved option files of %s are encrypted and no private key was given", manifest.backup_id
            )
            return []
        written = _fetch_and_write(catalog, manifest, dest, private_key, passphrase)
    except (OSError, StorageError, RuntimeError, tarfile.TarError) as exc:
        log.warning("the saved option files of %s were not written: %s", manifest.backup_id, exc)
        return []
    log.info(
        "wrote the server's option files of %s (%s) to %s: compare before you use them",
        manifest.backup_id,
        ", ".join(saved.files),
        dest,
    )
    return written


def _fetch_and_write(
    catalog: Catalog, manifest: Manifest, dest: Path, private_key: str, passphrase: str | None
) -> list[str]:
    assert manifest.option_files is not None
    obj = manifest.option_files.object
    with GpgHome() as gpg, private_workdir("optfiles") as work:
        gpg.import_private_key(private_key, passphrase)
        tar = work / "option-files.tar"
        fd = passphrase_pipe(gpg.passphrase) if gpg.passphrase is not None else None
        try:
            stream_from_store(
                read_stored(catalog.store, obj),
                ["dd", f"of={tar}", "bs=1M", "status=none"],
                decrypt_argv=gpg.decrypt_argv(fd) if obj.encryption == "gpg" else None,
                pass_fds=(fd,) if fd is not None else (),
                expected_sha256=obj.sha256,
                object_name=f"{catalog.store.location}/{obj.key}",
                consumer_name="write the option files' tar",
            )
        finally:
            if fd is not None:
                os.close(fd)
        return _extract(tar, dest)


def _extract(tar_path: Path, dest: Path) -> list[str]:
    """Regular files only, each under `dest` by its relative name; nothing else is written."""
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    written = []
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            if not member.isreg():
                log.warning("skipping %r in the saved option files: not a regular file", member.name)
                continue
            try:
                name = check_key(member.name)
            except StorageError:
                log.warning("skipping %r in the saved option files: not a plain relative path", member.name)
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            path = dest / name
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(source.read())
            written.append(str(path))
    return written
