"""engine.py: tool versions -> capabilities, argv for backup/prepare/copy-back, metadata parsers."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.engine.argv import (
    BackupOptions,
    PrepareStep,
    PrepareTuning,
    backup_argv,
    copy_back_argv,
    extract_argv,
    prepare_argv,
    prepare_steps,
)
from xtrabackup_provider.core.engine.metadata import (
    BinlogPosition,
    parse_binlog_info,
    parse_binlog_pos,
    parse_checkpoints,
    parse_info,
)
from xtrabackup_provider.core.engine.tools import (
    EngineError,
    ToolVersion,
    check_tool_for_server,
    parse_tool_version,
)

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "8c1c2f3e-2d1a-11ef-a3b1-0242ac120002"

# What the tools really print for --version (on stderr), preamble included.
XB_PREAMBLE = (
    "2024-05-02T10:00:00.123456-00:00 0 [Note] [MY-011825] [Xtrabackup] recognized server arguments: "
    "--datadir=/var/lib/mysql\n"
)


def xb_output(version: str, server: str | None = None) -> str:
    server = server or version.split("-")[0]
    line = f"xtrabackup version {version} based on MySQL server {server} Linux (x86_64)"
    return f"{XB_PREAMBLE}{line} (revision id: 6beb4b49)\n"


def mb_output(version: str, progname: str = "mariabackup") -> str:
    return f"{progname} based on MariaDB server {version}-MariaDB debian-linux-gnu (x86_64)\n"


def xb(version: str) -> ToolVersion:
    return parse_tool_version(xb_output(version))


def mb(version: str) -> ToolVersion:
    return parse_tool_version(mb_output(version))


# ---------------------------------------------------------------------------------------------
# versions


@pytest.mark.parametrize(
    ("output", "flavour", "version", "text", "major"),
    [
        (xb_output("8.0.35-30"), "xtrabackup", (8, 0, 35, 30), "8.0.35-30", "8.0"),
        (xb_output("8.0.29-22"), "xtrabackup", (8, 0, 29, 22), "8.0.29-22", "8.0"),
        (xb_output("8.0.32-26"), "xtrabackup", (8, 0, 32, 26), "8.0.32-26", "8.0"),
        (xb_output("8.0.35-33"), "xtrabackup", (8, 0, 35, 33), "8.0.35-33", "8.0"),
        (xb_output("8.4.0-1"), "xtrabackup", (8, 4, 0, 1), "8.4.0-1", "8.4"),
        (
            "xtrabackup: recognized server arguments: --datadir=/var/lib/mysql\n"
            "xtrabackup version 2.4.29 based on MySQL server 5.7.44 Linux (x86_64) (revision id: 2e6c0951)\n",
            "xtrabackup",
            (2, 4, 29, 0),
            "2.4.29-0",
            "2.4",
        ),
        (mb_output("10.11.19"), "mariabackup", (10, 11, 19, 0), "10.11.19", "10.11"),
        (
            "/usr/bin/mariabackup based on MariaDB server 10.4.34-MariaDB Linux (x86_64)\n",
            "mariabackup",
            (10, 4, 34, 0),
            "10.4.34",
            "10.4",
        ),
        (mb_output("11.4.5", progname="mariadb-backup"), "mariabackup", (11, 4, 5, 0), "11.4.5", "11.4"),
    ],
)
def test_parse_tool_version_reads_real_outputs(output, flavour, version, text, major):
    tool = parse_tool_version(output)
    assert (tool.flavour, tool.version, tool.text, tool.major) == (flavour, version, text, major)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "command not found",
        "mysqld  Ver 8.0.35 for Linux on x86_64 (MySQL Community Server - GPL)",
        "xtrabackup version unknown",
        "\x00\xff" * 10,
    ],
)
def test_parse_tool_version_refuses_garbage(garbage):
    with pytest.raises(EngineError, match="cannot read a backup tool version"):
        parse_tool_version(garbage)


def test_parse_tool_version_error_quotes_a_bounded_excerpt():
    with pytest.raises(EngineError) as exc:
        parse_tool_version("nonsense " * 1000)
    assert "nonsense" in str(exc.value)
    assert len(str(exc.value)) < 400


@pytest.mark.parametrize(
    ("tool", "plain_prepare_after", "estimate_memory", "prepare_parallel"),
    [
        (xb("8.0.29-22"), True, False, False),
        (xb("8.0.30-23"), False, False, False),
        (xb("8.0.32-25"), False, False, False),
        (xb("8.0.32-26"), False, True, False),
        (xb("8.0.35-32"), False, True, False),
        (xb("8.0.35-33"), False, True, True),
        (xb("8.4.0-1"), False, True, True),
    ],
    ids=lambda v: v.text if isinstance(v, ToolVersion) else None,
)
def test_xtrabackup_capabilities_follow_version_guards(
    tool, plain_prepare_after, estimate_memory, prepare_parallel
):
    caps = tool.capabilities
    assert caps.apply_log_only is True
    assert caps.plain_prepare_after_apply_log_only is plain_prepare_after
    assert caps.estimate_memory is estimate_memory
    assert caps.prepare_parallel is prepare_parallel
    assert caps.prepared_base_accepts_incrementals is False


@pytest.mark.parametrize(
    ("version", "apply_log_only"),
    [("10.4.34", True), ("10.5.0", False), ("10.6.21", False), ("10.11.19", False), ("11.4.5", False)],
)
def test_mariabackup_apply_log_only_only_before_10_5(version, apply_log_only):
    caps = mb(version).capabilities
    assert caps.apply_log_only is apply_log_only
    assert caps.prepared_base_accepts_incrementals is (not apply_log_only)
    assert caps.estimate_memory is False
    assert caps.prepare_parallel is False


# ---------------------------------------------------------------------------------------------
# prepare


BASE = "/scratch/base"


def incs(n: int) -> list[str]:
    return [f"/scratch/inc{i}" for i in range(1, n + 1)]


def all_argv(tool: ToolVersion, n: int, tuning: PrepareTuning | None = None) -> list[list[str]]:
    return [prepare_argv(tool, step, tuning) for step in prepare_steps(tool, BASE, incs(n))]


XB_VERSIONS = ["8.0.29-22", "8.0.30-23", "8.0.32-25", "8.0.32-26", "8.0.35-32", "8.0.35-33", "8.4.0-1"]


@pytest.mark.parametrize("version", XB_VERSIONS)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_xtrabackup_chain_rules(version, n):
    tool = xb(version)
    steps = prepare_steps(tool, BASE, incs(n))
    assert len(steps) == n + 1
    assert [s.target_dir for s in steps] == [BASE] * (n + 1)
    assert [s.incremental_dir for s in steps] == [None, *incs(n)]
    # every step but the last uses --apply-log-only; exactly one final step, and it is the last
    assert [s.apply_log_only for s in steps] == [True] * n + [False]
    assert [s.is_final for s in steps].count(True) == 1
    assert steps[-1].is_final
    argvs = [prepare_argv(tool, s) for s in steps]
    for i, argv in enumerate(argvs):
        assert ("--apply-log-only" in argv) is (i < n)
    # never a lone plain --prepare (no --incremental-dir) after an --apply-log-only step
    for earlier, later in zip(argvs, argvs[1:], strict=False):
        if "--apply-log-only" in earlier:
            assert any(a.startswith("--incremental-dir=") for a in later), later


def test_xtrabackup_full_only_is_one_plain_prepare():
    assert all_argv(xb("8.0.35-30"), 0) == [
        ["xtrabackup", "--no-defaults", "--prepare", f"--target-dir={BASE}"],
    ]


def test_xtrabackup_one_incremental_exact_argv():
    assert all_argv(xb("8.0.30-23"), 1) == [
        ["xtrabackup", "--no-defaults", "--prepare", f"--target-dir={BASE}", "--apply-log-only"],
        [
            "xtrabackup",
            "--no-defaults",
            "--prepare",
            f"--target-dir={BASE}",
            "--incremental-dir=/scratch/inc1",
        ],
    ]


TUNING = PrepareTuning(use_memory_bytes=2 * 1024**3, use_free_memory_pct=50, parallel=4)


def test_xtrabackup_five_incrementals_exact_argv_old_tool_uses_use_memory_only():
    # 8.0.29-22: no --estimate-memory, so --use-free-memory-pct falls back to --use-memory; no --parallel
    tail = ["--use-memory=2147483648"]
    head = ["xtrabackup", "--no-defaults", "--prepare", f"--target-dir={BASE}"]
    assert all_argv(xb("8.0.29-22"), 5, TUNING) == [
        [*head, "--apply-log-only", *tail],
        [*head, "--apply-log-only", "--incremental-dir=/scratch/inc1", *tail],
        [*head, "--apply-log-only", "--incremental-dir=/scratch/inc2", *tail],
        [*head, "--apply-log-only", "--incremental-dir=/scratch/inc3", *tail],
        [*head, "--apply-log-only", "--incremental-dir=/scratch/inc4", *tail],
        [*head, "--incremental-dir=/scratch/inc5", *tail],
    ]


@pytest.mark.parametrize(
    ("version", "tail"),
    [
        ("8.0.32-25", ["--use-memory=2147483648"]),
        ("8.0.32-26", ["--use-free-memory-pct=50"]),
        ("8.0.35-32", ["--use-free-memory-pct=50"]),
        ("8.0.35-33", ["--use-free-memory-pct=50", "--parallel=4"]),
    ],
)
def test_xtrabackup_five_incrementals_exact_argv_with_tuning(version, tail):
    head = ["xtrabackup", "--no-defaults", "--prepare", f"--target-dir={BASE}"]
    expected = [[*head, "--apply-log-only", *tail]]
    expected += [
        [*head, "--apply-log-only", f"--incremental-dir=/scratch/inc{i}", *tail] for i in range(1, 5)
    ]
    expected += [[*head, "--incremental-dir=/scratch/inc5", *tail]]
    assert all_argv(xb(version), 5, TUNING) == expected


@pytest.mark.parametrize("version", XB_VERSIONS)
def test_free_memory_pct_only_with_estimate_memory_and_parallel_only_from_8_0_35_33(version):
    tool = xb(version)
    for argv in all_argv(tool, 5, TUNING):
        assert ("--use-free-memory-pct=50" in argv) is tool.capabilities.estimate_memory
        assert ("--use-memory=2147483648" in argv) is (not tool.capabilities.estimate_memory)
        assert ("--parallel=4" in argv) is (tool.version >= (8, 0, 35, 33))


def test_without_tuning_no_memory_or_parallel_flags():
    for argv in all_argv(xb("8.0.35-33"), 2):
        assert not [a for a in argv if a.startswith(("--use-memory", "--use-free-memory-pct", "--parallel"))]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_mariabackup_10_11_chain_never_uses_apply_log_only(n):
    tool = mb("10.11.19")
    steps = prepare_steps(tool, BASE, incs(n))
    assert all(not s.apply_log_only for s in steps)
    head = ["mariabackup", "--no-defaults", "--prepare", f"--target-dir={BASE}", "--use-memory=2147483648"]
    argvs = all_argv(tool, n, TUNING)
    assert argvs[0] == head
    for i, argv in enumerate(argvs[1:], start=1):
        assert argv == [*head[:4], f"--incremental-dir=/scratch/inc{i}", head[4]]
    assert all("--apply-log-only" not in a for a in argvs)
    assert all(not a.startswith(("--parallel", "--use-free-memory-pct")) for argv in argvs for a in argv)


def test_mariabackup_10_11_refuses_an_apply_log_only_step():
    with pytest.raises(EngineError, match="--apply-log-only"):
        prepare_argv(mb("10.11.19"), PrepareStep(BASE, None, apply_log_only=True))


def test_mariabackup_10_4_chain_uses_apply_log_only_like_xtrabackup():
    argvs = all_argv(mb("10.4.34"), 2)
    head = ["mariabackup", "--no-defaults", "--prepare", f"--target-dir={BASE}"]
    assert argvs == [
        [*head, "--apply-log-only"],
        [*head, "--apply-log-only", "--incremental-dir=/scratch/inc1"],
        [*head, "--incremental-dir=/scratch/inc2"],
    ]


# ---------------------------------------------------------------------------------------------
# backup


def opts(**kw) -> BackupOptions:
    return BackupOptions(datadir="/var/lib/mysql", lsn_dir="/tmp/lsn", scratch_dir="/tmp/scratch", **kw)


def test_backup_argv_xtrabackup_full_exact():
    assert backup_argv(xb("8.0.35-33"), "/priv/client.cnf", opts()) == [
        "xtrabackup",
        "--defaults-file=/priv/client.cnf",
        "--backup",
        "--stream=xbstream",
        "--datadir=/var/lib/mysql",
        "--target-dir=/tmp/scratch",
        "--extra-lsndir=/tmp/lsn",
        "--parallel=2",
        "--estimate-memory=ON",
    ]


def test_backup_argv_mariabackup_incremental_reads_our_defaults_file_alone_exact():
    """The host's my.cnf never reaches the tool: the server's layout comes from the server itself."""
    argv = backup_argv(
        mb("10.11.19"),
        "/priv/client.cnf",
        opts(incremental_lsn=18153140, parallel=4, extra_args=("--galera-info",)),
    )
    assert argv == [
        "mariabackup",
        "--defaults-file=/priv/client.cnf",
        "--backup",
        "--stream=xbstream",
        "--datadir=/var/lib/mysql",
        "--target-dir=/tmp/scratch",
        "--extra-lsndir=/tmp/lsn",
        "--parallel=4",
        "--incremental-lsn=18153140",
        "--galera-info",
    ]


@pytest.mark.parametrize("tool", [xb("8.0.35-33"), mb("10.11.19")], ids=["xtrabackup", "mariabackup"])
def test_both_tools_get_the_open_files_limit_for_backup_and_prepare(tool):
    """Both documented tools take --open-files-limit: --backup keeps every tablespace open."""
    assert "--open-files-limit=20000" in backup_argv(tool, "/c", opts(open_files_limit=20000))
    assert not any(a.startswith("--open-files-limit") for a in backup_argv(tool, "/c", opts()))
    step = prepare_steps(tool, BASE, [])[0]
    assert "--open-files-limit=20000" in prepare_argv(tool, step, PrepareTuning(open_files_limit=20000))


def test_backup_argv_uses_the_detected_binary_path():
    tool = ToolVersion("mariabackup", (10, 11, 19, 0), "/opt/mariadb/bin/mariadb-backup")
    assert backup_argv(tool, "/c", opts())[0] == "/opt/mariadb/bin/mariadb-backup"


@pytest.mark.parametrize("tool", [xb("8.0.35-33"), mb("10.11.19")], ids=["xtrabackup", "mariabackup"])
def test_backup_argv_incremental_lsn_only_for_incrementals(tool):
    full = backup_argv(tool, "/c", opts())
    inc = backup_argv(tool, "/c", opts(incremental_lsn=0))
    assert not [a for a in full if a.startswith("--incremental-lsn")]
    assert "--incremental-lsn=0" in inc  # 0 is a valid LSN, not "no LSN"


@pytest.mark.parametrize(
    ("tool", "estimate"),
    [
        (xb("8.0.32-25"), False),
        (xb("8.0.32-26"), True),
        (xb("8.4.0-1"), True),
        (xb("8.0.29-22"), False),
        (mb("10.11.19"), False),
    ],
    ids=lambda v: v.text if isinstance(v, ToolVersion) else None,
)
def test_backup_argv_estimate_memory_only_from_8_0_32_26(tool, estimate):
    assert ("--estimate-memory=ON" in backup_argv(tool, "/c", opts())) is estimate


@pytest.mark.parametrize("secret", ["--password=x", "-px", "--password"])
@pytest.mark.parametrize("tool", [xb("8.0.35-33"), mb("10.11.19")], ids=["xtrabackup", "mariabackup"])
def test_backup_argv_refuses_a_password_on_the_command_line(tool, secret):
    with pytest.raises(EngineError, match="password"):
        backup_argv(tool, "/c", opts(extra_args=("--slave-info", secret)))


def test_backup_argv_does_not_mistake_other_options_for_passwords():
    argv = backup_argv(xb("8.0.35-33"), "/c", opts(extra_args=("--parallel=8", "-P3306", "--port=3306")))
    assert argv[-3:] == ["--parallel=8", "-P3306", "--port=3306"]


# ---------------------------------------------------------------------------------------------
# copy-back, extract


def test_copy_back_and_move_back_argv():
    assert copy_back_argv(xb("8.0.35-33"), "/scratch/base", "/var/lib/mysql") == [
        "xtrabackup",
        "--no-defaults",
        "--copy-back",
        "--target-dir=/scratch/base",
        "--datadir=/var/lib/mysql",
    ]
    assert copy_back_argv(mb("10.11.19"), "/scratch/base", "/var/lib/mysql", move=True) == [
        "mariabackup",
        "--no-defaults",
        "--move-back",
        "--target-dir=/scratch/base",
        "--datadir=/var/lib/mysql",
    ]


def test_extract_argv_uses_the_flavours_stream_tool():
    assert extract_argv(mb("10.11.19"), "/scratch/x") == ["mbstream", "-x", "-C", "/scratch/x"]
    assert extract_argv(xb("8.0.35-33"), "/scratch/x") == ["xbstream", "-x", "-C", "/scratch/x"]


# ---------------------------------------------------------------------------------------------
# parsers

FULL_CHECKPOINTS = """backup_type = full-backuped
from_lsn = 0
to_lsn = 18153140
last_lsn = 18153149
flushed_lsn = 18153149
redo_memory = 0
redo_frames = 0
"""

INC_CHECKPOINTS = """
backup_type = incremental

