"""The native batched kernel: ``<name>_kernel.cu`` for ``ROSENNA_BACKEND=cuda`` or ``hip``.

Where to look:

- :mod:`~rosenna.emit.cuda.kinds`: the ordered table of batched kernels, and :func:`choose`;
  one module per kind: :mod:`~rosenna.emit.cuda.whole_field` (the whole-field kernels the
  strategy's :class:`rosenna.strategy.Field` decided, with :mod:`~rosenna.emit.cuda.field_fuse`,
  :mod:`~rosenna.emit.cuda.field_cluster`, :mod:`~rosenna.emit.cuda.conv_igemm` and
  :mod:`~rosenna.emit.cuda.conv_smem` rendering its parts),
  :mod:`~rosenna.emit.cuda.narrow` (FP32, one thread per point, layers in registers),
  :mod:`~rosenna.emit.cuda.staged` (FP32 wide MLPs up to 128 wide, the default for them),
  :mod:`~rosenna.emit.cuda.tiled` (FP32 wide MLPs beyond), :mod:`~rosenna.emit.cuda.point`
  (anything else), and the tensor-core kinds compiled in beside them:
  :mod:`~rosenna.emit.cuda.tc_chain` (narrow 3xTF32 chain, CUDA sm_80+) and
  :mod:`~rosenna.emit.cuda.tc_wide` (wide 3xTF32, hidden layers 64 to 512 wide, CUDA sm_80+);
- :mod:`~rosenna.emit.cuda.source`: the parts every kernel file has (weights, the per-point
  routine, ``<name>_infer_batch``, ``<name>_device_upload``);
- :mod:`~rosenna.emit.cuda.runtime`: the CUDA/HIP API names, the backends and the ``.mk`` rules;
- ``rosenna/data/*.cuh``: the fixed device code, real files a compiler checks on their own.

Only single precision takes the FP32 MLP kinds; double precision takes ``point``, and a float64
chain up to 128 wide the FP64 tensor-core chain beside it (:mod:`~rosenna.emit.cuda.dmma`, CUDA sm_80+).
``-DROSENNA_NO_TENSOR_CORES`` on the kernel file's compile line keeps FP32 kernels everywhere. The
measurements behind each kind are in
results/measurement-log.md.
"""

from rosenna.emit.cuda.kinds import BATCH_KINDS, TENSOR_KINDS, Choice, choose  # noqa: F401
from rosenna.emit.cuda.runtime import BACKENDS, RUNTIME_API, runtime_mapping  # noqa: F401
from rosenna.emit.cuda.source import kernel_filename, kernel_source  # noqa: F401
from rosenna.limits import CONSTANT_LIMIT  # noqa: F401 (the default of the tuning's constant_limit)
