#!/usr/bin/env bash
# `make test` (and so .ci/run; 2 cores): the set-up, lint and the docs build while the other Airflow
# minors' environments install and the other servers' roots are built; then the runs side by side,
# each logging to its own file: every suite on Airflow 3.3 but the deployment test (in four shards),
# the deployment test from the built wheel, the unit and DAG suites on Airflow 3.1 and on 3.2 with
# Python 3.13, the MySQL 9.7 suite, the MariaDB 11.8 suite, the README's `make demo` in fresh
# minimal Debian 12 and 13 roots, and, once the short ones have ended, `make chaos-smoke`.
# The suites spend most of their time waiting for servers, tools and Airflow's own loops (a run of
# the 3.3 suite alone used a quarter of one core), so they share 2 cores well. Each log is printed
# whole once all have ended; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=$(mktemp -d "${TMPDIR:-/tmp}/xbp-ci-XXXXXX")
start=$SECONDS
stamp() { printf 'ci: %4ds %s\n' $((SECONDS - start)) "$*"; }

make --no-print-directory setup || exit 1
( make --no-print-directory envs && make --no-print-directory server-roots ) > "$logs/envs.log" 2>&1 &
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

suites=(integration-1 integration-2 faults-unit dags wheel unit-3.1 dags-3.1 unit-3.2-py3.13 dags-3.2-py3.13
        mysql-9.7 mariadb-11.8 fresh-debian)
run() {
    local name=$1
    shift
    ( "$@" > "$logs/$name.log" 2>&1; echo $? > "$logs/$name.rc"; stamp "$name ended" ) &
}
# One pytest run: its name, the environment's pytest, a short basetemp of its own (sandbox sockets
# live under it: 107 bytes at most), the tests.
pytest_run() {
    local name=$1 venv=$2 tmp=$3
    shift 3
    run "$name" env PYTEST="$venv/bin/pytest" scripts/run-pytest.sh -m "not slow and not mysql" -p no:cacheprovider \
        --basetemp="$logs/$tmp" "$@"
}
# Airflow 3.3: tests/integration halved by scripts/shard.py, faults + unit + the crash points, dags; the deployment
# test from the wheel. Airflow 3.1, and 3.2 on Python 3.13: unit, dags.
mapfile -t half1 < <(.venv/bin/python scripts/shard.py 1 2 tests/integration)
mapfile -t half2 < <(.venv/bin/python scripts/shard.py 2 2 tests/integration)
pytest_run integration-1 .venv i1 "${half1[@]}"
pytest_run integration-2 .venv i2 "${half2[@]}"
pytest_run faults-unit .venv fu tests/faults tests/unit tests/chaos
pytest_run dags .venv d tests/dags
run wheel scripts/test-wheel.sh --basetemp="$logs/w"
pytest_run unit-3.1 .venv-airflow-3.1 u31 tests/unit
pytest_run dags-3.1 .venv-airflow-3.1 d31 tests/dags
pytest_run unit-3.2-py3.13 .venv-airflow-3.2-py3.13 u32 tests/unit
pytest_run dags-3.2-py3.13 .venv-airflow-3.2-py3.13 d32 tests/dags
# The other servers: their suites as the Makefile defines them, with their programs first on PATH.
run mysql-9.7 make --no-print-directory test-mysql PYTEST_ARGS="-p no:cacheprovider --basetemp=$logs/my"
run mariadb-11.8 make --no-print-directory test-mariadb-11.8 PYTEST_ARGS="-p no:cacheprovider --basetemp=$logs/m118"
# The README's `make demo` on fresh minimal Debian 12 and 13 roots (not this machine and its extras).
run fresh-debian scripts/fresh-debian-demo.sh bookworm trixie
# The chaos smoke run (`make chaos-smoke`: the fleet under 4 minutes of faults of a fixed seed, then
# the checker's final checks; docs/RELIABILITY.md, "In CI"): it fails CI on any violation, lost
# transaction or backup, missed or false alert. Started once the short suites have ended, beside the
# long ones (measured there: docs/RELIABILITY.md); one fleet at a time on a machine (the lock that
# every fleet run takes), 45 minutes at most. A failed run's directory is kept in /var/tmp.
chaos_after=(wheel unit-3.1 unit-3.2-py3.13 dags-3.1 dags-3.2-py3.13 fresh-debian dags)
chaos_smoke() {
    local name rc t0
    for name in "${chaos_after[@]}"; do
        until [[ -f "$logs/$name.rc" ]]; do sleep 10; done
    done
    stamp "chaos-smoke starts (it waits for the fleet lock while another fleet runs)" >&3
    t0=$SECONDS
    flock /var/tmp/chaos-fleet.lock timeout -k 120 2700 env CHAOS_DIR="$logs/chaos" \
        make --no-print-directory chaos-smoke 3>&-
    rc=$?
    local last
    last=$(grep -E '^chaos: seed [0-9]+, ' "$logs/chaos-smoke.log" | tail -1)
    if [[ $rc -ne 0 && -d "$logs/chaos" ]]; then
        local kept
        kept=/var/tmp/xbp-ci-chaos-$(date +%Y%m%dT%H%M%S)
        mv "$logs/chaos" "$kept" && echo "chaos-smoke: exit $rc; the run's directory is kept in $kept"
    fi
    # A summary line in pytest's form, for the counts below (1 run: passed or failed).
    echo "======== $((rc == 0)) passed, $((rc != 0)) failed in $((SECONDS - t0))s (make chaos-smoke: ${last:-no last line}) ========"
    return $rc
}
suites+=(chaos-smoke)
exec 3>&1  # the console, for the stamp of its start
run chaos-smoke chaos_smoke
wait
exec 3>&-

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
