launch=(@LAUNCH@)
# shellcheck disable=SC2086  # ROSENNA_GATE_ARGS is split into arguments on purpose
set -- rosenna gpu-gate --toolchain "$ROSENNA_TOOLCHAIN" --out "$out_dir" $ROSENNA_GATE_ARGS
set -- ${launch[@]+"${launch[@]}"} "$@"
say "$*"
status=0
"$@" || status=$?

if [ "$status" -ne 0 ]; then
    say "FAIL: rosenna gpu-gate exited $status; report: $out_dir/gate-report.md"
    exit "$status"
fi
[ -s "$out_dir/gate-report.md" ] || die "the gate exited 0 but wrote no $out_dir/gate-report.md" 3
say "PASS: report in $out_dir/gate-report.md"
