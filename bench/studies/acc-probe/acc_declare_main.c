#include <stdio.h>

#pragma acc routine seq
float readw(int i);
void init(int section);

int main(int argc, char **argv)
{
    float y[4] = {0};
    init(argc > 1);
#pragma acc parallel loop copyout(y)
    for (int i = 0; i < 4; ++i)
        y[i] = readw(i);
    printf("%s: %g %g %g %g\n", argc > 1 ? "section" : "whole", y[0], y[1], y[2], y[3]);
    (void)argv;
    return 0;
}
