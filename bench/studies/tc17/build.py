"""tc17 study (issue #17 items 1-3): generate the study's MLPs with this checkout, write each one's
weights for the driver's FP64/FP32 reference (``<model>.ref``), and compile each variant's kernel
file with bench/studies/tc17/driver.cu into one binary (sm_90 only).

    .venv/bin/python bench/studies/tc17/build.py build/dev-tc17 [variant-prefix ...]
    bash build/dev-tc17/run.sh                  # on the H200, from the repository root

A variant is the generated kernel file of this checkout, or that file with a text patch that puts
back an earlier form of one piece (``PATCHES``), or the file generated with a generator switch
(``GENERATE``). ``variants.txt`` lists the binaries with their ptxas registers and spills; run.sh
prints them beside the timings."""
import os
import re
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, "bench")
import bench_header  # noqa: E402
import frontier  # noqa: E402

from rosenna import strategy, zoo  # noqa: E402
from rosenna.emit import cuda  # noqa: E402
from rosenna.emit.cuda import mlp  # noqa: E402
from rosenna.generate import Options, generate  # noqa: E402
from rosenna.strategy import Tuning  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = dict(frontier.MLPS)
MODELS.update({
    "mlp256": (16, [(256, "relu")] * 3 + [(8, None)]),
    "mlp512": (16, [(512, "relu")] * 2 + [(8, None)]),
})
#: The driver's activation codes (driver.cu actf).
ACT = {None: 0, "Relu": 1, "Sigmoid": 2, "Tanh": 3, "Swish": 4, "Gelu": 5, "Mish": 6}
#: Points whose outputs are checked against the FP64 reference (all 16M but for the widest).
CHECK = {"mlp512": 1 << 21, "mlp256": 1 << 22}

#: Text patches: the earlier form of one piece of device code, to measure against.
PATCHES = {
    # main before this study: both halves of the 3xTF32 split by cvt.rna (ten instructions on sm_90)
    "cvt": [("""    big = __float_as_uint(a) & 0xffffe000u;
    small = __float_as_uint(a - __uint_as_float(big)) + 0x1000u;""",
             """    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(big) : "f"(a));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(small) : "f"(a - __uint_as_float(big)));""")],
    # the wide kernel without split accumulation (the kernels-against-PyTorch measurement's opt-in kernel: one MMA chain per layer)
    "nosplit": [("""            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kt = 0; kt < KS; ++kt)
                rosenna_mma3s(t, a[kt][mi], b[kt]);
#pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[mi][ni][r] += t[r];""", """#pragma unroll
            for (int kt = 0; kt < KS; ++kt)
                rosenna_mma3s(acc[mi][ni], a[kt][mi], b[kt]);""")],
}
PATCHES["miouter"] = [('    rosenna_split a[KS][2];\n#pragma unroll\n    for (int kt = 0; kt < KS; ++kt) {\n        const float *sa = act + (wm * 32 + gid) * LDA + k0 + kt * 8 + tig;\n        a[kt][0] = rosenna_split_a(sa[0], sa[8 * LDA], sa[4], sa[8 * LDA + 4]);\n        a[kt][1] = rosenna_split_a(sa[16 * LDA], sa[24 * LDA], sa[16 * LDA + 4], sa[24 * LDA + 4]);\n    }\n#pragma unroll\n    for (int ni = 0; ni < NI; ++ni) {\n        float4 b[KS];\n#pragma unroll\n        for (int kt = 0; kt < KS; ++kt)\n            b[kt] = COMPACT ? rosenna_tcw_b(sb2[(kt * NT + ni) * 32]) : sb[(kt * NT + ni) * 32];\n#pragma unroll\n        for (int mi = 0; mi < 2; ++mi) {\n            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n#pragma unroll\n            for (int kt = 0; kt < KS; ++kt)\n                rosenna_mma3s(t, a[kt][mi], b[kt]);\n#pragma unroll\n            for (int r = 0; r < 4; ++r)\n                acc[mi][ni][r] += t[r];\n        }\n    }', '#pragma unroll\n    for (int mi = 0; mi < 2; ++mi) {\n        rosenna_split a[KS];\n#pragma unroll\n        for (int kt = 0; kt < KS; ++kt) {\n            const float *sa = act + (wm * 32 + mi * 16 + gid) * LDA + k0 + kt * 8 + tig;\n            a[kt] = rosenna_split_a(sa[0], sa[8 * LDA], sa[4], sa[8 * LDA + 4]);\n        }\n#pragma unroll\n        for (int ni = 0; ni < NI; ++ni) {\n            float4 b[KS];\n#pragma unroll\n            for (int kt = 0; kt < KS; ++kt)\n                b[kt] = COMPACT ? rosenna_tcw_b(sb2[(kt * NT + ni) * 32]) : sb[(kt * NT + ni) * 32];\n            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n#pragma unroll\n            for (int kt = 0; kt < KS; ++kt)\n                rosenna_mma3s(t, a[kt], b[kt]);\n#pragma unroll\n            for (int r = 0; r < 4; ++r)\n                acc[mi][ni][r] += t[r];\n        }\n    }')]
PATCHES["onebar"] = [('    if (g + 1 < STAGES || again)\n        rosenna_stage_copy<STAGE4, THREADS>(stage + (slot ^ 1) * STAGE4, F + (g + 1 < STAGES ? g + 1 : 0) * STAGE4);\n    rosenna_stage_commit();  /* possibly empty: keeps "all but the newest group" meaning stage g */\n    rosenna_stage_wait_prev();\n    __syncthreads();  /* stage g and the last epilogue\'s act are visible to every warp */', '    asm volatile("cp.async.wait_group 0;" ::: "memory");\n    __syncthreads();  /* stage g and the last epilogue\'s act visible; every warp done with stage g - 1 */\n    if (g + 1 < STAGES || again)\n        rosenna_stage_copy<STAGE4, THREADS>(stage + (slot ^ 1) * STAGE4, F + (g + 1 < STAGES ? g + 1 : 0) * STAGE4);\n    rosenna_stage_commit();'), ('                acc[mi][ni][r] += t[r];\n        }\n    }\n    __syncthreads();  /* buffer g & 1 is refilled next stage, and an epilogue may overwrite act */\n}', '                acc[mi][ni][r] += t[r];\n        }\n    }\n}'), ('    const int wm = warp / WN, wn = warp % WN;\n    /* C fragment: c0, c1 at (row gid, columns 2tig, 2tig+1), c2, c3 at row gid + 8. */', "    const int wm = warp / WN, wn = warp % WN;\n    __syncthreads();  /* every warp has read this layer's input */\n    /* C fragment: c0, c1 at (row gid, columns 2tig, 2tig+1), c2, c3 at row gid + 8. */")]
#: Generator switches: name -> the switch (:func:`_switch`: its tuning, or a table it changes and undoes).
GENERATE = {
    "": None,
    "formula": "device_forms_off",  # Mish from the op's formula (exp, log, tanh), as on main before
    "wide16": "compact_off",  # the wide kernel's 16-byte fragments at every width (main before)
    "compact256": "compact_256",  # compact fragments from 129 wide (the 256 shape too)
    "compact128": "compact_all",  # compact fragments at every width
    "nopersist": "persistent_off",  # the wide kernel's grid: one block per 128 (64) points, as before
    "persist": "persistent_on",  # a persistent grid up to 256 wide
    "persist512": "persistent_compact",  # the tile loop and a persistent grid with compact fragments too
}

