"""Every commit protocol killed at each of its step boundaries (XBP_CRASH_AT, core/common/crashpoints.py),
then the next run: it repairs what the kill left or refuses by name, and the checker's invariants
hold (tests/chaos/invariants.py, read from the buckets with plain boto3): every registered backup
is whole, every orphan is debris that retention names, no lock or lease is held past its lease,
and the restored data (the checker's own gpg | zstd | mbstream | mariabackup) equals the source.

TABLE is docs/RELIABILITY.md's table of points x outcomes; a test keeps the two and the product's
crash points in step.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from crashbed import (
    CLUSTER,
    HOST,
    Bed,
    binlog_debris,
    check_binlogs,
    check_invariants,
    check_pitr,
    check_restores,
    gtid_now,
    run_python,
)
from invariants import orphans

from helpers import add_orders, purge_binlogs_to
from xtrabackup_provider.core.common.crashpoints import POINTS

REPO = Path(__file__).resolve().parents[2]


def backup(bed: Bed, *extra: str, crash: str | None = None) -> str:
    out = bed.ok("backup", "--no-copies", *extra, crash=crash) if crash is None else ""
    if crash:
        bed.killed("backup", "--no-copies", *extra, crash=crash)
        return ""
    return out.split("\t")[0].strip()


def open_uploads(client, bucket: str) -> list[str]:
    return [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def took_over(output: str) -> bool:
    return "taking over the stale lock" in output


def plant_debris(bed: Bed) -> str:
    """An older run's leftovers (a directory without a manifest that no dead holder is proven to
    have written): only retention may remove them, after debris_grace_days."""
    old = "20200101T000000Z-full"
    bed.s3.client().put_object(
        Bucket=bed.primary, Key=f"backups/{CLUSTER}/{HOST}/backups/{old}/part-0.xbstream.zst.gpg", Body=b"x"
    )
    return old


def removed_attempt(bed: Bed, output: str, old: str) -> None:
    """The next run removed the killed run's attempt (its process is gone from this machine) at
    once, and only that: the older debris waits for retention."""
    assert "removed the abandoned attempt" in output, output
    assert set(orphans(check_invariants(bed))) == {old}


# -- backup registration ---------------------------------------------------------------------------


def crash_backup_after_objects(bed: Bed) -> None:
    expected = bed.checksums()
    old = plant_debris(bed)
    backup(bed, "--kind", "full", crash="backup.after_objects")
    view = bed.view()
    assert (
        view.manifests == {} and len({k.split("/")[4] for k in view.objects if "/backups/" in k} - {old}) == 1
    )
    out = bed.ok("backup", "--no-copies")
    assert took_over(out), out
    removed_attempt(bed, out, old)
    check_restores(bed, out.split("\t")[0], expected)


def crash_backup_after_manifest(bed: Bed) -> None:
    expected = bed.checksums()
    backup(bed, "--kind", "full", crash="backup.after_manifest")
    (full,) = bed.view().manifests
    add_orders(bed.server, bed.db, 200)
    later = bed.checksums()
    out = bed.ok("backup", "--no-copies")
    assert took_over(out) and "\tincremental" in out, out
    check_invariants(bed)
    check_restores(bed, full, expected)
    check_restores(bed, out.split("\t")[0], later)


def crash_lock_before_release(bed: Bed) -> None:
    expected = bed.checksums()
    backup(bed, "--kind", "full", crash="lock.before_release")
    view = bed.view()
    assert len(view.manifests) == 1 and f"backups/{CLUSTER}/{HOST}/backup.lock" in view.objects
    out = bed.ok("backup", "--no-copies")
    assert took_over(out), out
    check_invariants(bed)
    check_restores(bed, next(iter(view.manifests)), expected)


def crash_parts_between_commits(bed: Bed) -> None:
    bed.policy = {"max_parts": 2, "part_min_gib": 0}
    expected = bed.checksums()
    old = plant_debris(bed)
    backup(bed, "--kind", "full", crash="parts.between_commits")
    assert bed.view().manifests == {}  # one part committed, the others open uploads or nothing
    out = bed.ok("backup", "--no-copies")
    full = out.split("\t")[0]
    assert open_uploads(bed.s3.client(), bed.primary) == []  # aborted by the next run of the host
    assert bed.view().manifests[full]["format_version"] == 2
    removed_attempt(bed, out, old)  # the committed part too
    check_restores(bed, full, expected)


def test_a_run_that_takes_over_and_then_fails_has_still_removed_the_killed_attempt(bed):
    """The run that takes the dead holder's lock is the only one that can prove it dead: if it then
    fails (here its server is down; in the chaos run a clock behind), the cleanup must be done."""
    bed.policy = {"max_parts": 2, "part_min_gib": 0}
    old = plant_debris(bed)
    backup(bed, "--kind", "full", crash="parts.between_commits")
    bed.server.stop()
    try:
        refused = bed.cli("backup", "--no-copies")
    finally:
        bed.server.start()
    assert refused.returncode != 0 and took_over(refused.stderr), refused.stderr[-2000:]
    removed_attempt(bed, refused.stderr, old)


# -- binlog registration ---------------------------------------------------------------------------


def audit(bed: Bed, note: str) -> None:
    bed.server.query(f"INSERT INTO `{bed.db}`.audit VALUES ({secrets.randbelow(10**8) + 10**6}, %s)", (note,))


def shipped_base(bed: Bed) -> None:
    """A full backup, and every binlog the server holds shipped: what follows is the scenario's own."""
    backup(bed, "--kind", "full")
    bed.ok("binlogs", "ship", "--flush")


