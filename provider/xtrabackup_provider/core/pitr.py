"""Point-in-time recovery: the newest backup before the target, then its shipped binlogs up to it.

1. Plan from manifests alone (nothing downloaded): the newest backup whose binlog coordinates
   are before the target, and the contiguous shipped binlogs from its position to the target.
   A recorded gap, a binlog never shipped, or shipped binlogs that end before the target stop
   the restore here, with the reason.
2. Fetch those binlogs (sha256-checked, decrypted, decompressed) into local scratch files.
3. Restore the backup chain into the empty target datadir (core.restore).
4. Start a sandbox on it and replay through ONE `mariadb-binlog` process piped into the
   sandbox's `mariadb` client, from the backup's position to the target:
   `--start-position=<pos> --stop-datetime=<T>` (time), `--start-position=<backup GTID>
   --stop-position=<GTID>` (GTID, MariaDB's GTID mode; inclusive), or
   `--start-position=<pos> --stop-position=<pos>` (FILE:POS, exclusive).

Grants: restore sandboxes run with --skip-grant-tables (and so --skip-networking), and a
replayed GRANT / CREATE USER fails there. The replay therefore turns the grant tables on with
FLUSH PRIVILEGES from the one privileged session the sandbox allows, creates a throwaway
account with a random password in it, replays as that account (over the socket in a private
0700 directory; the server still has no TCP listener), then drops the account. The restored
root password is never needed, and the replay honours every GRANT it contains.

The sandbox runs without a binlog of its own, so the datadir gets no stray binlog files; the
GTID position reached is computed from the binlogs and reported for `SET GLOBAL gtid_slave_pos`.
If anything fails after the restore, the target datadir is emptied again.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from .binlog import sha256_range
from .binlog_catalog import BinlogCatalog, BinlogIndex, BinlogManifest
from .binlog_events import (
    GtidPos,
    binlog_number,
    format_gtid_pos,
    gtid_reached,
    parse_gtid_pos,
    replay_end,
)
from .catalog import Catalog, Manifest
from .crypto import GpgError, GpgHome, passphrase_pipe
from .pipeline import stream_from_store
from .pitr_replay import replay
from .restore import RestoreRequest, _empty_dir, check_target, plan_chain, restore

log = logging.getLogger(__name__)


class PitrError(RuntimeError):
    """Point-in-time recovery cannot reach the target; the message says why and what to do."""


@dataclass(frozen=True)
class PitrTarget:
    kind: Literal["time", "gtid", "position"]
    time: datetime | None = None
    gtid: str | None = None
    file: str | None = None
    position: int | None = None

    @classmethod
    def at_time(cls, text: str) -> PitrTarget:
        """ISO 8601; a time without an offset is UTC. Binlogs stamp whole seconds: fractions are dropped."""
        try:
            when = datetime.fromisoformat(text.strip())
        except ValueError as exc:
            raise PitrError(f"--to-time {text!r}: not an ISO 8601 time (e.g. 2026-11-30T10:15:00Z)") from exc
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        return cls("time", time=when.replace(microsecond=0))

    @classmethod
    def at_gtid(cls, text: str) -> PitrTarget:
        try:
            pos = parse_gtid_pos(text, "--to-gtid")
        except ValueError as exc:
            raise PitrError(str(exc)) from exc
        if not pos:
            raise PitrError("--to-gtid is empty; give a GTID such as 0-1-42")
        return cls("gtid", gtid=format_gtid_pos(pos))

    @classmethod
    def at_position(cls, text: str) -> PitrTarget:
        file, _, pos = text.strip().rpartition(":")
        try:
            binlog_number(file)
            position = int(pos)
        except ValueError as exc:
            raise PitrError(f"--to-position {text!r}: expected FILE:POS, e.g. mysql-bin.000042:1234") from exc
        if position < 4:
            raise PitrError(f"--to-position {text!r}: a binlog position is at least 4")
        return cls("position", file=file, position=position)

    def describe(self) -> str:
        if self.kind == "time":
            assert self.time is not None
            return f"{self.time:%Y-%m-%d %H:%M:%S} UTC"
        return f"GTID {self.gtid}" if self.kind == "gtid" else f"{self.file}:{self.position}"

    def gtid_pos(self) -> GtidPos:
        return parse_gtid_pos(self.gtid)


@dataclass
class PitrPlan:
    backup: Manifest
    binlogs: list[BinlogManifest]
    target: PitrTarget

    def replay_args(self) -> list[str]:
        """mariadb-binlog's range options (the files follow them)."""
        start = f"--start-position={self.backup.binlog_position}"
        if self.target.kind == "time":
            assert self.target.time is not None
            return [start, f"--stop-datetime={self.target.time:%Y-%m-%d %H:%M:%S}"]  # run with TZ=UTC
        if self.target.kind == "gtid":
            # GTID mode: the backup's state (exclusive) to the target (inclusive). A backup taken
            # before any GTID was written has no state: everything after it is replayed.
            gtid_start = [f"--start-position={self.backup.gtid}"] if self.backup.gtid else []
            return [*gtid_start, f"--stop-position={self.target.gtid}"]
        return [start, f"--stop-position={self.target.position}"]