#: (binary tag, model, generator switch, patches, extra nvcc flags)
VARIANTS = [  # round B (round A's list: results/measurement-log.md, "The whole-field phase study")
    ("mish_new", "mish", "", [], ""),
    ("mish_main", "mish", "formula", ["cvt"], ""),
    ("mlp128_new", "mlp128", "", [], ""),
    ("mlp128_persist", "mlp128", "persist", [], ""),
    ("mlp128_cvt", "mlp128", "", ["cvt"], ""),
    ("mlp512_new", "mlp512", "", [], ""),
    ("mlp512_persist", "mlp512", "persist512", [], ""),
    ("mlp256_new", "mlp256", "", [], ""),
    ("mlp256_persist", "mlp256", "persist", [], ""),
    ("tanh96_new", "tanh96", "", [], ""),
    ("tanh96_persist", "tanh96", "persist", [], ""),
    ("silu_new", "silu", "", [], ""),
    ("gelu_new", "gelu", "", [], ""),
    ("tanh64_new", "tanh64", "", [], ""),
    ("gemm_big_new", "gemm_big", "", [], ""),
]


#: The tuning of each switch of GENERATE (the wide kernel's compact fragments and persistent grid).
TUNINGS = {"compact_off": {"wide_compact_from": 1 << 30}, "compact_256": {"wide_compact_from": 129},
           "compact_all": {"wide_compact_from": 1}, "persistent_off": {"wide_persistent": False},
           "persistent_compact": {"wide_persistent": True, "wide_persistent_compact": True},
           "persistent_on": {"wide_persistent": True}}


