"""Which family a binlog client is, from its own `--version` (core/db/dialect.py), and the one-line
refusal of a client that cannot read a server's binlogs: the strings are the real tools' output
(MySQL 9.7.4's mysqlbinlog, MariaDB 10.11's and 11.8's)."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.db.dialect import binlog_client_of, dialect_for

MYSQL_97 = "/usr/bin/mysqlbinlog  Ver 9.7.4-2 for Linux on x86_64 ((Debian))"
MYSQL_84 = "mysqlbinlog  Ver 8.4.2 for Linux on x86_64 (MySQL Community Server - GPL)"
MARIADB_1011 = "/usr/bin/mysqlbinlog Ver 3.5 for debian-linux-gnu at x86_64"
MARIADB_118 = "/usr/bin/mariadb-binlog from 11.8.9-MariaDB, client 3.5 for debian-linux-gnu (x86_64)"


@pytest.mark.parametrize(
    ("said", "family", "version"),
    [
        (MYSQL_97, "mysql", (9, 7, 4)),
        (MYSQL_84, "mysql", (8, 4, 2)),
        (MARIADB_1011, "mariadb", None),
        (MARIADB_118, "mariadb", (11, 8, 9)),
        ("something else", None, None),
    ],
)
def test_the_family_is_told_from_the_version_line(said, family, version):
    assert binlog_client_of(said) == (family, version)


def test_a_client_of_the_other_family_or_older_than_mysql_is_refused_naming_both():
    mysql, mariadb = dialect_for("9.7.4-2"), dialect_for("10.11.6-MariaDB-log")
    assert mysql.binlog_client_problem("mysqlbinlog", MYSQL_97) is None
    assert mariadb.binlog_client_problem("mariadb-binlog", MARIADB_1011) is None
    assert mariadb.binlog_client_problem("mariadb-binlog", MARIADB_118) is None
    assert mysql.binlog_client_problem("x", "no version here") is None  # cannot tell: not refused
    wrong = mysql.binlog_client_problem("/usr/bin/mysqlbinlog", MARIADB_1011)
    assert wrong is not None and "\n" not in wrong
    assert (
        "/usr/bin/mysqlbinlog is MariaDB's" in wrong and "MySQL 9.7.4" in wrong and "mysqlbinlog 9.7" in wrong
    )
    wrong = mariadb.binlog_client_problem("/opt/mysqlbinlog", MYSQL_97)
    assert (
        wrong is not None
        and "is MySQL's" in wrong
        and "MariaDB 10.11.6" in wrong
        and "mariadb-binlog" in wrong
    )
    old = mysql.binlog_client_problem("mysqlbinlog", MYSQL_84)
    assert old is not None and "8.4.2, older than the server (MySQL 9.7.4)" in old
    assert mysql.binlog_follow_id_option == "--connection-server-id"
    assert mariadb.binlog_follow_id_option == "--stop-never-slave-server-id"


def test_the_shipping_dag_gives_each_host_its_own_binlog_client():
    from xtrabackup_provider.core.config.schema import FleetConfig
    from xtrabackup_provider.dags.binlog_shipping import build_dag

    config = FleetConfig.model_validate(
        {
            "storage": {"local_path": "/srv/store"},
            "clusters": [
                {
                    "name": "mixed",
                    "hosts": [
                        {
                            "name": "my1",
                            "flavour": "xtrabackup",
                            "binlog_binary": "/opt/mysql-9.7/bin/mysqlbinlog",
                        },
                        {"name": "ma1"},
                    ],
                    "binlogs": {"binary": "/usr/bin/mariadb-binlog"},
                }
            ],
        }
    )
    cluster = config.clusters[0]
    assert cluster.binlogs is not None
    ship = build_dag(config, cluster, cluster.binlogs).get_task("ship_binlogs")
    per_host = {kw["host"]: kw["binary"] for kw in ship.expand_input.value}
    assert per_host == {"my1": "/opt/mysql-9.7/bin/mysqlbinlog", "ma1": "/usr/bin/mariadb-binlog"}
