#!/bin/sh
# System packages the test suite compiles and runs with. Installed with apt-get when we are root
# on Debian or Ubuntu; otherwise we stop and say what to install.
set -e
PACKAGES="gfortran libopenmpi-dev openmpi-bin lmod"
missing=""
command -v gfortran >/dev/null 2>&1 || missing="$missing gfortran"
command -v mpicc >/dev/null 2>&1 || missing="$missing libopenmpi-dev openmpi-bin"
[ -e /usr/share/lmod/lmod/init/bash ] || [ -e /usr/share/lmod/lmod/init/sh ] || missing="$missing lmod"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && [ -r /etc/os-release ] && grep -qiE '^ID(_LIKE)?=.*(debian|ubuntu)' /etc/os-release; then
    echo "installing system packages:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "missing system packages:$missing" >&2
    echo "install them (Debian/Ubuntu: apt-get install$missing) and run make test again" >&2
    exit 1
fi
