"""A standby copy: a base kept prepared as the chain grows, so a restore needs only the last step.

State lives in `<dir>/standby.json`; the catalog stays the source of truth, so a standby that
is lost or belongs to an older chain is simply rebuilt.

The standby only ever deletes a directory it created: one that is not empty and holds no
standby.json (a mistyped standby_dir, somebody's datadir) is refused, as restore refuses a
non-empty target. The state is written before the first download, and every step that changes
base/ (a fetch, a prepare, a move) records itself in the state first (`step`) and clears it once
done and recorded: a standby found with a step still recorded was interrupted in the middle
(killed, power cut) and its base/ is in an unknown state, so it is rebuilt. An update also holds
a read lease on the chain (core/catalog/lease.py), so retention does not delete what it reads.
One run at a time holds the directory (core/restore/standby_lock.py: an update, a refresh, a
restore from it); a second waits a bounded time, then is refused by name. A rebuild empties the
directory around its lock file; it never removes the directory.

- MariaBackup 10.5+: the base is fully prepared and each new incremental is merged into it;
  a restore from the standby is a copy-back.
- XtraBackup: the base and every incremental but the newest are applied with
  --apply-log-only; the newest stays unapplied in `pending/` until restore, where it is applied
  without --apply-log-only (the final prepare). A lone plain --prepare after an
  --apply-log-only step is never run (it corrupts silently since 8.0.30).

`restore_standby` is the restore from it (CLI `restore --from-standby`, the restore operator's
`standby_dir`), with a chain restore's checks: the state must show every step finished, the
catalog must still validate the chain the state says it holds (root .. newest, in order), the
tool's series must match, the target must be empty; newer incrementals of the same chain are
applied first (with the private key; a read lease holds them); a standby older than the newest
backup (a newer chain, or incrementals it cannot apply) is refused by name unless an older copy
is accepted; and after the final step the tool's own metadata in base/ (the binlog position and
GTID of xtrabackup_binlog_info) must be the newest applied backup's.
"""

from __future__ import annotations

__all__ = ["update_standby"]

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..catalog.backups import Catalog
from ..catalog.lease import ReadLease
from ..catalog.manifest import Manifest
from ..catalog.targets import Source, Targets
from ..common.crashpoints import crash_point
from ..common.files import fsync_dir
from ..engine.argv import PrepareStep
from ..engine.metadata import read_binlog_position
from ..engine.tools import ToolVersion, detect_tool
from ..pipeline.gpg import GpgHome
from . import prepare
from .chain import RestoreError, check_target, copy_back, fetch_one, import_private_for
from .sources import backup_on, clear_dir, fetch_with_fallback
from .standby_lock import DEFAULT_WAIT_SECONDS, LOCK_FILE, standby_lock, target_lock

log = logging.getLogger(__name__)

STATE = "standby.json"


@dataclass
class StandbyState:
    chain_root: str
    flavour: str
    engine_major: str
    applied: list[str] = field(default_factory=list)  # merged into base/
    base_prepared: bool = False
    pending: str | None = None  # XtraBackup: newest incremental, extracted but not applied
    finalized: bool = False  # XtraBackup: final prepare done; no more incrementals
    step: str | None = None  # a step that changes base/ is running (set before it, cleared after)
    consumed_by: str | None = None  # base/ was moved into this datadir by a restore

    @property
    def newest(self) -> str | None:
        return self.pending or (self.applied[-1] if self.applied else None)


def load_state(directory: Path) -> StandbyState | None:
    path = directory / STATE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        return StandbyState(**{k: raw[k] for k in StandbyState.__dataclass_fields__ if k in raw})
    except (ValueError, TypeError, KeyError) as exc:
        raise RestoreError(
            f"{path} is unreadable ({exc}); remove {directory} to rebuild the standby"
        ) from exc


def _save(directory: Path, state: StandbyState) -> None:
    tmp = directory / (STATE + ".tmp")
    with tmp.open("w") as fh:
        fh.write(json.dumps(asdict(state), indent=2))
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(directory / STATE)
    fsync_dir(directory)


def _begin(directory: Path, state: StandbyState, step: str) -> None:
    state.step = step
    _save(directory, state)


