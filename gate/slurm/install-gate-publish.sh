#!/bin/bash
# Install rosenna, gate it, and make its module visible only after the gate passes: three Slurm jobs
# chained with afterok dependencies.
#
#   gate/slurm/install-gate-publish.sh INSTALL_JOB GATE_JOB STAGED_MODULEFILE MODULE_ROOT
#
#   INSTALL_JOB        a batch script that builds and installs rosenna and writes its modulefile to
#                      STAGED_MODULEFILE (a folder outside MODULEPATH: nobody loads it yet)
#   GATE_JOB           the gate, as `rosenna gpu-gate --print-job slurm` printed it
#   STAGED_MODULEFILE  e.g. /sw/staging/rosenna/1.0.lua (its last two parts, name/version, are kept)
#   MODULE_ROOT        the folder on MODULEPATH where the module becomes visible: MODULE_ROOT/rosenna/1.0.lua
#
# The gate's arguments and settings pass through the environment (sbatch's default --export=ALL):
# ROSENNA_GATE_ARGS, ROSENNA_GATE_OUT, ROSENNA_MODULE, ROSENNA_TOOLCHAIN. Extra sbatch options for all
# three jobs (e.g. --account=proj42) go in ROSENNA_SBATCH_OPTIONS.
#
# When the install fails, the gate and the publish job stay PENDING with Reason=DependencyNeverSatisfied;
# when the gate fails, the publish job does, and the gate's report says why. Cancel them with scancel.
# Prints install=<id> gate=<id> publish=<id>.
set -euo pipefail

if [ $# -ne 4 ]; then
    sed -n '2,20s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi
install_job=$1 gate_job=$2 staged=$3 module_root=$4
for f in "$install_job" "$gate_job"; do
    [ -r "$f" ] || { echo "install-gate-publish: cannot read $f" >&2; exit 2; }
done
name_version=$(basename "$(dirname "$staged")")/$(basename "$staged")
# shellcheck disable=SC2206  # options are split into words on purpose
options=(${ROSENNA_SBATCH_OPTIONS:-})

install=$(sbatch --parsable "${options[@]}" "$install_job")
install=${install%%;*}
gate=$(sbatch --parsable "${options[@]}" --dependency="afterok:$install" "$gate_job")
gate=${gate%%;*}
publish=$(sbatch --parsable "${options[@]}" --dependency="afterok:$gate" --job-name=rosenna-publish-module \
    --nodes=1 --ntasks=1 --time=00:05:00 --output="rosenna-publish-module-%j.log" \
    --wrap "install -D -m 0644 $(printf '%q' "$staged") $(printf '%q' "$module_root/$name_version")")
publish=${publish%%;*}
echo "install=$install gate=$gate publish=$publish"
