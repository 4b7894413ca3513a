"""The 0600 client option file the tools read holds each connection value as one quoted value
(issue 38 item 11).

A line break in a connection's host or socket (an Airflow connection's URI with %0A) would add
options of its own to the file (`user=`, `socket=`, `plugin-dir=`...): it is refused in one line
naming the field, never showing a secret. Values that need quoting in an option file (spaces,
quotes, `#`, backslashes) reach a real server through the mariadb client, which reads the file.

Before the fix: a host or socket with a line break was written as is (its second line an option of
its own); the refusal of a user or password named no field; a socket path with `#` or a backslash
did not reach the server (`Can't connect ... through socket '.../hash'`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from xtrabackup_provider.core.db.server import MySQLTarget, ServerError, defaults_file

INJECTED = "127.0.0.1\nuser=evil"


@pytest.mark.parametrize(
    ("field", "target"),
    [
        ("host", MySQLTarget(host=INJECTED)),
        ("host", MySQLTarget(host="127.0.0.1\r[client]")),
        ("socket", MySQLTarget(socket="/run/mysqld/mysqld.sock\nhost=evil.example")),
        ("user", MySQLTarget(user="backup\nhost=evil.example")),
        ("password", MySQLTarget(password="pw-secret\nhost=evil.example")),
    ],
)
def test_a_line_break_in_a_connection_value_is_refused_in_one_line_naming_the_field(field, target):
    before = set(Path(tempfile.gettempdir()).glob(f"xbp-cred-{os.getpid()}-*"))
    with pytest.raises(ServerError) as refused, defaults_file(target):
        pass
    message = str(refused.value)
    assert "\n" not in message and "\r" not in message, message
    assert message.startswith(f"the connection's {field} "), message
    assert "pw-secret" not in message and "evil" not in message, message
    assert set(Path(tempfile.gettempdir()).glob(f"xbp-cred-{os.getpid()}-*")) == before


ODD_NAMES = ["with space", 'quote"d', "it's", "hash#tag", "back\\slash", "trailing "]


def _client(path: str, sql: str) -> str:
    mariadb = shutil.which("mariadb") or "mysql"
    out = subprocess.run(
        [mariadb, f"--defaults-file={path}", "-N", "-B", "-e", sql], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("name", ODD_NAMES)
def test_a_socket_path_that_needs_quoting_reaches_the_server(mariadb, tmp_path, name):
    odd = tmp_path / name
    odd.mkdir()
    (odd / "my.sock").symlink_to(mariadb.socket)  # the server's socket, under an odd path
    target = MySQLTarget(socket=str(odd / "my.sock"), user="root", password=mariadb.root_password)
    with defaults_file(target) as path:
        assert _client(path, "SELECT @@server_id") == str(mariadb.server_id)


def test_a_host_is_quoted_and_still_reaches_the_server(mariadb):
    target = MySQLTarget(host="127.0.0.1", port=mariadb.port, user="root", password=mariadb.root_password)
    with defaults_file(target) as path:
        assert 'host="127.0.0.1"' in Path(path).read_text().splitlines()
        assert _client(path, "SELECT @@server_id") == str(mariadb.server_id)