def _rebuild_reason(directory: Path, state: StandbyState | None, root: str) -> str | None:
    """Why the standby in `directory` must be rebuilt (None: it can continue); RestoreError for a
    directory the standby did not create."""
    if state is None:
        _refuse_foreign(directory)
        return "no standby yet"
    if state.step:
        return f"an update was interrupted during '{state.step}'"
    if state.consumed_by:
        return f"a restore moved the standby into {state.consumed_by}"
    if state.chain_root != root:
        return f"the newest chain is {root}, the standby holds {state.chain_root}"
    if state.finalized:
        return "the standby was finalized for a restore"
    return None


def _refuse_foreign(directory: Path) -> None:
    """A directory that is not empty and holds no standby.json is not ours: refused, untouched."""
    if (directory / STATE).is_file():
        return
    ours = {STATE, STATE + ".tmp", LOCK_FILE}
    if directory.exists() and (
        not directory.is_dir() or any(p.name not in ours for p in directory.iterdir())
    ):
        raise RestoreError(
            f"standby directory {directory} is not empty and holds no {STATE}: the standby never deletes "
            "a directory it did not create; empty it or choose another standby_dir"
        )


def _empty_but_lock(directory: Path) -> None:
    """Empty the standby for a rebuild; the directory and its lock file stay (see standby_lock.py)."""
    for entry in directory.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    fsync_dir(directory)


@dataclass
class StandbyUpdate:
    directory: Path
    chain_root: str
    newest: str | None
    rebuilt: bool
    applied_now: list[str]
    source: str = ""  # the storage target the chain was read from
    fallbacks: list[str] = field(default_factory=list)  # what came from another target, and why


def update_standby(
    catalog: Catalog,
    directory: Path,
    *,
    private_key: str | None = None,
    passphrase: str | None = None,
    binary: str | None = None,
    use_memory: int | None = None,
    lock_wait: float = DEFAULT_WAIT_SECONDS,
    without_read_lease: bool = False,
    source_name: str = "primary",
    fallbacks: Sequence[Source] = (),
) -> StandbyUpdate:
    """Bring the standby in `directory` up to the newest backup of the host's latest chain, holding
    the directory's lock (StandbyBusy after `lock_wait` seconds if another run holds it). The chain
    is read from `catalog` (the target `source_name`) or, when that cannot be read or holds an
    object damaged, from `fallbacks` (core/catalog/targets.py)."""
    _refuse_foreign(directory)  # before the lock file is created in somebody's directory
    directory.mkdir(parents=True, exist_ok=True)
    targets = Targets.of(catalog, source_name, fallbacks)
    with standby_lock(directory, "standby update", lock_wait):
        update = _update_locked(
            targets, directory, private_key, passphrase, binary, use_memory, without_read_lease
        )
    update.source, update.fallbacks = targets.first.name, targets.notes
    return update


def _update_locked(
    targets: Targets,
    directory: Path,
    private_key: str | None,
    passphrase: str | None,
    binary: str | None,
    use_memory: int | None,
    without_read_lease: bool = False,
    upto: str | None = None,  # default: the newest backup of the latest chain
) -> StandbyUpdate:
    host = targets.first.catalog.host
    chain = targets.read(
        f"the chain of {upto or f'the newest backup of {host}'}",
        lambda catalog: catalog.chain(upto) if upto else catalog.latest_chain(),
    )
    ids = [m.backup_id for m in chain]
    with ReadLease(targets.first.catalog, "standby update", ids, unleased_ok=without_read_lease) as lease:
        lease.check()
        return _update(targets, directory, chain, private_key, passphrase, binary, use_memory)


def _update(
    targets: Targets,
    directory: Path,
    chain: list[Manifest],
    private_key: str | None,
    passphrase: str | None,
    binary: str | None,
    use_memory: int | None,
) -> StandbyUpdate:
    root = chain[0]
    tool = detect_tool(root.engine_flavour, binary)
    state = load_state(directory)
    reason = _rebuild_reason(directory, state, root.backup_id)
    rebuilt = reason is not None
    if rebuilt:
        log.info("rebuilding the standby %s: %s", directory, reason)
        _empty_but_lock(directory)  # ours (standby.json is there, or it is empty but for the lock)
        state = StandbyState(root.backup_id, root.engine_flavour, root.engine_major)
        _save(directory, state)  # from now on the directory is the standby's
    assert state is not None
    known = set(state.applied) | ({state.pending} if state.pending else set())
    new = [m for m in chain if m.backup_id not in known]
    with GpgHome() as gpg:
        if private_key:
            import_private_for(gpg, private_key, passphrase, new)
        for manifest in new:
            _begin(directory, state, f"apply {manifest.backup_id}")
            _apply(targets, directory, state, manifest, tool, gpg, use_memory)
            crash_point("standby.after_step")
            state.step = None
            _save(directory, state)
    log.info("standby %s at %s (chain %s)", directory, state.newest, state.chain_root)
    return StandbyUpdate(directory, state.chain_root, state.newest, rebuilt, [m.backup_id for m in new])


