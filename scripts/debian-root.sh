#!/usr/bin/env bash
# debian-root.sh SUITE DIR [PACKAGE...]: a minimal Debian root of SUITE (trixie, sid, bookworm) in DIR,
# built with `debootstrap --variant=minbase` from this host's Debian mirror, with PACKAGEs installed
# in it. A root already built with the same suite and packages is kept (a stamp in DIR says what it
# holds), so a second run takes well under a second; a different list rebuilds it from nothing.
# Keep DIR out of /tmp: other tests walk /tmp, and a root can hold a mounted /proc while apt runs.
# Needs root (debootstrap, chroot, mount).
set -euo pipefail
suite=${1:?usage: debian-root.sh SUITE DIR [PACKAGE...]}
dir=${2:?usage: debian-root.sh SUITE DIR [PACKAGE...]}
shift 2
packages=("$@")
stamp="$dir/.xbp-root"
want="suite=$suite packages=${packages[*]}"
ready() { [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; }
if ready; then
    exit 0
fi
case "$dir" in
    /tmp/*) echo "debian-root: $dir is under /tmp, which other tests walk: choose another directory" >&2; exit 2 ;;
esac
if [[ $(id -u) -ne 0 ]]; then
    echo "debian-root: building $dir needs root (debootstrap, chroot): run it as root or with sudo" >&2
    exit 2
fi
# One builder per root: another run building it meanwhile is waited for, then its root is used.
mkdir -p "$(dirname "$dir")"
exec 9> "$dir.lock"
flock 9
if ready; then
    exit 0
fi
here=$(dirname "$0")
"$here/install-debian-deps.sh" debootstrap debian-archive-keyring

# The host's own Debian mirror (a deb822 or one-line source), else Debian's.
mirror=$(sed -n 's/^URIs: *\([^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[[ -n "$mirror" ]] || mirror=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}

echo "debian-root: building $suite in $dir from $mirror${packages:+ with ${packages[*]}}"
rm -rf "$dir"
log="$dir.log"
if ! debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        "$suite" "$dir" "$mirror" > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "debian-root: debootstrap $suite failed (whole log: $log)" >&2
    exit 1
fi
# What a program in the root resolves and trusts: this host's names and CAs (mariadb-install-db
# resolves the host name; pip behind an intercepting proxy needs the host's CA certificates).
cp /etc/hosts "$dir/etc/hosts"
cp -L /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    mkdir -p "$dir/usr/local/share/ca-certificates"
    cp /etc/ssl/certs/ca-certificates.crt "$dir/usr/local/share/ca-certificates/host.crt"
fi
# sid's release file on a mirror snapshot can be past its Valid-Until date.
echo 'Acquire::Check-Valid-Until "false";' > "$dir/etc/apt/apt.conf.d/99xbp-valid-until"
if [[ ${#packages[@]} -gt 0 ]]; then
    mount -t proc proc "$dir/proc"
    trap 'umount "$dir/proc" 2>/dev/null || true' EXIT
    if ! { chroot "$dir" apt-get update -q && DEBIAN_FRONTEND=noninteractive chroot "$dir" \
            apt-get install -y -q --no-install-recommends "${packages[@]}"; } >> "$log" 2>&1; then
        tail -n 20 "$log" >&2
        echo "debian-root: installing ${packages[*]} in the $suite root failed (whole log: $log)" >&2
        exit 1
    fi
    chroot "$dir" apt-get clean
    umount "$dir/proc"
    trap - EXIT
fi
echo "$want" > "$stamp"
echo "debian-root: $suite ready in $dir"
