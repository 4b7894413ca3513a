"""run_dag, the helper every DAG test runs through, runs the DAG as the test built it: a shape of
a dag_id written seconds after another one is the one whose tasks run (Airflow 3.1's dag.test()
ran the first stored shape, and the parsing code skips a write within 30 s of the last)."""

from __future__ import annotations

import uuid

from dag_helpers import run_dag


def _dag(dag_id: str, task_ids: list[str]):
    from airflow.sdk import DAG, task

    with DAG(dag_id, schedule=None) as dag:
        for task_id in task_ids:
            task(task_id=task_id)(lambda: None)()
    return dag


def test_a_task_the_second_shape_adds_runs_although_the_first_shape_was_written_seconds_before(airflow_home):
    dag_id = f"helper_{uuid.uuid4().hex[:8]}"
    first = run_dag(_dag(dag_id, ["kept"]))
    second = run_dag(_dag(dag_id, ["kept", "added"]))
    assert first.state == "success"
    states = {ti.task_id: ti.state for ti in second.get_task_instances()}
    assert second.state == "success" and states == {"kept": "success", "added": "success"}, states
