"""The directory tree an extractor (`mbstream -x` / `xbstream -x`) makes of a stream, modelled
without writing anything: which names it creates, removes and renames, and each file's size.

The rules are those of MariaDB 10.11's mbstream as observed (tests/unit/test_xbstream_agreement.py
replays generated streams through it). A file is created by name, relative to the target:

- its directory is made with one mkdir (the parent must exist already; an existing name is fine),
- the file is created exclusively (O_EXCL: an existing name fails), or truncated when the chunk has
  MariaDB's rewrite flag (an existing directory still fails),
- "" and "." components name the directory they are in (`a//b` is `a/b`); a component of more
  than 255 bytes fails.

A remove ('D') deletes a file or a directory with all it holds (`d/.` empties d); a rename ('R') is
rename(2). Either one that cannot be done is skipped silently, as mbstream does. Files are
inodes: one still open keeps receiving its writes after its name was removed or replaced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

NAME_MAX = 255  # bytes in one path component


class TreeError(ValueError):
    """The extractor fails here; the message says why, without the chunk's offset."""


@dataclass(eq=False)
class File:
    size: int = 0


@dataclass(eq=False)
class Dir:
    children: dict[str, File | Dir] = field(default_factory=dict)


Node = File | Dir


def _too_long(name: str) -> bool:
    return len(name.encode("utf-8", "surrogateescape")) > NAME_MAX


def components(path: str) -> list[str]:
    """The names a path walks through: "" and "." (the directory itself) left out."""
    return [name for name in path.split("/") if name not in ("", ".")]


