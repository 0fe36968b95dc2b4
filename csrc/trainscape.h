/* trainscape: the public C ABI of the LLM cost model.
 *
 * The kernel is a port of the pure-Python reference (src/trainscape/model/), one C function per
 * reference function; differential tests hold it to the reference. The layout of the packed
 * blocks and of the config / result columns is declared in trainscape_layout.h, generated from
 * src/trainscape/layout.py.
 *
 * Pure and reentrant: no globals, no I/O, no allocation in the loop (a large batch allocates
 * one memo per worker before its loop and frees it after; without the memory it runs uncached). Several threads may call any entry
 * point at once. This text is also fed to cffi's cdef (guard and #include lines stripped), so
 * keep it to plain declarations, enums and integer #defines.
 */
#ifndef TRAINSCAPE_H
#define TRAINSCAPE_H

#include <stdint.h>

#include "trainscape_layout.h"

/* ABI version; bumped when a signature or the meaning of a code changes. */
#define TS_ABI_VERSION 2 /* 2: job block + pipeline_edge_layers, dropout; code 19 = fewer layers than chunks */

/* Negative return codes of the entry points (results >= 0 are TS_STATUS_* codes).
 * TS_ERR_ARG: a NULL pointer, n < 0 or a bad thread count.
 * A bad block field returns -(TS_ERR_FIELD_BASE + block * TS_ERR_BLOCK_STRIDE + index), where
 * block is TS_ERR_BLOCK_SYS / _MDL / _JOB and index the field's index in that block (tier
 * fields: TS_SYS_TIER_BASE + tier * TS_N_TIER + TS_TIER_*). */
#define TS_ERR_ARG (-1)
#define TS_ERR_FIELD_BASE 1000
#define TS_ERR_BLOCK_STRIDE 1000
#define TS_ERR_BLOCK_SYS 1
#define TS_ERR_BLOCK_MDL 2
#define TS_ERR_BLOCK_JOB 3

/* The ABI version this library was built with (TS_ABI_VERSION). */
int ts_abi_version(void);

/* 0 when the system, model and job blocks can be costed, else a negative code naming the first
 * bad field (n_tiers outside 1..TS_MAX_TIERS, non-positive sizes, bandwidths, rates ...). */
int ts_check_blocks(const double *sys, const double *mdl, const double *job);

/* Cost one configuration: cfg[TS_N_CFG] in, out[TS_N_OUT] written (every column).
 * Returns the TS_STATUS_* code written to out[TS_OUT_STATUS], or a negative error code for a bad
 * block (out untouched). */
int ts_llm_cost(const double *sys, const double *mdl, const double *job,
                const int32_t *cfg, double *out);

/* Cost a batch: cfg is (TS_N_CFG, n) row-major (one contiguous column per axis), out is
 * (TS_N_OUT, n) row-major. n_threads <= 0 uses every core. Returns 0, or a negative error code
 * (nothing written). Per-config problems are reported in the status column, never here. */
int ts_llm_evaluate_batch(const double *sys, const double *mdl, const double *job,
                          const int32_t *cfg, int64_t n, double *out, int n_threads);

/* The config_error code of one configuration (0 = valid; see model/llm.py CONFIG_ERRORS), or a
 * negative error code for a bad block. */
int ts_llm_config_error(const double *sys, const double *mdl, const double *job,
                        const int32_t *cfg);

/* Worker threads a batch call would use for n_threads (0 = all cores); 1 without threading. */
int ts_max_threads(int n_threads);

#endif /* TRAINSCAPE_H */
