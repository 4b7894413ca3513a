"""What differs between the servers the product speaks to, in one place: MySQL 8.0 / 8.4 / 9.x and
MariaDB 10.6 - 11.8. A verb asks the :class:`Dialect` of the server it talks to (chosen once from its
version string) for a statement, a variable or a tool, instead of branching on the family itself; a
new server version is one row of the tables below.

The differences it knows (each checked against the server's own documentation):
- binlog status: MySQL 8.2 renamed `SHOW MASTER STATUS` to `SHOW BINARY LOG STATUS`, and 8.4
  removed the old words; MariaDB keeps `SHOW MASTER STATUS` (and accepts `SHOW BINLOG STATUS`
  from 10.5.2).
- replicas: MySQL 8.0.22 added `START/STOP REPLICA` and `SHOW REPLICA STATUS` (its columns renamed
  `Slave_*` / `*Master*` to `Replica_*` / `*Source*`), 8.0.23 `CHANGE REPLICATION SOURCE TO ...
  SOURCE_*`; 8.4 removed the old ones. MariaDB accepts `START/STOP REPLICA` and `SHOW REPLICA
  STATUS` (10.5.1+) but keeps its column names and `CHANGE MASTER TO ... MASTER_USE_GTID`.
- GTIDs: MySQL's `uuid:1-5` sets in `gtid_executed` / `gtid_purged` (a restored copy becomes a
  replica through `SET GLOBAL gtid_purged`, then `SOURCE_AUTO_POSITION=1`); MariaDB's
  `domain-server-seq` positions in `gtid_binlog_pos` / `gtid_current_pos` / `gtid_slave_pos`.
- tools: each family's own binlog client (`mysqlbinlog` refuses MariaDB's binlogs and MariaDB's
  `mariadb-binlog` refuses a MySQL server), client and server programs; mariadb-backup 11.1+
  writes `mariadb_backup_*` metadata files instead of `xtrabackup_*`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["mariadb", "mysql"]

# SHOW REPLICA STATUS / SHOW SLAVE STATUS: the product's name for a column -> (MySQL 8.0.22+ name,
# the older name MySQL before 8.0.22 and every MariaDB use).
_STATUS_COLUMNS = {
    "io_running": ("Replica_IO_Running", "Slave_IO_Running"),
    "sql_running": ("Replica_SQL_Running", "Slave_SQL_Running"),
    "sql_running_state": ("Replica_SQL_Running_State", "Slave_SQL_Running_State"),
    "io_state": ("Replica_IO_State", "Slave_IO_State"),
    "last_io_errno": ("Last_IO_Errno", "Last_IO_Errno"),
    "last_io_error": ("Last_IO_Error", "Last_IO_Error"),
    "last_sql_errno": ("Last_SQL_Errno", "Last_SQL_Errno"),
    "last_sql_error": ("Last_SQL_Error", "Last_SQL_Error"),
    "seconds_behind": ("Seconds_Behind_Source", "Seconds_Behind_Master"),
    "source_host": ("Source_Host", "Master_Host"),
    "source_port": ("Source_Port", "Master_Port"),
    "source_log_file": ("Source_Log_File", "Master_Log_File"),
    "read_source_log_pos": ("Read_Source_Log_Pos", "Read_Master_Log_Pos"),
    "relay_source_log_file": ("Relay_Source_Log_File", "Relay_Master_Log_File"),
    "exec_source_log_pos": ("Exec_Source_Log_Pos", "Exec_Master_Log_Pos"),
    "sql_delay": ("SQL_Delay", "SQL_Delay"),
    "sql_remaining_delay": ("SQL_Remaining_Delay", "SQL_Remaining_Delay"),
    "source_server_id": ("Source_Server_Id", "Master_Server_Id"),
    "relay_log_file": ("Relay_Log_File", "Relay_Log_File"),
    "relay_log_pos": ("Relay_Log_Pos", "Relay_Log_Pos"),
    # MySQL: the GTID sets received and applied; MariaDB: the GTID mode and the IO thread's position.
    "retrieved_gtid_set": ("Retrieved_Gtid_Set", "Retrieved_Gtid_Set"),
    "executed_gtid_set": ("Executed_Gtid_Set", "Executed_Gtid_Set"),
    "auto_position": ("Auto_Position", "Auto_Position"),
    "using_gtid": ("Using_Gtid", "Using_Gtid"),
    "gtid_io_pos": ("Gtid_IO_Pos", "Gtid_IO_Pos"),
    "gtid_slave_pos": ("Gtid_Slave_Pos", "Gtid_Slave_Pos"),
    # MySQL's replication channel (one row each); MariaDB's SHOW ALL SLAVES STATUS connection name.
    "channel": ("Channel_Name", "Connection_name"),
}


def parse_version(version: str) -> tuple[int, int, int]:
    """`9.7.4-2`, `11.8.9-MariaDB-0+deb13u1-log`, `5.5.5-10.11.6-MariaDB` -> (major, minor, patch)."""
    text = str(version)
    # MariaDB before 11 may prefix 5.5.5- for old clients (the replication protocol's version).
    text = re.sub(r"^5\.5\.5-", "", text)
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        raise ValueError(f"not a server version: {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


@dataclass(frozen=True)
class Dialect:
    """How to speak to one server version. Built by :func:`dialect_for`; never by hand."""

    family: Family
    version: tuple[int, int, int]
    version_text: str = ""

    # -- identity ----------------------------------------------------------------------------------
    @property
    def is_mariadb(self) -> bool:
        return self.family == "mariadb"

    @property
    def name(self) -> str:
        major, minor, patch = self.version
        return f"{'MariaDB' if self.is_mariadb else 'MySQL'} {major}.{minor}.{patch}"

    def at_least(self, major: int, minor: int = 0, patch: int = 0) -> bool:
        return self.version >= (major, minor, patch)

    @property
    def _new_replica_words(self) -> bool:
        """MySQL 8.0.22+: REPLICA / SOURCE words and column names."""
        return not self.is_mariadb and self.at_least(8, 0, 22)

    # -- statements --------------------------------------------------------------------------------
    @property
    def binlog_status(self) -> str:
        """The statement whose first row is (File, Position, ...) of the binlog being written."""
        if not self.is_mariadb and self.at_least(8, 2):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"

    @property
    def replica_status(self) -> str:
        return "SHOW REPLICA STATUS" if self._new_replica_words else "SHOW SLAVE STATUS"

    @property
    def all_replicas_status(self) -> str:
        """One row per source the server replicates from (MariaDB's multi-source connections)."""
        return "SHOW ALL SLAVES STATUS" if self.is_mariadb else self.replica_status

    @property
    def start_replica(self) -> str:
        return "START REPLICA" if self._new_replica_words else "START SLAVE"

    @property
    def stop_replica(self) -> str:
        return "STOP REPLICA" if self._new_replica_words else "STOP SLAVE"

    @property
    def reset_replica_all(self) -> str:
        return "RESET REPLICA ALL" if self._new_replica_words else "RESET SLAVE ALL"

    def start_sql_thread_until(
        self,
        *,
        after_gtids: str | None = None,
        before_gtids: str | None = None,
        file: str | None = None,
        position: int | None = None,
    ) -> tuple[str, tuple[Any, ...]]:
        """Start only the applier, stopping at a GTID set (MySQL) or a relay position."""
        start = "START REPLICA SQL_THREAD" if self._new_replica_words else "START SLAVE SQL_THREAD"
        if after_gtids is not None or before_gtids is not None:
            if self.is_mariadb:
                raise ValueError("MariaDB's applier stops at a master_gtid_pos, not SQL_BEFORE/AFTER_GTIDS")
            key = "SQL_AFTER_GTIDS" if after_gtids is not None else "SQL_BEFORE_GTIDS"
            return f"{start} UNTIL {key} = %s", (after_gtids if after_gtids is not None else before_gtids,)
        if file is not None and position is not None:
            words = ("RELAY_LOG_FILE", "RELAY_LOG_POS")
            return f"{start} UNTIL {words[0]} = %s, {words[1]} = %s", (file, position)
        return start, ()

    def change_source(
        self,
        *,
        host: str,
        port: int,
        user: str,
        password: str | None,
        ssl: bool = False,
        connect_retry: int | None = None,
        delay: int | None = None,
        gtid_start: str | None = None,
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """The statements that point a replica at its source from a GTID start: MariaDB's
        `SET GLOBAL gtid_slave_pos` + `CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos`, MySQL's
        `SET GLOBAL gtid_purged` (on a replica with no GTID history of its own) + `CHANGE
        REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION=1`. The password is an argument, never
        text of the statement."""
        if self.is_mariadb:
            prefix, word, auto = "CHANGE MASTER TO", "MASTER", "MASTER_USE_GTID = slave_pos"
        elif self.at_least(8, 0, 23):
            prefix, word, auto = "CHANGE REPLICATION SOURCE TO", "SOURCE", "SOURCE_AUTO_POSITION = 1"
        else:
            prefix, word, auto = "CHANGE MASTER TO", "MASTER", "MASTER_AUTO_POSITION = 1"
        options = [f"{word}_HOST = %s", f"{word}_PORT = %s", f"{word}_USER = %s", f"{word}_PASSWORD = %s"]
        args: list[Any] = [host, int(port), user, password or ""]
        if connect_retry is not None:
            options.append(f"{word}_CONNECT_RETRY = %s")
            args.append(int(connect_retry))
        if ssl:
            options.append(f"{word}_SSL = 1")
        if delay is not None:
            options.append(f"{word}_DELAY = %s")
            args.append(int(delay))
        if not self.is_mariadb and self.at_least(8, 0, 23):
            # MySQL 8.0.27+ refuses a source whose public key it cannot get over a plain connection
            # for caching_sha2_password accounts: ask the source for it.
            options.append("GET_SOURCE_PUBLIC_KEY = 1")
        options.append(auto)
        statements: list[tuple[str, tuple[Any, ...]]] = []
        if gtid_start is not None:
            statements.append((f"SET GLOBAL {self.gtid_start_variable} = %s", (gtid_start,)))
        statements.append((f"{prefix} " + ", ".join(options), tuple(args)))
        return statements

    def relay_log_source(self, *, host: str, relay_file: str, relay_pos: int) -> tuple[str, tuple[Any, ...]]:
        """Point the applier at relay logs placed by hand (binlogs replayed as relay logs, core/pitr/
        mysql_applier.py): a source `host` never contacted (no receiver thread is started), no
        password. What a copy of a replica keeps of its channel is turned off: auto-positioning
        (which refuses RELAY_LOG_FILE), GTID_ONLY (which needs it), a delay, a privilege-checks
        account. MySQL only: MariaDB's applier also needs MASTER_LOG_FILE/POS (core/pitr/applier.py)."""
        if self.is_mariadb:
            raise ValueError("MariaDB's relay log applier is set up by core/pitr/applier.py")
        prefix, word = (
            ("CHANGE REPLICATION SOURCE TO", "SOURCE")
            if self.at_least(8, 0, 23)
            else ("CHANGE MASTER TO", "MASTER")
        )
        options = [
            f"{word}_HOST = %s",
            f"{word}_PORT = 9",
            f"{word}_USER = 'none'",
            f"{word}_AUTO_POSITION = 0",
        ]
        options += [f"{word}_DELAY = 0", "RELAY_LOG_FILE = %s", "RELAY_LOG_POS = %s"]
        if self.at_least(8, 0, 18):
            options.append("PRIVILEGE_CHECKS_USER = NULL")
        if self.at_least(8, 0, 27):
            options.append("GTID_ONLY = 0")
        return f"{prefix} " + ", ".join(options), (host, relay_file, int(relay_pos))

    def on_channel(
        self, statement: str | tuple[str, tuple[Any, ...]], channel: str
    ) -> tuple[str, tuple[Any, ...]]:
        """A replication statement (text, or text and arguments) for MySQL's channel `channel`;
        MySQL names a named channel's relay logs `<relay_log>-<channel>.NNNNNN`."""
        if self.is_mariadb:
            raise ValueError("MariaDB names a replication connection in the statement, not FOR CHANNEL")
        sql, args = (statement, ()) if isinstance(statement, str) else statement
        return f"{sql} FOR CHANNEL %s", (*args, channel)

    def parallel_applier_options(self, workers: int) -> list[str]:
        """Server options of a replica that applies relay logs with `workers` parallel workers (0: the
        SQL thread alone), its replication threads stopped at startup and its relay logs kept."""
        if self.is_mariadb:  # as core/pitr/applier.py starts MariaDB's
            options = ["--skip-slave-start"]
            if workers > 0:
                options += [f"--slave-parallel-threads={workers}", "--slave-parallel-mode=optimistic"]
            return options
        name = "replica" if self.at_least(8, 0, 26) else "slave"
        options = [
            self.skip_replica_start_option,
            "--relay-log-purge=OFF",
            f"--{name}-parallel-workers={workers}",
        ]
        if workers > 0:  # commit in relay log order: no gaps if the replay stops early
            options.append(f"--{name}-preserve-commit-order=ON")
        return options

    @property
    def skip_replica_start_option(self) -> str:
        """The server option that keeps a restored copy's replica threads stopped at startup: MySQL
        8.0.26 renamed --skip-slave-start (and 8.4+ dropped the old name)."""
        if not self.is_mariadb and self.at_least(8, 0, 26):
            return "--skip-replica-start"
        return "--skip-slave-start"

    @property
    def replica_setup_privileges(self) -> tuple[str, ...]:
        """The global privileges an account needs to make a server a replica and watch it: RESET
        REPLICA ALL (RELOAD), CHANGE MASTER / CHANGE REPLICATION SOURCE and START REPLICA (MariaDB's
        REPLICATION SLAVE ADMIN, MySQL's dynamic REPLICATION_SLAVE_ADMIN), SHOW REPLICA STATUS
        (MariaDB 10.5.9+'s SLAVE MONITOR, MySQL's REPLICATION CLIENT)."""
        if self.is_mariadb:
            return ("RELOAD", "REPLICATION SLAVE ADMIN", "SLAVE MONITOR")
        return ("RELOAD", "REPLICATION_SLAVE_ADMIN", "REPLICATION CLIENT")

    @property
    def super_covers(self) -> tuple[str, ...]:
        """Which of replica_setup_privileges SUPER also grants: MariaDB before 11.0 the replica
        ones; MySQL (SUPER deprecated, still honoured in 9.x) the replica admin and status ones."""
        if self.is_mariadb:
            return () if self.at_least(11) else ("REPLICATION SLAVE ADMIN", "SLAVE MONITOR")
        return ("REPLICATION_SLAVE_ADMIN", "REPLICATION CLIENT")

    @property
    def replica_setup_statements(self) -> str:
        """The statements replica_setup_privileges are for, in this server's words (messages)."""
        change = "CHANGE MASTER TO" if self.is_mariadb else "CHANGE REPLICATION SOURCE TO"
        return f"{self.reset_replica_all}, {change}, {self.start_replica}, {self.replica_status}"

    @property
    def max_replication_password(self) -> int:
        """MySQL's replica keeps at most 32 characters of the source password (error 3056)."""
        return 1024 if self.is_mariadb else 32

    # -- GTIDs -------------------------------------------------------------------------------------
    @property
    def gtid_executed_variable(self) -> str:
        """Every GTID this server's data holds (what a backup records)."""
        return "@@global.gtid_executed" if not self.is_mariadb else "@@gtid_current_pos"

    @property
    def gtid_binlog_variable(self) -> str:
        """The GTIDs in this server's own binlogs."""
        return "@@global.gtid_executed" if not self.is_mariadb else "@@gtid_binlog_pos"

    @property
    def gtid_start_variable(self) -> str:
        """What a restored copy is told it already holds before it replicates."""
        return "gtid_purged" if not self.is_mariadb else "gtid_slave_pos"

    @property
    def gtid_applied_variable(self) -> str:
        """What a replica has applied."""
        return "@@global.gtid_executed" if not self.is_mariadb else "@@gtid_slave_pos"

    # -- promotion (core/pitr/promote.py) -----------------------------------------------------------
    @property
    def new_timeline_by(self) -> Literal["server_id", "server_uuid"]:
        """What a promoted server needs of its own so that no GTID of the old timeline is reused:
        MariaDB's GTIDs are domain-server_id-seq (a new server_id and a sequence jump), MySQL's are
        server_uuid:N (a new server_uuid, made from a removed auto.cnf)."""
        return "server_id" if self.is_mariadb else "server_uuid"

    @property
    def read_only_state(self) -> str:
        """(read_only, super_read_only) of the server: MariaDB has no super_read_only."""
        if self.is_mariadb:
            return "SELECT @@global.read_only, 0"
        return "SELECT @@global.read_only, @@global.super_read_only"

    @property
    def make_writable(self) -> tuple[str, ...]:
        """Open a read-only server to writes (super_read_only first: it implies read_only)."""
        if self.is_mariadb:
            return ("SET GLOBAL read_only = OFF",)
        return ("SET GLOBAL super_read_only = OFF", "SET GLOBAL read_only = OFF")

    def replica_start_hint(self, gtids: str) -> str:
        """How a copy holding `gtids` becomes a replica of a promoted server (a message line)."""
        if self.is_mariadb:
            return f"SET GLOBAL gtid_slave_pos='{gtids}'; CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos"
        return f"SET GLOBAL gtid_purged='{gtids}'; CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION=1"

    # -- replica status ------------------------------------------------------------------------------
    def status(self, row: Mapping[str, Any] | None) -> dict[str, Any]:
        """A SHOW REPLICA/SLAVE STATUS row (a dict by column name) under the product's own names
        (see _STATUS_COLUMNS); {} for no row (not a replica)."""
        if not row:
            return {}
        which = 0 if self._new_replica_words else 1
        return {key: row.get(names[which]) for key, names in _STATUS_COLUMNS.items()}

    # -- programs ----------------------------------------------------------------------------------
    @property
    def binlog_client(self) -> str:
        """The binlog reader of this family: the other family's refuses this server."""
        return "mariadb-binlog" if self.is_mariadb else "mysqlbinlog"

    @property
    def binlog_follow_id_option(self) -> str:
        """How a following (--stop-never) binlog client is given its replication server_id: MySQL
        8.0.26 renamed --stop-never-slave-server-id to --connection-server-id."""
        if not self.is_mariadb and self.at_least(8, 0, 26):
            return "--connection-server-id"
        return "--stop-never-slave-server-id"

    def binlog_client_problem(self, tool: str, version_output: str) -> str | None:
        """Why the binlog client whose `--version` said `version_output` cannot read this server's
        binlogs (None: it can, or it does not say whose it is). One line naming both versions and
        what to install; the caller adds where to configure it."""
        family, version = binlog_client_of(version_output)
        said = " ".join(version_output.split())[:120]
        if family is None or (family == self.family and (version is None or self.is_mariadb)):
            return None
        if family != self.family:
            whose = "MariaDB's" if family == "mariadb" else "MySQL's"
            want = f"{self.binlog_client} {self.version[0]}.{self.version[1]} or newer"
            return (
                f"the binlog client {tool} is {whose} ({said!r}) and the server is {self.name}, whose binlogs it "
                f"refuses: install {'MariaDB' if self.is_mariadb else 'MySQL'}'s own client ({want})"
            )
        assert version is not None
        if version[:2] < self.version[:2]:  # an older mysqlbinlog misreads newer events
            return (
                f"the binlog client {tool} is mysqlbinlog {'.'.join(map(str, version))}, older than the server "
                f"({self.name}): install mysqlbinlog {self.version[0]}.{self.version[1]} or newer"
            )
        return None

    def server_program_problem(self, program: str, version_output: str) -> str | None:
        """Why the server program whose `--version` said `version_output` cannot stand in for this
        server on a copy of its datadir (None: it can). The other family cannot read the files; an
        older series either refuses them (MySQL's data dictionary) or opens them as a downgrade
        MariaDB does not support, so a restore test or replay on it would prove nothing."""
        said = " ".join(version_output.split())[:120]
        family: Family = "mariadb" if "mariadb" in said.lower() else "mysql"
        found = re.search(r"\bVer (\d+)\.(\d+)", said)
        want = f"{'MariaDB' if self.is_mariadb else 'MySQL'} {self.version[0]}.{self.version[1]} or newer"
        if family != self.family:
            return (
                f"the server program {program} is {'MariaDB' if family == 'mariadb' else 'MySQL'}'s ({said!r}) and "
                f"the backup is of {self.name}: install the {self.server_program} of {want} on this host"
            )
        if found and (int(found.group(1)), int(found.group(2))) < self.version[:2]:
            return (
                f"the server program {program} ({said!r}) is older than the backup's server ({self.name}): "
                f"install the {self.server_program} of {want} on this host (first on PATH)"
            )
        return None

    @property
    def client(self) -> str:
        return "mariadb" if self.is_mariadb else "mysql"

    @property
    def server_program(self) -> str:
        return "mariadbd" if self.is_mariadb else "mysqld"

    @property
    def client_family(self) -> Family:
        """Whose client options the family's tools read (the TLS spelling differs)."""
        return self.family

    @property
    def dump_program(self) -> str:
        """The logical dump tool of this family (what a table that cannot move as a tablespace needs)."""
        return "mariadb-dump" if self.is_mariadb else "mysqldump"

    # -- InnoDB tablespaces (restore-table, core/pitr/table.py) ---------------------------------------
    @property
    def tablespace_files(self) -> str:
        """A query of (tablespace name, data file relative to the datadir) for the InnoDB
        tablespaces whose name is %s or matches the LIKE pattern %s: MariaDB's
        innodb_sys_tablespaces, MySQL 8.0+'s innodb_tablespaces joined to innodb_datafiles."""
        if self.is_mariadb:
            return (
                "SELECT name, filename FROM information_schema.innodb_sys_tablespaces "
                "WHERE name = %s OR name LIKE %s"
            )
        return (
            "SELECT t.name, d.path FROM information_schema.innodb_tablespaces t JOIN "
            "information_schema.innodb_datafiles d ON d.space = t.space WHERE t.name = %s OR t.name LIKE %s"
        )

    @property
    def tablespace_names_encoded(self) -> bool:
        """MariaDB names a tablespace `schema/table#P#part` in the file-name encoding (`p 1` ->
        `p@00201`); MySQL 8.0+ by the names themselves (`schema/table#p#part`, the part lower-cased)."""
        return self.is_mariadb

    @property
    def discards_partitioned(self) -> bool:
        """ALTER TABLE ... DISCARD / IMPORT TABLESPACE of a partitioned table (all its partitions'
        files at once): MySQL 5.7+; MariaDB 10.11 refuses it."""
        return not self.is_mariadb

    @property
    def skip_binlog_privilege(self) -> str:
        """What an account needs to SET SESSION sql_log_bin = 0."""
        return (
            "BINLOG ADMIN (or SUPER)"
            if self.is_mariadb
            else "SESSION_VARIABLES_ADMIN (or SYSTEM_VARIABLES_ADMIN)"
        )

    @property
    def backup_metadata_prefix(self) -> str:
        """mariadb-backup 11.1+ writes mariadb_backup_checkpoints / _binlog_info / _info."""
        return "mariadb_backup_" if self.is_mariadb and self.at_least(11, 1) else "xtrabackup_"


def binlog_client_of(version_output: str) -> tuple[Family | None, tuple[int, int, int] | None]:
    """Whose binlog client printed `version_output` (`--version`), and its version where it says:
    MySQL's says its server version (`mysqlbinlog  Ver 9.7.4-2 for Linux`), MariaDB's says MariaDB
    (11.x: `from 11.8.9-MariaDB, client 3.5`) or only its own 3.x number (10.x: `Ver 3.5 for
    debian-linux-gnu`). (None, None): it does not tell."""
    text = " ".join(str(version_output).split())
    if "mariadb" in text.lower():
        found = re.search(r"(\d+\.\d+\.\d+)-MariaDB", text)
        return "mariadb", parse_version(found.group(1)) if found else None
    found = re.search(r"\bVer (\d+)\.(\d+)(?:\.(\d+))?", text)
    if not found:
        return None, None
    version = (int(found.group(1)), int(found.group(2)), int(found.group(3) or 0))
    if version[0] < 5:  # MariaDB's mysqlbinlog numbers itself 3.x; MySQL's says its server version
        return "mariadb", None
    return "mysql", version


def dialect_of(conn: Any) -> Dialect:
    """The dialect of the server behind an open MySQLdb connection, from the version its handshake
    sent (no query: MariaDB 10.x sends `5.5.5-10.11.6-MariaDB`, which parse_version reads)."""
    return dialect_for(conn.get_server_info())


def dialect_for(version: str) -> Dialect:
    """The dialect of a server from its `SELECT @@version` (MariaDB's says MariaDB)."""
    family: Family = "mariadb" if "mariadb" in str(version).lower() else "mysql"
    return Dialect(family, parse_version(version), str(version))
