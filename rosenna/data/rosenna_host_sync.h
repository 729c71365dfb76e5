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
#endif
#endif
