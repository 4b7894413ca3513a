"""What every operator and sensor that works on a host's backups shares: where the backups are
stored, which `gpgkeys` connection it reads, and the lookups built on them.

As the amazon provider's AwsBaseOperator owns `aws_conn_id`, BackupStorageOperator (and
BackupStorageSensor) own `cluster`, `host`, `bucket` or `local_path`, `prefix`, `aws_conn_id`
and `gpg_conn_id`, so an operator's own file shows only its own arguments. `cluster`, `host`,
`prefix` and `bucket` are templated on every one of them (a mapped task group passes them); an
operator adds its own with `template_fields = storage_template_fields("mine", ...)`.

The operators import the core inside `execute`: the DAG processor imports these modules on
every parse and must not pay there for the core and what it loads (MySQLdb, boto3).
"""

from __future__ import annotations

__all__ = [
    "BackupStorageOperator",
    "BackupStorageSensor",
    "ChainRestoreOperator",
    "RestoreTestingOperator",
    "skip_unless_branch_chose",
    "storage_template_fields",
]

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow.sdk import BaseOperator, BaseSensorOperator

from ..arguments import KeptArguments, keep_arguments

if TYPE_CHECKING:
    from ..core.catalog.backups import Catalog
    from ..core.catalog.targets import Source
    from ..core.storage.base import ObjectStore

PUBLIC_KEYS_CONN = "backup_gpg"  # public keys: what backups encrypt for
PRIVATE_KEY_CONN = "backup_gpg_private"  # the private key: only restore workers should read it
STORAGE_TEMPLATE_FIELDS = ("cluster", "host", "prefix", "bucket", "local_path", "aws_conn_id", "gpg_conn_id")


def storage_template_fields(*own: str) -> tuple[str, ...]:
    """The templated storage arguments, then an operator's own templated arguments."""
    return (*STORAGE_TEMPLATE_FIELDS, *own)


def read_template_fields(*own: str) -> tuple[str, ...]:
    """The templated arguments of an operator that reads backups from the storage targets."""
    return storage_template_fields("target_store", *own)


class _ClassDefault:
    """`gpg_conn_id` left unset: the operator's kind decides (its `gpg_conn_default`)."""

    def __repr__(self) -> str:
        return "the gpg_conn_default of the operator"


CLASS_DEFAULT: Any = _ClassDefault()


class _Storage(KeptArguments):
    """The arguments and the lookups built on them, for both bases below."""

    gpg_conn_default: ClassVar[str | None] = None  # no keys unless the operator's kind needs them

    def store(self) -> ObjectStore:
        from ..hooks.storage import BackupStorageHook

        return BackupStorageHook(self.aws_conn_id, self.bucket, self.local_path).get_store()

    def catalog(self) -> Catalog:
        """The catalog of `cluster/host` in the bucket (or local_path) under `prefix`."""
        from ..core.catalog.backups import Catalog

        return Catalog(self.store(), self.prefix, self.cluster, self.host)

    def public_keys(self) -> list[str]:
        """Recipients' public keys from `gpg_conn_id`; none without one (the backup then refuses
        unless it was asked to store unencrypted)."""
        from ..hooks.gpg import GpgKeysHook

        return GpgKeysHook(self.gpg_conn_id).public_keys() if self.gpg_conn_id else []

    def encryption(self) -> dict[str, Any]:
        """A backup's or shipment's encryption arguments: without `gpg_conn_id` it is stored
        unencrypted, because that is what the operator was told."""
        return {"public_keys": self.public_keys(), "allow_unencrypted": self.gpg_conn_id is None}

    def private_key(self) -> tuple[str | None, str | None]:
        """(armored private key, passphrase) from `gpg_conn_id`; (None, None) without one."""
        from ..hooks.gpg import GpgKeysHook

        return GpgKeysHook(self.gpg_conn_id).private_key() if self.gpg_conn_id else (None, None)


def _storage_init(airflow_base: Any) -> Callable[..., None]:
    """The `__init__` of a storage base on `airflow_base`. Each base must define its own: Airflow
    applies `default_args` only to an `__init__` that the class itself defines."""

    def __init__(
        self: Any,
        *,
        cluster: str,
        host: str,
        bucket: str | None = None,
        local_path: str | None = None,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        gpg_conn_id: str | None = CLASS_DEFAULT,
        **kwargs: Any,
    ) -> None:
        airflow_base.__init__(self, **kwargs)
        keep_arguments(self, locals(), passed_on=("airflow_base",))
        if gpg_conn_id is CLASS_DEFAULT:
            self.gpg_conn_id = self.gpg_conn_default

    return __init__


