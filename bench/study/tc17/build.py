"""tc17 study: generate the models with this branch, write ref.bin, compile kernel + driver per variant.
   .venv/bin/python bench/study/tc17/build.py build/dev-tc17 [model ...]; then cp bench/study/tc17/run.sh bench/study/tc17/torch_time.py build/dev-tc17/ 
   The split-accumulation variants (-DROSENNA_TC_SPLIT=0/1) and the 16-points-per-warp chain
   (ROSENNA_STUDY_CPW=16) of the session-21 study need the study switches of commit 218e4f6
   (removed afterwards); from later commits this builds the final kernels, the fast-exp variants
   and the FP32 baselines."""
import os, subprocess, sys, struct, shutil
import numpy as np
sys.path.insert(0, "bench")
import frontier
from rosenna.generate import Options, generate
from rosenna import zoo
from rosenna.emit import cuda

OUT = sys.argv[1]
MODELS = dict(frontier.MLPS)
MODELS.update({
    "mlp256": (16, [(256, "relu")] * 3 + [(8, None)]),
    "mlp512": (16, [(512, "relu")] * 2 + [(8, None)]),
    "mish64": (5, [(64, "mish"), (64, "mish"), (3, None)]),
    "tanh64": (5, [(64, "tanh"), (64, "tanh"), (3, None)]),
    "silu16": (5, [(64, "silu"), (64, "silu"), (3, None)]),
    "gelu16": (5, [(64, "gelu"), (64, "gelu"), (3, None)]),
})
ACT = {None: 0, "Relu": 1, "Sigmoid": 2, "Tanh": 3, "Swish": 4, "Gelu": 5, "Mish": 6}
VARIANTS = {  # name -> list of (variant label, extra nvcc flags, fast activations?)
    "silu": [("silu split2", "", 0), ("silu split2 fastexp", "", 1), ("silu fp32", "-DROSENNA_NO_TENSOR_CORES", 0)],
    "gelu": [("gelu split2", "", 0), ("gelu fp32", "-DROSENNA_NO_TENSOR_CORES", 0)],
    "mish64": [("mish64 split2", "", 0), ("mish64 split2 fastexp", "", 1)],
    "tanh64": [("tanh64 split2", "", 0)],

    "gemm_big": [("gemm_big split2", "", 0)],
    "tanh96": [("tanh96 wide96", "", 0), ("tanh96 fp32", "-DROSENNA_NO_TENSOR_CORES", 0)],
    "mlp128": [("mlp128 wide split", "", 0)],
    "mlp256": [("mlp256 wide", "", 0)],
    "mlp512": [("mlp512 wide", "", 0)],
}
FAST = [("expf(", "__expf("), ("1.0f / (1.0f + __expf", "__frcp_rn(1.0f + __expf")]


def torch_mlp(nx, layers):
    from torch import nn
    acts = {"silu": nn.SiLU, "gelu": nn.GELU, "tanh": nn.Tanh, "relu": nn.ReLU, "sigmoid": nn.Sigmoid, "mish": nn.Mish}
    mods, width = [], nx
    for out, act in layers:
        mods.append(nn.Linear(width, out))
        if act:
            mods.append(acts[act]())
        width = out
    return nn.Sequential(*mods)


def main():
    import torch
    names = sys.argv[2:] or list(VARIANTS)
    os.makedirs(OUT, exist_ok=True)
    gen = os.path.join("build", "study-gen")
    for name in names:
        d = os.path.join(gen, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{name}.onnx")
        if name in ("gemm_big", "mlp128"):
            zoo.save(name, path)
        else:
            torch.manual_seed(0)
            frontier._export(torch_mlp(*MODELS[name]), (1, MODELS[name][0]), path)
        plan, _ = generate(path, d, Options(name=name, lang="c", embed=False))
        layers = cuda.mlp_layers(plan)
        choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
        print(name, "base", choice.kind, "tensor", choice.tensor and choice.tensor.label, flush=True)
        with open(os.path.join(OUT, f"{name}.ref"), "wb") as fh:
            fh.write(struct.pack("i", len(layers)))
            for l in layers:
                fh.write(struct.pack("iii", l.k, l.n, ACT[l.act]))
                fh.write(np.ascontiguousarray(l.w, np.float32).tobytes())
                fh.write(np.ascontiguousarray(l.b, np.float32).tobytes())
        src = open(os.path.join(d, f"{name}_kernel.cu")).read()
        a = src.index(f"{name}_batch_kernel(int n")
        a = src.index("{", a)
        b = src.index("\n}\n", a)
        stub = src[:a] + "{\n    (void)n; (void)x; (void)y;" + src[b:]  # the FP32 base kernel: most of nvcc's time
        for label, flags, fast in VARIANTS[name]:
            text = src if "NO_TENSOR" in flags else stub
            if fast:
                for a, b in FAST:
                    text = text.replace(a, b)
            tag = label.replace(" ", "_")
            cu = os.path.join(d, f"{tag}.cu")
            open(cu, "w").write(text)
            exe = os.path.join(OUT, tag)
            cmd = (f"nvcc -O3 -gencode arch=compute_90,code=sm_90 -cudart shared -Xptxas -v {flags} -DUPLOAD -DNAME={name} -DHDR='\"{name}.h\"' -DVARIANT='\"{label}\"' "
                   f"-I{d} -Irosenna/data bench/study/tc17/driver.cu {cu} -o {exe}")
            p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
            if p.returncode:
                print(p.stderr[-3000:])
                raise SystemExit(1)
            stats = [l for l in p.stderr.splitlines() if "registers" in l or "spill" in l]
            ents = [l for l in p.stderr.splitlines() if "Compiling entry" in l]
            info = []
            for i, l in enumerate(p.stderr.splitlines()):
                if "Compiling entry" in l and ("tc_kernel" in l or "batch_kernel" in l):
                    nxt = p.stderr.splitlines()[i + 1:i + 4]
                    info.append(l.split("'")[1][:24] + ": " + " | ".join(x.strip() for x in nxt if "spill" in x or "Used" in x))
            print(f"  {label}: {os.path.getsize(exe)//1024} KB; " + " ;; ".join(info), flush=True)


main()
