"""The DBA CLI works with Airflow down: backup, list, restore, keygen, and clear errors (also when the
S3 endpoint is down, the bucket is missing, there are no credentials or the host lock is held)."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from helpers import add_orders, cli, restored_checksums, seed_database, unique_name
from manifest_factory import CLUSTER, HOST, PREFIX, make_manifest
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import free_port, table_checksums
from xtrabackup_provider.core.engine.tools import detect_tool
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.core.storage.s3 import S3Store


def test_backup_list_restore_round_trip_without_airflow(mariadb, tmp_path):
    db = unique_name("cli")
    seed_database(mariadb, db, rows=1000)
    keys = tmp_path / "keys"
    passphrase = {"XTRABACKUP_GPG_PASSPHRASE": "correct horse battery"}
    assert (
        cli(
            "keygen", "--uid", "CLI test <cli@example.invalid>", "--out-dir", str(keys), env=passphrase
        ).returncode
        == 0
    )
    assert oct((keys / "private.asc").stat().st_mode & 0o777) == "0o600"
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "encryption": {
                    "public_key_files": [str(keys / "public.asc")],
                    "private_key_file": str(keys / "private.asc"),
                },
                "policy": {"max_incremental_ratio": 10.0},
                "clusters": [
                    {
                        "name": "c1",
                        "hosts": [
                            {
                                "name": "db1",
                                "defaults_file": str(mariadb.write_client_defaults(tmp_path / "client.cnf")),
                            }
                        ],
                    }
                ],
            }
        )
    )
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    first = cli("backup", *common)
    assert first.returncode == 0, first.stderr
    add_orders(mariadb, db, 400)
    second = cli("backup", *common)
    assert second.returncode == 0, second.stderr
    assert "\tincremental\t" in second.stdout
    listing = json.loads(cli("list", *common, "--json").stdout)
    assert [b["kind"] for b in listing["backups"]] == ["full", "incremental"]
    expected = table_checksums(mariadb, [db])

    target = tmp_path / "restored" / "data"
    restored = cli("restore", *common, "--target-datadir", str(target), "--create-parents", env=passphrase)
    assert restored.returncode == 0, restored.stderr
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=990) == expected

    again = cli("restore", *common, "--target-datadir", str(target), env=passphrase)
    assert again.returncode == 2 and "not an empty directory" in again.stderr


def test_bad_config_and_unknown_host_are_clear_errors(tmp_path):
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump({"storage": {"bucket": "b", "local_path": "/x"}, "clusters": []}))
    proc = cli("list", "--config", str(config), "--cluster", "c", "--host", "h")
    assert proc.returncode == 2
    assert str(config) in proc.stderr and "storage" in proc.stderr and "clusters" in proc.stderr
    good = tmp_path / "good.yaml"
    good.write_text(
        yaml.safe_dump(
            {"storage": {"local_path": str(tmp_path)}, "clusters": [{"name": "c", "hosts": [{"name": "h"}]}]}
        )
    )
    proc = cli("list", "--config", str(good), "--cluster", "c", "--host", "nope")
    assert proc.returncode == 2 and "cluster 'c' has no host 'nope'" in proc.stderr
    proc = cli(
        "restore",
        "--local-path",
        str(tmp_path / "empty"),
        "--cluster",
        "c",
        "--host",
        "h",
        "--target-datadir",
        str(tmp_path / "t"),
    )
    assert proc.returncode == 2 and "no backups at" in proc.stderr
    assert not Path(tmp_path / "t").exists()


# -- an unreachable endpoint, a missing bucket, no credentials, a held host lock ----------------------

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _s3_fleet(tmp_path: Path, bucket: str, endpoint: str, gpg_keys) -> Path:
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    key.chmod(0o600)
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"bucket": bucket, "endpoint_url": endpoint, "prefix": PREFIX},
                "encryption": {"private_key_file": str(key)},
                "retention": {"keep_last_chains": 1, "min_age_days": 0},
                "clusters": [{"name": CLUSTER, "hosts": [{"name": HOST}]}],
            }
        )
    )
    return config


def _read_commands(config: Path, tmp_path: Path) -> dict[str, list[str]]:
    common = ["--config", str(config), "--cluster", CLUSTER, "--host", HOST]
    return {
        "list": ["list", *common],
        "verify": ["verify", *common],
        "restore": ["restore", *common, "--target-datadir", str(tmp_path / "restored")],
        "retention plan": ["retention", "plan", *common],
        "binlogs list": ["binlogs", "list", *common],
    }


def _run_all(
    commands: dict[str, list[str]], env: dict[str, str]
) -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(len(commands)) as pool:  # the client retries a refused connection for a while
        futures = {name: pool.submit(cli, *argv, env=env) for name, argv in commands.items()}
        return {name: f.result() for name, f in futures.items()}


def _one_error_line(name: str, proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, f"{name}: exit {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, f"{name} printed a traceback:\n{proc.stderr}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), f"{name}:\n{proc.stderr}"
    return errors[0]


def test_read_commands_with_the_endpoint_down_say_which_endpoint_and_what_to_check(tmp_path, gpg_keys):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused
    config = _s3_fleet(tmp_path, "xbp-backups", endpoint, gpg_keys)
    for name, proc in _run_all(_read_commands(config, tmp_path), S3_ENV).items():
        line = _one_error_line(name, proc)
        assert f"bucket 'xbp-backups' at {endpoint}" in line, f"{name}: {line}"
        assert "check the endpoint URL (storage.endpoint_url or --endpoint-url)" in line, f"{name}: {line}"
    assert not (tmp_path / "restored").exists()


def test_read_commands_on_a_missing_bucket_or_without_credentials_say_what_to_check(
    s3_server, tmp_path, gpg_keys, monkeypatch
):
    missing = unique_name("xbp-missing").replace("_", "-")
    config = _s3_fleet(tmp_path, missing, s3_server.endpoint_url, gpg_keys)
    commands = _read_commands(config, tmp_path)
    for name, proc in _run_all(commands, S3_ENV).items():
        line = _one_error_line(name, proc)
        assert f"There is no bucket '{missing}' at {s3_server.endpoint_url}" in line, f"{name}: {line}"
        assert "check the bucket name (storage.bucket or --bucket)" in line, f"{name}: {line}"

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    nowhere = str(tmp_path / "absent")
    no_credentials = {
        "AWS_CONFIG_FILE": nowhere,
        "AWS_SHARED_CREDENTIALS_FILE": nowhere,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    line = _one_error_line("list", cli(*commands["list"], env=no_credentials))
    assert f"No usable S3 credentials for bucket '{missing}'" in line, line
    assert "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in line, line
    assert not (tmp_path / "restored").exists()


def test_retention_apply_while_a_backup_holds_the_host_lock_deletes_nothing_and_names_the_holder(
    s3_server, bucket, tmp_path, gpg_keys
):
    config = _s3_fleet(tmp_path, bucket, s3_server.endpoint_url, gpg_keys)
    catalog = Catalog(S3Store(s3_server.client(), bucket), PREFIX, CLUSTER, HOST)
    old = make_manifest("20261101T000000Z-full")
    new = make_manifest("20261108T000000Z-full")
    for m in (old, new):
        catalog.store.put_bytes(m.backup_object.key, b"x" * m.backup_object.size)
        catalog.write(m)
    lock = f"{catalog.host_prefix}/{LOCK_NAME}"
    holder = {
        "token": "0" * 32,
        "owner": f"xtrabackup-provider backup of {CLUSTER}/{HOST}",
        "hostname": "worker-7.example.internal",
        "pid": 4242,
        "acquired_at": datetime.now(UTC).isoformat(),
        "expires_at": (datetime.now(UTC) + timedelta(minutes=5)).isoformat(),
    }
    catalog.store.put_bytes(lock, json.dumps(holder).encode())
    before = {i.key for i in catalog.store.list(f"{PREFIX}/")}
    apply = ["retention", "apply", "--config", str(config), "--cluster", CLUSTER, "--host", HOST, "--confirm"]

    line = _one_error_line("retention apply", cli(*apply, env=S3_ENV))
    assert (
        f"retention of {CLUSTER}/{HOST} cannot start: another backup of {CLUSTER}/{HOST} is running" in line
    )
    assert "worker-7.example.internal (pid 4242)" in line and "Nothing was deleted" in line, line
    assert {i.key for i in catalog.store.list(f"{PREFIX}/")} == before

    catalog.store.delete([lock])  # the backup is over
    done = cli(*apply, env=S3_ENV)
    assert done.returncode == 0, done.stderr
    assert "deleted 1 item(s)" in done.stdout
    assert catalog.backup_ids() == [new.backup_id]
    assert not [i.key for i in catalog.store.list(f"{PREFIX}/") if old.backup_id in i.key or i.key == lock]


# -- messages a user can act on ------------------------------------------------------------------------


def _one_line_config(tmp_path: Path, **over) -> Path:
    config = tmp_path / "fleet.yaml"
    body = {
        "storage": {"local_path": str(tmp_path / "store")},
        "clusters": [{"name": CLUSTER, "hosts": [{"name": HOST}]}],
    }
    body.update(over)
    config.write_text(yaml.safe_dump(body))
    return config


def test_a_restore_without_the_passphrase_variable_says_which_variable_to_set(
    tmp_path, gpg_keys, monkeypatch
):
    monkeypatch.delenv("XTRABACKUP_GPG_PASSPHRASE", raising=False)
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    catalog = Catalog(LocalStore(str(tmp_path / "store")), PREFIX, CLUSTER, HOST)
    tool = detect_tool("mariabackup")  # the chain is of this worker's series (10.11, or 11.8's suite's)
    manifest = make_manifest(
        "20261101T000000Z-full",
        engine_flavour="mariabackup",
        engine_version=tool.text,
        engine_major=tool.major,
    )
    body = manifest.model_dump()
    body["objects"][0].update(
        key=body["objects"][0]["key"] + ".gpg", encryption="gpg", recipients=[gpg_keys.fingerprint]
    )
    manifest = Manifest.model_validate(body)
    catalog.store.put_bytes(manifest.backup_object.key, b"x" * manifest.backup_object.size)
    catalog.write(manifest)
    config = _one_line_config(tmp_path, storage={"local_path": str(tmp_path / "store"), "prefix": PREFIX})
    target = tmp_path / "restored"
    line = _one_error_line(
        "restore",
        cli(
            "restore",
            "--config",
            str(config),
            "--cluster",
            CLUSTER,
            "--host",
            HOST,
            "--target-datadir",
            str(target),
            "--private-key-file",
            str(key),
        ),
    )
    assert line.startswith("error: XTRABACKUP_GPG_PASSPHRASE is not set"), line
    assert gpg_keys.fingerprint in line and "does not unlock" not in line, line
    assert not target.exists()


def test_a_config_error_is_one_line_naming_the_file_and_every_field(tmp_path):
    config = _one_line_config(tmp_path, policy={"compression_level": 99, "full_every_days": -1})
    line = _one_error_line("list", cli("list", "--config", str(config), "--cluster", CLUSTER, "--host", HOST))
    assert line.startswith(f"error: {config}: invalid fleet config: policy.compression_level: "), line
    assert "policy.full_every_days: " in line, line


def test_a_target_datadir_without_its_parent_is_refused_unless_asked_to_create_it(tmp_path):
    target = tmp_path / "no" / "such" / "data"
    flags = ["--local-path", str(tmp_path / "store"), "--cluster", CLUSTER, "--host", HOST]
    line = _one_error_line("restore", cli("restore", *flags, "--target-datadir", str(target)))
    assert f"--target-datadir {target}: its parent {target.parent} does not exist" in line, line
    assert "--create-parents" in line and not (tmp_path / "no").exists(), line
    line = _one_error_line(
        "restore", cli("restore", *flags, "--target-datadir", str(target), "--create-parents")
    )
    assert "no backups at" in line, line  # past the check: asked to create the parents


def test_the_cli_prints_no_botocore_chatter_unless_verbose(s3_server, bucket):
    flags = [
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
        "--cluster",
        CLUSTER,
        "--host",
        HOST,
    ]
    quiet = cli("list", *flags, env=S3_ENV)
    assert quiet.returncode == 0, quiet.stderr
    assert "Found credentials" not in quiet.stderr and "botocore" not in quiet.stderr, quiet.stderr
    verbose = cli("-v", "list", *flags, env=S3_ENV)
    # boto3 gets the keys from the CLI (held out of its environment): its DEBUG lines, not "Found credentials"
    assert verbose.returncode == 0 and "DEBUG" in verbose.stderr and "botocore" in verbose.stderr, (
        verbose.stderr
    )


def test_without_config_the_cli_reads_fleet_yaml_in_airflows_dags_folder(tmp_path, monkeypatch):
    """The default the DAG files use (fleet.yaml next to them), found from Airflow's own settings:
    $AIRFLOW__CORE__DAGS_FOLDER, else airflow.cfg's dags_folder, else $AIRFLOW_HOME/dags."""
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    store = tmp_path / "store"
    backup = make_manifest("20261101T000000Z-full")
    local = LocalStore(store)
    for obj in backup.objects:
        local.put_bytes(obj.key, b"x" * obj.size)
    Catalog(local, PREFIX, CLUSTER, HOST).write(backup)
    fleet = yaml.safe_dump(
        {
            "storage": {"local_path": str(store), "prefix": PREFIX},
            "clusters": [{"name": CLUSTER, "hosts": [{"name": HOST}]}],
        }
    )
    home = tmp_path / "airflow"
    listing = ["list", "--cluster", CLUSTER, "--host", HOST]

    (home / "dags").mkdir(parents=True)
    (home / "dags" / "fleet.yaml").write_text(fleet)
    done = cli(*listing, env={"AIRFLOW_HOME": str(home)})
    assert done.returncode == 0 and backup.backup_id in done.stdout, done.stderr

    (home / "airflow.cfg").write_text("[core]\ndags_folder = {AIRFLOW_HOME}/team-dags\n")
    done = cli(*listing, env={"AIRFLOW_HOME": str(home)})
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip() == (
        f"error: {home / 'team-dags' / 'fleet.yaml'}: no fleet config there (the default: fleet.yaml next to the "
        "DAG files); write it there, or name another file with $XTRABACKUP_FLEET_CONFIG (the CLI: --config)"
    )
    (home / "dags").rename(home / "team-dags")
    done = cli(*listing, env={"AIRFLOW_HOME": str(home)})
    assert done.returncode == 0 and backup.backup_id in done.stdout, done.stderr

    elsewhere = tmp_path / "mounted-dags"
    (home / "team-dags").rename(elsewhere)
    done = cli(*listing, env={"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(elsewhere)})
    assert done.returncode == 0 and backup.backup_id in done.stdout, done.stderr
