"""Which tables a logged statement names, for `binlogs events --table / --schema`.

A filter that hides the damaging statement is worse than no filter, so this reads every table a
statement names, not its first: the list of a DROP TABLE, both sides of each RENAME pair, the
table of a TRUNCATE with or without TABLE, the tables of a multi-table DELETE / UPDATE (their
FROM, USING and JOIN lists, subqueries included), ALTER TABLE ... RENAME TO and EXCHANGE
PARTITION ... WITH TABLE, CREATE TABLE ... LIKE / SELECT, INSERT ... SELECT, foreign key
REFERENCES, and the schema of CREATE / DROP / ALTER DATABASE. Names without a schema are the
session's current database at that statement (the Query event's `db`).

A statement this cannot read for sure (an unknown kind, a name where none can be, a CALL, a
statement cut at the size read) is `Unparsed`: the listing shows it whatever a table filter says,
marked as such. So is one that calls a stored function (`SELECT f()`, `INSERT INTO a VALUES (f())`,
`UPDATE a SET x = db.f()`): the function may write any table; its kind then may be any DML too.

Its kind is the statement's own, wherever its first word is: after `SET STATEMENT ... FOR`, inside
`/*!40005 ... */`, after a WITH list. A kind that cannot be read is None: no --kind hides it.

Tokens follow the statement's sql_mode (the Query event's): under ANSI_QUOTES "x" is an
identifier, under NO_BACKSLASH_ESCAPES a backslash in a string is a character; with IGNORE_SPACE a
blank between a function name and "(" changes nothing. A statement whose sql_mode is not known is
read under each: every table any reading finds counts, and a reading that fails makes it Unparsed.

A small tokenizer (identifiers, `quoted`, strings, comments, MariaDB's executable comments:
every `/*!` or `/*M!` left in a binlog is code, the server logs those it skipped as `/* 50700`),
then a reader per statement kind; no SQL grammar beyond what names tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .sql_words import NOT_ROUTINES, SPACED_ROUTINES

# sql_mode bits (the same in MariaDB and MySQL) that change how a statement is tokenized.
ANSI_QUOTES = 1 << 2
IGNORE_SPACE = 1 << 3
NO_BACKSLASH_ESCAPES = 1 << 20
# The readings of a statement whose sql_mode is not known (IGNORE_SPACE off: more calls are
# stored functions then).
_ANY_MODE = (0, ANSI_QUOTES, NO_BACKSLASH_ESCAPES, ANSI_QUOTES | NO_BACKSLASH_ESCAPES)
# What a stored function may do (never DDL: a function cannot commit).
ROUTINE_KINDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE"})


class Unparsed(ValueError):
    """The statement's tables cannot be told for sure."""


class MayWrite(Unparsed):
    """It calls a stored function (or is a SELECT / DO / SET logged because one wrote)."""


@dataclass(frozen=True)
class Tok:
    kind: str  # word, ident (`quoted`), string, number, var, punct
    text: str  # the identifier (unquoted) for word / ident; the character for punct
    depth: int = 0  # parentheses open before it
    spaced: bool = False  # a blank or a comment right before it


_WORD = re.compile(r"[0-9A-Za-z_$\u0080-\uffff]+")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?$")
_VAR = re.compile(r"@@?(?:[\w$.]+|`(?:[^`]|``)*`|'(?:[^']|'')*')?")


