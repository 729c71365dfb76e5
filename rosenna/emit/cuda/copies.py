"""The FP32 MLP kernels' copies of the weights in ``<name>_kernel.cu``, and how embedded weights
are written into it once.

A copy (``<name>_packed``, ``<name>_tc_packed`` of the 3xTF32 kernels, the routines'
``<name>_rchain``, ``<name>_rpacked``, ``<name>_rwarp``) is a ``rosenna_floats<N>``
(``rosenna/data/rosenna_copies.cuh``); the kernels read ``<copy>.v`` (:func:`ref`). File-loaded
weights leave every copy to ``<name>_device_upload``. Embedded weights are written as literals
once, as ``<name>_model::packed``, a ``constexpr`` object in the ``<name>_packed`` layout
(:func:`source`), and:

- ``<name>_packed`` is a copy of it: a constant initialiser in every C++ dialect (HIP's default
  C++11 too);
- each tensor-core copy (CUDA only) is the result of its packing evaluated while the device code
  compiles: the C++ packing ``<name>_device_upload`` runs for file-loaded weights
  (``host_packing()`` of its layout), reading ``host[i][o * K + k]`` through
  ``<name>_model::host`` (``rosenna_view``: the weights file's arrays, served from ``packed``),
  with ``rosenna_host_tf32`` rounding in arithmetic a constant expression may use
  (``rosenna/data/rosenna_host_tf32.h``: the bits of the numpy packing's rounding for every finite
  float). The device data is byte for byte what the literals gave (tests compare the PTX);
- the rest (the routines' FP32 copies, read on HIP too) stay literals.

The packing is evaluated under the compiler's constant-evaluation budget (nvcc 13 packed a
170,760-float copy and refused a 302,344-float one with ``__builtin_bit_cast``; 72,072 and 104,968
in the arithmetic form ``rosenna_host_tf32.h`` falls back on without it), so a copy of more than the tuning's
``compile_pack_floats`` floats is written as literals, as is every copy of a model with a weight
the packing's arithmetic would carry out of float range (non-finite, or 2^127 and above), and every
copy where the file has no ``<name>_packed`` to read from.
"""

import numpy as np

from rosenna.emit import fixed
from rosenna.emit.cuda import tf32
from rosenna.emit.cuda.mlp import PackedLayout, float_literals

#: Fact (float format): above this magnitude TF32 rounding may carry a weight to 2^128 (infinity),
#: which is no constant expression, so such a model's copies are literals.
_FINITE_BELOW = 2.0 ** 127


def ref(name):
    """The C++ expression of a copy's floats (a ``float`` array)."""
    return f"{name}.v"


def library():
    """``rosenna/data/rosenna_copies.cuh``: ``rosenna_floats``."""
    return fixed.load("rosenna_copies.cuh")


def _literals(values):
    return f" = {{{{\n    {float_literals(values)}\n}}}}"


def declare(storage, name, size, init=""):
    """A copy: ``static <storage> __align__(16) rosenna_floats<size> <name><init>;`` (``init``: ""
    for file-loaded weights, :func:`_literals` or ``ROSENNA_PACKED(...)``)."""
    return f"static {storage} __align__(16) rosenna_floats<{size}> {name}{init};"


def literal(storage, name, layout):
    """A copy initialised from its literals (``layout.packed()``)."""
    return declare(storage, name, layout.size, _literals(layout.packed()))


def file_loaded(storage, name, size):
    """A copy ``<name>_device_upload`` fills (``__constant__`` stays constant memory; the rest is
    writable ``__device__``)."""
    if storage == "ROSENNA_CONST":  # (the batched kernel's copy: read from global memory when file-loaded)
        storage = "__device__"
    storage = "__constant__" if storage.startswith("__constant__") else storage.replace(" const", "")
    return declare(storage, name, size)


def has_source(plan, choice):
    """Whether the file writes the weights once as ``<name>_model::packed``: embedded float weights,
    a ``<name>_packed`` layout to hold them and a 3xTF32 kernel whose copy is packed from it (the
    copy it saves; without one ``<name>_packed`` is written as literals, as every copy is with the
    tuning's ``compile_pack_floats`` at 0), every weight finite and below 2^127."""
    tuning = choice.strategy.tuning
    if not (plan.embed and plan.ctype == "float" and choice.layers and isinstance(choice.layout, PackedLayout)
            and (choice.tensor_chain or choice.tensor_wide) and choice.tensor_layout.size <= tuning.compile_pack_floats):
        return False
    for layer in choice.layers:
        for values in (layer.w, layer.b):
            v = np.asarray(values, np.float64)
            if v.size and not (np.isfinite(v).all() and np.abs(v).max() < _FINITE_BELOW):
                return False
    return True


