#!/bin/bash
# Per-kernel SASS counts of a binary: instructions, code size, and the ones that matter here.
#   bash bench/studies/design-mlp128/sass_counts.sh build/bench/mlp_bench [REGEX]    (cuobjdump needs nvdisasm on PATH)
set -eo pipefail
cuobjdump -sass "$1" | awk -v F="$(basename "$1")" '
  /Function :/{fn=$3} /FFMA/{ffma[fn]++} /HMMA/{mma[fn]++} /LDG/{ldg[fn]++} /LDS/{lds[fn]++} /STS/{sts[fn]++}
  /LDC/{ldc[fn]++} /LDL|STL/{loc[fn]++} /BAR/{bar[fn]++} /^ +\/\*[0-9a-f]+\*\//{ins[fn]++}
  END{for(k in ins) printf "%s %-60s instr %6d (%5.1f KB) FFMA %5d HMMA %4d LDG %4d LDS %4d STS %4d LDC %4d LDL/STL %3d BAR %3d\n",
      F, k, ins[k], ins[k]*16/1024, ffma[k], mma[k], ldg[k], lds[k], sts[k], ldc[k], loc[k], bar[k]}' |
  grep -E "${2:-.}" | sort
