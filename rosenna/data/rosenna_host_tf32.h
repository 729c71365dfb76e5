#include <string.h>

/* TF32 rounding on the host: to nearest, ties away (cvt.rna), on the bit pattern. */
static float rosenna_host_tf32(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&f, &u, sizeof f);
    return f;
}
