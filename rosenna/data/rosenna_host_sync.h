/* The barrier of the host batch and whole-field paths. OpenMP's own barriers spin while they wait
   (libgomp: hundreds of thousands of polls, milliseconds, unless OMP_WAIT_POLICY=passive), so on a
   machine where the solver or anything else holds a core, a thread that arrives first keeps
   spinning on the core its descheduled partner needs. rosenna_team_wait polls the count of
   arrivals `spins` times, then sleeps on a condition variable until the last thread arrives (a
   yield would not do: a yielding thread stays runnable and takes its share of a loaded core).
   rosenna_team_done is the wait before the region's end. One rosenna_team per call, shared by
   the threads of its parallel region (ROSENNA_TEAM_INIT before the region, rosenna_team_end
   after it); `passed` counts the barriers the calling thread
   has passed (private, zero at the region's start). The counter's seq_cst atomics are OpenMP
   flushes, so every write before the barrier is seen after it. Without OpenMP there is one
   thread and nothing to wait for. */
#if !defined(__CUDACC__) && !defined(__HIPCC__)
#if defined(_OPENMP)
#include <pthread.h>

typedef struct {
    int arrived;
    pthread_mutex_t lock;
    pthread_cond_t all_in;
} rosenna_team;

#define ROSENNA_TEAM_INIT {0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER}

static inline void rosenna_team_wait(rosenna_team *team, int *passed, int spins)
{
    const int target = omp_get_num_threads() * ++*passed;
    int now, polls;

#pragma omp atomic capture seq_cst
    now = ++team->arrived;
    if (now == target) { /* the last: wake the sleepers (the lock orders this after their test) */
        pthread_mutex_lock(&team->lock);
        pthread_cond_broadcast(&team->all_in);
        pthread_mutex_unlock(&team->lock);
        return;
    }
    for (polls = 0; now < target && polls < spins; ++polls) {
#pragma omp atomic read seq_cst
        now = team->arrived;
    }
    if (now >= target)
        return;
    pthread_mutex_lock(&team->lock);
    for (;;) {
#pragma omp atomic read seq_cst
        now = team->arrived;
        if (now >= target)
            break;
        pthread_cond_wait(&team->all_in, &team->lock);
    }
    pthread_mutex_unlock(&team->lock);
}

/* The wait before the region's end: only the master (thread 0) waits for the others; they
   arrive and go on to the region's join, where the master then finds them, so it never spins
   there (OpenMP's join spins) for a partner that slept here and was not yet rescheduled. */
static inline void rosenna_team_done(rosenna_team *team, int *passed, int spins)
{
    int now;

    if (omp_get_thread_num() == 0) {
        rosenna_team_wait(team, passed, spins);
        return;
    }
#pragma omp atomic capture seq_cst
    now = ++team->arrived;
    if (now == omp_get_num_threads() * ++*passed) {
        pthread_mutex_lock(&team->lock);
        pthread_cond_broadcast(&team->all_in);
        pthread_mutex_unlock(&team->lock);
    }
}

static inline void rosenna_team_end(rosenna_team *team)
{
    pthread_cond_destroy(&team->all_in);
    pthread_mutex_destroy(&team->lock);
}

/* The team size of a host whole-field call, chosen by the wall time calls took: every thread
   the runtime offers (omp_get_max_threads), or one. On a machine where something else holds a
   core, a team's fork, barriers and join wait for a descheduled partner (a scheduler's time
   slice, milliseconds, against a call of a fraction of one), and one thread is faster; on a free
   machine the team is. Each size is judged by the median of its last three calls (one call stalled
   by the scheduler does not flip the choice); the faster size runs, the other once every `gap`
   calls to refresh its time: `period` calls, doubled after each such trial that loses, up to `cap`
   (so on a busy machine the slow team costs about 1/cap of the calls, not 1/period), and back to
   `period` once the choice changes. The results do not depend on the team size. Concurrent
   callers share the times (atomics: a heuristic, not a lock). rosenna_pace_threads returns the
   size for this call, rosenna_pace_record takes its time. */
