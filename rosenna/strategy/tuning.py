"""The tuning: every threshold and switch that decides how fast generated code runs, as one typed,
frozen value.

A default is a measurement on one GPU (the H200 unless a field says otherwise; the numbers are in
results/measurement-log.md, cited by section title), not a law: a toolchain profile's ``tuning:`` section
sets fields per GPU architecture (``default`` first, then the section named by the target's
architecture: ``sm_90``, ``sm_80``, ``gfx90a`` ...), ``--tune KEY=VALUE`` on generate, verify and
gpu-gate sets one for a run, and a benchmark varies one by building a value
(``Tuning().replace(cluster_min_phases=0)``), never by patching a module. The tuning used is
recorded in the provenance line of every generated file when it differs from the defaults.

:data:`MEASURED` names the fields a calibration run can time, with their candidate values:
``gpu-gate --tune`` times each and writes a ``tuning:`` overlay for the profile.

This module imports nothing of rosenna's but the error types: configuration sits below the code
it configures.
"""

import dataclasses
import difflib
from dataclasses import dataclass, field

from rosenna.errors import UsageError


class TuningError(UsageError):
    """An unknown tuning key or a value of the wrong type or range (one line: what, where, what to do)."""


def _knob(default, doc, choices=None, minimum=0, maximum=None, aliases=None):
    """``aliases``: a choice field's other spellings, booleans included (``{True: "on"}``)."""
    return field(default=default, metadata={"doc": doc, "choices": choices, "minimum": minimum, "maximum": maximum,
                                            "aliases": aliases or {}})


#: host_fma's former boolean spellings: true is "on", false "off".
_ON_OFF = {True: "on", False: "off", "true": "on", "false": "off", "1": "on", "0": "off"}


