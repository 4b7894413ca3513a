"""TLS to the database, as a `mysql` connection's extras ask for it (the mysql provider's `ssl`,
`ssl_mode`, `charset`): a MariaDB that requires secure transport, a self-signed CA made with
openssl, an account that needs a client certificate (REQUIRE X509). The backup, binlog shipping and
pt-table-checksum all connect through the 0600 defaults file; a wrong CA fails clearly, naming the
TLS error, before anything is stored."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest

from helpers import restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.checksum import ChecksumOptions, run_checksum
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.db.server import ServerError, defaults_file, query
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client
from xtrabackup_provider.hooks.xtrabackup import XtraBackupHook


def _openssl(cwd: Path, *args: str) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    """A test CA, a server certificate for 127.0.0.1 and a client certificate it signed, and a
    second CA that signed nothing here."""
    d = tmp_path_factory.mktemp("tls")
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=xbp test CA",
             "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, cn in (("server", "127.0.0.1"), ("client", "xbp-backup")):
        _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr")  # fmt: skip
        _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-out", f"{name}.pem", *(["-extfile", "san.cnf"] if name == "server" else []))  # fmt: skip
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=another CA",
             "-keyout", "other.key", "-out", "other.pem")  # fmt: skip
    for key in d.glob("*.key"):
        key.chmod(0o600)
    return {name: str(d / f"{name}.pem") for name in ("ca", "server", "client", "other")} | {
        f"{name}_key": str(d / f"{name}.key") for name in ("server", "client")
    }


@pytest.fixture(scope="module")
def tls_server(mariadb_factory, certs):
    """MariaDB that refuses unencrypted TCP, and `xbp`@127.0.0.1 that needs a client certificate."""
    server = mariadb_factory(
        "tls",
        root_password=secrets.token_urlsafe(16),
        extra_args=[
            f"--ssl-ca={certs['ca']}",
            f"--ssl-cert={certs['server']}",
            f"--ssl-key={certs['server_key']}",
            "--require-secure-transport=ON",
        ],
    )
    password = secrets.token_urlsafe(16)
    server.execute_script(
        f"CREATE USER 'xbp'@'127.0.0.1' IDENTIFIED BY '{password}' REQUIRE X509;"
        "GRANT ALL PRIVILEGES ON *.* TO 'xbp'@'127.0.0.1';"
    )
    seed_database(server, "tls_shop", rows=500)
    try:
        yield server, password
    finally:
        mariadb_factory.discard(server)


def _target(monkeypatch, server, password, extra):
    """The MySQLTarget of a real Airflow `mysql` connection with these extras, as tasks get it."""
    conn = {
        "conn_type": "mysql",
        "host": "127.0.0.1",
        "port": server.port,
        "login": "xbp",
        "password": password,
    }
    monkeypatch.setenv("AIRFLOW_CONN_MYSQL_TLS", json.dumps({**conn, "extra": extra}))
    return XtraBackupHook("mysql_tls").get_target()


def _client_cert(certs, ca="ca"):
    return {"ca": certs[ca], "cert": certs["client"], "key": certs["client_key"]}


def test_backup_binlogs_and_checksum_over_tls_with_a_client_certificate(
    tls_server, certs, s3_server, bucket, gpg_keys, tmp_path, monkeypatch
):
    server, password = tls_server
    # `ssl` as JSON text, the way it arrives from a connection URI; the strictest mode.
    extra = {"ssl": json.dumps(_client_cert(certs)), "ssl_mode": "VERIFY_IDENTITY", "charset": "utf8mb4"}
    target = _target(monkeypatch, server, password, extra)
    cipher, charset = query(
        target, "SELECT VARIABLE_VALUE, @@character_set_client FROM information_schema.SESSION_STATUS"
        " WHERE VARIABLE_NAME = 'Ssl_cipher'"
    )[0]  # fmt: skip
    assert cipher and charset == "utf8mb4", (cipher, charset)
    with defaults_file(target) as path:
        text = Path(path).read_text()
    assert f'ssl-ca="{certs["ca"]}"' in text and "ssl-verify-server-cert" in text
    assert "character-set" not in text, "mariadb-binlog refuses default-character-set in [client]"

    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "tls", "db1"
    )
    expected = table_checksums(server, ["tls_shop"])
    manifest = run_backup(BackupRequest(catalog=catalog, target=target, public_keys=[gpg_keys.public_key]))
    assert manifest.kind == "full"
    restore(
        RestoreRequest(
            catalog=catalog,
            target_datadir=tmp_path / "restored",
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )
    )
    assert restored_checksums(tmp_path / "restored", tmp_path / "sb", ["tls_shop"], server_id=951) == expected

    report = ship_binlogs(
        ShipRequest(catalog=catalog, target=target, public_keys=[gpg_keys.public_key], flush=True)
    )
    assert report.shipped, report.summary()
    assert set(report.shipped) <= set(BinlogCatalog(catalog, report.server_uuid).index().complete)

    db = unique_name("tlsck")
    seed_database(server, db, rows=200)
    run = run_checksum(target, ChecksumOptions(recursion_method="processlist", databases=[db]))
    assert {t.table for t in run.tables} >= {f"{db}.customers", f"{db}.orders"}, run
    assert not any(t.errors for t in run.tables), run


@pytest.mark.parametrize("ssl_mode", ["VERIFY_CA", None])
def test_a_wrong_ca_fails_before_anything_is_stored_naming_the_tls_error(
    tls_server, certs, s3_server, bucket, gpg_keys, monkeypatch, ssl_mode
):
    server, password = tls_server
    extra = {"ssl": _client_cert(certs, ca="other"), **({"ssl_mode": ssl_mode} if ssl_mode else {})}
    target = _target(monkeypatch, server, password, extra)
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "tls", "db1"
    )
    with pytest.raises(ServerError) as info:
        run_backup(BackupRequest(catalog=catalog, target=target, public_keys=[gpg_keys.public_key]))
    message = str(info.value)
    assert f"127.0.0.1:{server.port} as xbp" in message and "TLS/SSL error" in message, message
    assert "certificate" in message and password not in message
    assert catalog.manifests() == []
    # The tools verify the chain from the defaults file too (VERIFY_CA writes no host name check).
    with defaults_file(target) as path:
        assert "ssl-verify-server-cert" not in Path(path).read_text()
        proc = subprocess.run(
            ["mariadb", f"--defaults-file={path}", "-e", "SELECT 1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode != 0 and "TLS/SSL error" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("extra", "mention"),
    [
        # no TLS at all: the X509 account is refused (11.x: the plain connection is, before the account)
        ({}, "Access denied|insecure transport are prohibited"),
        ({"ssl": {"ca": "CA"}, "ssl_mode": "VERIFY_CA"}, "Access denied"),  # TLS, but no client certificate
    ],
)
def test_without_the_client_certificate_the_server_refuses_and_the_error_says_so(
    tls_server, certs, monkeypatch, extra, mention
):
    server, password = tls_server
    if "ssl" in extra:
        extra = {**extra, "ssl": {"ca": certs["ca"]}}
    target = _target(monkeypatch, server, password, extra)
    with pytest.raises(ServerError, match=mention):
        query(target, "SELECT 1")


@pytest.mark.parametrize(
    ("extra", "mention"),
    [
        (
            {"ssl": {"ca": "/x", "crt": "/y"}},
            "extra ssl has unknown key(s) crt; the known ones are ca, capath, cert, cipher, key",
        ),
        ({"ssl": "{not json"}, "extra ssl is not"),
        ({"ssl": {"ca": "/x"}, "ssl_mode": "VERIFY"}, "extra ssl_mode must be one of DISABLED, PREFERRED"),
        ({"ssl_mode": "VERIFY_IDENTITY"}, "needs the CA to verify against: extra ssl.ca"),
        ({"charset": "utf8; DROP"}, "extra charset 'utf8; DROP' is not a character set name"),
        ({"iam": True}, "extra iam"),
    ],
)
def test_bad_tls_extras_are_refused_naming_the_connection_and_the_key(monkeypatch, extra, mention):
    monkeypatch.setenv(
        "AIRFLOW_CONN_MYSQL_BAD_TLS",
        json.dumps(
            {"conn_type": "mysql", "host": "127.0.0.1", "login": "u", "password": "p", "extra": extra}
        ),
    )
    with pytest.raises(ServerError) as info:
        XtraBackupHook("mysql_bad_tls").get_target()
    assert str(info.value).startswith("connection 'mysql_bad_tls': ") and mention in str(info.value), (
        info.value
    )