from_lsn = 18153140
to_lsn = 18200000
last_lsn = 18200011
recover_binlog_info = 0
"""


def test_parse_checkpoints_full():
    cp = parse_checkpoints(FULL_CHECKPOINTS)
    assert (cp.backup_type, cp.from_lsn, cp.to_lsn, cp.last_lsn) == ("full-backuped", 0, 18153140, 18153149)
    assert cp.extra == {"flushed_lsn": "18153149", "redo_memory": "0", "redo_frames": "0"}
    assert cp.incremental is False


def test_parse_checkpoints_incremental_with_blank_lines_and_extra_keys():
    cp = parse_checkpoints(INC_CHECKPOINTS)
    assert (cp.backup_type, cp.from_lsn, cp.to_lsn, cp.last_lsn) == (
        "incremental",
        18153140,
        18200000,
        18200011,
    )
    assert cp.extra == {"recover_binlog_info": "0"}
    assert cp.incremental is True


def test_parse_checkpoints_without_last_lsn_uses_to_lsn():
    cp = parse_checkpoints("backup_type = full-backuped\nfrom_lsn = 0\nto_lsn = 42\n")
    assert cp.last_lsn == 42


@pytest.mark.parametrize(
    "text",
    ["backup_type = full-backuped\nfrom_lsn = 0\nlast_lsn = 5\n", "from_lsn = 0\nto_lsn = abc\n", ""],
)
def test_parse_checkpoints_missing_or_bad_lsn_names_the_file(text):
    with pytest.raises(EngineError) as exc:
        parse_checkpoints(text, "/restore/inc3/xtrabackup_checkpoints")
    assert "/restore/inc3/xtrabackup_checkpoints" in str(exc.value)
    assert "LSN" in str(exc.value)


def test_parse_checkpoints_missing_to_lsn_names_the_field():
    with pytest.raises(EngineError, match="to_lsn"):
        parse_checkpoints("backup_type = full-backuped\nfrom_lsn = 0\n", "mariadb_backup_checkpoints")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mysql-bin.000003\t1234\n", BinlogPosition("mysql-bin.000003", 1234, None)),
        ("mysql-bin.000001\t975\t0-7-4\n", BinlogPosition("mysql-bin.000001", 975, "0-7-4")),
        (f"binlog.000002\t157\t{UUID_A}:1-5\n", BinlogPosition("binlog.000002", 157, f"{UUID_A}:1-5")),
        (
            f"binlog.000002\t157\t{UUID_A}:1-5,\n{UUID_B}:1-3\n",
            BinlogPosition("binlog.000002", 157, f"{UUID_A}:1-5,{UUID_B}:1-3"),
        ),
        ("mysql-bin.000001\t975\t0-7-4,\n1-8-10\n", BinlogPosition("mysql-bin.000001", 975, "0-7-4,1-8-10")),
        ("", BinlogPosition()),
        ("mysql-bin.000001\n", BinlogPosition()),
        ("mysql-bin.000001\tnotanumber\n", BinlogPosition()),
    ],
)
def test_parse_binlog_info(text, expected):
    assert parse_binlog_info(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "filename 'mysql-bin.000001', position '975', GTID of the last change '0-7-4'",
            BinlogPosition("mysql-bin.000001", 975, "0-7-4"),
        ),
        (
            f"filename 'binlog.000002', position '157', GTID of the last change '{UUID_A}:1-5'",
            BinlogPosition("binlog.000002", 157, f"{UUID_A}:1-5"),
        ),
        ("filename 'binlog.000002', position '157'", BinlogPosition("binlog.000002", 157, None)),
        (
            "filename 'binlog.000002', position '157', GTID of the last change ''",
            BinlogPosition("binlog.000002", 157, None),
        ),
        ("", BinlogPosition()),
        ("garbage", BinlogPosition()),
    ],
)
def test_parse_binlog_pos(value, expected):
    assert parse_binlog_pos(value) == expected


MARIADB_INFO = """uuid = 0b3a5c2e-cf0d-11ef-9a4e-0242ac120002
name =
tool_name = mariabackup
tool_command = --defaults-file=/tmp/x/client.cnf --backup --stream=xbstream --target-dir=/tmp/s
tool_version = 10.11.19-MariaDB
ibbackup_version = 10.11.19-MariaDB
server_version = 10.11.19-MariaDB-log
start_time = 2025-01-10 10:00:00
end_time = 2025-01-10 10:00:05
lock_time = 0
binlog_pos = filename 'mysql-bin.000001', position '975', GTID of the last change '0-7-4'
innodb_from_lsn = 0
innodb_to_lsn = 45402
partial = N
incremental = N
format = xbstream
compressed = N
"""


def test_parse_info_mariadb():
    info = parse_info(MARIADB_INFO)
    assert info.server_version == "10.11.19-MariaDB-log"
    assert info.tool_version == "10.11.19-MariaDB"
    assert info.start_time == "2025-01-10 10:00:00"
    assert info.end_time == "2025-01-10 10:00:05"
    assert info.binlog == BinlogPosition("mysql-bin.000001", 975, "0-7-4")
    # values keep their own '=' signs; empty values are kept as ''
    assert info.fields["tool_command"].startswith("--defaults-file=/tmp/x/client.cnf --backup")
    assert info.fields["name"] == ""
    assert info.fields["innodb_to_lsn"] == "45402"


def test_parse_info_xtrabackup_8_binlog_pos():
    info = parse_info(
        "tool_name = xtrabackup\n"
        "server_version = 8.0.35-27\n"
        f"binlog_pos = filename 'binlog.000002', position '157', GTID of the last change '{UUID_A}:1-5'\n"
    )
    assert info.binlog == BinlogPosition("binlog.000002", 157, f"{UUID_A}:1-5")
    assert info.server_version == "8.0.35-27"


def test_parse_info_empty_gives_empty_values():
    info = parse_info("")
    assert (info.server_version, info.tool_version, info.start_time, info.binlog) == (
        "",
        "",
        "",
        BinlogPosition(),
    )


# ---------------------------------------------------------------------------------------------
# a tool and the server it copies; the metadata names each tool writes


@pytest.mark.parametrize(
    ("tool", "family", "server"),
    [
        (mb("10.11.6"), "mariadb", (10, 11, 14)),  # the series matters, not the patch release
        (mb("11.8.9"), "mariadb", (11, 8, 9)),
        (mb("11.8.9"), "mariadb", (11, 4, 5)),
        (xb("8.0.35-30"), "mysql", (8, 0, 35)),
        (xb("8.4.0-1"), "mysql", (8, 0, 40)),
    ],
    ids=str,
)
def test_a_tool_of_the_servers_version_or_newer_is_accepted(tool, family, server):
    check_tool_for_server(tool, family, server)


@pytest.mark.parametrize(
    ("tool", "family", "server", "words"),
    [
        (mb("10.11.6"), "mariadb", (11, 8, 9), ["10.11.6", "MariaDB 11.8.9", "install mariadb-backup 11.8"]),
        (mb("11.4.5"), "mariadb", (11, 8, 0), ["11.4.5", "MariaDB 11.8.0", "install mariadb-backup 11.8"]),
        (
            xb("8.0.35-30"),
            "mysql",
            (8, 4, 3),
            ["8.0.35-30", "MySQL 8.4.3", "install Percona XtraBackup 8.4.3"],
        ),
        (xb("8.0.34-29"), "mysql", (8, 0, 35), ["8.0.34-29", "MySQL 8.0.35", "XtraBackup 8.0.35"]),
        (xb("8.4.0-1"), "mysql", (9, 7, 4), ["8.4.0-1", "MySQL 9.7.4", "XtraBackup 9.7.4"]),
        (
            mb("11.8.9"),
            "mysql",
            (9, 7, 4),
            ["mariabackup 11.8.9", "cannot back up MySQL 9.7.4", "xtrabackup"],
        ),
        (
            xb("8.4.0-1"),
            "mariadb",
            (11, 8, 9),
            ["xtrabackup 8.4.0-1", "cannot back up MariaDB 11.8.9", "mariabackup"],
        ),
    ],
    ids=str,
)
def test_a_tool_older_than_the_server_or_of_the_other_family_is_refused_in_one_line(
    tool, family, server, words
):
    with pytest.raises(EngineError) as exc:
        check_tool_for_server(tool, family, server)
    message = str(exc.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    ("tool", "prefix"),
    [
        (mb("10.11.6"), "xtrabackup_"),
        (mb("11.0.6"), "xtrabackup_"),
        (mb("11.1.2"), "mariadb_backup_"),
        (mb("11.8.9"), "mariadb_backup_"),
        (xb("8.4.0-1"), "xtrabackup_"),
    ],
    ids=str,
)
def test_mariadb_backup_11_1_and_later_write_mariadb_backup_metadata_files(tool, prefix):
    assert tool.capabilities.metadata_prefix == prefix


def test_mariadb_backup_11_8_prepares_a_chain_without_apply_log_only():
    tool = parse_tool_version(mb_output("11.8.9", "/usr/bin/mariadb-backup"))
    argv = all_argv(tool, 3)
    assert len(argv) == 4 and not any(a.startswith("--apply-log") for step in argv for a in step)
    with pytest.raises(EngineError):
        prepare_argv(tool, PrepareStep(BASE, None, apply_log_only=True))
