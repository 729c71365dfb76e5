launch=(@LAUNCH@)
# shellcheck disable=SC2086  # ROSENNA_GATE_ARGS is split into arguments on purpose
set -- rosenna gpu-gate --toolchain "$ROSENNA_TOOLCHAIN" --out "$out_dir" $ROSENNA_GATE_ARGS
set -- ${launch[@]+"${launch[@]}"} "$@"
say "$*"
status=0
"$@" || status=$?

# A calibration (ROSENNA_GATE_ARGS="--calibrate ...") reports in calibrate-report.md.
report=$out_dir/gate-report.md
case " $ROSENNA_GATE_ARGS " in *" --calibrate"*) report=$out_dir/calibrate-report.md;; esac
if [ "$status" -ne 0 ]; then
    say "FAIL: rosenna gpu-gate exited $status; report: $report"
    exit "$status"
fi
[ -s "$report" ] || die "the gate exited 0 but wrote no $report" 3
say "PASS: report in $report"
