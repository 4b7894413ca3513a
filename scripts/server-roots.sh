#!/usr/bin/env bash
# server-roots.sh [DIR]: the servers this project is tested against beside the host's MariaDB 10.11,
# each in a minimal Debian root of the suite that packages it (scripts/debian-root.sh), built from
# nothing on a fresh machine and kept between runs:
#   DIR/mysql-9.7     sid:    mysqld, mysql, mysqlbinlog 9.7, percona-toolkit 3.7.1
#   DIR/mariadb-11.8  trixie: mariadbd, mariadb, mariadb-binlog, mariadb-backup, mbstream 11.8
# DIR/<name>/bin holds one small script per program that runs it from its root on this host
# (scripts/in-root): put that directory first on PATH and the suites use that server's programs.
# DIR defaults to $XBP_SERVER_ROOTS, else /var/lib/xtrabackup-provider/roots (never under /tmp).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${XBP_SERVER_ROOTS:-/var/lib/xtrabackup-provider/roots}}

build() {
    local name=$1 suite=$2
    shift 2
    "$here/debian-root.sh" "$suite" "$dir/$name/root" "$@"
    # The wrappers carry their own copy of in-root: the checkout that built the root may be gone.
    local bin="$dir/$name/bin" new
    new=$(mktemp -d "$bin.new.XXXXXX")
    cp "$here/in-root" "$new/in-root"
    local path prog
    for path in "$dir/$name/root"/usr/bin/* "$dir/$name/root"/usr/sbin/*; do
        prog=$(basename "$path")
        case "$prog" in
            mysql* | mariadb* | mbstream | mariabackup | pt-* | innochecksum | my_print_defaults) ;;
            *) continue ;;
        esac
        printf '#!/bin/sh\nexec "%s/in-root" "%s" "%s" "$@"\n' "$bin" "$dir/$name/root" "${path#"$dir/$name/root"}" \
            > "$new/$prog"
        chmod +x "$new/$prog"
    done
    chmod 755 "$new"
    # Replaced only when it differs: a suite may be running its programs from it meanwhile.
    if diff -r "$new" "$bin" > /dev/null 2>&1; then
        rm -rf "$new"
    else
        rm -rf "$bin"
        mv "$new" "$bin"
    fi
}

# Both at once: each is mostly waiting for the mirror.
build mysql-9.7 sid mysql-server-core mysql-client-core percona-toolkit &
mysql=$!
build mariadb-11.8 trixie mariadb-server-core mariadb-client-core mariadb-client mariadb-backup percona-toolkit &
mariadb=$!
status=0
wait "$mysql" || status=1
wait "$mariadb" || status=1
exit $status
