"""The damage_object fault's expectations (tests/chaos/faults.py verify_lines, restore_line) held
against the product's own output, on one real backup copied offsite (the crash-point bed: a seeded
MariaDB, moto, no fleet): a stream corrupted at its size on the primary is failed by name by
`backups verify --deep` there and passed offsite, and the restore falls back to the offsite copy
saying so; deleted offsite as well, the restore refuses naming it and leaves the target empty."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from crashbed import Bed

from helpers import add_orders

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from faults import _gtid_seq, restore_line, verify_lines  # noqa: E402


def _out(bed: Bed, *args: str) -> tuple[int, str]:
    proc = bed.cli(*args)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_damaged_stream_is_refused_by_name_and_the_intact_copy_restores(bed: Bed) -> None:
    bed.ok("backup")
    bed.ok("copy")
    primary, offsite = bed.view(), bed.view(offsite=True)
    bid = sorted(primary.manifests)[-1]
    key = primary.manifests[bid]["objects"][0]["key"]
    far = offsite.manifests[bid]["objects"][0]["key"]
    name = key.rsplit("/", 1)[-1]
    client = bed.s3.client()
    data = bytearray(client.get_object(Bucket=bed.primary, Key=key)["Body"].read())
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(b ^ 0xFF for b in data[mid : mid + 16])  # as damage_object does
    client.put_object(Bucket=bed.primary, Key=key, Body=bytes(data))
    verify = (
        "verify",
        "--backup-id",
        bid,
        "--deep",
        "--private-key-file",
        str(bed.tmp / "private.asc"),
    )

    code, out = _out(bed, *verify)
    print(out)
    assert code == 1, out
    for store, want in verify_lines(bid, name, ["primary"]).items():
        assert re.search(want, out, re.M), f"{store}: /{want}/ not in\n{out}"
    code, out = _out(bed, "restore", "--backup-id", bid, "--target-datadir", str(bed.tmp / "one"))
    print(out)
    assert code == 0 and re.search(restore_line("backup", bid, name, ["primary"]), out), out

    client.delete_object(Bucket=bed.offsite, Key=far)
    code, out = _out(bed, *verify)
    print(out)
    for store, want in verify_lines(bid, name, ["primary", "offsite"]).items():
        assert re.search(want, out, re.M), f"{store}: /{want}/ not in\n{out}"
    target = bed.tmp / "two"
    code, out = _out(bed, "restore", "--backup-id", bid, "--target-datadir", str(target))
    print(out)
    assert code != 0 and re.search(restore_line("backup", bid, name, ["primary", "offsite"]), out), out
    assert not (target.is_dir() and any(target.iterdir())), f"the refused restore left files in {target}"


def test_a_damaged_binlog_is_refused_by_name_and_the_pitr_falls_back_to_the_intact_copy(bed: Bed) -> None:
    bed.ok("backup")
    add_orders(bed.server, bed.db, 200)
    bed.ok("binlogs", "ship", "--flush")
    bed.ok("copy")
    primary, offsite = bed.view(), bed.view(offsite=True)
    bid = sorted(primary.manifests)[-1]
    key = max(primary.binlogs, key=lambda k: _gtid_seq(primary.binlogs[k].get("gtid_last")))
    m, there = primary.binlogs[key], offsite.binlogs[key]
    seg, far = m["segments"][0]["object"]["key"], there["segments"][0]["object"]["key"]
    name = seg.rsplit("/", 1)[-1]
    to = str(m["gtid_last"]).split(",")[0]
    client = bed.s3.client()
    client.delete_object(Bucket=bed.primary, Key=seg)  # as damage_object does
    pitr = ("restore", "--backup-id", bid, "--to-gtid", to)
    code, out = _out(bed, *pitr, "--target-datadir", str(bed.tmp / "one"))
    print(out)
    assert code == 0 and re.search(restore_line("binlog", str(m["name"]), name, ["primary"]), out), out

    data = bytearray(client.get_object(Bucket=bed.offsite, Key=far)["Body"].read())
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(b ^ 0xFF for b in data[mid : mid + 16])
    client.put_object(Bucket=bed.offsite, Key=far, Body=bytes(data))
    target = bed.tmp / "two"
    code, out = _out(bed, *pitr, "--target-datadir", str(target))
    print(out)
    assert code != 0 and re.search(
        restore_line("binlog", str(m["name"]), name, ["primary", "offsite"]), out
    ), out
    assert not (target.is_dir() and any(target.iterdir())), f"the refused PITR left files in {target}"
