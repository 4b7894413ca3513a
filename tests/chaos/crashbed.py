"""The crash-point suite's bed: one test's fleet (a server, a primary and an offsite bucket, the
fleet config for the CLI), the CLI run with or without a crash point, and the checker's verdicts
over the buckets (tests/chaos/invariants.py, tests/chaos/restorer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from invariants import orphans, registered, stale_holds
from restorer import decrypting_home, restore_chain
from storeview import HostView, StoreReader, binlog_pieces

from helpers import RUN, restored_checksums
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums

CLUSTER, HOST = "c1", "db1"


@dataclass
class Bed:
    """One test's fleet: the server, a primary and an offsite bucket, the config, the checker."""

    server: SandboxServer
    db: str
    s3: Any  # helpers.S3Server
    keys: Any  # helpers.GpgKeys
    tmp: Path
    primary: str
    offsite: str
    policy: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        path = self.tmp / "fleet.yaml"
        if not path.exists():
            (self.tmp / "public.asc").write_text(self.keys.public_key)
            (self.tmp / "private.asc").write_text(self.keys.private_key)
            host = {
                "name": HOST,
                "defaults_file": str(self.server.write_client_defaults(self.tmp / "client.cnf")),
            }
            path.write_text(
                yaml.safe_dump(
                    {
                        "storage": {"bucket": self.primary, "endpoint_url": self.s3.endpoint_url},
                        "copies": [
                            {
                                "name": "offsite",
                                "bucket": self.offsite,
                                "endpoint_url": self.s3.endpoint_url,
                                "prefix": "far",
                                "copy_attempts": 1,
                                "copy_retry_seconds": 0,
                            }
                        ],  # fmt: skip
                        "encryption": {
                            "public_key_files": [str(self.tmp / "public.asc")],
                            "private_key_file": str(self.tmp / "private.asc"),
                        },
                        "policy": {"max_incremental_ratio": 10.0, **self.policy},
                        "retention": {"keep_last_chains": 1, "min_age_days": 0},
                        "clusters": [{"name": CLUSTER, "hosts": [host]}],
                    }
                )
            )
        return path

    def cli(
        self, *args: str, crash: str | None = None, host: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`xtrabackup-provider ARGS --config ... --cluster c1 --host db1`, killed at `crash` if given."""
        env = {"XTRABACKUP_GPG_PASSPHRASE": self.keys.passphrase, "HOME": str(self.tmp)}
        if crash:
            env["XBP_CRASH_AT"] = crash
        where = ["--config", str(self.config), "--cluster", CLUSTER] + (["--host", HOST] if host else [])
        return run_python(["-c", RUN, *args, *where], env)

    def ok(self, *args: str, **kw: Any) -> str:
        proc = self.cli(*args, **kw)
        assert proc.returncode == 0, f"{args[0]} exited {proc.returncode}: {proc.stderr[-3000:]}"
        return proc.stdout + proc.stderr

    def killed(self, *args: str, crash: str) -> None:
        proc = self.cli(*args, crash=crash)
        assert proc.returncode == -9, (
            f"{args[0]} was not killed at {crash}: exit {proc.returncode}: {proc.stderr[-2000:]}"
        )

    def reader(self, bucket: str | None = None) -> StoreReader:
        return StoreReader(self.s3.client(), bucket or self.primary)

    def view(self, offsite: bool = False) -> HostView:
        reader = self.reader(self.offsite if offsite else None)
        return reader.host(f"{'far' if offsite else 'backups'}/{CLUSTER}/{HOST}")

    def checksums(self) -> dict[str, int]:
        return table_checksums(self.server, [self.db])


def run_python(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "XBP_CRASH"))}
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env={**clean, **env}, timeout=900
    )


# -- the checker's verdicts -------------------------------------------------------------------------


def debris_named_by_retention(bed: Bed, offsite: bool = False) -> set[str]:
    """The debris directories retention names, planned past the grace period (`debris_grace_days`)."""
    import json
    from datetime import UTC, datetime, timedelta

    at = (datetime.now(UTC) + timedelta(days=8)).strftime("%Y-%m-%dT%H:%M:%SZ")
    proc = bed.cli(
        "retention", "plan", "--json", "--at", at, *(["--target-store", "offsite"] if offsite else [])
    )
    assert proc.returncode == 0, proc.stderr
    plan: dict[str, Any] = json.loads(proc.stdout)
    return {i["name"] for i in plan["items"] if i["kind"] == "debris" and i["action"] == "delete"}


def check_invariants(bed: Bed, offsite: bool = False) -> HostView:
    """Every registered backup is whole, every orphan is debris retention names, no hold is stale."""
    view = bed.view(offsite)
    assert registered(view) == []
    strays = orphans(view)
    assert "binlogs" not in strays, strays
    if strays:
        assert set(strays) <= debris_named_by_retention(bed, offsite), strays
    assert stale_holds(bed.reader(bed.offsite if offsite else None), view) == []
    return view


def check_restores(bed: Bed, backup_id: str, expected: dict[str, int], offsite: bool = False) -> None:
    """The checker's own restore of `backup_id` (tools only) equals the source at that backup."""
    view = bed.view(offsite)
    work = bed.tmp / f"check-{backup_id}"
    work.mkdir()
    with decrypting_home(bed.keys.private_key, bed.keys.passphrase) as gpg:
        datadir = restore_chain(
            bed.reader(bed.offsite if offsite else None), view.chain(backup_id), gpg, work
        )
    assert restored_checksums(datadir, work / "sb", [bed.db], server_id=977) == expected


def binlog_debris(view: HostView) -> list[str]:
    """Stricter than `orphans` for binlogs: every binlog object (a partial's segments too) is named
    by a manifest, and no partial manifest is left beside its binlog's complete one (its segments
    would then never be removed)."""
    named = {k for m in (*view.binlogs.values(), *view.partials.values()) for k, _ in binlog_pieces(m)}
    base = view.prefix + "/binlogs/"
    out = [k for k in view.objects if k.startswith(base) and not k.endswith(".json") and k not in named]
    return out + [
        f"{name}: a partial manifest beside the complete one"
        for name in view.partials
        if name in view.binlogs
    ]


def check_binlogs(bed: Bed) -> HostView:
    """check_invariants, and nothing of binlog shipping is left unregistered or stale."""
    view = check_invariants(bed)
    debris = binlog_debris(view)
    assert debris == [], debris
    return view


def gtid_now(bed: Bed) -> str:
    return str(bed.server.query("SELECT @@gtid_binlog_pos")[0][0])


def check_pitr(bed: Bed, gtid: str, expected: dict[str, int], name: str = "pitr") -> None:
    """`restore --to-gtid` through the shipped binlogs (the product's PITR) equals the source's data
    at that GTID (CHECKSUM TABLE)."""
    target = bed.tmp / name / "data"
    target.parent.mkdir()
    out = bed.ok("restore", "--target-datadir", str(target), "--to-gtid", gtid)
    assert restored_checksums(target, bed.tmp / f"sb-{name}", [bed.db], server_id=979) == expected, out