@dataclass(frozen=True)
class Tuning:
    """One field per knob; each field's ``doc`` (``Tuning.doc(name)``) says what it decides and
    where its default was measured."""

    # -- where weights live ----------------------------------------------------------------------
    constant_limit: int = _knob(
        6144, "Embedded weights up to this many bytes go to CUDA/HIP __constant__ memory. H200, "
        "results/measurement-log.md, \"The first kernel study\": __constant__ 1.2-2.2x faster than global loads up to 5.7 KB, 2-5x slower from 9.6 KB.")
    whole_constant_limit: int = _knob(
        60 * 1024, "The same for a whole-field plan's kernel file (a warp reads one weight at a time). H200, "
        "results/measurement-log.md, \"The clustered whole-field study\" round B: the U-Net's 19 KB 157 / 413 us at 16 / 256 samples "
        "in __constant__ against 167 / 475 in global memory.")
    const_bank_bytes: int = _knob(
        48 * 1024, "Embedded weights above this many bytes use ROSENNA_CONST_LARGE in the C file (GCC's nvptx "
        "offload puts const data in the 64 KiB constant bank). Not measured: the bank's size less a margin.")
    # -- which path a plan takes ------------------------------------------------------------------
    whole_threshold: int = _knob(
        32 * 1024, "Per-point scratch bytes above which a plan runs over the whole field per sample. "
        "32 KiB of locals already costs a GPU thread most of its occupancy (not timed: the occupancy rule).")
    # -- Fourier transforms -----------------------------------------------------------------------
    dft_direct_percent: int = _knob(
        200, "A DFT node runs as a direct sum (a dense complex matrix times each line, one loop nest) instead of "
        "its FFT stages when its kept outputs x used inputs per line are at most this percent of the stages' "
        "work, N x the sum of N's radices (0: always the FFT). The direct form needs no work buffers and no "
        "stage passes (each stage reads and writes every line), so it is taken up to twice the stages' multiply-adds: "
        "an FNO's 12 of 64 modes (768 against 768) and its inverse from 24 of 64 rows (1536) run direct, a full "
        "64-point transform (4096) by its stages. Not timed: counted work (docs/model-families.md, 'Fourier "
        "transforms').")
    # -- host -------------------------------------------------------------------------------------
    host_block_single: int = _knob(32, "Points per host block in single precision (SIMD lanes innermost), "
                                   "halved until a block's scratch fits host_block_bytes. x86-64 host, "
                                   "results/measurement-log.md, \"Host MLP batch at the hardware's pace\".", minimum=1)
    host_block_double: int = _knob(16, "The same in double precision.", minimum=1)
    host_block_bytes: int = _knob(64 * 1024, "Scratch bytes a host block may take (an L2's share per core).",
                                  minimum=1)
    point_simd_bytes: int = _knob(
        32, "Vector bytes the SIMD variant of <name>_infer is declared for (simdlen = this / 4, the caller's int "
        "loop index; 0: no SIMD variant). 32: the width GCC picks for a caller's `omp simd` loop on x86-64 without "
        "a simdlen clause, AVX-512 CPUs included, so the caller's loop finds the variant. docs/benchmarks-host.md "
        "'Per point in SIMD lanes'.")
    point_simd_mlp: bool = _knob(
        True, "Whether an MLP chain gets, on an AVX-512 build, the 8-lane SIMD variant of "
        "<name>_infer in 512-bit vectors over its outputs, 8 points x 2 vectors of outputs in registers "
        "(rosenna/emit/simd_mlp.py; a second, input-major copy of the weights). Off, or another target: the 8 "
        "points in the lanes of one 256-bit vector per statement, half the batch path's width. x86-64 AVX-512 "
        "host, one thread, CPU time, load average 6-8: the 8-lane loop over the batch path's time 1.08 against "
        "1.73 (mlp128), 1.22 against 1.55 (7-96x4-5 Tanh), 1.35 against 1.47 (5-64-64-3 SiLU), 1.27 against "
        "1.46 (gemm_big) (docs/benchmarks-host.md 'Per point in SIMD lanes: outputs in the lanes').")
    gemm_columns: int = _knob(
        8, "Outputs of a Gemm computed per pass over its input: independent accumulators sharing each load of "
        "the input (in the host batch path each broadcast weight feeds one vector per half block, each input "
        "vector this many). Every output's sum keeps its order, so any value gives the same bits. x86-64 host "
        "(AVX-512, GCC 12, -ffp-contract=off), 7-96x4-5 Tanh MLP batch: 8 columns 0.77x the time of 4, 12 and "
        "16 no faster (docs/benchmarks-host.md 'Register blocking of the Gemm'). On an H100 the per-point routine "
        "offloaded by clang-16 and called from a CUDA kernel is as fast with 8 as with 4 (results/measurement-log.md, "
        "\"Gemm columns in the offloaded per-point routine (2026-12-05, H100)\").", minimum=1, maximum=32)
    host_fma: str = _knob(
        "auto", "How the C library writes each multiply-add of its per-point routine, its SIMD variants, the host "
        "batch path, the whole-field host branch and the host exp and tanh they call. 'auto': rosenna_rt.h's "
        "ROSENNA_MADDF / ROSENNA_MADD, which is C's fma() where the compiler says the fused operation is fast "
        "(math.h's FP_FAST_FMAF, GCC's __FP_FAST_FMAF, the x86 and Arm FMA feature macros for clang, a GPU's "
        "device pass) and a separate multiply and add otherwise: an FMA instruction where the target has one, "
        "never a library call (a build's -DROSENNA_FMA=0 / 1 decides instead). 'on': fma() always (a slow library "
        "call on a target without FMA). 'off': never; bit for bit what the Fortran module's dot products, "
        "onnxruntime's reference order and any compiler give under the profiles' -ffp-contract=off, on any CPU "
        "(the bit-reproducible choice). In every "
        "setting the C paths agree with each other bit for bit in one build (fma is exactly rounded and each sum "
        "keeps its order); 'auto' gives different last bits on CPUs with and without FMA. What verify's tolerance "
        "implies: a K-term dot product fused moves by at most K*u*sum|w*x| from the unfused one (u = 2^-24 in "
        "single precision, 2^-53 in double; one rounding of each product saved), inside the float32 tolerance's "
        "relative part 1e-5 while |sum| >= K*u/1e-5 * sum|w*x| (0.76 of it at K = 128), typically (errors of "
        "random sign, sqrt(K)*u*sum|w*x|) down to 0.07 of it. true / false are accepted as on / off. Default "
        "'auto': the four MLPs' batch path at 0.33-0.40x onnxruntime's time with FMA against 0.47-0.62x "
        "without, x86-64 AVX-512 host, one thread, CPU time (docs/benchmarks-host.md 'Per point in SIMD lanes: "
        "outputs in the lanes'; 'FMA and reproducibility').",
        choices=("auto", "on", "off"), aliases=_ON_OFF)
    host_wait: str = _knob(
        "yield", "How the threads of the host batch and whole-field paths wait for each other between ops: "
        "'yield' (rosenna_rt.h's rosenna_team_wait: a short poll, then a sleep on a condition variable, so a "
        "waiting thread leaves its core to a descheduled partner or the solver; loops and batch blocks handed out "
        "dynamically) or 'omp' (OpenMP's own barriers, which spin for milliseconds unless OMP_WAIT_POLICY=passive; "
        "static loops and blocks). "
        "2 cores, one held by a busy process, 3-conv 16-channel net on 64x64: docs/benchmarks-host.md "
        "'Threads that share the machine'.", choices=("yield", "omp"))
    host_pace: int = _knob(
        64, "The C whole-field host branch times its calls and runs the faster of a full team and one thread, "
        "the other once every this many calls (rosenna_rt.h's rosenna_pace; 0: always the full team). With a busy "
        "core a team's fork and joins wait a scheduler's time slice for a descheduled partner, and one thread is "
        "faster. Each size is judged by the median of its last three calls. docs/benchmarks-host.md 'Threads that "
        "share the machine'.")
    host_pace_cap: int = _knob(
        4096, "The longest gap between trials of the slower team size: after each trial that loses the gap "
        "doubles from host_pace up to this many calls, and returns to host_pace once the choice changes. On a "
        "busy machine a team call costs about 7 one-thread calls (3-conv net, 2 cores); a trial every 64 calls "
        "cost about 10% of the time, every 4096 well under 1%, while a machine that frees its cores gets the "
        "team back within about 3 x 4096 calls (about 2.5 s of 200-us calls). docs/benchmarks-host.md 'Threads "
        "that share the machine'.", minimum=1)
    host_wait_spins: int = _knob(
        20000, "Polls of the barrier's counter before a waiting host thread sleeps (1000: about a microsecond "
        "in all; an op of the conv nets takes tens of microseconds, so a partner that is running arrives within "
        "the polls and one that is descheduled is waited for asleep). 2 cores, conv net, 2 threads against 1: "
        "with no other load 0.82x at 20000 polls, 0.98x at 1000 (the sleeps' wake-ups cost more than the ops), "
        "0.90x at 100000; with a busy core 1.38x / 1.35x / 1.40x (results/measurement-log.md, \"Polls before a "
        "host thread sleeps (2026-12-05)\").")
    host_jam: int = _knob(
        12, "Output channels the host whole-field loops sum at once, each input vector loaded once per block of "
        "them: 12 accumulators and the input and weight vectors fit AVX2's 16 vector registers (a 24-channel 1x1 "
        "conv is two passes of 12). A register count, not timed.", minimum=1)
    jam_chains: int = _knob(
        4, "Independent sums a SIMD loop should carry (the FMA latency times the FMA units, in vectors): where the "
        "channels give fewer, rows are jammed too (host and CUDA whole-field loops). Not timed.", minimum=1)
    host_conv: bool = _knob(
        True, "Whether the host whole-field loops compute a 2-D Conv (group 1) as a register-blocked direct "
        "convolution (rosenna/strategy/field/host_conv.py: blocks of output channels x rows x one vector of "
        "columns over a zero-padded tile of the input rows, borders included) instead of the plan's interior and "
        "border loops; each sum in the plan's order, so the same values bit for bit under the same host_fma. "
        "x86-64 host (AVX-512, GCC 12), 3-conv 16-channel net on 64x64: docs/host-conv.md. C only: the Fortran "
        "module keeps the plan's loops.")
    host_conv_channels: int = _knob(
        8, "Output channels of a block of the register-blocked conv where the host's vectors are 64 bytes (AVX-512, "
        "32 vector registers; half as many with 32-byte vectors: AVX2 has 16), the channels split evenly into "
        "passes of at most this many: each input vector loaded feeds this many FMAs. Same study: 8 x 2 rows "
        "0.55x onnxruntime, 16 x 1 0.59x, 8 x 3 0.70x (spills); AVX2 code 4 x 2 0.81x, 8 x 2 1.26x.",
        minimum=1, maximum=32)
    host_conv_rows: int = _knob(
        2, "Output rows of a block of the register-blocked conv: each broadcast weight feeds this many FMAs; "
        "channels x rows accumulators stay in vector registers (16 of AVX-512's 32). Same study.",
        minimum=1, maximum=16)
    host_conv_tile_bytes: int = _knob(
        128 * 1024, "Most bytes of a thread's zero-padded input tile in the register-blocked conv (on its stack: "
        "the input rows of a block of output rows, every input channel); the rows per block shrink to fit, and a "
        "conv whose one output row's tile exceeds it keeps the plan's loops. Same study: a 64-channel 3x3 conv "
        "net on 64x64 (tile 68 KB) 0.86x onnxruntime with the tile, 1.40x with the plan's loops.", minimum=1)
    host_unroll: int = _knob(
        128, "Tap loops inside a host SIMD loop are unrolled below their outermost loop up to this many statements "
        "(GCC vectorises an outer loop around one inner loop, not around a nest).", minimum=1)
    host_unroll_whole: int = _knob(
        48, "A nest of tap loops of at most this many statements is unrolled whole: a depthwise 3x3 conv with 4 "
        "rows jammed (36 statements) then loads each input vector once for the rows that share it.")
    # -- whole-field batches ----------------------------------------------------------------------
    whole_batch_samples: int = _knob(
        256, "Samples one launch of each op of the whole-field batch computes together (host and device files).",
        minimum=1)
    whole_batch_bytes: int = _knob(
        64 * 1024 * 1024, "Device memory the C/Fortran whole-field batch keeps for those samples' intermediates.",
        minimum=1)
    cuda_whole_batch_bytes: int = _knob(
        128 * 1024 * 1024, "The same for the CUDA/HIP kernel file: the U-Net then takes 256 samples per step, "
        "477 us for 256 on an H200 against 606 in two steps of 128 (results/measurement-log.md, \"The whole-field phase study\").",
        minimum=1)
    cluster_samples: int = _knob(
        16, "Calls of up to this many samples run as one launch of thread-block clusters on sm_90+ (0: never). "
        "H200, results/measurement-log.md, \"The clustered whole-field study\": the U-Net 75.5 / 139.6 us at 1 / 16 samples against "
        "82.6 / 164.4 for the persistent kernel.")
    cluster_min_phases: int = _knob(
        6, "... and only for plans of at least this many phases. H200, results/measurement-log.md, \"Shared-memory conv tiles\" "
        "round B: the gate's conv net (3 phases) 23.4 / 28.2 us clustered against 14.5 / 22.4 not; the depthwise "
        "net (6) 15.6 / 19.4 against 18.0 / 21.3.")
    igemm_min_k: int = _knob(
        32, "2-D convs of the CUDA whole-field path run as 3xTF32 implicit GEMMs from this many input channels x "
        "taps. H200, results/measurement-log.md, \"3xTF32 implicit-GEMM convs on the whole-field path\" round B.")
    igemm_min_cout: int = _knob(8, "... and at least this many output channels (an n8 tile).")
    igemm_warps: int = _knob(
        4, "Warps per block of an implicit-GEMM conv kernel (one output tile each). H200, results/measurement-log.md, "
        "\"3xTF32 implicit-GEMM convs on the whole-field path\" (its w2 and w8 builds).", minimum=1, maximum=32)
    igemm_max_nt: int = _knob(
        4, "n8 tiles of output channels a warp of the implicit GEMM takes at most (more channels: groups of warps on "
        "the same pixels). Same study: NT 8, MT 1 on the 64-channel net used 193 registers.", minimum=1)
    igemm_max_mt: int = _knob(
        2, "m16 tiles of pixels a warp of the implicit GEMM takes at most. Same study, round A: MT 2 against 4 on the "
        "U-Net (72 registers against 148) 331 against 385 us at 256 samples.", minimum=1)
    igemm_tile_fragments: int = _knob(
        8, "Accumulator fragments (m16 x n8 tiles) a lane of the implicit GEMM holds at most (same study: f4, f16).",
        minimum=1)
    igemm_partial: int = _knob(
        2, "k8 tiles whose products the tensor cores sum from zero before the fp32 running sum takes them "
        "(same study: p1, p4).", minimum=1)
    igemm_unroll_kt: int = _knob(
        16, "K, in k8 tiles, up to which the implicit GEMM's loop over K is unrolled in full; a longer K is a loop "
        "of igemm_partial tiles (fully unrolled, ptxas gave a 32 -> 32 channel 3x3 conv 255 registers and "
        "spilled).")
    igemm_min_rows: int = _knob(
        16384, "... and, per call, at least this many output pixels x samples: the 64x64 conv nets gain from "
        "4 samples (16,384 rows) on (same study).")
    smem_conv: str = _knob(
        "all", "Which 2-D convs of the whole-field path run as shared-memory tiled direct convolutions: '' none, "
        "'depthwise', 'all'. H200, results/measurement-log.md, \"Shared-memory conv tiles\" round A: the U-Net 50.9 / 126.4 / "
        "317.1 us at 1 / 16 / 256 samples tiled against 81.1 / 137.7 / 337.4 direct.",
        choices=("", "depthwise", "all"))
    smem_launched: bool = _knob(
        True, "Whether the launched phases (<name>_phases) run the tiled convs (smem_conv). H200, "
        "results/measurement-log.md, \"Shared-memory conv tiles\": the tiles in every form is the default there.")
    smem_persistent: bool = _knob(True, "The same for the persistent kernel <name>_field.")
    smem_cluster: bool = _knob(True, "The same for the clustered kernel <name>_cluster.")
    smem_threads: int = _knob(
        256, "Threads per block of a shared-memory conv tile (the persistent kernel's block size; the launched form "
        "takes the used ones in whole warps). H200, results/measurement-log.md, \"Shared-memory conv tiles\".",
        minimum=32, maximum=1024)
    smem_chunk_bytes: int = _knob(
        16 * 1024, "Shared memory per block for a chunk of a tile's input (the input channels are staged in chunks "
        "that fit). Same study; not timed against other sizes.", minimum=64, maximum=227 * 1024)
    smem_channels_launched: int = _knob(
        4, "Output channels per thread of a tiled conv in the launched phases (the largest divisor of the conv's "
        "up to this). H200, results/measurement-log.md, \"Shared-memory conv tiles\" round A: the U-Net at 256 "
        "samples 317.1 us with (4 channels, 2 rows) launched, 352.7 with (1, 1), 337.4 direct.", minimum=1)
    smem_rows_launched: int = _knob(
        2, "Consecutive output rows per thread of a tiled conv in the launched phases (same study).", minimum=1)
    smem_depthwise_rows_launched: int = _knob(
        4, "Output rows per thread of a tiled depthwise conv (one channel per thread) in the launched phases. "
        "Same study: the depthwise net at 256 samples 47.2 us with 4, 50.3 with 2, 66.7 direct.", minimum=1)
    smem_channels_persistent: int = _knob(
        1, "Output channels per thread of a tiled conv in the persistent kernel (the small calls: the finest tiles, "
        "most blocks). Same study, round A: the U-Net at 1 sample 50.9 us with (1, 1), 69.3 with (4, 2), 95.2 "
        "with (8, 2), 81.1 direct.", minimum=1)
    smem_rows_persistent: int = _knob(1, "Output rows per thread there (same study).", minimum=1)
    smem_depthwise_rows_persistent: int = _knob(1, "Rows per thread of a tiled depthwise conv there.", minimum=1)
    smem_channels_cluster: int = _knob(
        2, "Output channels per thread of a tiled conv in the clustered kernel. Same study, round B: the U-Net at "
        "1 / 16 samples 49.3 / 62.9 us with (2, 1), 58.1 / 73.3 with (4, 1), 72.7 / 83.9 with (8, 1).", minimum=1)
    smem_rows_cluster: int = _knob(1, "Output rows per thread there (same study).", minimum=1)
    smem_depthwise_rows_cluster: int = _knob(
        2, "Rows per thread of a tiled depthwise conv there. Same study, round B: the depthwise net 15.6 / 19.4 us "
        "at 1 / 16 samples with the (4, 2) tiles, 17.3 / 21.2 with (4, 1).", minimum=1)
    # -- the FP32 MLP kernels ---------------------------------------------------------------------
    narrow_max_width: int = _knob(
        128, "Widest layer the narrow FP32 kernel unrolls (nvcc ran for minutes on a 256-wide layer: a "
        "compile-time bound, not timed).", minimum=1)
    staged_min_blocks: int = _knob(
        4, "Blocks per SM the staged FP32 kernel asks of ptxas on CUDA (__launch_bounds__' second argument: a "
        "128-register cap at 4 blocks of 128 threads; HIP gets none). H200, results/measurement-log.md, \"The "
        "staged and tensor-core kernel study\".", minimum=1, maximum=16)
    wide_layer: int = _knob(
        96, "A hidden layer at least this wide sends an FP32 MLP to a shared-memory kernel (staged or tiled). "
        "H200, results/measurement-log.md, \"The staged and tensor-core kernel study\".", minimum=1)
    tiled_smem_limit: int = _knob(
        100 * 1024, "Shared memory the tiled FP32 kernel may ask for per block (dynamic, with the opt-in): sm_90 "
        "allows 227 KB per block (228 per SM: two blocks fit this), sm_80 163 KB, sm_86 and sm_89 99 KB (the "
        "built-in sm_86 / sm_89 sections lower it to that). Not timed: the hardware's limits.",
        maximum=227 * 1024)
    tiled_points: int = _knob(
        64, "Points per block of the tiled FP32 kernel (rosenna/data/rosenna_tile.cuh: 8-point x 8-column tiles "
        "per thread). H200, results/measurement-log.md, \"The second kernel study\" (its gemm_big and mlp128 "
        "tiles); not timed against other sizes.", minimum=8)
    tiled_threads: int = _knob(
        128, "Threads per block of the tiled FP32 kernel (same study).", minimum=32, maximum=1024)
    chain_min_macs: int = _knob(
        512, "Below this many multiply-adds per point the FP32 kernel keeps a chain the 3xTF32 register chain "
        "would take (memory-bound: gemm_small runs at the memory floor). H200, results/measurement-log.md, \"The tensor-core tolerance study\".")
    wide_min_macs: int = _knob(512, "The same floor for the wide 3xTF32 kernel.")
    wide_compact_from: int = _knob(
        257, "Widest layer from which the wide 3xTF32 kernel's hidden fragments are compact (each weight once as "
        "big + small, 8 bytes per lane: half the weight stream). results/measurement-log.md, \"The wide tensor-core "
        "kernel study\" (its compact_off, compact_256 and compact_all builds).", minimum=1)
    compact_fragments: str = _knob(
        "sum", "What a compact 8-byte 3xTF32 fragment holds per weight (the wide kernel's from wide_compact_from, "
        "the warp routine's with warp_compact): 'sum', the fp32 number big + small with big the weight truncated to "
        "TF32 (22 significant bits; the kernel splits it in two instructions); 'weight', the weight itself, which "
        "the kernel splits as the host splits 16-byte fragments (both halves rounded to nearest, four "
        "instructions): the same operands as 16-byte fragments, so with wide_compact_from=1 the wide kernel computes "
        "what its 16-byte form computes, bit for bit, from half the bytes (and mlp128's kernel file holds 36,036 "
        "fewer literals). Not timed: bench/routine_layout.sh times it.", choices=("sum", "weight"))
    wide_k_order: str = _knob(
        "fragment", "The order of the k index within each k8 tile of the wide 3xTF32 kernel's hidden and output layers. "
        "'fragment': mma.sync's own (a lane's A fragment holds columns tig and tig+4, its B fragment rows tig and "
        "tig+4). 'paired': columns 2tig and 2tig+1 (one 8-byte shared-memory load per pair; act's row stride "
        "width + 8 keeps them conflict-free) against rows 2tig and 2tig+1, the order of the staged MLPs' "
        "tensor-core warp routine, which then reads <name>_tc_packed with one 16-byte load per fragment: the "
        "kernel file holds the 3xTF32 weights once whatever routine_layout says (mlp128: 72,072 fewer literals). "
        "The same products summed in another order inside the tensor cores: results may differ in the last bits. "
        "Not timed yet: bench/routine_layout.sh times both.", choices=("fragment", "paired"))
    wide_persistent: bool = _knob(
        False, "Whether the wide 3xTF32 kernel runs as a persistent grid (each block on from one block of points "
        "to the next) where its fragments are not compact. Off: on the H200 slower at 96, 128 and 512 wide "
        "(mlp128 1.121 -> 1.198 ns), 2% faster at 256 (results/measurement-log.md, \"The wide tensor-core "
        "kernel study\", round B).")
    wide_persistent_compact: bool = _knob(
        False, "... and also where they are compact (the compact 512-wide stage loop spilled 4 bytes inside the "
        "tile loop at the 128-register cap; same study).")
    dmma_tiles_32: int = _knob(
        2, "Tiles of 8 points a warp of the FP64 DMMA kernel carries when its widest layer is at most 32 wide "
        "(registers ~ 4 x tiles x width / 4). 2, not 4: more warps hide the activations' FP64 latencies; the "
        "4-32-32-2 Tanh MLP on the H200, results/measurement-log.md, \"The float64 study\".", minimum=1)
    dmma_tiles_64: int = _knob(2, "The same up to 64 wide.", minimum=1)
    dmma_tiles_128: int = _knob(1, "The same up to 128 wide.", minimum=1)
    dmma_blocks_32: int = _knob(
        2, "Blocks per SM the FP64 DMMA kernel asks of ptxas (__launch_bounds__' second argument; 1: none) up to "
        "32 wide (same study).", minimum=1)
    dmma_blocks_128: int = _knob(1, "The same up to 128 wide.", minimum=1)
    dmma_threads: int = _knob(
        256, "Threads per block of the FP64 DMMA kernel (8 warps). results/measurement-log.md, \"The float64 study\" "
        "timed the tiles and blocks per SM at this size, not other sizes.", minimum=32, maximum=1024)
    dmma_smem_limit: int = _knob(
        40 * 1024, "Fragments and biases of the FP64 DMMA kernel up to this many bytes are copied into shared "
        "memory once per block; larger ones are read from global memory through L1. The copy is a static "
        "__shared__ array, which every architecture caps at 48 KB per block (sm_80's 163 KB and sm_90's 227 KB "
        "are for dynamic shared memory with the opt-in); 40 KB leaves room beside it. Not timed.",
        maximum=48 * 1024)
    wide_min_hidden: int = _knob(
        64, "Below this hidden width the wide 3xTF32 kernel leaves the chain to the others (a 32-wide tile would "
        "leave most of its 8 warps one n8 tile).")
    # -- the per-point routine (<name>_infer for the user's kernels) ---------------------------------
    routine_constant_bytes: int = _knob(
        6 * 1024, "Packed weights of the one-thread routine up to this many bytes go to __constant__ memory "
        "(the batched kernels' constant_limit measurement).")
    routine_register_width: int = _knob(
        64, "Layers at most this wide in and out keep their inputs and outputs in registers in the CUDA/HIP "
        "one-thread routine; a wider one accumulates its outputs in registers and reads its inputs from a local "
        "array. results/measurement-log.md, \"Per-point routines and float64 on DMMA\".", minimum=1)
    offload_register_width: int = _knob(
        64, "The same for the OpenMP offload MLP body of <name>_infer (and the width past which an FP32 chain takes "
        "its warp path). results/measurement-log.md, \"The per-point routine study\".", minimum=1)
    offload_unroll: int = _knob(
        4, "Inputs per step of a wider layer's loop in that body, unrolled: one step's weight loads in flight "
        "together (same study; not timed against other steps).", minimum=1)
    routine_max_width: int = _knob(
        512, "Widest layer the one-thread MLP routine takes (its sums live in registers or local memory); "
        "wider chains get the plan's loops. A compile-time bound, not timed.", minimum=1)
    warp_local_sums: int = _knob(
        32, "Sums a layer of the staged MLPs' tensor-core warp body may hold when its input is in local memory "
        "(0: parked groups instead). H200, mlp128, results/measurement-log.md, \"The warp-routine study\": 32 -> 2.11 ns per "
        "point, 64 -> 3.65, 0 -> 2.61.")
    warp_compact: bool = _knob(
        False, "Whether the staged MLPs' tensor-core warp body reads compact 8-byte fragments (half the bytes "
        "through L1, two instructions per weight). Off: slower on the H200 (results/measurement-log.md, \"The warp-routine study\").")
    compile_pack_floats: int = _knob(
        81920, "The largest 3xTF32 copy of embedded weights (floats) that <name>_kernel.cu packs while it "
        "compiles, from its one literal copy (rosenna/emit/cuda/copies.py); a larger copy is written as "
        "literals. Not a speed knob (the device data is byte for byte the same either way): the compilers "
        "evaluate the packing under a budget. nvcc 13.0 packed 170,760 floats and refused 302,344 with "
        "__builtin_bit_cast, packed 72,072 and refused 104,968 in the arithmetic form used without it; 81,920 "
        "takes mlp128's 72,072 (its kernel file 0.60 MB instead of 2.78 MB) in both. 0: every copy as literals.",
        minimum=0)
    routine_layout: str = _knob(
        "paired", "Which fragments the staged MLPs' tensor-core warp body reads where the wide 3xTF32 kernel is "
        "beside it. 'wide': that kernel's <name>_tc_packed, in its natural row order (each lane gathers its "
        "paired rows from two adjacent 16-byte fragments: two loads per k8 x n8 tile instead of one), so the "
        "kernel file holds the 3xTF32 weights once (mlp128: 72,072 fewer literals). 'paired': a copy of its "
        "own, <name>_rchain, in the paired row order its A fragments need (one load per tile). The same "
        "numbers reach the tensor cores either way (bit for bit the same results). H100, mlp128, user kernel + "
        "<name>_infer at 16M points: 'paired' 2.50 ns/pt, 'wide' 3.00 (the gather's extra loads), so 'paired' "
        "(results/measurement-log.md, \"Where the warp routine reads its weights (2026-12-05, H100)\").", choices=("wide", "paired"))

    point_threads: int = _knob(
        256, "Threads per block of the one-point-per-thread kernels (the point kernel and the narrow FP32 "
        "kernel). Not timed against other sizes.", minimum=1, maximum=1024)
    chain_warps: int = _knob(
        4, "Warps per block of the 3xTF32 register-chain kernel (a persistent grid; each block copies the "
        "weights to shared memory once). Not timed against other sizes.", minimum=1, maximum=32)
    narrow_shared_limit: int = _knob(
        32 * 1024, "__device__ weights of the narrow FP32 kernel up to this many bytes are copied into shared "
        "memory once per block (a persistent grid); larger ones are read as 16-byte __ldg loads.")
    lowp_warps: int = _knob(
        8, "Warps per block of the bf16/fp16 tensor-core chain (--precision bf16 / fp16; a persistent grid, "
        "each block copies the 16-bit fragments to shared memory once). 8 and 4 within 1.5 % on an H100 "
        "(results/measurement-log.md, \"Low precision on the GPU\").", minimum=1, maximum=32)
    lowp_two_tiles_width: int = _knob(
        0, "Widest layer for which a warp of the bf16/fp16 chain carries two 16-row tiles (32 points; each "
        "B fragment read from shared memory then feeds two MMAs); beyond it one (16 points). At most 64 "
        "(registers). 0, one tile always: two tiles were 1.6x slower on the 5-64-64-3 SiLU MLP and level "
        "on mlp128 on an H100 (results/measurement-log.md, \"Low precision on the GPU\").",
        minimum=0, maximum=64)
    lowp_sigmoid: str = _knob(
        "ex2", "How the bf16/fp16 chain computes Sigmoid and SiLU (Swish) layers. ex2: ex2.approx and rcp.approx "
        "(rosenna_lowp_sigmoid: two MUFU and three other instructions, no branch; relative error under "
        "|v| 2^-24 + 2^-21, far under the 16-bit rounding that follows). tanh: 0.5 + 0.5 tanh.approx(v/2) (one "
        "MUFU; absolute error of the sigmoid under 2^-17, so large relative errors where it is tiny: opt-in). "
        "exact: the host's expf and IEEE division, whose slow-path call per value serialised the 5-64-64-3 "
        "SiLU MLP's activations (3.3x the instructions of ex2; docs/low-precision.md, \"The narrow chain\").",
        choices=("ex2", "tanh", "exact"))
    chain_two_tiles_width: int = _knob(
        48, "Widest layer for which a warp of the 3xTF32 register chain carries two 16-row tiles (32 points); "
        "beyond it one. H200, results/measurement-log.md, \"The tensor-core tolerance study\", a 5-64-64-3 SiLU MLP: two tiles "
        "0.432 ns per point (188 registers), one 0.324.")
    warp_auto: bool = _knob(
        True, "Whether <name>_infer takes the warp body when all 32 lanes call it (results/measurement-log.md, \"The per-point routine study\").")
    warp_mask_test: bool = _knob(
        True, "Whether <name>_infer_warp runs its body behind <name>_infer's __activemask() test: without it nvcc "
        "compiled mlp128's FP32 shuffle body with more spills, 3.64 against 3.18 ns per point (results/measurement-log.md, "
        "\"The per-point routine study\").")
    warp_tiles: int = _knob(
        2, "16-row tiles the staged MLPs' tensor-core warp body carries through the layers at once (2: the warp's "
        "32 points together; 1: two passes of 16).", minimum=1)
    warp_registers: int = _knob(
        144, "Registers a layer's input and sums may take in that body before its outputs are computed in "
        "parked groups.", minimum=1)
    warp_ldg: bool = _knob(True, "Whether the tensor-core warp bodies read their fragments through __ldg.")
    igemm_prefer_launches: bool = _knob(
        False, "Whether <name>_run takes the launched phases for every call an implicit-GEMM conv takes. Off: on "
        "the H200 it cost the U-Net 11% at 4 samples (results/measurement-log.md, \"3xTF32 implicit-GEMM convs on the whole-field path\", round B).")
    smem_igemm_first: bool = _knob(
        True, "Whether a conv the implicit GEMM takes keeps it where a shared-memory tile would also serve.")
    field_inline_loads: int = _knob(
        0, "A whole-field phase is computed where it is read when an element loads at most this many values "
        "(0: never). Off: the U-Net took 181 against 84 us at 1 sample on the H200 (results/measurement-log.md, "
        "\"The whole-field phase study\").")
    field_decode: bool = _knob(
        False, "Whether a reader may decode an element index at run time to compute a phase in place (same study).")
    cluster_per_call: bool = _knob(
        False, "Whether the clustered kernel's blocks per cluster are chosen per call and read at run time. Off: "
        "96.3 against 75.5 us for the U-Net at 1 sample on the H200 (results/measurement-log.md, \"The epilogue study\").")
    cluster_jam: bool = _knob(
        False, "Whether the clustered kernel's convolutions are unrolled-and-jammed over output channels. Off: "
        "91.9 against 75.5 us for the U-Net at 1 sample on the H200 (results/measurement-log.md, \"The clustered whole-field study\").")
    field_epilogues: str = _knob(
        "", "Which forms of the CUDA whole-field <name>_run fuse producer-side epilogues (a pool pulled into its "
        "conv's phase, an upsampling and Add pushed into it): '' none, one form, or 'all'. Off: on the H200 the "
        "U-Net's clustered kernel took 75.6 / 140.9 us at 1 / 16 samples with them against 75.5 / 139.6 without "
        "(results/measurement-log.md, \"The epilogue study\").", choices=("", "launches", "persistent", "cluster", "all"))
    cluster_min_blocks: int = _knob(
        0, "Blocks of <name>_cluster ptxas keeps resident per SM (__launch_bounds__' second argument; 0: none).")
    # -- the CUDA whole-field kernels' shapes -------------------------------------------------------
    cuda_jam: int = _knob(
        8, "Output channels the CUDA whole-field launched phases (and the clustered kernel with cluster_jam) "
        "compute per thread, unrolled-and-jammed. H200, results/measurement-log.md, \"The whole-field launch "
        "study\".", minimum=1)
    field_threads: int = _knob(
        256, "Threads per block of the whole-field launched phases. H200, results/measurement-log.md, "
        "\"The whole-field phase study\" (its t512 and t1024 variants).", minimum=1, maximum=1024)
    field_persistent_threads: int = _knob(
        256, "Threads per block of the persistent whole-field kernel <name>_field (same study).", minimum=1, maximum=1024)
    field_persistent_waves: int = _knob(
        1, "<name>_run takes the persistent kernel while the widest phase needs at most this many times the "
        "resident blocks (each thread then strides over that many elements; 1: a thread per element). Same study.",
        minimum=1)
    cluster_blocks: int = _knob(
        16, "Blocks per cluster of <name>_cluster (8 is the portable maximum; 16 needs the non-portable "
        "attribute). H200, results/measurement-log.md, \"The clustered whole-field study\" (its cBxT variants).",
        minimum=1, maximum=16)
    cluster_threads: int = _knob(
        256, "Threads per block of <name>_cluster (same study).", minimum=1, maximum=1024)
    epilogue_pull: bool = _knob(
        True, "Where field_epilogues fuses, whether a pool is pulled into its conv's phase. "
        "results/measurement-log.md, \"The epilogue study\".")
    epilogue_push: bool = _knob(
        True, "Where field_epilogues fuses, whether an upsampling or Add is pushed into its producer's phase "
        "(same study).")

    # -- the API ----------------------------------------------------------------------------------

    @classmethod
    def names(cls):
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def doc(cls, name):
        return cls.__dataclass_fields__[name].metadata["doc"]

    def as_dict(self):
        """``{field: value}`` in declaration order."""
        return {name: getattr(self, name) for name in self.names()}

    def changed(self):
        """``{field: value}`` of the fields that differ from the defaults."""
        default = Tuning()
        return {k: v for k, v in self.as_dict().items() if getattr(default, k) != v}

    def describe(self):
        """``tuning=default`` or ``tuning=key=value,key=value``: the provenance line's part."""
        changed = self.changed()
        if not changed:
            return "tuning=default"
        return "tuning=" + ",".join(f"{k}={_text(v)}" for k, v in changed.items())

    def replace(self, where="tuning", **values):
        """A copy with ``values`` set, each checked (:class:`TuningError` for an unknown key or a bad value)."""
        checked = {key: _check(key, value, where) for key, value in values.items()}
        return dataclasses.replace(self, **checked)

    def parse_overrides(self, items, where="--tune"):
        """A copy with ``["KEY=VALUE", ...]`` applied (``where`` names the source in errors)."""
        values = {}
        for item in items or ():
            key, eq, text = str(item).partition("=")
            key = key.strip().replace("-", "_")
            if not eq or not key:
                raise TuningError(f"{where} {item!r}: expected KEY=VALUE, e.g. {where} cluster_min_phases=0")
            values[key] = _parse(key, text.strip(), where)
        return self.replace(where, **values)

    @classmethod
    def for_target(cls, profile_tuning=None, arch=None, where="tuning"):
        """The defaults, overlaid by the built-in section of ``arch`` (:data:`ARCH_DEFAULTS`), then
        ``profile_tuning["default"]``, then ``profile_tuning[arch]`` (a profile's ``tuning:``
        mapping; ``arch`` e.g. ``sm_90``, ``gfx90a``, or None)."""
        tuning = cls().replace(f"built-in {arch}", **ARCH_DEFAULTS.get(arch, {}))
        if not profile_tuning:
            return tuning
        if not isinstance(profile_tuning, dict):
            raise TuningError(f"{where}: expected a mapping of sections (default, sm_90, ...)")
        for section in ("default", arch):
            values = profile_tuning.get(section) if section else None
            if values is None:
                continue
            if not isinstance(values, dict):
                raise TuningError(f"{where}.{section}: expected a mapping of tuning keys to values")
            tuning = tuning.replace(f"{where}.{section}", **values)
        return tuning


