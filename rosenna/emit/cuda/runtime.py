"""The CUDA/HIP runtime table: the API names and the backends (``<name>.mk``: rosenna.emit.make).

One kernel file serves CUDA and HIP: they differ only by the runtime names in :data:`RUNTIME_API`,
rendered once into ``rosenna_rt.h`` (``rosennaStream_t`` is ``cudaStream_t`` or ``hipStream_t``,
...), and by the compiler and libraries of :data:`BACKENDS`.
"""


#: The runtime API as CUDA and HIP spell it: name used in generated code -> (CUDA, HIP).
RUNTIME_API = (
    ("rosennaStream_t", "cudaStream_t", "hipStream_t"),
    ("rosennaError_t", "cudaError_t", "hipError_t"),
    ("rosennaSuccess", "cudaSuccess", "hipSuccess"),
    ("rosennaGetLastError", "cudaGetLastError", "hipGetLastError"),
    ("rosennaMemcpyToSymbol", "cudaMemcpyToSymbol", "hipMemcpyToSymbol"),
    ("rosennaMemcpyHostToDevice", "cudaMemcpyHostToDevice", "hipMemcpyHostToDevice"),
    ("rosennaFuncSetAttribute", "cudaFuncSetAttribute", "hipFuncSetAttribute"),
    ("rosennaGetDevice", "cudaGetDevice", "hipGetDevice"),
    ("rosennaDeviceSynchronize", "cudaDeviceSynchronize", "hipDeviceSynchronize"),
    ("rosennaDeviceGetAttribute", "cudaDeviceGetAttribute", "hipDeviceGetAttribute"),
    ("rosennaDevAttrMultiProcessorCount", "cudaDevAttrMultiProcessorCount", "hipDeviceAttributeMultiprocessorCount"),
    ("rosennaDevAttrCooperativeLaunch", "cudaDevAttrCooperativeLaunch", "hipDeviceAttributeCooperativeLaunch"),
    ("rosennaLaunchCooperativeKernel", "cudaLaunchCooperativeKernel", "hipLaunchCooperativeKernel"),
    ("rosennaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
     "hipOccupancyMaxActiveBlocksPerMultiprocessor"),
    ("rosennaFuncAttributeMaxDynamicSharedMemorySize", "cudaFuncAttributeMaxDynamicSharedMemorySize",
     "hipFuncAttributeMaxDynamicSharedMemorySize"),
)

#: The CUDA/HIP storage classes ROSENNA_CONST maps to in the kernel file.
CONSTANT_MEMORY = "__constant__"
GLOBAL_MEMORY = "__device__ const"


def runtime_mapping():
    """The CUDA/HIP block of ``rosenna_rt.h`` (identical for every model)."""
    width = max(len(name) for name, _, _ in RUNTIME_API)
    hip = "\n".join(f"#define {name:<{width}} {h}" for name, _, h in RUNTIME_API)
    cuda = "\n".join(f"#define {name:<{width}} {c}" for name, c, _ in RUNTIME_API)
    return f"""/* The native kernel (<name>_kernel.cu, ROSENNA_BACKEND=cuda|hip) names the runtime through
   these; hipcc on NVIDIA defines __CUDACC__ too, so HIP is tested first. */
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
{hip}
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
{cuda}
#endif
#if defined(__CUDACC__) || defined(__HIPCC__)
#define ROSENNA_CONSTANT_MEMORY {CONSTANT_MEMORY}
#define ROSENNA_GLOBAL_MEMORY {GLOBAL_MEMORY}
#endif"""


#: Per backend: the flag for relocatable device code, and the runtime library a host-compiler link
#: needs. The device compiler and its flags are the toolchain profile's (Profile.device_flags).
BACKENDS = {
    "cuda": {"RDC": "-rdc=true",
             "LIBS": "-L$(ROSENNA_DEVICE_LIBDIR) -Wl,-rpath,$(ROSENNA_DEVICE_LIBDIR) -lcudart -lstdc++",
             # nvcc names its installation in its dry run (a wrapper script on PATH may hide it).
             "LIBDIR": "$(shell $(DEVCC) -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^\\#\\$$ TOP=//p')/lib64"},
    "hip": {"RDC": "-fgpu-rdc",
            "LIBS": "-L$(ROSENNA_DEVICE_LIBDIR) -Wl,-rpath,$(ROSENNA_DEVICE_LIBDIR) -lamdhip64 -lstdc++",
            "LIBDIR": "$(or $(ROCM_PATH),/opt/rocm)/lib"},
}
