"""The C reader of ``.rwt`` weights files (``<name>_read``, ``<name>_init``), generated from
:data:`rosenna.abi.RWT_CHECKS` in its documented order; the Fortran reader
(:mod:`rosenna.emit.fortran_reader`) is generated from the same table."""

from rosenna import abi
from rosenna.emit.lang import C


def _c_bytes(data):
    """``data`` as a C string literal (octal escapes for anything but letters and digits)."""
    return '"' + "".join(chr(b) if chr(b).isalnum() else f"\\{b:03o}" for b in data) + '"'


def _checks(plan):
    """The body of ``<name>_read``: abi.RWT_CHECKS in order, one block per check."""
    n = plan.name
    expected = abi.rwt_expected(plan.precision, plan.hash, len(plan.weights))
    read_status = "ROSENNA_STATUS_READ"
    out, in_loop = [], False
    for i, check in enumerate(abi.RWT_CHECKS):
        status = abi.status_name(check.status)
        short = "ferror(file) ? ROSENNA_STATUS_OPEN : ROSENNA_STATUS_READ" if i == 0 else read_status
        if check.per_tensor and not in_loop:
            out.append("    for (t = 0; t < count; ++t) {")
            in_loop = True
        elif not check.per_tensor and in_loop:
            out.append("    }")
            in_loop = False
        pad = "        " if in_loop else "    "
        out.append(f"{pad}/* {check.field}: {check.doc} */")
        if check.kind == "bytes":
            out += [f"{pad}if (fread(bytes, 1, {check.size}, file) != {check.size})",
                    f"{pad}    return {short};",
                    f"{pad}if (memcmp(bytes, {_c_bytes(expected[check.expect])}, {check.size}) != 0)",
                    f"{pad}    return {status};"]
        elif check.kind in ("u32", "u32_max"):
            var = {"count": "count", "name_len": "length", "rank": "rank"}.get(check.field, "value")
            limit = expected[check.expect] if check.kind == "u32" else getattr(abi, check.expect)
            literal = f"0x{limit:08X}ul" if limit > 0xFFFF else f"{limit}ul"
            test = f"{var} != {literal}" if check.kind == "u32" else f"{var} > {literal}"
            out += [f"{pad}if (!{n}_read_u32(file, &{var}))", f"{pad}    return {short};",
                    f"{pad}if ({test})", f"{pad}    return {status};"]
        elif check.kind == "name":
            out += [f"{pad}if (fread(bytes, 1, length, file) != length)", f"{pad}    return {read_status};",
                    f"{pad}for (k = 0; k < {len(plan.weights)}ul; ++k)",
                    f"{pad}    if (length == {n}_tensors[k].length && memcmp(bytes, {n}_tensors[k].name, length) == 0)",
                    f"{pad}        break;",
                    f"{pad}if (k == {len(plan.weights)}ul)", f"{pad}    return {status};"]
        elif check.kind == "dims":
            out += [f"{pad}total = 1;",
                    f"{pad}for (r = 0; r < rank; ++r) {{",
                    f"{pad}    if (!{n}_read_u32(file, &value))",
                    f"{pad}        return {read_status};",
                    f"{pad}    if (value > {n}_tensors[k].size || (value != 0 && total > {n}_tensors[k].size / value))",
                    f"{pad}        return {status};",
                    f"{pad}    total *= value;",
                    f"{pad}}}",
                    f"{pad}if (seen[k] || total != {n}_tensors[k].size)",
                    f"{pad}    return {status};"]
        elif check.kind == "data":
            out += [f"{pad}if (fread({n}_tensors[k].data, sizeof *{n}_tensors[k].data, total, file) != total)",
                    f"{pad}    return {status};",
                    f"{pad}seen[k] = 1;"]
        elif check.kind == "checksum":
            out += [f"{pad}end = ftell(file);",
                    f"{pad}if (end < 0 || !{n}_read_u32(file, &value))",
                    f"{pad}    return {read_status};",
                    f"{pad}if (!{n}_checksum(file, end, &crc))",
                    f"{pad}    return {read_status};",
                    f"{pad}if (crc != value)",
                    f"{pad}    return {status};"]
        elif check.kind == "end":
            out += [f"{pad}if (fgetc(file) != EOF)", f"{pad}    return {status};"]
        else:
            raise ValueError(f"internal: no C rendering of .rwt check kind {check.kind!r}")
    return "\n".join(out)


