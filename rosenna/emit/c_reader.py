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
        short = f"{n}_failed(src) ? ROSENNA_STATUS_OPEN : ROSENNA_STATUS_READ" if i == 0 else read_status
        if check.per_tensor and not in_loop:
            out.append("    for (t = 0; t < count; ++t) {")
            in_loop = True
        elif not check.per_tensor and in_loop:
            out.append("    }")
            in_loop = False
        pad = "        " if in_loop else "    "
        out.append(f"{pad}/* {check.field}: {check.doc} */")
        if check.kind == "bytes":
            out += [f"{pad}if ({n}_get(src, bytes, {check.size}) != {check.size})",
                    f"{pad}    return {short};",
                    f"{pad}if (memcmp(bytes, {_c_bytes(expected[check.expect])}, {check.size}) != 0)",
                    f"{pad}    return {status};"]
        elif check.kind in ("u32", "u32_max"):
            var = {"count": "count", "name_len": "length", "rank": "rank"}.get(check.field, "value")
            limit = expected[check.expect] if check.kind == "u32" else getattr(abi, check.expect)
            literal = f"0x{limit:08X}ul" if limit > 0xFFFF else f"{limit}ul"
            test = f"{var} != {literal}" if check.kind == "u32" else f"{var} > {literal}"
            out += [f"{pad}if (!{n}_read_u32(src, &{var}))", f"{pad}    return {short};",
                    f"{pad}if ({test})", f"{pad}    return {status};"]
        elif check.kind == "name":
            out += [f"{pad}if ({n}_get(src, bytes, length) != length)", f"{pad}    return {read_status};",
                    f"{pad}for (k = 0; k < {len(plan.weights)}ul; ++k)",
                    f"{pad}    if (length == {n}_tensors[k].length && memcmp(bytes, {n}_tensors[k].name, length) == 0)",
                    f"{pad}        break;",
                    f"{pad}if (k == {len(plan.weights)}ul)", f"{pad}    return {status};"]
        elif check.kind == "dims":
            out += [f"{pad}total = 1;",
                    f"{pad}for (r = 0; r < rank; ++r) {{",
                    f"{pad}    if (!{n}_read_u32(src, &value))",
                    f"{pad}        return {read_status};",
                    f"{pad}    if (value > {n}_tensors[k].size || (value != 0 && total > {n}_tensors[k].size / value))",
                    f"{pad}        return {status};",
                    f"{pad}    total *= value;",
                    f"{pad}}}",
                    f"{pad}if (seen[k] || total != {n}_tensors[k].size)",
                    f"{pad}    return {status};"]
        elif check.kind == "data":
            out += [f"{pad}if ({n}_get(src, dest[k], total * sizeof **dest) != total * sizeof **dest)",
                    f"{pad}    return {status};",
                    f"{pad}seen[k] = 1;"]
        elif check.kind == "checksum":
            out += [f"{pad}end = {n}_tell(src);",
                    f"{pad}if (end < 0 || !{n}_read_u32(src, &value))",
                    f"{pad}    return {read_status};",
                    f"{pad}if (!{n}_checksum(src, end, &crc))",
                    f"{pad}    return {read_status};",
                    f"{pad}if (crc != value)",
                    f"{pad}    return {status};"]
        elif check.kind == "end":
            out += [f"{pad}if ({n}_get(src, bytes, 1) != 0)", f"{pad}    return {status};"]
        else:
            raise ValueError(f"internal: no C rendering of .rwt check kind {check.kind!r}")
    return "\n".join(out)


def reload_prototypes(n):
    """The header's declarations of ``<name>_reload`` and ``<name>_set_weights``."""
    return f"""
/* Replace the weights between calls by those of another .rwt file of this model (same plan hash),
   checked as {n}_init checks; on any error the weights in force stay and the status says why.
   Device copies are updated in place (the native kernel's after the device's queued work ends);
   call it where no batch runs, e.g. between time steps. Returns a ROSENNA_STATUS_* code. */
int {n}_reload(const char *path);

/* The same from a .rwt image of `bytes` bytes in host memory (e.g. exported in memory). */
int {n}_set_weights(const void *buf, size_t bytes);
"""


