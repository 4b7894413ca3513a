"""Loading the shipped DAG files the way the dag processor does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load_dag_module(name: str):
    """Import a DAG file afresh (it reads the fleet config at import, like the dag processor)."""
    spec = importlib.util.spec_from_file_location(f"dagfile_{name}", DAGS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