def reader(plan, repack=""):
    """The .rwt reader, generated from abi.RWT_CHECKS (the Fortran reader is generated from the
    same table): every check in its documented order, and the CRC-32C over the file. ``repack``:
    lines of ``<name>_init`` that fill a second copy of the weights before the device updates."""
    n, t = plan.name, plan.ctype
    table = "\n".join(f'    {{"{w.ident}", {len(w.ident)}ul, {C.symbol(plan.name, w.ident)}, {w.size}ul}},'
                      for w in plan.weights)
    clears = "\n".join(f"        memset({C.symbol(plan.name, w.ident)}, 0, sizeof {C.symbol(plan.name, w.ident)});" for w in plan.weights)
    names = ", ".join(C.symbol(plan.name, w.ident) for w in plan.weights)
    # GCC 12 compiles `acc update device(W)` of a file-scope `acc declare` array W into an update
    # of nothing (the device kept zeros); an explicit array section is honoured.
    sections = ", ".join(f"{C.symbol(plan.name, w.ident)}[0:{w.size}]" for w in plan.weights)
    count = len(plan.weights)
    return f"""
static int {n}_ready;

static const struct {{
    const char *name;
    unsigned long length;
    {t} *data;
    unsigned long size;
}} {n}_tensors[{count}] = {{
{table}
}};

static int {n}_read_u32(FILE *file, unsigned long *value)
{{
    unsigned int word;
    if (fread(&word, sizeof word, 1, file) != 1)
        return 0;
    *value = word;
    return 1;
}}

/* CRC-32C (reflected polynomial 0x{abi.RWT_CRC_POLY:08X}), table-driven, of the file's first `end`
   bytes, read again in blocks; leaves the file positioned after the stored checksum. */
static int {n}_checksum(FILE *file, long end, unsigned long *crc)
{{
    unsigned char block[{abi.RWT_CRC_BLOCK}];
    unsigned long table[256], c, k, j, m;
    long left = end;

    for (k = 0; k < 256; ++k) {{
        c = k;
        for (j = 0; j < 8; ++j)
            c = c & 1ul ? (c >> 1) ^ 0x{abi.RWT_CRC_POLY:08X}ul : c >> 1;
        table[k] = c;
    }}
    if (fseek(file, 0L, SEEK_SET) != 0)
        return 0;
    c = 0x{abi.RWT_CRC_INIT:08X}ul;
    while (left > 0) {{
        m = left < (long)sizeof block ? (unsigned long)left : sizeof block;
        if (fread(block, 1, m, file) != m)
            return 0;
        for (k = 0; k < m; ++k)
            c = table[(c ^ block[k]) & 0xfful] ^ (c >> 8);
        left -= (long)m;
    }}
    *crc = c ^ 0x{abi.RWT_CRC_INIT:08X}ul;
    return fseek(file, end + 4L, SEEK_SET) == 0;
}}

static int {n}_read(FILE *file)
{{
    unsigned char bytes[{max(abi.RWT_HASH_LEN, abi.RWT_MAX_NAME, len(abi.RWT_MAGIC))}];
    unsigned long value, count, length, rank, total, crc, t, k, r;
    long end;
    int seen[{count}] = {{0}};

{_checks(plan)}
    return ROSENNA_STATUS_OK;
}}

#ifdef ROSENNA_NATIVE_KERNEL
/* In {n}_kernel.cu: copies the weights to the native kernel's device storage. */
int {n}_device_upload(const {t} *const *host);
#endif

/* The weights file at path, as Fortran's OPEN and INQUIRE read a path: trailing blanks are not part
   of it. A path that holds no bytes by its size (an empty file, a FIFO, a device) is not opened: a
   FIFO would block the read until a writer came, a device never end. *status: OPEN when the path
   does not open, READ when it holds no bytes. */
static FILE *{n}_open_weights(const char *path, int *status)
{{
    size_t len = strlen(path);
    char *name;
    FILE *file = NULL;

    while (len > 0 && path[len - 1] == ' ')
        len--;
    name = (char *)malloc(len + 1);
    if (name == NULL)
        return NULL;
    memcpy(name, path, len);
    name[len] = '\\0';
#if defined(__unix__) || defined(__APPLE__)
    {{
        struct stat info;

        if (stat(name, &info) == 0 && !S_ISDIR(info.st_mode) && info.st_size == 0)
            *status = ROSENNA_STATUS_READ;
        else
            file = fopen(name, "rb");
    }}
#else
    file = fopen(name, "rb");
#endif
    free(name);
    return file;
}}

int {n}_init(const char *path)
{{
    int status = ROSENNA_STATUS_OPEN;
    FILE *file = {n}_open_weights(path, &status);

    if (file != NULL) {{
        status = {n}_read(file);
        fclose(file);
    }}
    if (status != ROSENNA_STATUS_OK) {{
{clears}
    }}
{repack}#pragma omp target update to({names})
#if defined(_OPENACC)
#pragma acc update device({sections})
#endif
#ifdef ROSENNA_NATIVE_KERNEL
    if (status == ROSENNA_STATUS_OK) {{
        const {t} *host[{count}] = {{{names}}};
        status = {n}_device_upload(host);
    }}
#endif
    {n}_ready = (status == ROSENNA_STATUS_OK);
    return status;
}}
"""
