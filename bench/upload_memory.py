"""Upload memory: peak RSS and throughput of the S3 multipart writer before the part plan (main
before issue 19 item 2: `choose_part_size`, whole parts buffered and copied) and after it
(core/storage/partplan.py + s3.py: parts are the written buffers, bounded by PartLimits.memory).

    .venv/bin/python bench/upload_memory.py [--size-mb 1024] [--rounds 3] [--write-docs]

moto's S3 runs as a child process (its stored bytes are not counted). Each run is a fresh child
Python process that writes ``--size-mb`` MiB in 1 MiB chunks (fresh bytes objects, as the
pipeline hands them over) through one writer, commits, and reports its peak RSS (VmHWM) above
its RSS just before the first write, and the wall time of write + commit. Modes, in a rotating
order per round:

  old        main's writer, size unknown (64 MiB parts, 4 in flight)
  new        the plan's writer, size unknown (8 MiB parts, doubling every 1,000 parts)
  new-known  the plan's writer, size given (as backups give the datadir size)
  new-64     the plan's writer with 64 MiB parts (PartLimits(min_part=64 MiB)): old's part size

Medians over the rounds; throughput ratios against `old`. Also prints the plan table (pure
arithmetic) for 1 GiB .. 50 TB, known and unknown, next to main's part size.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.storage.base import MAX_PART_SIZE, MAX_PARTS, GiB, MiB, PutOptions  # noqa: E402
from xtrabackup_provider.core.storage.partplan import MAX_OBJECT_SIZE, PartLimits, summarize  # noqa: E402
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client  # noqa: E402

SECTION = "upload-memory"
MODES = ["old", "new", "new-known", "new-64"]


# -- the baseline: main's writer before the part plan ---------------------------------------------


def old_part_size(expected_size: int | None) -> int:
    """main's choose_part_size: 64 MiB when the size is unknown; 10,000 parts with 25 % slack."""
    if not expected_size:
        return 64 * MiB
    size = max(8 * MiB, math.ceil(math.ceil(expected_size * 1.25 / MAX_PARTS) / MiB) * MiB)
    if size > MAX_PART_SIZE:
        raise ValueError(f"an object of {expected_size} bytes cannot fit in 10,000 parts of at most 5 GiB")
    return size


class OldWriter:
    """main's _S3MultipartWriter: buffers a whole part, cuts it with a copy, 4 parts in flight."""

    def __init__(self, store: S3Store, key: str, options: PutOptions, inflight: int = 4) -> None:
        self.store, self.key, self.options = store, key, options
        self.part_size = old_part_size(options.expected_size)
        self.upload_id: str | None = None
        self.buffer = bytearray()
        self.parts: dict[int, str] = {}
        self.futures: list[Future[None]] = []
        self.slots = threading.Semaphore(inflight)
        self.pool = ThreadPoolExecutor(inflight)
        self.size = 0

    def write(self, data: bytes) -> None:
        self.buffer += data
        self.size += len(data)
        while len(self.buffer) >= self.part_size:
            part = bytes(self.buffer[: self.part_size])
            del self.buffer[: self.part_size]
            self._submit(part)

    def _submit(self, part: bytes) -> None:
        if self.upload_id is None:
            client = self.store.client
            self.upload_id = client.create_multipart_upload(Bucket=self.store.bucket, Key=self.key)[
                "UploadId"
            ]
        self.slots.acquire()
        number = len(self.futures) + 1
        self.futures.append(self.pool.submit(self._upload, number, part))

    def _upload(self, number: int, body: bytes) -> None:
        try:
            resp = self.store.client.upload_part(
                Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=body
            )
            self.parts[number] = resp["ETag"]
        finally:
            self.slots.release()

    def commit(self) -> int:
        if self.buffer or not self.futures:
            self._submit(bytes(self.buffer))
            self.buffer.clear()
        for fut in self.futures:
            fut.result()
        parts = [{"PartNumber": n, "ETag": self.parts[n]} for n in sorted(self.parts)]
        self.store.client.complete_multipart_upload(
            Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": parts}
        )
        self.pool.shutdown(wait=True)
        return self.size


# -- one run, in a child process -------------------------------------------------------------------


def _status(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field_name} in /proc/self/status")


