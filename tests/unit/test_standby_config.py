"""The fleet config's per-host `standby_dir`: an absolute path on the worker of its `standby_queue`
(the host's, else the cluster's; no default: that worker reads the private key), one host per
directory there, none inside another's; a refusal names the field and the host."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError


def _config(*hosts: dict) -> dict:
    return {"storage": {"bucket": "b"}, "clusters": [{"name": "c", "hosts": list(hosts)}]}


def test_a_standby_dir_is_read_per_host():
    config = parse_config(
        _config({"name": "h1", "standby_dir": "/srv/standby/h1", "standby_queue": "recovery"}, {"name": "h2"})
    )
    assert config.find_host("c", "h1").standby_dir == "/srv/standby/h1"
    assert config.find_host("c", "h2").standby_dir is None


def test_a_relative_standby_dir_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"clusters.0.hosts.0.standby_dir.*absolute path"):
        parse_config(_config({"name": "h1", "standby_dir": "standby/h1", "standby_queue": "recovery"}))


def test_two_hosts_sharing_one_standby_dir_on_one_queue_are_refused_by_name():
    shared = {"standby_dir": "/srv/standby", "standby_queue": "spare"}
    with pytest.raises(
        ConfigError, match=r"host c/h2: standby_dir /srv/standby on queue 'spare' is also c/h1's"
    ):
        parse_config(_config({"name": "h1", **shared}, {"name": "h2", **shared}))
    # The same path on two workers (each host's own queue) is two directories.
    parse_config(
        _config(
            {"name": "h1", "standby_dir": "/srv/standby", "standby_queue": "h1"},
            {"name": "h2", "standby_dir": "/srv/standby", "standby_queue": "h2"},
        )
    )


@pytest.mark.parametrize(
    "other",
    ["/srv/standby//", "/srv//standby", "/srv/./standby", "/srv/x/../standby", "//srv/standby"],
)
def test_one_standby_dir_spelled_another_way_is_refused(other):
    """Two spellings of one directory are one directory: the check resolves them as the copies
    targets' check does (lexically: the config is checked where the directory may not exist)."""
    with pytest.raises(ConfigError, match=r"host c/h2: standby_dir .* is also c/h1's"):
        parse_config(
            _config(
                {"name": "h1", "standby_dir": "/srv/standby", "standby_queue": "spare"},
                {"name": "h2", "standby_dir": other, "standby_queue": "spare"},
            )
        )


def test_a_standby_dir_inside_another_hosts_is_refused():
    """A rebuild empties its directory: a standby nested in another's would be deleted by it."""
    with pytest.raises(ConfigError, match=r"host c/h2: standby_dir /srv/standby/h2 .* inside c/h1's"):
        parse_config(
            _config(
                {"name": "h1", "standby_dir": "/srv/standby", "standby_queue": "spare"},
                {"name": "h2", "standby_dir": "/srv/standby/h2", "standby_queue": "spare"},
            )
        )


def test_a_standby_without_a_standby_queue_is_refused_naming_the_choice():
    """No default: the worker that keeps the standby reads the private key, and the database host's
    worker must not unless the config says so."""
    with pytest.raises(
        ConfigError,
        match=r"clusters.0: .*hosts.0.standby_dir: host .h1. needs a standby_queue.*standby_queue: backup_h1",
    ):
        parse_config(_config({"name": "h1", "queue": "backup_h1", "standby_dir": "/srv/standby/h1"}))
    # Chosen: on the database host's own worker.
    config = parse_config(
        _config({"name": "h1", "queue": "backup_h1", "standby_dir": "/srv/sb", "standby_queue": "backup_h1"})
    )
    assert config.cluster("c").standby_queue_of(config.find_host("c", "h1")) == "backup_h1"


def test_the_clusters_standby_queue_is_its_hosts_unless_they_set_one():
    raw = _config(
        {"name": "h1", "standby_dir": "/srv/sb/h1"},
        {"name": "h2", "standby_dir": "/srv/sb/h2", "standby_queue": "recovery_b"},
        {"name": "h3"},
    )
    raw["clusters"][0]["standby_queue"] = "recovery"
    config = parse_config(raw)
    cluster = config.cluster("c")
    assert [cluster.standby_queue_of(h) for h in cluster.hosts] == ["recovery", "recovery_b", None]


@pytest.mark.parametrize(
    "host, cluster, error",
    [
        (
            {"name": "h1", "standby_queue": "recovery"},
            None,
            r"hosts.0.standby_queue: host 'h1' has no standby_dir",
        ),
        ({"name": "h1"}, "recovery", r"standby_queue: no host of cluster 'c' has a standby_dir"),
        (
            {"name": "h1", "standby_dir": "/srv/sb", "standby_queue": "two words"},
            None,
            r"hosts.0.standby_queue",
        ),
        ({"name": "h1", "standby_dir": "/srv/sb", "standby_queue": ""}, None, r"hosts.0.standby_queue"),
    ],
)
def test_a_standby_queue_that_does_nothing_or_names_no_queue_is_refused(host, cluster, error):
    raw = _config(host)
    if cluster:
        raw["clusters"][0]["standby_queue"] = cluster
    with pytest.raises(ConfigError, match=error):
        parse_config(raw)


def test_two_standbys_in_one_directory_of_the_clusters_standby_worker_are_refused():
    raw = _config({"name": "h1", "standby_dir": "/srv/sb"}, {"name": "h2", "standby_dir": "/srv//sb/"})
    raw["clusters"][0]["standby_queue"] = "recovery"
    with pytest.raises(
        ConfigError, match=r"host c/h2: standby_dir /srv//sb/ on queue 'recovery' is also c/h1's"
    ):
        parse_config(raw)