#: Built-in sections by GPU architecture, applied before a profile's own: where a hardware limit
#: is below a default. The most shared memory a block may opt in to: 227 KB on sm_90, 163 KB on
#: sm_80 and sm_87, 99 KB on sm_86 and sm_89, 96 KB on sm_70 and sm_72, 64 KB on sm_75 (NVIDIA's
#: tuning guides for each architecture and the CUDA programming guide's table of compute
#: capabilities).
ARCH_DEFAULTS = {
    "sm_70": {"tiled_smem_limit": 96 * 1024},
    "sm_72": {"tiled_smem_limit": 96 * 1024},
    "sm_75": {"tiled_smem_limit": 64 * 1024},
    "sm_86": {"tiled_smem_limit": 99 * 1024},
    "sm_89": {"tiled_smem_limit": 99 * 1024},
}


def _text(value):
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _known(key, where):
    if key not in Tuning.__dataclass_fields__:
        close = difflib.get_close_matches(key, Tuning.names(), 3, 0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else "; `rosenna info --tuning` lists them"
        raise TuningError(f"{where}: unknown tuning key {key!r}{hint}")
    return Tuning.__dataclass_fields__[key]


def _check(key, value, where):
    spec = _known(key, where)
    kind = type(spec.default)
    if kind is bool:
        if not isinstance(value, bool):
            raise TuningError(f"{where}: {key} must be true or false, not {value!r}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TuningError(f"{where}: {key} must be an integer, not {value!r}")
        if value < spec.metadata["minimum"]:
            raise TuningError(f"{where}: {key} must be at least {spec.metadata['minimum']}, not {value}")
        if spec.metadata["maximum"] is not None and value > spec.metadata["maximum"]:
            raise TuningError(f"{where}: {key} must be at most {spec.metadata['maximum']}, not {value}")
    elif kind is str:
        value = spec.metadata["aliases"].get(value.lower() if isinstance(value, str) else value, value)
        if not isinstance(value, str) or value not in spec.metadata["choices"]:
            choices = ", ".join(repr(c) for c in spec.metadata["choices"])
            raise TuningError(f"{where}: {key} must be one of {choices}, not {value!r}")
    return value


def _parse(key, text, where):
    spec = _known(key, where)
    kind = type(spec.default)
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "on", "off"):
            raise TuningError(f"{where}: {key} must be true or false, not {text!r}")
        return text.lower() in ("true", "1", "on")
    if kind is int:
        try:
            return int(text.replace("_", ""), 0)
        except ValueError:
            raise TuningError(f"{where}: {key} must be an integer, not {text!r}") from None
    return text.strip("'\"")


def tuning_schema():
    """The JSON schema of a toolchain profile's ``tuning:`` section: sections named ``default``,
    ``sm_<digits>[a]`` or ``gfx<hex>``, each a mapping of :class:`Tuning` fields to values."""
    fields = {}
    for spec in dataclasses.fields(Tuning):
        kind = type(spec.default)
        if kind is bool:
            fields[spec.name] = {"type": "boolean"}
        elif kind is int:
            fields[spec.name] = {"type": "integer", "minimum": spec.metadata["minimum"],
                                 **({"maximum": spec.metadata["maximum"]} if spec.metadata["maximum"] is not None else {})}
        elif spec.metadata["aliases"]:  # the choices and their other spellings (true / false)
            fields[spec.name] = {"enum": list(spec.metadata["choices"]) + list(spec.metadata["aliases"])}
        else:
            fields[spec.name] = {"type": "string", "enum": list(spec.metadata["choices"])}
    section = {"type": "object", "additionalProperties": False, "properties": fields}
    return {"type": "object", "additionalProperties": False,
            "patternProperties": {"^(default|sm_[0-9]{2,3}a?|gfx[0-9a-f]+)$": section}}


#: The fields a calibration run (``gpu-gate --tune``) can time on the GPU at hand, each with the
#: candidate values to try: (field, (candidates...)). The first candidate is the default.
MEASURED = (
    ("constant_limit", (6144, 0, 16384, 65536)),
    ("whole_constant_limit", (60 * 1024, 0, 16384)),
    ("cluster_samples", (16, 0, 64)),
    ("cluster_min_phases", (6, 0, 12)),
    ("igemm_min_rows", (16384, 4096, 65536)),
    ("smem_conv", ("all", "depthwise", "")),
    ("chain_min_macs", (512, 0, 2048)),
    ("wide_layer", (96, 64, 128)),
    ("warp_local_sums", (32, 0, 64)),
)