def removed_unregistered(out: str) -> None:
    assert "removed what a killed shipping run left unregistered" in out, out


def _binlog_object_crash(point: str, closed: int) -> Callable[[Bed], None]:
    """`closed` binlogs to ship, killed between the last one's object and its manifest (the first
    ones registered); the next run removes the killed run's object, ships it again, and a PITR
    through it equals the source."""

    def scenario(bed: Bed) -> None:
        shipped_base(bed)
        for _ in range(closed - 1):
            audit(bed, "registered")
            bed.server.query("FLUSH BINARY LOGS")
        audit(bed, "killed")
        gtid, expected = gtid_now(bed), bed.checksums()
        bed.killed("binlogs", "ship", "--flush", crash=point)
        view = bed.view()
        assert len(binlog_debris(view)) == 1, view.objects  # its object, named by no manifest
        audit(bed, "after")  # past the point: the PITR stops before it
        removed_unregistered(bed.ok("binlogs", "ship", "--flush"))
        check_binlogs(bed)
        check_pitr(bed, gtid, expected)

    scenario.__name__ = f"crash_{point.replace('.', '_')}_{closed}"
    return scenario


@contextmanager
def writing(bed: Bed) -> Iterator[None]:
    """A row every 0.1 s while the block runs: the open binlog grows under a follower."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.1):
            audit(bed, "streamed")

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


FOLLOW = ("binlogs", "ship", "--continuous", "60", "--progress-interval", "0.2")


def _binlog_segment_crash(nth: int) -> Callable[[Bed], None]:
    """Continuous shipping killed between a segment of the open binlog and its partial manifest:
    the first (no partial yet) or a later one (a partial names the earlier segments). The next run
    removes the killed run's segment, adopts what is registered, stores the rest; PITR through it."""

    def scenario(bed: Bed) -> None:
        shipped_base(bed)
        audit(bed, "open")
        with writing(bed):
            bed.killed(*FOLLOW, crash=f"binlog.after_segment@{nth}")
        gtid, expected = gtid_now(bed), bed.checksums()
        view = bed.view()
        assert len(binlog_debris(view)) == 1 and len(view.partials) == (nth > 1), (
            view.objects,
            view.partials,
        )
        removed_unregistered(bed.ok("binlogs", "ship", "--continuous", "1", "--progress-interval", "0.2"))
        assert len(check_binlogs(bed).partials) == 1
        audit(bed, "after")
        bed.ok("binlogs", "ship", "--flush")  # the open binlog closed and shipped whole
        assert check_binlogs(bed).partials == {}
        check_pitr(bed, gtid, expected)

    scenario.__name__ = f"crash_binlog_after_segment_{nth}"
    return scenario


