"""Point-in-time recovery from the standby: the prepared standby (core/restore/standby.py) as the
base, the shipped binlogs rolled forward from its backup's position, the chain never fetched.

Under the standby's lock, from manifests alone: the standby's state and chain are proven against
the catalog, as for a plain restore from it. The base is the newest backup the standby holds;
when a newer backup of its chain is still before the target and the private key is given, the
standby first applies the incrementals up to that one (never past the target: a backup after
the target cannot be rolled back). A standby whose newest backup is after the target is refused
by name (restore the chain instead). Then the steps of the chain's point-in-time restore
(core/pitr/recover.py: the same binlog fetch, the same replay, the same read lease on the backups
and binlogs), with the standby's final step and copy (or move) in place of the chain restore;
the binlogs are fetched while that short step runs.

What each path keeps: the standby alone holds what the newest backup it holds held; with a target
it also holds every transaction shipped up to the target.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from ..catalog.manifest import Manifest
from ..catalog.targets import Targets
from ..engine.tools import ToolVersion
from ..restore.chain import check_target
from ..restore.standby import (
    StandbyRestoreReport,
    StandbyState,
    catch_up,
    proven_chain,
    require_standby_dir,
    restore_base,
    standby_tool,
)
from ..restore.standby_lock import DEFAULT_WAIT_SECONDS, standby_lock, target_lock
from .applier import REPLAY_METHODS
from .plan import PitrError, PitrPlan, make_plan
from .recover import PitrReport, PitrRequest, RestoreBase, read_lease, recover

log = logging.getLogger(__name__)


def standby_point_in_time_restore(
    req: PitrRequest,
    directory: Path,
    *,
    move: bool = False,
    lock_wait: float = DEFAULT_WAIT_SECONDS,
) -> PitrReport:
    """Restore the standby in `directory` into `req.target_datadir` and replay the shipped binlogs
    to `req.target` (`req.backup_id` must be None: the standby decides the base)."""
    if req.replay not in REPLAY_METHODS:
        raise PitrError(f"replay {req.replay!r}: use one of {', '.join(REPLAY_METHODS)}")
    if req.backup_id is not None:
        raise PitrError(
            "a point-in-time restore from the standby starts from the backup the standby holds; leave out --backup-id"
        )
    # The target is this run's from its check to the end (core/restore/standby_lock.py); then the
    # standby's lock (a restore from the standby into a held target is refused at once, never waited for).
    with target_lock(req.target_datadir, "point-in-time restore from the standby"):
        check_target(req.target_datadir)
        return _from_standby(req, directory, move, lock_wait)


def _from_standby(req: PitrRequest, directory: Path, move: bool, lock_wait: float) -> PitrReport:
    require_standby_dir(directory)
    # The catalog that proves the standby and plans the roll-forward: the first storage target
    # that holds backups (core/catalog/targets.py); a binlog damaged there comes from the next.
    targets = req.targets()
    targets.read(f"the backups of {req.catalog.host}", lambda catalog: catalog.latest_chain())
    first = targets.first
    req = replace(req, catalog=first.catalog, source_name=first.name, fallbacks=targets.sources[1:])
    with standby_lock(directory, "point-in-time restore from the standby", lock_wait):
        standby_tool(directory, req.binary)  # the tool's series, before anything is fetched
        state, chain = _base(req, directory, targets)
        plan = _plan(req, directory, chain[-1])
        _, tool = standby_tool(directory, req.binary)
        binlogs = [f"{m.server_uuid}/{m.name}" for m in plan.binlogs]
        with read_lease(
            req, "point-in-time restore from the standby", [m.backup_id for m in chain], binlogs
        ) as lease:
            lease.check()
            base = _restore_base(directory, state, chain, tool, move)
            report = recover(req, plan, base, alongside=True, targets=targets)
    report.standby = str(directory)
    return report


def _base(req: PitrRequest, directory: Path, targets: Targets) -> tuple[StandbyState, list[Manifest]]:
    """The standby's state and chain, caught up to the newest backup of its chain before the
    target when the private key allows (what is left to replay is then the least)."""
    state, chain = proven_chain(req.catalog, directory)
    try:
        best = make_plan(req.catalog, req.target).backup
    except PitrError:
        return state, chain  # no backup before the target at all: _plan says so for the standby's
    held = {m.backup_id for m in chain}
    if best.backup_id in held or best.backup_id < chain[-1].backup_id:
        return state, chain
    if best.chain_root != state.chain_root or state.finalized or not req.private_key:
        log.info(
            "standby %s holds %s; %s is newer and before %s, but the standby cannot apply it (%s): the binlogs "
            "from %s are replayed instead (same data, more to replay)",
            directory,
            chain[-1].backup_id,
            best.backup_id,
            req.target.describe(),
            "another chain"
            if best.chain_root != state.chain_root
            else "finalized"
            if state.finalized
            else "no private key",
            chain[-1].backup_id,
        )
        return state, chain
    log.info(
        "standby %s: applying the incremental(s) up to %s first (before %s)",
        directory,
        best.backup_id,
        req.target.describe(),
    )
    catch_up(
        targets,
        directory,
        best.backup_id,
        req.private_key,
        req.passphrase,
        req.binary,
        None,
        req.without_read_lease,
    )
    return proven_chain(req.catalog, directory)


def _plan(req: PitrRequest, directory: Path, base: Manifest) -> PitrPlan:
    try:
        return make_plan(req.catalog, req.target, base.backup_id)
    except PitrError as exc:
        raise PitrError(
            f"standby {directory} holds {base.backup_id}, which cannot be rolled forward to {req.target.describe()}: "
            f"{exc}. Restore the chain to that point instead (leave out --from-standby)"
        ) from exc


def _restore_base(
    directory: Path, state: StandbyState, chain: list[Manifest], tool: ToolVersion, move: bool
) -> RestoreBase:
    """recover()'s base step: the standby's final step, then its copy (or move) into the target."""

    def put(req: PitrRequest, plan: PitrPlan, scratch: Path) -> tuple[list[str], dict[str, float]]:
        t0 = time.monotonic()
        newest = chain[-1]
        report = StandbyRestoreReport(
            newest.backup_id,
            [m.backup_id for m in chain],
            str(directory),
            str(req.target_datadir),
            newest.backup_id,
            moved=move,
        )
        report.timings["checks"] = time.monotonic() - t0
        restore_base(directory, state, chain, tool, req.target_datadir, report, use_memory=None)
        return report.chain, report.timings

    return put