def tokens(text: str, sql_mode: int = 0, *, strict: bool = True) -> list[Tok]:
    """The statement as tokens; comments dropped, executable comments (`/*!50001 ... */`) kept as code.

    Quotes and backslashes as `sql_mode` says. Not `strict`: the tokens up to where the text stops
    making sense (a statement read in part), instead of Unparsed."""
    out: list[Tok] = []
    i, n, depth, executable, spaced = 0, len(text), 0, 0, False
    backslash = not sql_mode & NO_BACKSLASH_ESCAPES
    idents = '`"' if sql_mode & ANSI_QUOTES else "`"

    def add(kind: str, value: str, at: int) -> None:
        nonlocal spaced
        out.append(Tok(kind, value, at, spaced))
        spaced = False

    try:
        while i < n:
            c = text[i]
            if c.isspace():
                i += 1
                spaced = True
            elif text.startswith("/*", i):
                spaced = True
                m = re.match(r"/\*M?!\d*", text[i:])
                if m:  # executable comment: its content is code
                    executable += 1
                    i += m.end()
                    continue
                end = text.find("*/", i + 2)
                if end < 0:
                    raise Unparsed("an unterminated comment")
                i = end + 2
            elif text.startswith("*/", i) and executable:
                executable -= 1
                i += 2
                spaced = True
            elif c == "#" or (text.startswith("--", i) and (i + 2 == n or text[i + 2].isspace())):
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
                spaced = True
            elif c in idents:
                value, i = _quoted(text, i, c)
                add("ident", value, depth)
            elif c in "'\"":
                value, i = _quoted(text, i, c, backslash=backslash)
                add("string", value, depth)
            elif c == "@":
                m = _VAR.match(text, i)
                assert m is not None  # "@" alone matches
                add("var", m.group(), depth)
                i = m.end()
            elif m := _WORD.match(text, i):
                word = m.group()
                add("number" if _NUMBER.match(word) else "word", word, depth)
                i = m.end()
            else:
                if c == "(":
                    add("punct", c, depth)
                    depth += 1
                elif c == ")":
                    if depth == 0:
                        raise Unparsed("unbalanced parentheses")
                    depth -= 1
                    add("punct", c, depth)
                else:
                    add("punct", c, depth)
                i += 1
        if depth:
            raise Unparsed("unbalanced parentheses")
    except Unparsed:
        if strict:
            raise
    return out


def _quoted(text: str, i: int, quote: str, backslash: bool = False) -> tuple[str, int]:
    """The value of a quoted token starting at `i` (doubled quotes; backslash escapes in strings)."""
    j, value = i + 1, []
    while j < len(text):
        c = text[j]
        if backslash and c == "\\" and j + 1 < len(text):
            value.append(text[j + 1])
            j += 2
        elif c == quote and text.startswith(quote * 2, j):
            value.append(quote)
            j += 2
        elif c == quote:
            return "".join(value), j + 1
        else:
            value.append(c)
            j += 1
    raise Unparsed(f"an unterminated {quote}")


@dataclass(frozen=True)
class Name:
    schema: str | None  # None: the session's current database
    table: str
    whole_schema: bool = False  # every table of the schema (DROP DATABASE): shown as schema.*

    def qualified(self, default: str) -> str:
        """schema.table; without a schema and without a current database, the bare name."""
        schema = self.schema if self.schema is not None else default
        table = "*" if self.whole_schema else self.table
        return f"{schema}.{table}" if schema else table

    def resolved(self, default: str) -> Name:
        """With the session's database for its schema (None still when there was none)."""
        return self if self.schema is not None else Name(default or None, self.table, self.whole_schema)

    def named_by(self, want: str) -> bool:
        """Whether `want` (`schema.table`, or `table` in any schema) may mean this table, without
        regard to case: a name may hold dots, so every split of `want` at a dot is tried, and a
        table without a known schema, or a whole schema, matches more. A filter must
        rather list too much than hide a statement."""
        table, schema = self.table.casefold(), None if self.schema is None else self.schema.casefold()
        want = want.casefold()
        splits: list[tuple[str | None, str]] = [
            (want[:i], want[i + 1 :]) for i, c in enumerate(want) if c == "."
        ]
        splits = splits or [(None, want)]
        for w_schema, w_table in splits:
            if schema is not None and w_schema is not None and w_schema != schema:
                continue
            if self.whole_schema or table == w_table:
                return True
        return False


@dataclass
class Named:
    """What a statement names: tables (or whole schemas) and schemas without a table."""

    tables: set[Name] = field(default_factory=set)
    schemas: set[str] = field(default_factory=set)  # named without touching a table (CREATE DATABASE)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words after a table reference that are never its alias.
