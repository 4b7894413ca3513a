"""Making moto's Glacier restores take a while, so tests can watch a real wait.

What moto 5 does (found by running it, see tests/integration/test_glacier.py): RestoreObject on a
GLACIER / DEEP_ARCHIVE object is accepted (202, then 200 for a repeat), and by default the
restore is complete at once: the very next HEAD shows `ongoing-request="false", expiry-date=...`
and GET works. The progression is moto's state manager model "s3::keyrestore", which the server
lets us change over HTTP (POST /moto-api/state-manager/set-transition):
- "manual" with `times: N` moves the restore one step (requested -> in progress -> restored)
  every N reads of the key (each HEAD or GET counts), counting reads since the last step;
- its first state renders as complete, so a key must already have N reads behind it when the
  restore is requested for the first read afterwards to say in progress.
`slow_restores` therefore sets "manual" and reads each key N times first; `finish_restores`
switches to "immediate", so the next read of every pending restore says it is done.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

MODEL = "s3::keyrestore"


def _moto_api(endpoint_url: str, action: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(
        f"{endpoint_url}/moto-api/state-manager/{action}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 201), resp.status


def finish_restores(endpoint_url: str) -> None:
    """From now on every requested restore reads as done."""
    _moto_api(
        endpoint_url, "set-transition", {"model_name": MODEL, "transition": {"progression": "immediate"}}
    )


@contextlib.contextmanager
def slow_restores(endpoint_url: str, client: Any, bucket: str, keys: list[str], reads: int) -> Iterator[None]:
    """Restores of `keys` requested inside the block stay in progress for about `reads` reads."""
    _moto_api(
        endpoint_url,
        "set-transition",
        {"model_name": MODEL, "transition": {"progression": "manual", "times": reads}},
    )
    try:
        for key in keys:
            for _ in range(reads):
                client.head_object(Bucket=bucket, Key=key)
        yield
    finally:
        _moto_api(endpoint_url, "unset-transition", {"model_name": MODEL})


def restore_header(client: Any, bucket: str, key: str) -> str | None:
    return client.head_object(Bucket=bucket, Key=key).get("Restore")