def crash_binlog_after_complete(bed: Bed) -> None:
    """A binlog stored by progress segments, then closed: killed between its complete manifest and
    the removal of its partial. The next run drops the stale partial; PITR through it."""
    shipped_base(bed)
    audit(bed, "open")
    with writing(bed):
        bed.ok("binlogs", "ship", "--continuous", "3", "--progress-interval", "0.2")
    assert len(bed.view().partials) == 1
    audit(bed, "closed")
    gtid, expected = gtid_now(bed), bed.checksums()
    bed.killed("binlogs", "ship", "--flush", crash="binlog.after_complete")
    view = bed.view()
    assert set(view.partials) <= set(view.binlogs) and view.partials, (view.binlogs, view.partials)
    audit(bed, "after")
    bed.ok("binlogs", "ship", "--flush")
    check_binlogs(bed)
    check_pitr(bed, gtid, expected)


def crash_binlog_after_gap(bed: Bed) -> None:
    """Binlogs purged before they were shipped: killed right after the gap marker. The next run
    finds the gap recorded and ships on; a PITR into the gap is refused naming it, one past a new
    full after it equals the source."""
    shipped_base(bed)
    audit(bed, "lost")
    lost = gtid_now(bed)
    bed.server.query("FLUSH BINARY LOGS")
    bed.server.query("FLUSH BINARY LOGS")
    current = str(bed.server.query("SHOW MASTER STATUS")[0][0])
    purge_binlogs_to(bed.server, current)
    bed.killed("binlogs", "ship", crash="binlog.after_gap")
    assert [k for k in bed.view().objects if "/gaps/" in k]
    out = bed.ok("binlogs", "ship", "--flush")
    check_binlogs(bed)  # the hole is the gap's
    target = bed.tmp / "into-gap" / "data"
    target.parent.mkdir()
    refused = bed.cli("restore", "--target-datadir", str(target), "--to-gtid", lost)
    assert refused.returncode != 0 and "gap" in refused.stderr, (out, refused.stderr[-2000:])
    backup(bed, "--kind", "full")
    audit(bed, "after the gap")
    gtid, expected = gtid_now(bed), bed.checksums()
    audit(bed, "later")
    bed.ok("binlogs", "ship", "--flush")
    check_binlogs(bed)
    check_pitr(bed, gtid, expected)


def crash_lock_after_takeover(bed: Bed) -> None:
    """A shipper killed before its manifest (A), then the run that took A's lock over killed right
    after the takeover (B): the next run takes B's over and must still remove A's object."""
    shipped_base(bed)
    audit(bed, "killed")
    gtid, expected = gtid_now(bed), bed.checksums()
    bed.killed("binlogs", "ship", "--flush", crash="binlog.after_object")
    bed.killed("binlogs", "ship", crash="lock.after_takeover")
    out = bed.ok("binlogs", "ship")
    assert took_over(out), out
    check_binlogs(bed)
    check_pitr(bed, gtid, expected)


# -- retention -------------------------------------------------------------------------------------


def two_chains(bed: Bed) -> tuple[str, dict[str, int]]:
    """full, incremental, incremental, then a newer full; the newer full and the data it holds."""
    backup(bed, "--kind", "full")
    for _ in range(2):
        add_orders(bed.server, bed.db, 100)
        backup(bed, "--kind", "incremental")
    add_orders(bed.server, bed.db, 100)
    expected = bed.checksums()
    return backup(bed, "--kind", "full"), expected


def _retention_crash(point: str) -> Callable[[Bed], None]:
    def scenario(bed: Bed) -> None:
        newest, expected = two_chains(bed)
        bed.killed("retention", "apply", "--confirm", crash=point)
        check_invariants(bed)  # what the kill left: valid chain prefixes + debris retention names
        out = bed.ok("retention", "apply", "--confirm")  # deletes what is left, under a taken-over lock
        view = check_invariants(bed)
        assert sorted(view.manifests) == [newest]
        out += bed.ok("backup", "--no-copies")  # the lock, if the killed run left it, is taken over
        assert took_over(out), out
        check_restores(bed, newest, expected)

    scenario.__name__ = f"crash_{point.replace('.', '_')}"
    return scenario


# -- copies ----------------------------------------------------------------------------------------


