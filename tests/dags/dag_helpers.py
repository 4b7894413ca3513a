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