def reader(plan, repack=""):
    """The .rwt reader, generated from abi.RWT_CHECKS (the Fortran reader is generated from the
    same table): every check in its documented order, and the CRC-32C over the file, read from a
    file (``<name>_init``, ``<name>_reload``) or from memory (``<name>_set_weights``).

    ``<name>_init`` reads into the weights themselves (zeroed on failure). ``<name>_reload`` and
    ``<name>_set_weights`` read into a second copy (static storage, untouched until the first
    swap) and copy it over the weights only when every check passed, so on any error the weights
    in force stay. Then both update the device copies in place: OpenMP ``target update``, OpenACC
    ``update device``, or for the native kernel ``<name>_device_reload``, which waits for the
    device's queued work before copying. ``repack``: lines that fill a second copy of the weights
    before the device updates (rosenna.emit.offload_mlp)."""
    n, t = plan.name, plan.ctype
    table = "\n".join(f'    {{"{w.ident}", {len(w.ident)}ul, {C.symbol(plan.name, w.ident)}, {w.size}ul}},'
                      for w in plan.weights)
    clears = "\n".join(f"        memset({C.symbol(plan.name, w.ident)}, 0, sizeof {C.symbol(plan.name, w.ident)});" for w in plan.weights)
    names = ", ".join(C.symbol(plan.name, w.ident) for w in plan.weights)
    # GCC 12 compiles `acc update device(W)` of a file-scope `acc declare` array W into an update
    # of nothing (the device kept zeros); an explicit array section is honoured.
    sections = ", ".join(f"{C.symbol(plan.name, w.ident)}[0:{w.size}]" for w in plan.weights)
    count = len(plan.weights)
    nexts = "\n".join(f"static {t} {n}_next{k}[{w.size}];" for k, w in enumerate(plan.weights))
    next_list = ", ".join(f"{n}_next{k}" for k in range(count))
    commits = "\n".join(f"    memcpy({C.symbol(plan.name, w.ident)}, {n}_next{k}, sizeof {n}_next{k});"
                        for k, w in enumerate(plan.weights))
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

/* Where a weights image is read from: a file, or {n}_set_weights's buffer. */
struct {n}_source {{
    FILE *file;
    const unsigned char *data;
    unsigned long size, pos;
}};

/* Up to `count` bytes into `out`; returns how many. */
static unsigned long {n}_get(struct {n}_source *src, void *out, unsigned long count)
{{
    if (src->file != NULL)
        return (unsigned long)fread(out, 1, count, src->file);
    if (count > src->size - src->pos)
        count = src->size - src->pos;
    if (count > 0)
        memcpy(out, src->data + src->pos, count);
    src->pos += count;
    return count;
}}

static long {n}_tell(struct {n}_source *src)
{{
    return src->file != NULL ? ftell(src->file) : (long)src->pos;
}}

/* Whether the source itself failed (a read error, not the end of the data): a path that is no
   readable file. */
static int {n}_failed(struct {n}_source *src)
{{
    return src->file != NULL && ferror(src->file);
}}

static int {n}_read_u32(struct {n}_source *src, unsigned long *value)
{{
    unsigned int word;
    if ({n}_get(src, &word, sizeof word) != sizeof word)
        return 0;
    *value = word;
    return 1;
}}

/* CRC-32C (reflected polynomial 0x{abi.RWT_CRC_POLY:08X}), table-driven, of the source's first `end`
   bytes, read again in blocks; leaves the source positioned after the stored checksum. */
