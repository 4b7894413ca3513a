#!/usr/bin/env bash
# fresh-debian-demo.sh SUITE...: run the README's `make demo` on a fresh minimal Debian of each SUITE
# (bookworm = Debian 12, trixie = Debian 13), as a new user would: a `debootstrap --variant=minbase`
# root with only what the README asks for beforehand (make, git, CA certificates), this checkout's
# commit cloned into it, `make demo` run there as root with nothing of this host's environment. What
# this host has preinstalled (a compiler, a newer Python, pip settings) cannot hide a missing step.
# The minimal root is built once and kept (scripts/debian-root.sh); each run works on a copy of it,
# removed afterwards. Needs root. Exit status: non-zero if any suite's demo failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
base=${XBP_FRESH_ROOTS:-/var/lib/xtrabackup-provider/fresh}
commit=$(git -C "$repo" rev-parse HEAD)

demo_in() {
    local suite=$1 pristine="$base/$suite-minimal" run="$base/$suite-run"
    "$here/debian-root.sh" "$suite" "$pristine" make git ca-certificates || return 1
    rm -rf "$run"
    cp -a "$pristine" "$run"
    git clone -q --no-hardlinks "$repo" "$run/root/airflow-provider-xtrabackup"
    git -C "$run/root/airflow-provider-xtrabackup" checkout -q "$commit"
    mount -t proc proc "$run/proc"
    local env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
    local var
    for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
        [[ -n "${!var:-}" ]] && env+=("$var=${!var}")
    done
    local start=$SECONDS rc
    chroot "$run" /usr/bin/env -i "${env[@]}" sh -c 'cd /root/airflow-provider-xtrabackup && make demo'
    rc=$?
    echo "fresh-debian-demo: $suite: make demo exit $rc after $((SECONDS - start))s (commit ${commit:0:7})"
    # The demo's servers are gone when it ends; anything left in the root would keep /proc busy.
    umount "$run/proc" 2>/dev/null || umount -l "$run/proc"
    rm -rf "$run"
    return $rc
}

status=0 passed=0 failed=0 start=$SECONDS
for suite in "$@"; do
    if demo_in "$suite"; then passed=$((passed + 1)); else failed=$((failed + 1)) status=1; fi
done
# A closing line in pytest's form, which scripts/ci.sh adds up with the suites'.
echo "======== $passed passed, $failed failed in $((SECONDS - start))s (make demo in fresh roots: $*) ========"
exit $status
