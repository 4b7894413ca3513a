"""`restore-table` of a partitioned table whose partition names need quoting (issue 38.6).

A partition name comes from the restored data (information_schema of the sandbox) and goes into
`ALTER TABLE ... EXCHANGE PARTITION` on the live server, run with the binlog off: it is an
identifier like every other, quoted as one. Names here: a reserved word, one with a space, one
with a backtick, one in capitals (InnoDB keeps the partition's tablespace under an encoded,
lower-cased file name). The table's own name has a `$`, which InnoDB's file names encode too.
"""

from __future__ import annotations

import secrets
import uuid

import yaml

from helpers import take_backup
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import quote_ident
from xtrabackup_provider.core.storage.local import LocalStore

PARTS = ["order", "p 1", "p`2", "Upper"]


def test_partitions_whose_names_need_quoting_are_restored(
    mariadb_factory, gpg_keys, tmp_path, monkeypatch, capsys
):
    """On main the restore ended in a KeyError traceback: the staged files were looked up by the
    partition's plain name (`p 1`), the server's file is `p@00201`; with that found, EXCHANGE
    PARTITION `p`2` was a syntax error."""
    server = mariadb_factory("tblparts", root_password=secrets.token_urlsafe(12))
    db = f"parts_{uuid.uuid4().hex[:8]}"
    bounds = ["100", "200", "300", "MAXVALUE"]
    partitions = ", ".join(
        f"PARTITION {quote_ident(name)} VALUES LESS THAN ({bound})"
        for name, bound in zip(PARTS, bounds, strict=True)
    )
    server.execute_script(
        f"CREATE DATABASE {db}; USE {db}; CREATE TABLE {db}.`t$p` (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB "
        f"PARTITION BY RANGE (id) ({partitions}); INSERT INTO {db}.`t$p` SELECT seq, CONCAT('v', seq) FROM seq_1_to_400;"
    )
    names = [
        r[0]
        for r in server.query(
            f"SELECT partition_name FROM information_schema.partitions "
            f"WHERE table_schema = '{db}' AND table_name = 't$p' "
            "ORDER BY partition_ordinal_position"
        )
    ]
    assert names == PARTS
    store = tmp_path / "store"
    catalog = Catalog(LocalStore(str(store)), "backups", "c1", "db1")
    take_backup(server, catalog, gpg_keys, "full")
    expected = server.query(f"SELECT * FROM {db}.`t$p` ORDER BY id")
    server.query(f"DELETE FROM {db}.`t$p` WHERE id % 2 = 0")

    private = tmp_path / "private.asc"
    private.write_text(gpg_keys.private_key)
    private.chmod(0o600)
    public = tmp_path / "public.asc"
    public.write_text(gpg_keys.public_key)
    config = tmp_path / "fleet.yaml"
    defaults = server.write_client_defaults(tmp_path / "client.cnf")
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(store)},
                "encryption": {"public_key_files": [str(public)], "private_key_file": str(private)},
                "clusters": [{"name": "c1", "hosts": [{"name": "db1", "defaults_file": str(defaults)}]}],
            }
        )
    )
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    binlog_before = server.query("SELECT @@gtid_binlog_pos")[0][0]
    rc = cli_main(
        [
            "restore-table",
            *("--config", str(config), "--cluster", "c1", "--host", "db1"),
            *("--table", f"{db}.t$p", "--scratch-dir", str(tmp_path)),
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert f"{db}.t$p -> {db}.t$p_restored" in out.out
    assert server.query(f"SELECT * FROM {db}.t$p_restored ORDER BY id") == expected
    restored = [
        r[0]
        for r in server.query(
            f"SELECT partition_name FROM information_schema.partitions WHERE table_schema = '{db}' "
            "AND table_name = 't$p_restored' ORDER BY partition_ordinal_position"
        )
    ]
    assert restored == PARTS
    # Each row sits in its partition (EXCHANGE put each tablespace where it belongs).
    for name, (low, high) in zip(PARTS, [(1, 99), (100, 199), (200, 299), (300, 400)], strict=True):
        rows = server.query(
            f"SELECT MIN(id), MAX(id), COUNT(*) FROM {db}.t$p_restored PARTITION ({quote_ident(name)})"
        )
        assert rows == [(low, high, high - low + 1)], name
    assert server.query(f"SHOW TABLES FROM {db}") == [("t$p",), ("t$p_restored",)]
    assert server.query("SELECT @@gtid_binlog_pos")[0][0] == binlog_before
