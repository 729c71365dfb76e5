/* Where the embedded weights are written once (rosenna/emit/cuda/copies.py), after rosenna_copies.cuh. */

/* The weights file's array i as a packing reads it, host[i][j], served from <name>_model::packed:
   a weight matrix [N][K] (j = o * K + k) at p + k * stride + o, a bias (k 0) at p + j. */
struct rosenna_view {
    const float *p;
    int k, stride;
    constexpr float operator[](int j) const
    {
        return k ? p[j % k * stride + j / k] : p[j];
    }
};

/* The initialiser of an embedded copy: evaluated by the device compile alone. The host compile's
   shadow of a __device__ variable is never read, and a compile-time packing there would only
   cost the host compiler's time. */
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define ROSENNA_PACKED(value) = value
#else
#define ROSENNA_PACKED(value) = {}
#endif
