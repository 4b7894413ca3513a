"""The shipped table-restore DAG under dag.test(): a table back as in the newest backup, under a new name."""

from __future__ import annotations

from dag_helpers import load_dag_module, run_dag

from helpers import seed_database, unique_name


def test_a_table_comes_back_from_the_backup_under_a_new_name(fleet):
    server, catalog = fleet
    db = unique_name("tr")
    seed_database(server, db, rows=600)
    assert run_dag(load_dag_module("mysql_backup").mysql_backup_dagtest).state == "success"
    before = server.query(f"SELECT * FROM `{db}`.orders ORDER BY id")
    server.query(f"DELETE FROM `{db}`.orders WHERE id % 2 = 0")
    dag = load_dag_module("mysql_table_restore").mysql_table_restore_dagtest
    dagrun = run_dag(dag, run_conf={"host": "db1", "tables": f"{db}.orders"})
    states = {ti.task_id: ti.state for ti in dagrun.get_task_instances()}
    assert dagrun.state == "success", states
    assert server.query(f"SELECT * FROM `{db}`.orders_restored ORDER BY id") == before
    assert len(server.query(f"SELECT id FROM `{db}`.orders")) == len(before) // 2, (
        "the damaged table was touched"
    )

    again = run_dag(dag, run_conf={"host": "db1", "tables": f"{db}.orders"})  # orders_restored exists now
    assert again.state == "failed"
    assert server.query(f"SELECT * FROM `{db}`.orders_restored ORDER BY id") == before
