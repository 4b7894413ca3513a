"""core/backup/impact.py: the lock phases read from the tools' own logs (a real mariabackup 10.11 log,
and XtraBackup's documented lock statements), what they blocked, and the bounds' settings."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.backup.impact import (
    ImpactSettings,
    LogLine,
    apply_settings,
    blocked_seconds,
    lines_from_log,
    lock_phases,
)
from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.engine.tools import ToolVersion

# mariabackup 10.11.19 `--backup --stream=xbstream`, the lines around its BACKUP STAGE steps (as printed).
MARIABACKUP_LOG = """\
[00] 2026-12-01 11:52:24 Connecting to MariaDB server host: localhost, user: root, password: set, port: 36211
[00] 2026-12-01 11:52:24 Starting BACKUP STAGE START
[00] 2026-12-01 11:52:24 Acquiring BACKUP LOCKS...
[00] 2026-12-01 11:52:24 Acquired locks for BACKUP STAGE START
[00] 2026-12-01 11:52:24 Finished BACKUP STAGE START
[00] 2026-12-01 11:52:24 Starting BACKUP STAGE FLUSH
[00] 2026-12-01 11:52:24 Acquired locks for BACKUP STAGE FLUSH
[00] 2026-12-01 11:52:24 Copied file ./x/m.MYD for table `x`.`m`, 0 bytes
[00] 2026-12-01 11:52:27 Finished BACKUP STAGE FLUSH
[00] 2026-12-01 11:52:27 Started BACKUP STAGE BLOCK_DDL
[00] 2026-12-01 11:52:28 Acquired locks for BACKUP STAGE BLOCK_DDL
[00] 2026-12-01 11:52:28 Starting to backup non-InnoDB tables and files
[00] 2026-12-01 11:52:30 Finished backing up non-InnoDB tables and files
[00] 2026-12-01 11:52:30 Finished BACKUP STAGE BLOCK_DDL
[00] 2026-12-01 11:52:30 Starting BACKUP STAGE BLOCK_COMMIT
[00] 2026-12-01 11:52:30 Acquired locks for BACKUP STAGE BLOCK_COMMIT
[00] 2026-12-01 11:52:30 mariabackup: The latest check point (for incremental): '44760'
mariabackup: Stopping log copying thread.
[00] 2026-12-01 11:52:31 Executing FLUSH NO_WRITE_TO_BINLOG ENGINE LOGS...
[00] 2026-12-01 11:52:31 Finishing BACKUP STAGE BLOCK_COMMIT
[00] 2026-12-01 11:52:31 Starting BACKUP STAGE END
[00] 2026-12-01 11:52:31 Executing BACKUP STAGE END
[00] 2026-12-01 11:52:31 All tables unlocked
[00] 2026-12-01 11:52:31 completed OK!
"""

# Percona XtraBackup 8.0's log around its lock statements (the statements as its manual spells them).
XTRABACKUP_LOG = """\
2026-12-01T10:00:00.000000-00:00 0 [Note] [MY-011825] [Xtrabackup] Executing LOCK INSTANCE FOR BACKUP ...
2026-12-01T10:00:00.500000-00:00 0 [Note] [MY-011825] [Xtrabackup] Copying ./ibdata1 to <STDOUT>
2026-12-01T10:00:40.000000-00:00 0 [Note] [MY-011825] [Xtrabackup] Executing FLUSH TABLES WITH READ LOCK...
2026-12-01T10:00:41.250000-00:00 0 [Note] [MY-011825] [Xtrabackup] Starting to backup non-InnoDB tables and files
2026-12-01T10:00:43.000000-00:00 0 [Note] [MY-011825] [Xtrabackup] Finished backing up non-InnoDB tables and files
2026-12-01T10:00:43.500000-00:00 0 [Note] [MY-011825] [Xtrabackup] Executing FLUSH NO_WRITE_TO_BINLOG BINARY LOGS
2026-12-01T10:00:44.000000-00:00 0 [Note] [MY-011825] [Xtrabackup] Executing UNLOCK TABLES
2026-12-01T10:00:44.000000-00:00 0 [Note] [MY-011825] [Xtrabackup] All tables unlocked
2026-12-01T10:00:45.000000-00:00 0 [Note] [MY-011825] [Xtrabackup] Executing UNLOCK INSTANCE
2026-12-01T10:00:46.000000-00:00 0 [Note] [MY-011825] [Xtrabackup] completed OK!
"""


def test_mariabackup_stages_with_what_each_blocks():
    phases = lock_phases("mariabackup", lines_from_log(MARIABACKUP_LOG))
    assert [(p.name, p.blocks) for p in phases] == [
        ("BACKUP STAGE START", []),
        ("BACKUP STAGE FLUSH", ["non_transactional_writes"]),
        ("BACKUP STAGE BLOCK_DDL", ["ddl"]),
        ("BACKUP STAGE BLOCK_COMMIT", ["commits"]),
    ]
    by_name = {p.name: p for p in phases}
    # BLOCK_DDL was asked for at :27 and granted at :28; every stage is held until BACKUP STAGE END (:31).
    assert by_name["BACKUP STAGE BLOCK_DDL"].waited_seconds == 1
    assert by_name["BACKUP STAGE BLOCK_DDL"].held_seconds == 3
    assert by_name["BACKUP STAGE BLOCK_COMMIT"].held_seconds == 1
    assert blocked_seconds(phases) == {"commits": 1.0, "ddl": 4.0, "non_transactional_writes": 7.0}


def test_xtrabackup_lock_statements_and_the_next_line_as_the_grant():
    phases = lock_phases("xtrabackup", lines_from_log(XTRABACKUP_LOG))
    names = [p.name for p in phases]
    assert names == ["LOCK INSTANCE FOR BACKUP", "FLUSH TABLES WITH READ LOCK"]
    ftwrl = phases[1]
    assert ftwrl.waited_seconds == 1.25  # until the next line: the tool prints nothing when it is granted
    assert ftwrl.held_seconds == 2.75
    # FTWRL blocks commits for 4 s; DDL is blocked from LOCK INSTANCE to UNLOCK INSTANCE (45 s).
    assert blocked_seconds(phases) == {"commits": 4.0, "ddl": 45.0, "non_transactional_writes": 4.0}


def test_a_tool_that_died_holding_a_lock_ends_the_phase_at_its_last_line():
    cut = MARIABACKUP_LOG.split("[00] 2026-12-01 11:52:31 Executing FLUSH")[0]
    phases = lock_phases("mariabackup", lines_from_log(cut))
    assert phases[-1].name == "BACKUP STAGE BLOCK_COMMIT"
    assert phases[-1].held_seconds == 0  # the last line came in the same second


def test_stamps_of_our_own_reading_are_finer_than_the_tools_seconds():
    lines = [
        LogLine(100.00, "[00] 2026-12-01 11:52:30 Starting BACKUP STAGE BLOCK_COMMIT"),
        LogLine(100.05, "[00] 2026-12-01 11:52:30 Acquired locks for BACKUP STAGE BLOCK_COMMIT"),
        LogLine(100.35, "[00] 2026-12-01 11:52:30 Executing BACKUP STAGE END"),
    ]
    (phase,) = lock_phases("mariabackup", lines)
    assert (phase.waited_seconds, phase.held_seconds) == (0.05, 0.3)
    assert blocked_seconds([phase]) == {"commits": 0.35}


def test_settings_from_the_config_and_the_prefixes_they_give():
    settings = ImpactSettings.from_dict(
        {
            "nice": 10,
            "ionice": "best-effort",
            "ionice_level": 6,
            "max_upload_mib_per_second": 2.5,
            "parallel": 3,
        }
    )
    assert settings.max_upload_bytes_per_second == int(2.5 * 1024 * 1024)
    applied = apply_settings(
        settings, ToolVersion("mariabackup", (10, 11, 19, 0), "mariabackup"), 2, "host c/h"
    )
    assert applied.parallel == 3
    assert applied.wrap_tool(["mariabackup", "--backup"]) == [
        *("ionice", "-c", "2", "-n", "6", "nice", "-n", "10"),
        *("mariabackup", "--backup"),
    ]
    assert applied.wrap_gpg(["gpg", "--encrypt"]) == ["nice", "-n", "10", "gpg", "--encrypt"]
    assert applied.tool_args() == []  # no throttle asked for
    record = applied.record([])
    assert (record.nice, record.ionice, record.parallel) == (10, "best-effort:6", 3)


def test_a_host_overrides_only_the_fields_it_sets():
    config = parse_config(
        {
            "storage": {"local_path": "/srv/b"},
            "policy": {"impact": {"nice": 10, "throttle": 400}},
            "clusters": [
                {"name": "c", "hosts": [{"name": "h1", "impact": {"throttle": 100}}, {"name": "h2"}]}
            ],
        }
    )
    h1, h2 = config.clusters[0].hosts
    assert (config.impact_for(h1).nice, config.impact_for(h1).throttle) == (10, 100)
    assert (config.impact_for(h2).nice, config.impact_for(h2).throttle) == (10, 400)


@pytest.mark.parametrize(
    ("impact", "field"),
    [({"nice": 20}, "nice"), ({"throttle": 0}, "throttle"), ({"ionice": "realtime"}, "ionice")],
)
def test_bad_impact_settings_name_the_field(impact, field):
    with pytest.raises(ConfigError, match=rf"clusters\.0\.hosts\.0\.impact\.{field}"):
        parse_config(
            {
                "storage": {"local_path": "/b"},
                "clusters": [{"name": "c", "hosts": [{"name": "h", "impact": impact}]}],
            }
        )
