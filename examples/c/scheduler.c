/* A cluster scheduler's stub: "this job just got G GPUs: which layout should it start with?"
 *
 * Loads the pack file of a job (written by `trainscape pack SCENARIO --out job.tsp
 * --candidates`), then asks libtrainscape for the best feasible layout of each allocation and
 * prints it, one line per allocation (the `cfg=` field is the packed config column in
 * TS_CFG_* order, for tools).
 *
 *   trainscape pack examples/llama3-405b-2bldg.toml --out job.tsp --candidates
 *   cc scheduler.c -o scheduler $(pkg-config --cflags --libs trainscape)
 *   ./scheduler job.tsp 4096 8192 16384
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
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

static const char *load_error(int code)
{
    switch (code) {
    case TS_ERR_IO: return "cannot read the file";
    case TS_ERR_FORMAT: return "not a trainscape pack file";
    case TS_ERR_ABI: return "written for another ABI version: re-run trainscape pack";
    case TS_ERR_LAYOUT: return "written for another block layout: re-run trainscape pack";
    case TS_ERR_NOMEM: return "out of memory";
    default: return "a block field is out of range";
    }
}

int main(int argc, char **argv)
{
    static const int64_t default_allocations[] = {4096, 8192, 16384};
    ts_blocks *blocks = NULL;
    int code, n_alloc = argc > 2 ? argc - 2 : 3;

    if (argc < 2) {
        fprintf(stderr, "usage: %s PACKFILE [GPUS ...]\n", argv[0]);
        return 2;
    }
    if (ts_abi_version() != TS_ABI_VERSION) {
        fprintf(stderr, "libtrainscape has ABI %d, this program was built for %d\n",
                ts_abi_version(), TS_ABI_VERSION);
        return 1;
    }
    code = ts_blocks_load(argv[1], &blocks);
    if (code != 0) {
        fprintf(stderr, "%s: %s (code %d)\n", argv[1], load_error(code), code);
        return 1;
    }
    printf("loaded %s: packed for %lld GPUs, ABI %d, layout hash 0x%08x\n", argv[1],
           (long long)ts_blocks_gpus(blocks), ts_abi_version(), (unsigned)ts_layout_hash());
    for (int a = 0; a < n_alloc; a++) {
        int64_t gpus = argc > 2 ? strtoll(argv[a + 2], NULL, 10) : default_allocations[a];
        int32_t cfg[TS_N_CFG];
        double out[TS_N_OUT], t0 = now_ms(), ms;
        int64_t stats[TS_BEST_N_STATS];
        code = ts_blocks_best(blocks, gpus, TS_OUT_STEP_TIME_S, cfg, out, stats);
        ms = now_ms() - t0;
        if (code == TS_BEST_NONE) {
            printf("gpus=%lld none: no feasible layout among %lld candidates\n",
                   (long long)gpus, (long long)stats[TS_BEST_ST_CANDIDATES]);
            continue;
        }
        if (code != 0) {
            printf("gpus=%lld error %d\n", (long long)gpus, code);
            continue;
        }
        printf("gpus=%lld best: tp=%d cp=%d pp=%d dp=%d ep=%d mbs=%d vpp=%d schedule=%s "
               "recompute=%s zero=%d step_time_s=%.6f mfu=%.4f memory_gib=%.2f "
               "candidates=%lld query_ms=%.3f cfg=",
               (long long)gpus, cfg[TS_CFG_TP], cfg[TS_CFG_CP], cfg[TS_CFG_PP], cfg[TS_CFG_DP],
               cfg[TS_CFG_EP], cfg[TS_CFG_MBS], cfg[TS_CFG_VPP],
               ts_schedule_name(cfg[TS_CFG_SCHEDULE]), ts_recompute_name(cfg[TS_CFG_RECOMPUTE]),
               cfg[TS_CFG_ZERO], out[TS_OUT_STEP_TIME_S], out[TS_OUT_MFU],
               out[TS_OUT_MEMORY_GIB], (long long)stats[TS_BEST_ST_CANDIDATES], ms);
        for (int f = 0; f < TS_N_CFG; f++)
            printf(f ? ",%d" : "%d", cfg[f]);
        printf("\n");
    }
    ts_blocks_free(blocks);
    return 0;
}
