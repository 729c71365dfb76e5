#!/bin/sh
# System packages the test suite builds and runs with, installed with apt-get when we are root on
# Debian or Ubuntu; otherwise we stop (required) or warn (optional) and say what to install.
#   gfortran                      required: the Fortran module is compiled and run by most tests
#   libopenmpi-dev openmpi-bin    examples/cns_closure runs on 2 MPI ranks
#   lmod, python3-venv, shellcheck: the packaging tests' own list, .ci/deps-packaging.sh
#   hipcc                         generated HIP kernels are compiled (not run) for gfx90a
#   slurmctld slurmd slurm-client munge: tests/test_slurm.py submits the gate's jobs to a 3-node
#                                 Slurm started on this machine (skipped, saying why, without them)
set -e
need() { command -v "$1" >/dev/null 2>&1; }
required=""
optional=""
need gfortran || required="$required gfortran"
need mpicc || optional="$optional libopenmpi-dev openmpi-bin"
need hipcc || optional="$optional hipcc"
need slurmctld && need slurmd && need sbatch && need munged || optional="$optional slurmctld slurmd slurm-client munge"
missing="$required$optional"
debian_root=false
if [ "$(id -u)" = 0 ] && [ -r /etc/os-release ] && grep -qiE '^ID(_LIKE)?=.*(debian|ubuntu)' /etc/os-release; then
    debian_root=true
    bash "$(dirname "$0")/deps-packaging.sh"
fi
[ -z "$missing" ] && exit 0
if $debian_root; then
    echo "installing system packages:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    exit 0
fi
if [ -n "$required" ]; then
    echo "missing system packages:$required (and optionally$optional)" >&2
    echo "install them (Debian/Ubuntu: apt-get install$missing) and run make test again" >&2
    exit 1
fi
echo "note: the tests that need$optional will be skipped; install them to run those too" >&2
