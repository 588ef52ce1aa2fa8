# shellcheck shell=bash
# Sourced by scripts/test: the Debian packages the tests drive as real parts (redis-server for
# the distributed job mode, chromium for the page's browser tests, nginx for the proxy in front
# of gunicorn, openssl for a Redis's TLS certificates), installed with apt-get when one is
# missing. Nothing is downloaded when they are all there.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium)
command -v openssl >/dev/null || missing+=(openssl) # a Redis's TLS certificates
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${missing[*]} with apt-get" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
