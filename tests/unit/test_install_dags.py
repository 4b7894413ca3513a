"""install-dags never writes through a link in the dags folder (issue 38 item 10).

A link named like a shipped DAG file was put there by someone (a deployment tool linking DAGs from
elsewhere, or someone steering the write to another file): install-dags refuses it by name, as it
refuses a file it did not write, and `--force` replaces the link itself by a regular file. Nothing
is ever written where a link points.

Before the fix: install-dags wrote the DAG through the dangling link (creating its target) and
through a link to a copy elsewhere (rewriting it), exit 0, and hung reading a FIFO of that name.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xtrabackup_provider.cli import main
from xtrabackup_provider.cli.install import DAG_FILES, dag_file_text


def _install(folder: Path, *extra: str) -> int:
    return main(["install-dags", "--dags-folder", str(folder), *extra])


@pytest.fixture
def folder(tmp_path) -> Path:
    (tmp_path / "dags").mkdir()
    (tmp_path / "other").mkdir()
    return tmp_path / "dags"


def test_a_dangling_link_named_like_a_dag_file_is_refused_by_name_and_never_written_through(
    folder, tmp_path, capsys
):
    elsewhere = tmp_path / "other" / "path.py"
    link = folder / "mysql_backup.py"
    link.symlink_to(elsewhere)

    assert _install(folder) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {link} is a symbolic link (to {elsewhere})") and "\n" not in err, err
    assert "--force" in err
    assert not elsewhere.exists(), "install-dags wrote through the link"
    assert link.is_symlink() and [p.name for p in folder.iterdir()] == [link.name], "written when refused"

    assert _install(folder, "--force") == 0
    assert not elsewhere.exists(), "install-dags wrote through the link"
    assert not link.is_symlink() and link.is_file() and link.read_text() == dag_file_text(link.name)
    assert sorted(p.name for p in folder.iterdir()) == sorted(DAG_FILES), "a temp file was left"


def test_a_link_to_an_installed_copy_elsewhere_is_replaced_only_when_forced(folder, tmp_path, capsys):
    elsewhere = tmp_path / "other" / "mysql_restore_test.py"
    elsewhere.write_text(dag_file_text("mysql_restore_test.py").replace("restore tests", "old"))
    before = elsewhere.read_text()
    link = folder / "mysql_restore_test.py"
    link.symlink_to(elsewhere)

    assert _install(folder) == 2
    assert f"error: {link} is a symbolic link" in capsys.readouterr().err
    assert _install(folder, "--force") == 0
    assert elsewhere.read_text() == before, "install-dags wrote through the link"
    assert not link.is_symlink() and link.read_text() == dag_file_text(link.name)


def test_something_else_than_a_file_named_like_a_dag_file_is_refused_even_when_forced(folder, capsys):
    fifo = folder / "mysql_backup.py"
    os.mkfifo(fifo)  # reading it would block: install-dags never opens it
    for extra in ((), ("--force",)):
        assert _install(folder, *extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {fifo} is not a regular file") and "\n" not in err, err
    assert [p.name for p in folder.iterdir()] == [fifo.name]


def test_the_files_get_the_mode_of_any_file_the_user_writes(folder, tmp_path):
    """Written by temp file and rename, still readable by Airflow as a plain write made them."""
    (tmp_path / "plain.py").write_text("x")
    assert _install(folder) == 0
    plain = (tmp_path / "plain.py").stat().st_mode
    assert {(folder / name).stat().st_mode for name in DAG_FILES} == {plain}
