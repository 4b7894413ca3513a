"""The chaos checker's own books (tests/chaos/ledger.py): what retention had to keep, what the store
can restore, what was lost and why; and the sha256 invariant over manifests, partial ones too.
No fleet: the ledger's pure judgements, and the digests invariant on the session's moto endpoint."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

from invariants import digests, intact_binlogs
from ledger import (
    AFTER_FAULT,
    CUTS_HISTORY,
    SHIP_BOUND,
    STOPS_SHIPPING,
    FaultSeen,
    Ledger,
    Policy,
    Span,
    _hms,
    blame,
    lag,
    recoverable,
    retention_floor,
    stall_to_judge,
    stops_shipping,
    unrecoverable,
)
from ledger import Backup as B
from storeview import StoreReader

MIN = 60.0
KEEP2 = Policy(keep_last_chains=2, pitr_days=10 * MIN / 86400, min_age_days=0)


def chains(now: float) -> list[B]:
    """Three chains of a full and two incrementals, a backup every 4 minutes, the newest just done."""
    out = []
    for n in range(9):
        bid = f"2026120{n}"
        root = f"2026120{n - n % 3}"
        parent = None if n % 3 == 0 else f"2026120{n - 1}"
        out.append(B(bid, "full" if n % 3 == 0 else "incremental", parent, root, 100 * (n + 1), "u1",
                     now - (8 - n) * 4 * MIN))  # fmt: skip
    return out


def test_the_floor_is_the_newest_chains_whole_and_the_pitr_window_with_its_base() -> None:
    now = 1_000_000.0
    floor = retention_floor(chains(now), now, KEEP2)
    # chains 3..5 and 6..8 whole; the window (10 min) holds 6..8, its base is 5: nothing of 0..2
    assert floor == {f"2026120{n}" for n in range(3, 9)}
    wide = retention_floor(chains(now), now, Policy(2, pitr_days=30 * MIN / 86400))
    # a 30-minute window reaches back to backup 1 (28 min ago is 1's end): its base 0 and all of 0..2
    assert {"20261200", "20261201", "20261202"} <= wide


def test_a_backup_of_a_kept_chain_gone_from_the_store_is_backup_lost_and_the_oldest_chain_is_not(
    tmp_path: Path,
) -> None:
    now = 1_000_000.0
    ledger = Ledger(tmp_path / "ledger.jsonl", {"primary": KEEP2})
    for b in chains(now):
        ledger.backups[("primary", "c1", b.id)] = b
    # retention deleted chain 0..2 (allowed) and, one chain too many, 3..5
    present = {f"2026120{n}" for n in range(6, 9)}
    found = ledger.vanished("primary", "c1", present, set(), now)
    assert sorted(f.subject for f in found if f.what == "backup lost") == [
        "primary c1 20261203", "primary c1 20261204", "primary c1 20261205",
    ]  # fmt: skip
    assert "chain 20261203 is #2 of the newest 2" in found[0].text
    # each vanished backup is recorded once, with whether retention had to keep it
    gone = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert {(r["id"], r["in_floor"]) for r in gone if r["type"] == "gone"} == {
        (f"2026120{n}", n >= 3) for n in range(6)
    }
    assert ledger.vanished("primary", "c1", present, set(), now + 1) == []


def test_a_complete_binlog_a_kept_backup_needs_gone_is_binlog_lost(tmp_path: Path) -> None:
    now = 1_000_000.0
    ledger = Ledger(tmp_path / "ledger.jsonl", {"primary": KEEP2})
    for b in chains(now):
        ledger.backups[("primary", "c1", b.id)] = b
    ledger.spans[("primary", "c1", "u1/bin.000001")] = Span("u1", "bin.000001", 1, 350)  # before chain 3..5
    ledger.spans[("primary", "c1", "u1/bin.000002")] = Span("u1", "bin.000002", 351, 700)
    present = {b.id for b in chains(now)}
    found = ledger.vanished("primary", "c1", present, set(), now)
    assert [(f.what, "bin.000002" in f.text) for f in found] == [("binlog lost", True)]


def test_the_store_restores_from_each_backup_on_through_its_own_servers_binlogs_without_a_hole() -> None:
    spans = [Span("u1", "b.1", 1, 150), Span("u1", "b.2", 151, 200), Span("u1", "b.4", 230, 300),
             Span("u2", "b.1", 250, 400)]  # fmt: skip
    # u1's full at 100 reaches 200 (b.3 is missing); u2's full at 260 reaches 400
    assert recoverable([(100, "u1"), (260, "u2")], spans) == [(100, 200), (260, 400)]
    # an incremental at 240 of u1 reaches on through b.4
    assert recoverable([(100, "u1"), (240, "u1")], spans) == [(100, 200), (240, 300)]


def test_an_unrecoverable_range_is_lost_unless_a_fault_on_its_cluster_predicts_it() -> None:
    tx = [(1000.0 + s, s) for s in range(1, 501)]  # one transaction a second: seq s at 1000 + s
    have = [(100, 200), (260, 400)]
    lost = unrecoverable("c1", tx, 100, 450, have, [])
    assert [(f.text.split(" (")[0], f.cause, f.transactions) for f in lost] == [
        ("c1: seq 201..259", "lost", 59), ("c1: seq 401..450", "lost", 50),
    ]  # fmt: skip
    reseed = FaultSeen("reseed_replica", ("c1",), 1230.0, 1300.0)
    elsewhere = FaultSeen("reseed_replica", ("c2",), 1230.0, 1300.0)
    no_effect = FaultSeen("reseed_replica", ("c1",), 1230.0, 1300.0, effect=False)
    judged = unrecoverable("c1", tx, 100, 260, have, [elsewhere, no_effect, reseed])
    assert [f.cause for f in judged] == ["reseed_replica at " + judged[0].cause.split(" at ")[1]]
    assert judged[0].cause.startswith("reseed_replica")
    assert [f.cause for f in unrecoverable("c1", tx, 100, 260, have, [elsewhere, no_effect])] == ["lost"]
    assert "reseed_replica" in CUTS_HISTORY
    # a range from the floor's oldest backup, which is gone: lost, though a re-seed came in it
    assert unrecoverable("c1", tx, 201, 259, have, [reseed])[0].cause.startswith("reseed_replica")
    assert [f.cause for f in unrecoverable("c1", tx, 201, 259, have, [reseed], start_gone=True)] == ["lost"]


def test_of_several_faults_that_explain_a_range_the_nearest_is_named() -> None:
    # Seed 120533: re-seeds at 17:51, 18:04 and 18:08 all overlap what was acknowledged 18:06-18:10.
    tx = [(1000.0 + s, s) for s in range(1, 2001)]
    reseeds = [FaultSeen("reseed_replica", ("c1",), t, t + 60.0) for t in (1000.0, 1780.0, 2035.0)]
    [found] = unrecoverable("c1", tx, 100, 1300, [(100, 1100)], reseeds)
    assert found.cause == f"reseed_replica at {_hms(2035.0)}"


def test_a_stall_of_shipping_is_explained_only_by_a_fault_whose_effect_reached_shipping() -> None:
    stall = (1000.0, 1600.0)
    copy = [["mysql_binlog_shipping_c1", "copy_binlogs_offsite", "r"]]
    follower = [["mysql_binlog_shipping_c1", "ship_binlogs", "r"]]
    restore_test = [["mysql_restore_test_c1", "restore_latest_chain", "r"]]
    for kind, target, note, victims, reached in (
        ("kill_worker", "worker-c1-r1", "", copy, False),
        ("kill_worker", "worker-c1-r1", "", restore_test, False),
        ("kill_worker", "worker-c1-r1", "", follower, True),
        ("kill_tool", "gpg pid 1 on worker-c1-r2", "", follower, True),
        ("restart_db", "c1-r2 killed", "", [], False),
        ("restart_db", "c1-r1 stopped", "", [], True),
        ("s3_partition", "offsite for 2.0 min", "offsite", [], False),
        ("s3_partition", "primary for 2.0 min", "primary", [], True),
    ):
        f = FaultSeen(kind, ("c1",), 1100.0, 1200.0, on_shipping=stops_shipping(kind, target, note, victims))
        assert (blame("c1", *stall, [f], STOPS_SHIPPING) != "lost") is reached, (kind, target, victims)


def test_a_stall_that_outlasts_the_fault_that_began_it_is_named_when_shipping_never_resumes() -> None:
    """A shipper that silently stops after a fault: the fault explains the stall's start only."""
    fault = FaultSeen("kill_worker", ("c1",), 1000.0, 1060.0, on_shipping=True)
    judged: float | None = None
    verdicts = []
    for now in range(
        1000 + int(SHIP_BOUND) + 60, 1000 + 3600, 60
    ):  # a sweep a minute, shipping stuck at 1000
        behind = now - 1000.0
        since = stall_to_judge(judged, behind, float(now))
        if since is not None:
            judged = float(now)
            verdicts.append((now, blame("c1", since, float(now), [fault], STOPS_SHIPPING)))
    assert verdicts[0][1].startswith("kill_worker"), verdicts
    assert [v for _, v in verdicts if v == "lost"], verdicts  # judged only once, it was excused for an hour
    first_lost = next(t for t, v in verdicts if v == "lost")
    assert first_lost - 1060.0 <= AFTER_FAULT + 2 * SHIP_BOUND, verdicts  # named within 30 minutes
    # shipping that catches up ends the stall: no judgement is due, the next stall is judged anew
    assert stall_to_judge(judged, SHIP_BOUND - 1, 5000.0) is None
    assert stall_to_judge(None, SHIP_BOUND + 10, 5000.0) == 5000.0 - SHIP_BOUND - 10


