# syntax=docker/dockerfile:1
# Image for the Airflow control plane of the demo stack (api-server, scheduler, dag processor,
# triggerer) and for the default-queue Celery worker. It does not need XtraBackup: tasks that must
# read a datadir are routed to the per-host worker built from docker/worker.Dockerfile.
FROM apache/airflow:3.3.2-python3.11

# Tasks on the default queue (binlog shipping, restore fetches) run the same zstd -> gpg pipeline as
# backups, so this image needs the binaries as well, not only the DB-host worker.
USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends zstd gnupg \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
USER airflow

# Copy only what the build needs: the context is the repository root, and a plain `COPY .` would
# drag a local .venv and caches into the image.
COPY --chown=airflow:0 pyproject.toml README.md /opt/provider/
COPY --chown=airflow:0 provider /opt/provider/provider

# Naming apache-airflow at the image's own version keeps pip from moving Airflow while it resolves
# the provider's dependency range (the pattern the Airflow image docs recommend).
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /opt/provider

# The cluster policy that puts each mapped backup task on its host's queue (README, "Queues"):
# every Airflow component needs it.
RUN mkdir -p /opt/airflow/config && \
    echo "from xtrabackup_provider.policy import task_instance_mutation_hook  # noqa: F401" \
    > /opt/airflow/config/airflow_local_settings.py
