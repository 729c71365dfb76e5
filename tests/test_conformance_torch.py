"""The held-out models of the issue that brought the whole node-test suite in: column integrals
(CumSum), a regime classifier (ArgMax) and a TBNN invariant (torch.linalg.vector_norm), each
exported by both PyTorch exporters (TorchScript, dynamo=False; dynamo=True), generated, compiled in
one C and one Fortran batch and compared with onnxruntime on random inputs."""


import pytest

from rosenna import conformance
from rosenna.compare import tolerance_for

torch = pytest.importorskip("torch", reason="torch is not installed (make test installs torch==2.13.0)")
nn = torch.nn

from test_torch_ops import EXPORTERS, _reference_case, export  # noqa: E402  (after the skip)


class ColumnIntegral(nn.Module):
    """Column integrals over model levels (axis 1), from the top and from the bottom, exclusive."""

    def __init__(self):
        super().__init__()
        self.dz = nn.Parameter(torch.linspace(0.5, 1.5, 7).reshape(1, 7, 1))

    def forward(self, x):
        flux = x * self.dz
        below = torch.cumsum(flux, dim=1)
        above = torch.flip(torch.cumsum(torch.flip(flux, [1]), dim=1), [1]) - flux
        return torch.cat([below, above], dim=-1)


class RegimeClassifier(nn.Module):
    """A small MLP whose class index is the output (an int64 tensor), and the winning score."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))

    def forward(self, x):
        scores = self.net(x)
        return torch.argmax(scores, dim=-1) + 10 * torch.argmin(scores, dim=-1, keepdim=False)


class Invariants(nn.Module):
    """TBNN-style invariants: vector norms of rows and columns of a tensor field, L2 and L1."""

    def forward(self, x):
        return torch.cat([torch.linalg.vector_norm(x, dim=-1), torch.linalg.vector_norm(x, ord=1, dim=-2),
                          torch.linalg.vector_norm(x, dim=(-2, -1)).unsqueeze(-1)], dim=-1)


MODELS = {
    "cumsum": (ColumnIntegral, (3, 7, 2)),
    "argmax": (RegimeClassifier, (5, 6)),
    "vector_norm": (Invariants, (2, 3, 3)),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("held_out")
    cases = []
    for name, (module, shape) in MODELS.items():
        for exporter, dynamo in EXPORTERS.items():
            label = f"{name}_{exporter}"
            path = export(module, (torch.zeros(shape),), str(root / f"{label}.onnx"), dynamo)
            cases.append(_reference_case(str(root / "cases"), label, path))
    tol = tolerance_for("float32")
    done = conformance.run(cases, str(root / "work"), rtol=tol.rtol, atol=tol.atol, optimize="-O0")
    return {o.case.name: o for o in done}


@pytest.mark.parametrize("exporter", list(EXPORTERS))
@pytest.mark.parametrize("name", list(MODELS))
def test_held_out_model_verifies_in_c_and_fortran(outcomes, name, exporter):
    outcome = outcomes[f"{name}_{exporter}"]
    assert outcome.status == "passed", f"{outcome.status}: {outcome.detail}"
