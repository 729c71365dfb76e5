# A job array: each task gates the node it got; the first task submits the merge, which waits for
# every task (afterany: it runs whatever the tasks' status).
# shellcheck disable=SC2086  # ROSENNA_GATE_ARGS is split into arguments on purpose
set -- srun --ntasks=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
    rosenna gpu-gate --toolchain "$ROSENNA_TOOLCHAIN" --out "$out_dir/nodes" --node-dir $ROSENNA_GATE_ARGS
if [ "${SLURM_ARRAY_TASK_ID:?not an array task}" = "${SLURM_ARRAY_TASK_MIN:-0}" ]; then
    merge=(rosenna gpu-gate --merge "$out_dir" @EXPECT@)
    merge_job=$(sbatch --parsable --dependency="afterany:$job_id" --job-name=@JOB_NAME@-merge \
        --nodes=1 --ntasks=1 --time=00:10:00 --output="@JOB_NAME@-merge-%j.log" \
        ${SLURM_JOB_PARTITION:+--partition="$SLURM_JOB_PARTITION"} \
        ${SLURM_JOB_ACCOUNT:+--account="$SLURM_JOB_ACCOUNT"} \
        --wrap "$(printf '%q ' "${merge[@]}")") || die "could not submit the merge job"
    say "merge job $merge_job writes $out_dir/partition-report.md when every task has ended"
fi
say "$*"
status=0
"$@" || status=$?
say "$([ "$status" -eq 0 ] && echo PASS || echo FAIL): node $(hostname -s) ${SLURMD_NODENAME:-}, report in $out_dir/nodes"
exit "$status"
