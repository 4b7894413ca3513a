# syntax=docker/dockerfile:1
# Celery worker that sits "on" the database host: it is the only image with XtraBackup, and the
# compose file gives it the MySQL datadir read-only. Backup tasks for that host are routed to its
# queue (see `queue:` in dags/config/fleet.docker.yaml).
FROM apache/airflow:3.3.2-python3.11

USER root
# XtraBackup 8.0 is not in Debian; Percona's percona-release package adds their signed apt repo.
# The codename comes from /etc/os-release so a rebase of the Airflow image onto a newer Debian
# picks the matching Percona repo instead of silently using bookworm's.
# `enable-only tools release` is the repo Percona documents for percona-xtrabackup-80.
# PXB 8.0.35+ backs up any later 8.0.x server, so the latest 8.0 package matches
# percona/percona-server:8.0.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates curl gnupg lsb-release; \
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME}")"; \
    curl -fsSL -o /tmp/percona-release.deb \
        "https://repo.percona.com/apt/percona-release_latest.${codename}_all.deb"; \
    apt-get install -y --no-install-recommends /tmp/percona-release.deb; \
    rm -f /tmp/percona-release.deb; \
    percona-release enable-only tools release; \
    apt-get update; \
    apt-get install -y --no-install-recommends percona-xtrabackup-80 zstd gnupg; \
    xtrabackup --version; \
    apt-get autoremove -yqq --purge; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*
USER airflow

# Same provider install as docker/airflow.Dockerfile: only the files the build needs, Airflow pinned
# to the image's version.
COPY --chown=airflow:0 pyproject.toml README.md /opt/provider/
COPY --chown=airflow:0 provider /opt/provider/provider
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /opt/provider

# The cluster policy that puts each mapped backup task on its host's queue (README, "Queues"):
# every Airflow component needs it.
RUN mkdir -p /opt/airflow/config && \
    echo "from xtrabackup_provider.policy import task_instance_mutation_hook  # noqa: F401" \
    > /opt/airflow/config/airflow_local_settings.py
