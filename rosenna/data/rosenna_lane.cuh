/* The lane within the warp (threadIdx.x % 32 only for blocks whose x extent is a multiple of 32):
   the warp routines' (rosenna/emit/cuda/routine.py, dmma.py), emitted where they call it. */
__device__ __forceinline__ int rosenna_lane()
{
#if defined(__HIPCC__)
    return (int)(__lane_id() % 32);
#else
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    return (int)lane;
#endif
}