_NOT_ALIAS = _words(
    "WHERE SET ON USING JOIN INNER LEFT RIGHT CROSS NATURAL STRAIGHT_JOIN FULL OUTER GROUP ORDER "
    "LIMIT HAVING WINDOW UNION EXCEPT INTERSECT FOR LOCK INTO PARTITION VALUES VALUE SELECT RETURNING "
    "PROCEDURE USE IGNORE FORCE WAIT NOWAIT TO AS LIKE RESTRICT CASCADE ENGINE DEFAULT CHARACTER "
    "CHARSET COLLATE COMMENT ROW_FORMAT REPLACE WITH READ WRITE LOW_PRIORITY"
)
# Words that are not table names where a name is read (the statement is misread then).
_RESERVED = _words(
    "SELECT FROM WHERE SET ON USING JOIN TABLE TABLES INTO VALUES AS IF NOT EXISTS TO WITH LIKE "
    "PARTITION GROUP ORDER LIMIT UNION INNER LEFT RIGHT CROSS NATURAL"
)
_OBJECTS = _words(
    "TABLE TABLES VIEW INDEX TRIGGER SEQUENCE DATABASE SCHEMA USER ROLE PROCEDURE FUNCTION EVENT "
    "SERVER PACKAGE"
)
_NO_TABLES = _words("USER ROLE PROCEDURE FUNCTION EVENT SERVER PACKAGE")
# Statement kinds that name no table (and change no table's rows or definition).
_QUIET = _words(
    "GRANT REVOKE SAVEPOINT RELEASE XA BEGIN COMMIT ROLLBACK START INSTALL UNINSTALL SHUTDOWN KILL "
    "RESET PURGE CHANGE STOP"
)


# Keywords before "(" that never call a function, though a function could have their name.
_SYNTAX_PARENS = _words("AGAINST COLUMNS")


