#!/usr/bin/env bash
# What .ci/run runs (2 cores, 30 minutes): the set-up, lint and the docs build while the other
# Airflow minors' environments install; then seven runs side by side, each logging to its own
# file: every suite on Airflow 3.3 but the deployment test (in four shards), the deployment test
# from the built wheel, and the unit and DAG suites on Airflow 3.1 and on 3.2 with Python 3.13.
# The suites spend most of their time waiting for servers, tools and Airflow's own loops (a run of
# the 3.3 suite alone used a quarter of one core), so they share 2 cores well. Each log is printed
# whole once all have ended; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=$(mktemp -d "${TMPDIR:-/tmp}/xbp-ci-XXXXXX")
start=$SECONDS
stamp() { printf 'ci: %4ds %s\n' $((SECONDS - start)) "$*"; }

make --no-print-directory setup || exit 1
make --no-print-directory envs > "$logs/envs.log" 2>&1 &
envs=$!
make --no-print-directory lint docs
checks=$?
wait "$envs"
built=$?
stamp "set-up, lint and docs done (exit $checks; environments exit $built)"
if [[ $built -ne 0 ]]; then
    cat "$logs/envs.log"
fi
if [[ $checks -ne 0 || $built -ne 0 ]]; then
    exit 1
fi

suites=(integration-1 integration-2 faults-unit dags wheel airflow-3.1 airflow-3.2-py3.13)
run() {
    local name=$1
    shift
    ( "$@" > "$logs/$name.log" 2>&1; echo $? > "$logs/$name.rc"; stamp "$name ended" ) &
}
# Each run gets a basetemp of its own, short: sandbox sockets live under it (107 bytes at most).
pytest_main() {  # the Airflow 3.3 suite's pytest
    local name=$1 tmp=$2
    shift 2
    run "$name" scripts/run-pytest.sh -m "not slow" -p no:cacheprovider --basetemp="$logs/$tmp" "$@"
}
# The Airflow 3.3 suite in four shards (tests/integration halved by scripts/shard.py).
mapfile -t half1 < <(.venv/bin/python scripts/shard.py 1 2 tests/integration)
mapfile -t half2 < <(.venv/bin/python scripts/shard.py 2 2 tests/integration)
pytest_main integration-1 i1 "${half1[@]}"
pytest_main integration-2 i2 "${half2[@]}"
pytest_main faults-unit f tests/faults tests/unit
pytest_main dags d tests/dags
run wheel scripts/test-wheel.sh --basetemp="$logs/w"
run airflow-3.1 env PYTEST=.venv-airflow-3.1/bin/pytest scripts/run-pytest.sh -m "not slow" \
    -p no:cacheprovider --basetemp="$logs/a31" tests/unit tests/dags
run airflow-3.2-py3.13 env PYTEST=.venv-airflow-3.2-py3.13/bin/pytest scripts/run-pytest.sh -m "not slow" \
    -p no:cacheprovider --basetemp="$logs/a32" tests/unit tests/dags
wait

status=0
for name in "${suites[@]}"; do
    rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
    echo "=================================== $name: exit $rc"
    cat "$logs/$name.log"
    [[ $rc -eq 0 ]] || status=1
done
for name in "${suites[@]}"; do
    echo "ci: $name: $(grep -E '^=+ .* in [0-9.]+s' "$logs/$name.log" | tail -1 | tr -d '=')"
done
passed=0
failed=0
for name in "${suites[@]}"; do
    summary=$(grep -E '^=+ .* in [0-9.]+s' "$logs/$name.log" | tail -1)
    p=$(grep -oE '[0-9]+ passed' <<< "$summary" | awk '{n += $1} END {print n + 0}')
    f=$(grep -oE '[0-9]+ (failed|errors?)' <<< "$summary" | awk '{n += $1} END {print n + 0}')
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    [[ -n "$summary" ]] || failed=$((failed + 1))  # a suite that never reached its summary
done
stamp "all suites done, exit $status"
rm -rf "$logs"
# The closing line of the run: every suite's tests added up.
echo "ci: $passed passed, $failed failed"
exit $status