def _copy_crash(point: str) -> Callable[[Bed], None]:
    def scenario(bed: Bed) -> None:
        expected = bed.checksums()
        full = backup(bed, "--kind", "full")
        bed.killed("copy", crash=point)
        check_invariants(bed, offsite=True)
        out = bed.ok("copy")
        assert took_over(out), out
        view = check_invariants(bed, offsite=True)
        assert sorted(view.manifests) == [full]
        check_restores(bed, full, expected, offsite=True)

    scenario.__name__ = f"crash_{point.replace('.', '_')}"
    return scenario


def crash_copy_after_objects_2(bed: Bed) -> None:
    """Two backups to copy, killed between the second's objects and its manifest (the first copied
    whole): the next copy takes over and copies the second; both restore from the target."""
    expected = bed.checksums()
    full = backup(bed, "--kind", "full")
    add_orders(bed.server, bed.db, 100)
    later = bed.checksums()
    inc = backup(bed, "--kind", "incremental")
    bed.killed("copy", crash="copy.after_objects@2")
    assert sorted(bed.view(offsite=True).manifests) == [full]
    check_invariants(bed, offsite=True)
    out = bed.ok("copy")
    assert took_over(out), out
    assert sorted(check_invariants(bed, offsite=True).manifests) == [full, inc]
    check_restores(bed, full, expected, offsite=True)
    check_restores(bed, inc, later, offsite=True)


def report_key(bed: Bed, backup_id: str, offsite: bool = False) -> str:
    return f"{'far' if offsite else 'backups'}/{CLUSTER}/{HOST}/backups/{backup_id}/restore-report.json"


def crash_copy_after_report(bed: Bed) -> None:
    """Two backups with restore reports (as restore-test writes them), the copy killed after the
    first report: the next copy brings the second, byte for byte."""
    ids = [backup(bed, "--kind", "full")]
    add_orders(bed.server, bed.db, 50)
    ids.append(backup(bed, "--kind", "incremental"))
    for bid in ids:
        body = json.dumps({"backup_id": bid, "verdict": "pass", "finished_at": "2026-01-01T00:00:00+00:00"})
        bed.s3.client().put_object(Bucket=bed.primary, Key=report_key(bed, bid), Body=body.encode())
    bed.killed("copy", crash="copy.after_report")
    assert len([k for k in bed.view(offsite=True).objects if k.endswith("/restore-report.json")]) == 1
    out = bed.ok("copy")
    assert took_over(out), out
    check_invariants(bed, offsite=True)
    for bid in ids:
        assert bed.reader(bed.offsite).get_bytes(report_key(bed, bid, True)) == bed.reader().get_bytes(
            report_key(bed, bid)
        )


# -- abandoned attempts ----------------------------------------------------------------------------


def attempts(bed: Bed) -> set[str]:
    return {k.split("/")[4] for k in bed.view().objects if "/backups/" in k and k.count("/") > 4}


def crash_abandoned_before_removal(bed: Bed) -> None:
    """A backup killed before its manifest (A), then the run that took A's lock over killed before
    removing A's attempt (B). The next run takes B's lock over: only B is proven dead to it, and A's
    attempt predates B, so it stays as debris that retention names (after debris_grace_days)."""
    expected = bed.checksums()
    old = plant_debris(bed)
    backup(bed, "--kind", "full", crash="backup.after_objects")
    (attempt,) = attempts(bed) - {old}
    backup(bed, "--kind", "full", crash="abandoned.before_removal")
    assert attempts(bed) == {old, attempt}  # B had stored nothing of its own
    out = bed.ok("backup", "--no-copies")
    assert took_over(out), out
    check_restores(bed, out.split("\t")[0], expected)
    assert set(orphans(check_invariants(bed))) == {old, attempt}  # each named by retention


# -- read leases -----------------------------------------------------------------------------------


def killed_reader(bed: Bed, point: str = "lease.before_release") -> tuple[str, str]:
    """A full backup, a restore of it killed holding its read lease (at `point`), a newer full:
    (the first full, the lease's key)."""
    first = backup(bed, "--kind", "full")
    target = bed.tmp / "restored" / "data"
    target.parent.mkdir()
    bed.killed("restore", "--target-datadir", str(target), crash=point)
    (lease,) = [k for k in bed.view().objects if "/leases/" in k]
    add_orders(bed.server, bed.db, 50)
    backup(bed, "--kind", "full")
    return first, lease


