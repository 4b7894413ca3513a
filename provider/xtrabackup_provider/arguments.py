"""Operators, sensors and triggers keep every constructor argument as an attribute of the same
name: Airflow renders templated fields from those attributes, and the triggerer rebuilds a
trigger from them. `keep_arguments(self, locals())`, right after `super().__init__(**kwargs)`,
does that for every argument the class's own `__init__` takes; an argument that needs a default
filled in is assigned again after it."""

from __future__ import annotations

__all__ = ["keep_arguments"]

from typing import TYPE_CHECKING, Any

_NOT_ARGUMENTS = ("self", "kwargs", "__class__")


def keep_arguments(obj: object, arguments: dict[str, Any], *, passed_on: tuple[str, ...] = ()) -> None:
    """`obj.<name> = <value>` for each entry of an `__init__`'s `locals()` but self and **kwargs,
    and but the arguments `passed_on` to the base class, which keeps them its own way."""
    for name, value in arguments.items():
        if name not in _NOT_ARGUMENTS and name not in passed_on:
            setattr(obj, name, value)


class KeptArguments:
    """Base for classes that keep their arguments so: type checkers see them as attributes."""

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


def flag(value: Any) -> bool:
    """A boolean argument that may arrive rendered from a template ("True", "false", "1")."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)
