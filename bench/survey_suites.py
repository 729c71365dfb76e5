"""Survey: the model definitions of roseNNa's, FTorch's and TorchFort's own test suites, re-exported
with PyTorch and run through ``rosenna verify``.

The definitions below are written here, small, after the architectures in those repositories (the
file each follows is named; none of their code is copied). Each is exported with torch's
TorchScript-based exporter at the opset its suite used (roseNNa's golden files: opset 10) and at 17,
then ``python -m rosenna verify`` runs in a subprocess. A model passes when verify exits 0; it is
refused cleanly when verify exits 2 with one line on stderr and no traceback; anything else fails.

    .venv/bin/python bench/survey_suites.py [--markdown] [--only NAME ...]

The table in docs/survey.md is this command's --markdown output.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import warnings

import torch
from torch import nn

torch.manual_seed(0)

RN = "comp-physics/roseNNa goldenFiles/"
FT = "Cambridge-ICCS/FTorch "
TF = "NVIDIA/TorchFort "


def seq(*layers):
    return nn.Sequential(*layers).eval()


class Fixed(nn.Module):
    """A bias-free Linear with a fixed weight (FTorch's SimpleNet, BatchingNet)."""

    def __init__(self, weight):
        super().__init__()
        self.lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            self.lin.weight.copy_(weight)

    def forward(self, x):
        return self.lin(x)


class TwoLinear(nn.Module):
    """Two inputs, two outputs, one Linear each (FTorch's MultiIONet)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
        with torch.no_grad():
            self.a.weight.copy_(2 * torch.eye(4))
            self.b.weight.copy_(3 * torch.eye(4))

    def forward(self, x1, x2):
        return self.a(x1), self.b(x2)


class Passthrough(nn.Module):
    """TorchFort's test Net1/Net2: input + 0 * Linear(input), one or two inputs."""

    def __init__(self, two):
        super().__init__()
        self.layer, self.two = nn.Linear(10, 10), two

    def forward(self, *xs):
        h = self.layer(xs[0])
        out = tuple(x + 0.0 * h for x in xs)
        return out if self.two else out[0]


class Loss(nn.Module):
    """TorchFort's test losses: sums of every argument over their count (one scalar output)."""

    def __init__(self, args):
        super().__init__()
        self.args = args

    def forward(self, *xs):
        return sum(torch.sum(x) for x in xs) / (self.args * xs[0].numel())


class SumEach(nn.Module):
    """TorchFort's Loss3: two scalar outputs."""

    def forward(self, p, q):
        return torch.sum(p), torch.sum(q)


class Lstm(nn.Module):
    """roseNNa's LSTM goldens: LSTM(input, hidden, 1 layer, batch first) with given h0, c0, and what
    each returns: the cell state, the sequence output, or a Linear stack on the output or on h."""

    def __init__(self, inputs, hidden, returns, head=False):
        super().__init__()
        self.lstm = nn.LSTM(inputs, hidden, 1, batch_first=True)
        self.returns = returns
        self.head = seq(nn.Linear(hidden, 2), nn.ReLU(), nn.Linear(2, 3), nn.Sigmoid(), nn.Linear(3, 3),
                        nn.ReLU(), nn.Linear(3, 1), nn.Sigmoid()) if head else None

    def forward(self, x, h0, c0):
        out, (h, c) = self.lstm(x, (h0, c0))
        pick = {"c": c, "out": out, "h": h}[self.returns]
        return self.head(pick.reshape(-1, pick.shape[-1])) if self.head is not None else pick


class Cnn(nn.Module):
    """ResNet-style block and small CNN classifier (FTorch's 03_ResNet example is torchvision's
    ResNet-18; its repeated unit, a basic block, stands in for it at 8x8)."""

    def __init__(self):
        super().__init__()
        self.stem = seq(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.body = seq(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.head = seq(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x):
        s = self.stem(x)
        return self.head(torch.relu(self.body(s) + s))


def r(*shape):
    return torch.rand(*shape)


def lstm_inputs(inputs, hidden, steps=2):
    return (r(1, steps, inputs), torch.ones(1, 1, hidden), torch.ones(1, 1, hidden))


#: (suite, name, where the architecture comes from, module, example inputs, opset of that suite)
MODELS = [
    ("roseNNa", "gemm_small", RN + "gemm_small", seq(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3), nn.ReLU()),
     (r(1, 2),), 10),
    ("roseNNa", "gemm_big", RN + "gemm_big", seq(nn.Linear(2, 20), nn.ReLU(), nn.Linear(20, 30), nn.Sigmoid(),
                                                 nn.Linear(30, 30), nn.ReLU(), nn.Linear(30, 40), nn.Tanh(),
                                                 nn.Linear(40, 1), nn.Sigmoid()), (r(1, 2),), 10),
    ("roseNNa", "droplet", RN + "droplet", seq(nn.Linear(4, 5), nn.Linear(5, 3)), (torch.ones(1, 4),), 10),
    ("roseNNa", "batchnet", RN + "batchnet", seq(nn.Linear(2, 8), nn.ReLU(True), nn.Linear(8, 16), nn.ReLU(True),
                                                 nn.Linear(16, 32), nn.ReLU(True), nn.Linear(32, 16), nn.ReLU(True),
                                                 nn.Linear(16, 8), nn.ReLU(True), nn.Linear(8, 68)),
     (torch.ones(1, 2),), 10),
    ("roseNNa", "conv_basic", RN + "conv_basic", seq(nn.Conv2d(2, 3, 3)), (r(2, 2, 7, 7),), 10),
    ("roseNNa", "conv_padding", RN + "conv_padding", seq(nn.Conv2d(2, 3, 3, padding=[2, 3])), (r(1, 2, 6, 6),), 10),
    ("roseNNa", "conv_strides", RN + "conv_strides", seq(nn.Conv2d(2, 3, 3, stride=2)), (r(1, 2, 7, 7),), 10),
    ("roseNNa", "conv_padding_stride", RN + "conv_padding-stride",
     seq(nn.Conv2d(2, 3, 3, padding=[2, 3], stride=2)), (r(1, 2, 6, 6),), 10),
    ("roseNNa", "avgpool_basic", RN + "avgpool_basic", seq(nn.AvgPool2d(3)), (r(1, 2, 6, 6),), 10),
    ("roseNNa", "maxpool_basic", RN + "maxpool_basic", seq(nn.MaxPool2d(3)), (r(1, 2, 6, 6),), 10),
    ("roseNNa", "maxpool_padding", RN + "maxpool_padding", seq(nn.MaxPool2d(3, padding=[1, 1])), (r(1, 2, 6, 6),), 10),
    ("roseNNa", "maxpool_strides", RN + "maxpool_strides", seq(nn.MaxPool2d(3, stride=1)), (r(1, 2, 6, 6),), 10),
    ("roseNNa", "lstm_cell", RN + "lstm_cell", Lstm(5, 2, "c").eval(), lstm_inputs(5, 2), 10),
    ("roseNNa", "lstm_output", RN + "lstm_output", Lstm(10, 20, "out").eval(), lstm_inputs(10, 20), 10),
    ("roseNNa", "lstm_gemm", RN + "lstm_gemm", Lstm(5, 2, "out", head=True).eval(), lstm_inputs(5, 2), 10),
    ("roseNNa", "lstm_gemm_hid", RN + "lstm_gemm_hid", Lstm(5, 2, "h", head=True).eval(), lstm_inputs(5, 2), 10),
    ("FTorch", "simplenet", FT + "examples/02_SimpleNet/simplenet.py", Fixed(2 * torch.eye(5)).eval(),
     (r(1, 5),), 17),
    ("FTorch", "batchingnet", FT + "test/unit/fixtures/create_batchingnet_test_model.py",
     Fixed(torch.diag(torch.arange(5.0))).eval(), (r(1, 5),), 17),
    ("FTorch", "multiionet", FT + "examples/05_MultiIO/multiionet.py", TwoLinear().eval(), (r(1, 4), r(1, 4)), 17),
    ("FTorch", "resnet_block", FT + "examples/03_ResNet/resnet18.py (one basic block)", Cnn().eval(),
     (r(1, 3, 8, 8),), 17),
    ("TorchFort", "net1", TF + "tests/general/scripts/setup_tests.py Net1", Passthrough(False).eval(),
     (r(1, 10),), 17),
    ("TorchFort", "net2", TF + "tests/general/scripts/setup_tests.py Net2", Passthrough(True).eval(),
     (r(1, 10), r(1, 10)), 17),
    ("TorchFort", "loss1", TF + "tests/general/scripts/setup_tests.py Loss1", Loss(2).eval(), (r(1, 10), r(1, 10)), 17),
    ("TorchFort", "loss2_extra", TF + "tests/general/scripts/setup_tests.py Loss2Extra", Loss(6).eval(),
     tuple(r(1, 10) for _ in range(6)), 17),
    ("TorchFort", "loss3", TF + "tests/general/scripts/setup_tests.py Loss3", SumEach().eval(),
     (r(1, 10), r(1, 10)), 17),
    ("TorchFort", "fcn_circular", TF + "examples/fortran/simulation/generate_fcn_model.py",
     seq(nn.Conv2d(1, 1, 3, padding=1, padding_mode="circular")), (r(1, 1, 8, 8),), 17),
    ("TorchFort", "mlp_native", TF + "examples/fortran/simulation/config_mlp_native.yaml (layer sizes /16)",
     seq(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)), (r(1, 64),), 17),
    ("TorchFort", "policy", TF + "examples/cpp/cart_pole/python/models.py PolicyFunc",
     seq(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1), nn.Tanh()), (r(1, 4),), 17),
]


