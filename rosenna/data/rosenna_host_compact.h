/* After rosenna_host_tf32.h, where a packing writes compact fragments (rosenna/emit/cuda/tf32.py host_tf32). */
/* A weight as the wide kernel's compact fragments hold it (rosenna/emit/cuda/tf32.py compact):
   big = truncated to TF32, plus the rest rounded to TF32; the sum is exact in fp32. */
constexpr float rosenna_host_compact(float f)
{
    const float big = rosenna_host_tf32_round(f, 0.0);
    return big + rosenna_host_tf32(f - big);
}
