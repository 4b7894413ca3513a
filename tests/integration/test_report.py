"""`xtrabackup-provider report`: a self-contained HTML page per cluster, built from a real catalog
(real backups, a real restore test, real shipped binlogs), and the restore path's progress log."""

from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from helpers import add_orders, restore_with, seed_database, unique_name
from xtrabackup_provider.cli import main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, server_uuids
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.catalog.reports import read_report
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.report.html import fmt_bytes, fmt_seconds
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.storage.local import LocalStore


@dataclass
class Fleet:
    config: Path
    db1: list[Manifest]  # full, incremental, incremental
    db2: list[Manifest]  # one full, whose restore test failed
    catalogs: dict[str, Catalog]


@pytest.fixture(scope="module")
def fleet(mariadb_factory, gpg_keys, tmp_path_factory):
    """Cluster `rep`: db1 with a chain of three, a passed restore test and shipped binlogs; db2
    with one full and a failed restore test; db3 never backed up. db1 and db2 back up one server."""
    root = tmp_path_factory.mktemp("report")
    server = mariadb_factory("report", root_password=secrets.token_urlsafe(12))
    try:
        target = MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)
        store = LocalStore(root / "store")
        catalogs = {h: Catalog(store, "backups", "rep", h) for h in ("db1", "db2", "db3")}
        db = unique_name("report")
        seed_database(server, db, rows=2000)
        backup = dict(target=target, public_keys=[gpg_keys.public_key])
        db1 = [run_backup(BackupRequest(catalogs["db1"], kind="full", **backup))]
        for _ in range(2):
            add_orders(server, db, 3000)
            db1.append(run_backup(BackupRequest(catalogs["db1"], kind="incremental", **backup)))
        db2 = [run_backup(BackupRequest(catalogs["db2"], kind="full", **backup))]
        keys = dict(private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase)
        passed = run_restore_test(RestoreTestRequest(catalogs["db1"], root / "rt1", **keys))
        assert passed.verdict == "pass", passed.reasons
        # Without the private key the restore of an encrypted backup fails: a failed test.
        failed = run_restore_test(RestoreTestRequest(catalogs["db2"], root / "rt2"))
        assert failed.verdict == "fail"
        ship_binlogs(ShipRequest(catalogs["db1"], target, [gpg_keys.public_key], flush=True))
        config = root / "fleet.yaml"
        hosts = [{"name": h} for h in catalogs]
        config.write_text(
            yaml.safe_dump(
                {
                    "storage": {"local_path": str(root / "store"), "prefix": "backups"},
                    "policy": {"max_chain_length": 4},
                    "clusters": [{"name": "rep", "hosts": hosts}],
                }
            )
        )
        yield Fleet(config, db1, db2, catalogs)
    finally:
        mariadb_factory.discard(server)


