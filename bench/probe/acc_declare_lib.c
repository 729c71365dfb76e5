/* Probe for the GCC 12 OpenACC file-loaded failure (README Limits): is the device copy that
   `acc update device` fills the one an `acc routine` reads? Built into a static library, as the
   generated <name>.c is. refresh() copies the mapped buffer into the global on the device: if the
   two copies differ, "plain" prints zeros and "refresh" prints 1 2 3 4. */
float gw[4];
#pragma acc declare create(gw)

#pragma acc routine seq
float readw(int i)
{
    return gw[i];
}

void init(void)
{
    for (int i = 0; i < 4; ++i)
        gw[i] = (float)(i + 1);
#pragma acc update device(gw)
}

void refresh(void)
{
    const float *src = gw;
#pragma acc parallel loop present(src[0:4])
    for (int i = 0; i < 4; ++i)
        gw[i] = src[i];
}
