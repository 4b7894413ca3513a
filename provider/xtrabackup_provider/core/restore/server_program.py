"""The server program a restore test or a replay starts on a restored datadir must be able to stand
in for the server the backup was taken from: checked before anything is downloaded."""

from __future__ import annotations

import shutil

from ..catalog.manifest import Manifest
from ..common import children
from ..db.dialect import Dialect, dialect_for


class ServerProgramError(RuntimeError):
    """This host's server program cannot open the backup's datadir as its server would."""


def backup_dialect(manifest: Manifest) -> Dialect:
    """The restored copy's server family, from the engine (a clone is MySQL's) and the server version."""
    fallback = "10.11.0-MariaDB" if manifest.engine_flavour == "mariabackup" else "8.4.0"
    try:
        found = dialect_for(manifest.server_version or fallback)
    except ValueError:  # a version text it cannot read: the engine says the family
        return dialect_for(fallback)
    return found if found.is_mariadb == (manifest.engine_flavour == "mariabackup") else dialect_for(fallback)


def check_server_program(manifest: Manifest) -> None:
    """Refuse, in one line naming both versions, a host whose server program (the family's own,
    first on PATH) is of the other family or an older series than the backup's server."""
    dialect = backup_dialect(manifest)
    program = shutil.which(dialect.server_program)
    if program is None:
        raise ServerProgramError(
            f"backup {manifest.backup_id} is of {dialect.name} and this host has no {dialect.server_program} on "
            f"PATH: install the server of {dialect.name.rsplit('.', 1)[0]} or newer"
        )
    problem = dialect.server_program_problem(program, _version_output(program))
    if problem:
        raise ServerProgramError(f"backup {manifest.backup_id}: {problem}")


def _version_output(program: str) -> str:
    proc = children.run([program, "--no-defaults", "--version"], capture_output=True, text=True, timeout=60)
    return f"{proc.stdout}{proc.stderr}"
