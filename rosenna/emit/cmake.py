"""``<name>Config.cmake``: the generated model as a CMake package.

A solver finds it with ``find_package(<name> CONFIG REQUIRED PATHS <folder>)`` and links the
targets it defines:

- ``rosenna::<name>``: the C library (``<name>.c``, and for the cuda/hip backends the batched
  kernel ``<name>_kernel.cu``), its include directory, the OpenMP or OpenACC flags of the profile as
  usage requirements, and the device runtime (``CUDA::cudart`` / ``hip::host``) for cuda/hip;
- ``rosenna::<name>_fortran``: the Fortran module ``<name>_model`` and its module directory;
- ``rosenna::<name>_device`` (cuda/hip backends): the ``__device__ <name>_infer`` as relocatable
  device code, for the solver's own kernels.

Why a file per model rather than a ``rosenna_add_model()`` function found through the rosenna
package: the generated folder is self-contained. It builds on a compute node or in a container
without Python, onnx or rosenna installed, it can be committed beside the solver, and the
toolchain profile it was generated for is written into it (flags, GPU and CPU target) instead of
being looked up again at configure time on a different machine.

The targets are compiled in the solver's build tree by the project's own compilers: Fortran
module files are specific to the compiler that reads them, so a prebuilt archive could not serve
every project. The profile's optimisation and offload flags are applied when the project's
compiler is the profile's (compared by CMake's compiler id when rosenna could ask the profile's
compiler for its family at generate time, else by the executable's name); otherwise CMake's own
OpenMP flags are used and a warning says how to choose the profile's compiler.
"""

from rosenna.quoting import cmake_quote
from rosenna.emit import cpu_flags
from rosenna.emit.make import cpu_sentence

#: archspec's compiler family (see rosenna.toolchain.detection) -> CMake's compiler ids.
CMAKE_IDS = {
    "gcc": ("GNU",),
    "clang": ("Clang", "AppleClang", "LLVMFlang", "Flang"),
    "aocc": ("Clang", "LLVMFlang", "Flang"),
    "nvhpc": ("NVHPC", "PGI"),
    "oneapi": ("IntelLLVM",),
    "intel": ("Intel",),
}


#: Every language CMake may link an executable with that holds the archive. A static library's
#: link language propagates to what links it (LINKER_PREFERENCE: CUDA and HIP outrank C and C++),
#: so with the cuda backend a C program is linked as CUDA: by nvcc's host link launcher (the host
#: compiler, which takes the OpenMP flags as they are) or by clang for HIP.
LINK_LANGUAGES = ("C", "CXX", "Fortran", "CUDA", "HIP")


def quote(text):
    """``text`` as a CMake quoted argument."""
    return cmake_quote(text, "a toolchain profile's value in a CMake file")


def _comment(text):
    return " ".join(str(text).split())


def _in_quotes(text):
    """``text`` inside a CMake quoted argument (a message's words)."""
    return quote(text)[1:-1]


def _basename(command):
    """The executable's file name of a compiler command (``/opt/x/bin/nvc -w`` -> ``nvc``)."""
    first = " ".join(str(command).split()).split(" ")[0]
    return first.rsplit("/", 1)[-1]


