"""Thresholds that decide where weights and activations live: each defined once, here.

Configuration (``rosenna.toolchain``: a profile's ``thresholds``) and the code they steer (the
plan, the emitters) both import from this module, which imports nothing of rosenna's: a profile
can override a default without the configuration importing the code it configures.
"""

#: Parameters above which weights are file-loaded rather than embedded (override with
#: ``--embed-weights`` / ``--no-embed``, or a toolchain profile's ``embed_threshold``).
EMBED_THRESHOLD = 1_000_000

#: Per-point scratch bytes above which a plan takes the whole-field path: ``<name>_infer_batch``
#: runs ``<name>_infer_one`` (one parallel loop per op, intermediates in static device buffers) per
#: sample instead of ``<name>_infer`` per point. 32 KiB of locals already costs a GPU thread most of
#: its occupancy; a 3-layer 8-channel conv net over a 64x64 field needs ~400 KB. Plans with an
#: LSTM or GRU always stay per point (their time loop is sequential).
WHOLE_THRESHOLD = 32 * 1024

#: Embedded weights up to this many bytes go to CUDA/HIP __constant__ memory (a toolchain
#: profile's ``constant_limit_bytes`` overrides it). Measured on the H200 (docs/benchmarks.md, run
#: 1): __constant__ was 1.2-2.2x faster than global loads up to 5.7 KB of weights and 2-5x slower
#: from 9.6 KB, where the per-SM constant cache no longer holds them.
CONSTANT_LIMIT = 6144

#: The same for a whole-field plan's kernel file, whose threads of a warp read the same weight at
#: once: the U-Net's 19 KB in __constant__ took 157 / 413 µs at 16 / 256 samples on the H200 against
#: 167 / 475 in global memory (docs/benchmarks.md, run 13 (field18), round B).
CUDA_WHOLE_CONSTANT_LIMIT = 60 * 1024

#: Embedded weights above this many bytes use ROSENNA_CONST_LARGE in the C file: GCC's nvptx
#: offload puts const data in the 64 KiB constant bank, so larger models keep their (never
#: written) weights in global memory.
CONST_BANK_BYTES = 48 * 1024

#: Points per block of the host batch path (point index innermost, in SIMD lanes), per precision;
#: halved until a block's scratch fits in :data:`HOST_BLOCK_BYTES`.
#: Device memory the CUDA/HIP whole-field batch keeps for the intermediates of the samples one
#: launch computes together: <name>_infer_batch runs up to WHOLE_BATCH_SAMPLES samples per launch of
#: each op, fewer when their buffers would pass WHOLE_BATCH_BYTES (static __device__ arrays, sized
#: at load time: the U-Net of examples/surrogates/poisson_guess, 436 KB per sample, gets 128).
WHOLE_BATCH_SAMPLES = 256
WHOLE_BATCH_BYTES = 64 * 1024 * 1024
#: The same bound for the CUDA/HIP kernel file's batch (rosenna/emit/cuda/whole_field.py): the
#: U-Net then takes 256 samples per step, 477 µs for 256 on an H200 against 606 in two steps of
#: 128 (docs/benchmarks.md, run 11).
CUDA_WHOLE_BATCH_BYTES = 128 * 1024 * 1024
#: The CUDA whole-field batch (rosenna/emit/cuda/field_cluster.py) runs calls of up to this many
#: samples as one launch of thread-block clusters, a cluster per sample, on sm_90 and later (0:
#: never). Measured on the H200 (docs/benchmarks.md, run 13): the U-Net 75.5 / 139.6 / 1290 µs at
#: 1 / 16 / 256 samples against 82.6 / 164.4 / 471 for the persistent kernel or the launches; run 16
#: (epi18): 75.6 / 140.9 against 81.1 / 140.3 with the blocks per cluster compiled in.
CUDA_CLUSTER_SAMPLES = 16
#: ... and only for plans of at least this many phases: a cluster per sample gives a sample 16 SMs
#: and cheap barriers, which pays where barriers are many and each phase small; with few phases the
#: persistent kernel's whole GPU wins. H200 (docs/benchmarks.md, "Shared-memory conv tiles", round
#: B), µs per call at 1 / 16 samples, clustered against not: the gate's conv net (3 phases) 23.4 /
#: 28.2 against 14.5 / 22.4, the 32-channel net (4) 511 / 730 against 55.8 / 109.6; the depthwise
#: net (6) 15.6 / 19.4 against 18.0 / 21.3, the U-Net (26) 50.6 / 63.6 against 50.9 / 109.1.
CUDA_CLUSTER_MIN_PHASES = 6
#: Which 2-D convs of the CUDA whole-field path run as 3xTF32 implicit GEMMs on the tensor cores
#: (rosenna/emit/cuda/conv_igemm.py): K = input channels x taps of at least IGEMM_MIN_K (under
#: that a k8 tile is mostly padding), at least IGEMM_MIN_COUT output channels (an n8 tile), and,
#: per call, at least IGEMM_MIN_ROWS output pixels x samples (fewer leave the GPU's SMs idle:
#: a warp computes 32 pixels where the direct kernel gives each pixel and 8 channels a thread).
#: H200 (docs/benchmarks.md, "3xTF32 implicit-GEMM convs", round B): the U-Net with this rule
#: 151.5 / 173.8 / 337.0 µs at 16 / 64 / 256 samples, with the implicit GEMM at every launched
#: call 174.7 / 189.3 / 326.1; the 64x64 conv nets gain from 4 samples (16,384 rows) on.
IGEMM_MIN_K = 32
IGEMM_MIN_COUT = 8
IGEMM_MIN_ROWS = 16384
#: Which 2-D convs of the CUDA/HIP whole-field path run as shared-memory tiled direct convolutions
#: (rosenna/emit/cuda/conv_smem.py; eligible ones: more than one tap, group 1 or depthwise), where
#: the implicit GEMM does not take the call: "" none, "depthwise" the depthwise ones, "all" every one.
#: H200 (docs/benchmarks.md, "Shared-memory conv tiles", round A), µs per call at 1 / 16 / 256
#: samples, tiled against direct: U-Net 50.9 / 126.4 / 317.1 against 81.1 / 137.7 / 337.4, depthwise
#: net 18.1 / 22.0 / 47.2 against 18.0 / 22.5 / 66.7, the gate's conv net 14.7 / 22.7 / 117.5
#: against 23.6 / 24.2 / 119.7 (each with conv_smem.TILES' tiling for its form).
SMEM_CONV = "all"
HOST_BLOCK = {"single": 32, "double": 16}
HOST_BLOCK_BYTES = 64 * 1024


# Budgets: work a small file may ask for. A 187-byte model (ConstantOfShape [20000, 20000] then
# ReduceSum) once took 11 s and 1.6 GB to fold; each budget is refused in one line naming the op,
# the budget and the option that raises it (docs/security.md).
#: Elements of one output of a folded node (``--max-fold-elements``): 2^24, 64 MiB of float32.
MAX_FOLD_ELEMENTS = 1 << 24
#: Bytes of one generated source file (64 MiB of weights embedded as text are about 12 MiB).
MAX_SOURCE_BYTES = 16 * 1024 * 1024
#: Loop nests of one op's code (``--max-op-nests``). The conformance cases need at most 25 (a
#: padded pool's border regions); a Resize is split per axis, so its nests are its runs on one axis.
MAX_OP_NESTS = 1024
#: Non-ONNX files are told from their first bytes: this many are read before the protobuf parser.
SNIFF_BYTES = 64
