"""Cluster policy that sends each mapped backup task to its own host's queue.

A backup must run on a worker on its database host, but Airflow 3 cannot map `queue`: it is
fixed when the task instance is created. So the backup DAG, when its hosts have different
queues, gives the backup tasks the placeholder queue `HOST_QUEUE` and lists every host's queue
in the mapped task group's arguments; this hook, which the scheduler runs for every task
instance it creates or refreshes, swaps the placeholder for the queue of the instance's host.
The standby tasks the same way: `STANDBY_QUEUE` for the `standby_queue` of each host (the worker
where its standby directory lives).

Install it on every Airflow component (scheduler, dag processor, workers) in
`$AIRFLOW_HOME/config/airflow_local_settings.py`:

    from xtrabackup_provider.policy import task_instance_mutation_hook

or, when that file already has a hook, call `route_backup_task(task_instance)` from it.
A task whose host cannot be resolved keeps the placeholder queue: no worker listens on it, so
it never runs on the wrong host, and Airflow fails it after `[scheduler] task_queued_timeout`.
"""

from __future__ import annotations

__all__ = ["task_instance_mutation_hook", "route_backup_task", "HOST_QUEUE"]

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

HOST_QUEUE = "xtrabackup-per-host-queue"
STANDBY_QUEUE = "xtrabackup-per-host-standby-queue"
ROUTED = {HOST_QUEUE: "queue", STANDBY_QUEUE: "standby_queue"}  # placeholder -> the group's argument


def host_queue(task: Any, map_index: int, argument: str = "queue") -> str | None:
    """The `argument` (a queue) of map index `map_index` of the mapped task group around `task`."""
    closest = getattr(task, "get_closest_mapped_task_group", None)
    group = closest() if closest else None
    # The group's literal expand_kwargs list; Airflow keeps it on the (private) _expand_input.
    values = getattr(getattr(group, "_expand_input", None), "value", None)
    if not isinstance(values, list) or not 0 <= map_index < len(values):
        return None
    kwargs = values[map_index]
    queue = kwargs.get(argument) if isinstance(kwargs, dict) else None
    return queue if isinstance(queue, str) and queue else None


def route_backup_task(task_instance: Any) -> None:
    """Give a mapped task with a placeholder queue the queue of its host; leave others alone."""
    task = getattr(task_instance, "task", None)
    placeholder = getattr(task, "queue", None)
    if task is None or placeholder not in ROUTED or task_instance.map_index < 0:
        return
    queue = host_queue(task, task_instance.map_index, ROUTED[placeholder])
    if queue is None:
        log.error(
            "%s map index %d: no %s in its task group's arguments; it stays on %r",
            task_instance.task_id,
            task_instance.map_index,
            ROUTED[placeholder],
            placeholder,
        )
        return
    task_instance.queue = queue


def task_instance_mutation_hook(task_instance: Any, dag_run: Any = None) -> None:
    """Airflow's cluster-policy entry point (import it into airflow_local_settings.py)."""
    route_backup_task(task_instance)


def installed() -> bool:
    """Whether this process's airflow_local_settings routes backup tasks (see the module doc)."""
    from airflow import settings

    local = sys.modules.get("airflow_local_settings")
    if local is None or getattr(settings.task_instance_mutation_hook, "is_noop", True):
        return False
    ours = (task_instance_mutation_hook, route_backup_task)
    return any(value in ours for value in vars(local).values() if callable(value))
