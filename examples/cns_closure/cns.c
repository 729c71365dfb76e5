/* 2-D compressible Navier-Stokes with a learned subgrid viscosity, MPI + OpenMP target.
 *
 * Conserved U = (rho, rho u, rho v, E), ideal gas (gamma = 1.4), periodic unit square of NX x NY
 * cells. Finite volumes: MUSCL (minmod, on primitive variables) with the Rusanov flux for the
 * inviscid part; central viscous fluxes with mu = rho (nu0 + nu_t), no heat conduction; SSP-RK2.
 * nu_t comes from the learned closure sgs (train_closure.py) called once per cell per stage:
 * nu_t = Delta * sgs(Delta * (du/dx, du/dy, dv/dx, dv/dy)), Delta = sqrt(dx dy).
 * Initial state: a Kelvin-Helmholtz double shear layer.
 *
 * MPI: the rows (y) are split into one slab per rank; each slab has two halo rows on each side,
 * exchanged with the neighbours (periodic, so one rank exchanges with itself) before each stage.
 * Every face flux is computed from the same operands whatever the decomposition, so the result
 * does not depend on the number of ranks; only the global sums' rounding does.
 *
 * OpenMP target: each rank maps its slab once; the stages run as `omp target` loops calling
 * sgs_infer per cell; only the halo rows travel (target update) between device and host, for MPI.
 * --batch: the closure as one batch per stage instead: a loop writes every cell's inputs to gin,
 * sgs_infer_batch runs the model over them on the device pointers (use_device_ptr), a loop reads nu.
 * Built against the cuda backend's archive (`make cuda`, cns_cuda) that call is rosenna's native
 * CUDA kernel inside this OpenMP program; against the omp one it is an OpenMP target loop.
 *
 *   mpirun -np R cns [--nx NX] [--ny NY] [--steps S] [--device auto|none|K] [--dump FILE]
 *                    [--batch] [--require-device]
 * --device auto (default): device (node-local rank) % (devices on the node); none: the host;
 * K: device K on every rank. --dump writes the final rho and E (NY x NX doubles each, row-major)
 * from rank 0. Checks (exit status 1 on failure): mass, momentum and energy conserved to 1e-12
 * (relative) over the run; nothing non-finite.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "sgs.h"

#ifdef CNS_CUDA_BACKEND
/* From the CUDA runtime (its C API; declared here so this file needs no CUDA headers). */
int cudaSetDevice(int device);
#endif

#define NV 4   /* conserved variables */
#define HALO 2 /* halo rows on each side of a slab */
#define GAMMA 1.4
#define NU0 1e-4 /* molecular kinematic viscosity */

/* Row j (0 .. ny + 2 HALO - 1, interior from HALO), variable v, column i of a slab array. */
#define AT(a, j, v, i) (a)[((long)(j) * NV + (v)) * nx + (i)]

#pragma omp declare target
static inline double minmod(double a, double b)
{
    return a * b <= 0.0 ? 0.0 : (fabs(a) < fabs(b) ? a : b);
}

