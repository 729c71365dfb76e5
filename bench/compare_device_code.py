"""Compare the device code two versions of a ``<name>_kernel.cu`` compile to: the check that a change
of the generated source (a weight copy read from another array, a pointer passed instead of an
offset) leaves the instructions as they were.

    python bench/compare_device_code.py OLD_kernel.cu NEW_kernel.cu [--routine] [--arch sm_90,sm_75]

For each architecture both files are compiled by nvcc (``--routine``: as the per-point routine,
``-rdc=true -DROSENNA_DEVICE_ROUTINE``; else the batched kernel) to PTX and to a cubin, and the
script prints, per function: the PTX instruction count and whether the opcode sequences are equal
(operands, immediates and names aside), the SASS size in bytes (the cubin's ``.text`` section of
the function: 16 bytes an instruction) and ptxas's registers, stack frame and spills. Function
names are compared with the model's name taken out, so the two files may come from models of
different names. Exits 1 when any of those differs.
"""

import os
import re
import subprocess
import sys
import tempfile


def _name(kernel):
    return os.path.basename(kernel)[:-len("_kernel.cu")]


def _plain(text, name):
    """A function name without the model's name and the file's internal-linkage hash."""
    text = text.replace(name, "M")
    return re.sub(r"_INTERNAL_[0-9a-f]+_\d+_M_kernel_cu_[0-9a-f]+", "", re.sub(r"_ZN\d+", "_ZN", text))


def _ptx_ops(ptx, name):
    """{function: [opcodes]} of a PTX file."""
    out, current = {}, None
    for line in ptx.splitlines():
        head = re.match(r"\s*\.(?:visible |weak )?\.?(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)", line)
        if head:
            current = _plain(head.group(1), name)
            out[current] = []
            continue
        op = re.match(r"\s*(?:@!?%\w+\s+)?([a-z][\w.]*)[\s;]", line)
        if current and op and not line.strip().startswith("//"):
            out[current].append(op.group(1))
    return out


def _sass_sizes(cubin, name):
    """{function: bytes of SASS} from the cubin's section headers."""
    text = subprocess.run(["readelf", "-SW", cubin], capture_output=True, text=True, check=True).stdout
    return {_plain(m.group(1), name): int(m.group(2), 16)
            for m in re.finditer(r"\]\s+\.text\.(\S+)\s+\S+\s+\S+\s+\S+\s+([0-9a-f]+)", text)}


def _resources(log, name):
    """{function: 'N registers, stack, spills'} from ptxas -v."""
    out, current = {}, None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line) or re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = _plain(m.group(1), name)
        elif current and ("stack frame" in line or "Used" in line):
            out[current] = (out.get(current, "") + " " + re.sub(r"\s+", " ", line.split("info    :")[-1].strip())).strip()
    return out


def compile_one(kernel, arch, routine, work):
    name = _name(kernel)
    flags = ["-rdc=true", "-DROSENNA_DEVICE_ROUTINE"] if routine else []
    base = ["nvcc", f"-arch={arch}", *flags, "-I", os.path.dirname(os.path.abspath(kernel)), kernel]
    ptx, cubin = os.path.join(work, f"{name}.{arch}.ptx"), os.path.join(work, f"{name}.{arch}.cubin")
    subprocess.run(base + ["-ptx", "-o", ptx], capture_output=True, check=True)
    log = subprocess.run(base + ["-cubin", "-Xptxas", "-v", "-o", cubin], capture_output=True, text=True, check=True).stderr
    with open(ptx) as fh:
        return _ptx_ops(fh.read(), name), _sass_sizes(cubin, name), _resources(log, name)


def main(argv):
    files = [a for a in argv if not a.startswith("--") and a.endswith(".cu")]
    if len(files) != 2:
        print(__doc__)
        return 2
    archs = ["sm_90", "sm_75"]
    if "--arch" in argv:
        archs = argv[argv.index("--arch") + 1].split(",")
    routine, differ = "--routine" in argv, 0
    with tempfile.TemporaryDirectory() as work:
        for arch in archs:
            old_dir, new_dir = os.path.join(work, "old"), os.path.join(work, "new")
            os.makedirs(old_dir, exist_ok=True)
            os.makedirs(new_dir, exist_ok=True)
            old, new = compile_one(files[0], arch, routine, old_dir), compile_one(files[1], arch, routine, new_dir)
            print(f"== {arch} ({'per-point routine' if routine else 'batched kernel'})")
            for fn in sorted(set(old[0]) | set(new[0]) | set(old[1]) | set(new[1])):
                po, pn = old[0].get(fn), new[0].get(fn)
                so, sn = old[1].get(fn), new[1].get(fn)
                ro, rn = old[2].get(fn), new[2].get(fn)
                same = po == pn and so == sn and ro == rn
                differ += not same
                print(f"{fn[:70]:70s} ptx {len(po or [])}/{len(pn or [])} {'same ops' if po == pn else 'OPS DIFFER'}; "
                      f"sass {so}/{sn} bytes; {ro or '-'}{'' if ro == rn else ' -> ' + str(rn)}")
    print("identical instructions" if not differ else f"{differ} functions differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
