/* trainscape: embedding API (public C ABI): pack files and the scheduler query.
 *
 * A pack file (written by `trainscape pack SCENARIO --out FILE`, format in docs/embedding.md)
 * holds a validated scenario's system, model and job blocks and, optionally, its candidate set
 * (the "space vector" below). ts_blocks_load reads one and refuses a file written for another
 * ABI version or another block layout. ts_llm_best answers "this job got G GPUs: which layout
 * should it run?" by building every candidate for G GPUs and costing them in-kernel.
 *
 * Thread safety: every function is reentrant; a loaded ts_blocks is read-only and may be shared
 * by any number of threads. ts_llm_best allocates one temporary table (the valid core rows) and
 * frees it before returning; it runs on the calling thread only.
 *
 * This text is also fed to cffi's cdef (guard and #include lines stripped): plain
 * declarations, an opaque struct and integer #defines only.
 */
#ifndef TRAINSCAPE_EMBED_H
#define TRAINSCAPE_EMBED_H

#include <stdint.h>

#include "trainscape.h"

/* Error codes of this header (besides TS_ERR_ARG and the block field codes of trainscape.h). */
#define TS_ERR_SPACE (-2)     /* malformed space vector, or a pack file without candidates */
#define TS_ERR_OBJECTIVE (-3) /* objective is not a TS_OUT_* column the query can rank by */
#define TS_ERR_NOMEM (-4)     /* a temporary table could not be allocated */
#define TS_ERR_GPUS (-5)      /* gpus < 1, or more GPUs than the tiers hold (product of sizes) */
#define TS_ERR_IO (-10)       /* the pack file cannot be opened or read */
#define TS_ERR_FORMAT (-11)   /* not a pack file: bad magic, unknown format version, lengths */
#define TS_ERR_ABI (-12)      /* the pack file was written for another TS_ABI_VERSION */
#define TS_ERR_LAYOUT (-13)   /* the pack file's layout hash differs from TS_LAYOUT_HASH */

/* ts_llm_best found no feasible candidate (all invalid or out of memory); not an error. */
#define TS_BEST_NONE 1

/* Pack file format version (the header fields; see docs/embedding.md). */
#define TS_PACK_FORMAT_VERSION 1

/* ts_llm_best statistics (int64_t stats[TS_BEST_N_STATS], optional). */
#define TS_BEST_N_STATS 5
#define TS_BEST_ST_CANDIDATES 0 /* valid, distinct configurations in the candidate set */
#define TS_BEST_ST_COSTED 1     /* of them: costed in full (the step-time objective skips
                                 * candidates a lower bound shows cannot win; others cost all) */
#define TS_BEST_ST_FEASIBLE 2   /* of the costed: fit in memory (0: nothing feasible at all) */
#define TS_BEST_ST_CORE_ROWS 3  /* valid core rows (tp cp pp dp ep mbs vpp schedule sp tpo) */
#define TS_BEST_ST_CORE_CHECKED 4 /* core combinations checked (factorizations of gpus) */

/* The layout hash this library was built with (TS_LAYOUT_HASH of trainscape_layout.h). */
uint32_t ts_layout_hash(void);

/* The best feasible configuration for `gpus` GPUs.
 *
 * sys/mdl/job: the blocks (sys[TS_SYS_GPUS] is ignored: gpus replaces it). space: the space
 * vector, int32[space_len]: for each config field in TS_CFG_* order except TS_CFG_ORDER
 * (tp cp pp dp ep mbs vpp schedule recompute zero sp tp_overlap dp_overlap) a count n then n
 * values (count 0 only for dp: derived as gpus / (tp cp pp), and for sp: on when tp > 1);
 * then TS_N_ORDERS-independent order tables: 32 counts (one per degree mask, bit d set when
 * dimension d of TS_DIM_* has degree > 1) followed by the canonical order indices of each mask
 * in turn. The candidates are every combination of the core values (tp cp pp dp ep mbs vpp
 * schedule sp tp_overlap) that passes the model's config checks with ep dividing dp, times the
 * orders of its mask, recompute (selective dropped when flash attention makes it equal to
 * none), zero and dp_overlap: exactly trainscape.space.design_space for that GPU count.
 *
 * objective: TS_OUT_STEP_TIME_S or TS_OUT_MEMORY_GIB (minimized), TS_OUT_TOKENS_PER_S,
 * TS_OUT_MFU or TS_OUT_MODEL_TFLOPS_PER_GPU (maximized). Ties go to the first candidate in
 * enumeration order (as trainscape sweep). cfg_out[TS_N_CFG] and out[TS_N_OUT] receive the
 * winner (either may be NULL); stats[TS_BEST_N_STATS] the counts (may be NULL).
 * Returns 0, TS_BEST_NONE, or a negative code (nothing written to cfg_out / out then). */
int ts_llm_best(const double *sys, const double *mdl, const double *job,
                const int32_t *space, int64_t space_len, int64_t gpus, int32_t objective,
                int32_t *cfg_out, double *out, int64_t *stats);

/* A loaded pack file (opaque, read-only once loaded). */
typedef struct ts_blocks ts_blocks;

/* Read a pack file into *out (caller frees it with ts_blocks_free). Returns 0, TS_ERR_IO,
 * TS_ERR_FORMAT, TS_ERR_ABI, TS_ERR_LAYOUT, TS_ERR_NOMEM, TS_ERR_ARG (NULL argument) or a block
 * field code of ts_check_blocks; *out is NULL on error. */
int ts_blocks_load(const char *path, ts_blocks **out);
/* The same from a buffer of `size` bytes (copied; the caller keeps ownership of data). */
int ts_blocks_parse(const void *data, int64_t size, ts_blocks **out);
void ts_blocks_free(ts_blocks *b);

/* Borrowed pointers into b (valid until ts_blocks_free): TS_N_SYS, TS_N_MODEL, TS_N_JOB
 * doubles; the space vector (NULL and *len = 0 when the file has no candidate list). */
const double *ts_blocks_sys(const ts_blocks *b);
const double *ts_blocks_mdl(const ts_blocks *b);
const double *ts_blocks_job(const ts_blocks *b);
const int32_t *ts_blocks_space(const ts_blocks *b, int64_t *len);
/* The GPU count the scenario was packed with. */
int64_t ts_blocks_gpus(const ts_blocks *b);

/* ts_llm_best over a pack file's blocks and candidate set (TS_ERR_SPACE without one). */
int ts_blocks_best(const ts_blocks *b, int64_t gpus, int32_t objective, int32_t *cfg_out,
                   double *out, int64_t *stats);

/* Names of enum codes for printing ("1f1b", "full"; "?" when out of range). */
const char *ts_schedule_name(int32_t code);
const char *ts_recompute_name(int32_t code);

#endif /* TRAINSCAPE_EMBED_H */
