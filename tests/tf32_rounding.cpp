/* rosenna_host_tf32.h against the operation on the bit pattern it stands for, over every STRIDE-th
   float (tests/test_copies.py; with STRIDE 1 all 4,278,190,080 finite floats, about a minute):
   g++ -O2 -std=c++14 [-DROSENNA_TF32_ARITHMETIC] -Irosenna/data tests/tf32_rounding.cpp -o tf32 && ./tf32 1
   The static_asserts hold that a constant expression can use both functions. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rosenna_host_tf32.h"
#include "rosenna_host_compact.h"

static_assert(rosenna_host_tf32(1.00048828125f) == 1.0009765625f, "a tie rounds away from zero");
static_assert(rosenna_host_tf32(-1.00048828125f) == -1.0009765625f, "a tie rounds away from zero");
static_assert(rosenna_host_tf32_round(1.0009765f, 0.0) == 1.0f, "truncation");
static_assert(rosenna_host_compact(0.1f) == 0.100000009f, "big + small, 22 significant bits");

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

int main(int argc, char **argv)
{
    const uint64_t stride = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    uint64_t checked = 0, differ = 0;
    for (uint64_t v = 0; v < (1ull << 32); v += stride) {
        const uint32_t u = (uint32_t)v;
        if ((u & 0x7f800000u) == 0x7f800000u)
            continue;  /* infinities and NaN: returned as they are */
        const float f = from_bits(u);
        const uint32_t near = to_bits(rosenna_host_tf32(f)), cut = to_bits(rosenna_host_tf32_round(f, 0.0));
        ++checked;
        if (near != ((u + 0x1000u) & 0xffffe000u) || cut != (u & 0xffffe000u)) {
            if (differ++ < 5)
                printf("%08x: %08x %08x\n", (unsigned)u, (unsigned)near, (unsigned)cut);
        }
    }
    printf("%llu checked, %llu differ\n", (unsigned long long)checked, (unsigned long long)differ);
    return differ != 0;
}
