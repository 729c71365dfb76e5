"""``rosenna gpu-gate`` as a library: prove a generated model runs on the GPU, right and fast.

The gate generates the model twice (embedded and file-loaded weights; ``weights`` in the
:class:`Config`: one of them), builds it, and runs the harnesses of :mod:`rosenna.gate.harness`:

1. ``c-omp``: ``<name>_infer`` per point inside a C ``omp target teams distribute parallel for``
   (and ``c-acc``: inside an OpenACC ``parallel loop gang vector``, when OpenACC flags are given);
2. ``fortran-omp``: the same from Fortran, explicit-shape dummies (and ``fortran-acc``);
3. ``batch``: device-resident data handed to ``<name>_infer_batch`` (the native CUDA kernel with
   ``--backend cuda``; the OpenMP one with ``omp``); for a whole-field plan also ``batch-omp`` (the
   C OpenMP build beside a native one) and, from Fortran, ``batch-fortran-omp`` and
   ``batch-fortran-acc``: the module's ``<name>_infer_batch`` on arrays entered with OpenMP or
   OpenACC, each op one region over the samples;
4. ``cuda-user``: the user's own CUDA kernel calling ``<name>_infer`` per thread (cuda only);
5. ``cuda-warp``: the same kernel calling ``<name>_infer_warp`` from every lane (cuda only).

Each is compared with onnxruntime on the first points (:func:`rosenna.compare.compare`, the rule
``rosenna verify`` uses), timed over N distinct points (median of repeats, data on the device
outside the timed window), checked to have run on the device, and run at 0 and a few extra steps
over resident data under a CUPTI injection counter: the difference is what the loop moved between
host and device, which must be nothing. A planted-transfer run shows the counter sees a copy.
``host_fallback`` runs on a machine with no GPU (CI): omp backend, no device or transfer checks.
Float32 and float64 models gate alike (the harnesses take the model's precision).

The modules, in the order a run goes through them:

- :mod:`.config`: :class:`Config`, its defaults, the checks before anything is built (a visible
  device; offload flags that offload);
- :mod:`.build`: the archives, the harness programs, the transfer counter;
- :mod:`.harness` and ``templates/``: the harness sources, data files with ``@name@`` placeholders;
- :mod:`.runner`: :func:`run`, each harness measured and compared;
- :mod:`.report`: ``gate-report.md`` and ``gate-report.json``, rewritten after every row;
- :mod:`.jobs`: the Slurm and PBS job scripts that run the gate on a GPU node.
"""

from rosenna.gate.config import BACKENDS, WEIGHTS, Config, NoDevice
from rosenna.gate.runner import run

__all__ = ["BACKENDS", "WEIGHTS", "Config", "NoDevice", "run"]