def _apply(
    targets: Targets,
    directory: Path,
    state: StandbyState,
    manifest: Manifest,
    tool: ToolVersion,
    gpg: GpgHome,
    use_memory: int | None,
) -> None:
    base = directory / "base"
    if manifest.kind == "full":
        base.mkdir()
        _fetch(targets, manifest, tool, base, gpg)
        crash_point("standby.mid_step")  # fetched, not yet prepared
        state.applied.append(manifest.backup_id)
        if tool.capabilities.prepared_base_accepts_incrementals:
            _step(tool, PrepareStep(str(base), None, False), [base], use_memory)
            state.base_prepared = True
        return
    incoming = directory / "incoming"
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.mkdir()
    _fetch(targets, manifest, tool, incoming, gpg)
    if tool.capabilities.prepared_base_accepts_incrementals:
        _step(tool, PrepareStep(str(base), str(incoming), False), [base, incoming], use_memory)
        shutil.rmtree(incoming)
        state.applied.append(manifest.backup_id)
        return
    # XtraBackup: everything before the newest gets --apply-log-only; the newest waits.
    if not state.base_prepared:
        _step(tool, PrepareStep(str(base), None, True), [base], use_memory)
        state.base_prepared = True
    pending = directory / "pending"
    if state.pending:
        _step(tool, PrepareStep(str(base), str(pending), True), [base, pending], use_memory)
        shutil.rmtree(pending)
        state.applied.append(state.pending)
    incoming.rename(pending)
    state.pending = manifest.backup_id


def _fetch(targets: Targets, m: Manifest, tool: ToolVersion, dest: Path, gpg: GpgHome) -> None:
    """Backup `m` (read from the first target) into `dest`, from the first target holding it intact."""

    def one(source: Source, here: Manifest) -> object:
        return fetch_one(source.catalog, here, tool, dest, gpg)

    fetch_with_fallback(targets, f"backup {m.backup_id}", backup_on(targets.first, m), one, clear_dir(dest))


def _step(tool: ToolVersion, step: PrepareStep, dirs: list[Path], use_memory: int | None) -> None:
    prepare.run_step(tool, step, prepare.tuning_for(tool, dirs, use_memory=use_memory))


@dataclass
class StandbyRestoreReport:
    backup_id: str  # the newest backup the restored datadir holds
    chain: list[str]
    standby_dir: str
    target_datadir: str
    newest_in_catalog: str
    applied_first: list[str] = field(default_factory=list)  # newer incrementals applied before the copy
    older: str | None = None  # why the standby is older than the newest backup (accepted)
    moved: bool = False  # base/ was moved into the target: the next update rebuilds the standby
    binlog_file: str | None = None
    binlog_position: int | None = None
    gtid: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    source: str = ""  # the storage target whose catalog proved the standby
    fallbacks: list[str] = field(default_factory=list)  # what came from another target, and why


def restore_standby(
    catalog: Catalog,
    directory: Path,
    target_datadir: Path,
    *,
    private_key: str | None = None,
    passphrase: str | None = None,
    binary: str | None = None,
    use_memory: int | None = None,
    allow_older: bool = False,
    move: bool = False,
    lock_wait: float = DEFAULT_WAIT_SECONDS,
    without_read_lease: bool = False,
    source_name: str = "primary",
    fallbacks: Sequence[Source] = (),
) -> StandbyRestoreReport:
    """Restore the standby in `directory` into the empty `target_datadir`, after proving what
    it holds (see the module doc), under the directory's lock. `move` moves base/ instead of
    copying it: faster, and the standby is rebuilt by its next update. The catalog that proves
    it is `catalog`'s (the target `source_name`), else the first of `fallbacks` that can be read."""
    require_standby_dir(directory)
    targets = Targets.of(catalog, source_name, fallbacks)
    targets.read(f"the backups of {catalog.host}", lambda c: c.latest_chain())
    # The target first, from the check that it is empty to the end (another restore into it is
    # refused at once), then the standby.
    with (
        target_lock(target_datadir, "restore from the standby"),
        standby_lock(directory, "restore from the standby", lock_wait),
    ):
        report = _restore_locked(
            targets,
            directory,
            target_datadir,
            private_key=private_key,
            passphrase=passphrase,
            binary=binary,
            use_memory=use_memory,
            allow_older=allow_older,
            move=move,
            without_read_lease=without_read_lease,
        )
    report.source, report.fallbacks = targets.first.name, targets.notes
    return report