class _Reader:
    def __init__(self, toks: list[Tok], sql_mode: int = 0) -> None:
        self.t = toks
        self.sql_mode = sql_mode
        self.named = Named()
        self.at_names: set[int] = set()  # the tokens read as table names
        # The "(" each token is inside (-1: none).
        self.groups: list[int] = []
        stack = [-1]
        for i, tok in enumerate(toks):
            if tok.kind == "punct" and tok.text == ")":
                stack.pop()
            self.groups.append(stack[-1])
            if tok.kind == "punct" and tok.text == "(":
                stack.append(i)

    def word(self, i: int) -> str:
        return self.t[i].text.upper() if 0 <= i < len(self.t) and self.t[i].kind == "word" else ""

    def punct(self, i: int) -> str:
        return self.t[i].text if 0 <= i < len(self.t) and self.t[i].kind == "punct" else ""

    def ident(self, i: int) -> str | None:
        if i >= len(self.t):
            return None
        tok = self.t[i]
        if tok.kind == "ident" or (tok.kind == "word" and tok.text.upper() not in _RESERVED):
            return tok.text
        return None

    def name(self, i: int) -> tuple[Name, int]:
        """A [schema.]table at `i`; Unparsed when there is none."""
        first = self.ident(i)
        if first is None:
            found = self.t[i].text if i < len(self.t) else "the end"
            raise Unparsed(f"a table name expected, {found!r} found")
        if self.punct(i + 1) == "." and (second := self.ident(i + 2)) is not None:
            self.at_names.update((i, i + 2))
            return Name(first, second), i + 3
        self.at_names.add(i)
        return Name(None, first), i + 1

    def add(self, i: int) -> int:
        name, i = self.name(i)
        self.named.tables.add(name)
        return i

    def names(self, i: int, between: str = ",") -> int:
        """name {, name}: a DROP TABLE list."""
        i = self.add(i)
        while self.punct(i) == between:
            i = self.add(i + 1)
        return i

    def skip(self, i: int, *words: str) -> int:
        while self.word(i) in words:
            i += 1
        return i

    def if_exists(self, i: int) -> int:
        if self.word(i) == "IF" and self.word(i + 1) == "EXISTS":
            return i + 2
        if self.word(i) == "IF" and self.word(i + 1) == "NOT" and self.word(i + 2) == "EXISTS":
            return i + 3
        return i

    def close(self, i: int) -> int:
        """The index after the ")" matching the "(" at `i`."""
        depth = self.t[i].depth
        for j in range(i + 1, len(self.t)):
            if self.t[j].kind == "punct" and self.t[j].text == ")" and self.t[j].depth == depth:
                return j + 1
        raise Unparsed("unbalanced parentheses")

    def calls(self, start: int) -> None:
        """MayWrite when a stored function is called from `start` on: a name before "(" that is no
        table, keyword or native function (sql_words.py), quoted, or qualified (db.f())."""
        for i in range(start, len(self.t) - 1):
            tok = self.t[i]
            if self.punct(i + 1) != "(" or i in self.at_names or tok.kind not in ("word", "ident"):
                continue
            word = tok.text.upper()
            if tok.kind == "word" and self.punct(i - 1) != ".":
                spaced = self.t[i + 1].spaced and not self.sql_mode & IGNORE_SPACE
                if word in _SYNTAX_PARENS or (
                    word in NOT_ROUTINES and not (spaced and word in SPACED_ROUTINES)
                ):
                    continue
            raise MayWrite(f"it calls {tok.text}(), a stored function that may write any table")

    # -- table references (FROM / JOIN / UPDATE / USING lists) -------------------------------------

    def refs(self, i: int) -> int:
        i = self.factor(i)
        while self.punct(i) == ",":
            i = self.factor(i + 1)
        return i

    def factor(self, i: int) -> int:
        if self.punct(i) == "(":
            if self.word(i + 1) in ("SELECT", "WITH", "VALUES") or self.punct(i + 1) == "(":
                i = self.close(i)  # a derived table: its own FROM is read where it stands
            else:
                self.refs(i + 1)  # a parenthesised join
                i = self.close(i)
            return self.alias(i)
        if self.word(i) == "DUAL":
            return i + 1
        i = self.add(i)
        if self.word(i) == "PARTITION" and self.punct(i + 1) == "(":
            i = self.close(i + 1)
        if self.word(i) == "FOR" and self.word(i + 1) == "SYSTEM_TIME":
            raise Unparsed("FOR SYSTEM_TIME in a table reference")
        i = self.alias(i)
        while self.word(i) in ("USE", "IGNORE", "FORCE") and self.word(i + 1) in ("INDEX", "KEY"):
            i += 2
            if self.word(i) == "FOR":
                i = self.skip(i + 1, "JOIN", "ORDER", "GROUP", "BY")
            if self.punct(i) == "(":
                i = self.close(i)
        return i

    def alias(self, i: int) -> int:
        if self.word(i) == "AS":
            return i + 2
        tok = self.t[i] if i < len(self.t) else None
        if tok is not None and (
            tok.kind == "ident" or (tok.kind == "word" and tok.text.upper() not in _NOT_ALIAS)
        ):
            return i + 1
        return i

    def scan(self, start: int, head: str) -> None:
        """Every FROM list of a query, JOIN, REFERENCES and (DELETE) USING list from `start` on, and
        the sequences it advances (NEXTVAL(s), SETVAL(s, n), NEXT VALUE FOR s).

        A FROM counts where its parentheses hold a SELECT (or at the top of a DELETE): not the FROM
        of EXTRACT(YEAR FROM d) or TRIM(... FROM s)."""
        queries = {self.groups[i] for i in range(len(self.t)) if self.word(i) == "SELECT"}
        if head == "DELETE":
            queries.add(-1)
        for i in range(start, len(self.t)):
            w = self.word(i)
            if w == "FROM" and self.groups[i] in queries:
                self.refs(i + 1)
            elif w == "JOIN" or (w == "STRAIGHT_JOIN" and self.word(i - 1) != "SELECT"):
                self.factor(i + 1)
            elif w == "REFERENCES":
                self.add(i + 1)
            elif w == "USING" and head == "DELETE" and self.t[i].depth == 0 and self.punct(i + 1) != "(":
                self.refs(i + 1)
            elif w in ("NEXTVAL", "SETVAL") and self.punct(i + 1) == "(":
                self.add(i + 2)
            elif w == "NEXT" and self.word(i + 1) == "VALUE" and self.word(i + 2) == "FOR":
                self.add(i + 3)


def _object(r: _Reader, i: int) -> tuple[str, int]:
    """After CREATE / DROP / ALTER: the kind of object and where its name starts, skipping
    OR REPLACE, TEMPORARY, ALGORITHM=..., DEFINER=..., SQL SECURITY ..., UNIQUE, ONLINE, IF [NOT] EXISTS."""
    while i < len(r.t):
        w = r.word(i)
        if w in _OBJECTS:
            return w, r.if_exists(i + 1)
        if w == "" and r.t[i].kind not in ("ident", "string", "var", "punct", "number"):
            break
        i += 1
    raise Unparsed("no object keyword")