def _switch(name):
    """The :class:`Tuning` of switch ``name`` and a function that undoes what it set outside the
    tuning (``device_forms_off``: the activations' device functions, a table of rosenna.emit.cuda.mlp)."""
    saved = dict(mlp.DEVICE_FORMS)
    if GENERATE[name] == "device_forms_off":
        mlp.DEVICE_FORMS.clear()

    def undo():
        mlp.DEVICE_FORMS.update(saved)
    return Tuning().replace(**TUNINGS.get(GENERATE[name], {})), undo


def _model(name, d):
    path = os.path.join(d, f"{name}.onnx")
    if not os.path.exists(path):
        if name in ("gemm_big", "mlp128"):
            zoo.save(name, path)
        else:
            import torch
            torch.manual_seed(0)
            frontier._export(frontier._torch_mlp(*MODELS[name]), (1, MODELS[name][0]), path)
    return path


def _source(out, gen, name, switch):
    """The kernel file of ``name`` generated with ``switch``, its FP32 base kernel stubbed out (most
    of nvcc's time; the study times the tensor-core kernel), and the reference weights."""
    d = os.path.join(gen, f"{name}{'-' + switch if switch else ''}")
    os.makedirs(d, exist_ok=True)
    bench_header.install(d)
    tuning, undo = _switch(switch)
    try:
        plan, _ = generate(_model(name, gen), d, Options(name=name, lang="c", embed=False, tuning=tuning))
    finally:
        undo()
    layers = strategy.analyse(plan).layers
    with open(os.path.join(out, f"{name}.ref"), "wb") as fh:
        fh.write(struct.pack("i", len(layers)))
        for layer in layers:
            fh.write(struct.pack("iii", layer.k, layer.n, ACT[layer.act]))
            fh.write(np.ascontiguousarray(layer.w, np.float32).tobytes())
            fh.write(np.ascontiguousarray(layer.b, np.float32).tobytes())
    src = open(os.path.join(d, f"{name}_kernel.cu")).read()
    a = src.index("{", src.index(f"{name}_batch_kernel(int n"))
    b = src.index("\n}\n", a)
    return d, src[:a] + "{\n    (void)n; (void)x; (void)y;" + src[b:]


def _compile(out, d, name, tag, text, flags):
    cu = os.path.join(d, f"{tag}.cu")
    open(cu, "w").write(text)
    exe = os.path.join(out, tag)
    cmd = ["nvcc", "-O3", "-gencode", "arch=compute_90,code=sm_90", "-cudart", "shared", "-Xptxas", "-v",
           *flags.split(), "-DUPLOAD", f"-DNAME={name}", f'-DHDR="{name}.h"', f'-DVARIANT="{tag}"',
           f"-I{d}", os.path.join(HERE, "driver.cu"), cu, "-o", exe]  # d holds rosenna_bench.cuh (_source)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{tag}: nvcc failed\n{p.stderr[-3000:]}")
    lines = p.stderr.splitlines()
    info = ""
    for i, line in enumerate(lines):
        if "Compiling entry" in line and "_tc_kernel" in line:
            regs = next((re.search(r"Used (\d+) registers", x).group(1) for x in lines[i + 1:i + 4] if "Used" in x), "?")
            spill = next((re.search(r"(\d+) bytes spill stores", x).group(1) for x in lines[i + 1:i + 4] if "spill" in x), "?")
            info = f"regs {regs} spill {spill}"
    return tag, info


def main():
    out = sys.argv[1]
    prefixes = sys.argv[2:]
    chosen = [v for v in VARIANTS if not prefixes or any(v[0].startswith(p) for p in prefixes)]
    os.makedirs(out, exist_ok=True)
    gen = os.path.join("build", "study-gen-tc17")
    os.makedirs(gen, exist_ok=True)
    sources = {}
    jobs = []
    for tag, name, switch, patches, flags in chosen:
        if (name, switch) not in sources:
            sources[name, switch] = _source(out, gen, name, switch)
        d, text = sources[name, switch]
        for patch in patches:
            for old, new in PATCHES[patch]:
                if old not in text:
                    raise SystemExit(f"{tag}: patch {patch} does not apply")
                text = text.replace(old, new)
        jobs.append((out, d, name, tag, text, flags))
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda job: _compile(*job), jobs))
    listed = os.path.join(out, "variants.txt")
    lines = {}
    if os.path.exists(listed):  # a build of some variants keeps the others' lines
        lines = {line.split()[0]: line for line in open(listed) if line.strip()}
    for (tag, name, *_), (_, info) in zip(chosen, results):
        lines[tag] = f"{tag} {name} {CHECK.get(name, 1 << 24)} {info}\n"
        print(tag, info, flush=True)
    with open(listed, "w") as fh:
        fh.writelines(lines[tag] for tag, *_ in VARIANTS if tag in lines and os.path.exists(os.path.join(out, tag)))


main()
