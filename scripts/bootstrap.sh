# shellcheck shell=bash
# Sourced by scripts/serve and scripts/test: makes .venv and installs one pinned
# requirements file into it (scripts/install_requirements: pip's own configuration plus
# PyTorch's CPU wheel index from TORCH_INDEX_URL), skipping the install when nothing changed
# since the last one.
# usage: source scripts/bootstrap.sh requirements/dev.txt
set -euo pipefail

requirements="$1"
venv="${VENV:-.venv}"

if [ ! -x "$venv/bin/python" ]; then
  python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
  "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || { echo "Python 3.11 is required (found $("$python" --version))" >&2; exit 1; }
  "$python" -m venv "$venv"
fi

stamp="$venv/.requirements-$(basename "$requirements" .txt)"
digest="$(cat requirements/*.txt | sha256sum | cut -d' ' -f1)"
# dev.txt takes the other files whole: once it is installed, so are they.
if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ] \
  && [ "$(cat "$venv/.requirements-dev" 2>/dev/null)" != "$digest" ]; then
  scripts/install_requirements "$venv/bin/python" --quiet -r "$requirements"
  echo "$digest" > "$stamp"
fi
export PATH="$PWD/$venv/bin:$PATH"
