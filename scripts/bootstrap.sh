# shellcheck shell=bash
# Sourced by scripts/serve, scripts/manage and scripts/test: makes .venv with Python 3.11 to
# 3.13 and installs one pinned requirements file into it (scripts/install_requirements: pip's
# own configuration, and PyTorch's CPU wheel index where that lacks torch's CPU build),
# skipping the install when nothing changed since the last one.
# usage: source scripts/bootstrap.sh requirements/dev.txt
set -euo pipefail

requirements="$1"
venv="${VENV:-.venv}"

if [ ! -x "$venv/bin/python" ]; then
  python="${PYTHON:-$(command -v python3.11 || command -v python3.12 || command -v python3.13 \
    || command -v python3)}"
  version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  case "$version" in
    3.11 | 3.12 | 3.13) ;;
    *)
      echo "Python 3.11, 3.12 or 3.13 is needed; $python is $version (PYTHON picks another)" >&2
      exit 1
      ;;
  esac
  "$python" -m venv "$venv"
fi

stamp="$venv/.requirements-$(basename "$requirements" .txt)"
digest="$(cat requirements/*.txt | sha256sum | cut -d' ' -f1)"
# dev.txt takes the other files whole: once it is installed, so are they.
if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ] \
  && [ "$(cat "$venv/.requirements-dev" 2>/dev/null)" != "$digest" ]; then
  echo "setting up $venv: installing the packages pinned in $requirements (about 1.7 GB," \
    "torch the largest): a few minutes the first time; skipped later until requirements/" \
    "changes" >&2
  scripts/install_requirements "$venv/bin/python" --quiet -r "$requirements"
  echo "$digest" > "$stamp"
fi
export PATH="$PWD/$venv/bin:$PATH"
