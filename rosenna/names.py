"""Model names that would break something outside the model: the one table.

A model name ``n`` (``--name`` or the file stem) becomes file names (``lib<n>.a``, ``<n>.h``,
``<n>.pc``, ``<n>Config.cmake``, ``<n>_model.mod``, ...) and the prefix of every symbol and macro
(``<n>_infer``, ``<n>_init``, ``<N>_NX``, module ``<n>_model``). Each class below was probed by
building generated code with such a name (tests/test_reserved_names.py keeps one build per class):

- ``rosenna``: rosenna's own files and symbols (``rosenna_rt.h``, ``ROSENNA_*``, ``rosenna_*``).
- ``library``: ``lib<n>.a`` (or ``<n>.pc``, ``<n>Config.cmake``) beside the generated files shadows a
  system or runtime library of that name: ``<n>.pc``'s ``Libs: -L<out> -l<n> -fopenmp -lm`` with
  ``n = m`` links the model's ``libm.a`` twice and the C math library never (undefined ``expf``).
- ``header``: ``<n>.h`` shadows the system header ``<n.h>`` for every file compiled with
  ``-I<out>``: ``n = omp`` makes rosenna_rt.h's own ``#include <omp.h>`` read the model's header.
- ``namespace``: ``<n>_`` is a prefix a standard or runtime reserves for its own routines, so the
  model's symbols collide with theirs: ``n = acc`` declares ``int acc_init(const char *)``, which
  OpenACC's ``openacc.h`` declares as ``void acc_init(acc_device_t)``.
- ``c++``: a name containing ``__`` or ending in ``_`` makes every symbol contain ``__``
  (``x__infer``), reserved to the implementation in C++ (the ``.cu`` file and C++ solvers include
  ``<n>.h``). No compiler here rejects it; refused because nothing is lost and nothing may break.

A ``--name`` in a class is refused (exit 2, one line saying what to pass instead); a file stem in
one is mangled to ``m_<stem>`` (``generate.default_name``), which is in none.

Accepted after probing (the name is only ever a prefix, so these cannot collide): C, C++ and
Fortran keywords (``int``, ``class``, ``do``, ``end``), Fortran's intrinsic modules (the model's
module is ``<n>_model``, never ``iso_c_binding``), names of C library functions (``<n>_infer`` is
not ``n``), and the C standard's "future library directions" prefixes ``is``/``to``/``str``/``mem``
followed by a lower-case letter (they would refuse ``stress`` and ``tokamak``; a real clash needs a
declaration, and the namespace class lists the prefixes that have them). Names that differ only in
case are one name to Fortran and to some file systems: ``outdir.conflict`` refuses them in one
output directory, and the ``.mod`` file is named as every Fortran compiler writes it (lower case).
"""

from dataclasses import dataclass

#: Link names of system and runtime libraries (C, POSIX, GCC, LLVM, NVHPC, CUDA, HIP, MPI,
#: sanitizers), and package names of pkg-config and CMake that a solver links beside a model.
SYSTEM_LIBRARIES = frozenset(s.lower() for s in """
    c m dl rt pthread util crypt resolv anl nsl atomic gcc gcc_s gcc_eh ssp unwind
    gfortran quadmath gomp omp iomp5 acc accdevice acchost nvc nvcpumath nvhpcatm nvomp pgmath
    flang flangrt FortranRuntime FortranDecimal cuda cudart cudart_static cudadevrt culibos cublas
    cublasLt cufft curand cusparse cusolver nvrtc nvToolsExt nvJitLink amdhip64 hiprtc hip hipblas
    rocblas mpi mpi_mpifh mpi_usempif08 mpi_usempi_ignore_tkr mpifort mpicxx mpich mpichf90 fmpich
    pmpi ompi asan ubsan tsan lsan z bz2 lzma zstd blas cblas lapack lapacke openblas mkl_rt fftw3
    fftw3f hdf5 hdf5_fortran netcdf netcdff petsc OpenMP OpenACC MPI Threads CUDAToolkit HIP
    ZLIB HDF5 NetCDF Torch FTorch TorchFort
""".split())

#: Headers a generated file or a solver includes as ``<n.h>``: C23's, POSIX's most used, and the
#: runtimes' (OpenMP, OpenACC, MPI, CUDA; HIP's live under ``hip/`` and cannot be shadowed).
SYSTEM_HEADERS = frozenset("""
    assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal stdalign
    stdarg stdatomic stdbit stdbool stdckdint stddef stdint stdio stdlib stdnoreturn string tgmath
    threads time uchar wchar wctype unistd fcntl pthread dlfcn sched semaphore strings dirent
    poll regex glob libgen spawn syslog termios alloca malloc features endian
    omp omp_lib omp_tools openacc openacc_lib mpi mpif mpio cuda cuda_runtime cuda_runtime_api
    cuda_fp16 cuda_bf16 cuda_profiler_api device_functions vector_types math_constants cublas
    cublas_v2 cufft curand nvToolsExt
""".split())

#: Prefixes ``<p>_`` reserved for a standard's or runtime's own names: C11 (<threads.h>,
#: <stdatomic.h>), POSIX, OpenMP, OpenACC, MPI (``MPI_``, ``PMPI_``; Fortran folds case). CUDA's and
#: HIP's routines are ``cuda``/``hip`` + a capital (``cudaMalloc``), so ``cuda_`` is free.
RESERVED_PREFIXES = frozenset("""
    atomic memory_order cnd mtx thrd tss pthread sem posix sched aio mq shm timer clock
    omp ompt ompd kmp acc mpi pmpi mpix
""".split())


#: rosenna's own prefix: of rosenna_rt.h and of every macro and symbol rosenna_rt.h defines.
ROSENNA = "rosenna"


@dataclass(frozen=True)
class Reserved:
    kind: str
    why: str  # a sentence over {n}

    def matches(self, name):
        low = name.lower()
        if self.kind == "rosenna":
            return low == ROSENNA or low.startswith(ROSENNA + "_")
        if self.kind == "library":
            return bool({low, low + "_f", low + "_device"} & SYSTEM_LIBRARIES)
        if self.kind == "header":
            return low in SYSTEM_HEADERS
        if self.kind == "namespace":
            return any(low == p or low.startswith(p + "_") for p in RESERVED_PREFIXES)
        return "__" in name or name.endswith("_")


#: The classes, checked in this order; the first that matches names the reason.
CLASSES = (
    Reserved("rosenna", "names 'rosenna' and 'rosenna_*' are rosenna's own (rosenna_rt.h, the ROSENNA_* "
                        "macros and rosenna_* routines it defines)"),
    Reserved("header", "{n}.h would shadow the system header <{n}.h> for everything compiled with -I<out>"),
    Reserved("library", "lib{n}.a, {n}.pc and {n}Config.cmake would shadow the system or runtime library "
                        "'{n}' on a link line (-L<out> -l{n})"),
    Reserved("namespace", "the symbols {n}_* (e.g. {n}_init) would fall in a prefix that C, POSIX, OpenMP, "
                          "OpenACC or MPI reserve for their own routines"),
    Reserved("c++", "every symbol {n}_* would contain '__', reserved in C++ (the .cu file and C++ "
                    "solvers include {n}.h)"),
)


def reserved(name):
    """Why model name ``name`` is refused (a sentence), or None."""
    for entry in CLASSES:
        if entry.matches(name):
            return entry.why.format(n=name)
    return None