def _language_target(n, lang, target, alias, sources, command, family, profile_name):
    """The block defining one library target of language ``lang`` ("C" or "Fortran")."""
    ids = ";".join(CMAKE_IDS.get(family, ()))
    srcs = " ".join(f'"${{_rosenna_{n}_dir}}/{s}"' for s in sources)
    flags_var = f"{n}_{lang}_FLAGS"
    lines = [
        f"if(CMAKE_{lang}_COMPILER_LOADED)",
        f"  add_library({target} STATIC {srcs})",
        f"  add_library(rosenna::{alias} ALIAS {target})",
        f"  set(_rosenna_ids {quote(ids)})",
        f'  get_filename_component(_rosenna_cmd "${{CMAKE_{lang}_COMPILER}}" NAME)',
        f'  if(";${{_rosenna_ids}};" MATCHES ";${{CMAKE_{lang}_COMPILER_ID}};" OR (_rosenna_ids STREQUAL ""',
        f'     AND _rosenna_cmd STREQUAL {quote(_basename(command))}))',
        f'    separate_arguments(_rosenna_opt UNIX_COMMAND "${{{flags_var}}}")',
        "    foreach(_rosenna_flag IN LISTS _rosenna_opt)",
        f'      target_compile_options({target} PRIVATE "$<$<COMPILE_LANGUAGE:{lang}>:${{_rosenna_flag}}>")',
        "    endforeach()",
        f"    foreach(_rosenna_flag IN LISTS _rosenna_{n}_omp)",
        f'      target_compile_options({target} PUBLIC "$<$<COMPILE_LANGUAGE:{lang}>:${{_rosenna_flag}}>")',
        f'      target_link_options({target} INTERFACE',
        *[f'        "$<$<LINK_LANGUAGE:{link}>:${{_rosenna_flag}}>"' + (")" if link == LINK_LANGUAGES[-1] else "")
          for link in LINK_LANGUAGES],
        "    endforeach()",
        "  else()",
        f'    message(WARNING "rosenna {n}: toolchain profile {_in_quotes(profile_name)} is for {_in_quotes(command)}; this project '
        f'compiles {lang} with ${{CMAKE_{lang}_COMPILER_ID}} (${{CMAKE_{lang}_COMPILER}}), so the profile\'s flags are '
        f'not used and OpenMP comes from find_package(OpenMP). Configure with -DCMAKE_{lang}_COMPILER='
        f'{_in_quotes(_comment(command).split(" ")[0])} to build with them.")',
        f"    find_package(OpenMP REQUIRED COMPONENTS {lang})",
        f"    target_link_libraries({target} PUBLIC OpenMP::OpenMP_{lang})",
        "  endif()",
    ]
    return lines


def _optimize(n, profile, lang):
    """The quoted default of ``<n>_C_FLAGS`` / ``<n>_Fortran_FLAGS``: the profile's optimisation flags
    with the CPU flags that ``<n>_TARGET`` chose (:mod:`rosenna.emit.cpu_flags`)."""
    slot = "@ROSENNA_CPU@"
    text = cpu_flags.template(profile, lang)
    if "{archspec}" not in text:
        return quote(text)
    cmake_lang = "C" if lang == "c" else "Fortran"
    return quote(text.replace("{archspec}", slot)).replace(slot, f"${{_rosenna_{n}_cpu_{cmake_lang}}}")


