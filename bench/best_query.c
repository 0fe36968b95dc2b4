/* Latency of the scheduler query in C (ts_blocks_best over a pack file), one thread.
 *
 *   trainscape pack examples/llama3-405b-2bldg.toml --out job.tsp --candidates \
 *       --set 'space.cp=[1,2,4]' --set 'space.mbs=[1,2,4]' ...   (bench/latency.py BEST_SPACE)
 *   cc -O2 bench/best_query.c -o best_query $(pkg-config --cflags --libs trainscape)
 *   ./best_query job.tsp 4096 8192 16384
 *
 * Prints JSON: per allocation the candidates, the first query of the process (cold: code and
 * data not yet in cache / page tables) and p50 / p99 of the next `repeat` queries (warm). */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <trainscape_embed.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    enum { REPEAT = 1000 };
    static double t[REPEAT];
    ts_blocks *b;
    int32_t cfg[TS_N_CFG];
    double out[TS_N_OUT];
    int64_t st[TS_BEST_N_STATS];
    if (argc < 3 || ts_blocks_load(argv[1], &b) != 0) {
        fprintf(stderr, "usage: %s PACKFILE GPUS...\n", argv[0]);
        return 2;
    }
    printf("{\"allocations\": [");
    for (int a = 2; a < argc; a++) {
        int64_t gpus = strtoll(argv[a], NULL, 10);
        double t0 = now_ms(), cold;
        if (ts_blocks_best(b, gpus, TS_OUT_STEP_TIME_S, cfg, out, st) != 0)
            return 1;
        cold = now_ms() - t0;
        for (int i = 0; i < REPEAT; i++) {
            t0 = now_ms();
            ts_blocks_best(b, gpus, TS_OUT_STEP_TIME_S, cfg, out, st);
            t[i] = now_ms() - t0;
        }
        qsort(t, REPEAT, sizeof *t, cmp);
        printf("%s{\"gpus\": %lld, \"candidates\": %lld, \"costed\": %lld, \"first_ms\": %.4f, "
               "\"p50_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f, \"step_time_s\": %.6f}",
               a > 2 ? ", " : "", (long long)gpus, (long long)st[TS_BEST_ST_CANDIDATES],
               (long long)st[TS_BEST_ST_COSTED], cold, t[REPEAT / 2], t[REPEAT * 99 / 100],
               t[REPEAT - 1], out[TS_OUT_STEP_TIME_S]);
    }
    printf("]}\n");
    ts_blocks_free(b);
    return 0;
}
