#!/usr/bin/env bash
# Install the Debian packages the project needs, only those missing, so that a machine that has them
# all is done in well under a second. Debian 12 and 13 are tested; Ubuntu 24.04 is expected to work.
# A machine without apt, or a user who is neither root nor has sudo, gets one line saying what to
# install by hand, before anything is installed.
set -euo pipefail
if ! command -v dpkg-query > /dev/null || ! command -v apt-get > /dev/null; then
    echo "install-debian-deps: this is not a Debian-like system (no dpkg-query/apt-get): install by hand" \
         "the equivalents of: $*" >&2
    exit 1
fi
missing=()
for pkg in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo > /dev/null || ! sudo -n true 2> /dev/null; then
        echo "install-debian-deps: installing packages needs root or sudo: run as root, or install by hand:" \
             "apt-get install ${missing[*]}" >&2
        exit 1
    fi
    SUDO="sudo -n"
fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
