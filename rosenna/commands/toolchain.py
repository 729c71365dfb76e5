"""`rosenna toolchain list|show|detect|validate`: a thin shell over :mod:`rosenna.toolchain`."""

import json
import sys

from rosenna import toolchain
from rosenna.errors import ToolchainError
from rosenna.toolchain.catalog import BrokenFile, Catalog, read_profile
from rosenna.toolchain.catalog import log as catalog_log
from rosenna.toolchain.schema import ProfileError
from rosenna.toolchain.profile import build
from rosenna.toolchain.resolution import compiler_commands


def register(subparsers):
    parser = subparsers.add_parser(
        "toolchain",
        help="list, show, detect and validate toolchain profiles",
        description="Toolchain profiles: the compilers, offload flags, backend and thresholds "
        "generate, verify and gpu-gate build with. See docs/toolchains.md.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", help="the profiles on the search path and the file each comes from")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_list)

    p = actions.add_parser("show", help="a profile resolved for this machine (placeholders filled)")
    p.add_argument("name", metavar="NAME", help="a profile name, an alias, or 'auto'")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_target_options(p)
    p.set_defaults(func=_show)

    p = actions.add_parser("detect", help="the CPU, GPUs and compilers here, and the profile chosen")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_detect)

    p = actions.add_parser("validate", help="check profile files (default: every one on the search path)")
    p.add_argument("files", nargs="*", metavar="FILE", help="profile files to check")
    p.set_defaults(func=_validate)


def _list(args):
    catalog = Catalog()
    rows = []
    for f in sorted(catalog.winners() + catalog.broken, key=lambda f: f.rank):
        broken = isinstance(f, BrokenFile)
        rows.append({
            "name": f.name,
            "kind": f.kind,
            "file": str(f.path),
            "broken": str(f.error) if broken else "",
            "aliases": [] if broken else list(f.data.get("aliases", [])),
            "extends": "" if broken else f.data.get("extends", ""),
            "description": "" if broken else f.data.get("description", ""),
            "shadows": [] if broken else [str(s.path) for s in catalog.shadowed(f.name)],
        })
    if args.json:
        print(json.dumps({"search_path": [{"path": str(d.path), "kind": d.kind} for d in catalog.dirs],
                          "profiles": rows}, indent=2))
        return 0
    width = max([len(r["name"]) for r in rows] + [4])
    print(f"{'NAME':<{width}}  {'FROM':<7}  FILE")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['kind']:<7}  {r['file']}" + ("  BROKEN (skipped)" if r["broken"] else ""))
        if r["broken"]:
            print(f"{'':<{width}}  {'':<7}  {r['broken']}")
        if r["aliases"]:
            print(f"{'':<{width}}  {'':<7}  aliases: {', '.join(r['aliases'])}")
        if r["extends"]:
            print(f"{'':<{width}}  {'':<7}  extends: {r['extends']}")
        for shadowed in r["shadows"]:
            print(f"{'':<{width}}  {'':<7}  shadows {shadowed}")
    print("\nsearch path (first wins):")
    for d in catalog.dirs:
        there = "" if d.path.is_dir() else "  (absent)"
        print(f"  {d.kind:<7}  {d.path}{there}")
    return 0


def add_target_options(p):
    """``--target`` and ``--gpu-arch``: what to build for, when it is not this node."""
    p.add_argument("--target", metavar="MICROARCH",
                   help="CPU to build for, by archspec's name as in Spack's target= (e.g. zen3, icelake, "
                        "neoverse_v2; default: this host)")
    p.add_argument("--gpu-arch", metavar="ARCH",
                   help="GPU to build for: a compute capability (80, 8.0, sm_90) or an AMD target (gfx90a); "
                        "default: the profile's, else the GPU detected here")


