/* Probe for the GCC 12 OpenACC file-loaded failure: `acc update device(gw)` of a file-scope
   `acc declare create` array compiles to GOACC_update with no map entries (see
   -fdump-tree-optimized), so the device keeps zeros; `acc update device(gw[0:4])` is honoured.
   Built into a static library, as the generated <name>.c is. */
float gw[4];
#pragma acc declare create(gw)

#pragma acc routine seq
float readw(int i)
{
    return gw[i];
}

void init(int section)
{
    for (int i = 0; i < 4; ++i)
        gw[i] = (float)(i + 1);
    if (section) {
#pragma acc update device(gw[0:4])
    } else {
#pragma acc update device(gw)
    }
}
