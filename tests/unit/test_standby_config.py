"""The fleet config's per-host `standby_dir`: an absolute path, one host per directory (and queue);
a refusal names the field and the host."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError


def _config(*hosts: dict) -> dict:
    return {"storage": {"bucket": "b"}, "clusters": [{"name": "c", "hosts": list(hosts)}]}


def test_a_standby_dir_is_read_per_host():
    config = parse_config(_config({"name": "h1", "standby_dir": "/srv/standby/h1"}, {"name": "h2"}))
    assert config.find_host("c", "h1").standby_dir == "/srv/standby/h1"
    assert config.find_host("c", "h2").standby_dir is None


def test_a_relative_standby_dir_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"clusters.0.hosts.0.standby_dir.*absolute path"):
        parse_config(_config({"name": "h1", "standby_dir": "standby/h1"}))


def test_two_hosts_sharing_one_standby_dir_on_one_queue_are_refused_by_name():
    shared = {"standby_dir": "/srv/standby", "queue": "spare"}
    with pytest.raises(
        ConfigError, match=r"host c/h2: standby_dir /srv/standby on queue 'spare' is also c/h1's"
    ):
        parse_config(_config({"name": "h1", **shared}, {"name": "h2", **shared}))
    # The same path on two workers (each host's own queue) is two directories.
    parse_config(
        _config(
            {"name": "h1", "standby_dir": "/srv/standby", "queue": "h1"},
            {"name": "h2", "standby_dir": "/srv/standby", "queue": "h2"},
        )
    )