/* Rusanov flux of primitive states wl, wr (rho, u, v, p) through a face normal to x (dir 0) or y. */
static inline void rusanov(const double *wl, const double *wr, int dir, double *f)
{
    const double ul = dir == 0 ? wl[1] : wl[2], ur = dir == 0 ? wr[1] : wr[2];
    const double el = wl[3] / (GAMMA - 1.0) + 0.5 * wl[0] * (wl[1] * wl[1] + wl[2] * wl[2]);
    const double er = wr[3] / (GAMMA - 1.0) + 0.5 * wr[0] * (wr[1] * wr[1] + wr[2] * wr[2]);
    const double ql[NV] = {wl[0], wl[0] * wl[1], wl[0] * wl[2], el};
    const double qr[NV] = {wr[0], wr[0] * wr[1], wr[0] * wr[2], er};
    double fl[NV] = {wl[0] * ul, wl[0] * wl[1] * ul, wl[0] * wl[2] * ul, (el + wl[3]) * ul};
    double fr[NV] = {wr[0] * ur, wr[0] * wr[1] * ur, wr[0] * wr[2] * ur, (er + wr[3]) * ur};
    fl[1 + dir] += wl[3];
    fr[1 + dir] += wr[3];
    const double sl = fabs(ul) + sqrt(GAMMA * wl[3] / wl[0]), sr = fabs(ur) + sqrt(GAMMA * wr[3] / wr[0]);
    const double s = sl > sr ? sl : sr;
    for (int v = 0; v < NV; ++v)
        f[v] = 0.5 * (fl[v] + fr[v]) - 0.5 * s * (qr[v] - ql[v]);
}
/* The closure's inputs at cell (j, i): Delta times the central velocity gradients. */
static inline void sgs_inputs(const double *w, int nx, int j, int i, double delta, double dx, double dy,
                              float g[SGS_NX])
{
    const int ie = (i + 1) % nx, iw = (i + nx - 1) % nx;
    g[0] = (float)(delta * (AT(w, j, 1, ie) - AT(w, j, 1, iw)) / (2.0 * dx));
    g[1] = (float)(delta * (AT(w, j + 1, 1, i) - AT(w, j - 1, 1, i)) / (2.0 * dy));
    g[2] = (float)(delta * (AT(w, j, 2, ie) - AT(w, j, 2, iw)) / (2.0 * dx));
    g[3] = (float)(delta * (AT(w, j + 1, 2, i) - AT(w, j - 1, 2, i)) / (2.0 * dy));
}
#pragma omp end declare target

struct slab {
    int nx, ny, ny_global, j0; /* j0: global index of the first interior row */
    double dx, dy, dt;
    int rank, size, south, north, use_device;
    double *u, *u1, *w, *mu, *fx, *fy; /* conserved (state, RK stage), primitive, viscosity, face fluxes */
    float *gin, *nu;                   /* --batch: the closure's inputs [cell][SGS_NX] and outputs */
    int batch;
    long n_cells, n_fx, n_fy;
    double halo_seconds;
};

/* Kelvin-Helmholtz double shear layer on the slab's interior rows. */
static void initial_state(struct slab *s)
{
    const int nx = s->nx;
    const double pi = acos(-1.0);
    for (int j = HALO; j < s->ny + HALO; ++j) {
        const double y = (s->j0 + j - HALO + 0.5) * s->dy;
        const double band = tanh((0.25 - fabs(y - 0.5)) / 0.025);
        for (int i = 0; i < nx; ++i) {
            const double x = (i + 0.5) * s->dx;
            const double rho = 1.5 + 0.5 * band, u = 0.5 * band, p = 2.5;
            const double v = 0.01 * sin(4.0 * pi * x)
                             * (exp(-pow((y - 0.25) / 0.05, 2)) + exp(-pow((y - 0.75) / 0.05, 2)));
            AT(s->u, j, 0, i) = rho;
            AT(s->u, j, 1, i) = rho * u;
            AT(s->u, j, 2, i) = rho * v;
            AT(s->u, j, 3, i) = p / (GAMMA - 1.0) + 0.5 * rho * (u * u + v * v);
        }
    }
}

/* Halo exchange of u: interior rows HALO..2 HALO-1 go south, the last HALO interior rows north.
   On a device, only those rows travel between device and host. */
