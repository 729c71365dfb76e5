"""The make recipes: ``<name>.mk`` (lib<name>.a, and for cuda/hip lib<name>_device.a) and
``<name>_fortran.mk`` (lib<name>_f.a and the module file).

A build never mixes configurations. Each recipe writes the configuration it builds with (backend,
compilers, flags) into a stamp beside the archives, ``<name>.config`` / ``<name>_fortran.config``,
whenever it differs from the stamp's; every object depends on the stamp, so changing
ROSENNA_BACKEND, CC, FC, CFLAGS, FFLAGS, ROSENNA_OFFLOAD_FLAGS, DEVCC or DEVFLAGS rebuilds what
they compile (and changed sources rebuild as always). An archive is made anew from the objects of
the one configuration (``ar`` on an existing archive would keep the members of the last one: after
cuda, then omp, ``<name>_kernel.o`` stayed and ``<name>_infer_batch`` was defined twice), and a
check after ``ar`` refuses an archive in which a strong symbol is defined twice.

Objects per configuration (one folder each) would save recompiling when switching back, but
``lib<name>.a`` is the one archive a solver's link line names, so it is remade on each switch
anyway; the stamp keeps the generated folder's layout as it was. The stamp is read with make's
``$(file <...)`` (GNU make 4.2 or later) and written by the shell from an exported variable, so
flags holding quotes need no shell quoting and ``make -n`` writes nothing.
"""

from rosenna.emit import cpu_flags
from rosenna.quoting import make_quote
from rosenna.emit.cuda.runtime import BACKENDS

#: The strong definitions ``nm`` prints (text, data, bss, read-only); weak (W, V) and common (C)
#: symbols may legitimately appear more than once.
STRONG_SYMBOLS = "BDGRST"


def cpu_sentence(profile):
    """Which CPU the build files build for, in words (the .mk, CMake and .pc comments)."""
    if profile.target_source == "--target":
        return f"for CPU {profile.target} (--target)"
    return "for the CPU of the machine that builds (native)"


def profile_comment(profile, example):
    """The .mk lines that say where its defaults come from, and how to override them."""
    lines = [f"Defaults: toolchain profile {profile.name}, {cpu_sentence(profile)},",
             f"and GPU {profile.gpu.offload_arch} ({profile.gpu.source}). Override any on the command line:",
             f"  {example}"]
    lines += [f"note: {note}" for note in cpu_flags.notes(profile)]
    return "".join("# " + " ".join(line.split()) + "\n" if not line.startswith("  ") else "#   " + line.strip() + "\n"
                   for line in lines)


def example(profile, recipe, lang):
    """A command line overriding the defaults, for the GPU the profile builds for."""
    compiler, flags = ("CC", "CFLAGS") if lang == "c" else ("FC", "FFLAGS")
    if profile.gpu.vendor == "amd":
        cmd = "amdclang" if lang == "c" else "amdflang"
        offload = f"-fopenmp --offload-arch={profile.gpu.gfx}"
    else:
        cmd = "nvc" if lang == "c" else "nvfortran"
        offload = f"-mp=gpu -gpu=cc{profile.gpu.cc}"
    return f"make -f {recipe} {compiler}={cmd} {flags}=-O2 ROSENNA_OFFLOAD_FLAGS='{offload}'"


def stamp_rules(name, stamp_file, config):
    """The stamp: ``stamp_file`` (under $(ROSENNA_DIR)) holds the last configuration built; when
    ``config`` (a make expression) differs from it the stamp is phony, so its recipe rewrites it and
    everything depending on it rebuilds. The shell writes it from an exported variable (no quoting
    of the flags, and ``make -n`` writes nothing)."""
    path = f"$(ROSENNA_DIR)/{stamp_file}"
    var = "ROSENNA_CONFIG_" + stamp_file.replace(".", "_").upper()
    return "\n".join([
        f"{var} = {config}",
        f"ifneq ($(file <{path}),$({var}))",
        f".PHONY: {path}",
        "endif",
        f"{path}: export {var}_TEXT = $({var})",
        f"{path}:",
        f'\t@echo "rosenna {name}: building with $${var}_TEXT"',
        f'\t@printf \'%s\\n\' "$${var}_TEXT" > $@',
        ""])


