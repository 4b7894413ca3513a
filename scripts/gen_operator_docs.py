"""Write docs/OPERATORS.md from the code: every operator, sensor and hook the provider registers,
with its docstring, constructor arguments and templated fields. A test keeps the file current.

    .venv/bin/python scripts/gen_operator_docs.py [--check]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path

from xtrabackup_provider.get_provider_info import get_provider_info
from xtrabackup_provider.operators.base import CLASS_DEFAULT

OUT = Path(__file__).resolve().parents[1] / "docs" / "OPERATORS.md"
SKIP_ARGS = {"self", "kwargs", "args"}


def _classes(module_name: str, base_names: tuple[str, ...]) -> list[type]:
    module = importlib.import_module(module_name)
    found = []
    for _, cls in inspect.getmembers(module, inspect.isclass):
        own = cls.__module__ == module_name and not cls.__name__.startswith("_")
        if own and any(b.__name__ in base_names for b in cls.__mro__[1:]):
            found.append(cls)
    return found


def _parameters(cls: type) -> list[inspect.Parameter]:
    """The class's own arguments, then those its bases in this package take (the storage base's)."""
    seen: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("xtrabackup_provider") or "__init__" not in vars(klass):
            continue
        for name, p in inspect.signature(klass.__init__).parameters.items():
            if name not in SKIP_ARGS and name not in seen:
                seen[name] = p
    return list(seen.values())


def _signature(cls: type) -> list[str]:
    lines = []
    for p in _parameters(cls):
        default = p.default
        if default is CLASS_DEFAULT:  # gpg_conn_id: what the operator's kind reads
            default = getattr(cls, "gpg_conn_default", None)
        text = "required" if default is inspect.Parameter.empty else f"default `{default!r}`"
        if p.name == "deferrable":  # evaluated from the deployment's settings at import
            text = "default `[operators] default_deferrable`"
        annotation = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
        cells = [f"`{p.name}`", f"`{annotation}`", text]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def _section(cls: type) -> str:
    doc = inspect.cleandoc(cls.__doc__ or "(no description)")
    out = [f"### `{cls.__module__}.{cls.__name__}`", "", doc, ""]
    templated = getattr(cls, "template_fields", ())
    if templated:
        out += [f"Templated: {', '.join(f'`{t}`' for t in templated)}", ""]
    rows = _signature(cls)
    if rows:
        out += ["| argument | type | default |", "| --- | --- | --- |", *rows, ""]
    return "\n".join(out)


def render() -> str:
    info = get_provider_info()
    parts = [
        "# Operator, sensor and hook reference",
        "",
        "Generated from the code by `scripts/gen_operator_docs.py`; do not edit by hand.",
        "Every operator also takes Airflow's usual `BaseOperator` arguments (`task_id`, `queue`,",
        "`pool`, `retries`, ...). Backup operators must run on a worker on the database host: set `queue`.",
        "",
        "The operators that read backups (restores, restore tests, provisioning, the standby) read the",
        "storage target of `bucket` / `local_path` (named `storage_name`) and, where it cannot be read or",
        "an object on it is damaged, each of `fallback_targets` in order (dicts with `name`, `bucket` or",
        "`local_path`, `prefix`, `aws_conn_id`: the fleet config's `copies`, as the shipped DAGs pass them),",
        "as the CLI does; each fallback is a warning in the task log and the XCom's `source` names the",
        "target read. `target_store` (templated) reads the target of that name alone.",
        "",
    ]
    groups = [
        ("Operators", "operators", ("BaseOperator",)),
        ("Sensors", "sensors", ("BaseSensorOperator",)),
        ("Hooks", "hooks", ("BaseHook",)),
    ]
    for title, key, bases in groups:
        modules = [m for entry in info.get(key, []) for m in entry["python-modules"]]
        classes = [c for m in modules for c in _classes(m, bases)]
        if classes:
            parts += [f"## {title}", ""] + [_section(c) for c in classes]
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/OPERATORS.md is stale")
    text = render()
    if ap.parse_args().check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is stale: run scripts/gen_operator_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