class Page(HTMLParser):
    """Rows of the report's tables, keyed by their data-* attribute, as lists of cell texts;
    plus every tag with its attributes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str], list[str]] = {}
        self.titles: dict[tuple[str, str], list[str]] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._row: tuple[str, str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "tr":
            key = next(((k, v) for k, v in a.items() if k.startswith("data-") and v), None)
            self._row = key
            if key:
                self.rows[key], self.titles[key] = [], []
        elif tag == "td" and self._row:
            self._cell = []
            self.titles[self._row].append(a.get("title") or "")
        elif tag == "br" and self._cell is not None:
            self._cell.append(" | ")

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._row and self._cell is not None:
            self.rows[self._row].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._row = None


def _report(fleet: Fleet, tmp_path: Path, capsys) -> tuple[str, Page, str]:
    out = tmp_path / "out" / "report.html"
    code = main(["report", "--config", str(fleet.config), "--cluster", "rep", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    text = out.read_text()
    return text, Page(text), printed


def test_report_shows_every_host_with_the_catalog_numbers(fleet, tmp_path, capsys):
    text, page, printed = _report(fleet, tmp_path, capsys)

    summary = {key[1]: cells for key, cells in page.rows.items() if key[0] == "data-host"}
    assert list(summary) == ["db1", "db2", "db3"]
    host, count, latest, sizes, chain, verified, lag, copies = summary["db1"]
    newest = fleet.db1[-1]
    assert count == "3" and latest.startswith(newest.backup_id) and "incremental" in latest
    assert sizes == f"{fmt_bytes(newest.raw_bytes)} / {fmt_bytes(newest.stored_bytes)}"
    assert chain == "2 / 4"
    assert verified.startswith(f"PASS {newest.backup_id}")
    report = read_report(fleet.catalogs["db1"], newest.backup_id)
    restore_seconds = sum(report["timings"][k] for k in ("fetch_extract", "prepare", "copy_back"))
    assert f"restore {fmt_seconds(restore_seconds)}" in verified
    assert "FAILED" not in verified
    (uuid,) = server_uuids(fleet.catalogs["db1"])
    newest_binlog = BinlogCatalog(fleet.catalogs["db1"], uuid).index().names()[-1]
    assert newest_binlog in lag and "n/a" not in lag

    db2 = summary["db2"]
    assert db2[1] == "1" and "never verified" in db2[5] and "newest test FAILED" in db2[5]
    assert db2[6].startswith("n/a") and "no binlogs shipped" in db2[6]
    assert summary["db3"][1] == "0" and "no backups" in summary["db3"][2]

    # Every backup of the catalog has its row, with the manifest's numbers.
    for manifest, length in zip([*fleet.db1, *fleet.db2], [0, 1, 2, 0], strict=True):
        key = ("data-backup-id", manifest.backup_id)
        backup_id, kind, parent, _started, raw, stored, _dur, chain_cell, _cls, test = page.rows[key]
        assert (backup_id, kind, parent) == (manifest.backup_id, manifest.kind, manifest.parent_id or "-")
        assert (raw, stored) == (fmt_bytes(manifest.raw_bytes), fmt_bytes(manifest.stored_bytes))
        assert page.titles[key][4:6] == [f"{manifest.raw_bytes:,} bytes", f"{manifest.stored_bytes:,} bytes"]
        assert chain_cell == str(length)
        expected = {fleet.db1[-1].backup_id: "pass", fleet.db2[0].backup_id: "fail"}
        assert test == expected.get(manifest.backup_id, "")

    restore_row = page.rows[("data-restore", newest.backup_id)]
    assert restore_row[1:5] == [newest.backup_id, "3", "quick", "PASS"]
    assert restore_row[5] == fmt_seconds(restore_seconds)
    failed_row = page.rows[("data-restore", fleet.db2[0].backup_id)]
    # The verdict cell names the check that failed (the restore step itself: no private key).
    assert failed_row[4] == "FAIL | restore" and "private key" in failed_row[7]

    # Charts: sizes, durations and chain lengths for each host with backups, the lag chart, and the
    # lock chart for each host whose backups' logs show production blocked (their manifests say).
    svgs = [a for tag, a in page.tags if tag == "svg"]
    blocked = [
        any(m.impact and any(m.impact.blocked_seconds.values()) for m in h) for h in (fleet.db1, fleet.db2)
    ]
    assert len(svgs) == 1 + 3 * 2 + sum(blocked)
    labels = [a["aria-label"] for a in svgs]
    assert labels.count("Chain length (incrementals since the full)") == 2
    assert text.count('class="mark">✓</text>') == 1, "the verified backup is marked in db1's size chart"
    assert "db1\t3 backup(s)\tlast verified restore: " + newest.backup_id in printed


def test_report_is_self_contained(fleet, tmp_path, capsys):
    text, page, _ = _report(fleet, tmp_path, capsys)
    assert not [t for t, _ in page.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert not [a for _, a in page.tags if "src" in a]
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    assert hrefs and all(h and h.startswith("#host-") for h in hrefs), hrefs
    assert "url(" not in text and "@import" not in text and "@font-face" not in text
    assert not re.search(r"https?://", text)


def test_a_broken_manifest_is_a_warning_not_a_missing_report(fleet, tmp_path, capsys):
    catalog = fleet.catalogs["db2"]
    bogus = catalog.manifest_key("20260101T000000Z-full")
    catalog.store.put_bytes(bogus, b"{not json")
    try:
        out = tmp_path / "r.html"
        code = main(["report", "--config", str(fleet.config), "--cluster", "rep", "--out", str(out)])
    finally:
        catalog.store.delete([bogus])
    err = capsys.readouterr().err
    assert code == 1
    assert "WARNING: db2:" in err and "20260101T000000Z-full" in err
    page = Page(out.read_text())
    assert page.rows[("data-host", "db2")][1] == "1", "the readable backups are still reported"
    assert "invalid manifest" in out.read_text()


def test_unknown_cluster_is_a_clear_error(fleet, tmp_path, capsys):
    code = main(["report", "--config", str(fleet.config), "--cluster", "nope", "--out", str(tmp_path / "x")])
    assert code == 2
    assert "no cluster 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    (tmp_path / "file").write_text("")
    code = main(
        ["report", "--config", str(fleet.config), "--cluster", "rep", "--out", str(tmp_path / "file/r.html")]
    )
    assert code == 2
    assert f"cannot write the report to {tmp_path / 'file/r.html'}" in capsys.readouterr().err


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_restore_logs_fetch_progress_per_backup(fleet, gpg_keys, tmp_path):
    handler = _Lines()
    logger = logging.getLogger("xtrabackup_provider.core.restore.chain")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        restore_with(fleet.catalogs["db1"], gpg_keys, tmp_path / "data", progress_seconds=0)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    for m in fleet.db1:
        lines = [line for line in handler.lines if line.startswith(f"fetch of {m.backup_id}: ")]
        assert lines, handler.lines
        assert all(
            re.fullmatch(r".*: [\d.]+ MiB at [\d.]+ MiB/s(, ETA \d+s \(the manifest's size\))?", x)
            for x in lines
        )
