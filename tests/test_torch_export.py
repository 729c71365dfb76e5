"""Real exporters' output: a PyTorch MLP through both the TorchScript and the dynamo exporter."""

import pytest

from rosenna.generate import Options
from rosenna.verify import verify

torch = pytest.importorskip("torch", reason="torch is not installed (make test installs torch==2.13.0)")


class Surrogate(torch.nn.Module):
    """A closure-style MLP with two inputs and two outputs, as a solver developer would train."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(5, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                        torch.nn.ReLU(), torch.nn.Linear(32, 3))
        self.side = torch.nn.Linear(2, 1)

    def forward(self, state, params):
        h = self.body(torch.cat([state, params], dim=-1))
        return torch.sigmoid(h), self.side(params).reshape(-1, 1)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("precision", ["single", "double"])
def test_torch_mlp_verifies(tmp_path, dynamo, precision):
    path = str(tmp_path / "surrogate.onnx")
    args = (torch.zeros(1, 3), torch.zeros(1, 2))
    kwargs = {"dynamo": dynamo, "input_names": ["state", "params"], "output_names": ["rate", "scale"]}
    if not dynamo:
        kwargs["dynamic_axes"] = {"state": {0: "n"}, "params": {0: "n"}}
    torch.onnx.export(Surrogate().eval(), args, path, **kwargs)
    plan, results = verify(path, Options(precision=precision, embed=(precision == "double")), cases=8,
                           keep=str(tmp_path / "v"))
    assert [s.name for s in plan.inputs] == ["state", "params"]
    assert all(r.passed for r in results), [(r.output, r.lang, r.abs_err) for r in results]
    assert len(results) == 8  # 2 outputs x (infer, infer_batch) x (C, Fortran)


def test_readme_recipe_exports_models_that_verify(tmp_path):
    """The user guide's "From PyTorch to rosenna" script (docs/guide/generate.md), run as written:
    both files verify, the dynamo one with its weights in external data beside the .onnx."""
    import os
    import re
    import subprocess
    import sys

    page = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "guide", "generate.md")
    script = re.search(r"```python file=export.py\n(.*?)```", open(page, encoding="utf-8").read(), re.S).group(1)
    (tmp_path / "export.py").write_text(script)
    subprocess.run([sys.executable, "export.py"], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "surrogate_dynamo.onnx.data").stat().st_size > 0
    for name in ("surrogate.onnx", "surrogate_dynamo.onnx"):
        plan, results = verify(str(tmp_path / name), Options(), cases=4, keep=str(tmp_path / name[:-5]))
        assert [s.name for s in plan.inputs] == ["state"] and [s.name for s in plan.outputs] == ["flux"]
        assert results and all(r.passed for r in results), name
