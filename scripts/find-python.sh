#!/usr/bin/env bash
# Print the path of a working python$1 (e.g. 3.13): on PATH, else pyenv's (the project's machines
# ship pyenv's 3.8 to 3.13 under $PYENV_ROOT/versions, ~/.pyenv by default). Debian 12 has no
# python3.13 package and the registries this project may use serve no interpreters, so a machine
# without one fails here with what to do.
set -euo pipefail
version=$1
for candidate in "$(command -v "python$version" || true)" \
                 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version"*/bin/"python$version"; do
    if [[ -x "$candidate" ]] && "$candidate" -c 'import sys; sys.exit(0)' 2>/dev/null; then
        echo "$candidate"
        exit 0
    fi
done
echo "find-python: no working python$version on PATH or under ${PYENV_ROOT:-$HOME/.pyenv}/versions;" \
     "install it (pyenv install $version) and run again" >&2
exit 1