class BackupStorageOperator(_Storage, BaseOperator):
    """Base of the operators that read or write a host's backups (see the module doc)."""

    template_fields: Sequence[str] = STORAGE_TEMPLATE_FIELDS
    __init__ = _storage_init(BaseOperator)


class BackupStorageSensor(_Storage, BaseSensorOperator):
    """Base of the sensors that read a host's backups or binlogs (see the module doc)."""

    template_fields: Sequence[str] = STORAGE_TEMPLATE_FIELDS
    __init__ = _storage_init(BaseSensorOperator)


class TargetReadingOperator(BackupStorageOperator):
    """Base of the operators that read a host's backups: from the storage target of `bucket` /
    `local_path` (named `storage_name`, as `storage.name` in the fleet config), and where that
    cannot be read or holds an object damaged, from each of `fallback_targets` in order (dicts
    with `name`, `bucket` or `local_path`, `prefix`, `aws_conn_id`: the config's `copies`), as the
    CLI does (core/catalog/targets.py); each fallback is a warning in the task log. `target_store`
    (templated) reads the target of that name alone."""

    def __init__(
        self,
        *,
        storage_name: str = "primary",
        fallback_targets: list[dict[str, Any]] | None = None,
        target_store: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def read_sources(self) -> list[Source]:
        """The host's catalog on each target to read, in order (`target_store`: that one alone)."""
        from ..core.catalog.targets import Source
        from ..hooks.storage import target_sources

        first = Source(self.storage_name, self.catalog())
        return target_sources(first, self.fallback_targets or [], self.target_store)

    def read_args(self) -> dict[str, Any]:
        """`catalog`, `source_name` and `fallbacks`, as the core's read requests take them."""
        from ..core.catalog.targets import read_fields

        return read_fields(self.read_sources())


class ChainRestoreOperator(TargetReadingOperator):
    """Base of the operators that restore a chain into a directory on this worker: the private
    key's connection by default, the backup tool's `binary`, and prepare's `use_memory` (bytes;
    default: sized from the copied redo)."""

    gpg_conn_default = PRIVATE_KEY_CONN

    def __init__(self, *, binary: str | None = None, use_memory: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def restore_args(self) -> dict[str, Any]:
        """The key, the tool and the memory, as the core's restore and standby calls take them."""
        key, passphrase = self.private_key()
        return {
            "private_key": key,
            "passphrase": passphrase,
            "binary": self.binary,
            "use_memory": self.use_memory,
        }


class RestoreTestingOperator(TargetReadingOperator):
    """Base of the restore tests: a scratch directory under `workdir_root` on this worker, the
    check `level` (quick, full or deep), the backup tool's `binary`, the private key's connection."""

    gpg_conn_default = PRIVATE_KEY_CONN

    def __init__(
        self, *, level: str = "quick", workdir_root: str = "/tmp", binary: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def scratch_dir(self, kind: str) -> Path:
        """A new private directory under `workdir_root` (the core removes it when the test ends; the
        next test on this worker removes it, and stops its sandbox, if this one was killed)."""
        from ..core.common.tempdirs import private_dir
        from ..core.db.sandbox import stop_orphans

        Path(self.workdir_root).mkdir(parents=True, exist_ok=True)
        return private_dir(kind, self.workdir_root, on_sweep=stop_orphans)

    def test_args(self) -> dict[str, Any]:
        """The key, the check level and the tool, as the core's restore tests take them."""
        key, passphrase = self.private_key()
        level: Literal["quick", "full"] = "full" if self.level == "full" else "quick"
        return {"private_key": key, "passphrase": passphrase, "level": level, "binary": self.binary}


def skip_unless_branch_chose(op: Any, context: Any) -> None:
    """Skip `op` when an upstream @task.branch of the same map index did not choose it.

    Inside a mapped task group Airflow 3.3 does not skip the branch not taken: its
    NotPreviouslySkippedDep reads the branch's decision at map index -1, while a task in a mapped
    group wrote it at its own index. This reads it at the right index.
    """
    from airflow.providers.common.compat.sdk import AirflowSkipException

    ti = context["ti"]
    if ti.map_index < 0:
        return  # not mapped: Airflow's own dependency already skipped us if needed
    for task_id in op.upstream_task_ids:
        decision = ti.xcom_pull(task_ids=task_id, key="skipmixin_key", map_indexes=ti.map_index)
        if isinstance(decision, dict) and op.task_id not in decision.get("followed", [op.task_id]):
            raise AirflowSkipException(f"{task_id} chose {decision['followed']}, not {op.task_id}")


def task_origin(context: Any) -> dict[str, Any]:
    """The running task's ids, recorded with what it stores (core/catalog/origin.py) so that the
    Backups view links a backup or a restore test to its DAG run and task log."""
    ti = context["ti"]
    return {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "try_number": ti.try_number,
    }
