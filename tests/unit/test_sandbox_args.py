"""Pure logic of the sandbox: mariadbd argv, option-file quoting, socket path limit."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from xtrabackup_provider.core.db.sandbox import SandboxError, SandboxServer, _quote_option_value, free_port


def _server(tmp_path: Path, **kw) -> SandboxServer:
    return SandboxServer(tmp_path / "b", tmp_path / "b" / "data", 3307, 42, **kw)


def test_default_args_have_binlog_gtid_and_no_secret(tmp_path: Path):
    args = _server(tmp_path, root_password="s3cret!").server_args()
    assert args[:2] == ["mariadbd", "--no-defaults"]  # --no-defaults must come first
    for flag in ("--log-bin=mysql-bin", "--log-slave-updates", "--binlog-format=ROW", "--gtid-strict-mode=1"):
        assert flag in args
    assert "--server-id=42" in args and "--port=3307" in args
    assert f"--socket={tmp_path / 'b' / 'mysqld.sock'}" in args
    assert "--skip-grant-tables" not in args
    assert not any("s3cret" in a for a in args)


def test_restore_args_skip_grants_and_networking(tmp_path: Path):
    server = SandboxServer.on_datadir(tmp_path / "d", tmp_path / "b", server_id=7, log_bin=False)
    args = server.server_args()
    assert {"--skip-grant-tables", "--skip-networking"} <= set(args)
    assert not any(a.startswith("--log-bin") for a in args)
    assert server.datadir == (tmp_path / "d").absolute()


def test_extra_args_come_last(tmp_path: Path):
    args = _server(tmp_path, extra_args=["--innodb-buffer-pool-size=1G"]).server_args()
    assert args[-1] == "--innodb-buffer-pool-size=1G"


def test_socket_path_too_long(tmp_path: Path):
    with pytest.raises(SandboxError, match="too long"):
        SandboxServer(tmp_path / ("x" * 120), tmp_path / "data", 3307, 1)


@pytest.mark.parametrize("value", ["plain", 'we"ird # pass\\word ', "semi;colon"])
def test_option_quoting_round_trips(value: str):
    quoted = _quote_option_value(value)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert quoted[1:-1].replace('\\"', '"').replace("\\\\", "\\") == value


def test_option_value_rejects_newline():
    with pytest.raises(ValueError):
        _quote_option_value("a\nb")


def test_client_defaults_file_is_private(tmp_path: Path):
    server = _server(tmp_path, root_password="pw")
    server.basedir.mkdir(parents=True)
    path = server.write_client_defaults(tmp_path / "c.cnf")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert 'password="pw"' in path.read_text()


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_free_ports_are_below_the_kernels_ephemeral_range_and_bindable():
    """A port from the ephemeral range can go to an outgoing connection before the server binds it
    (a loaded CI run: "Address already in use")."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(20)]
    assert all(1024 <= p < low for p in ports), (low, ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))
