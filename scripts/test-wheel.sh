#!/usr/bin/env bash
# The deployment test against what users install: the wheel built from an sdist (`uv build`),
# installed non-editable with the test extra into a fresh virtualenv outside the checkout. The
# test's Airflow components run from that virtualenv, with the DAG files that
# `xtrabackup-provider install-dags` writes into their dags folder ($XBP_FROM_WHEEL makes the test
# check that the provider is imported from there, not from this checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/xbp-wheel-XXXXXX")
trap 'rm -rf "$work"' EXIT
# Built from a copy: a build in the checkout leaves provider/*.egg-info there, which the editable
# installs' sys.path then shows as a second copy of the distribution (Airflow loads its plugin twice).
mkdir "$work/src"
tar -C . --exclude='./.venv*' --exclude=./.git --exclude=./site --exclude='*.egg-info' --exclude=./bench/out \
    --exclude='./.*_cache' --exclude=./.hypothesis --exclude=__pycache__ \
    -cf - . | tar -C "$work/src" -xf -
.venv/bin/uv build -q -o "$work/dist" "$work/src"
wheels=("$work"/dist/*.whl)
python3 -m venv --without-pip "$work/venv"
# --compile-bytecode: with PYTHONDONTWRITEBYTECODE set, every Airflow process would compile Airflow.
.venv/bin/uv pip install -q --compile-bytecode --python "$work/venv/bin/python" -c constraints.txt \
    "${wheels[0]}[test]"
echo "test-wheel: $(basename "${wheels[0]}") in $work/venv"
XBP_FROM_WHEEL=1 PYTEST="$work/venv/bin/pytest" scripts/run-pytest.sh -p no:cacheprovider tests/deployment "$@"