def child(mode: str, endpoint: str, bucket: str, size: int) -> dict[str, Any]:
    limits = PartLimits(min_part=64 * MiB) if mode == "new-64" else PartLimits()
    store = S3Store(make_s3_client(endpoint, C.S3_REGION), bucket, part_limits=limits)
    key = f"bench/{mode}-{os.getpid()}"
    options = PutOptions(expected_size=size if mode == "new-known" else None)
    template = bytearray(os.urandom(MiB))  # bytes(bytearray) is a new object each time
    store.client.head_bucket(Bucket=bucket)  # connection and credentials set up before the baseline
    writer: Any = OldWriter(store, key, options) if mode == "old" else store.open_writer(key, options)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak counts from here on
    baseline = _status("VmRSS")
    started = time.monotonic()
    for _ in range(size // MiB):
        writer.write(bytes(template))  # a fresh object per chunk, as the pipeline's reads are
    writer.commit()
    seconds = time.monotonic() - started
    peak = _status("VmHWM")
    stored = store.head(key)
    store.delete([key])
    return {
        "mode": mode,
        "seconds": seconds,
        "above_baseline": peak - baseline,
        "held": getattr(writer, "peak_held", None),
        "stored": stored.size if stored else 0,
    }


@dataclass
class Mode:
    name: str
    runs: list[dict[str, Any]] = field(default_factory=list)

    def median(self, name: str) -> float | None:
        values = [r[name] for r in self.runs if r.get(name) is not None]
        return C.median(values) if values else None


def plan_table() -> str:
    rows = []
    for label, size in (("1 GiB", GiB), ("1 TB", 10**12), ("10 TB", 10**13), ("50 TB", 5 * 10**13)):
        for known in (True, False):
            try:
                part = old_part_size(size if known else None)
                fails = not known and size > part * MAX_PARTS
                stored_raw_over = known and size > MAX_OBJECT_SIZE
                old = f"{C.fmt_bytes(part)} parts, {C.fmt_bytes(5 * part)}-{C.fmt_bytes(6 * part)}"
                if fails:
                    old += f"; fails at part 10,001 ({C.fmt_bytes(part * MAX_PARTS)})"
                elif stored_raw_over:
                    old += "; one object over S3's 5 TiB if stored ~raw"
            except ValueError:
                old = "refused: cannot fit in 10,000 parts of at most 5 GiB"
            p = summarize(size, size if known else None)
            rows.append(
                [
                    label,
                    "known" if known else "unknown",
                    old,
                    p.segments,
                    f"{p.parts[0]}" + (f" .. {p.parts[-1]}" if p.segments > 1 else ""),
                    f"{C.fmt_bytes(p.smallest_part)} .. {C.fmt_bytes(p.largest_part)}",
                    C.fmt_bytes(p.peak_memory),
                    C.fmt_bytes(p.largest_segment),
                ]
            )
    return C.markdown_table(
        [
            "stream",
            "size",
            "main: parts, buffers (4 in flight + buffer + copy)",
            "segments",
            "parts per segment (first .. last)",
            "part size",
            "peak buffers",
            "largest object",
        ],
        rows,
    )


def report(modes: dict[str, Mode], size: int, facts: dict[str, str], loads: list[str], command: str) -> str:
    old = modes["old"].median("seconds")
    rows = []
    for m in modes.values():
        secs = m.median("seconds")
        rows.append(
            [
                m.name,
                len(m.runs),
                C.fmt_bytes(m.median("above_baseline")),
                C.fmt_bytes(m.median("held")) if m.median("held") is not None else "-",
                C.fmt_seconds(secs),
                f"{size / secs / MiB:.0f} MiB/s" if secs else "-",
                C.fmt_ratio(old, secs),
                C.fmt_ratio(
                    C.median(
                        [o["seconds"] / r["seconds"] for o, r in zip(modes["old"].runs, m.runs, strict=False)]
                    ),
                    1.0,
                ),
            ]
        )
    table = C.markdown_table(
        [
            "writer",
            "runs",
            "peak RSS above baseline (median)",
            "buffers held (writer's own count)",
            "write + commit",
            "throughput",
            "throughput vs old (medians)",
            "vs old, paired by round (median)",
        ],
        rows,
    )
    return f"""## Upload memory: the multipart plan (issue 19, item 2)

`{command}` — {C.fmt_bytes(size)} written through one writer to moto S3 (a child process) per run,
each run in a fresh Python process; {facts.get("cpu") or "2 cores"}; load average {loads[0]} before, {loads[-1]} after.

{table}

"old" is main's writer before the plan (size unknown: 64 MiB parts, 4 in flight, each part buffered
then copied by `bytes(buffer[:part])`); "new" follows core/storage/partplan.py (parts are the
pipeline's own buffers, sent through a seekable body; at most `PartLimits.memory`, 512 MiB by
default, per stream). Peak RSS includes boto3, threads and the allocator, not only the buffers.
Throughput here is moto's (an in-memory Python server on the same 2 cores), not S3's.

The plan (pure arithmetic, `core.storage.partplan.summarize`; sizes are of the stored stream, worst case
incompressible; memory bound 512 MiB, at least one part in flight; tests/unit/test_partplan.py asserts it):

{plan_table()}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size = args.size_mb * MiB
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=C.S3_REGION
    )
    if args.child:
        print(json.dumps(child(args.child, args.endpoint, args.bucket, size)))
        return 0
    command = f".venv/bin/python bench/upload_memory.py --size-mb {args.size_mb} --rounds {args.rounds}"
    modes = {name: Mode(name) for name in MODES}
    facts = C.system_facts()
    with C.moto_s3() as endpoint:
        bucket = "bench-upload-memory"
        make_s3_client(endpoint, C.S3_REGION).create_bucket(Bucket=bucket)
        loads = [C.load_average()]
        for r in range(args.rounds):
            for name in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
                argv_child = [sys.executable, __file__, "--size-mb", str(args.size_mb), "--child", name]
                proc = subprocess.run(
                    [*argv_child, "--endpoint", endpoint, "--bucket", bucket],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} run failed: {proc.stderr[-2000:]}")
                run = json.loads(proc.stdout.strip().splitlines()[-1])
                if run["stored"] != size:
                    raise RuntimeError(f"{name}: stored {run['stored']} bytes, wrote {size}")
                modes[name].runs.append(run)
                C.log(
                    f"round {r + 1} {name}: {run['seconds']:.1f}s, peak RSS +{run['above_baseline'] / MiB:.0f} MiB"
                    + (f", held {run['held'] / MiB:.0f} MiB" if run["held"] else "")
                )
        loads.append(C.load_average())
    text = report(modes, size, facts, loads, command)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