def planned(bed: Bed, backup_id: str) -> dict[str, str]:
    plan = json.loads(bed.ok("retention", "plan", "--json").split("\nWARNING")[0])
    return {i["name"]: i for i in plan["items"]}[backup_id]


def _dead_lease(point: str) -> Callable[[Bed], None]:
    def scenario(bed: Bed) -> None:
        crash_lease_before_release(bed, point)

    scenario.__name__ = f"crash_{point.replace('.', '_')}"
    return scenario


def crash_lease_before_removal(bed: Bed) -> None:
    """Retention killed while removing the leases of readers that are gone (before it takes the
    lock): the next one removes them and deletes what they no longer hold."""
    first, lease = killed_reader(bed)
    bed.killed("retention", "apply", "--confirm", crash="lease.before_removal")
    assert lease in bed.view().objects and first in bed.view().manifests
    out = bed.ok("retention", "apply", "--confirm")
    assert "removed 1 read lease(s) of readers that are gone" in out, out
    view = check_invariants(bed)
    assert lease not in view.objects and first not in view.manifests


def crash_lease_before_release(bed: Bed, point: str = "lease.before_release") -> None:
    first, lease = killed_reader(bed, point)
    # Its process is gone from this machine: the lease holds nothing (keep_last_chains: 1).
    assert planned(bed, first)["action"] == "delete", planned(bed, first)
    out = bed.ok("retention", "apply", "--confirm")
    assert "removed 1 read lease(s) of readers that are gone" in out, out
    view = check_invariants(bed)
    assert lease not in view.objects and first not in view.manifests


def test_a_dead_reader_on_another_machine_keeps_its_lease_until_it_runs_out(bed):
    first, lease = killed_reader(bed)
    body = json.loads(bed.reader().get_bytes(lease))
    body["machine"] = "another-host/0f1e2d3c/pid:[4026531836]"  # nothing here can prove it dead
    bed.s3.client().put_object(Bucket=bed.primary, Key=lease, Body=json.dumps(body).encode())
    kept = planned(bed, first)
    # Its lease keeps what it read, named, until the lease runs out (10 minutes).
    assert kept["action"] == "keep" and "under a read lease of a running restore" in kept["reason"], kept
    check_invariants(bed)


# -- the standby -----------------------------------------------------------------------------------

STANDBY = """
import logging, sys
logging.basicConfig(level=logging.INFO)
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.restore.standby import update_standby
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client
endpoint, bucket, directory, key_file = sys.argv[1:5]
import os, pathlib
catalog = Catalog(S3Store(make_s3_client(endpoint, "us-east-1"), bucket), "backups", "c1", "db1")
done = update_standby(catalog, pathlib.Path(directory), private_key=pathlib.Path(key_file).read_text(),
                      passphrase=os.environ["XTRABACKUP_GPG_PASSPHRASE"])
print("rebuilt" if done.rebuilt else "updated", done.newest)
"""