@dataclass(frozen=True)
class Statement:
    """A logged statement as read: its kind and what it names."""

    kind: str | None  # DROP, TRUNCATE, INSERT, XA (CONTROL_KINDS)...; None: it cannot be told
    named: Named | None  # None: its tables cannot be told (`why`)
    why: str = ""
    routine: bool = False  # it may write through a stored function: any of ROUTINE_KINDS, any table
    also: tuple[str, ...] = ()  # kinds it is too: DROP for CREATE OR REPLACE TABLE / DATABASE / SEQUENCE


def read_statement(text: str, sql_mode: int | None = 0) -> Statement:
    """`text` read as a server with `sql_mode` (None: not known) ran it."""
    if sql_mode is None:
        return _merge([read_statement(text, mode) for mode in _ANY_MODE])
    kind: str | None = None
    try:
        toks = tokens(text, sql_mode)
        kind = _kind(toks, 0)
        r = _Reader(toks, sql_mode)
        _read(r, 0)
    except MayWrite as exc:
        return Statement(kind, None, str(exc), routine=True)
    except Unparsed as exc:  # a SELECT or DO is logged because what it calls writes
        if kind is None:  # the text stops making sense somewhere: its start may still tell
            kind = _kind(tokens(text, sql_mode, strict=False), 0)
        return Statement(kind, None, str(exc), routine=kind in ("SELECT", "DO"))
    return Statement(kind, r.named, also=_also(toks))


def _merge(reads: list[Statement]) -> Statement:
    """One statement read under several sql_modes: every table any reading names; a kind they agree on."""
    kinds = {s.kind for s in reads}
    kind = kinds.pop() if len(kinds) == 1 else None
    routine = any(s.routine for s in reads)
    also = tuple(sorted({a for s in reads for a in s.also}))
    failed = next((s for s in reads if s.named is None), None)
    if failed is not None:
        return Statement(kind, None, f"{failed.why} (its sql_mode is not known)", routine, also)
    named = Named()
    for s in reads:
        assert s.named is not None
        named.tables |= s.named.tables
        named.schemas |= s.named.schemas
    return Statement(kind, named, routine=routine, also=also)


def read_names(text: str, sql_mode: int | None = 0) -> Named:
    """The tables and schemas `text` names; Unparsed when that cannot be told for sure."""
    statement = read_statement(text, sql_mode)
    if statement.named is None:
        raise (MayWrite if statement.routine else Unparsed)(statement.why)
    return statement.named


# Transaction control: a kind only for a transaction that did nothing else (an XA COMMIT).
CONTROL_KINDS = _words("BEGIN COMMIT ROLLBACK XA SAVEPOINT")


def _kind(t: list[Tok], i: int) -> str | None:
    """The kind of the statement starting at token `i`: its first word, past SET STATEMENT ... FOR,
    a WITH list and opening parentheses; None when it cannot be told (cut short, CALL)."""
    start = _start(t, i)
    head = _Reader(t).word(start) if start is not None else ""
    return head if head and head != "CALL" else None  # a procedure may do anything


def _also(t: list[Tok]) -> tuple[str, ...]:
    """DROP for a CREATE OR REPLACE of a table, sequence or database: it drops the one there."""
    start = _start(t, 0)
    r = _Reader(t)
    if start is None or r.word(start) != "CREATE" or r.word(start + 1) != "OR":
        return ()
    try:
        kind, _ = _object(r, start + 1)
    except Unparsed:
        return ()
    return ("DROP",) if kind in ("TABLE", "SEQUENCE", "DATABASE", "SCHEMA") else ()


def _start(t: list[Tok], i: int) -> int | None:
    """Where the statement at token `i` starts: past SET STATEMENT ... FOR, a WITH list, "("."""
    r = _Reader(t)
    while r.punct(i) == "(":
        i += 1
    head = r.word(i)
    if head == "SET" and r.word(i + 1) == "STATEMENT":
        j = next((j for j in range(i + 2, len(t)) if r.word(j) == "FOR" and t[j].depth == t[i].depth), None)
        return None if j is None else _start(t, j + 1)
    if head == "WITH":
        return _after_with(r, i + 1)
    return i


