"""Loading the shipped DAG files the way the dag processor does."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load_dag_module(name: str):
    """Import a DAG file afresh (it reads the fleet config at import, like the dag processor)."""
    spec = importlib.util.spec_from_file_location(f"dagfile_{name}", DAGS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_dag(dag, **kwargs):
    """`dag.test(**kwargs)` of the DAG as this test built it.

    Airflow 3.1's dag.test() writes a DAG to the metadata db only when the db holds no version of
    its id yet, and runs every later test's tasks against that first version. Tests share the
    session's db and change the fleet config between runs, so a task that a later config adds was
    "not found" (`Task backup.standby not found`). This writes the DAG as the current version first,
    and makes that write land even when the last write of the id was seconds ago: the parsing code
    skips a DAG written less than [core] min_serialized_dag_update_interval (30 s) before, which
    made the outcome depend on how fast the previous test ran. The version read back must hold
    this DAG's tasks, so a skipped write fails here, by name, not as a task's server error."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.dagbag import DBDagBag
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    fileloc = Path(dag.fileloc)
    dag.relative_fileloc = str(fileloc.relative_to(DAGS) if fileloc.is_relative_to(DAGS) else fileloc.name)
    with _no_update_interval(), create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
        session.flush()
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )
        session.flush()
        stored = DBDagBag().get_latest_version_of_dag(dag.dag_id, session=session)
        missing = sorted(set(dag.task_ids) - set(stored.task_ids if stored else ()))
        assert not missing, f"{dag.dag_id}: the db's current version lacks tasks {missing}"
    return dag.test(**kwargs)


@contextmanager
def _no_update_interval() -> Iterator[None]:
    """[core] min_serialized_dag_update_interval at 0 for one write: 3.1 reads it once into
    airflow.settings at import, 3.2 and 3.3 from the config at each write."""
    from airflow import settings
    from airflow.configuration import conf

    before = conf.get("core", "min_serialized_dag_update_interval")
    setting = getattr(settings, "MIN_SERIALIZED_DAG_UPDATE_INTERVAL", None)
    conf.set("core", "min_serialized_dag_update_interval", "0")
    if setting is not None:
        settings.MIN_SERIALIZED_DAG_UPDATE_INTERVAL = 0
    try:
        yield
    finally:
        conf.set("core", "min_serialized_dag_update_interval", before)
        if setting is not None:
            settings.MIN_SERIALIZED_DAG_UPDATE_INTERVAL = setting


def task_states(dagrun, dag) -> dict[str, str]:
    """Task states of a run; a task mapped over hosts is keyed `<host>.<task>` (e.g. `db1.backup`)."""
    states = {}
    for ti in dagrun.get_task_instances():
        key = ti.task_id
        if ti.map_index >= 0:
            group = dag.get_task(ti.task_id).get_closest_mapped_task_group()
            host = group._expand_input.value[ti.map_index]["host"]
            key = f"{host}.{ti.task_id.rsplit('.', 1)[-1]}"
        states[key] = ti.state
    return states


def labels(dagrun) -> dict[tuple[str, str], str]:
    """{(task_id, the map index's label as the UI shows it): state} of a run's mapped tasks."""
    return {
        (ti.task_id, ti.rendered_map_index): ti.state
        for ti in dagrun.get_task_instances()
        if ti.map_index >= 0
    }