def _restore_locked(
    targets: Targets,
    directory: Path,
    target_datadir: Path,
    *,
    private_key: str | None,
    passphrase: str | None,
    binary: str | None,
    use_memory: int | None,
    allow_older: bool,
    move: bool,
    without_read_lease: bool,
) -> StandbyRestoreReport:
    t0 = time.monotonic()
    catalog = targets.first.catalog
    state, tool = standby_tool(directory, binary)
    check_target(target_datadir)
    chain = _proven_chain(catalog, directory, state)
    newest = catalog.latest_chain()
    applied_first: list[str] = []
    newer = [m.backup_id for m in newest if m.backup_id not in {c.backup_id for c in chain}]
    same_chain = newest[0].backup_id == state.chain_root
    if newer and same_chain and not state.finalized and private_key:
        log.info("standby %s: applying the newer incremental(s) %s first", directory, ", ".join(newer))
        applied_first = catch_up(
            targets, directory, None, private_key, passphrase, binary, use_memory, without_read_lease
        )
        state = _checked_state(directory)
        chain = _proven_chain(catalog, directory, state)
        newer = [m.backup_id for m in newest if m.backup_id not in {c.backup_id for c in chain}]
    older = None
    if newer:
        why = (
            f"the newest backup is {newest[-1].backup_id} (chain {newest[0].backup_id}), a newer chain"
            if not same_chain
            else f"the newer incremental(s) {', '.join(newer)} of its chain are not applied"
            + (" (it was finalized)" if state.finalized else "" if private_key else " (no private key given)")
        )
        older = f"standby {directory} holds {state.newest} (chain {state.chain_root}); {why}"
        if not allow_older:
            raise RestoreError(
                f"{older}. Restore the chain instead, give the private key so the standby catches up, or accept "
                "the older copy (--allow-older-standby)"
            )
        log.warning("%s: restoring the older copy as asked", older)
    report = StandbyRestoreReport(
        chain[-1].backup_id,
        [m.backup_id for m in chain],
        str(directory),
        str(target_datadir),
        newest[-1].backup_id,
        applied_first,
        older,
        move,
        chain[-1].binlog_file,
        chain[-1].binlog_position,
        chain[-1].gtid,
    )
    report.timings["checks"] = time.monotonic() - t0
    restore_base(directory, state, chain, tool, target_datadir, report, use_memory=use_memory)
    return report


def require_standby_dir(directory: Path) -> None:
    """`directory` is a standby (before its lock file is created in it: never in somebody's directory)."""
    if not directory.is_dir():
        raise RestoreError(
            f"standby directory {directory} does not exist; name the standby_dir of the standby task"
        )
    if not (directory / STATE).is_file():
        raise RestoreError(
            f"{directory} is not a standby ({STATE} missing): name the standby_dir the standby task keeps, or "
            "restore the chain"
        )


def standby_tool(directory: Path, binary: str | None) -> tuple[StandbyState, ToolVersion]:
    """The standby's checked state and the tool of its series on this worker (RestoreError otherwise)."""
    state = _checked_state(directory)
    tool = detect_tool("xtrabackup" if state.flavour == "xtrabackup" else "mariabackup", binary)
    if tool.major != state.engine_major:
        raise RestoreError(
            f"standby {directory} was built with {state.flavour} {state.engine_major}; this worker has {tool.text}. "
            f"Restore it with the same {state.engine_major} series"
        )
    return state, tool


def proven_chain(catalog: Catalog, directory: Path) -> tuple[StandbyState, list[Manifest]]:
    """The standby's checked state and the chain it holds, proven against the catalog."""
    state = _checked_state(directory)
    return state, _proven_chain(catalog, directory, state)


def catch_up(
    targets: Targets,
    directory: Path,
    upto: str | None,
    private_key: str | None,
    passphrase: str | None,
    binary: str | None,
    use_memory: int | None,
    without_read_lease: bool = False,
) -> list[str]:
    """Apply the incrementals of the standby's chain newer than it holds, up to `upto` (None: the
    newest), under the lock the caller holds. Returns what was applied."""
    update = _update_locked(
        targets, directory, private_key, passphrase, binary, use_memory, without_read_lease, upto
    )
    return update.applied_now


