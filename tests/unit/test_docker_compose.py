"""Static checks of the demo stack (docker-compose.yml, docker/*.Dockerfile, fleet.docker.yaml).

CI has no Docker engine, so the stack is never started there; these tests catch the mistakes that
would only show up on a user's machine: a worker that cannot see the datadir, a queue nobody
listens on, an Airflow 2 image, a bucket without Object Lock, a password committed in clear.
"""

from __future__ import annotations

import json
import re
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
    "backup-worker",
)
REQUIRED_SERVICES = (*AIRFLOW_SERVICES, "mysql", "minio", "minio-init", "postgres", "redis")

# ${VAR}, ${VAR:-default} or ${VAR-default}: the only allowed form for a credential.
SUBSTITUTION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-[^}]*)?\}$")
SECRET_ENV_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|_KEY$", re.IGNORECASE)
# "password": "x" / password=x / secret: x inside JSON, URLs, scripts.
SECRET_ASSIGNMENT = re.compile(
    r"""(?ix) (password|passwd|secret|token) ["']? \s* [:=] \s* ["']? (?P<value>[^"'\s,}&]*)"""
)
SECRET_FLAG = re.compile(r"""--(password|passwd|secret|token)[= ]["']?(?P<value>[^"'\s]*)""", re.IGNORECASE)
INTERPOLATION = re.compile(r"\$\{[^}]*\}")
URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://(?P<user>[^:/@\s]*):(?P<value>[^@\s]*)@")


@cache
def compose() -> dict[str, Any]:
    assert COMPOSE_FILE.is_file(), f"{COMPOSE_FILE} is missing"
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), (
        "docker-compose.yml has no `services:` mapping"
    )
    return data


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def service(name: str) -> dict[str, Any]:
    svc = services().get(name)
    assert isinstance(svc, dict), f"service `{name}` is missing from docker-compose.yml"
    return svc


@cache
def fleet() -> dict[str, Any]:
    """The fleet config the stack points Airflow at, found through the compose file itself."""
    container_path = environment(service("airflow-scheduler")).get("XTRABACKUP_FLEET_CONFIG")
    assert container_path, "airflow services do not set XTRABACKUP_FLEET_CONFIG"
    host_path = host_path_for(service("airflow-scheduler"), container_path)
    assert host_path is not None, (
        f"XTRABACKUP_FLEET_CONFIG={container_path} is not inside any bind mount of airflow-scheduler"
    )
    assert host_path == ROOT / "dags/config/fleet.docker.yaml", (
        f"XTRABACKUP_FLEET_CONFIG resolves to {host_path}, expected dags/config/fleet.docker.yaml"
    )
    assert host_path.is_file(), f"fleet config {host_path} does not exist"
    return yaml.safe_load(host_path.read_text())


def fleet_hosts() -> list[dict[str, Any]]:
    hosts = [host for cluster in fleet().get("clusters", []) for host in cluster.get("hosts", [])]
    assert hosts, "fleet.docker.yaml defines no clusters[].hosts[]"
    return hosts


