"""The Backups view at fleet size: 500 hosts (10 clusters), each a chain of a full and two
incrementals, shipped binlogs and a restore report, in a local catalog written as the product
writes it (tests/fleet_factory.py).

Measured in one invocation, alternating: `check` over the fleet (check_fleet, what `check --json`
does: the baseline), the view's cold reading of every host (FleetCache, 16 threads), and the fleet
page's request once the reading is cached (the rows worst first + their JSON: what the api-server
does per request besides one auth-manager call per cluster).

    .venv/bin/python bench/ui_view.py [--hosts 500] [--clusters 10] [--repeats 3] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import load_average, log, markdown_table, median, update_doc_section, workdir  # noqa: E402
from fleet_factory import write_host  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.config.load import load_config  # noqa: E402
from xtrabackup_provider.core.report.check import check_fleet  # noqa: E402
from xtrabackup_provider.core.report.view import FleetCache, fleet_payload, host_readers  # noqa: E402
from xtrabackup_provider.core.storage.local import LocalStore  # noqa: E402


def make_fleet(root: Path, hosts: int, clusters: int, now: datetime) -> Path:
    store = LocalStore(root / "store")
    names: dict[str, list[dict[str, str]]] = {}
    for i in range(hosts):
        cluster, host = f"c{i % clusters:02d}", f"db{i:04d}"
        names.setdefault(cluster, []).append({"name": host})
        write_host(Catalog(store, "backups", cluster, host), now, chains=1, incrementals=2, binlogs=3)
    config = root / "fleet.yaml"
    config.write_text(yaml.safe_dump({
        "storage": {"local_path": str(root / "store")},
        "clusters": [{"name": c, "binlogs": {}, "hosts": h} for c, h in names.items()],
    }))  # fmt: skip
    return config


def timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    now = datetime.now(UTC)
    results: dict[str, list[float]] = {"check": [], "cold": [], "warm": []}
    with workdir("ui_view", keep=False) as root:
        log(f"writing {args.hosts} hosts' catalogs")
        config = load_config(make_fleet(root, args.hosts, args.clusters, now))
        clusters = [c.name for c in config.clusters]
        stores = {t.name: LocalStore(t.local_path or "") for t in config.targets()}
        size = 0
        for r in range(args.repeats):
            results["check"].append(timed(lambda: check_fleet(config, now=now))[0])
            cache = FleetCache(ttl=600, bound=600)
            readers = host_readers(config, stores, clusters)

            def page(cache: FleetCache = cache, readers: dict = readers) -> str:
                return json.dumps(fleet_payload(cache.views(readers, now), now))

            results["cold"].append(timed(page)[0])
            for _ in range(5):  # the page's requests while the reading is cached
                seconds, body = timed(page)
                results["warm"].append(seconds)
                size = len(body)
            log(f"round {r + 1}: check {results['check'][-1]:.2f} s, cold {results['cold'][-1]:.2f} s, "
                f"warm {results['warm'][-1]:.3f} s")  # fmt: skip
    base = median(results["check"]) or 1.0
    rows = [
        [what, f"{median(v):.3f}", f"{min(v):.3f} .. {max(v):.3f}", len(v), f"{(median(v) or 0) / base:.3f}"]
        for what, v in (("`check` over the fleet (baseline)", results["check"]),
                        ("view: fleet page request, nothing cached", results["cold"]),
                        ("view: fleet page request, cached", results["warm"]))
    ]  # fmt: skip
    body = (
        f"### Backups view at fleet size (issue 32)\n\n{args.hosts} hosts in {args.clusters} clusters, local "
        f"catalog; the fleet page's JSON is {size / 1024:.0f} KiB. Load average at the end: {load_average()}.\n\n"
        + markdown_table(["what", "median s", "range s", "runs", "ratio to check"], rows)
        + "\n\n`.venv/bin/python bench/ui_view.py --write-docs`\n"
    )
    print(body)
    if args.write_docs:
        update_doc_section("ui-view", body)


if __name__ == "__main__":
    main()
