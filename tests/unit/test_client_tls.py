"""The TLS options of the 0600 defaults file, in each client library's spelling: Percona
XtraBackup and mysqlbinlog (MySQL 8's library) take `ssl-mode`, MariaDB's tools have no ssl-mode
(`ssl`, `skip-ssl`, `ssl-verify-server-cert`). MySQL 8 cannot be installed here, so its spelling
is checked as documented (MySQL 8.0 "Command Options for Encrypted Connections")."""

from __future__ import annotations

from pathlib import Path

import pytest

from xtrabackup_provider.core.db.server import MySQLTarget, defaults_file

CERTS = {"ca": "/etc/mysql/ca.pem", "cert": "/etc/mysql/client.pem", "key": "/etc/mysql/client.key"}
FILES = ['ssl-ca="/etc/mysql/ca.pem"', 'ssl-cert="/etc/mysql/client.pem"', 'ssl-key="/etc/mysql/client.key"']


@pytest.mark.parametrize(
    ("ssl", "mode", "mariadb", "mysql"),
    [
        ({}, None, [], []),
        (CERTS, None, [*FILES, "ssl"], FILES),
        (CERTS, "REQUIRED", [*FILES, "ssl"], [*FILES, "ssl-mode=REQUIRED"]),
        (CERTS, "VERIFY_CA", [*FILES, "ssl"], [*FILES, "ssl-mode=VERIFY_CA"]),
        (
            CERTS,
            "VERIFY_IDENTITY",
            [*FILES, "ssl", "ssl-verify-server-cert"],
            [*FILES, "ssl-mode=VERIFY_IDENTITY"],
        ),
        ({}, "DISABLED", ["skip-ssl"], ["ssl-mode=DISABLED"]),
    ],
)
def test_each_client_family_gets_its_own_tls_spelling(ssl, mode, mariadb, mysql):
    target = MySQLTarget(host="db1.internal", port=3306, user="backup", password="pw", ssl=ssl, ssl_mode=mode)
    assert target.tls_lines("mariadb") == mariadb
    assert target.tls_lines("mysql") == mysql


def test_the_defaults_file_holds_tls_but_never_a_character_set():
    target = MySQLTarget(
        host="db1.internal",
        user="backup",
        password="pw",
        ssl=CERTS,
        ssl_mode="VERIFY_IDENTITY",
        charset="utf8mb4",
    )
    with defaults_file(target, "mysql") as path:
        lines = Path(path).read_text().splitlines()
        assert Path(path).stat().st_mode & 0o777 == 0o600
    assert lines[-4:] == [*FILES, "ssl-mode=VERIFY_IDENTITY"]
    assert not any("character" in line for line in lines)
