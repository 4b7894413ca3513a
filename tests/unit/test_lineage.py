"""The decision "does this server's data descend from the incremental's parent?", for both flavours.

MariaDB is also covered end to end (tests/faults/test_fault_lineage.py); XtraBackup / MySQL 8
cannot run here, so its facts (server_uuid, GTID_SUBSET against gtid_executed, the LSN from
performance_schema.log_status) are given as the server would report them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from manifest_factory import UUID, make_manifest
from xtrabackup_provider.core.backup.decide import ChainPolicy, decide
from xtrabackup_provider.core.backup.lineage import (
    ServerLineage,
    describe_break,
    lineage_problems,
    mariadb_contains,
)
from xtrabackup_provider.core.db.checksum import ChecksumOptions, checksum_argv
from xtrabackup_provider.core.db.server import DataPosition, MySQLTarget

GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77"
TOKEN = "ab" * 16


def _parent(**over):
    fields = {"gtid": GTID, "extra": {"heartbeat": True, "lineage_token": TOKEN}, **over}
    return make_manifest("20261201T000000Z-full", **fields)


def _mysql(uuid=UUID, lsn=100_000, contains=True, token=TOKEN) -> ServerLineage:
    return ServerLineage(
        uuid, DataPosition(lsn, GTID + ",aaaa:1-3", contains=contains), token, is_mariadb=False
    )


def test_mysql_same_history_has_no_problem():
    assert lineage_problems(_parent(), _mysql()) == []


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        (_mysql(uuid="9f0c0000-0000-11ee-0000-000000000001"), "it is server 9f0c0000"),
        (_mysql(contains=False), f"does not contain the parent's {GTID}"),
        (_mysql(lsn=4_000), "its LSN 4000 is below the parent's last_lsn 5009"),
        (_mysql(token=None), "its lineage row for 20261201T000000Z-full is missing"),
        (_mysql(token="cd" * 16), "holds another token"),
    ],
)
def test_mysql_each_broken_link_is_named(server, problem):
    problems = lineage_problems(_parent(), server)
    assert len(problems) == 1 and problem in problems[0], problems
    message = describe_break(_parent(), server, problems)
    assert message.startswith("this server's data does not descend from 20261201T000000Z-full")
    assert f"parent 20261201T000000Z-full: {UUID}, last_lsn 5009" in message and "this server:" in message


def test_mysql_without_the_lsn_privilege_or_a_planted_token_relies_on_the_other_checks():
    # No BACKUP_ADMIN (no LSN), super_read_only (no token could be planted): GTID and uuid remain.
    parent = _parent(extra={"heartbeat": False})
    assert lineage_problems(parent, _mysql(lsn=None, token=None)) == []
    assert lineage_problems(parent, _mysql(lsn=None, token=None, contains=False))


def _maria(state: str, current: str = "", lsn: int = 100_000, token: str | None = TOKEN) -> ServerLineage:
    return ServerLineage("mariadb-vm-3306-11", DataPosition(lsn, state, current), token)


def test_mariadb_gtid_history_is_per_domain_and_server_id():
    parent = _parent(server_uuid="mariadb-vm-3306-11", gtid="0-1501-3")
    assert lineage_problems(parent, _maria("0-1501-9,0-1502-2")) == []
    # A re-seed from another server of the domain: a higher sequence, but not this history.
    problems = lineage_problems(parent, _maria("0-1601-40"))
    assert problems and "does not contain the parent's 0-1501-3" in problems[0]
    # No binlog of its own (a replica without log_slave_updates): the current position decides.
    assert lineage_problems(parent, _maria("", current="0-1501-5")) == []
    assert lineage_problems(parent, _maria("", current="0-1501-2"))


def test_mariadb_contains_every_domain_of_the_parent():
    assert mariadb_contains("0-1-5,1-2-7", "0-1-5,1-2-9", "")
    assert not mariadb_contains("0-1-5,1-2-7", "0-1-5", "")
    assert mariadb_contains("", "", "")


def test_forced_incremental_may_continue_past_the_policy_but_not_a_broken_chain():
    now = datetime(2026, 12, 20, tzinfo=UTC)
    full = make_manifest("20261201T000000Z-full")
    inc = make_manifest("20261202T000000Z-inc", parent=full)
    old = decide([full, inc], ChainPolicy(full_every=timedelta(days=7)), now)
    assert old.kind == "full" and old.continuable == inc  # the policy's limit: a forced one may go on
    broken = decide([inc], ChainPolicy(), now)  # its full's manifest is gone
    assert broken.kind == "full" and broken.continuable is None, broken


def test_checksum_always_ignores_the_host_local_schema():
    argv = checksum_argv(MySQLTarget(), "/creds", ChecksumOptions(ignore_databases=["scratch"]))
    assert "--ignore-databases=scratch,xtrabackup_provider_local" in argv
    assert "--ignore-databases=xtrabackup_provider_local" in checksum_argv(
        MySQLTarget(), "/c", ChecksumOptions()
    )
