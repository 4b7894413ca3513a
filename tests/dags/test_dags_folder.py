"""A user's dags folder as the docs set it up: `xtrabackup-provider install-dags` writes the short
DAG files, the fleet config sits next to them, and Airflow's own DagBag parses the folder with
no $XTRABACKUP_FLEET_CONFIG. Bad input is an import error that names the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dag_helpers import DAGS

from xtrabackup_provider.cli import main
from xtrabackup_provider.cli.install import DAG_FILES

FLEET = {
    "storage": {"local_path": "/srv/backups"},
    "clusters": [
        {
            "name": "shop",
            "binlogs": {"schedule": "*/5 * * * *"},
            "checksum": {"source": "db1"},
            "hosts": [
                {"name": "db1", "mysql_conn_id": "mysql_db1"},
                {"name": "db2", "mysql_conn_id": "mysql_db2"},
            ],
        }
    ],
}
SHOP_DAGS = {
    "mysql_backup_shop",
    "mysql_backup_check_shop",
    "mysql_binlog_shipping_shop",
    "mysql_restore_test_shop",
    "mysql_table_checksum_shop",
    "mysql_table_restore_shop",
}


@pytest.fixture
def dags_folder(tmp_path, monkeypatch) -> Path:
    """An empty dags folder, and no $XTRABACKUP_FLEET_CONFIG."""
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    folder = tmp_path / "dags"
    folder.mkdir()
    assert main(["install-dags", "--dags-folder", str(folder)]) == 0
    return folder


def _parse(folder: Path):
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag

    return DagBag(str(folder))


def _last_lines(bag) -> dict[str, str]:
    return {Path(path).name: text.strip().splitlines()[-1] for path, text in bag.import_errors.items()}


def test_the_repository_dags_are_what_install_dags_writes(dags_folder):
    written = {p.name: p.read_text() for p in dags_folder.glob("*.py")}
    assert set(written) == set(DAG_FILES)
    assert {p.name: p.read_text() for p in DAGS.glob("*.py")} == written
    assert all(len(text.splitlines()) <= 12 for text in written.values()), "a DAG file stays a few lines"


def test_a_dags_folder_with_the_config_next_to_the_files_parses_without_the_variable(dags_folder):
    (dags_folder / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    bag = _parse(dags_folder)
    assert bag.import_errors == {}
    assert set(bag.dags) == SHOP_DAGS
    for dag in bag.dags.values():
        assert Path(dag.fileloc).parent == dags_folder, (dag.dag_id, dag.fileloc)


def test_a_dags_folder_without_a_config_names_the_file_to_write(dags_folder):
    bag = _parse(dags_folder)
    assert bag.dags == {}
    lines = _last_lines(bag)
    assert set(lines) == set(DAG_FILES)
    expected = f"{dags_folder / 'fleet.yaml'}: no fleet config there"
    assert all(expected in line for line in lines.values()), lines


def test_a_config_variable_naming_a_missing_file_names_it_and_the_variable(
    dags_folder, monkeypatch, tmp_path
):
    (dags_folder / "fleet.yaml").write_text(yaml.safe_dump(FLEET))  # the variable wins over it
    missing = tmp_path / "etc" / "fleet.yaml"
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(missing))
    lines = _last_lines(_parse(dags_folder))
    assert set(lines) == set(DAG_FILES)
    line = lines["mysql_backup.py"]
    assert f"{missing} (from $XTRABACKUP_FLEET_CONFIG): cannot read the fleet config: No such file" in line, (
        line
    )


def test_an_unknown_key_names_the_file_and_the_field(dags_folder):
    bad = FLEET | {"storage": {"local_path": "/srv/backups", "buket": "x"}}
    (dags_folder / "fleet.yaml").write_text(yaml.safe_dump(bad))
    lines = _last_lines(_parse(dags_folder))
    assert set(lines) == set(DAG_FILES)
    line = lines["mysql_restore_test.py"]
    assert (
        f"{dags_folder / 'fleet.yaml'}: invalid fleet config: storage.buket: Extra inputs are not permitted"
        in line
    )


def test_install_dags_keeps_a_file_it_did_not_write_unless_forced(dags_folder, capsys):
    own = dags_folder / "mysql_backup.py"
    own.write_text("# my own backup DAG\n")
    assert main(["install-dags", "--dags-folder", str(dags_folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {own} exists and was not written by install-dags") and "\n" not in err
    assert own.read_text() == "# my own backup DAG\n"
    assert main(["install-dags", "--dags-folder", str(dags_folder), "--force"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {own}" in out and f"unchanged {dags_folder / 'mysql_table_restore.py'}" in out
    assert own.read_text() == (DAGS / "mysql_backup.py").read_text()
