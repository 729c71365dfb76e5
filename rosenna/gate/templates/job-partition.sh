# A partition job: every node of the allocation gates itself in one step, then one merged report.
nodes=$(scontrol show hostnames "${SLURM_JOB_NODELIST:?no node list}" | paste -sd, -)
say "gating nodes $nodes, one gate each"
# shellcheck disable=SC2086  # ROSENNA_GATE_ARGS is split into arguments on purpose
set -- srun --ntasks-per-node=1 --kill-on-bad-exit=0 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
    rosenna gpu-gate --toolchain "$ROSENNA_TOOLCHAIN" --out "$out_dir/nodes" --node-dir $ROSENNA_GATE_ARGS
say "$*"
"$@"
say "rosenna gpu-gate --merge $out_dir --nodelist $nodes"
status=0
rosenna gpu-gate --merge "$out_dir" --nodelist "$nodes" || status=$?
[ -s "$out_dir/partition-report.md" ] || die "no merged report $out_dir/partition-report.md" 3
say "$([ "$status" -eq 0 ] && echo PASS || echo FAIL): report in $out_dir/partition-report.md"
exit "$status"
