/* After rosenna_host_tf32.h, where a packing writes compact fragments (rosenna/emit/cuda/tf32.py host_tf32). */
/* A weight as the wide kernel's compact fragments hold it (rosenna/emit/cuda/tf32.py compact):
   big = truncated to TF32, plus the rest rounded to TF32; the sum is exact in fp32. */
static inline float rosenna_host_compact(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    u &= 0xffffe000u;
    float big;
    memcpy(&big, &u, sizeof big);
    return big + rosenna_host_tf32(f - big);
}
