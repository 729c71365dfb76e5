"""The clustered whole-field kernel of ``<name>_kernel.cu`` (CUDA, sm_90 and later).

``<name>_cluster`` computes the phases of the strategy's schedule (:class:`rosenna.strategy.Field`) for up to
a step's samples in one launch: sample ``s`` belongs to thread-block cluster ``s`` (up to
the tuning's ``cluster_blocks`` blocks of ``cluster_threads`` threads, co-scheduled on one GPC), whose threads stride
over each phase's elements; a cluster barrier (``barrier.cluster.arrive.release`` +
``barrier.cluster.wait.acquire``: every store of the cluster before it is visible to every load of
the cluster after it, global memory included) separates consecutive phases instead of a launch or
a grid-wide barrier. Samples never wait for each other, and a sample's intermediates stay in L2
between its phases. A cluster has ``cluster_blocks`` blocks, a number the kernel is compiled with, so
that each phase's stride loop has a constant step and trip count; with the tuning's ``cluster_per_call`` the
blocks per cluster are chosen per call instead (:func:`choice`: the most, up to ``cluster_blocks``,
with which every cluster of the call is resident at once) and read at run time.

The phase bodies are :attr:`rosenna.strategy.Field.jammed` (convolutions jammed over 8
output channels) with the tuning's ``cluster_jam``, else the plain ones (a thread per element); the convs that
:mod:`conv_smem` takes run as its shared-memory tiles instead (the default: results/measurement-log.md, "The table of main cd0ccd7"). A plan of
fewer than the tuning's ``cluster_min_phases`` phases gets no clustered kernel. Compiled for an
older GPU (or PTX JIT of an older target) the kernel is empty and ``<name>_run`` never launches it
(it checks the binary's architecture); HIP has no clusters: nothing here is emitted under
``__HIPCC__``. Measured on the H200: results/measurement-log.md, "The clustered whole-field study",
"The epilogue study" and "The table of main cd0ccd7".
"""

from rosenna.emit.cuda import field_fuse
from rosenna.emit.render import count

# The tuning's cluster_blocks (blocks per cluster: 8 is the portable maximum, 16 needs the
# non-portable attribute) and cluster_threads (threads per block) shape the kernel
# (results/measurement-log.md, "The clustered whole-field study"); cluster_per_call: the blocks per cluster chosen per call and read at run time;
# cluster_min_blocks: ptxas's resident blocks per SM, a register cap; cluster_jam: the phases'
# convolutions unrolled-and-jammed over output channels)


def phase_lines(sched, note, threads, body, buffer=None):
    """One phase of the clustered kernel: the cluster's threads, from ``first`` by ``step``, stride
    over the phase's ``threads`` elements of sample ``s``, each running ``body``
    (:func:`whole_field.launch_body`'s lines; plain C: tests/test_field_fuse.py runs them on the
    host); ``buffer``: the intermediates' arrays (:func:`field_fuse.pointers`)."""
    lines = [f"    /* {note} */", f"    for (long tid = first; tid < {threads}l; tid += step) {{"]
    lines += ["        " + decl for decl in field_fuse.pointers(sched.plan, "\n".join(body), buffer)]
    return lines + body + ["    }"]


def kernel(sched, phases):
    """``<name>_cluster`` (see the module) over ``phases``, each the lines of :func:`phase_lines`."""
    tuning = sched.plan.tuned
    n, t, threads = sched.plan.name, sched.plan.ctype, tuning.cluster_threads
    per_call, min_blocks = tuning.cluster_per_call, tuning.cluster_min_blocks
    lines = []
    for k, phase in enumerate(phases):
        if k:
            lines.append(f"    ROSENNA_CLUSTER_BARRIER();  /* phase {k - 1}'s stores are visible to the cluster */")
        lines += phase
    code = "\n".join(lines)
    unused = "".join(f"    (void){p};\n" for p in ("x", "y") if f"{p}s = " not in code)
    return f"""#if defined(__CUDACC__) && !defined(__HIPCC__)
#ifndef ROSENNA_CLUSTER_BARRIER
/* Every store of the cluster's threads before it visible to every load of theirs after it. */
#define ROSENNA_CLUSTER_BARRIER() asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory")
#endif

/* The phases in one launch of count clusters ({n}_clustered gives them): cluster s computes sample
   s, {count(len(phases), 'phase')}, a cluster barrier between consecutive phases. */
__global__ void __launch_bounds__({threads}{f", {min_blocks}" if min_blocks else ""}) {n}_cluster(const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y, int count)
{{
#if __CUDA_ARCH__ >= 900
{_indices(tuning.cluster_blocks, threads, per_call)}    (void)count;
{unused}{code}
#else
    (void)x, (void)y, (void)count;
#endif
}}
#endif"""