def _after_with(r: _Reader, i: int) -> int | None:
    """WITH [RECURSIVE] name [(columns)] AS (query) [, ...] <statement>: where it starts."""
    i = r.skip(i, "RECURSIVE")
    try:
        while True:
            if r.ident(i) is None:
                return None
            i += 1
            if r.punct(i) == "(":
                i = r.close(i)
            if r.word(i) != "AS" or r.punct(i + 1) != "(":
                return None
            i = r.close(i + 1)
            if r.punct(i) != ",":
                return _start(r.t, i)
            i += 1
    except Unparsed:
        return None


def _read(r: _Reader, start: int) -> None:
    if start >= len(r.t) or r.t[start].kind != "word":
        raise Unparsed("no statement keyword")
    head = r.word(start)
    reader = _READERS.get(head)
    if reader is not None:
        reader(r, start + 1)
    elif head not in _QUIET:
        raise Unparsed(f"{head} statements are not read")


def _drop(r: _Reader, i: int) -> None:
    kind, i = _object(r, i)
    if kind in ("TABLE", "TABLES", "VIEW", "SEQUENCE"):
        i = r.names(i)
        _end(r, r.skip(i, "RESTRICT", "CASCADE", "NOWAIT"))
    elif kind in ("DATABASE", "SCHEMA"):
        schema = r.ident(i)
        if schema is None:
            raise Unparsed("no database name")
        r.named.tables.add(Name(schema, "", whole_schema=True))
    elif kind == "INDEX":
        while r.word(i) != "ON" and i < len(r.t):
            i += 1
        r.add(i + 1)
    elif kind == "TRIGGER" or kind in _NO_TABLES:
        return
    else:
        raise Unparsed(f"DROP {kind}")


def _end(r: _Reader, i: int) -> None:
    """Nothing but WAIT n or a ";" may follow a list of names."""
    if r.word(i) == "WAIT":
        i += 2
    if i < len(r.t) and r.punct(i) != ";":
        raise Unparsed(f"{r.t[i].text!r} after the table names")


def _create(r: _Reader, i: int) -> None:
    or_replace = r.word(i) == "OR"
    kind, i = _object(r, i)
    if kind == "TABLE":
        i = r.add(i)
        if r.word(i) == "LIKE":
            r.add(i + 1)
        elif r.punct(i) == "(" and r.word(i + 1) == "LIKE":
            r.add(i + 2)
        r.scan(i, "CREATE")
        select = next((j for j in range(i, len(r.t)) if r.word(j) == "SELECT"), None)
        if select is not None:  # the rows it copies are computed: a function may write
            r.calls(select)
    elif kind in ("VIEW", "SEQUENCE"):
        i = r.add(i)
        r.scan(i, "CREATE")
    elif kind == "INDEX":
        while r.word(i) != "ON" and i < len(r.t):
            i += 1
        r.add(i + 1)
    elif kind == "TRIGGER":
        while r.word(i) != "ON" and i < len(r.t):
            i += 1
        i = r.add(i + 1)
        r.scan(i, "CREATE")
    elif kind in ("DATABASE", "SCHEMA"):
        schema = r.ident(i)
        if schema is None:
            raise Unparsed("no database name")
        if or_replace:  # drops the old one first
            r.named.tables.add(Name(schema, "", whole_schema=True))
        r.named.schemas.add(schema)
    elif kind not in _NO_TABLES:
        raise Unparsed(f"CREATE {kind}")


def _alter(r: _Reader, i: int) -> None:
    kind, i = _object(r, i)
    if kind == "TABLE":
        i = r.add(i)
        for j in range(i, len(r.t)):
            w = r.word(j)
            if w == "RENAME" and r.word(j + 1) not in ("COLUMN", "INDEX", "KEY", "CONSTRAINT"):
                k = j + 1 + (r.word(j + 1) in ("TO", "AS"))
                r.add(k)
            elif w == "WITH" and r.word(j + 1) == "TABLE":
                r.add(j + 2)
        r.scan(i, "ALTER")
    elif kind in ("VIEW", "SEQUENCE"):
        i = r.add(i)
        r.scan(i, "ALTER")
    elif kind in ("DATABASE", "SCHEMA"):
        schema = r.ident(i)
        if schema is not None and schema.upper() not in (
            "DEFAULT",
            "CHARACTER",
            "CHARSET",
            "COLLATE",
            "COMMENT",
        ):
            r.named.schemas.add(schema)
    elif kind not in _NO_TABLES:
        raise Unparsed(f"ALTER {kind}")


