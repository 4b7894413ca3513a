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
.venv/bin/uv build -q -o "$work/dist" .
wheels=("$work"/dist/*.whl)
python3 -m venv --without-pip "$work/venv"
# --compile-bytecode: with PYTHONDONTWRITEBYTECODE set, every Airflow process would compile Airflow.
.venv/bin/uv pip install -q --compile-bytecode --python "$work/venv/bin/python" -c constraints.txt \
    "${wheels[0]}[test]"
echo "test-wheel: $(basename "${wheels[0]}") in $work/venv"
XBP_FROM_WHEEL=1 PYTEST="$work/venv/bin/pytest" scripts/run-pytest.sh -p no:cacheprovider tests/deployment "$@"
