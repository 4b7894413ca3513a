"""restore-table's name handling and DDL rewriting (core/pitr/table.py), on real SHOW CREATE TABLE text."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.pitr.table import (
    TableName,
    TableRestoreError,
    TableRestoreRequest,
    _pairs,
    copy_ddl,
    drop_foreign_keys,
)

CHILD = """CREATE TABLE `child` (
  `id` int(11) NOT NULL,
  `parent_id` int(11) DEFAULT NULL,
  PRIMARY KEY (`id`),
  KEY `kp` (`parent_id`),
  CONSTRAINT `fk_child_parent` FOREIGN KEY (`parent_id`) REFERENCES `parent` (`id`) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci"""

PARTITIONED = """CREATE TABLE `tp` (
  `id` int(11) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci
 PARTITION BY RANGE (`id`)
(PARTITION `p0` VALUES LESS THAN (1000) ENGINE = InnoDB,
 PARTITION `p1` VALUES LESS THAN MAXVALUE ENGINE = InnoDB)"""


def _request(tables, new_names=()):
    return TableRestoreRequest(catalog=None, live=None, tables=list(tables), new_names=list(new_names))  # type: ignore[arg-type]


def test_the_copy_gets_the_new_name_an_explicit_row_format_and_no_foreign_keys():
    ddl, dropped = drop_foreign_keys(copy_ddl(CHILD, TableName("db", "child_restored"), "Dynamic"))
    assert ddl.startswith("CREATE TABLE `db`.`child_restored` (")
    assert "FOREIGN KEY" not in ddl and dropped == ["fk_child_parent"]
    assert ddl.endswith("COLLATE=latin1_swedish_ci ROW_FORMAT=DYNAMIC")
    assert "KEY `kp` (`parent_id`)\n)" in ddl


def test_the_row_format_goes_before_the_partitioning_and_an_explicit_one_stays():
    ddl = copy_ddl(PARTITIONED, TableName("db", "tp_restored"), "Dynamic")
    assert "latin1_swedish_ci ROW_FORMAT=DYNAMIC\n PARTITION BY RANGE" in ddl
    compressed = CHILD.replace(
        "latin1_swedish_ci", "latin1_swedish_ci ROW_FORMAT=COMPRESSED KEY_BLOCK_SIZE=8"
    )
    assert copy_ddl(compressed, TableName("db", "c"), "Compressed").count("ROW_FORMAT=") == 1


def test_the_row_format_stays_implicit_when_the_live_default_is_the_same():
    """An explicit ROW_FORMAT changed MySQL 9.7's CHECKSUM TABLE of a copy of INT columns alone
    (rows equal): it is added only when the live server would create another format."""
    same = copy_ddl(CHILD, TableName("db", "c"), "Dynamic", live_default="dynamic")
    assert "ROW_FORMAT" not in same and same.startswith("CREATE TABLE `db`.`c` (")
    other = copy_ddl(CHILD, TableName("db", "c"), "Compact", live_default="dynamic")
    assert other.endswith("COLLATE=latin1_swedish_ci ROW_FORMAT=COMPACT")


def test_names_default_to_restored_and_bad_ones_are_refused_by_name():
    pairs = _pairs(_request(["shop.orders", "shop.items"]))
    assert [(str(a), str(b)) for a, b in pairs] == [
        ("shop.orders", "shop.orders_restored"),
        ("shop.items", "shop.items_restored"),
    ]
    for tables, new, message in [
        (["orders"], [], "table 'orders': give schema.table"),
        (["shop.or`ders"], [], "table 'shop.or`ders'"),
        (["shop.orders"], ["shop.a", "shop.b"], "1 table(s) but 2 new name(s)"),
        (["shop.orders"], ["shop.orders"], "shop.orders: a new name must differ"),
        (["shop.a", "shop.b"], ["shop.x", "shop.X"], "a new name is named twice"),
        ([], [], "name at least one table"),
    ]:
        with pytest.raises(TableRestoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
            _pairs(_request(tables, new))


def test_server_and_file_errors_become_one_line_and_ours_pass_through():
    import MySQLdb

    from xtrabackup_provider.core.pitr.table import _plain_failure, _sql_error

    server = MySQLdb.OperationalError(1809, "Table db/t_restored in system tablespace")
    assert _plain_failure(server) and _sql_error(server) == "1809 Table db/t_restored in system tablespace"
    assert _plain_failure(PermissionError(13, "Permission denied"))
    assert not _plain_failure(TableRestoreError("x")) and not _plain_failure(KeyboardInterrupt())