def _standby_crash(point: str) -> Callable[[Bed], None]:
    def scenario(bed: Bed) -> None:
        backup(bed, "--kind", "full")
        add_orders(bed.server, bed.db, 100)
        expected = bed.checksums()
        newest = backup(bed, "--kind", "incremental")
        directory = bed.tmp / "standby"
        argv = ["-c", STANDBY, bed.s3.endpoint_url, bed.primary, str(directory), str(bed.tmp / "private.asc")]
        _ = bed.config  # writes the key files
        env = {"XTRABACKUP_GPG_PASSPHRASE": bed.keys.passphrase, "HOME": str(bed.tmp)}
        killed = run_python(argv, {**env, "XBP_CRASH_AT": point})
        assert killed.returncode == -9, killed.stderr[-2000:]
        again = run_python(argv, env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert again.stdout.split() == ["rebuilt", newest], again.stdout
        assert "an update was interrupted during 'apply" in again.stderr, again.stderr[-2000:]
        target = bed.tmp / "from-standby" / "data"
        target.parent.mkdir()
        bed.ok("restore", "--target-datadir", str(target), "--from-standby", str(directory))
        from helpers import restored_checksums

        assert restored_checksums(target, bed.tmp / "sb-standby", [bed.db], server_id=978) == expected
        check_invariants(bed)

    scenario.__name__ = f"crash_{point.replace('.', '_')}"
    return scenario


# -- promote ---------------------------------------------------------------------------------------


def _promote_crash(point: str) -> Callable[[Bed], None]:
    def scenario(bed: Bed, mariadb: object) -> None:
        from xtrabackup_provider.core.db.sandbox import SandboxServer

        assert isinstance(mariadb, SandboxServer)
        backup(bed, "--kind", "full")
        bed.server.query(f"INSERT INTO `{bed.db}`.audit VALUES ({secrets.randbelow(10**8) + 10**6}, 'fork')")
        reached = str(bed.server.query("SELECT @@gtid_binlog_pos")[0][0])
        bed.ok("binlogs", "ship", "--flush")
        # A server fresh from a point-in-time restore: no binlog of its own, gtid_slave_pos reached.
        mariadb.query("RESET MASTER")
        mariadb.query("SET GLOBAL gtid_slave_pos = %s", (reached,))
        creds = mariadb.write_client_defaults(bed.tmp / "promoted.cnf")
        bed.killed("promote", "--defaults-file", str(creds), crash=point)
        out = bed.ok("promote", "--defaults-file", str(creds))
        assert "promoted" in out, out
        view = bed.view()
        uuid = next(k for k in view.objects if "/timelines/" in k).rsplit("/", 1)[1].removesuffix(".json")
        record = bed.reader().get_json(f"backups/{CLUSTER}/{HOST}/timelines/{uuid}.json")
        state = str(mariadb.query("SELECT @@gtid_binlog_state")[0][0])
        assert sorted(state.split(",")) == sorted(record["binlog_state"].split(",")), (state, record)
        check_invariants(bed)

    scenario.__name__ = f"crash_{point.replace('.', '_')}"
    return scenario


# -- the table -------------------------------------------------------------------------------------

# point -> (protocol, what the next run does, the scenario). docs/RELIABILITY.md shows the same rows.
TABLE: dict[str, tuple[str, str, Callable[..., None]]] = {
    "backup.after_objects": ("backup registration", "takes over the lock (its process is gone), removes the killed run's objects, registers its own backup", crash_backup_after_objects),
    "backup.after_manifest": ("backup registration", "takes over the lock; the registered backup restores and the next is an incremental onto it", crash_backup_after_manifest),
    "lock.before_release": ("host lock release", "takes over the lock (its process is gone) at once", crash_lock_before_release),
    "parts.between_commits": ("K-part commit", "aborts the parts' open uploads and removes the committed part (its process is gone), registers its own backup", crash_parts_between_commits),
    "binlog.after_object": ("binlog registration", "takes over the shipping lock (its process is gone), removes the killed run's object, ships the binlog again: no object without a manifest, no hole; PITR through it equals the source", _binlog_object_crash("binlog.after_object", 1)),
    "binlog.after_object@2": ("binlog registration", "the first binlog registered, the second's object not: as @1 for the second", _binlog_object_crash("binlog.after_object@2", 2)),
    "binlog.after_segment": ("open binlog progress (continuous shipping)", "takes over the shipping lock, removes the killed run's segment, stores the open binlog's partial; closed later, shipped whole; PITR through it equals the source", _binlog_segment_crash(1)),
    "binlog.after_segment@2": ("open binlog progress (continuous shipping)", "a partial names the earlier segments, a later one is unregistered: the next run removes it, adopts the partial, stores the rest", _binlog_segment_crash(2)),
    "binlog.after_complete": ("binlog registration of a binlog shipped in segments", "the binlog is registered; the next run drops the stale partial manifest and its segments; PITR through it equals the source", crash_binlog_after_complete),
    "binlog.after_gap": ("binlog gap marker", "finds the gap recorded and ships on; PITR into the gap is refused naming it, past a new full it equals the source", crash_binlog_after_gap),
    "lock.after_takeover": ("lock takeover", "takes over the lock of the run that took over (both gone); the dead holders are handed on in the lock, so it removes the first killed shipper's object too", crash_lock_after_takeover),
    "retention.between_rounds": ("retention delete round", "takes over the lock and finishes the plan; meanwhile every chain left resolves", _retention_crash("retention.between_rounds")),
    "retention.before_data": ("retention delete round", "finds nothing left to delete: the data of the deleted manifests is debris retention names; the next backup takes over the lock", _retention_crash("retention.before_data")),
    "retention.after_data": ("retention delete round", "finds nothing left to delete; the next backup takes over the lock", _retention_crash("retention.after_data")),
    "copy.after_objects": ("copy", "takes over the target's lock and copies again; the killed copy's objects are debris the target's retention names", _copy_crash("copy.after_objects")),
    "copy.after_manifest": ("copy", "takes over the target's lock; the copy restores from the target", _copy_crash("copy.after_manifest")),
    "copy.after_objects@2": ("copy", "the first backup copied whole, the second's objects not registered: takes over the target's lock, copies the second; both restore from the target", crash_copy_after_objects_2),
    "copy.after_report": ("copy of restore reports", "takes over the target's lock and copies the reports not yet there, byte for byte", crash_copy_after_report),
    "abandoned.before_removal": ("cleanup of an abandoned attempt", "takes over the lock of the run that was removing the attempt (both gone); the attempt predates that run, so it stays as debris retention names (after debris_grace_days)", crash_abandoned_before_removal),
    "promote.after_timeline": ("promote's timeline record", "promotes again: the server's GTID state is the record's", _promote_crash("promote.after_timeline")),
    "promote.after_reset_master": ("promote's timeline record", "promotes again (RESET MASTER repeated): the server's GTID state is the record's", _promote_crash("promote.after_reset_master")),
    "standby.mid_step": ("standby update", "rebuilds the standby ('an update was interrupted during apply ...'); a restore from it equals the source", _standby_crash("standby.mid_step")),
    "standby.after_step": ("standby update", "rebuilds the standby; a restore from it equals the source", _standby_crash("standby.after_step")),
    "lease.before_release": ("read lease release", "retention on the reader's machine frees what it read at once (its process is gone) and removes the lease; elsewhere the lease keeps it named for 10 min", crash_lease_before_release),
    "lease.after_write": ("read lease (written, before the reader checks and reads)", "as lease.before_release: retention frees what it named and removes the lease", _dead_lease("lease.after_write")),
    "lease.before_removal": ("retention's removal of dead read leases", "takes over the lock, removes the dead leases, deletes what they no longer hold", crash_lease_before_removal),
}  # fmt: skip


# Known holes: the test shows the outcome a user needs, and fails (strict) until the product gives it.
HOLES: dict[str, str] = {}


@pytest.mark.parametrize(
    "point",
    [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=HOLES[p])) if p in HOLES else p
        for p in TABLE
    ],
)
def test_crash_point(point, bed, request):
    scenario = TABLE[point][2]
    if point.startswith("promote."):
        scenario(bed, request.getfixturevalue("mariadb"))
    else:
        scenario(bed)


def test_the_table_covers_every_crash_point_in_the_product_and_the_doc():
    called = set()
    for path in (REPO / "provider").rglob("*.py"):
        called |= set(re.findall(r'crash_point\("([a-z_]+\.[a-z_]+)"\)', path.read_text()))
    assert called == set(POINTS) == {point.split("@")[0] for point in TABLE}
    doc = (REPO / "docs" / "RELIABILITY.md").read_text()
    missing = [p for p in TABLE if f"`{p}`" not in doc]
    assert missing == [], f"docs/RELIABILITY.md lacks {missing}"


def test_a_crash_point_is_off_unless_named():
    probe = "from xtrabackup_provider.core.common.crashpoints import crash_point as c; c('x.y'); c('x.y'); print('alive')"
    assert run_python(["-c", probe], {}).stdout.strip() == "alive"
    assert run_python(["-c", probe], {"XBP_CRASH_AT": "x.yz"}).stdout.strip() == "alive"
    assert run_python(["-c", probe], {"XBP_CRASH_AT": "x.y@3"}).stdout.strip() == "alive"
    assert run_python(["-c", probe], {"XBP_CRASH_AT": "x.y@2"}).returncode == -9
    assert sys.executable  # the same interpreter as the suite
