"""A fault proxy in front of one moto S3 endpoint, run as its own process:

    python tests/chaos/s3chaos.py --upstream http://127.0.0.1:PORT --port P --control FILE --log FILE

It forwards real HTTP (tests/faults/faultkit.py's S3Proxy) and, as the control file (JSON, re-read
every half second) says, adds latency, answers 500 InternalError or 503 SlowDown, resets the
connection before answering, truncates an answer (full Content-Length, half the body), or stops
listening altogether until `partition_until` (an epoch time): a partitioned endpoint refuses
connections for minutes. Every fault it injects is one JSON line in the log, so the run can count
them and the checker can tell a reported error from an injected one.

Control file: {"seed": 1, "latency_ms": [0, 300], "p_error": 0.02, "p_slowdown": 0.02,
"p_reset": 0.01, "p_truncate": 0.01, "partition_until": 0}. Missing keys: no such fault.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from faultkit import S3Proxy  # noqa: E402

# Reads only: a fault on a write is what the product must survive too, but a truncated PUT body
# would reach moto as a short object; the retries handle that as a 5xx, so writes get 5xx/resets.
TRUNCATABLE = ("GET ",)


class Chaos:
    def __init__(self, control: Path, log: Path) -> None:
        self.control, self.log = control, log
        self.conf: dict[str, Any] = {}
        self.rng = random.Random(0)
        self.lock = threading.Lock()
        self._mtime = 0.0

    def reload(self) -> None:
        try:
            mtime = self.control.stat().st_mtime
            if mtime == self._mtime:
                return
            conf = json.loads(self.control.read_text())
        except (OSError, ValueError):
            return
        with self.lock:
            self._mtime, self.conf = mtime, conf
            self.rng = random.Random(conf.get("seed", 0))

    def note(self, fault: str, op: str) -> None:
        with self.lock, self.log.open("a") as fh:
            fh.write(json.dumps({"t": time.time(), "fault": fault, "op": op}) + "\n")

    def rule(self, op: str, path: str) -> int | str | None:
        with self.lock:
            conf, roll = self.conf, self.rng.random()
            lo, hi = conf.get("latency_ms", [0, 0])
            delay = self.rng.uniform(lo, hi) / 1000
        if delay:
            time.sleep(delay)
        for name, verdict in (
            ("p_error", 500),
            ("p_slowdown", 503),
            ("p_reset", "reset"),
            ("p_truncate", "truncate"),
        ):
            p = float(conf.get(name, 0))
            if roll < p:
                if verdict == "truncate" and not op.startswith(TRUNCATABLE):
                    verdict = 500
                self.note(str(verdict), op)
                return verdict
            roll -= p
        return None

    def partitioned(self) -> bool:
        return float(self.conf.get("partition_until", 0)) > time.time()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--control", type=Path, required=True)
    ap.add_argument("--log", type=Path, required=True)
    args = ap.parse_args()
    chaos = Chaos(args.control, args.log)
    chaos.reload()
    proxy = S3Proxy(args.upstream, rule=chaos.rule)
    proxy.port = args.port
    proxy.start()
    print(f"listening on {proxy.endpoint_url}", flush=True)
    while True:
        time.sleep(0.5)
        chaos.reload()
        if chaos.partitioned() and proxy.running:
            proxy.stop()
            chaos.note("partition", "all")
        elif not chaos.partitioned() and not proxy.running:
            proxy.start()
            chaos.note("healed", "all")


if __name__ == "__main__":
    main()
