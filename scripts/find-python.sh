#!/usr/bin/env bash
# Print the path of a working python$1: `3` is the system's python3 if it is 3.11 or newer (Debian
# 12's 3.11.2, Debian 13's 3.13, Ubuntu 24.04's 3.12), `3.13` a python3.13; on PATH, else pyenv's
# (the project's machines ship pyenv's 3.8 to 3.13 under $PYENV_ROOT/versions, ~/.pyenv by
# default). A machine without one fails here with what to do.
set -euo pipefail
version=$1
minimum=$version
[[ "$version" == 3 ]] && minimum=3.11
check="import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$minimum'.split('.'))))"
for candidate in "$(command -v "python$version" || true)" \
                 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version"*/bin/"python$version"; do
    if [[ -x "$candidate" ]] && "$candidate" -c "$check" 2>/dev/null; then
        echo "$candidate"
        exit 0
    fi
done
echo "find-python: no python$version of at least $minimum on PATH or under ${PYENV_ROOT:-$HOME/.pyenv}/versions;" \
     "install one (Debian 12 and 13 and Ubuntu 24.04 ship one as python3; or pyenv install $minimum) and run again" >&2
exit 1
