"""Which server a host is (core/binlog/identity.py): the checks made before a backup or a shipping run
reads a byte, the proof that what a tool copied is that server's, and the tool warnings that are errors."""

from __future__ import annotations

import socket

import pytest

from helpers import stored_backup
from manifest_factory import CLUSTER, HOST, PREFIX, UUID
from xtrabackup_provider.core.binlog.catalog import BinlogError
from xtrabackup_provider.core.binlog.events import BinlogSummary
from xtrabackup_provider.core.binlog.identity import (
    IdentityError,
    ServerIdentity,
    check_server,
    checked_copy,
    tool_datadir,
)
from xtrabackup_provider.core.binlog.ship import check_origin
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.server import MySQLTarget, ServerFacts
from xtrabackup_provider.core.engine.warnings import not_what_was_asked
from xtrabackup_provider.core.storage.local import LocalStore

OTHER = "mariadb-dbhost-3307-99"


def facts(uuid: str = UUID, datadir: str = "/var/lib/mysql/", port: int = 3306, **over) -> ServerFacts:
    fields = dict(
        version="10.11.19-MariaDB",
        server_id=7,
        server_uuid=uuid,
        datadir=datadir,
        gtid_binlog_pos="0-7-100",
        is_mariadb=True,
        port=port,
        socket="",
        gtid_current="0-7-100",
    )
    return ServerFacts(**(fields | over))  # type: ignore[arg-type]


@pytest.fixture
def catalog(tmp_path) -> Catalog:
    return Catalog(LocalStore(str(tmp_path / "store")), PREFIX, CLUSTER, HOST)


def test_the_first_run_of_a_host_takes_the_server_it_reaches(catalog):
    checked = check_server(catalog, facts(), MySQLTarget(host="db1"), manifests=[])
    assert checked.basis == "the first run of the host" and checked.datadir == "/var/lib/mysql"
    assert checked.record() | {"basis": ""} == {
        "server_uuid": UUID,
        "server_id": 7,
        "datadir": "/var/lib/mysql",
        "version": "10.11.19-MariaDB",
        "port": 3306,
        "socket": "",
        "basis": "",
    }


def test_a_server_the_catalog_does_not_know_is_refused_naming_both_unless_accepted(catalog):
    stored_backup(catalog, "20261101T103000Z-full")
    target = MySQLTarget(host="127.0.0.1", port=3307)
    with pytest.raises(IdentityError) as info:
        check_server(catalog, facts(OTHER, port=3307), target, manifests=catalog.manifests())
    message = str(info.value)
    assert f"host {CLUSTER}/{HOST}" in message and "127.0.0.1:3307" in message
    assert OTHER in message and f"{UUID} (backup 20261101T103000Z-full)" in message
    assert "--new-server" in message
    accepted = check_server(
        catalog, facts(OTHER, port=3307), target, manifests=catalog.manifests(), accept_new=True
    )
    assert "new server" in accepted.basis
    # The host's own server passes; without manifests given, the catalog's are read.
    assert check_server(catalog, facts(), MySQLTarget(host="db1")).basis == "backup 20261101T103000Z-full"


def test_the_configured_datadir_must_be_the_servers(catalog):
    with pytest.raises(
        IdentityError, match="config names datadir /srv/db1, but the server .* runs on /var/lib/mysql/"
    ):
        check_server(catalog, facts(), MySQLTarget(host="db1"), manifests=[], datadir="/srv/db1")
    # The same directory spelled with a trailing slash, or through a symlink, is the same.
    assert check_server(
        catalog, facts(), MySQLTarget(host="db1"), manifests=[], datadir="/var/lib/mysql"
    ).datadir
    assert tool_datadir("/var/lib/mysql/") == "/var/lib/mysql" and tool_datadir("/") == "/"


def test_the_server_listens_where_the_connection_went(catalog, tmp_path):
    ours, theirs = tmp_path / "ours.sock", tmp_path / "theirs.sock"
    for path in (ours, theirs):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    with pytest.raises(
        IdentityError, match=f"used socket {ours}, but the server reached listens on {theirs}"
    ):
        check_server(catalog, facts(socket=str(theirs)), MySQLTarget(socket=str(ours)), manifests=[])
    link = tmp_path / "link.sock"
    link.symlink_to(ours)
    check_server(catalog, facts(socket=str(ours)), MySQLTarget(socket=str(link)), manifests=[])
    # A backup checks the TCP port; a proxy in between is named in the message.
    with pytest.raises(IdentityError, match="listens on port 3306.*socket"):
        check_server(
            catalog, facts(), MySQLTarget(host="10.0.0.5", port=13306), manifests=[], check_port=True
        )
    check_server(
        catalog, facts(), MySQLTarget(host="10.0.0.5", port=13306), manifests=[]
    )  # shipping: no port check


@pytest.mark.parametrize(
    ("before", "copied", "after", "problem"),
    [
        ("0-7-100", "0-7-100", "0-7-100", None),  # no write meanwhile: the exact GTID
        ("0-7-100", "0-7-105", "0-7-110", None),  # written during the copy
        ("0-7-100,1-8-5", "0-7-100,1-8-5", "0-7-101,1-8-5", None),
        ("0-7-100", "0-99-100", "0-7-100", "another server's"),  # same sequence, another server
        ("0-7-100", "0-99-6", "0-7-100", "not between"),  # the decoy's own history
        ("0-7-100", "0-7-100,3-99-4", "0-7-100", "not between"),  # a domain the server never had
        ("0-7-100,1-8-5", "0-7-100", "0-7-100,1-8-5", "no GTID in domain 1"),
        ("0-7-100", "", "0-7-100", None),  # binlog off: nothing to compare
    ],
)
def test_the_copied_gtid_lies_between_the_servers_before_and_after(before, copied, after, problem):
    found = checked_copy(copied, facts(gtid_current=before), after)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_the_tools_own_datadir_warnings_are_errors():
    lines = [
        "[00] 2026-12-03 07:47:12 Warning: option 'datadir' has different values:",
        "[00] 2026-12-03 07:47:12 Warning: MySQL variable 'datadir' points to nonexistent directory '/x'",
    ]
    assert not_what_was_asked(lines[0]) == "option 'datadir' has different values"
    assert "nonexistent directory" in (not_what_was_asked(lines[1]) or "")
    for harmless in ("[00] 2026-12-03 07:47:12 Using server version 10.11.19", "  '/a' in defaults file"):
        assert not_what_was_asked(harmless) is None


def test_a_binlog_written_by_another_server_is_not_shipped():
    checked = ServerIdentity.of(facts(), "test")
    check_origin("db1", "mysql-bin.000001", BinlogSummary(server_id=7), checked)
    with pytest.raises(
        BinlogError, match="mysql-bin.000001 was written by server_id 99, not by the server checked"
    ):
        check_origin("db1", "mysql-bin.000001", BinlogSummary(server_id=99), checked)


def test_the_workers_own_client_sessions_take_no_password_from_its_environment():
    """libmariadb falls back to $MYSQL_PWD when given no password: an account without one says so."""
    assert MySQLTarget(socket="/run/mysqld/mysqld.sock", password=None).connect_kwargs()["passwd"] == ""
    own_file = MySQLTarget(host=None, defaults_file="/etc/xbp/db1.cnf").connect_kwargs()
    assert "passwd" not in own_file and own_file["read_default_file"] == "/etc/xbp/db1.cnf"
