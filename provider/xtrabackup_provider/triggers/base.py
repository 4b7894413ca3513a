"""What the triggers share: they serialize exactly the arguments their `__init__` takes."""

from __future__ import annotations

import inspect
from typing import Any

from airflow.triggers.base import BaseTrigger

from ..arguments import KeptArguments


class ArgsTrigger(KeptArguments, BaseTrigger):
    """A trigger whose every `__init__` argument is kept as an attribute of the same name, so the
    triggerer rebuilds it from them (no secret among them: connection ids, never credentials)."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        return f"{type(self).__module__}.{type(self).__qualname__}", {n: getattr(self, n) for n in names}