def _show(args):
    profile = toolchain.resolve(args.name, target=args.target, gpu_arch=args.gpu_arch)
    if args.json:
        print(json.dumps(profile.to_dict(), indent=2))
        return 0
    missing = dict(profile.missing_compilers(roles=[r for r in ("c", "cxx", "fortran", "device") if profile.compiler(r)]))
    print(f"profile:      {profile.name} ({profile.kind})")
    print(f"file:         {profile.source}")
    for parent in profile.chain[1:]:
        print(f"extends:      {parent}")
    if profile.reason:
        print(f"chosen:       {profile.reason}")
    if profile.description:
        print(f"description:  {profile.description}")
    if profile.aliases:
        print(f"aliases:      {', '.join(profile.aliases)}")
    print(f"gpu vendor:   {', '.join(profile.gpu_vendor) or 'none (host profile)'}")
    print(f"gpu target:   {profile.gpu.offload_arch} ({profile.gpu.source})")
    print(f"cpu target:   {profile.target} ({profile.target_source})")
    for role, label in (("c", "cc"), ("cxx", "cxx"), ("fortran", "fc"), ("device", "devcc")):
        command = profile.compiler(role)
        state = "" if not command else ("  (not found on PATH)" if role in missing else "")
        print(f"{label + ':':<13} {command or '-'}{state}")
    print(f"backend:      {profile.backend}")
    print(f"omp offload:  {profile.flags_omp_offload or '-'}")
    print(f"openacc:      {profile.flags_acc or '-'}")
    print(f"host:         {profile.flags_host or '-'}")
    print(f"optimize c:   {profile.optimize_c or '-'}")
    print(f"optimize f:   {profile.optimize_fortran or '-'}")
    print(f"optimize dev: {profile.optimize_device or '-'}")
    print(f"devflags:     {profile.devflags or '-'}")
    print(f"device link:  {profile.device_link_flags or '-'}")
    print(f"__constant__ limit: {profile.constant_limit_bytes} bytes")
    print(f"embed threshold:    {profile.embed_threshold} weights")
    print(f"modules:      {' '.join(profile.modules) or '-'}")
    print("make defaults:")
    for key, value in profile.make_defaults().items():
        print(f"  {key} = {value}")
    for note in profile.notes:
        print(f"note:         {note}")
    return 0


def _detect(args):
    catalog = Catalog()
    detection = toolchain.detect(compiler_commands(catalog))
    selection = toolchain.select(catalog, detection)
    chosen = selection.profile
    if args.json:
        out = detection.to_dict()
        out["selection"] = {
            "profile": chosen.name,
            "file": str(chosen.source),
            "reason": chosen.reason,
            "considered": [{"profile": n, "verdict": v} for n, v in selection.considered],
        }
        print(json.dumps(out, indent=2))
        return 0
    cpu = detection.cpu
    print(f"cpu:       {cpu.name} ({cpu.vendor}, {cpu.family}), {len(cpu.features)} features")
    if detection.gpus:
        for gpu in detection.gpus:
            print(f"gpu:       {gpu.describe()} [{gpu.vendor}, {gpu.tool}]")
    else:
        print("gpu:       none")
    for c in detection.compilers:
        flags = c.host_flags or f"({c.host_flags_note or 'no flags'})"
        print(f"compiler:  {c.command} {c.version or '?'} [{c.family or 'unknown'}] {c.path}")
        print(f"           host flags: {flags}")
    for note in detection.notes:
        print(f"note:      {note}")
    for name, verdict in selection.considered:
        print(f"tried:     {name}: {verdict}")
    print(f"profile:   {chosen.name} ({chosen.source})")
    print(f"because:   {chosen.reason}")
    return 0


def _validate(args):
    """Check every file named (default: every file on the search path); exit 1 if any is broken.

    Each problem is printed once, one line (``FILE:LINE: what, how to fix``): the catalog's own
    notice of a broken file (one long line for every command that skips it) is not, here, where
    the file's own lines follow.
    """
    quiet, catalog_log.disabled = catalog_log.disabled, True
    try:
        catalog = Catalog()
    finally:
        catalog_log.disabled = quiet
    if args.files:
        # Each is read as if it came first on the search path, so extends finds what it would.
        checks = [(path, lambda path=path: read_profile(path, "path", -1)) for path in args.files]
    else:
        checks = [(str(f.path), lambda f=f: f) for f in sorted(catalog.files + catalog.broken, key=lambda f: f.rank)]
    failed = 0
    for path, read in checks:
        try:
            f = read()
            if isinstance(f, BrokenFile):
                raise f.error
            build(catalog, f, gpus=(), detect_gpus=False)
        except ToolchainError as exc:
            failed += 1
            for line in (exc.lines() if isinstance(exc, ProfileError) else [str(exc)]):
                print(f"{line}", file=sys.stderr)
            print(f"{path}: FAILED", flush=True)
            continue
        print(f"{path}: ok", flush=True)
    if failed:
        print(f"{failed} of {len(checks)} profile file{'s' if len(checks) != 1 else ''} failed", file=sys.stderr)
    return 1 if failed else 0