def environment(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def command_argv(svc: dict[str, Any]) -> list[str]:
    cmd = svc.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def command_text(svc: dict[str, Any]) -> str:
    return " ".join(command_argv(svc))


def mounts(svc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) for each entry of `volumes`, short or long syntax."""
    result = []
    for entry in svc.get("volumes") or []:
        if isinstance(entry, str):
            parts = entry.split(":")
            source, target = parts[0], parts[1]
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
        else:
            source, target = entry.get("source", ""), entry["target"]
            read_only = bool(entry.get("read_only"))
        result.append((source, target.rstrip("/") or "/", read_only))
    return result


def host_path_for(svc: dict[str, Any], container_path: str) -> Path | None:
    for source, target, _ in mounts(svc):
        if source.startswith((".", "/")) and (
            container_path == target or container_path.startswith(target + "/")
        ):
            return (ROOT / source / container_path[len(target) :].lstrip("/")).resolve()
    return None


def dockerfile_of(svc: dict[str, Any]) -> Path | None:
    build = svc.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return ROOT / build / "Dockerfile"
    return ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    assert path.is_file(), f"Dockerfile {path} does not exist"
    logical, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    if current:
        logical.append(current)
    return [
        (text.split(None, 1)[0].upper(), text.split(None, 1)[1] if " " in text else "") for text in logical
    ]


def all_strings(node: Any, path: str = ""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from all_strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from all_strings(value, f"{path}[{index}]")
    elif isinstance(node, str):
        yield path, node


def connection_env_name(conn_id: str) -> str:
    return "AIRFLOW_CONN_" + conn_id.upper()


# --- services -----------------------------------------------------------------------------------


def test_all_services_are_defined() -> None:
    missing = [name for name in REQUIRED_SERVICES if name not in services()]
    assert not missing, f"docker-compose.yml is missing services: {missing}"


def test_mysql_is_percona_server_80_with_binlog_and_gtid() -> None:
    mysql = service("mysql")
    assert str(mysql.get("image", "")).startswith("percona/percona-server:8.0"), (
        f"mysql should run percona/percona-server:8.0, not {mysql.get('image')!r}"
    )
    argv = command_argv(mysql)
    for flag in ("--gtid-mode=ON", "--enforce-gtid-consistency=ON", "--server-id=1"):
        assert flag in argv, f"mysql command lacks {flag} (has {argv})"
    assert any(arg == "--log-bin" or arg.startswith("--log-bin=") for arg in argv), (
        f"mysql command does not enable the binary log with --log-bin (has {argv})"
    )
    root_password = environment(mysql).get("MYSQL_ROOT_PASSWORD", "")
    assert SUBSTITUTION.match(root_password), (
        f"MYSQL_ROOT_PASSWORD must come from the environment as ${{VAR:-default}}, got {root_password!r}"
    )
    assert "healthcheck" in mysql, "mysql has no healthcheck, so depends_on cannot wait for it"


def test_backup_worker_mounts_the_mysql_datadir_read_only() -> None:
    mysql_mounts = {source: target for source, target, _ in mounts(service("mysql"))}
    assert "mysql-data" in mysql_mounts, "mysql does not keep its datadir on the named volume mysql-data"
    datadir = mysql_mounts["mysql-data"]
    assert "mysql-data" in (compose().get("volumes") or {}), "named volume mysql-data is not declared"

    worker_mounts = [
        (target, ro) for source, target, ro in mounts(service("backup-worker")) if source == "mysql-data"
    ]
    assert worker_mounts, "backup-worker does not mount the mysql-data volume, so xtrabackup cannot read it"
    target, read_only = worker_mounts[0]
    assert target == datadir, (
        f"backup-worker mounts mysql-data at {target}, but mysql's datadir is {datadir}: "
        "xtrabackup reads the path the server reports as @@datadir"
    )
    assert read_only, (
        "backup-worker must mount mysql-data read-only (`:ro`): a backup never writes the datadir"
    )
    assert "mysql" in (service("backup-worker").get("depends_on") or {}), (
        "backup-worker does not depend_on mysql"
    )


def test_backup_worker_image_installs_xtrabackup_zstd_gnupg_and_the_provider() -> None:
    path = dockerfile_of(service("backup-worker"))
    assert path is not None, "backup-worker is not built from a Dockerfile"
    assert path == ROOT / "docker/worker.Dockerfile", (
        f"backup-worker builds {path}, expected docker/worker.Dockerfile"
    )
    instructions = dockerfile_instructions(path)
    runs = " ".join(args for op, args in instructions if op == "RUN")
    assert "percona-release" in runs, "worker.Dockerfile does not set up Percona's repo with percona-release"
    for package in ("percona-xtrabackup-80", "zstd", "gnupg"):
        assert re.search(rf"apt-get install[^;&]*\b{re.escape(package)}\b", runs), (
            f"worker.Dockerfile does not apt-get install {package}"
        )
    assert_installs_provider_from_context(path, instructions, service("backup-worker"))


def assert_installs_provider_from_context(
    path: Path, instructions: list[tuple[str, str]], svc: dict[str, Any]
) -> None:
    build = svc.get("build")
    context = build.get("context", ".") if isinstance(build, dict) else build
    assert (ROOT / context).resolve() == ROOT, (
        f"{path.name} must be built from the repository root, not {context}"
    )
    copies = []
    for op, args in instructions:
        if op == "COPY":
            parts = [part for part in args.split() if not part.startswith("--")]
            copies.append((parts[:-1], parts[-1].rstrip("/")))
    project_dirs = {dest for sources, dest in copies if "pyproject.toml" in sources or "." in sources}
    assert project_dirs, f"{path.name} does not COPY pyproject.toml from the build context"
    assert any("provider" in sources or "." in sources for sources, _ in copies), (
        f"{path.name} does not COPY the provider/ source tree"
    )
    pip_runs = [args for op, args in instructions if op == "RUN" and "pip install" in args]
    assert any(re.search(rf"(\s|^){re.escape(d)}/?(\s|$)", run) for d in project_dirs for run in pip_runs), (
        f"{path.name} never runs `pip install` on the copied build context ({sorted(project_dirs)})"
    )


def base_image(path: Path) -> str:
    froms = [args for op, args in dockerfile_instructions(path) if op == "FROM"]
    assert froms, f"{path.name} has no FROM"
    return next(part for part in froms[0].split() if not part.startswith("--"))


def test_every_airflow_service_runs_airflow_3() -> None:
    for name in AIRFLOW_SERVICES:
        svc = service(name)
        path = dockerfile_of(svc)
        if path is None:
            image = str(svc.get("image", ""))
            assert re.match(r"apache/airflow:(slim-)?3\.", image), (
                f"{name} uses image {image!r}, not Airflow 3"
            )
            continue
        base = base_image(path)
        assert re.match(r"apache/airflow:(slim-)?3\.\d+", base), (
            f"{name} is built FROM {base!r} in {path.name}; expected apache/airflow:3.x"
        )
        if path.name == "airflow.Dockerfile":
            assert_installs_provider_from_context(path, dockerfile_instructions(path), svc)


def test_airflow_3_components_have_their_commands() -> None:
    expected = {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    for name, subcommand in expected.items():
        argv = command_argv(service(name))
        assert argv[:1] == [subcommand] or argv[:2] == ["airflow", subcommand], (
            f"{name} should run `airflow {subcommand}`, runs {argv}"
        )
    assert "8080:8080" in [str(p) for p in service("airflow-apiserver").get("ports", [])], (
        "airflow-apiserver does not publish port 8080"
    )
    init = command_text(service("airflow-init"))
    assert "airflow db migrate" in init, f"airflow-init does not run `airflow db migrate`: {init!r}"
    assert "airflow users create" in init and "Admin" in init, "airflow-init does not create an Admin user"
    for name in ("airflow-worker", "backup-worker"):
        assert command_argv(service(name))[:2] == ["celery", "worker"], f"{name} is not a Celery worker"


def test_airflow_common_settings() -> None:
    for name in AIRFLOW_SERVICES:
        env = environment(service(name))
        assert env.get("AIRFLOW__CORE__EXECUTOR") == "CeleryExecutor", (
            f"{name} does not use the CeleryExecutor"
        )
        for key in (
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            "AIRFLOW__CELERY__BROKER_URL",
            "AIRFLOW__CELERY__RESULT_BACKEND",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
            "AIRFLOW__API_AUTH__JWT_SECRET",
        ):
            assert env.get(key), f"{name} does not set {key}"
        assert env.get("AIRFLOW__CORE__LOAD_EXAMPLES", "").lower() == "false", (
            f"{name} loads the example DAGs"
        )
        assert "postgres" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], (
            f"{name} does not use the postgres service"
        )
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://redis"), (
            f"{name} does not use the redis broker"
        )
        assert ("./dags", "/opt/airflow/dags") in [(s, t) for s, t, _ in mounts(service(name))], (
            f"{name} does not mount ./dags at /opt/airflow/dags"
        )
    assert service("postgres").get("image", "").startswith("postgres:16"), "postgres should be postgres:16"
    assert str(service("redis").get("image", "")).startswith("redis"), "redis service does not run redis"


# --- storage ------------------------------------------------------------------------------------


def test_minio_bucket_is_created_with_object_lock() -> None:
    minio = service("minio")
    assert str(minio.get("image", "")).startswith("minio/minio"), "minio should run the minio/minio image"
    argv = command_argv(minio)
    assert argv[:2] == ["server", "/data"] and "--console-address" in argv, f"unexpected minio command {argv}"
    init = service("minio-init")
    assert str(init.get("image", "")).startswith("minio/mc"), "minio-init should run the minio/mc image"
    script = command_text(init)
    bucket = fleet()["storage"]["bucket"]
    mb = [line for line in script.splitlines() if re.search(r"\bmc\s+mb\b", line)]
    assert mb, "minio-init never runs `mc mb`"
    assert any(bucket in line for line in mb), f"minio-init does not create the fleet's bucket {bucket!r}"
    assert any(re.search(r"--with-lock\b|\s-l\b", line) for line in mb), (
        "minio-init creates the bucket without --with-lock: Object Lock cannot be enabled afterwards"
    )
    assert "minio" in (init.get("depends_on") or {}), "minio-init does not wait for minio"


def test_fleet_storage_classes_are_ones_minio_accepts() -> None:
    classes = fleet()["storage"].get("storage_class", {})
    values = classes.values() if isinstance(classes, dict) else [classes]
    rejected = [v for v in values if v not in ("STANDARD", "REDUCED_REDUNDANCY")]
    assert not rejected, f"MinIO rejects storage classes {rejected} with InvalidStorageClass"


# --- credentials --------------------------------------------------------------------------------


def test_no_literal_secrets_in_compose() -> None:
    problems = []
    for name, svc in services().items():
        for key, value in environment(svc).items():
            if SECRET_ENV_NAME.search(key) and value and not SUBSTITUTION.match(value):
                problems.append(f"{name}.environment.{key} = {value!r}")
    for where, raw in all_strings(compose()):
        # `${VAR:-default}` is the allowed form; blank it out so its default cannot look like a
        # literal ("PASSWORD:-demo") to the patterns below.
        text = INTERPOLATION.sub("$SUB", raw)
        for pattern in (SECRET_ASSIGNMENT, SECRET_FLAG, URL_CREDENTIALS):
            for match in pattern.finditer(text):
                value = match.group("value")
                if value and not value.startswith("$"):
                    problems.append(f"{where}: {match.group(0)!r}")
    assert not problems, (
        "credentials must be ${VAR:-demo default} substitutions read from .env, found literals:\n"
        + "\n".join(problems)
    )


def test_fleet_connections_are_defined_for_the_workers() -> None:
    conn_ids = {fleet()["storage"]["aws_conn_id"], fleet()["encryption"]["gpg_conn_id"]}
    conn_ids |= {host["mysql_conn_id"] for host in fleet_hosts()}
    for name in ("airflow-worker", "backup-worker"):
        svc = service(name)
        env = environment(svc)
        entrypoint = " ".join(str(part) for part in svc.get("entrypoint") or [])
        for conn_id in sorted(conn_ids):
            var = connection_env_name(conn_id)
            assert var in env or var in entrypoint, (
                f"{name} has no {var}, so connection {conn_id!r} from fleet.docker.yaml is undefined"
            )
    env = environment(service("backup-worker"))
    aws = json.loads(env[connection_env_name(fleet()["storage"]["aws_conn_id"])])
    assert aws.get("conn_type") == "aws", f"the S3 connection has conn_type {aws.get('conn_type')!r}, not aws"
    assert aws.get("extra", {}).get("endpoint_url") == "http://minio:9000", (
        "the S3 connection does not point endpoint_url at http://minio:9000"
    )
    for host in fleet_hosts():
        mysql = json.loads(env[connection_env_name(host["mysql_conn_id"])])
        assert mysql.get("conn_type") == "mysql" and mysql.get("host") == "mysql", (
            f"connection {host['mysql_conn_id']!r} should be a mysql connection to the `mysql` service"
        )
    entrypoint = " ".join(str(part) for part in service("backup-worker").get("entrypoint") or [])
    assert '"conn_type": "gpgkeys"' in entrypoint, "the GPG connection is not built with conn_type gpgkeys"
    assert '"public_keys": [' in entrypoint, (
        "the GPG connection's extra must hold public_keys as a list of armored keys (GpgKeysHook's shape)"
    )
    key_file = env.get("BACKUP_GPG_PUBLIC_KEY_FILE", "")
    assert key_file and any(
        key_file.startswith(target + "/") and ro for _, target, ro in mounts(service("backup-worker"))
    ), f"the GPG public key file {key_file!r} is not on a read-only mount"


# --- queues -------------------------------------------------------------------------------------


def queues_of(svc: dict[str, Any]) -> set[str]:
    argv = command_argv(svc)
    for index, arg in enumerate(argv):
        if arg in ("--queues", "-q") and index + 1 < len(argv):
            return set(argv[index + 1].split(","))
        if arg.startswith("--queues="):
            return set(arg.split("=", 1)[1].split(","))
    return {"default"}


@pytest.mark.parametrize("field", ["name", "queue", "datadir", "flavour"])
def test_fleet_hosts_have_field(field: str) -> None:
    for host in fleet_hosts():
        assert host.get(field), f"fleet.docker.yaml host {host.get('name')!r} has no {field}"


def test_each_db_host_queue_has_a_worker_that_sees_its_datadir() -> None:
    workers = {name: svc for name, svc in services().items() if command_argv(svc)[:2] == ["celery", "worker"]}
    for host in fleet_hosts():
        listening = [name for name, svc in workers.items() if host["queue"] in queues_of(svc)]
        assert listening, f"no Celery worker listens on queue {host['queue']!r} of host {host['name']!r}"
        for name in listening:
            targets = [target for source, target, _ in mounts(workers[name]) if source == "mysql-data"]
            assert host["datadir"].rstrip("/") in targets, (
                f"{name} listens on {host['queue']!r} but does not mount mysql-data at {host['datadir']}"
            )
            path = dockerfile_of(workers[name])
            assert path is not None and "percona-xtrabackup-80" in path.read_text(), (
                f"{name} listens on {host['queue']!r} but its image has no XtraBackup"
            )
    assert "default" in queues_of(service("airflow-worker")), (
        "airflow-worker does not listen on the default queue"
    )


def test_fleet_docker_yaml_is_a_valid_fleet_config() -> None:
    load = pytest.importorskip("xtrabackup_provider.core.config.load")
    fleet()  # resolves the path through the compose file first
    try:
        load.load_config(ROOT / "dags/config/fleet.docker.yaml")
    except load.ConfigError as exc:
        pytest.fail(f"dags/config/fleet.docker.yaml does not validate against the fleet schema: {exc}")


def test_no_restore_test_is_scheduled_that_cannot_pass() -> None:
    """The restore sandbox starts mariadbd: the demo's XtraBackup host opts out, so the restore-test
    DAG (which refuses a restore test of an xtrabackup host) builds and schedules nothing that fails."""
    from xtrabackup_provider.core.config import load

    config = load.load_config(ROOT / "dags/config/fleet.docker.yaml")
    for cluster in config.clusters:
        for host in cluster.hosts:
            assert host.flavour == "mariabackup" or not host.restore_test, (
                f"fleet.docker.yaml: {cluster.name}/{host.name} is {host.flavour} with restore_test on"
            )
