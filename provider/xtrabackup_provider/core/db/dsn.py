"""Names pt-table-checksum takes, validated: `database.table`, database names, replica DSNs
(never a password). Pure: the config schema uses these validators.
"""

from __future__ import annotations

import re

DEFAULT_REPLICATE = "percona.checksums"
DEFAULT_DSN_TABLE = "percona.dsns"
TABLE_RE = re.compile(r"^[A-Za-z0-9_$]{1,64}\.[A-Za-z0-9_$]{1,64}$")
NAME_RE = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")


def check_table_name(value: str, what: str) -> str:
    if not TABLE_RE.match(value):
        raise ValueError(f"{what} must be `database.table` (letters, digits, _ or $), not {value!r}")
    return value


def check_database_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise ValueError(f"database name {name!r} is not valid for pt-table-checksum filters")
    return name


def check_dsn(dsn: str) -> str:
    """A replica DSN for the dsn table: `h=host,P=port` (or `S=socket`); never a password.

    Credentials reach replicas through the defaults file (`F=`) that pt-table-checksum copies
    from the source's DSN, so the dsn table holds no secret.
    """
    parts: dict[str, str] = {}
    for part in dsn.split(","):
        key, eq, value = part.partition("=")
        if not eq or key not in ("h", "P", "S", "F", "u", "A") or not value or value != value.strip():
            raise ValueError(
                f"replica DSN {dsn!r}: each part is key=value with key h, P, S, F, u or A "
                "(e.g. 'h=10.0.0.12,P=3306'); passwords (p=) are not allowed, use a defaults file"
            )
        parts[key] = value
    if "h" not in parts and "S" not in parts:
        raise ValueError(f"replica DSN {dsn!r} names no host (h=) or socket (S=)")
    if "P" in parts and not parts["P"].isdigit():
        raise ValueError(f"replica DSN {dsn!r}: port P={parts['P']!r} is not a number")
    return dsn


def quote_table(name: str) -> str:
    db, table = check_table_name(name, "table").split(".")
    return f"`{db}`.`{table}`"