def export(module, inputs, opset, path):
    names = [f"input{i}" for i in range(len(inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, path, opset_version=opset, input_names=names, dynamo=False)


def verify(path, lang="both", python=sys.executable):
    """``(outcome, message)``: outcome is 'verified', 'refused' (exit 2, one line, no traceback) or
    'FAILED'."""
    run = subprocess.run([python, "-m", "rosenna", "verify", path, "--lang", lang, "--cases", "4"],
                         capture_output=True, text=True)
    err = [line for line in run.stderr.strip().splitlines() if not line.startswith("rosenna verify: note:")]
    if run.returncode == 0:
        return "verified", ""
    if run.returncode == 2 and len(err) <= 2 and "Traceback" not in run.stderr:
        return "refused", err[0] if err else ""
    return "FAILED", f"exit {run.returncode}: {(run.stderr or run.stdout).strip()[-300:]}"


def survey(only=None, opsets=(None, 17), lang="both"):
    """Rows ``(suite, name, opset, source, outcome, message)``; opset None: the suite's own."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for suite, name, source, module, inputs, own in MODELS:
            if only and name not in only:
                continue
            for opset in sorted({own if o is None else o for o in opsets}):
                path = os.path.join(tmp, f"{name}_op{opset}.onnx")
                try:
                    export(module, inputs, opset, path)
                except Exception as exc:  # torch's exporter refusing is a finding, not a crash
                    rows.append((suite, name, opset, source, "not exported", str(exc).splitlines()[0][:120]))
                    continue
                rows.append((suite, name, opset, source, *verify(path, lang)))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--only", nargs="*", help="model names to run")
    args = parser.parse_args(argv)
    rows = survey(args.only)
    if args.markdown:
        print("| suite | model | opset | after | rosenna verify |\n| --- | --- | --- | --- | --- |")
        for suite, name, opset, source, outcome, message in rows:
            print(f"| {suite} | {name} | {opset} | {source} | {outcome}{': ' + message if message else ''} |")
    else:
        for row in rows:
            print(" | ".join(str(c) for c in (row[:3] + row[4:])))
    counts = {k: sum(r[4] == k for r in rows) for k in ("verified", "refused", "FAILED", "not exported")}
    print(f"\n{len(rows)} exports: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 1 if counts["FAILED"] else 0


if __name__ == "__main__":
    sys.exit(main())
