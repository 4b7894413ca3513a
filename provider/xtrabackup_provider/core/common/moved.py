"""Import paths of 0.1.0 that moved in the 0.2.0 re-layout keep working for one release.

A package (or a module left at the old path) sets `__getattr__ = moved_names(__name__, {...})`
(PEP 562): the old name imports its new home on first use and warns, naming the new path.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

REMOVED_IN = "0.3.0"


def moved_names(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `names` (old name -> "new.module.Name"); any other name is an
    AttributeError, so that `from package import submodule` still imports the submodule."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new_module, _, attr = new.rpartition(".")
        warnings.warn(
            f"{module}.{name} moved to {new} in 0.2.0; import it from {new_module} (the old path goes in {REMOVED_IN})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new_module), attr)

    return __getattr__
