"""The CUDA/HIP runtime table: the API names, the backends and the ``<name>.mk`` rules.

One kernel file serves CUDA and HIP: they differ only by the runtime names in :data:`RUNTIME_API`,
rendered once into ``rosenna_rt.h`` (``rosennaStream_t`` is ``cudaStream_t`` or ``hipStream_t``,
...), and by the compiler and libraries of :data:`BACKENDS`.
"""

from rosenna.quoting import make_quote

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


def makefile_rules(name, profile):
    """The backend switch of ``<name>.mk``: which objects lib<name>.a holds, and the kernel rules.

    ``profile``: the resolved toolchain profile giving each backend's DEVCC and DEVFLAGS."""
    n = name
    lines = ["# ROSENNA_BACKEND=omp builds only <name>.c with CC. cuda|hip also compile <name>_kernel.cu",
             f"# with DEVCC and DEVFLAGS: {n}_kernel.o (the batched kernel, in lib{n}.a; a host compiler can",
             "# link it, adding ROSENNA_DEVICE_LIBS) and, as relocatable device code, " + f"{n}_device.o in",
             f"# lib{n}_device.a: the __device__ {n}_infer for your own kernels (link those with DEVCC).",
             ".DEFAULT_GOAL := all",
             "OBJCOPY ?= objcopy",
             "ROSENNA_OBJS = $(ROSENNA_DIR)/" + f"{n}.o"]
    for backend, conf in BACKENDS.items():
        devcc, devflags = profile.device_compiler(backend), profile.device_flags(backend)
        keyword = "ifeq" if backend == "cuda" else "else ifeq"
        lines += [f"{keyword} ($(ROSENNA_BACKEND),{backend})",
                  f"DEVCC ?= {make_quote(devcc, 'compilers.device')}",
                  f"DEVFLAGS ?= {make_quote(devflags, 'devflags')}",
                  f"ROSENNA_RDC = {conf['RDC']}",
                  f"ROSENNA_DEVICE_LIBDIR ?= {conf['LIBDIR']}",
                  f"ROSENNA_DEVICE_LIBS ?= {conf['LIBS']}"]
    lines += ["else ifneq ($(ROSENNA_BACKEND),omp)",
              "$(error ROSENNA_BACKEND=$(ROSENNA_BACKEND): choose omp, cuda or hip)",
              "endif",
              "ifneq ($(ROSENNA_BACKEND),omp)",
              "ROSENNA_NATIVE = -DROSENNA_NATIVE_KERNEL",
              f"ROSENNA_OBJS += $(ROSENNA_DIR)/{n}_kernel.o",
              f"ROSENNA_EXTRA = $(ROSENNA_DIR)/lib{n}_device.a",
              "endif",
              "",
              f"$(ROSENNA_DIR)/{n}_kernel.o: $(ROSENNA_DIR)/{n}_kernel.cu $(ROSENNA_DIR)/rosenna_rt.h",
              "\t$(DEVCC) $(DEVFLAGS) -c $< -o $@",
              "",
              f"$(ROSENNA_DIR)/{n}_device.o: $(ROSENNA_DIR)/{n}_kernel.cu $(ROSENNA_DIR)/rosenna_rt.h",
              "\t$(DEVCC) $(DEVFLAGS) $(ROSENNA_RDC) -DROSENNA_DEVICE_ROUTINE -c $< -o $@",
              f"\t$(OBJCOPY) --weaken-symbol={n}_infer $@  # its host stub yields to {n}.c's host routine",
              "",
              f"$(ROSENNA_DIR)/lib{n}_device.a: $(ROSENNA_DIR)/{n}_device.o",
              "\t$(AR) rcs $@ $^",
              "",
              "# The link flags a host-compiler link of lib" + f"{n}.a needs: LIBS=$$(make -s -f {n}.mk print-libs)",
              "print-libs:",
              "\t@echo $(ROSENNA_DEVICE_LIBS)",
              ""]
    return "\n".join(lines)
