"""What an account may do, read from a server's grant tables by another account (SHOW GRANTS FOR):
to refuse, before hours of work, an account that a later step needs and that lacks a privilege.

Accounts are `user@host` patterns; which one a client gets depends on where it connects from.
`matching_accounts` picks, as the server does, the most specific host pattern that matches one
of the names the client's address goes by (a socket or a loopback connection is `localhost`).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .server import MySQLTarget, connection

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

_GLOBAL_GRANT = re.compile(r"^GRANT (.+?) ON \*\.\* TO ", re.S)
_ROLE_GRANT = re.compile(r"^GRANT `?[^`\s]+`? TO ", re.S)  # GRANT role TO user: no ON clause


@dataclass(frozen=True)
class AccountGrants:
    user: str
    host: str  # the host pattern of the account the client gets
    privileges: frozenset[str]  # global (ON *.*), upper case; "ALL PRIVILEGES" stands for every one
    roles: bool  # it has roles: privileges may come from them too

    @property
    def account(self) -> str:
        return f"{self.user}@{self.host}"

    def has(self, privilege: str) -> bool:
        return "ALL PRIVILEGES" in self.privileges or privilege in self.privileges


def client_hosts(target: MySQLTarget) -> list[str]:
    """The names a server may see this client by: `localhost` for a socket or loopback, and the address."""
    if target.socket or target.host in (None, "", "localhost"):
        return ["localhost"]
    names = [str(target.host)]
    if target.host in ("127.0.0.1", "::1"):
        names.append("localhost")  # with name resolution on, the server sees the loopback as localhost
    return names


def _matches(pattern: str, name: str) -> bool:
    if "/" in pattern:  # ip/netmask
        try:
            return ipaddress.ip_address(name) in ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return False
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.I) is not None


def _specificity(pattern: str) -> tuple[int, int]:
    wild = pattern in ("", "%") or "%" in pattern or "_" in pattern
    return (0 if not wild else 1, -len(pattern.replace("%", "")))


def matching_accounts(hosts: Iterable[str], names: Sequence[str]) -> list[str]:
    """The account host patterns matching any of `names`, most specific first."""
    found = [h for h in hosts if any(_matches(h, n) for n in names)]
    return sorted(found, key=_specificity)


def parse_grants(user: str, host: str, lines: Iterable[str]) -> AccountGrants:
    privileges: set[str] = set()
    roles = False
    for line in lines:
        match = _GLOBAL_GRANT.match(line)
        if match:
            privileges |= {p.strip().upper() for p in match.group(1).split(",")}
        elif _ROLE_GRANT.match(line):
            roles = True
    return AccountGrants(user, host, frozenset(privileges), roles)


class GrantsUnreadable(RuntimeError):
    """The reading account may not see the grant tables (nothing can be said)."""


def account_grants(reader: MySQLTarget | Session, user: str, names: Sequence[str]) -> AccountGrants | None:
    """The grants of the account `user` gets when connecting as one of `names`, read on `reader`'s
    server; None when no account matches. GrantsUnreadable when `reader` may not read them."""
    import MySQLdb

    with connection(reader) as conn:
        cur = conn.cursor()
        try:
            cur.execute("SELECT Host FROM mysql.user WHERE User = %s", (user,))
            hosts = matching_accounts([str(r[0]) for r in cur.fetchall()], names)
            if not hosts:
                return None
            cur.execute("SHOW GRANTS FOR %s@%s", (user, hosts[0]))
            return parse_grants(user, hosts[0], [str(r[0]) for r in cur.fetchall()])
        except MySQLdb.Error as exc:
            raise GrantsUnreadable(
                f"{reader.user} on {reader.address} cannot read the grant tables: {exc}"
            ) from exc
