/* cp.async (sm_80+) copies 16 bytes global -> shared without passing through registers, so the
   next stage loads while this one is multiplied; elsewhere the copy goes through registers. The staged
   FP32 kernel and the wide tensor-core kernel stream their weight stages through these. */
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define ROSENNA_CP_ASYNC 1
#endif

/* One stage of STAGE4 float4 global -> shared by THREADS threads, 16 bytes per thread and step. */
template <int STAGE4, int THREADS>
__device__ __forceinline__ void rosenna_stage_copy(float4 *dst, const float4 *ROSENNA_RESTRICT src)
{
    static_assert(STAGE4 % THREADS == 0, "a stage splits evenly over the threads");
#pragma unroll
    for (int i = 0; i < STAGE4 / THREADS; ++i) {
        const int e = i * THREADS + threadIdx.x;
#if defined(ROSENNA_CP_ASYNC)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst + e)),
                     "l"(src + e) : "memory");
#else
        dst[e] = __ldg(src + e);
#endif
    }
}

__device__ __forceinline__ void rosenna_stage_commit()
{
#if defined(ROSENNA_CP_ASYNC)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* Every group but the newest has landed: the newest is the stage being prefetched. */
__device__ __forceinline__ void rosenna_stage_wait_prev()
{
#if defined(ROSENNA_CP_ASYNC)
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#endif
}
