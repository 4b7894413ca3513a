#!/usr/bin/env bash
# Run the whole suite. Exit code 5 means pytest collected no test: for this
# project that is a broken checkout or a bad path, never a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
"${PYTEST:-.venv/bin/pytest}" "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
    echo "run-pytest: pytest collected no tests; failing on purpose" >&2
    exit 1
fi
exit $rc