# ---------------------------------------------------------------------------------------------
# planning (pure)


def _before(m: Manifest, target: PitrTarget) -> bool:
    if target.kind == "time":
        assert target.time is not None
        return m.finished_at <= target.time
    if target.kind == "gtid":
        have = parse_gtid_pos(m.gtid)
        return all(have[d].seq <= g.seq for d, g in target.gtid_pos().items() if d in have)
    assert m.binlog_file and target.file and target.position is not None
    base, number = binlog_number(m.binlog_file)
    t_base, t_number = binlog_number(target.file)
    return base == t_base and (number, m.binlog_position or 0) <= (t_number, target.position)


def choose_backup(manifests: list[Manifest], target: PitrTarget, backup_id: str | None = None) -> Manifest:
    """The newest backup with binlog coordinates before the target (or the one asked for)."""
    usable = [m for m in manifests if m.binlog_file and m.binlog_position is not None]
    if backup_id:
        chosen = next((m for m in usable if m.backup_id == backup_id), None)
        if chosen is None:
            raise PitrError(f"backup {backup_id} has no manifest with binlog coordinates in this catalog")
        if not _before(chosen, target):
            raise PitrError(f"backup {backup_id} was taken after {target.describe()}; pick an older one")
        return chosen
    before = [m for m in usable if _before(m, target)]
    if not before:
        oldest = min(usable, key=lambda m: m.backup_id).backup_id if usable else "none"
        raise PitrError(
            f"no backup with binlog coordinates before {target.describe()} (oldest usable: {oldest}); "
            "point-in-time recovery starts from a backup taken before the target"
        )
    return max(before, key=lambda m: m.backup_id)


def _reaches(m: BinlogManifest, target: PitrTarget) -> bool:
    if target.kind == "time":
        assert target.time is not None
        seen = [t for t in (m.covers_until, m.last_event_time) if t is not None]
        return bool(seen) and max(seen) >= target.time
    if target.kind == "gtid":
        return gtid_reached(parse_gtid_pos(m.gtid_last), target.gtid_pos())
    return m.name == target.file


def plan_binlogs(index: BinlogIndex, backup: Manifest, target: PitrTarget) -> list[BinlogManifest]:
    """The binlogs from the backup's position to the target, contiguous and shipped far enough."""
    assert backup.binlog_file and backup.binlog_position is not None
    start = f"{backup.binlog_file}:{backup.binlog_position}"
    chain, why = index.chain_from(backup.binlog_file)
    if not chain or chain[0].size < backup.binlog_position:
        held = f" (only {chain[0].size} bytes shipped)" if chain else ""
        raise PitrError(
            f"backup {backup.backup_id} starts at {start}, but {why or backup.binlog_file + held}; ship binlogs, "
            "or restore without a point in time"
        )
    needed: list[BinlogManifest] = []
    for m in chain:
        needed.append(m)
        if _reaches(m, target):
            _check_reach(m, target, needed, parse_gtid_pos(backup.gtid))
            return needed
    last = chain[-1]
    until = last.covers_until or last.last_event_time
    fix = "Point-in-time recovery cannot cross a gap" if why.startswith("gap") else "Ship binlogs first"
    raise PitrError(
        f"the binlogs shipped after backup {backup.backup_id} ({start}) end at {last.name} "
        f"(GTID {last.gtid_last or '-'}, events until {f'{until:%Y-%m-%d %H:%M:%S} UTC' if until else '-'}), "
        f"before {target.describe()}: {why}. {fix}"
    )