class Tree:
    """The target directory, from empty (or from `Tree.load`)."""

    def __init__(self) -> None:
        self.root = Dir()

    # -- what the extractor does ---------------------------------------------------------------

    def create(self, path: str, truncate: bool) -> File:
        """Open `path` for writing as mbstream does for the first chunk of a file it has not open."""
        *dir_names, last = path.split("/")
        self._mkdir(dir_names)
        parent = self._walk(dir_names)
        if last in ("", ".", ".."):
            raise TreeError("the path names a directory, not a file")
        if _too_long(last):
            raise TreeError(f"the file name is longer than {NAME_MAX} bytes")
        node = parent.children.get(last)
        if node is None:
            node = parent.children[last] = File()
        elif isinstance(node, Dir):
            raise TreeError("a directory of that name exists")
        elif not truncate:
            raise TreeError(
                "sent again without the rewrite flag after its end-of-file chunk: the file exists, "
                "and mbstream would keep the first copy"
            )
        else:
            node.size = 0
        return node

    def remove(self, path: str) -> None:
        """'D': remove a file, or a directory with everything in it; skipped if it cannot be done."""
        found = self._locate(path)
        if found is None:
            return
        parent, name, node = found
        if name is None:  # "d/.": rmdir fails after the contents are gone
            if isinstance(node, Dir):
                node.children.clear()
            return
        del parent.children[name]

    def rename(self, old: str, new: str) -> None:
        """'R': rename(2) old to new; skipped if it cannot be done."""
        src, dst = self._locate(old), self._locate(new, must_exist=False)
        if src is None or dst is None:
            return
        (sparent, sname, node), (dparent, dname, there) = src, dst
        if sname is None or dname is None or node is None:
            return  # "d/." cannot be renamed, nor renamed onto
        if new.rstrip("/") != new and isinstance(node, File):
            return  # "new/" names a directory
        if there is node:
            return
        if isinstance(node, Dir) and (dparent is node or self._inside(dparent, node)):
            return  # into itself
        if there is not None:
            if isinstance(node, File) != isinstance(there, File):
                return
            if isinstance(there, Dir) and there.children:
                return
        del sparent.children[sname]
        dparent.children[dname] = node

    # -- what it made --------------------------------------------------------------------------

    def files(self) -> dict[str, int]:
        """Every file and its size, by path."""
        return {path: node.size for path, node in self._walk_all() if isinstance(node, File)}

    def dirs(self) -> set[str]:
        return {path for path, node in self._walk_all() if isinstance(node, Dir)}

    def lookup(self, path: str) -> Node | None:
        node: Node = self.root
        for name in components(path):
            if not isinstance(node, Dir) or name not in node.children:
                return None
            node = node.children[name]
        return node

    def dump(self) -> str:
        return json.dumps({"files": self.files(), "dirs": sorted(self.dirs())})

    @classmethod
    def load(cls, text: str) -> Tree:
        data: dict[str, Any] = json.loads(text)
        tree = cls()
        for path in sorted(data["dirs"]):  # parents sort before their children
            tree._mkdir(path.split("/"))
        for path, size in data["files"].items():
            tree.create(path, truncate=False).size = size
        return tree

    @classmethod
    def merge(cls, parts: dict[str, Tree]) -> Tree:
        """The tree K data parts extracted at once into one directory leave, if their order cannot
        matter: no path is a file in two of them, or a file in one and a directory in another."""
        owner: dict[str, tuple[str, str]] = {}  # path -> (part, "file" | "directory")
        for name, tree in parts.items():
            here = [(p, "file") for p in tree.files()] + [(p, "directory") for p in tree.dirs()]
            for path, kind in here:
                other = owner.setdefault(path, (name, kind))
                if other[0] != name and "file" in (kind, other[1]):
                    raise TreeError(
                        f"{path!r} is a {kind} in {name} and a {other[1]} in {other[0]}: parts extracted at "
                        "once would race for it"
                    )
        merged = cls()
        for tree in parts.values():
            for path in sorted(tree.dirs()):  # parents sort before their children
                merged._mkdir(path.split("/"))
        for tree in parts.values():
            for path, size in tree.files().items():
                merged.create(path, truncate=False).size = size
        return merged

    # -- helpers -------------------------------------------------------------------------------

    def _walk_all(self) -> list[tuple[str, Node]]:
        out: list[tuple[str, Node]] = []
        todo: list[tuple[str, Dir]] = [("", self.root)]
        while todo:
            prefix, here = todo.pop()
            for name, node in here.children.items():
                out.append((prefix + name, node))
                if isinstance(node, Dir):
                    todo.append((prefix + name + "/", node))
        return out

    def _walk(self, names: list[str]) -> Dir:
        """The directory `names` leads to; TreeError if a name is missing or not a directory."""
        here = self.root
        for name in names:
            if name in ("", "."):
                continue
            if _too_long(name):
                raise TreeError(f"the directory name {name[:20]!r}... is longer than {NAME_MAX} bytes")
            node = here.children.get(name)
            if node is None:
                raise TreeError(f"no directory {name!r} to create it in (mbstream makes one level)")
            if not isinstance(node, Dir):
                raise TreeError(f"{name!r} is a file, not a directory")
            here = node
        return here

    def _mkdir(self, names: list[str]) -> None:
        """mkdir of a file's directory: one level; its parent must exist; an existing name is fine."""
        while names and names[-1] == "":
            names = names[:-1]
        if not names:
            return
        parent = self._walk(names[:-1])
        last = names[-1]
        if last == ".":
            return
        if _too_long(last):
            raise TreeError(f"the directory name {last[:20]!r}... is longer than {NAME_MAX} bytes")
        parent.children.setdefault(last, Dir())

    def _locate(self, path: str, must_exist: bool = True) -> tuple[Dir, str | None, Node | None] | None:
        """(parent, name, node) of `path` for a remove or rename, or None where the system call fails.
        name is None for a path ending in "." (the directory itself, which cannot be removed)."""
        names = path.split("/")
        slash = False
        while names and names[-1] == "":
            names, slash = names[:-1], True
        if not names:
            return None
        *dir_names, last = names
        try:
            parent = self._walk(dir_names)
        except TreeError:
            return None
        if last == ".":
            return parent, None, parent
        if last == ".." or _too_long(last):
            return None
        node = parent.children.get(last)
        if node is None and must_exist:
            return None
        if slash and isinstance(node, File):
            return None  # "file/" is not a directory
        return parent, last, node

    @staticmethod
    def _inside(target: Dir, top: Dir) -> bool:
        todo = [top]
        while todo:
            here = todo.pop()
            for node in here.children.values():
                if node is target:
                    return True
                if isinstance(node, Dir):
                    todo.append(node)
        return False