def config(plan, stamp, profile, lang):
    """The text of ``<name>Config.cmake`` for the files generated with ``--lang lang``."""
    n = plan.name
    gpu = profile.gpu
    has_c, has_f = lang in ("c", "both"), lang in ("fortran", "both")
    offload_default = "offload" if profile.flags_omp_offload else "host"
    usage = []
    if has_c:
        usage.append(f"#   target_link_libraries(solver PRIVATE rosenna::{n})            # C: #include \"{n}.h\"")
    if has_f:
        usage.append(f"#   target_link_libraries(solver_f PRIVATE rosenna::{n}_fortran)  # Fortran: use {n}_model")
    if has_c:
        usage.append(f"#   target_link_libraries(kernels PRIVATE rosenna::{n}_device rosenna::{n})  # {n}_BACKEND=cuda|hip,")
        usage.append(f"#     with CUDA_SEPARABLE_COMPILATION ON: your __global__ kernels call {n}_infer")
    head = [
        f"# {stamp}",
        f"# CMake package of the rosenna model {n}. In a solver's CMakeLists.txt:",
        f"#   find_package({n} CONFIG REQUIRED PATHS <this folder> NO_DEFAULT_PATH)",
        *usage,
        "# The libraries are compiled in your build tree by your project's compilers, with the flags of",
        f"# toolchain profile {_comment(profile.name)} {cpu_sentence(profile)} and GPU {gpu.offload_arch}"
        f" when your compiler is the",
        f"# profile's: -DCMAKE_C_COMPILER={_comment(profile.cc).split(' ')[0]}"
        f" -DCMAKE_Fortran_COMPILER={_comment(profile.fc).split(' ')[0]}.",
        f"# Variables (-D... or set before find_package): {n}_BACKEND omp|cuda|hip, {n}_OFFLOAD offload|acc|host (the profile's",
        f"# OpenMP target, OpenACC or host OpenMP flags), {n}_C_FLAGS, {n}_Fortran_FLAGS, {n}_DEVICE_FLAGS,",
        f"# {n}_CUDA_ARCHITECTURES, {n}_HIP_ARCHITECTURES; the cache variable {n}_TARGET: native (the building",
        "# machine's CPU), generic (its family's baseline)" + (f" or {_comment(profile.target)}." if
                                                                profile.target_source == "--target" else "."),
        *[f"# note: {_comment(note)}" for note in cpu_flags.notes(profile)],
        "",
        f"if(TARGET rosenna_{n} OR TARGET rosenna_{n}_fortran)  # found before, from another directory",
        "  return()",
        "endif()",
        f'set(_rosenna_{n}_dir "${{CMAKE_CURRENT_LIST_DIR}}")',
        *cpu_flags.cmake_block(n, profile, ["c"] * has_c + ["fortran"] * has_f),
        "# Defaults, unless set before find_package or with -D on the cmake command line:",
        *[f"if(NOT DEFINED {n}_{var})\n  set({n}_{var} {value})\nendif()" for var, value in (
            ("BACKEND", quote(profile.backend)), ("OFFLOAD", quote(offload_default)),
            ("C_FLAGS", _optimize(n, profile, "c")), ("Fortran_FLAGS", _optimize(n, profile, "fortran")),
            ("DEVICE_FLAGS", quote(profile.optimize_device)),
            ("CUDA_ARCHITECTURES", quote(gpu.cc)), ("HIP_ARCHITECTURES", quote(gpu.gfx)))],
        f'if({n}_OFFLOAD STREQUAL "offload")',
        f"  set(_rosenna_{n}_omp {quote(profile.offload_flags)})",
        f'elseif({n}_OFFLOAD STREQUAL "acc")',
        f"  set(_rosenna_{n}_omp {quote(profile.flags_acc)})",
        f'elseif({n}_OFFLOAD STREQUAL "host")',
        f"  set(_rosenna_{n}_omp {quote(profile.flags_host)})",
        "else()",
        f'  message(FATAL_ERROR "rosenna {n}: {n}_OFFLOAD=${{{n}_OFFLOAD}}: choose offload, acc or host")',
        "endif()",
        f'separate_arguments(_rosenna_{n}_omp UNIX_COMMAND "${{_rosenna_{n}_omp}}")',
        f'separate_arguments(_rosenna_{n}_dev UNIX_COMMAND "${{{n}_DEVICE_FLAGS}}")',
        "",
    ]
    body = []
    if has_c:
        body += _language_target(n, "C", f"rosenna_{n}", n, [f"{n}.c"], profile.cc, profile.families[0], profile.name)
        body += [
            f'  target_include_directories(rosenna_{n} PUBLIC "${{_rosenna_{n}_dir}}")',
            "  if(UNIX AND NOT APPLE)",
            f"    target_link_libraries(rosenna_{n} PUBLIC m)",
            "  endif()",
            f'  if({n}_BACKEND STREQUAL "cuda" OR {n}_BACKEND STREQUAL "hip")',
            f"    string(TOUPPER ${{{n}_BACKEND}} _rosenna_lang)",
            "    if(_rosenna_lang STREQUAL \"HIP\")",
            f'      set_source_files_properties("${{_rosenna_{n}_dir}}/{n}_kernel.cu" PROPERTIES LANGUAGE HIP)',
            "    endif()",
            "    if(NOT CMAKE_${_rosenna_lang}_COMPILER_LOADED)",
            f'      message(FATAL_ERROR "rosenna {n}: {n}_BACKEND=${{{n}_BACKEND}} needs ${{_rosenna_lang}} enabled before '
            f'find_package({n}): project(... LANGUAGES C ${{_rosenna_lang}}) or enable_language(${{_rosenna_lang}})")',
            "    endif()",
            f'    target_sources(rosenna_{n} PRIVATE "${{_rosenna_{n}_dir}}/{n}_kernel.cu")',
            f'    target_compile_definitions(rosenna_{n} PRIVATE "$<$<COMPILE_LANGUAGE:C>:ROSENNA_NATIVE_KERNEL>")',
            f'    add_library(rosenna_{n}_device STATIC "${{_rosenna_{n}_dir}}/{n}_kernel.cu")',
            f"    add_library(rosenna::{n}_device ALIAS rosenna_{n}_device)",
            f"    target_compile_definitions(rosenna_{n}_device PRIVATE ROSENNA_DEVICE_ROUTINE)",
            f'    target_include_directories(rosenna_{n}_device PUBLIC "${{_rosenna_{n}_dir}}")',
            f"    foreach(_rosenna_t rosenna_{n} rosenna_{n}_device)",
            f"      foreach(_rosenna_flag IN LISTS _rosenna_{n}_dev)",
            '        target_compile_options(${_rosenna_t} PRIVATE "$<$<COMPILE_LANGUAGE:${_rosenna_lang}>:${_rosenna_flag}>")',
            "      endforeach()",
            "    endforeach()",
            f'    if({n}_BACKEND STREQUAL "cuda")',
            "      find_package(CUDAToolkit REQUIRED)",
            f"      set_target_properties(rosenna_{n} rosenna_{n}_device PROPERTIES",
            f'                            CUDA_ARCHITECTURES "${{{n}_CUDA_ARCHITECTURES}}")',
            f"      set_target_properties(rosenna_{n}_device PROPERTIES CUDA_SEPARABLE_COMPILATION ON)",
            f"      target_link_libraries(rosenna_{n} PUBLIC CUDA::cudart)",
            f"      target_link_libraries(rosenna_{n}_device PUBLIC CUDA::cudart)",
            "    else()",
            "      # hip-config.cmake picks NVIDIA when nvcc is found, unless told: this backend is AMD's.",
            "      if(NOT DEFINED ENV{HIP_PLATFORM})",
            "        set(ENV{HIP_PLATFORM} amd)",
            "      endif()",
            "      find_package(hip REQUIRED CONFIG)",
            f"      set_target_properties(rosenna_{n} rosenna_{n}_device PROPERTIES",
            f'                            HIP_ARCHITECTURES "${{{n}_HIP_ARCHITECTURES}}")',
            f'      target_compile_options(rosenna_{n}_device PRIVATE "$<$<COMPILE_LANGUAGE:HIP>:-fgpu-rdc>")',
            f'      target_link_options(rosenna_{n}_device INTERFACE "$<$<LINK_LANGUAGE:HIP>:-fgpu-rdc>")',
            f"      target_link_libraries(rosenna_{n} PUBLIC hip::host)",
            f"      target_link_libraries(rosenna_{n}_device PUBLIC hip::host)",
            "    endif()",
            "    # The device archive's host stub of " + f"{n}_infer yields to {n}.c's host routine.",
            "    if(NOT CMAKE_OBJCOPY)",
            "      set(CMAKE_OBJCOPY objcopy)",
            "    endif()",
            f"    add_custom_command(TARGET rosenna_{n}_device POST_BUILD",
            f'                       COMMAND "${{CMAKE_OBJCOPY}}" --weaken-symbol={n}_infer "$<TARGET_FILE:rosenna_{n}_device>"',
            "                       VERBATIM)",
            f'  elseif(NOT {n}_BACKEND STREQUAL "omp")',
            f'    message(FATAL_ERROR "rosenna {n}: {n}_BACKEND=${{{n}_BACKEND}}: choose omp, cuda or hip")',
            "  endif()",
            "else()",
            f'  message(STATUS "rosenna {n}: C is not enabled in this project, so there is no rosenna::{n}")',
            "endif()",
            "",
        ]
    if has_f:
        body += _language_target(n, "Fortran", f"rosenna_{n}_fortran", f"{n}_fortran", [f"{n}_model.F90"],
                                 profile.fc, profile.families[1], profile.name)
        body += [
            f'  set(_rosenna_mod "${{CMAKE_CURRENT_BINARY_DIR}}/rosenna_{n}_mod")',
            f'  set_target_properties(rosenna_{n}_fortran PROPERTIES Fortran_MODULE_DIRECTORY "${{_rosenna_mod}}"',
            "                        Fortran_PREPROCESS ON)",
            f'  target_include_directories(rosenna_{n}_fortran PUBLIC "${{_rosenna_mod}}")',
            "else()",
            f'  message(STATUS "rosenna {n}: Fortran is not enabled in this project, so there is no '
            f'rosenna::{n}_fortran")',
            "endif()",
            "",
        ]
    body.append(f"set({n}_FOUND TRUE)")
    return "\n".join(head + body) + "\n"
