"""Import name that Airflow derives from this distribution's name (airflow-provider-xtrabackup).

Airflow 3 looks for every installed provider's `example_dags` by importing
`name.replace("-", "_")`; without this module it logs an error with a traceback on every start
when `[core] load_examples` is on. The provider itself is `xtrabackup_provider`.
"""
