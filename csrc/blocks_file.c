/* Pack files (trainscape_embed.h ts_blocks_load): the blocks and candidate set of a scenario
 * written by `trainscape pack` (src/trainscape/embed/packfile.py; format in
 * docs/embedding.md). Every number is little-endian and decoded byte by byte, so a reader on
 * any host gets the same values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainscape_embed.h"

#define TS_PACK_HEADER_BYTES 40
static const char ts_pack_magic[8] = {'T', 'S', 'B', 'L', 'O', 'C', 'K', 'S'};

struct ts_blocks {
    double sys[TS_N_SYS];
    double mdl[TS_N_MODEL];
    double job[TS_N_JOB];
    int32_t *space;
    int64_t space_len;
};

static uint32_t ts_le_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static double ts_le_f64(const unsigned char *p)
{
    uint64_t u = 0;
    double d;
    for (int i = 7; i >= 0; i--)
        u = u << 8 | p[i];
    memcpy(&d, &u, sizeof d);
    return d;
}

int ts_blocks_parse(const void *data, int64_t size, ts_blocks **out)
{
    const unsigned char *p = data;
    uint32_t n_sys, n_mdl, n_job, n_space;
    int64_t need;
    ts_blocks *b;
    int err;
    if (!out)
        return TS_ERR_ARG;
    *out = NULL;
    if (!data || size < 0)
        return TS_ERR_ARG;
    if (size < TS_PACK_HEADER_BYTES || memcmp(p, ts_pack_magic, sizeof ts_pack_magic) != 0)
        return TS_ERR_FORMAT;
    if (ts_le_u32(p + 8) != TS_PACK_FORMAT_VERSION)
        return TS_ERR_FORMAT;
    if (ts_le_u32(p + 12) != TS_ABI_VERSION)
        return TS_ERR_ABI;
    if (ts_le_u32(p + 16) != (uint32_t)TS_LAYOUT_HASH)
        return TS_ERR_LAYOUT;
    n_sys = ts_le_u32(p + 20);
    n_mdl = ts_le_u32(p + 24);
    n_job = ts_le_u32(p + 28);
    n_space = ts_le_u32(p + 32);
    /* same hash, different lengths: a corrupt file rather than another layout */
    if (n_sys != TS_N_SYS || n_mdl != TS_N_MODEL || n_job != TS_N_JOB || n_space > (1u << 30))
        return TS_ERR_FORMAT;
    need = TS_PACK_HEADER_BYTES + 8 * (int64_t)(n_sys + n_mdl + n_job) + 4 * (int64_t)n_space;
    if (size != need)
        return TS_ERR_FORMAT;
    b = calloc(1, sizeof *b);
    if (!b)
        return TS_ERR_NOMEM;
    p += TS_PACK_HEADER_BYTES;
    for (uint32_t i = 0; i < n_sys; i++, p += 8)
        b->sys[i] = ts_le_f64(p);
    for (uint32_t i = 0; i < n_mdl; i++, p += 8)
        b->mdl[i] = ts_le_f64(p);
    for (uint32_t i = 0; i < n_job; i++, p += 8)
        b->job[i] = ts_le_f64(p);
    if (n_space > 0) {
        b->space = malloc((size_t)n_space * sizeof(int32_t));
        if (!b->space) {
            free(b);
            return TS_ERR_NOMEM;
        }
        for (uint32_t i = 0; i < n_space; i++, p += 4)
            b->space[i] = (int32_t)ts_le_u32(p);
        b->space_len = n_space;
    }
    err = ts_check_blocks(b->sys, b->mdl, b->job);
    if (err != 0) {
        ts_blocks_free(b);
        return err;
    }
    *out = b;
    return 0;
}

int ts_blocks_load(const char *path, ts_blocks **out)
{
    FILE *f;
    long size;
    unsigned char *buf;
    int err;
    if (!out)
        return TS_ERR_ARG;
    *out = NULL;
    if (!path)
        return TS_ERR_ARG;
    f = fopen(path, "rb");
    if (!f)
        return TS_ERR_IO;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return TS_ERR_IO;
    }
    if (size > (1L << 31)) {
        fclose(f);
        return TS_ERR_FORMAT;
    }
    buf = malloc(size > 0 ? (size_t)size : 1);
    if (!buf) {
        fclose(f);
        return TS_ERR_NOMEM;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        fclose(f);
        return TS_ERR_IO;
    }
    fclose(f);
    err = ts_blocks_parse(buf, size, out);
    free(buf);
    return err;
}

void ts_blocks_free(ts_blocks *b)
{
    if (!b)
        return;
    free(b->space);
    free(b);
}

const double *ts_blocks_sys(const ts_blocks *b)
{
    return b ? b->sys : NULL;
}

const double *ts_blocks_mdl(const ts_blocks *b)
{
    return b ? b->mdl : NULL;
}

const double *ts_blocks_job(const ts_blocks *b)
{
    return b ? b->job : NULL;
}

const int32_t *ts_blocks_space(const ts_blocks *b, int64_t *len)
{
    if (len)
        *len = b ? b->space_len : 0;
    return b ? b->space : NULL;
}

int64_t ts_blocks_gpus(const ts_blocks *b)
{
    return b ? (int64_t)b->sys[TS_SYS_GPUS] : 0;
}

int ts_blocks_best(const ts_blocks *b, int64_t gpus, int32_t objective, int32_t *cfg_out,
                   double *out, int64_t *stats)
{
    if (!b)
        return TS_ERR_ARG;
    if (!b->space)
        return TS_ERR_SPACE;
    return ts_llm_best(b->sys, b->mdl, b->job, b->space, b->space_len, gpus, objective, cfg_out,
                       out, stats);
}
