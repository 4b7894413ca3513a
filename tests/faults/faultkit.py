"""Tools for the fault suite: a real HTTP proxy in front of the S3 endpoint that can answer 500 or
stop listening, a /proc scanner that looks for secrets in every process while a run goes on,
a small tmpfs for "filesystem full", and catalog snapshots to prove kept backups were not touched.

No mocks: the proxy forwards real HTTP to moto, the scanner reads the real /proc.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client

REGION = "us-east-1"


def target(server: SandboxServer) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def s3_catalog(endpoint_url: str, bucket: str, host: str = "db1", client: Any = None) -> Catalog:
    """A catalog over the product's own S3 client (botocore standard retries) unless one is given."""
    store = S3Store(client or make_s3_client(endpoint_url, REGION), bucket)
    return Catalog(store, "backups", "c1", host)


def short_retry_client(endpoint_url: str) -> Any:
    """Two attempts instead of the product's eight: the same failure, found in seconds instead of
    minutes of backoff. What is tested is what the product does once the client gives up."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=2, read_timeout=20)
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=REGION, config=config)


def wait_next_second(after: datetime) -> None:
    """Backup ids have one-second resolution: start the next backup of a host in a later second."""
    while datetime.now(UTC).replace(microsecond=0) <= after.astimezone(UTC).replace(microsecond=0):
        time.sleep(0.05)


def snapshot(client: Any, bucket: str, prefix: str = "") -> dict[str, tuple[int, str]]:
    """{key: (size, etag)} of every object under prefix: equal snapshots mean nothing was touched."""
    out: dict[str, tuple[int, str]] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = (obj["Size"], obj["ETag"])
    return out


def copy_bucket(s3_server: Any, source: str) -> str:
    """A new bucket holding a copy of every object of `source` (tests damage the copy)."""
    import uuid

    dest = s3_server.make_bucket(f"xbp-copy-{uuid.uuid4().hex[:12]}")
    client = s3_server.client()
    for key in snapshot(client, source):
        client.copy_object(CopySource={"Bucket": source, "Key": key}, Bucket=dest, Key=key)
    return dest


def open_uploads(client: Any, bucket: str, prefix: str = "") -> list[str]:
    resp = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    return [u["Key"] for u in resp.get("Uploads", [])]


# -- a real HTTP proxy in front of the S3 endpoint ---------------------------------------------------


def s3_operation(method: str, path: str) -> str:
    """The S3 operation a request is, from its method and query (enough for the faults we inject)."""
    query = parse_qs(urlsplit(path).query, keep_blank_values=True)
    if method == "POST" and "uploads" in query:
        return "CreateMultipartUpload"
    if method == "PUT" and "partNumber" in query:
        return "UploadPart"
    if method == "POST" and "uploadId" in query:
        return "CompleteMultipartUpload"
    if method == "DELETE" and "uploadId" in query:
        return "AbortMultipartUpload"
    if method == "PUT" and urlsplit(path).path.count("/") >= 2:
        return "PutObject"
    return f"{method} {urlsplit(path).path}"


_S3_500 = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)


_S3_503 = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_S3_ERRORS = {500: _S3_500, 503: _S3_503}


@dataclass
class ProxyLog:
    operation: str
    path: str
    status: int


class S3Proxy:
    """Forwards real HTTP to `upstream`. `rule(operation, path)` may answer instead: an int status
    (500 InternalError, 503 SlowDown), "reset" (the connection is reset before any answer),
    "truncate" (the real answer's headers, half its body, then the connection closes) or "stop"
    (the proxy stops listening and drops every connection, like a dead endpoint), "stall" (the
    real answer's headers and half its body, the rest once `released` is set or the proxy stops:
    a download that hangs mid-object); it may also just wait before answering None (a slow
    endpoint). `drop_headers` are removed
    from every request (an S3-compatible store that ignores them, e.g. If-None-Match / If-Match;
    boto3 signs them, but moto does not check signatures)."""

    def __init__(
        self,
        upstream: str,
        rule: Callable[[str, str], int | str | None] | None = None,
        drop_headers: Collection[str] = (),
    ) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rule = rule or (lambda op, path: None)
        self.drop = {h.lower() for h in drop_headers} | {"transfer-encoding", "connection"}
        self.log: list[ProxyLog] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.on_stop: Callable[[], None] | None = None
        self.released = threading.Event()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, operation: str, status: int | None = None) -> int:
        with self._lock:
            return sum(1 for e in self.log if e.operation == operation and status in (None, e.status))

    def start(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._conns.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._conns.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                body = self._body()
                op = s3_operation(self.command, self.path)
                verdict = proxy.rule(op, self.path)
                if verdict == "stop":
                    proxy._record(op, self.path, 0)
                    threading.Thread(target=proxy.stop, daemon=True).start()
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if verdict == "reset":  # the connection dies before any answer
                    proxy._record(op, self.path, 0)
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                        self.connection.close()
                    return
                if isinstance(verdict, int):
                    proxy._record(op, self.path, verdict)
                    self._reply(
                        verdict, {"Content-Type": "application/xml"}, _S3_ERRORS.get(verdict, _S3_500)
                    )
                    return
                status, headers, payload = proxy._forward(self.command, self.path, self.headers, body)
                proxy._record(op, self.path, status)
                if verdict == "stall" and len(payload) > 1:
                    half = len(payload) // 2
                    headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
                    headers["Content-Length"] = str(len(payload))
                    self._reply(status, headers, payload[:half])
                    with contextlib.suppress(OSError):
                        self.wfile.flush()
                        proxy.released.wait(120)
                        self.wfile.write(payload[half:])
                    return
                if verdict == "truncate" and len(payload) > 1:
                    # The full Content-Length, half the body, then the connection closes.
                    self.close_connection = True
                    headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
                    headers["Content-Length"] = str(len(payload))
                    self._reply(status, headers, payload[: len(payload) // 2])
                    return
                self._reply(status, headers, payload)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reply(self, status: int, headers: dict[str, str], payload: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if not any(name.lower() == "content-length" for name in headers):
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, name="s3proxy", daemon=True).start()

    def stop(self) -> None:
        """Stop listening and cut every open connection: clients see resets and refused connects."""
        self.released.set()
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self.on_stop:
            self.on_stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    def _record(self, op: str, path: str, status: int) -> None:
        with self._lock:
            self.log.append(ProxyLog(op, path, status))

    def _forward(
        self, method: str, path: str, headers: Any, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            out = {k: v for k, v in headers.items() if k.lower() not in self.drop}
            out["Content-Length"] = str(len(body))
            conn.request(method, path, body=body, headers=out)
            resp = conn.getresponse()
            payload = resp.read()
            # A HEAD answer keeps the object's length; everything else is re-framed by us.
            skip = ("transfer-encoding", "connection") + (() if method == "HEAD" else ("content-length",))
            return resp.status, {k: v for k, v in resp.getheaders() if k.lower() not in skip}, payload
        finally:
            conn.close()


# -- secrets in /proc ---------------------------------------------------------------------------------


@dataclass
class Sighting:
    pid: int
    where: str  # "cmdline" | "environ"
    argv: list[str]
    secret: str  # the label of the secret found, never the secret itself


@dataclass
class ProcScanner:
    """Samples /proc/*/cmdline of every process (and the environment of ours) every few
    milliseconds while a run goes on, looking for the given secrets. Ours are our descendants and
    the gpg-agents of their GPG homes: gpg starts the agent as a daemon (its parent is init), and
    it outlives the gpg that started it.

    `seen` holds the argv of each of our descendants; `watch(pid, argv)` is called for each of
    them on every sample, to inspect it while it lives."""

    secrets: dict[str, str]  # label -> secret value
    watch: Callable[[int, list[str]], None] | None = None
    environ: bool = True  # also scan the environment of our descendants
    # Processes whose environment may hold the secrets (the CLI itself, given them on purpose).
    environ_skip: Callable[[list[str]], bool] | None = None
    interval: float = 0.003
    sightings: list[Sighting] = field(default_factory=list)
    seen: dict[int, list[str]] = field(default_factory=dict)
    samples: int = 0
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="procscan", daemon=True)
        self._needles = {label: value.encode() for label, value in self.secrets.items() if value}
        self._mine: dict[int, bool] = {}  # pid -> is it one of our descendants

    def __enter__(self) -> ProcScanner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            try:
                self._sample(me)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
            self.samples += 1
            time.sleep(self.interval)

    def _sample(self, me: int) -> None:
        # Our descendants on every sample, every other process now and then: a full pass over
        # /proc each few milliseconds would take a core from the run it watches.
        everyone = self.samples % 20 == 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            mine = self._mine.get(pid)
            if mine is None:
                mine = self._mine[pid] = pid != me and self.descends_from(pid, me)
            elif not (mine or everyone):
                continue
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            argv = raw.decode(errors="replace").split("\0")
            if not mine and self._agent_of_ours(argv, me):
                mine = self._mine[pid] = True
            self._check(pid, "cmdline", raw, argv)
            if not mine or not raw:
                continue
            if self.environ and not (self.environ_skip and self.environ_skip(argv)):
                with contextlib.suppress(OSError):
                    self._check(pid, "environ", Path(f"/proc/{pid}/environ").read_bytes(), argv)
            self.seen[pid] = argv  # the newest: a forked child shows our argv until it execs
            if self.watch:
                self.watch(pid, argv)

    def _check(self, pid: int, where: str, data: bytes, argv: list[str]) -> None:
        for label, needle in self._needles.items():
            if needle in data:
                self.sightings.append(Sighting(pid, where, argv[:3], label))

    def _agent_of_ours(self, argv: list[str], me: int) -> bool:
        """A gpg-agent (or other daemon) started for the GPG home of one of our processes."""
        home = next((b for a, b in zip(argv, argv[1:], strict=False) if a == "--homedir"), "")
        owner = home.rsplit("/", 1)[-1].split("-")
        if len(owner) < 3 or owner[:2] != ["xbp", "gpg"] or not owner[2].isdigit():
            return False
        pid = int(owner[2])
        return pid == me or bool(self._mine.get(pid)) or self.descends_from(pid, me)

    @staticmethod
    def descends_from(pid: int, ancestor: int) -> bool:
        for _ in range(16):
            try:
                stat_line = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return False
            pid = int(stat_line.rsplit(")", 1)[1].split()[1])
            if pid == ancestor:
                return True
            if pid <= 1:
                return False
        return False

    def processes(self, predicate: Callable[[list[str]], bool]) -> list[list[str]]:
        return [argv for argv in self.seen.values() if predicate(argv)]


def private_key_fragments(armored: str) -> dict[str, str]:
    """Distinctive lines of an armored private key's body: finding any of them means a leak."""
    body = [line for line in armored.splitlines() if len(line) >= 40 and ":" not in line]
    picks = body[1 : len(body) - 1 : max(1, len(body) // 4)][:4]
    return {f"private key line {n}": line for n, line in enumerate(picks, start=1)}


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def listening_tcp_inodes() -> dict[int, str]:
    """{socket inode: "addr:port"} of every TCP socket in LISTEN state (IPv4 and IPv6)."""
    out: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    out[int(fields[9])] = fields[1]
    return out


def socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(int(link[8:-1]))
    return inodes


def listening_addresses(pid: int) -> list[str]:
    """The TCP addresses ("0100007F:0CEA" = 127.0.0.1:3306) process `pid` listens on."""
    listening = listening_tcp_inodes()
    return sorted(listening[i] for i in socket_inodes(pid) if i in listening)


LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000"}


def is_loopback(address: str) -> bool:
    return address.split(":")[0] in LOOPBACK_HEX


# -- a small filesystem that fills up ------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (we run as root), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0
