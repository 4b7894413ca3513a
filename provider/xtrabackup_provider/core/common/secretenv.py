"""Secrets the CLI takes from its environment, held in memory and out of `os.environ`.

Every child the product starts gets the environment children.py builds, but a library may start
one of its own with ours: croniter's import runs `file -b` (platform.architecture()), and that
process's /proc/<pid>/environ would show the passphrase and the S3 keys while it lives. So the
CLI moves every secret out of its environment before it loads anything (`held()`), and the code
that needs one asks `get()`; boto3 gets the S3 keys as arguments (`aws_credentials()`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

AWS_KEYS = {
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
}
# A variable whose name says it is secret is held too, before the config that names it is read
# (the config check imports croniter); what the config names is held as soon as it is read. Not
# boto3's other AWS_* settings (AWS_WEB_IDENTITY_TOKEN_FILE, the container's token): boto3 reads
# those from os.environ itself. Not a *_FILE: a path, no secret.
SECRET_WORDS = ("PASSWORD", "PASSPHRASE", "SECRET", "TOKEN", "_PWD")

_held: dict[str, str] = {}
_active: list[bool] = []  # inside held(): elsewhere (an Airflow worker) hold() changes nothing


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    if name in AWS_KEYS:
        return True
    if upper.startswith("AWS_") or upper.endswith("_FILE"):
        return False
    return any(word in upper for word in SECRET_WORDS)


def hold(names: Iterable[str] = ()) -> None:
    """Move `names`, and every variable whose name says secret, from os.environ to memory."""
    if not _active:
        return
    for name in [*names, *(n for n in os.environ if _looks_secret(n))]:
        if name in os.environ:
            _held[name] = os.environ.pop(name)


def names_in(data: Any) -> Iterator[str]:
    """The variable names a config (as plain dicts and lists) gives in its `*_env` fields."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and key.endswith("_env") and isinstance(value, str):
                yield value
            else:
                yield from names_in(value)
    elif isinstance(data, list):
        for item in data:
            yield from names_in(item)


def get(name: str) -> str | None:
    """A secret's value: from the environment if it is still there, else from what was held."""
    return os.environ.get(name, _held.get(name))


def aws_credentials() -> dict[str, str]:
    """boto3 client arguments for the S3 keys held (none held: boto3 looks for them itself)."""
    return {arg: _held[name] for name, arg in AWS_KEYS.items() if name in _held}


@contextmanager
def held() -> Iterator[None]:
    """For one CLI run: secrets out of os.environ while it runs, back afterwards (the CLI also
    runs in-process, in the tests and in anything that calls main())."""
    before = dict(_held)
    _held.clear()
    _active.append(True)
    hold()
    try:
        yield
    finally:
        _active.pop()
        os.environ.update(_held)
        _held.clear()
        _held.update(before)