def _check_reach(
    last: BinlogManifest, target: PitrTarget, needed: list[BinlogManifest], backup_gtid: GtidPos
) -> None:
    if target.kind == "position" and target.position is not None and last.size < target.position:
        raise PitrError(
            f"{target.file} is shipped only up to byte {last.size}, before {target.describe()}; ship binlogs first"
        )
    if target.kind == "gtid":
        # Domains with transactions after the backup: the stop position must bound each of them.
        domains = {
            d
            for m in needed
            for d, g in parse_gtid_pos(m.gtid_last).items()
            if d not in backup_gtid or g.seq > backup_gtid[d].seq
        }
        missing = sorted(domains - set(target.gtid_pos()))
        if missing:
            raise PitrError(
                f"the binlogs hold transactions of GTID domain(s) {missing} too; name one GTID per domain "
                f"in --to-gtid (e.g. {target.gtid},{missing[0]}-<server_id>-<seq>)"
            )


def make_plan(catalog: Catalog, target: PitrTarget, backup_id: str | None = None) -> PitrPlan:
    backup = choose_backup(catalog.manifests(), target, backup_id)
    if backup.engine_flavour != "mariabackup":
        raise PitrError(
            f"backup {backup.backup_id} was taken with {backup.engine_flavour}: the replay runs in a MariaDB "
            "sandbox, so point-in-time recovery supports MariaDB backups only; restore it and replay by hand"
        )
    index = BinlogCatalog(catalog, backup.server_uuid).index()
    for problem in index.problems:
        log.warning("ignoring unreadable binlog manifest: %s", problem)
    plan = PitrPlan(backup, plan_binlogs(index, backup, target), target)
    plan_chain(catalog, backup.backup_id)  # validates the chain before anything is downloaded
    return plan


# ---------------------------------------------------------------------------------------------
# the restore


@dataclass
class PitrRequest:
    catalog: Catalog
    target_datadir: Path
    target: PitrTarget
    backup_id: str | None = None  # None: the newest backup before the target
    private_key: str | None = None
    passphrase: str | None = None
    binary: str | None = None  # mariabackup / xtrabackup for the prepare
    binlog_binary: str = "mariadb-binlog"
    client_binary: str = "mariadb"
    scratch_dir: Path | None = None  # default: beside the target
    move_back: bool = True
    max_free_memory_pct: int = 50


@dataclass
class PitrReport:
    backup_id: str
    chain: list[str]
    target: str
    target_datadir: str
    binlogs: list[str]
    start: str  # the backup's binlog position
    reached_file: str = ""
    reached_position: int = 0
    reached_gtid: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "target": self.target,
            "binlogs": len(self.binlogs),
            "reached": f"{self.reached_file}:{self.reached_position}",
            "gtid": self.reached_gtid,
        }


def point_in_time_restore(req: PitrRequest) -> PitrReport:
    check_target(req.target_datadir)
    plan = make_plan(req.catalog, req.target, req.backup_id)
    backup = plan.backup
    scratch = req.scratch_dir or req.target_datadir.parent / f".xbp-pitr-{backup.backup_id}"
    if scratch.exists() and any(scratch.iterdir()):
        raise PitrError(f"scratch directory {scratch} is not empty (an earlier restore?); remove it first")
    report = PitrReport(
        backup.backup_id,
        [],
        req.target.describe(),
        str(req.target_datadir),
        [m.name for m in plan.binlogs],
        f"{backup.binlog_file}:{backup.binlog_position}",
    )
    existed = req.target_datadir.exists()
    try:
        t0 = time.monotonic()
        files = fetch_binlogs(req, plan.binlogs, scratch / "binlogs")
        report.timings["fetch_binlogs"] = time.monotonic() - t0
        restored = restore(
            RestoreRequest(
                catalog=req.catalog,
                target_datadir=req.target_datadir,
                backup_id=backup.backup_id,
                private_key=req.private_key,
                passphrase=req.passphrase,
                binary=req.binary,
                scratch_dir=scratch / "restore",
                move_back=req.move_back,
                max_free_memory_pct=req.max_free_memory_pct,
            )
        )
        report.chain = restored.chain
        report.timings.update(restored.timings)
        t0 = time.monotonic()
        if where_replay_stops(plan, files, report):
            replay(
                req.target_datadir,
                [*plan.replay_args(), *map(str, files)],
                req.binlog_binary,
                req.client_binary,
            )
        else:
            log.info("backup %s is already at %s: nothing to replay", backup.backup_id, report.target)
        report.timings["replay"] = time.monotonic() - t0
    except BaseException:
        if req.target_datadir.exists() and any(req.target_datadir.iterdir()):
            _empty_dir(req.target_datadir, remove=not existed)
            log.error("point-in-time restore failed; emptied %s again", req.target_datadir)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info(
        "restored %s and replayed %d binlog(s) to %s: %s:%d, GTID %s",
        backup.backup_id,
        len(files),
        report.target,
        report.reached_file,
        report.reached_position,
        report.reached_gtid or "-",
    )
    return report


