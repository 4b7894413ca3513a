"""Counting the connections a verb opens to a server, by the server itself: its Connections status
before and after, on one connection of the test's own, and the general log (to a table) to tell a
tool's connections (mariabackup, the binlog client, pt-table-checksum) from the verb's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from xtrabackup_provider.core.db.sandbox import SandboxServer

# What a tool the verb runs says first on a connection of its own (the general log's words).
TOOLS = {
    "mariabackup": "SET SESSION wait_timeout=2147483",  # it opens several: main, stages, per copy thread
    "the binlog client": "Binlog Dump",  # mariadb-binlog --read-from-remote-server: one per binlog
    "pt-table-checksum": "SET SESSION innodb_lock_wait_timeout=1",
}


@dataclass
class Opened:
    count: int = 0  # every connection the server accepted (its own counter)
    tools: dict[str, int] = field(default_factory=dict)  # of which a tool's, by the general log
    accounts: dict[str, int] = field(default_factory=dict)  # the connections not a tool's, by account

    @property
    def ours(self) -> int:
        return self.count - sum(self.tools.values())

    def __str__(self) -> str:
        accounts = ", ".join(f"{n} as {account}" for account, n in sorted(self.accounts.items()))
        tools = "".join(f"; {n} by {tool}" for tool, n in self.tools.items() if n)
        return f"{self.count} connection(s) ({self.ours} not a tool's: {accounts or 'none'}{tools})"


@contextlib.contextmanager
def connections(server: SandboxServer) -> Iterator[Opened]:
    """The connections the server accepted while the block ran (not the counting one), and which
    of them a tool opened (the general log, to a table, says what each connection did)."""
    conn = server.connect()
    opened = Opened()
    try:
        cur = conn.cursor()
        # TRUNCATE is binlogged: on the session's shared replica it was a transaction of the
        # replica's own, and the source's next one broke replication (gtid strict mode).
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("SET GLOBAL log_output = 'TABLE'")
        cur.execute("TRUNCATE TABLE mysql.general_log")
        cur.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
        before = int(cur.fetchone()[1])
        cur.execute("SET GLOBAL general_log = 1")
        yield opened
        cur.execute("SET GLOBAL general_log = 0")
        cur.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
        opened.count = int(cur.fetchone()[1]) - before
        cur.execute("SELECT thread_id, command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log")
        said: dict[int, list[str]] = {}
        for thread, command, argument in cur.fetchall():
            said.setdefault(int(thread), []).append(f"{command} {argument}")
        new = {t: lines for t, lines in said.items() if lines[0].startswith("Connect")}
        for tool, words in TOOLS.items():
            opened.tools[tool] = sum(1 for lines in new.values() if any(words in line for line in lines))
        for lines in new.values():
            if not any(words in line for words in TOOLS.values() for line in lines):
                account = lines[0].split()[1].split("@")[0]
                opened.accounts[account] = opened.accounts.get(account, 0) + 1
        for t, lines in sorted(new.items()):  # what each connection did, when a count is off
            print(t, " | ".join(line[:80] for line in lines[:6]))
    finally:
        conn.close()
