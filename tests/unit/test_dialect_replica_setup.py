"""The privileges provisioning checks on the new server's account, in each family's own names
(core/db/dialect.py): MySQL's dynamic REPLICATION_SLAVE_ADMIN and REPLICATION CLIENT, MariaDB's
REPLICATION SLAVE ADMIN and SLAVE MONITOR, and what SUPER still covers in each."""

from __future__ import annotations

from xtrabackup_provider.core.db.dialect import dialect_for


def test_mysql_names_its_own_replica_privileges_and_statements():
    mysql = dialect_for("9.7.4-2")
    assert mysql.replica_setup_privileges == ("RELOAD", "REPLICATION_SLAVE_ADMIN", "REPLICATION CLIENT")
    assert mysql.super_covers == ("REPLICATION_SLAVE_ADMIN", "REPLICATION CLIENT")
    assert mysql.replica_setup_statements == (
        "RESET REPLICA ALL, CHANGE REPLICATION SOURCE TO, START REPLICA, SHOW REPLICA STATUS"
    )
    assert mysql.skip_replica_start_option == "--skip-replica-start"
    assert dialect_for("8.0.25").skip_replica_start_option == "--skip-slave-start"


def test_mariadb_keeps_its_names_and_super_stops_covering_them_at_11():
    old, new = dialect_for("5.5.5-10.11.6-MariaDB"), dialect_for("11.8.9-MariaDB-0+deb13u1")
    assert old.replica_setup_privileges == ("RELOAD", "REPLICATION SLAVE ADMIN", "SLAVE MONITOR")
    assert old.super_covers == ("REPLICATION SLAVE ADMIN", "SLAVE MONITOR") and new.super_covers == ()
    assert old.replica_setup_statements.startswith("RESET SLAVE ALL, CHANGE MASTER TO, START SLAVE")
    assert new.skip_replica_start_option == "--skip-slave-start"