def _indices(blocks, threads, per_call):
    """The kernel's sample ``s`` (its cluster) and its thread's first element and step."""
    head = ('    unsigned id, rank;\n    asm("mov.u32 %0, %%clusterid.x;" : "=r"(id));\n'
            '    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));\n')
    if per_call:
        return (head.replace("id, rank;", "id, rank, blocks;", 1) + '    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(blocks));\n'
                f"    const long s = id;\n    const long first = (long)rank * {threads} + threadIdx.x, step = (long)blocks * {threads};\n")
    return (head + f"    const long s = id;  /* {blocks} blocks per cluster: a constant step */\n"
            f"    const long first = (long)rank * {threads} + threadIdx.x, step = {blocks * threads}l;\n")


def launcher(n, t, tuning):
    """``<name>_clustered(count, x, y, s, blocks)``: one launch of ``<name>_cluster``, count
    clusters of ``blocks`` blocks; and ``<name>_cluster_blocks(device)``: how many of its blocks are
    resident at once on the device, 0 where it does not run (no sm_90 code in this binary, a device
    without cluster launch, no cluster of the tuning's ``cluster_blocks`` blocks resident)."""
    blocks, threads = tuning.cluster_blocks, tuning.cluster_threads
    portable = "" if blocks <= 8 else (
        f"    if (cudaFuncSetAttribute({n}_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {{\n"
        "        (void)cudaGetLastError();\n        return 0;\n    }\n")
    return f"""#if defined(__CUDACC__) && !defined(__HIPCC__)
static int {n}_clustered(int count, const {t} *x, {t} *y, cudaStream_t s, unsigned blocks)
{{
    cudaLaunchConfig_t config = {{}};
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = blocks;
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    config.gridDim = dim3((unsigned)count * blocks);
    config.blockDim = dim3({threads});
    config.stream = s;
    config.attrs = cluster;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, {n}_cluster, x, y, count) == cudaSuccess ? ROSENNA_STATUS_OK : ROSENNA_STATUS_LAUNCH;
}}

static int {n}_cluster_blocks(int device)
{{
    int launch = 0, sms = 0, per_sm = 0, clusters = 0;
    cudaFuncAttributes attributes;
    if (cudaFuncGetAttributes(&attributes, {n}_cluster) != cudaSuccess || attributes.binaryVersion < 90 ||
        cudaDeviceGetAttribute(&launch, cudaDevAttrClusterLaunch, device) != cudaSuccess || !launch ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, {n}_cluster, {threads}, 0) != cudaSuccess) {{
        (void)cudaGetLastError();  /* not this call's error: {n}_phases reads it */
        return 0;
    }}
{portable}    cudaLaunchConfig_t config = {{}};
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = {blocks};
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    config.gridDim = dim3({blocks});
    config.blockDim = dim3({threads});
    config.attrs = cluster;
    config.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&clusters, {n}_cluster, &config) != cudaSuccess || clusters == 0) {{
        (void)cudaGetLastError();
        return 0;
    }}
    return sms * per_sm;
}}
#endif"""


def note(n, few):
    """The sentence of ``<name>_run``'s comment on the clustered kernel (for up to ``few`` samples)."""
    if not few:
        return ""
    return (f"\n   Up to {few} samples where {n}_cluster runs (CUDA, sm_90): one launch of it, a"
            "\n   cluster per sample. Else:")


def choice(n, few, tuning):
    """``<name>_run``'s first choice: the clustered kernel for up to ``few`` (the strategy's ``cluster_samples``)
    samples where it runs (CUDA only) and every cluster of the call is resident at once: of
    the tuning's ``cluster_blocks`` blocks, or with its ``cluster_per_call`` as many (up to
    ``cluster_blocks``, at least 2) as keep them resident."""
    if not few:
        return ""
    return f"""#if defined(__CUDACC__) && !defined(__HIPCC__)
    if (count <= {few} && device < 64) {{
        int resident = __atomic_load_n(&{n}_clusters[device], __ATOMIC_RELAXED);
        if (resident == 0) {{
            resident = {n}_cluster_blocks(device);
            resident = resident > 0 ? resident : -1;
            __atomic_store_n(&{n}_clusters[device], resident, __ATOMIC_RELAXED);
        }}
{_blocks(n, tuning.cluster_blocks, tuning.cluster_per_call)}
    }}
#endif
"""


def _blocks(n, blocks, per_call):
    """``<name>_run``'s launch of the clustered kernel once the resident blocks are known."""
    if per_call:
        return f"""        if (resident > 0) {{
            unsigned blocks = {blocks};
            while (blocks > 2 && (long)count * blocks > resident)
                blocks /= 2;
            return {n}_clustered(count, x, y, s, blocks);
        }}"""
    return f"""        if ((long)count * {blocks} <= resident)  /* every cluster resident at once */
            return {n}_clustered(count, x, y, s, {blocks});"""
