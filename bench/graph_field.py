"""A MeshGraphNets-style processor block through the whole-field CUDA path, on the GPU: its
numbers against onnxruntime, the same bits on every call (the scatter-add's order), the INDEX
status for an out-of-range edge, and the time per call.

    .venv/bin/python bench/graph_field.py build     # here: export, generate, build into build/graph_field
    python3 bench/graph_field.py run                # on the GPU machine, from the repository root

The block (docs/model-families.md, "The whole-field form"): node features x [N, F]; edge MLP
e = MLP(x_s, x_r, x_s - x_r) on the gathered sender and receiver features; a = scatter-add of e
to the receivers; x + MLP(x, a); hidden width H. The mesh is a triangulated G x G grid (both
directions of every edge), the edge lists are inputs (legacy exporter: Gather and
ScatterElements with ``add``), fed the mesh's edges in a shuffled order.

``build`` needs rosenna (this checkout), torch (CPU), onnxruntime, nvcc and gcc. It writes
build/graph_field (carry it): the generated sources, ``libblock.a`` built with
``ROSENNA_BACKEND=cuda`` for sm_$ARCH (default 90), the driver (``driver``), the samples (``x.bin``: SAMPLES good ones, then
one whose first receiver is N, outside the mesh) and onnxruntime's outputs for the good ones
(``want.bin``).

``run`` needs the GPU and Python 3 with numpy (and nvcc and make, only where the driver built here
does not run: it is then rebuilt there). The driver runs ``block_infer_one`` on sample 0
REPS times (every call's outputs compared bit for bit with the first's), ``block_infer_batch`` on
the good samples (timed, CUDA events, median of REPS after 3 warm-ups), then the bad sample alone
(its status must be INDEX) and sample 0 again (OK). It prints one Markdown table.
"""

import argparse
import os
import shutil
import subprocess
import sys

OUT = os.environ.get("GRAPH_FIELD_OUT", os.path.join("build", "graph_field"))
ARCH = os.environ.get("ARCH", "90")
GRID, FEATURES, HIDDEN, SAMPLES, REPS = 32, 16, 64, 8, 20

DRIVER = r"""// block_infer_one and block_infer_batch of the generated kernel file on device data.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include "block.h"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

static float median(std::vector<float> t) { std::sort(t.begin(), t.end()); return t[t.size() / 2]; }

int main(int argc, char **argv)
{
    const int samples = atoi(argv[1]), reps = atoi(argv[2]);
    const size_t nx = BLOCK_NX, ny = BLOCK_NY;
    std::vector<float> x((samples + 1) * nx), y(samples * ny), first(ny), again(ny);
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x.data(), sizeof(float), x.size(), f) != x.size()) return 2;
    fclose(f);
    float *dx, *dy;
    CK(cudaMalloc(&dx, sizeof(float) * x.size()));
    CK(cudaMalloc(&dy, sizeof(float) * y.size()));
    CK(cudaMemcpy(dx, x.data(), sizeof(float) * x.size(), cudaMemcpyHostToDevice));
    cudaEvent_t start, stop;
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    int differ = 0, status = 0;
    std::vector<float> one, batch;
    for (int r = 0; r < reps + 3; ++r) {  // sample 0 alone, every call's bits against the first's
        CK(cudaEventRecord(start));
        status |= block_infer_one(dx, dy, 0);
        CK(cudaEventRecord(stop));
        CK(cudaEventSynchronize(stop));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, start, stop));
        if (r >= 3) one.push_back(ms);
        CK(cudaMemcpy(r ? again.data() : first.data(), dy, sizeof(float) * ny, cudaMemcpyDeviceToHost));
        differ += r && memcmp(first.data(), again.data(), sizeof(float) * ny) != 0;
    }
    for (int r = 0; r < reps + 3; ++r) {
        CK(cudaEventRecord(start));
        status |= block_infer_batch(samples, dx, dy, 0);
        CK(cudaEventRecord(stop));
        CK(cudaEventSynchronize(stop));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, start, stop));
        if (r >= 3) batch.push_back(ms);
    }
    CK(cudaMemcpy(y.data(), dy, sizeof(float) * y.size(), cudaMemcpyDeviceToHost));
    const int bad = block_infer_one(dx + samples * nx, dy, 0);  // the out-of-range receiver
    const int after = block_infer_one(dx, dy, 0);
    CK(cudaMemcpy(again.data(), dy, sizeof(float) * ny, cudaMemcpyDeviceToHost));
    differ += memcmp(first.data(), again.data(), sizeof(float) * ny) != 0;
    f = fopen("y.bin", "wb");
    fwrite(y.data(), sizeof(float), y.size(), f);
    fclose(f);
    printf("%d %d %d %d %.4f %.4f\n", status, differ, bad, after, median(one), median(batch));
    return 0;
}
"""


def mesh(g):
    pairs = set()
    for i in range(g - 1):
        for j in range(g - 1):
            a, b, c, d = i * g + j, (i + 1) * g + j, i * g + j + 1, (i + 1) * g + j + 1
            for u, v in ((a, b), (a, c), (b, c), (b, d), (c, d)):
                pairs |= {(u, v), (v, u)}
    return sorted(pairs), g * g


def compile_driver():
    """``libblock.a`` (the CUDA backend, for any x86-64 host CPU) and the driver, in OUT."""
    subprocess.run(["make", "-s", "-f", "block.mk", "ROSENNA_BACKEND=cuda", "ROSENNA_TARGET=generic"], cwd=OUT,
                   check=True)
    subprocess.run(["nvcc", "-O2", f"-arch=sm_{ARCH}", "-I.", "driver.cu", "libblock.a", "-Xcompiler", "-fopenmp",
                    "-lm", "-o", "driver"], cwd=OUT, check=True)
    for junk in os.listdir(OUT):
        if junk.endswith(".o"):
            os.remove(os.path.join(OUT, junk))