def _rename(r: _Reader, i: int) -> None:
    if r.word(i) == "USER":
        return
    if r.word(i) not in ("TABLE", "TABLES"):
        raise Unparsed("RENAME of something else than tables")
    i = r.if_exists(i + 1)
    while True:
        i = r.add(i)
        if r.word(i) == "WAIT":
            i += 2
        elif r.word(i) == "NOWAIT":
            i += 1
        if r.word(i) != "TO":
            raise Unparsed("RENAME TABLE without TO")
        i = r.add(i + 1)
        if r.punct(i) != ",":
            return _end(r, i)
        i += 1


def _truncate(r: _Reader, i: int) -> None:
    if r.word(i) == "TABLE" and r.ident(i + 1) is not None:
        i += 1
    i = r.add(i)
    _end(r, r.skip(i, "NOWAIT"))


def _insert(r: _Reader, i: int) -> None:
    i = r.skip(i, "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO")
    i = r.add(i)
    r.scan(i, "INSERT")
    r.calls(i)


def _delete(r: _Reader, i: int) -> None:
    r.scan(i, "DELETE")
    if not r.named.tables:
        raise Unparsed("a DELETE without FROM")
    r.calls(i)


def _update(r: _Reader, i: int) -> None:
    i = r.skip(i, "LOW_PRIORITY", "IGNORE")
    i = r.refs(i)
    r.scan(i, "UPDATE")
    r.calls(i)


def _table_list(r: _Reader, i: int) -> None:
    """OPTIMIZE / ANALYZE / REPAIR / CHECK / CHECKSUM [NO_WRITE_TO_BINLOG | LOCAL] TABLE names ..."""
    i = r.skip(i, "NO_WRITE_TO_BINLOG", "LOCAL")
    if r.word(i) not in ("TABLE", "TABLES"):
        raise Unparsed("no TABLE")
    r.names(i + 1)


def _flush(r: _Reader, i: int) -> None:
    i = r.skip(i, "NO_WRITE_TO_BINLOG", "LOCAL")
    if r.word(i) == "TABLES" and r.ident(i + 1) is not None and r.word(i + 1) not in ("WITH", "FOR"):
        r.names(i + 1)


def _load(r: _Reader, i: int) -> None:
    while i < len(r.t) and not (r.word(i) == "INTO" and r.word(i + 1) == "TABLE"):
        i += 1
    r.calls(r.add(i + 2))  # SET col = f(...)


def _set(r: _Reader, i: int) -> None:
    """SET STATEMENT var=value FOR <statement>: that statement's names; SET PASSWORD / ROLE: none."""
    if r.word(i) == "STATEMENT":
        for j in range(i + 1, len(r.t)):
            if r.word(j) == "FOR" and r.t[j].depth == 0:
                return _read(r, j + 1)
        raise Unparsed("SET STATEMENT without FOR")
    if r.word(i) in ("PASSWORD", "ROLE", "DEFAULT"):
        return None
    raise MayWrite("a SET in a binlog: it may write through a stored function")


def _may_write_anything(r: _Reader, i: int) -> None:
    """SELECT / DO in a binlog: logged because a stored function they call writes."""
    raise MayWrite("it may write any table through a stored function")


def _call(r: _Reader, i: int) -> None:
    raise Unparsed("a procedure may do anything")


_READERS = {
    "DROP": _drop,
    "CREATE": _create,
    "ALTER": _alter,
    "RENAME": _rename,
    "TRUNCATE": _truncate,
    "INSERT": _insert,
    "REPLACE": _insert,
    "DELETE": _delete,
    "UPDATE": _update,
    "OPTIMIZE": _table_list,
    "ANALYZE": _table_list,
    "REPAIR": _table_list,
    "CHECK": _table_list,
    "CHECKSUM": _table_list,
    "FLUSH": _flush,
    "LOAD": _load,
    "SELECT": _may_write_anything,
    "DO": _may_write_anything,
    "CALL": _call,
    "SET": _set,
}
