set -uo pipefail

ROSENNA_MODULE=${ROSENNA_MODULE-@MODULE@}
ROSENNA_TOOLCHAIN=${ROSENNA_TOOLCHAIN:-@TOOLCHAIN@}
ROSENNA_GATE_ARGS=${ROSENNA_GATE_ARGS-@GATE_ARGS@}
@TOOLCHAIN_PATH@
@PROFILE_MODULES@
job_id=@JOB_ID@
submit_dir=@SUBMIT_DIR@
out_dir=${ROSENNA_GATE_OUT:-${SCRATCH:-$submit_dir}}/rosenna-gpu-gate-$job_id

say() { printf '== %s\n' "$*"; }
die() { printf 'rosenna-gpu-gate: %s\n' "$*" >&2; exit "${2:-2}"; }

# Batch shells do not always define `module`: try the usual Lmod and Environment Modules inits.
have_module() {
    type module >/dev/null 2>&1 && return 0
    local init
    for init in "${LMOD_PKG:-/usr/share/lmod/lmod}/init/bash" /etc/profile.d/lmod.sh \
                /etc/profile.d/modules.sh /usr/share/modules/init/bash; do
        # shellcheck disable=SC1090
        [ -r "$init" ] && . "$init" && type module >/dev/null 2>&1 && return 0
    done
    return 1
}

load_modules() {
    [ $# -gt 0 ] || return 0
    have_module || die "no 'module' command to load: $*"
    module load "$@" || die "module load $* failed"
}

cd "$submit_dir" || die "cannot enter $submit_dir"
# OpenMP's default is a thread per core of the node, not of the job: keep to the CPUs asked for.
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
fi
say "job $job_id on $(hostname), output in $out_dir"

# rosenna itself: the module named, else the rosenna on PATH, else the module `rosenna`.
if [ -n "$ROSENNA_MODULE" ]; then
    load_modules "$ROSENNA_MODULE"
    say "rosenna: module $ROSENNA_MODULE loaded (ROSENNA_MODULE names it)"
elif command -v rosenna >/dev/null; then
    say "rosenna: $(command -v rosenna) already on PATH, no module loaded"
else
    load_modules rosenna
    say "rosenna: not on PATH, module rosenna loaded"
fi
command -v rosenna >/dev/null || die "rosenna is not on PATH (set ROSENNA_MODULE or PATH)"

if [ -z "${ROSENNA_PROFILE_MODULES+set}" ]; then
    # The modules the profile names, from its resolved JSON. Before they are loaded `auto` sees
    # only what is on PATH at job start: name the profile (ROSENNA_TOOLCHAIN) to be sure.
    profile_json=$(rosenna toolchain show "$ROSENNA_TOOLCHAIN" --json) \
        || die "rosenna toolchain show $ROSENNA_TOOLCHAIN failed"
    ROSENNA_PROFILE_MODULES=$(printf '%s' "$profile_json" | "${ROSENNA_PYTHON:-python3}" -c \
        'import json, sys; print(" ".join(json.load(sys.stdin).get("modules", [])))') \
        || die "cannot read the modules of profile $ROSENNA_TOOLCHAIN"
fi
if [ -n "$ROSENNA_PROFILE_MODULES" ]; then
    say "module load $ROSENNA_PROFILE_MODULES (profile $ROSENNA_TOOLCHAIN)"
    # shellcheck disable=SC2086  # a space-separated list of module names
    load_modules $ROSENNA_PROFILE_MODULES
fi

say "toolchain profiles searched first: ${ROSENNA_TOOLCHAIN_PATH:-(ROSENNA_TOOLCHAIN_PATH unset)}"
say "rosenna --version"
rosenna --version || die "rosenna --version failed"
say "rosenna toolchain detect"
rosenna toolchain detect || die "rosenna toolchain detect failed"

mkdir -p "$out_dir" || die "cannot create $out_dir"
