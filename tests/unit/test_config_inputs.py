"""Configs that alias or mean nothing are refused by the config check, with the field named
(issue 33 item 4); and LocalStore says which key it cannot hold instead of raising OSError."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError, check_schedule
from xtrabackup_provider.core.storage.base import StorageError
from xtrabackup_provider.core.storage.local import LocalStore

CLUSTERS = [{"name": "c1", "hosts": [{"name": "db1"}]}]


def _config(**over):
    return {"storage": {"local_path": "/srv/backups", "prefix": "backups"}, "clusters": CLUSTERS, **over}


def _refused(data, field: str) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "fleet.yaml")
    message = str(exc.value)
    assert message.startswith("fleet.yaml: ") and field in message and "\n" not in message, message
    return message


# -- copies that land on the primary --------------------------------------------------------------------

LOCAL_ALIASES = {
    "a trailing /": {"local_path": "/srv/backups/", "prefix": "backups"},
    "a //": {"local_path": "//srv//backups", "prefix": "backups"},
    "a ..": {"local_path": "/srv/other/../backups", "prefix": "backups"},
    "the prefix moved into the path": {"local_path": "/srv/backups/backups", "prefix": ""},
    "inside the primary's place": {"local_path": "/srv/backups", "prefix": "backups/copy"},
}


@pytest.mark.parametrize("copy", LOCAL_ALIASES.values(), ids=LOCAL_ALIASES.keys())
def test_a_copy_spelled_to_land_on_the_primary_directory_is_refused(copy):
    _refused(_config(copies=[{"name": "offsite", **copy}]), "copies[0]")


S3_ALIASES = {
    "the same bucket and prefix": {"bucket": "b", "prefix": "backups/"},
    "the AWS endpoint spelled out": {
        "bucket": "b",
        "prefix": "backups",
        "endpoint_url": "https://s3.amazonaws.com",
    },
    "inside the primary's prefix": {"bucket": "b", "prefix": "backups/offsite"},
}


@pytest.mark.parametrize("copy", S3_ALIASES.values(), ids=S3_ALIASES.keys())
def test_a_copy_in_the_primary_bucket_and_prefix_is_refused(copy):
    data = _config(storage={"bucket": "b", "prefix": "backups"}, copies=[{"name": "offsite", **copy}])
    _refused(data, "copies[0]")


def test_copies_elsewhere_are_fine():
    parse_config(_config(copies=[{"name": "o", "local_path": "/srv/backups2", "prefix": "backups"}]))
    parse_config(_config(copies=[{"name": "o", "local_path": "/srv/backups", "prefix": "backups2"}]))
    s3 = {"bucket": "b", "prefix": "backups"}
    parse_config(_config(storage=s3, copies=[{"name": "o", "bucket": "b", "prefix": "copies"}]))
    parse_config(_config(storage=s3, copies=[{"name": "o", "bucket": "b2", "prefix": "backups"}]))
    minio = {**s3, "name": "o", "endpoint_url": "http://minio:9000"}
    parse_config(_config(storage=s3, copies=[minio]))  # another service's bucket b
    with pytest.raises(ConfigError, match="copies\\[1\\]"):
        parse_config(
            _config(storage=s3, copies=[minio, {**minio, "name": "p", "endpoint_url": "http://MINIO:9000/"}])
        )


# -- numbers that mean nothing, schedules Airflow refuses --------------------------------------------------


@pytest.mark.parametrize("rate", [1e-300, 0.0001, float("inf"), float("nan")])
def test_an_upload_cap_of_nothing_or_infinity_is_refused(rate):
    """1e-300 MiB/s rounds to a cap of 0 bytes/s, which means no cap; .inf was an OverflowError."""
    _refused(_config(policy={"impact": {"max_upload_mib_per_second": rate}}), "max_upload_mib_per_second")


@pytest.mark.parametrize("hours", [float("inf"), float("nan"), 1e300])
def test_an_rpo_of_infinity_is_refused(hours):
    """.inf was `error: cannot convert float NaN to integer` from `check`."""
    clusters = [{**CLUSTERS[0], "check": {"rpo_hours": hours}}]
    _refused(_config(clusters=clusters), "clusters.0.check.rpo_hours")


@pytest.mark.parametrize("schedule", ["every hour", "61 * * * *", "@sometimes", "* * *", ""])
@pytest.mark.parametrize(
    ("place", "field"),
    [
        (lambda s: {"schedule": s}, "clusters.0.schedule"),
        (lambda s: {"restore_test_schedule": s}, "clusters.0.restore_test_schedule"),
        (lambda s: {"check": {"schedule": s}}, "clusters.0.check.schedule"),
        (lambda s: {"binlogs": {"schedule": s}}, "clusters.0.binlogs.schedule"),
    ],
)
def test_a_schedule_airflow_refuses_is_refused_by_the_config_check(schedule, place, field):
    _refused(_config(clusters=[{**CLUSTERS[0], **place(schedule)}]), field)


def test_a_prefix_segment_longer_than_a_file_name_is_refused():
    """Every write under it failed (File name too long)."""
    _refused(
        _config(storage={"local_path": "/srv/backups", "prefix": "backups/" + "x" * 256}), "storage.prefix"
    )
    parse_config(_config(storage={"local_path": "/srv/backups", "prefix": "backups/" + "x" * 255}))


# -- LocalStore ------------------------------------------------------------------------------------------


def test_a_key_the_directory_cannot_hold_is_a_storage_error_naming_it(tmp_path):
    """Each raised a bare OSError (IsADirectoryError, NotADirectoryError, File name too long)."""
    store = LocalStore(tmp_path)
    store.put_bytes("a/b", b"1")
    long_key = "p/" + "x" * 256
    attempts = [
        ("a", lambda: store.put_bytes("a", b"2")),
        ("a/b/c", lambda: store.put_bytes("a/b/c", b"3")),
        ("a/b/c", lambda: store.get_bytes("a/b/c")),
        ("a/b/c", lambda: list(store.read_chunks("a/b/c"))),
        ("a/b/c", lambda: store.put_new("a/b/c", b"4")),
        (long_key, lambda: store.put_bytes(long_key, b"5")),
        (long_key, lambda: store.get_bytes(long_key)),
        (long_key, lambda: store.head(long_key)),
    ]
    for n, (key, attempt) in enumerate(attempts):
        with pytest.raises(StorageError) as exc:
            attempt()
            pytest.fail(f"attempt {n} on {key[:20]!r} did not raise")
        assert repr(key)[:40] in str(exc.value) or key[:40] in str(exc.value), exc.value
    assert store.get_bytes("a/b") == b"1"  # nothing else changed
    assert [o.key for o in store.list("")] == ["a/b"]
    assert store.head("a/b/c") is None
    assert store.delete(["a/b/c", "a"]).keys == 0  # no such objects (it raised NotADirectoryError)


# -- schedules: the config check agrees with Airflow's own parser ----------------------------------------

FIELD = st.one_of(
    st.sampled_from(
        ["*", "?", "L", "H", "MON", "mon-fri", "JAN", "1W", "5#2", "0-59/15", "*/0", "-1", "99", "a"]
    ),
    st.integers(0, 70).map(str),
    st.tuples(st.integers(0, 70), st.integers(0, 70)).map(lambda r: f"{r[0]}-{r[1]}"),
    st.integers(0, 30).map(lambda n: f"*/{n}"),
    st.lists(st.integers(0, 40), min_size=2, max_size=3).map(lambda ns: ",".join(map(str, ns))),
)
SCHEDULES = st.one_of(
    st.sampled_from(
        [
            "@once",
            "@continuous",
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@quarterly",
            "@yearly",
            "@annually",
            "@midnight",
            "@reboot",
            "@every 5m",
            "every hour",
            "",
            " ",
            "0 3 * * *",
        ]
    ),
    st.lists(FIELD, min_size=1, max_size=8).map(" ".join),
    st.text(max_size=20),
)


def _airflow_accepts(schedule: str) -> bool:
    from airflow.sdk import DAG

    try:
        dag = DAG("schedule_probe", schedule=schedule, max_active_runs=1)  # as the shipped DAGs are
        dag.validate()  # what the DagBag runs before it takes a DAG
    except Exception:
        return False
    return True


@settings(derandomize=True, max_examples=int(os.environ.get("XBP_PROPERTY_EXAMPLES", "300")), deadline=None)
@given(SCHEDULES)
def test_the_config_check_accepts_a_schedule_exactly_when_airflow_does(schedule):
    try:
        check_schedule(schedule)
    except ValueError as exc:
        assert not _airflow_accepts(schedule), f"refused what Airflow takes: {exc}"
        assert "\n" not in str(exc)
        return
    assert _airflow_accepts(schedule), f"accepted {schedule!r}, which Airflow refuses"


# -- copies: accepted exactly when no target's listing sees another's objects -----------------------------

SPELLINGS = [
    lambda d: d,
    lambda d: d + "/",
    lambda d: d.replace("/", "//"),
    lambda d: d + "/.",
    lambda d: d + "/x/..",
]


@st.composite
def _local_targets(draw, root: str) -> list[dict]:
    targets = []
    for n in range(draw(st.integers(2, 3))):
        where = draw(st.sampled_from(["s", "s/backups", "t", "s/b"]))
        spell = draw(st.sampled_from(SPELLINGS))
        prefix = draw(st.sampled_from(["backups", "backups/copy", "", "b"]))
        targets.append({"name": f"t{n}", "local_path": spell(f"{root}/{where}"), "prefix": prefix})
    return targets


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.data())
def test_copies_are_accepted_exactly_when_they_do_not_see_each_others_objects(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("targets")
    for sub in ("s/backups", "s/b", "t", "s/x", "s/backups/x", "s/b/x", "t/x"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    targets = data.draw(_local_targets(str(root)))
    stores = [(LocalStore(t["local_path"]), t["prefix"].strip("/")) for t in targets]
    for n, (store, prefix) in enumerate(stores):  # what a backup of cluster c1 writes there
        store.put_bytes("/".join(filter(None, [prefix, f"c1/db1/backups/{n}/manifest.json"])), b"{}")
    seen_by = [
        {o.key.split("/backups/")[-1].split("/")[0] for o in s.list(p + "/" if p else "")} for s, p in stores
    ]
    overlap = any(seen != {str(n)} for n, seen in enumerate(seen_by))
    config = {"storage": targets[0], "copies": targets[1:], "clusters": CLUSTERS}
    try:
        parse_config(config)
    except ConfigError as exc:
        assert overlap, f"refused targets that do not overlap: {exc}"
        return
    assert not overlap, f"accepted targets that see each other's objects: {targets}"


# -- LocalStore as a state machine: a dict of objects, or a StorageError naming the key ----------------------

KEYS = st.lists(st.sampled_from(["a", "b", "x" * 256]), min_size=1, max_size=3).map("/".join)


class LocalStoreMachine(RuleBasedStateMachine):
    """Whatever keys come, the store behaves as a mapping of the keys it accepted; a key it cannot hold
    (a name over 255 bytes, a key through another object, an object where keys continue) is refused
    with a StorageError naming it, and changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="xbp-localstore-")
        self.store = LocalStore(self.root)
        self.model: dict[str, bytes] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(key=KEYS, data=st.binary(max_size=8), new=st.booleans())
    def put(self, key: str, data: bytes, new: bool) -> None:
        try:
            if new:
                etag = self.store.put_new(key, data, None)
                if etag is None:
                    assert key in self.model
                    return
            else:
                self.store.put_bytes(key, data)
        except StorageError as exc:
            assert key[:40] in str(exc) and key not in self.model, exc
            return
        self.model[key] = data

    @rule(key=KEYS)
    def get(self, key: str) -> None:
        try:
            assert self.store.get_bytes(key) == self.model[key]
        except StorageError as exc:
            assert key not in self.model and key[:40] in str(exc), exc

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        try:
            deleted = self.store.delete([key])
        except StorageError as exc:
            assert key not in self.model and key[:40] in str(exc), exc
            return
        assert deleted.keys == (1 if self.model.pop(key, None) is not None else 0)

    @invariant()
    def listing_is_the_model(self) -> None:
        assert [o.key for o in self.store.list("")] == sorted(self.model)


TestLocalStoreMachine = LocalStoreMachine.TestCase
TestLocalStoreMachine.settings = settings(
    derandomize=True, max_examples=60, stateful_step_count=15, deadline=None
)
