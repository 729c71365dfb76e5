#!/bin/bash
# Debian packages the packaging tests need:
#   lmod          the module tool EasyBuild generates modules for (module load rosenna)
#   python3-venv  a venv from Debian's python3, which the non-root EasyBuild user can run
#   shellcheck    tests/test_jobs.py lints the gate job scripts
# Idempotent: installs nothing when all are there. Needs root (CI runs as root).
set -euo pipefail

missing=()
[ -r /usr/share/lmod/lmod/init/bash ] || missing+=(lmod)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
command -v shellcheck >/dev/null || missing+=(shellcheck)
[ ${#missing[@]} -eq 0 ] && exit 0

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