static int {n}_checksum(struct {n}_source *src, long end, unsigned long *crc)
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
    if (src->file != NULL ? fseek(src->file, 0L, SEEK_SET) != 0 : 0)
        return 0;
    src->pos = 0;
    c = 0x{abi.RWT_CRC_INIT:08X}ul;
    while (left > 0) {{
        m = left < (long)sizeof block ? (unsigned long)left : sizeof block;
        if ({n}_get(src, block, m) != m)
            return 0;
        for (k = 0; k < m; ++k)
            c = table[(c ^ block[k]) & 0xfful] ^ (c >> 8);
        left -= (long)m;
    }}
    *crc = c ^ 0x{abi.RWT_CRC_INIT:08X}ul;
    if (src->file != NULL)
        return fseek(src->file, end + 4L, SEEK_SET) == 0;
    src->pos = (unsigned long)end + 4ul;
    return src->pos <= src->size;
}}

/* Reads the weights image into dest[k] (the k-th tensor of {n}_tensors); returns the status of
   the first check that fails. dest may be partly written on failure. */
static int {n}_read(struct {n}_source *src, {t} *const *dest)
{{
    unsigned char bytes[{max(abi.RWT_HASH_LEN, abi.RWT_MAX_NAME, len(abi.RWT_MAGIC))}];
    unsigned long value, count, length, rank, total, crc, t, k, r;
    long end;
    int seen[{count}] = {{0}};

{_checks(plan)}
    return ROSENNA_STATUS_OK;
}}

#ifdef ROSENNA_NATIVE_KERNEL
/* In {n}_kernel.cu: copy the weights to the native kernel's device storage; _reload waits for
   the device's queued work first. */
int {n}_device_upload(const {t} *const *host);
int {n}_device_reload(const {t} *const *host);
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

/* The weights (just read, or cleared) to the offload device's copies, in place. */
static void {n}_to_device(void)
{{
{repack}#pragma omp target update to({names})
#if defined(_OPENACC)
#pragma acc wait
#pragma acc update device({sections})
#endif
}}

int {n}_init(const char *path)
{{
    {t} *const live[{count}] = {{{names}}};
    struct {n}_source src = {{NULL, NULL, 0ul, 0ul}};
    int status = ROSENNA_STATUS_OPEN;

    src.file = {n}_open_weights(path, &status);
    if (src.file != NULL) {{
        status = {n}_read(&src, live);
        fclose(src.file);
    }}
    if (status != ROSENNA_STATUS_OK) {{
{clears}
    }}
    {n}_to_device();
#ifdef ROSENNA_NATIVE_KERNEL
    if (status == ROSENNA_STATUS_OK) {{
        const {t} *host[{count}] = {{{names}}};
        status = {n}_device_upload(host);
    }}
#endif
    {n}_ready = (status == ROSENNA_STATUS_OK);
    return status;
}}

/* The weights {n}_reload and {n}_set_weights read before they replace those in force. */
{nexts}

/* Reads a weights image into the second copy; only if every check passes, makes it the weights
   in force (host and device). */
static int {n}_swap(struct {n}_source *src)
{{
    {t} *const next[{count}] = {{{next_list}}};
    int status = {n}_read(src, next);

    if (status != ROSENNA_STATUS_OK)
        return status;
{commits}
    {n}_to_device();
#ifdef ROSENNA_NATIVE_KERNEL
    {{
        const {t} *host[{count}] = {{{names}}};
        status = {n}_device_reload(host);
    }}
#endif
    {n}_ready = (status == ROSENNA_STATUS_OK);
    return status;
}}

int {n}_reload(const char *path)
{{
    struct {n}_source src = {{NULL, NULL, 0ul, 0ul}};
    int status = ROSENNA_STATUS_OPEN;

    src.file = {n}_open_weights(path, &status);
    if (src.file == NULL)
        return status;
    status = {n}_swap(&src);
    fclose(src.file);
    return status;
}}

int {n}_set_weights(const void *buf, size_t bytes)
{{
    struct {n}_source src = {{NULL, NULL, 0ul, 0ul}};

    if (buf == NULL)
        return ROSENNA_STATUS_READ;
    src.data = (const unsigned char *)buf;
    src.size = (unsigned long)bytes;
    return {n}_swap(&src);
}}
"""
