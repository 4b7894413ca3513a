"""Loading the shipped DAG files the way the dag processor does."""

from __future__ import annotations

import importlib.util
import sys
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
    its id yet, and runs every later test's tasks against that first version (3.3 writes the
    current one at every call). Tests share the session's db and change the fleet config between
    runs, so on 3.1 a task that a later config adds was "not found" (`Task backup.binlogs_shipped
    not found`). Writing this DAG as the current version first makes a run depend on this test
    alone, on every minor."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    dag.relative_fileloc = str(Path(dag.fileloc).relative_to(DAGS))
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
        session.flush()
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )
    return dag.test(**kwargs)


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