def packs(plan, choice, layout):
    """Whether ``layout``'s copy is packed while the file compiles (else literals)."""
    return has_source(plan, choice) and layout.size <= choice.strategy.tuning.compile_pack_floats


def source(plan, choice):
    """``rosenna/data/rosenna_packed.cuh`` (``rosenna_view``, ``ROSENNA_PACKED``) and ``namespace
    <name>_model``: ``packed`` (the literals, in the ``<name>_packed`` layout) and, for the
    tensor-core packings (CUDA only), ``host`` and the TF32 rounding."""
    n, layout = plan.name, choice.layout
    # (the compact fragments' rounding where a packing writes them: the wide kernel's, or the warp body's own)
    code = choice.tensor_layout.host_packing("tc") + ("rosenna_host_compact(" if choice.strategy.tuning.warp_compact else "")
    views = {}
    for layer, (woff, boff, npad) in zip(choice.layers, layout.offsets):
        views[layer.w_index] = f"{{packed.v + {woff}, {layer.k}, {npad}}}"
        views[layer.b_index] = f"{{packed.v + {boff}, 0, 0}}"
    table = ",\n    ".join(views.get(i, "{packed.v, 0, 0}") for i in range(max(views) + 1))
    return (fixed.load("rosenna_packed.cuh") + "\n"
            f"/* The embedded weights, once: every copy below is this object or packed from it while the file\n"
            f"   compiles (rosenna/emit/cuda/copies.py). Per layer W input-major [K][NP], then the bias [NP]. */\n"
            f"namespace {n}_model {{\nconstexpr __attribute__((unused)) rosenna_floats<{layout.size}> packed{_literals(layout.packed())};\n"
            f"}}  // namespace {n}_model\n"
            f"{tf32.GUARD}\n{tf32.host_tf32(code)}\n"
            f"namespace {n}_model {{\n/* host[i]: the weights file's i-th array, as <name>_device_upload's packing reads it. */\n"
            f"constexpr __attribute__((unused)) rosenna_view host[] = {{\n    {table}\n}};\n}}  // namespace {n}_model\n#endif")


def packed_copy(storage, plan, choice):
    """``<name>_packed``: a copy of ``<name>_model::packed`` where the file has it."""
    n = plan.name
    return declare(storage, f"{n}_packed", choice.layout.size, f" ROSENNA_PACKED({n}_model::packed)")


def packed_at_compile(storage, plan, name, layout, var):
    """A copy packed while the file compiles: its packing (``layout.host_packing(var)``, writing
    ``float *<var>``) as ``<name>_model::<copy>()``, and the copy initialised by it."""
    n = plan.name
    fn = name[len(n) + 1:] if name.startswith(n + "_") else name
    body = layout.host_packing(var)
    return (f"namespace {n}_model {{\nconstexpr rosenna_floats<{layout.size}> {fn}()\n{{\n"
            f"    rosenna_floats<{layout.size}> copy{{}};\n    float *{var} = copy.v;\n{body}\n    return copy;\n}}\n"
            f"}}  // namespace {n}_model\n"
            "/* Packed while the device code compiles. A compiler whose constant evaluator gives up on it (nvcc:\n"
            "   \"dynamic initialization is not supported for a __device__ variable\") needs the copy as literals:\n"
            "   generate again with --tune compile_pack_floats=0. */\n"
            + declare(storage, name, layout.size, f" ROSENNA_PACKED({n}_model::{fn}())"))


def copy(plan, choice, storage, name, layout, var=None):
    """A copy as the file holds it: for file-loaded weights left to ``<name>_device_upload``
    (``__device__``, or ``__constant__`` where ``storage`` says so), else packed while the file
    compiles where :func:`packs` says so and the copy has a packing (``var``: the ``float *`` its
    ``host_packing`` writes), else literals."""
    if not plan.embed:
        return file_loaded(storage, name, layout.size)
    if var is not None and packs(plan, choice, layout):
        return packed_at_compile(storage, plan, name, layout, var)
    return literal(storage, name, layout)