def test_the_lag_is_the_wait_of_the_oldest_acknowledged_transaction_not_shipped() -> None:
    tx = [(1000.0 + s, s) for s in range(1, 501)]
    assert lag(tx, 500, 2000.0) == 0.0
    assert lag(tx, 300, 1500.0) == 1500.0 - 1301.0  # seq 301, acknowledged at 1301, waits
    assert lag(tx, 300, 1200.0) == 0.0  # at 1200 nothing past 300 was acknowledged yet


def put(client, bucket: str, key: str, body: bytes) -> dict[str, object]:  # type: ignore[no-untyped-def]
    client.put_object(Bucket=bucket, Key=key, Body=body)
    return {"key": key, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_digests_name_an_object_of_the_right_size_but_other_bytes_and_a_partials_missing_segment(
    s3_server,  # type: ignore[no-untyped-def]
) -> None:
    bucket = s3_server.make_bucket(f"xbp-ledger-{uuid.uuid4().hex[:12]}")
    client = s3_server.client()
    prefix = "backups/c1/r1"
    good = put(client, bucket, f"{prefix}/backups/b1/backup.xbstream", b"a" * 100)
    swapped = put(client, bucket, f"{prefix}/backups/b2/backup.xbstream", b"b" * 100)
    swapped["sha256"] = hashlib.sha256(b"c" * 100).hexdigest()  # the manifest names other bytes, same size
    for bid, obj in (("b1", good), ("b2", swapped)):
        manifest = {"backup_id": bid, "kind": "full", "chain_root": bid, "objects": [obj]}
        client.put_object(
            Bucket=bucket, Key=f"{prefix}/backups/{bid}/manifest.json", Body=json.dumps(manifest)
        )
    seg0 = put(client, bucket, f"{prefix}/binlogs/u1/bin.000001.partial-000000000000.zst", b"x" * 10)
    seg1 = {"key": f"{prefix}/binlogs/u1/bin.000001.partial-000000000010.zst", "size": 5, "sha256": "0" * 64}
    partial = {"name": "bin.000001", "server_uuid": "u1", "complete": False,
               "segments": [{"object": seg0}, {"object": seg1}]}  # fmt: skip
    client.put_object(
        Bucket=bucket, Key=f"{prefix}/binlogs/u1/bin.000001.partial.json", Body=json.dumps(partial)
    )
    reader = StoreReader(client, bucket)
    cache: dict[tuple[str, int, str], str] = {}
    found = digests(reader, reader.host(prefix), cache)
    assert len(found) == 2, found
    assert found[0].startswith(f"backup b2 needs {prefix}/backups/b2/backup.xbstream: its bytes hash to ")
    assert found[1] == f"open binlog u1/bin.000001 (partial) needs {seg1['key']}: it is gone"
    # and the ledger's recoverable range leaves that binlog out
    assert intact_binlogs(reader, reader.host(prefix), cache) == []
    # a partial dropped meanwhile (its binlog shipped whole) is not judged
    client.delete_object(Bucket=bucket, Key=f"{prefix}/binlogs/u1/bin.000001.partial.json")
    view = reader.host(prefix)
    view.partials["u1/bin.000001"] = partial
    assert [f for f in digests(reader, view, cache) if "binlog" in f] == []
