"""The dialect rows restore-table reads (core/db/dialect.py): where each family's data dictionary
names a table's tablespaces, whether a partitioned table is discarded whole, and the tools named."""

from __future__ import annotations

from xtrabackup_provider.core.db.dialect import dialect_for

MARIADB = dialect_for("11.8.9-MariaDB-0+deb13u1-log")
MYSQL = dialect_for("9.7.4-2")


def test_each_family_reads_its_own_tablespace_dictionary():
    assert "innodb_sys_tablespaces" in MARIADB.tablespace_files
    assert "innodb_tablespaces" in MYSQL.tablespace_files and "innodb_datafiles" in MYSQL.tablespace_files
    for dialect in (MARIADB, MYSQL):
        assert dialect.tablespace_files.count("%s") == 2  # the name, then a LIKE pattern


def test_mysql_names_tablespaces_plainly_and_discards_a_partitioned_table_whole():
    assert MARIADB.tablespace_names_encoded and not MYSQL.tablespace_names_encoded
    assert MYSQL.discards_partitioned and not MARIADB.discards_partitioned
    assert (MARIADB.dump_program, MYSQL.dump_program) == ("mariadb-dump", "mysqldump")
    assert "BINLOG ADMIN" in MARIADB.skip_binlog_privilege
    assert "SESSION_VARIABLES_ADMIN" in MYSQL.skip_binlog_privilege