def build():
    import numpy as np
    import onnxruntime as ort
    import torch

    sys.path.insert(0, os.getcwd())
    from rosenna import abi
    from rosenna.generate import Options, build_plan

    os.makedirs(OUT, exist_ok=True)
    pairs, nodes = mesh(GRID)

    def mlp(i, o):
        return torch.nn.Sequential(torch.nn.Linear(i, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, o))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.edge, self.node = mlp(3 * FEATURES, HIDDEN), mlp(FEATURES + HIDDEN, FEATURES)

        def forward(self, x, send, recv):
            xs, xr = x[send], x[recv]
            e = self.edge(torch.cat([xs, xr, xs - xr], -1))
            agg = torch.zeros(x.shape[0], HIDDEN).scatter_add(0, recv.unsqueeze(-1).expand(-1, HIDDEN), e)
            return x + self.node(torch.cat([x, agg], -1))

    torch.manual_seed(43)
    rng = np.random.default_rng(43)
    send = np.array([p[0] for p in pairs])
    recv = np.array([p[1] for p in pairs])
    path = os.path.join(OUT, "block.onnx")
    args = (torch.randn(nodes, FEATURES), torch.tensor(send), torch.tensor(recv))
    torch.onnx.export(Block().eval(), args, path, dynamo=False, input_names=["x", "send", "recv"])
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    xs, want = [], []
    for _ in range(SAMPLES + 1):
        order = rng.permutation(len(pairs))
        feed = {"x": rng.normal(size=(nodes, FEATURES)).astype(np.float32), "send": send[order], "recv": recv[order]}
        if len(xs) < SAMPLES:
            want.append(sess.run(None, feed)[0].reshape(-1))
        else:
            feed["recv"] = feed["recv"].copy()
            feed["recv"][0] = nodes
        xs.append(np.concatenate([feed[k].reshape(-1).astype(np.float32) for k in ("x", "send", "recv")]))
    np.stack(xs).tofile(os.path.join(OUT, "x.bin"))
    np.stack(want).astype(np.float32).tofile(os.path.join(OUT, "want.bin"))
    plan = build_plan(path, Options(name="block"))[1]
    assert plan.path == "whole" and plan.runtime_indexed, "the block must take the whole-field path"
    subprocess.run([sys.executable, "-m", "rosenna", "generate", path, "--out", OUT, "--name", "block", "--lang", "c",
                    "--embed-weights", "--gpu-arch", ARCH], check=True)
    with open(os.path.join(OUT, "statuses.txt"), "w") as fh:
        fh.write(f"{abi.STATUS['OK']} {abi.STATUS['INDEX']}\n")
    with open(os.path.join(OUT, "driver.cu"), "w") as fh:
        fh.write(DRIVER)
    compile_driver()
    print(f"built {OUT}: {nodes} nodes, {len(pairs)} edges, {plan.nx} inputs and {plan.ny} outputs per sample")


def run():
    import numpy as np

    pairs, nodes = mesh(GRID)
    proc = subprocess.run(["./driver", str(SAMPLES), str(REPS)], cwd=OUT, capture_output=True, text=True)
    if proc.returncode and shutil.which("nvcc"):  # (built against a CUDA runtime newer than the driver here)
        print(f"driver failed ({proc.stderr.strip()}); rebuilding it with this machine's nvcc", file=sys.stderr)
        subprocess.run(["make", "-s", "-f", "block.mk", "clean"], cwd=OUT, check=True)
        compile_driver()
        proc = subprocess.run(["./driver", str(SAMPLES), str(REPS)], cwd=OUT, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"driver failed: {proc.stderr.strip()}")
    line = proc.stdout.split()
    status, differ, bad, after = map(int, line[:4])
    with open(os.path.join(OUT, "statuses.txt")) as fh:
        ok_code, index_code = map(int, fh.read().split())
    one_ms, batch_ms = map(float, line[4:])
    got = np.fromfile(os.path.join(OUT, "y.bin"), np.float32).reshape(SAMPLES, -1)
    want = np.fromfile(os.path.join(OUT, "want.bin"), np.float32).reshape(SAMPLES, -1)
    err = np.abs(got.astype(np.float64) - want)
    ratio = float(np.max(err / (1e-6 + 1e-5 * np.abs(want))))  # verify's float32 rule: <= 1 passes
    print(f"| mesh | nodes | edges | infer_one, ms | infer_batch of {SAMPLES}, ms per sample | "
          "same bits over calls | worst error / verify's tolerance | statuses (good, bad index, next) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {GRID} x {GRID} | {nodes} | {len(pairs)} | {one_ms:.3f} | {batch_ms / SAMPLES:.3f} | "
          f"{'yes' if not differ else f'no ({differ} calls differ)'} | {ratio:.3f} | {status}, {bad}, {after} |")
    ok = status == ok_code and differ == 0 and ratio <= 1 and bad == index_code and after == ok_code
    print("checked: " + ("all as promised" if ok else
                         f"FAILED (want statuses {ok_code}, {index_code}, {ok_code}, the same bits, ratio <= 1)"))
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("build", "run"))
    step = parser.parse_args().step
    return build() if step == "build" else run()


if __name__ == "__main__":
    sys.exit(main())
