"""Compile every generated ``<name>_kernel.cu`` of a snapshot with the device compilers' warnings on
and list what they say: the check that the generated CUDA/HIP carries no unused function, no
unused variable and nothing else a careful reader would be warned about.

    python bench/snapshot_generated.py record DIR     # the models (every zoo, example and bench model)
    python bench/kernel_warnings.py DIR [--spills]    # compile DIR/gen/*/*_kernel.cu, print the warnings

Each kernel file is compiled as the generated makefile compiles it, twice with nvcc (the batched
kernel, ``-c``; the per-point routine, ``-c -rdc=true -DROSENNA_DEVICE_ROUTINE``) and twice with
hipcc for AMD (``HIP_PLATFORM=amd``, ``--offload-arch=gfx90a``, the same two), each with the host
compiler's ``-Wall -Wextra``. ``--spills`` adds ptxas's ``-warn-spills`` (the per-point routine's
one-thread path keeps wide layers in local memory by design, so its spills are reported, not
failed). Exits 1 when any compile warns or fails. Jobs: ``ROSENNA_JOBS`` (default: the CPU count).
"""

import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

#: nvcc: every warning of the front end and of the host compiler.
NVCC = ["nvcc", "-arch=sm_90", "-Xcompiler", "-Wall,-Wextra", "--Wreorder", "-Wno-deprecated-gpu-targets",
        "-Xcudafe", "--display_error_number"]
#: hipcc for AMD (clang): -Wall -Wextra on host and device code.
HIPCC = ["hipcc", "--offload-arch=gfx90a", "-Wall", "-Wextra"]
#: The two compiles of a kernel file (rosenna/emit/make.py's native rules).
MODES = {"batched": ["-c"], "routine": ["-c", "-fgpu-rdc", "-DROSENNA_DEVICE_ROUTINE"]}
#: What counts as a warning in a compiler's output.
WARNING = re.compile(r"warning", re.IGNORECASE)


def commands(kernel, out, spills=False, nvcc_opt=(), hipcc_opt=()):
    """[(label, argv, env)] of the compiles of one kernel file (``out``: a scratch folder;
    ``nvcc_opt``, ``hipcc_opt``: optimization flags, the compilers' defaults without)."""
    base = os.path.basename(kernel)
    include = ["-I", os.path.dirname(kernel)]
    jobs = []
    if shutil.which("nvcc"):
        extra = ["-Xptxas", "-warn-spills"] if spills else []
        for mode, flags in MODES.items():
            flags = [f.replace("-fgpu-rdc", "-rdc=true") for f in flags]
            jobs.append((f"nvcc {mode} {base}", NVCC + list(nvcc_opt) + extra + flags + include
                         + [kernel, "-o", os.path.join(out, f"{base}.{mode}.nvcc.o")], None))
    if shutil.which("hipcc"):
        env = dict(os.environ, HIP_PLATFORM="amd")
        for mode, flags in MODES.items():
            jobs.append((f"hipcc {mode} {base}", HIPCC + list(hipcc_opt) + flags + include
                         + [kernel, "-o", os.path.join(out, f"{base}.{mode}.hip.o")], env))
    return jobs


def run(job):
    """(label, warnings text or "") of one compile; a failed compile is all its output."""
    label, argv, env = job
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    text = proc.stdout + proc.stderr
    if proc.returncode:
        return label, f"exit {proc.returncode}\n{text}"
    return label, "\n".join(line for line in text.splitlines() if WARNING.search(line))


def survey(kernels, spills=False, nvcc_opt=(), hipcc_opt=(), jobs=None):
    """{label: warnings} for every compile of ``kernels`` that warned or failed."""
    with tempfile.TemporaryDirectory() as out:
        work = [job for k in kernels for job in commands(k, out, spills, nvcc_opt, hipcc_opt)]
        with concurrent.futures.ThreadPoolExecutor(jobs or int(os.environ.get("ROSENNA_JOBS", os.cpu_count() or 1))) as pool:
            return {label: text for label, text in pool.map(run, work) if text}


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    kernels = sorted(glob.glob(os.path.join(argv[0], "gen", "*", "*_kernel.cu")))
    found = survey(kernels, spills="--spills" in argv)
    for label, text in sorted(found.items()):
        print(f"== {label}\n{text}")
    failed = {k: v for k, v in found.items() if not ("--spills" in argv and all("spill" in l for l in v.splitlines()))}
    print(f"{len(kernels)} kernel files, {len(found)} compiles with warnings, {len(failed)} failing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