static void exchange_halos(struct slab *s, double *u)
{
    const double t0 = MPI_Wtime();
    const int nx = s->nx;
    const long row = (long)NV * nx, block = HALO * row;
    double *send_s = u + HALO * row, *send_n = u + (long)s->ny * row;
    double *recv_s = u, *recv_n = u + (long)(s->ny + HALO) * row;
    if (s->use_device) {
#pragma omp target update from(send_s[0:block], send_n[0:block])
    }
    MPI_Sendrecv(send_s, (int)block, MPI_DOUBLE, s->south, 0, recv_n, (int)block, MPI_DOUBLE, s->north, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(send_n, (int)block, MPI_DOUBLE, s->north, 1, recv_s, (int)block, MPI_DOUBLE, s->south, 1,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (s->use_device) {
#pragma omp target update to(recv_s[0:block], recv_n[0:block])
    }
    s->halo_seconds += MPI_Wtime() - t0;
}

/* One SSP-RK2 stage: u_out = a base + b (u + dt L(u)), with u's halos already filled. u_out may be
   base (each element is read, then written by the same thread), never u. */
static void stage(const struct slab *s, const double *u, const double *base, double *u_out, double a, double b)
{
    const int nx = s->nx, ny = s->ny, dev = s->use_device;
    const double dx = s->dx, dy = s->dy, dt = s->dt, delta = sqrt(s->dx * s->dy);
    double *w = s->w, *mu = s->mu, *fx = s->fx, *fy = s->fy;

    /* Primitive variables on every row; the viscosity on all but the outermost halo rows. */
#pragma omp target teams distribute parallel for collapse(2) if(target: dev)
    for (int j = 0; j < ny + 2 * HALO; ++j) {
        for (int i = 0; i < nx; ++i) {
            const double rho = AT(u, j, 0, i), vx = AT(u, j, 1, i) / rho, vy = AT(u, j, 2, i) / rho;
            AT(w, j, 0, i) = rho;
            AT(w, j, 1, i) = vx;
            AT(w, j, 2, i) = vy;
            AT(w, j, 3, i) = (GAMMA - 1.0) * (AT(u, j, 3, i) - 0.5 * rho * (vx * vx + vy * vy));
        }
    }
    if (s->batch) {
        /* Rows 1 .. ny + 2 HALO - 2 as one batch of cells (row-major, so cell c is j * nx + i). */
        float *gin = s->gin + (long)nx * SGS_NX, *nu = s->nu + nx;
        const int cells = (ny + 2 * HALO - 2) * nx;
#pragma omp target teams distribute parallel for collapse(2) if(target: dev)
        for (int j = 1; j < ny + 2 * HALO - 1; ++j)
            for (int i = 0; i < nx; ++i)
                sgs_inputs(w, nx, j, i, delta, dx, dy, gin + ((long)(j - 1) * nx + i) * SGS_NX);
        int status;
#pragma omp target data if(dev) use_device_ptr(gin, nu)
        status = sgs_infer_batch(cells, gin, nu, NULL);
        if (status != 0) {
            fprintf(stderr, "cns: rank %d: sgs_infer_batch returned %d\n", s->rank, status);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
#pragma omp target teams distribute parallel for collapse(2) if(target: dev)
        for (int j = 1; j < ny + 2 * HALO - 1; ++j)
            for (int i = 0; i < nx; ++i)
                mu[(long)j * nx + i] = AT(w, j, 0, i) * (NU0 + delta * (double)nu[(long)(j - 1) * nx + i]);
    } else {
#pragma omp target teams distribute parallel for collapse(2) if(target: dev)
        for (int j = 1; j < ny + 2 * HALO - 1; ++j) {
            for (int i = 0; i < nx; ++i) {
                float g[SGS_NX], nu_over_delta[SGS_NY];
                sgs_inputs(w, nx, j, i, delta, dx, dy, g);
                sgs_infer(g, nu_over_delta);
                mu[(long)j * nx + i] = AT(w, j, 0, i) * (NU0 + delta * (double)nu_over_delta[0]);
            }
        }
    }

    /* x faces: face i lies between cells i-1 and i of an interior row. */
#pragma omp target teams distribute parallel for collapse(2) if(target: dev)
    for (int j = HALO; j < ny + HALO; ++j) {
        for (int i = 0; i < nx; ++i) {
            const int im2 = (i + nx - 2) % nx, im1 = (i + nx - 1) % nx, ip1 = (i + 1) % nx;
            double wl[NV], wr[NV], f[NV];
            for (int v = 0; v < NV; ++v) {
                const double a2 = AT(w, j, v, im2), a1 = AT(w, j, v, im1), b1 = AT(w, j, v, i), b2 = AT(w, j, v, ip1);
                wl[v] = a1 + 0.5 * minmod(a1 - a2, b1 - a1);
                wr[v] = b1 - 0.5 * minmod(b1 - a1, b2 - b1);
            }
            rusanov(wl, wr, 0, f);
            const double m = 0.5 * (mu[(long)j * nx + im1] + mu[(long)j * nx + i]);
            const double ux = (AT(w, j, 1, i) - AT(w, j, 1, im1)) / dx, vx = (AT(w, j, 2, i) - AT(w, j, 2, im1)) / dx;
            const double uy = (AT(w, j + 1, 1, im1) + AT(w, j + 1, 1, i) - AT(w, j - 1, 1, im1) - AT(w, j - 1, 1, i)) / (4.0 * dy);
            const double vy = (AT(w, j + 1, 2, im1) + AT(w, j + 1, 2, i) - AT(w, j - 1, 2, im1) - AT(w, j - 1, 2, i)) / (4.0 * dy);
            const double txx = m * (2.0 * ux - (2.0 / 3.0) * (ux + vy)), txy = m * (uy + vx);
            const double uf = 0.5 * (AT(w, j, 1, im1) + AT(w, j, 1, i)), vf = 0.5 * (AT(w, j, 2, im1) + AT(w, j, 2, i));
            const long at = ((long)(j - HALO) * NV) * nx + i;
            fx[at] = f[0];
            fx[at + nx] = f[1] - txx;
            fx[at + 2 * nx] = f[2] - txy;
            fx[at + 3 * nx] = f[3] - (uf * txx + vf * txy);
        }
    }

    /* y faces: face j lies between rows j-1 and j, for the ny + 1 faces of the interior rows. */
#pragma omp target teams distribute parallel for collapse(2) if(target: dev)
    for (int j = HALO; j < ny + HALO + 1; ++j) {
        for (int i = 0; i < nx; ++i) {
            const int ie = (i + 1) % nx, iw = (i + nx - 1) % nx;
            double wl[NV], wr[NV], f[NV];
            for (int v = 0; v < NV; ++v) {
                const double a2 = AT(w, j - 2, v, i), a1 = AT(w, j - 1, v, i), b1 = AT(w, j, v, i), b2 = AT(w, j + 1, v, i);
                wl[v] = a1 + 0.5 * minmod(a1 - a2, b1 - a1);
                wr[v] = b1 - 0.5 * minmod(b1 - a1, b2 - b1);
            }
            rusanov(wl, wr, 1, f);
            const double m = 0.5 * (mu[(long)(j - 1) * nx + i] + mu[(long)j * nx + i]);
            const double uy = (AT(w, j, 1, i) - AT(w, j - 1, 1, i)) / dy, vy = (AT(w, j, 2, i) - AT(w, j - 1, 2, i)) / dy;
            const double ux = (AT(w, j - 1, 1, ie) + AT(w, j, 1, ie) - AT(w, j - 1, 1, iw) - AT(w, j, 1, iw)) / (4.0 * dx);
            const double vx = (AT(w, j - 1, 2, ie) + AT(w, j, 2, ie) - AT(w, j - 1, 2, iw) - AT(w, j, 2, iw)) / (4.0 * dx);
            const double tyy = m * (2.0 * vy - (2.0 / 3.0) * (ux + vy)), txy = m * (uy + vx);
            const double uf = 0.5 * (AT(w, j - 1, 1, i) + AT(w, j, 1, i)), vf = 0.5 * (AT(w, j - 1, 2, i) + AT(w, j, 2, i));
            const long at = ((long)(j - HALO) * NV) * nx + i;
            fy[at] = f[0];
            fy[at + nx] = f[1] - txy;
            fy[at + 2 * nx] = f[2] - tyy;
            fy[at + 3 * nx] = f[3] - (uf * txy + vf * tyy);
        }
    }

    /* Update of the interior rows from the face fluxes. */
#pragma omp target teams distribute parallel for collapse(3) if(target: dev)
    for (int j = HALO; j < ny + HALO; ++j) {
        for (int v = 0; v < NV; ++v) {
            for (int i = 0; i < nx; ++i) {
                const long f0 = ((long)(j - HALO) * NV + v) * nx, f1 = ((long)(j - HALO + 1) * NV + v) * nx;
                const double div = (fx[f0 + (i + 1) % nx] - fx[f0 + i]) / dx + (fy[f1 + i] - fy[f0 + i]) / dy;
                AT(u_out, j, v, i) = a * AT(base, j, v, i) + b * (AT(u, j, v, i) - dt * div);
            }
        }
    }
}

/* Global sums of the conserved variables over the interior (host copy of s->u). Compensated
   (Neumaier) summation: a plain running sum of a million cells rounds by ~1e-12 of the total, as
   much as the conservation tolerance, and would measure the diagnostic instead of the solver. */
static void totals(const struct slab *s, double out[NV])
{
    const int nx = s->nx;
    double local[NV] = {0.0, 0.0, 0.0, 0.0}, carry[NV] = {0.0, 0.0, 0.0, 0.0};
    for (int j = HALO; j < s->ny + HALO; ++j)
        for (int v = 0; v < NV; ++v)
            for (int i = 0; i < nx; ++i) {
                const double x = AT(s->u, j, v, i), t = local[v] + x;
                carry[v] += fabs(local[v]) >= fabs(x) ? (local[v] - t) + x : (x - t) + local[v];
                local[v] = t;
            }
    for (int v = 0; v < NV; ++v)
        local[v] += carry[v];
    MPI_Allreduce(local, out, NV, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

static int usage(int rank)
{
    if (rank == 0)
        fprintf(stderr, "usage: cns [--nx NX] [--ny NY] [--steps S] [--device auto|none|K] [--dump FILE] "
                        "[--batch] [--require-device]\n");
    return 2;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    struct slab s;
    memset(&s, 0, sizeof s);
    MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &s.size);

    int nx = 128, ny_global = 128, steps = 100, require_device = 0;
    const char *device = "auto", *dump = NULL;
    for (int a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "--nx") && a + 1 < argc)
            nx = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--ny") && a + 1 < argc)
            ny_global = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--steps") && a + 1 < argc)
            steps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--device") && a + 1 < argc)
            device = argv[++a];
        else if (!strcmp(argv[a], "--dump") && a + 1 < argc)
            dump = argv[++a];
        else if (!strcmp(argv[a], "--require-device"))
            require_device = 1;
        else if (!strcmp(argv[a], "--batch"))
            s.batch = 1;
        else {
            MPI_Finalize();
            return usage(s.rank);
        }
    }
    if (nx < 4 || steps < 1 || ny_global < HALO * s.size) {
        if (s.rank == 0)
            fprintf(stderr, "cns: need --nx >= 4, --steps >= 1 and at least %d rows per rank\n", HALO);
        MPI_Finalize();
        return 2;
    }

    /* The GPU of this rank: node-local rank modulo the node's devices, unless told otherwise. */
    MPI_Comm node;
    int local_rank = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    int dev;
#ifdef _OPENMP
    const int ndev = omp_get_num_devices();
    if (strcmp(device, "none") != 0 && ndev > 0) {
        dev = strcmp(device, "auto") == 0 ? local_rank % ndev : atoi(device);
        if (dev < 0 || dev >= ndev) {
            fprintf(stderr, "cns: rank %d: --device %s, but there are %d devices\n", s.rank, device, ndev);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        omp_set_default_device(dev);
#ifdef CNS_CUDA_BACKEND
        cudaSetDevice(dev); /* the native kernel runs on the CUDA runtime's current device */
#endif
        s.use_device = 1;
    } else {
        omp_set_default_device(omp_get_initial_device());
    }
#endif

    /* Slabs of rows: the first ny_global % size ranks take one row more. */
    s.nx = nx;
    s.ny_global = ny_global;
    s.ny = ny_global / s.size + (s.rank < ny_global % s.size);
    s.j0 = s.rank * (ny_global / s.size) + (s.rank < ny_global % s.size ? s.rank : ny_global % s.size);
    s.south = (s.rank + s.size - 1) % s.size;
    s.north = (s.rank + 1) % s.size;
    s.dx = 1.0 / nx;
    s.dy = 1.0 / ny_global;
    s.n_cells = (long)(s.ny + 2 * HALO) * nx;
    s.n_fx = (long)s.ny * NV * nx;
    s.n_fy = (long)(s.ny + 1) * NV * nx;
    s.u = calloc(NV * s.n_cells, sizeof(double));
    s.u1 = calloc(NV * s.n_cells, sizeof(double));
    s.w = calloc(NV * s.n_cells, sizeof(double));
    s.mu = calloc(s.n_cells, sizeof(double));
    s.fx = calloc(s.n_fx, sizeof(double));
    s.fy = calloc(s.n_fy, sizeof(double));
    s.gin = calloc((size_t)s.n_cells * SGS_NX, sizeof(float));
    s.nu = calloc((size_t)s.n_cells * SGS_NY, sizeof(float));
    if (!s.u || !s.u1 || !s.w || !s.mu || !s.fx || !s.fy || !s.gin || !s.nu) {
        fprintf(stderr, "cns: rank %d: out of memory\n", s.rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    initial_state(&s);

    /* A fixed dt from the initial state: CFL 0.3 on the fastest wave, and the viscous limit. */
    double smax = 0.0;
    for (int j = HALO; j < s.ny + HALO; ++j) {
        for (int i = 0; i < nx; ++i) {
            const double rho = AT(s.u, j, 0, i), vx = AT(s.u, j, 1, i) / rho, vy = AT(s.u, j, 2, i) / rho;
            const double p = (GAMMA - 1.0) * (AT(s.u, j, 3, i) - 0.5 * rho * (vx * vx + vy * vy));
            const double c = sqrt(GAMMA * p / rho) + fmax(fabs(vx), fabs(vy));
            smax = c > smax ? c : smax;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &smax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double h = fmin(s.dx, s.dy);
    s.dt = fmin(0.3 * h / smax, 0.2 * h * h / NU0);

    double before[NV], after[NV];
    totals(&s, before);

    int on_device = 0;
    double *u = s.u, *u1 = s.u1, *w = s.w, *mu = s.mu, *fx = s.fx, *fy = s.fy;
    float *gin = s.gin, *nu = s.nu;
    const long nc = NV * s.n_cells;
    double elapsed = 0.0;
    (void)w, (void)mu, (void)fx, (void)fy, (void)gin, (void)nu; /* used only in map clauses, which gcc's -Wunused misses */
#ifdef _OPENMP
#pragma omp target if (s.use_device) map(from: on_device)
    on_device = !omp_is_initial_device();
#endif
    int on_device_all = 0;
    MPI_Allreduce(&on_device, &on_device_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (require_device && !on_device_all) { /* before a long run on the host */
        if (s.rank == 0)
            printf("cns: --require-device, but an offload region ran on the host\nFAIL\n");
        MPI_Finalize();
        return 1;
    }
#pragma omp target data if (s.use_device) map(tofrom: u[0:nc]) \
    map(alloc: u1[0:nc], w[0:nc], mu[0:s.n_cells], fx[0:s.n_fx], fy[0:s.n_fy]) \
    map(alloc: gin[0:s.n_cells * SGS_NX], nu[0:s.n_cells * SGS_NY])
    {
        for (int step = 0; step <= steps; ++step) {
            if (step == 1) { /* step 0 is an untimed warm-up: it loads the kernels */
                MPI_Barrier(MPI_COMM_WORLD);
                elapsed = MPI_Wtime();
                s.halo_seconds = 0.0;
            }
            /* SSP-RK2: u1 = u + dt L(u); u = 1/2 u + 1/2 (u1 + dt L(u1)). */
            exchange_halos(&s, u);
            stage(&s, u, u, u1, 0.0, 1.0);
            exchange_halos(&s, u1);
            stage(&s, u1, u, u, 0.5, 0.5);
        }
        elapsed = MPI_Wtime() - elapsed;
    }
    totals(&s, after);

    double per_step[2] = {elapsed / steps, s.halo_seconds / steps}, worst[2];
    MPI_Reduce(per_step, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int finite = 1, finite_all = 0;
    for (int j = HALO; j < s.ny + HALO; ++j)
        for (int v = 0; v < NV; ++v)
            for (int i = 0; i < nx; ++i)
                finite &= isfinite(AT(s.u, j, v, i));
    MPI_Allreduce(&finite, &finite_all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);

    /* rho and E of the whole field on rank 0, in global row order, for the dump and the digest. */
    double *field = NULL;
    int *counts = NULL, *offsets = NULL;
    double *mine = malloc((size_t)2 * s.ny * nx * sizeof *mine);
    for (int j = 0; j < s.ny; ++j)
        for (int i = 0; i < nx; ++i) {
            mine[(long)j * nx + i] = AT(s.u, j + HALO, 0, i);
            mine[(long)(s.ny + j) * nx + i] = AT(s.u, j + HALO, 3, i);
        }
    if (s.rank == 0) {
        field = malloc((size_t)2 * ny_global * nx * sizeof *field);
        counts = malloc(s.size * sizeof *counts);
        offsets = malloc(s.size * sizeof *offsets);
    }
    int mine_count = 2 * s.ny * nx;
    MPI_Gather(&mine_count, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (s.rank == 0)
        for (int r = 0, off = 0; r < s.size; off += counts[r], ++r)
            offsets[r] = off;
    MPI_Gatherv(mine, mine_count, MPI_DOUBLE, field, counts, offsets, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    int ok = 1;
    if (s.rank == 0) {
        /* Rank r's block is its rho rows then its E rows: reorder into rho[NY][NX], E[NY][NX]. */
        double *ordered = malloc((size_t)2 * ny_global * nx * sizeof *ordered);
        for (int r = 0, row0 = 0; r < s.size; ++r) {
            const int rows = counts[r] / (2 * nx);
            memcpy(ordered + (long)row0 * nx, field + offsets[r], (size_t)rows * nx * sizeof(double));
            memcpy(ordered + (long)(ny_global + row0) * nx, field + offsets[r] + (long)rows * nx,
                   (size_t)rows * nx * sizeof(double));
            row0 += rows;
        }
        double digest[2] = {0.0, 0.0};
        for (long c = 0; c < (long)ny_global * nx; ++c) {
            digest[0] += ordered[c] * ordered[c];
            digest[1] += ordered[(long)ny_global * nx + c] * ordered[(long)ny_global * nx + c];
        }
        if (dump) {
            FILE *f = fopen(dump, "wb");
            if (!f || fwrite(ordered, sizeof(double), (size_t)2 * ny_global * nx, f) != (size_t)2 * ny_global * nx) {
                fprintf(stderr, "cns: cannot write %s\n", dump);
                ok = 0;
            }
            if (f)
                fclose(f);
        }
        free(ordered);

        const char *names[NV] = {"mass", "x-momentum", "y-momentum", "energy"};
        const double drift_tol = 1e-12;
        printf("cns (C, OpenMP target%s): %d x %d cells on %d ranks, %d timed steps (+1 warm-up) of dt=%.3e; "
               "offload regions ran on %s\n",
               s.batch ? ", closure through sgs_infer_batch" : "", nx, ny_global, s.size, steps, s.dt,
               on_device_all ? "the device (every rank)" : "the host");
        for (int v = 0; v < NV; ++v) {
            /* Momentum starts near zero: measure its drift against the mass instead. */
            const double scale = v == 1 || v == 2 ? fabs(before[0]) : fabs(before[v]);
            const double drift = fabs(after[v] - before[v]) / scale;
            printf("%-10s before %.15e after %.15e relative drift %.2e\n", names[v], before[v], after[v], drift);
            if (v == 0 || v == 3)
                ok &= drift <= drift_tol;
        }
        printf("conservation tolerance (mass, energy): %.0e relative\n", drift_tol);
        printf("digest: sum(rho^2) %.17e sum(E^2) %.17e\n", digest[0], digest[1]);
        printf("time per step: %.3f ms (halo exchange %.3f ms, %.1f %%), %.1f ns per cell\n", 1e3 * worst[0],
               1e3 * worst[1], 100.0 * worst[1] / worst[0], 1e9 * worst[0] / ((double)nx * ny_global));
        if (!finite_all)
            printf("non-finite values in the final state\n");
        ok &= finite_all;
        printf("%s\n", ok ? "PASS" : "FAIL");
        free(field);
        free(counts);
        free(offsets);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(mine);
    free(s.u);
    free(s.u1);
    free(s.w);
    free(s.mu);
    free(s.fx);
    free(s.fy);
    free(s.gin);
    free(s.nu);
    MPI_Finalize();
    return ok ? 0 : 1;
}
