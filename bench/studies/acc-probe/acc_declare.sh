#!/bin/bash
# On a GPU node with GCC's nvptx offload (ROSENNA_GPU_ENV: docs/admin-guide.md): bash bench/studies/acc-probe/acc_declare.sh
# Expected from GCC 12's lowering (acc_declare_lib.c says why): "whole: 0 0 0 0" and
# "section: 1 2 3 4", in the archive and the plain link alike.
set -eu
[ -z "${ROSENNA_GPU_ENV:-}" ] || . "$ROSENNA_GPU_ENV" >/dev/null
d=$(mktemp -d); F="-O2 -fopenacc $GCC_OFFLOAD_FLAGS"
$ROSENNA_GCC $F -c bench/studies/acc-probe/acc_declare_lib.c -o $d/lib.o && ar rcs $d/liblib.a $d/lib.o
$ROSENNA_GCC $F bench/studies/acc-probe/acc_declare_main.c $d/liblib.a -o $d/t_archive
$ROSENNA_GCC $F bench/studies/acc-probe/acc_declare_main.c bench/studies/acc-probe/acc_declare_lib.c -o $d/t_objects
for t in t_archive t_objects; do echo "$t"; ACC_DEVICE_TYPE=nvidia $d/$t; ACC_DEVICE_TYPE=nvidia $d/$t section; done