def restore_base(
    directory: Path,
    state: StandbyState,
    chain: list[Manifest],
    tool: ToolVersion,
    target_datadir: Path,
    report: StandbyRestoreReport,
    *,
    use_memory: int | None,
) -> None:
    """The last step of a restore from the standby (under its lock): the final prepare, the proof
    that base/ is the newest backup of `chain`, then base/ copied (or moved) into the target."""
    t0 = time.monotonic()
    _finish(directory, state, tool, use_memory)
    _check_metadata(directory, chain[-1])
    report.timings["final_step"] = time.monotonic() - t0
    t0 = time.monotonic()
    base = directory / "base"
    if report.moved:
        state.consumed_by = str(target_datadir)
        _save(directory, state)  # before the move: a crash in the middle leaves a standby to rebuild
    copy_back(tool, base, target_datadir, move=report.moved)
    report.timings["move_back" if report.moved else "copy_back"] = time.monotonic() - t0
    log.info(
        "restored standby %s (%s) into %s%s",
        directory,
        report.backup_id,
        target_datadir,
        " (moved)" if report.moved else "",
    )


def _checked_state(directory: Path) -> StandbyState:
    require_standby_dir(directory)
    state = load_state(directory)
    if state is None:  # removed since require_standby_dir saw it
        raise RestoreError(f"standby {directory}: {STATE} vanished; run the standby update (it rebuilds)")
    if state.step:
        raise RestoreError(
            f"standby {directory}: an update was interrupted during '{state.step}'; its base is in an unknown state. "
            "Run the standby update (it rebuilds), or restore the chain"
        )
    if state.consumed_by:
        raise RestoreError(
            f"standby {directory} was moved into {state.consumed_by} by a restore; run the standby update (it "
            "rebuilds), or restore the chain"
        )
    if not state.applied or not (directory / "base").is_dir():
        raise RestoreError(f"standby {directory} holds no prepared base yet; run the standby update")
    return state


def _proven_chain(catalog: Catalog, directory: Path, state: StandbyState) -> list[Manifest]:
    """The catalog's chain root .. the standby's newest, which must be exactly what it applied."""
    newest = state.newest
    assert newest is not None
    try:
        chain = catalog.chain(newest)
    except RuntimeError as exc:
        raise RestoreError(
            f"standby {directory} holds {newest}, but the catalog cannot prove its chain: {exc}"
        ) from exc
    holds = [*state.applied, *([state.pending] if state.pending else [])]
    ids = [m.backup_id for m in chain]
    if ids != holds or chain[0].backup_id != state.chain_root:
        raise RestoreError(
            f"standby {directory} says it holds {' -> '.join(holds)}, but the catalog's chain of {newest} is "
            f"{' -> '.join(ids)}; rebuild the standby (run its update) or restore the chain"
        )
    return chain


def _finish(directory: Path, state: StandbyState, tool: ToolVersion, use_memory: int | None) -> None:
    """XtraBackup: the final prepare (with the pending incremental); MariaBackup needs none."""
    if state.finalized or tool.capabilities.prepared_base_accepts_incrementals:
        return
    base, pending = directory / "base", directory / "pending"
    if state.base_prepared and not state.pending:
        raise RestoreError(
            f"{directory}: base was prepared with --apply-log-only and nothing is pending; "
            "rebuild the standby (a lone plain --prepare would corrupt it)"
        )
    _begin(directory, state, "final prepare")
    step = PrepareStep(str(base), str(pending) if state.pending else None, False)
    _step(tool, step, [base, pending] if state.pending else [base], use_memory)
    state.step = None
    if state.pending:
        shutil.rmtree(pending)
        state.applied.append(state.pending)
        state.pending = None
    state.finalized = True
    _save(directory, state)


def _check_metadata(directory: Path, newest: Manifest) -> None:
    """The tool's metadata in base/ names the newest backup's binlog position and GTID."""
    if not newest.binlog_file:
        return  # a server without a binlog: nothing to compare
    have = read_binlog_position(directory / "base")
    want = (newest.binlog_file, newest.binlog_position, newest.gtid or None)
    if (have.file, have.position, have.gtid or None) != want:
        raise RestoreError(
            f"standby {directory}: base/ records binlog {have.file}:{have.position} (GTID {have.gtid or '-'}), but "
            f"{newest.backup_id} was taken at {want[0]}:{want[1]} (GTID {want[2] or '-'}); the standby does not hold "
            "what its state says. Rebuild it (run its update) or restore the chain"
        )
