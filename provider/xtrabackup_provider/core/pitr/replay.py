"""The replay step of point-in-time recovery: binlog events into a sandbox on the restored datadir.

One `mariadb-binlog` process reads the local binlog copies and pipes SQL into the sandbox's
`mariadb` client. Why the sandbox turns its grant tables back on: see core/pitr/recover.py.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..common import children
from ..common.tempdirs import private_dir
from ..db.sandbox import SandboxServer, grant_tables_on, stop_orphans
from ..db.server import MySQLTarget, defaults_file
from ..db.session import Session
from ..pipeline.process import PipelineError, Proc

REPLAY_SERVER_ID = 4_100_000_000
_MAX_PACKET = "--max-allowed-packet=1G"  # a row event of a big transaction is one statement


class ReplayError(RuntimeError):
    """The binlog events could not be applied; the message carries the client's error."""


def replay(
    datadir: Path,
    reader_args: list[str],
    binlog_binary: str,
    client_binary: str,
    *,
    gtid_slave_pos: str | None = None,
    extra_args: list[str] | None = None,
) -> None:
    """Start a socket-only sandbox on `datadir` and pipe `binlog_binary reader_args` into it;
    then set its gtid_slave_pos to the GTID reached, when given (the pipe itself leaves none)."""
    with replay_sandbox(datadir, [_MAX_PACKET, *(extra_args or [])]) as server:
        db, account = replay_session(server)
        with db:
            with defaults_file(account) as creds:
                # Option files first: the tools ignore them anywhere else.
                client = client_argv(client_binary, creds)
                check_client_reaches(client, server)
                run_replay(
                    reader_argv(binlog_binary, reader_args),
                    [*client, "--binary-mode", "--batch", _MAX_PACKET],
                )
            if gtid_slave_pos:
                db.query("SET GLOBAL gtid_slave_pos = %s", (gtid_slave_pos,))
            drop_account(db, account)


@contextmanager
def replay_sandbox(datadir: Path, extra_args: list[str]) -> Iterator[SandboxServer]:
    """A started socket-only sandbox on `datadir` without a binlog of its own (the datadir gets no
    stray binlog files), in a private directory; stopped and removed afterwards."""
    basedir = private_dir("replay", "/tmp", on_sweep=stop_orphans)  # 0700; short socket path
    server = SandboxServer.on_datadir(
        datadir, basedir, server_id=REPLAY_SERVER_ID, log_bin=False, extra_args=extra_args
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(basedir, ignore_errors=True)


def reader_argv(binlog_binary: str, reader_args: list[str]) -> list[str]:
    """mariadb-binlog over local copies: no option file at all."""
    return [binlog_binary, "--no-defaults", *reader_args]


def client_argv(client_binary: str, creds: str) -> list[str]:
    """The client that applies the events: our 0600 defaults file alone (the sandbox's socket)."""
    return [client_binary, f"--defaults-file={creds}"]


def leave_gtid_slave_pos(datadir: Path, gtid: str, extra_args: list[str] | None = None) -> None:
    """Set the stopped datadir's gtid_slave_pos to `gtid` (a sandbox on it, socket only, no binlog,
    replication not started): what a replay leaves, for a restore that had nothing to replay."""
    with replay_sandbox(datadir, ["--skip-slave-start", *(extra_args or [])]) as server:
        conn = server.connect()  # --skip-grant-tables: the one privileged session
        try:
            conn.cursor().execute("SET GLOBAL gtid_slave_pos = %s", (gtid,))
        finally:
            conn.close()


def replay_session(server: SandboxServer, prefix: str = "xbp_pitr") -> tuple[Session, MySQLTarget]:
    """The one session a replay talks to its --skip-grant-tables `server` through, and the
    throwaway all-privileges account (random password, socket only) its tools log in as: the
    session turns the grant tables on (a replayed GRANT / CREATE USER needs them) and creates the
    account on the connection the server let in without one, which keeps every privilege; a
    connection the server dropped is opened anew as the account (core/db/session.py)."""
    db = Session(MySQLTarget(host=None, socket=str(server.socket), user="root"))
    try:
        account = grant_tables_on(db.query, server, prefix)
    except BaseException:
        db.close()
        raise
    db.target = account  # root's grants are the copy's own now: a new connection logs in as the account
    return db, account


def drop_account(db: Session, account: MySQLTarget) -> None:
    """DROP USER the replay's throwaway account (the session may be logged in as it)."""
    db.query("DROP USER %s@'localhost'", (account.user,))


def run_replay(reader_argv: list[str], client_argv: list[str]) -> None:
    """reader | client, both exit statuses checked; the client's error is the one that explains."""
    # --stop-datetime is read in the tool's local time zone.
    reader = Proc("mariadb-binlog", reader_argv, stdin=subprocess.DEVNULL, extra_env={"TZ": "UTC"})
    client: Proc | None = None
    try:
        client = Proc(
            "mariadb client (replay)", client_argv, stdin=reader.popen.stdout, stdout=subprocess.DEVNULL
        )
        assert reader.popen.stdout is not None
        reader.popen.stdout.close()  # the client holds the pipe now: the reader sees it close
        try:
            client.check()
        except PipelineError as exc:
            raise ReplayError(f"replaying the binlogs failed: {exc}") from exc
        reader.check()
    finally:
        reader.close()
        if client is not None:
            client.close()


def check_client_reaches(client: list[str], server: SandboxServer) -> None:
    """Before a statement is sent: the client, with exactly the options the replay gives it, is
    connected to the restore sandbox (its server_id and socket) and to nothing else."""
    probe = [*client, "--batch", "--skip-column-names", "-e", "SELECT @@server_id, @@socket"]
    proc = children.run(probe, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise ReplayError(
            f"the replay client cannot reach the restore sandbox at {server.socket}: "
            f"{children.summarize_stderr(proc.stderr) or f'exit {proc.returncode}'}"
        )
    reached = proc.stdout.strip().split("\t")
    wanted = [str(server.server_id), str(server.socket)]
    if reached != wanted:
        raise ReplayError(
            f"the replay client reached server_id {reached[0]} at {reached[-1]}, not the restore sandbox "
            f"(server_id {wanted[0]} at {wanted[1]}); nothing was replayed"
        )