def archive_recipe(name, recipe, objects):
    """Recipe lines making archive ``$@`` anew from ``objects``, then refusing it (and removing it)
    when a strong symbol is defined twice."""
    message = (f"rosenna {name}: $@ defines\" dup \" more than once; its objects come from two configurations: "
               f"run make -f {recipe} clean, then build again")
    return "\n".join([
        "\trm -f $@",
        f"\t$(AR) rcs $@ {objects}",
        f"\t@$(NM) -g --defined-only $@ | awk 'NF == 3 && $$2 ~ /^[{STRONG_SYMBOLS}]$$/ {{ if (seen[$$3]++) dup = dup \" \" $$3 }} "
        f'END {{ if (dup != "") {{ print "{message}" > "/dev/stderr"; exit 1 }} }}\' || {{ rm -f $@; exit 1; }}'])


def native_rules(name, profile):
    """The backend switch of ``<name>.mk``: which objects lib<name>.a holds, and the kernel rules.

    ``profile``: the resolved toolchain profile giving each backend's DEVCC and DEVFLAGS."""
    n = name
    lines = ["# ROSENNA_BACKEND=omp builds only <name>.c with CC. cuda|hip also compile <name>_kernel.cu",
             f"# with DEVCC and DEVFLAGS: {n}_kernel.o (the batched kernel, in lib{n}.a; a host compiler can",
             "# link it, adding ROSENNA_DEVICE_LIBS) and, as relocatable device code, " + f"{n}_device.o in",
             f"# lib{n}_device.a: the __device__ {n}_infer for your own kernels (link those with DEVCC).",
             "# hip builds for AMD unless HIP_PLATFORM says otherwise: hipcc on a machine that also has",
             "# nvcc would otherwise choose NVIDIA and refuse --offload-arch.",
             ".DEFAULT_GOAL := all",
             "OBJCOPY ?= objcopy",
             "NM ?= nm",
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
        if backend == "hip":
            lines += ["HIP_PLATFORM ?= amd", "export HIP_PLATFORM"]
    lines += ["else ifneq ($(ROSENNA_BACKEND),omp)",
              "$(error ROSENNA_BACKEND=$(ROSENNA_BACKEND): choose omp, cuda or hip)",
              "endif",
              "ifneq ($(ROSENNA_BACKEND),omp)",
              "ROSENNA_NATIVE = -DROSENNA_NATIVE_KERNEL",
              f"ROSENNA_OBJS += $(ROSENNA_DIR)/{n}_kernel.o",
              f"ROSENNA_EXTRA = $(ROSENNA_DIR)/lib{n}_device.a",
              "ROSENNA_DEVICE_CONFIG = devcc=$(DEVCC) | devflags=$(DEVFLAGS)"
              "$(if $(filter hip,$(ROSENNA_BACKEND)), | hip_platform=$(HIP_PLATFORM))",
              "endif",
              "",
              f"$(ROSENNA_DIR)/{n}_kernel.o: $(ROSENNA_DIR)/{n}_kernel.cu $(ROSENNA_DIR)/rosenna_rt.h "
              f"$(ROSENNA_DIR)/{n}.config",
              "\t$(DEVCC) $(DEVFLAGS) -c $< -o $@",
              "",
              f"$(ROSENNA_DIR)/{n}_device.o: $(ROSENNA_DIR)/{n}_kernel.cu $(ROSENNA_DIR)/rosenna_rt.h "
              f"$(ROSENNA_DIR)/{n}.config",
              "\t$(DEVCC) $(DEVFLAGS) $(ROSENNA_RDC) -DROSENNA_DEVICE_ROUTINE -c $< -o $@",
              f"\t$(OBJCOPY) --weaken-symbol={n}_infer $@  # its host stub yields to {n}.c's host routine",
              "",
              f"$(ROSENNA_DIR)/lib{n}_device.a: $(ROSENNA_DIR)/{n}_device.o",
              archive_recipe(n, f"{n}.mk", "$^"),
              "",
              "# The link flags a host-compiler link of lib" + f"{n}.a needs: LIBS=$$(make -s -f {n}.mk print-libs)",
              "print-libs:",
              "\t@echo $(ROSENNA_DEVICE_LIBS)",
              ""]
    return "\n".join(lines)


def c_makefile(plan, stamp, profile):
    """``<name>.mk``: lib<name>.a (and lib<name>_device.a for cuda/hip) beside itself."""
    n = plan.name
    config = ("backend=$(ROSENNA_BACKEND) | cc=$(CC) | target=$(ROSENNA_TARGET) | cflags=$(CFLAGS) | "
              "offload=$(ROSENNA_OFFLOAD_FLAGS)"
              "$(if $(ROSENNA_DEVICE_CONFIG), | $(ROSENNA_DEVICE_CONFIG))")
    return f"""# {stamp}
# Builds lib{n}.a beside this file:
#   make -f {n}.mk
{profile_comment(profile, example(profile, f"{n}.mk", "c"))}\
# ROSENNA_OFFLOAD_FLAGS selects the offload model, e.g. -fopenmp -foffload=nvptx-none (GCC),
# -mp=gpu (nvc), -fopenacc (GCC OpenACC).
# {n}.config holds the configuration last built: any change of backend, compiler or flags
# rebuilds every object, and lib{n}.a only ever holds the objects of one configuration.

ROSENNA_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
ROSENNA_BACKEND ?= {profile.backend}
ifeq ($(origin CC),default)
CC = {make_quote(profile.cc, "compilers.c")}
endif
{cpu_flags.make_block(profile, "c")}
CFLAGS ?= {cpu_flags.mk_flags(profile, "c")}
ROSENNA_OFFLOAD_FLAGS ?= {make_quote(profile.offload_flags, "flags")}

{native_rules(n, profile)}
{stamp_rules(n, f"{n}.config", config)}
all: $(ROSENNA_DIR)/lib{n}.a $(ROSENNA_EXTRA)

$(ROSENNA_DIR)/lib{n}.a: $(ROSENNA_OBJS) $(ROSENNA_DIR)/{n}.config
{archive_recipe(n, f"{n}.mk", "$(ROSENNA_OBJS)")}

$(ROSENNA_DIR)/{n}.o: $(ROSENNA_DIR)/{n}.c $(ROSENNA_DIR)/{n}.h $(ROSENNA_DIR)/rosenna_rt.h $(ROSENNA_DIR)/{n}.config
\t$(CC) $(CFLAGS) $(ROSENNA_OFFLOAD_FLAGS) $(ROSENNA_NATIVE) -c $< -o $@

clean:
\trm -f $(ROSENNA_DIR)/{n}.o $(ROSENNA_DIR)/{n}_kernel.o $(ROSENNA_DIR)/{n}_device.o $(ROSENNA_DIR)/lib{n}.a \
$(ROSENNA_DIR)/lib{n}_device.a $(ROSENNA_DIR)/{n}.config

.PHONY: all clean print-libs
"""


def fortran_makefile(plan, stamp, profile):
    """``<name>_fortran.mk``: lib<name>_f.a and the module file beside itself."""
    n = plan.name
    config = "fc=$(FC) | target=$(ROSENNA_TARGET) | fflags=$(FFLAGS) | offload=$(ROSENNA_OFFLOAD_FLAGS)"
    return f"""# {stamp}
# Builds lib{n}_f.a and {n.lower()}_model.mod beside this file:
#   make -f {n}_fortran.mk
{profile_comment(profile, example(profile, f"{n}_fortran.mk", "fortran"))}\
# {n}_fortran.config holds the configuration last built: any change of compiler or flags rebuilds.

ROSENNA_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
ifeq ($(origin FC),default)
FC = {make_quote(profile.fc, "compilers.fortran")}
endif
{cpu_flags.make_block(profile, "fortran")}
FFLAGS ?= {cpu_flags.mk_flags(profile, "fortran")}
ROSENNA_OFFLOAD_FLAGS ?= {make_quote(profile.offload_flags, "flags")}
NM ?= nm
.DEFAULT_GOAL := all

{stamp_rules(n, f"{n}_fortran.config", config)}
all: $(ROSENNA_DIR)/lib{n}_f.a

$(ROSENNA_DIR)/lib{n}_f.a: $(ROSENNA_DIR)/{n}_model.o $(ROSENNA_DIR)/{n}_fortran.config
{archive_recipe(n, f"{n}_fortran.mk", f"$(ROSENNA_DIR)/{n}_model.o")}

$(ROSENNA_DIR)/{n}_model.o: $(ROSENNA_DIR)/{n}_model.F90 $(ROSENNA_DIR)/{n}_fortran.config
\t$(FC) $(FFLAGS) $(ROSENNA_OFFLOAD_FLAGS) -J$(ROSENNA_DIR) -c $< -o $@

clean:
\trm -f $(ROSENNA_DIR)/{n}_model.o $(ROSENNA_DIR)/{n.lower()}_model.mod $(ROSENNA_DIR)/lib{n}_f.a \
$(ROSENNA_DIR)/{n}_fortran.config

.PHONY: all clean
"""
