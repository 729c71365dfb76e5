"""Device-compiler flags of the tests that only check that generated or fixed device code compiles.

The front ends (cudafe++/EDG, clang), code generation (cicc, the AMDGPU backend) and ptxas all run
in full; only their optimizers are off. What these tests check is that the code is valid for the
compiler and the architecture, not its speed: the speed is the gate's and the benchmarks', built
with the toolchain profile's -O3. Optimizing is most of the CPU time of those compiles (cicc at
-O2 on the conv net's per-point device routine: 20 s; at -O0: 1 s). The tests that read ptxas's
resource report (no spills) keep -O3.
"""

#: nvcc: cicc and ptxas without optimization (beside an -O for the host compiler: a test that wants
#: the host's -Wall warnings of an optimizing build keeps its -O1).
NVCC_DEVICE = "-Xcicc -O0 -Xptxas -O0"
#: nvcc: host compiler, cicc and ptxas without optimization.
NVCC = f"-O0 {NVCC_DEVICE}"
#: sm_80 and sm_90 in one nvcc call: one host pass and one front end for both, cicc and ptxas once
#: per architecture (the same device compiles as two -arch builds).
NVCC_SM80_SM90 = "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90"
#: hipcc (clang): host and device without optimization.
HIPCC = "-O0"