def where_replay_stops(plan: PitrPlan, files: list[Path], report: PitrReport) -> bool:
    """Where the replay will stop, computed from the binlogs themselves (for the report);
    False when the backup is already there (the tool refuses a GTID range that is empty)."""
    target = plan.target
    end = replay_end(
        files,
        plan.backup.binlog_position or 0,
        stop_time=int(target.time.timestamp()) if target.time else None,
        stop_position=target.position,
        stop_gtid=target.gtid_pos() if target.kind == "gtid" else None,
    )
    gtid = parse_gtid_pos(plan.backup.gtid)
    gtid.update(end.last_gtid)
    report.reached_file, report.reached_position = end.file, end.position
    report.reached_gtid = format_gtid_pos(gtid)
    start = (plan.backup.binlog_file, plan.backup.binlog_position or 0)
    if target.kind == "gtid":
        return not gtid_reached(parse_gtid_pos(plan.backup.gtid), target.gtid_pos())
    return bool(end.last_gtid) or (end.file, end.position) > start


def fetch_binlogs(req: PitrRequest, binlogs: list[BinlogManifest], dest: Path) -> list[Path]:
    """Download, check, decrypt and decompress each binlog (all its segments) into `dest`."""
    dest.mkdir(parents=True, mode=0o700)
    files = []
    with GpgHome() as gpg:
        if any(s.object.encryption == "gpg" for m in binlogs for s in m.segments):
            _import_key(gpg, req, binlogs)
        for m in binlogs:
            path = dest / m.name
            for seg in m.segments:
                _fetch_segment(
                    req.catalog, seg.object.key, seg.object.sha256, seg.object.encryption, path, gpg
                )
                if sha256_range(path, seg.offset, seg.raw_size) != seg.raw_sha256:
                    raise PitrError(
                        f"{seg.object.key}: decrypted bytes do not match the manifest's raw sha256"
                    )
            if path.stat().st_size != m.size:
                raise PitrError(f"{m.name}: fetched {path.stat().st_size} bytes, the manifest says {m.size}")
            files.append(path)
    return files


def _fetch_segment(catalog: Catalog, key: str, sha: str, encryption: str, path: Path, gpg: GpgHome) -> None:
    fd = passphrase_pipe(gpg.passphrase) if encryption == "gpg" and gpg.passphrase is not None else None
    try:
        stream_from_store(
            catalog.store.read_chunks(key),
            ["dd", f"of={path}", "oflag=append", "conv=notrunc", "bs=1M", "status=none"],
            decrypt_argv=gpg.decrypt_argv(fd) if encryption == "gpg" else None,
            pass_fds=(fd,) if fd is not None else (),
            expected_sha256=sha,
            object_name=f"{catalog.store.location}/{key}",
            consumer_name=f"write {path.name}",
        )
    finally:
        if fd is not None:
            os.close(fd)


def _import_key(gpg: GpgHome, req: PitrRequest, binlogs: list[BinlogManifest]) -> None:
    if not req.private_key:
        raise PitrError(
            f"the binlogs from {binlogs[0].name} are GPG-encrypted; supply the private key "
            "(gpg connection or --private-key-file)"
        )
    gpg.import_private_key(req.private_key, req.passphrase)
    have = set(gpg.fingerprints(secret=True))
    for m in binlogs:
        for seg in m.segments:
            if (
                seg.object.encryption == "gpg"
                and seg.object.recipients
                and not have & set(seg.object.recipients)
            ):
                raise GpgError(
                    f"binlog {m.name} is encrypted for {', '.join(seg.object.recipients)}, but the private key "
                    f"given is {', '.join(sorted(have)) or 'none'}; supply the matching private key"
                )
