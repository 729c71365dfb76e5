#!/bin/bash
# Debian packages that tests/test_packaging.py needs for the EasyBuild install test:
#   lmod          the module tool EasyBuild generates modules for (module load rosenna)
#   python3-venv  a venv from Debian's python3, which the non-root EasyBuild user can run
# Idempotent: installs nothing when both are there. Needs root (CI runs as root).
set -euo pipefail

missing=()
[ -r /usr/share/lmod/lmod/init/bash ] || missing+=(lmod)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
[ ${#missing[@]} -eq 0 ] && exit 0

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