typedef struct {
    double times[2][3]; /* [0]: one thread, [1]: the team; seconds of the last three calls, 0: none */
    unsigned recorded[2]; /* calls timed of each size (the next slot of times) */
    unsigned calls;
    int backoff;        /* the trial gap is period * 2^backoff, at most cap */
} rosenna_pace;

#define ROSENNA_PACE_INIT {{{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}}, {0u, 0u}, 0u, 0}
#define ROSENNA_PACE_MOST_BACKOFF 30

static inline double rosenna_pace_median(const double *times)
{
    double a, b, c;

#pragma omp atomic read
    a = times[0];
#pragma omp atomic read
    b = times[1];
#pragma omp atomic read
    c = times[2];
    return a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
}

/* Whether size `size` (0: one thread, 1: the team) is the slower by the medians (0 if either is
   not timed yet). */
static inline int rosenna_pace_slower(rosenna_pace *pace, int size)
{
    const double mine = rosenna_pace_median(pace->times[size]), other = rosenna_pace_median(pace->times[!size]);

    return mine != 0.0 && other != 0.0 && (size == 0 ? mine >= other : mine > other);
}

static inline int rosenna_pace_threads(rosenna_pace *pace, int period, int cap)
{
    const int most = omp_get_max_threads();
    long long gap = period;
    double team, solo;
    unsigned calls;
    int backoff;

    if (most < 2 || period < 1 || omp_in_parallel())
        return most;
#pragma omp atomic capture
    calls = pace->calls++;
    team = rosenna_pace_median(pace->times[1]);
    solo = rosenna_pace_median(pace->times[0]);
    if (team == 0.0)
        return most;
    if (solo == 0.0)
        return 1;
#pragma omp atomic read
    backoff = pace->backoff;
    gap <<= backoff < 0 ? 0 : backoff;
    if (gap > cap)
        gap = cap > period ? cap : period;
    return (solo < team) != (calls % (unsigned long long)gap == 0) ? 1 : most;
}

static inline void rosenna_pace_record(rosenna_pace *pace, int threads, double seconds)
{
    const int size = threads == 1 && omp_get_max_threads() > 1 ? 0 : 1;
    const int trial = rosenna_pace_slower(pace, size), winner_before = rosenna_pace_slower(pace, !size);
    unsigned slot, k;
    int backoff;

#pragma omp atomic capture
    slot = pace->recorded[size]++;
    /* the first two calls of a size fill all three slots (the team's first call starts OpenMP's
       thread pool: it counts only until the second); 0 stands for "not timed" */
    for (k = 0; k < 3; ++k)
        if (slot < 2 || k == slot % 3) {
#pragma omp atomic write
            pace->times[size][k] = seconds > 1e-9 ? seconds : 1e-9;
        }
    if (trial || winner_before) {
        /* a trial that lost backs off; a change of the choice starts the trials afresh */
#pragma omp atomic read
        backoff = pace->backoff;
        backoff = rosenna_pace_slower(pace, size) == trial ? (trial && backoff < ROSENNA_PACE_MOST_BACKOFF) + backoff : 0;
#pragma omp atomic write
        pace->backoff = backoff;
    }
}

static inline double rosenna_pace_clock(void)
{
    return omp_get_wtime();
}
#else
typedef struct {
    int arrived;
} rosenna_team;

#define ROSENNA_TEAM_INIT {0}

static inline void rosenna_team_wait(rosenna_team *team, int *passed, int spins)
{
    (void)team;
    (void)passed;
    (void)spins;
}

static inline void rosenna_team_done(rosenna_team *team, int *passed, int spins)
{
    rosenna_team_wait(team, passed, spins);
}

static inline void rosenna_team_end(rosenna_team *team)
{
    (void)team;
}

typedef struct {
    int calls;
} rosenna_pace;

#define ROSENNA_PACE_INIT {0}

static inline int rosenna_pace_threads(rosenna_pace *pace, int period, int cap)
{
    (void)pace;
    (void)period;
    (void)cap;
    return 1;
}

static inline void rosenna_pace_record(rosenna_pace *pace, int threads, double seconds)
{
    (void)pace;
    (void)threads;
    (void)seconds;
}

static inline double rosenna_pace_clock(void)
{
    return 0.0;
}
#endif
#endif
