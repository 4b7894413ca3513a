"""The server's option files, saved with each backup: what the server needed besides its data.

The host's config names the server's root option file(s) (`hosts[].option_files`, usually
/etc/mysql/my.cnf); their `!include FILE` and `!includedir DIR` lines are followed the way the
server follows them (every `*.cnf` of a directory, in name order). The files go into one tar,
compressed and GPG-encrypted like the backup (they may hold passwords), as the side object
`option-files.tar.zst.gpg` listed in the manifest's `option_files`. A file that cannot be read is
one warning naming it (and recorded as skipped): the backup itself never fails for it.
core/restore/option_files.py writes them next to a restored datadir.
"""

from __future__ import annotations

import io
import logging
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog.backups import Catalog
from ..catalog.manifest import OptionFiles, StoredObject
from ..pipeline.to_store import stream_to_store
from ..storage.base import PutOptions
from ..storage.segments import one_object

log = logging.getLogger(__name__)

OPTION_FILES_NAME = "option-files.tar"
MAX_FILES = 200
MAX_FILE_BYTES = 1024 * 1024  # an option file is text; anything bigger is not one


@dataclass
class Collected:
    files: list[Path] = field(default_factory=list)  # in the order the server reads them
    skipped: list[str] = field(default_factory=list)  # "path: why"


def collect(roots: list[str]) -> Collected:
    """The root option files and every file their !include / !includedir name, once each."""
    found = Collected()
    seen: set[Path] = set()

    def skip(path: Path | str, why: str) -> None:
        found.skipped.append(f"{path}: {why}")

    def visit(path: Path, depth: int) -> None:
        if depth > 10:
            return skip(path, "included more than 10 levels deep (an include loop?)")
        resolved = path.resolve()
        if resolved in seen:
            return None
        seen.add(resolved)
        if len(found.files) >= MAX_FILES:
            return skip(path, f"more than {MAX_FILES} option files; not saved")
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                return skip(path, f"larger than {MAX_FILE_BYTES} bytes: not an option file")
            text = path.read_text(errors="replace")
        except OSError as exc:
            return skip(path, exc.strerror or type(exc).__name__)
        found.files.append(path)
        for line in text.splitlines():
            directive, _, arg = line.strip().partition(" ")
            arg = arg.strip()
            if directive == "!include" and arg:
                visit(_relative(path, arg), depth + 1)
            elif directive == "!includedir" and arg:
                folder = _relative(path, arg)
                try:
                    names = sorted(p for p in folder.iterdir() if p.suffix == ".cnf")
                except OSError as exc:
                    skip(folder, f"!includedir: {exc.strerror or type(exc).__name__}")
                    continue
                for child in names:
                    visit(child, depth + 1)
        return None

    for root in roots:
        visit(Path(root), 0)
    return found


def _relative(base: Path, arg: str) -> Path:
    target = Path(arg)
    return target if target.is_absolute() else base.parent / target


def tar_bytes(files: list[Path]) -> bytes:
    """A tar of the files, each under its absolute path without the leading '/', regular files only."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(str(path.absolute()).lstrip("/"))
            info.size, info.mode = len(data), 0o600
            info.mtime = int(path.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def save_option_files(
    catalog: Catalog,
    backup_id: str,
    roots: list[str],
    work: Path,
    *,
    encrypt_argv: list[str] | None,
    recipients: list[str],
    level: int,
    where: str,
) -> OptionFiles | None:
    """Store the option files beside the backup; None (with one warning) when there is nothing to
    store, or nothing that may be stored: option files are only ever stored encrypted."""
    if not roots:
        return None
    found = collect(roots)
    for skipped in found.skipped:
        log.warning("%s: option file not saved with the backup: %s", where, skipped)
    if not found.files:
        return None
    if not encrypt_argv:
        log.warning(
            "%s: the backup is not encrypted, so its option files are not saved (they may hold passwords)",
            where,
        )
        return None
    try:
        data = tar_bytes(found.files)
    except OSError as exc:  # changed between collect() and now
        log.warning("%s: option files not saved with the backup: %s", where, exc)
        return None
    tar = work / OPTION_FILES_NAME
    tar.write_bytes(data)
    key = catalog.object_key(backup_id, OPTION_FILES_NAME + ".zst.gpg")
    writer = catalog.store.open_writer(key, PutOptions(expected_size=len(data)))
    result = stream_to_store(
        ["cat", str(tar)],
        writer,
        encrypt_argv=encrypt_argv,
        level=level,
        producer_name="read the option files",
    )
    one_object(catalog.store, writer, key)
    tar.unlink()
    log.info(
        "%s: saved %d option file(s) with the backup: %s",
        where,
        len(found.files),
        ", ".join(map(str, found.files)),
    )
    return OptionFiles(
        object=StoredObject(
            key=key,
            size=result.stored_bytes,
            sha256=result.sha256,
            raw_size=result.raw_bytes,
            compression="zstd",
            encryption="gpg",
            recipients=recipients,
        ),
        files=[str(p) for p in found.files],
        skipped=found.skipped,
    )
