/* The stage config text ("hetc-stage 1", docs/STAGE_ABI.md): one record
 * per line, single-space separated fields.  Unknown record kinds are
 * skipped so that a compiler adding records does not break older runtimes;
 * a known record with a bad field is an error naming the line. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_internal.h"

#define MAX_FIELDS 64

static int fail(char *err, size_t errlen, int line, const char *fmt, ...) {
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "stage config line %d: %s", line, m);
    return -1;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Names are written with '%', space and control bytes as %XX. */
static char *decode_name(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n + 1), *d = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (s[i] == '%' && i + 2 < n && (h = hexval((unsigned char)s[i + 1])) >= 0 &&
            (l = hexval((unsigned char)s[i + 2])) >= 0) {
            *d++ = (char)(h * 16 + l);
            i += 2;
        } else {
            *d++ = s[i];
        }
    }
    *d = 0;
    return o;
}

static int get_i64(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *v = x;
    return 0;
}

static int get_int(const char *s, int *v) {
    int64_t x;
    if (get_i64(s, &x) || x < -2147483647 || x > 2147483647) return -1;
    *v = (int)x;
    return 0;
}

/* Fields "key value" pairs after position `from`: find key's value. */
static const char *kv(char **f, int nf, int from, const char *key) {
    for (int i = from; i + 1 < nf; i += 2)
        if (!strcmp(f[i], key)) return f[i + 1];
    return NULL;
}

/* A param record's `shape` (ABI 3): dims joined by 'x' ("768x2304"), "-"
 * for a scalar; their product must be the record's numel. */
static int parse_shape(StageParam *p, const char *s, const char *name, int ln, char *err,
                       size_t errlen) {
    p->rank = 0;
    int64_t prod = 1;
    if (strcmp(s, "-")) {
        for (const char *q = s;;) {
            char dim[32];
            size_t n = strcspn(q, "x");
            int64_t d;
            if (n == 0 || n >= sizeof dim || p->rank >= RT_CKPT_MAX_DIMS)
                return fail(err, errlen, ln, "param '%s': bad shape '%s' (dims joined by 'x', "
                            "at most %d)", name, s, RT_CKPT_MAX_DIMS);
            memcpy(dim, q, n);
            dim[n] = 0;
            if (get_i64(dim, &d) || d < 0)
                return fail(err, errlen, ln, "param '%s': bad dim '%s' in shape '%s'", name, dim,
                            s);
            p->shape[p->rank++] = d;
            prod *= d;
            if (!q[n]) break;
            q += n + 1;
        }
    }
    if (prod != p->numel)
        return fail(err, errlen, ln, "param '%s': shape %s has %lld elements, numel is %lld",
                    name, s, (long long)prod, (long long)p->numel);
    return 0;
}

static int parse_param(StageConfig *c, char **f, int nf, int ln, char *err, size_t errlen) {
    StageParam p = {0};
    const char *keys[] = {"layer", "shared", "numel", "param", "acc", "m", "v"};
    int64_t vals[7];
    if (nf < 2) return fail(err, errlen, ln, "param record without a name");
    for (int k = 0; k < 7; k++) {
        const char *s = kv(f, nf, 2, keys[k]);
        if (!s || get_i64(s, &vals[k]))
            return fail(err, errlen, ln, "param '%s': missing or bad field '%s'", f[1], keys[k]);
    }
    p.layer = (int)vals[0];
    p.shared = (int)vals[1];
    p.numel = vals[2];
    p.off_param = vals[3], p.off_acc = vals[4], p.off_m = vals[5], p.off_v = vals[6];
    p.shared_index = -1;
    p.zlen = -1, p.off_zp = -1; /* a zslice record, or numel / off_param (check) */
    p.rank = -1;                /* no `shape` field: an ABI 2 compiler's record */
    const char *shape = kv(f, nf, 2, "shape");
    if (shape && parse_shape(&p, shape, f[1], ln, err, errlen)) return -1;
    if (p.numel < 0 || p.off_param < 0 || p.off_acc < 0 || p.off_m < -1 || p.off_v < -1 ||
        p.layer < 0)
        return fail(err, errlen, ln, "param '%s': negative size, offset or layer", f[1]);
    if (!(p.name = decode_name(f[1]))) return fail(err, errlen, ln, "out of memory");
    c->params = realloc(c->params, ((size_t)c->nparams + 1) * sizeof *c->params);
    c->params[c->nparams++] = p;
    return 0;
}

static int parse_xfer(StageConfig *c, char **f, int nf, int ln, char *err, size_t errlen) {
    StageXfer x = {0};
    int64_t rows, rb;
    const char *peer = kv(f, nf, 4, "peer"), *r = kv(f, nf, 4, "rows"),
               *b = kv(f, nf, 4, "row_bytes");
    if (nf < 4 || get_int(f[1], &x.id) || (strcmp(f[2], "send") && strcmp(f[2], "recv")) ||
        (strcmp(f[3], "act") && strcmp(f[3], "grad")) || !peer || get_int(peer, &x.peer) ||
        !r || get_i64(r, &rows) || !b || get_i64(b, &rb) || rows < 0 || rb < 0 || x.id < 0)
        return fail(err, errlen, ln,
                    "expected 'xfer ID send|recv act|grad peer P rows R row_bytes RB'");
    x.send = !strcmp(f[2], "send");
    x.grad = !strcmp(f[3], "grad");
    x.rows = rows, x.row_bytes = rb;
    c->xfers = realloc(c->xfers, ((size_t)c->nxfers + 1) * sizeof *c->xfers);
    c->xfers[c->nxfers++] = x;
    return 0;
}

static int parse_shared(StageConfig *c, char **f, int nf, int ln, char *err, size_t errlen) {
    if (nf < 4 || strcmp(f[2], "stages"))
        return fail(err, errlen, ln, "expected 'shared NAME stages S1 S2 ...'");
    StageShared s = {0};
    s.nstages = nf - 3;
    s.stages = calloc((size_t)s.nstages, sizeof *s.stages);
    for (int i = 0; i < s.nstages; i++)
        if (get_int(f[3 + i], &s.stages[i]) || s.stages[i] < 0) {
            free(s.stages);
            return fail(err, errlen, ln, "shared '%s': bad stage '%s'", f[1], f[3 + i]);
        }
    s.name = decode_name(f[1]);
    c->shared = realloc(c->shared, ((size_t)c->nshared + 1) * sizeof *c->shared);
    c->shared[c->nshared++] = s;
    return 0;
}

/* `tp t_0 .. t_{N-1}` and `tpshard NAME axis A full F ranges S0 L0 ...`
 * (issue 9, docs/STAGE_ABI.md); 1 when the record is neither. */
int stage_tp_parse_line(StageConfig *c, char **f, int nf, int ln, char *err, size_t errlen) {
    if (!strcmp(f[0], "tp")) {
        free(c->tp);
        c->tp = calloc((size_t)nf, sizeof *c->tp);
        if (!c->tp) return fail(err, errlen, ln, "out of memory");
        for (int i = 1; i < nf; i++) {
            int64_t v;
            if (get_i64(f[i], &v) || v < 1 || v > 4096)
                return fail(err, errlen, ln, "bad TP degree '%s'", f[i]);
            c->tp[i - 1] = (int)v;
        }
        if (nf - 1 != c->nstages)
            return fail(err, errlen, ln, "%d TP degrees for %d stages (put 'stages' first)",
                           nf - 1, c->nstages);
        return 0;
    }
    if (strcmp(f[0], "tpshard")) return 1;
    /* tpshard NAME axis A full F ranges S0 L0 [S1 L1 ...] */
    StageTpShard t;
    memset(&t, 0, sizeof t);
    int64_t axis, full;
    if (nf < 9 || strcmp(f[2], "axis") || get_i64(f[3], &axis) || strcmp(f[4], "full") ||
        get_i64(f[5], &full) || strcmp(f[6], "ranges") || (nf - 7) % 2 || axis < 0 || axis > 7 ||
        full < 1)
        return fail(err, errlen, ln, "expected 'tpshard NAME axis A full F ranges S0 L0 ...'");
    t.axis = (int)axis;
    t.full = full;
    t.nranges = (nf - 7) / 2;
    if (t.nranges > STAGE_TP_MAX_RANGES)
        return fail(err, errlen, ln, "tpshard '%s': %d ranges (at most %d)", f[1], t.nranges,
                       STAGE_TP_MAX_RANGES);
    for (int k = 0; k < t.nranges; k++)
        if (get_i64(f[7 + 2 * k], &t.start[k]) || get_i64(f[8 + 2 * k], &t.len[k]) ||
            t.start[k] < 0 || t.len[k] < 1)
            return fail(err, errlen, ln, "tpshard '%s': bad range '%s %s'", f[1], f[7 + 2 * k],
                           f[8 + 2 * k]);
    if (!(t.name = decode_name(f[1]))) return fail(err, errlen, ln, "out of memory");
    StageTpShard *n = realloc(c->tpshards, ((size_t)c->ntpshards + 1) * sizeof *n);
    if (!n) {
        free(t.name);
        return fail(err, errlen, ln, "out of memory");
    }
    c->tpshards = n;
    t.param = -1;
    c->tpshards[c->ntpshards++] = t;
    return 0;
}

int stage_tp_degree(const StageConfig *c) {
    return c->tp && c->stage >= 0 && c->stage < c->nstages ? c->tp[c->stage] : 1;
}

int stage_tp_check(StageConfig *c, char *err, size_t errlen) {
    int tp = stage_tp_degree(c);
    for (int i = 0; i < c->nparams; i++) c->params[i].tpshard = -1;
    if (c->ntpshards && tp < 2) {
        snprintf(err, errlen, "stage config: %d 'tpshard' records but stage %d has TP degree %d",
                 c->ntpshards, c->stage, tp);
        return -1;
    }
    for (int k = 0; k < c->ntpshards; k++) {
        StageTpShard *t = &c->tpshards[k];
        for (int i = 0; i < c->nparams; i++)
            if (!strcmp(c->params[i].name, t->name)) t->param = i;
        if (t->param < 0) {
            snprintf(err, errlen, "stage config: tpshard '%s' names no param of stage %d",
                     t->name, c->stage);
            return -1;
        }
        StageParam *p = &c->params[t->param];
        /* The last rank's ranges must stay inside the unsharded extent. */
        for (int r = 0; r < t->nranges; r++)
            if (t->start[r] + (int64_t)tp * t->len[r] > t->full) {
                snprintf(err, errlen, "stage config: tpshard '%s': range %lld+%d x %lld passes "
                         "the full extent %lld", t->name, (long long)t->start[r], tp,
                         (long long)t->len[r], (long long)t->full);
                return -1;
            }
        /* Shared parameters are summed across stages whole: a TP-sharded
         * one would need the holders' slices to agree, which nothing
         * guarantees (tp_shard never shards a tied weight today). */
        if (p->shared) {
            snprintf(err, errlen, "stage config: param '%s' is both TP-sharded and shared with "
                     "other stages (not supported)", t->name);
            return -1;
        }
        p->tpshard = k;
    }
    return 0;
}

void stage_tp_config_free(StageConfig *c) {
    for (int k = 0; k < c->ntpshards; k++) free(c->tpshards[k].name);
    free(c->tpshards);
    free(c->tp);
    c->tpshards = NULL;
    c->tp = NULL;
    c->ntpshards = 0;
}


static int parse_line(StageConfig *c, char **f, int nf, int ln, int *seen_end, char *err,
                      size_t errlen) {
    const char *k = f[0];
    int64_t v;
#define ONE_I64(key, field)                                                             \
    if (!strcmp(k, key)) {                                                              \
        if (nf != 2 || get_i64(f[1], &v)) return fail(err, errlen, ln, "expected '%s N'", key); \
        c->field = v;                                                                   \
        return 0;                                                                       \
    }
    ONE_I64("stage", stage)
    ONE_I64("rows", rows)
    ONE_I64("local_rows", local_rows)
    ONE_I64("seq", seq)
    ONE_I64("accum", accum)
    ONE_I64("layers", layers)
    ONE_I64("warmup", warmup)
    ONE_I64("steps", steps)
#undef ONE_I64
    if (!strcmp(k, "stages")) {
        if (nf != 2 || get_int(f[1], &c->nstages) || c->nstages < 1 ||
            c->nstages > RT_MAX_STAGES)
            return fail(err, errlen, ln, "expected 'stages N' with 1 <= N <= %d", RT_MAX_STAGES);
        return 0;
    }
    if (!strcmp(k, "dp")) {
        free(c->dp);
        c->dp = calloc((size_t)nf, sizeof *c->dp);
        for (int i = 1; i < nf; i++)
            if (get_int(f[i], &c->dp[i - 1]) || c->dp[i - 1] < 1)
                return fail(err, errlen, ln, "bad DP degree '%s'", f[i]);
        if (nf - 1 != c->nstages)
            return fail(err, errlen, ln, "%d DP degrees for %d stages (put 'stages' first)",
                        nf - 1, c->nstages);
        return 0;
    }
    if (!strcmp(k, "rowtable")) {
        int st = -1;
        if (nf < 3 || get_int(f[1], &st) || st < 0 || st >= c->nstages || !c->dp ||
            nf - 2 != c->dp[st])
            return fail(err, errlen, ln, "expected 'rowtable S N0 .. N(dp-1)': a stage in "
                        "[0, %d) and one row count per DP rank of it (put 'stages', 'dp' first)",
                        c->nstages);
        if (!c->rowtab && !(c->rowtab = calloc((size_t)c->nstages, sizeof *c->rowtab)))
            return fail(err, errlen, ln, "out of memory");
        free(c->rowtab[st]);
        if (!(c->rowtab[st] = calloc((size_t)nf - 2, sizeof **c->rowtab)))
            return fail(err, errlen, ln, "out of memory");
        for (int i = 2; i < nf; i++)
            if (get_i64(f[i], &c->rowtab[st][i - 2]) || c->rowtab[st][i - 2] < 1)
                return fail(err, errlen, ln, "rowtable %d: bad row count '%s' (every DP rank "
                            "needs a row)", st, f[i]);
        return 0;
    }
    if (!strcmp(k, "pipes")) {
        int prev = -1;
        free(c->pipe_first);
        if (nf < 3 || !(c->pipe_first = calloc((size_t)nf, sizeof *c->pipe_first)))
            return fail(err, errlen, ln, "expected 'pipes F0 F1 ..': the first stage of each "
                        "of two or more pipelines");
        for (int i = 1; i < nf; i++) {
            int *x = &c->pipe_first[i - 1];
            if (get_int(f[i], x) || *x <= prev || *x >= c->nstages || (i == 1 && *x != 0))
                return fail(err, errlen, ln, "pipes: first stage '%s' of pipeline %d is not "
                            "after the previous one's in [0, %d) (the first is 0; put 'stages' "
                            "first)", f[i], i, c->nstages);
            prev = *x;
        }
        c->npipes = nf - 1;
        return 0;
    }
    if (!strcmp(k, "token_dtype")) {
        if (nf != 2 || (strcmp(f[1], "i64") && strcmp(f[1], "i32")))
            return fail(err, errlen, ln, "expected 'token_dtype i64|i32'");
        c->token_i32 = !strcmp(f[1], "i32");
        return 0;
    }
    if (!strcmp(k, "optimizer")) {
        if (nf != 2 || (strcmp(f[1], "adamw") && strcmp(f[1], "sgd")))
            return fail(err, errlen, ln, "expected 'optimizer adamw|sgd'");
        c->sgd = !strcmp(f[1], "sgd");
        return 0;
    }
    if (!strcmp(k, "lr")) {
        char *end;
        if (nf != 2 || !(c->lr = strtod(f[1], &end), end != f[1] && !*end))
            return fail(err, errlen, ln, "expected 'lr X'");
        return 0;
    }
    if (!strcmp(k, "lr_schedule")) {
        if (nf != 2 || rt_lr_kind_from_name(f[1], &c->lr_kind))
            return fail(err, errlen, ln, "expected 'lr_schedule constant|cosine'");
        return 0;
    }
    if (!strcmp(k, "arena_off")) {
        if (nf != 3 || get_i64(f[2], &v) || v < 0)
            return fail(err, errlen, ln, "expected 'arena_off lr|step|grad_norm OFF'");
        if (!strcmp(f[1], "lr")) c->off_lr = v;
        else if (!strcmp(f[1], "step")) c->off_step = v;
        else if (!strcmp(f[1], "grad_norm")) c->off_grad_norm = v;
        /* other names: a newer compiler's scalar this runtime does not write */
        return 0;
    }
    if (!strcmp(k, "build")) { /* one hetc compile's id: every stage and launch.sh agree */
        char *end;
        if (nf != 2 || strlen(f[1]) != 16 ||
            !(c->build_id = strtoull(f[1], &end, 16), end == f[1] + 16) || !c->build_id)
            return fail(err, errlen, ln, "expected 'build HEX16' (nonzero)");
        return 0;
    }
    if (!strcmp(k, "vocab")) {
        if (nf != 2 || get_i64(f[1], &v) || v < 1 || v > 65536)
            return fail(err, errlen, ln, "expected 'vocab N' with 1 <= N <= 65536 (uint16 tokens)");
        c->vocab = v;
        return 0;
    }
    if (!strcmp(k, "flops") || !strcmp(k, "peak_flops")) { /* metrics: MFU */
        char *end;
        double x = nf == 2 ? strtod(f[1], &end) : -1;
        if (nf != 2 || end == f[1] || *end || !(x >= 0) || !isfinite(x))
            return fail(err, errlen, ln, "expected '%s X' (X >= 0)", k);
        if (!strcmp(k, "flops")) c->flops_mb = x;
        else c->peak_flops = x;
        return 0;
    }
    if (!strcmp(k, "ptl")) { /* a predicted timeline event: ptl STAGE KIND MB START END */
        char *e1, *e2;
        int st, mb;
        double t0 = nf == 6 ? strtod(f[4], &e1) : 0, t1 = nf == 6 ? strtod(f[5], &e2) : 0;
        if (nf != 6 || get_int(f[1], &st) || st < 0 || strlen(f[2]) != 1 || get_int(f[3], &mb) ||
            *e1 || *e2 || !(t1 >= t0))
            return fail(err, errlen, ln, "expected 'ptl STAGE KIND MB START END'");
        TlSvgEvent *p = realloc(c->ptl, (size_t)(c->nptl + 1) * sizeof *p);
        if (!p) return fail(err, errlen, ln, "out of memory");
        c->ptl = p;
        p[c->nptl++] = (TlSvgEvent){.stage = st, .kind = f[2][0], .mb = mb, .start = t0,
                                    .end = t1};
        return 0;
    }
    if (!strcmp(k, "zero")) {
        if (nf != 2 || get_i64(f[1], &v) || v < 0 || v > 2)
            return fail(err, errlen, ln, "expected 'zero 0|1|2'");
        c->zero = (int)v;
        return 0;
    }
    if (!strcmp(k, "grad_reduce")) { /* stage_backend_host.c: the wire dtype of gradients */
        if (nf != 2 || (strcmp(f[1], "fp32") && strcmp(f[1], "bf16")))
            return fail(err, errlen, ln, "expected 'grad_reduce fp32|bf16'");
        c->grad_reduce_bf16 = !strcmp(f[1], "bf16");
        return 0;
    }
    if (!strcmp(k, "tp_reduce")) { /* stage_tp.c: TP sums of activations sent as bf16 */
        if (nf != 3 || strcmp(f[1], "bf16") || get_i64(f[2], &v) || v < 1)
            return fail(err, errlen, ln, "expected 'tp_reduce bf16 ELEMENTS'");
        c->tp_reduce_bf16 = v;
        return 0;
    }
    if (!strcmp(k, "offload")) { /* stage_offload.c */
        if (nf != 2 || get_i64(f[1], &v) || v < 0 || v > 1)
            return fail(err, errlen, ln, "expected 'offload 0|1'");
        c->offload = (int)v;
        return 0;
    }
    if (!strcmp(k, "zslice")) { /* after its param record */
        int64_t len, off;
        const char *l = kv(f, nf, 2, "len"), *o = kv(f, nf, 2, "off");
        if (nf != 6 || !l || !o || get_i64(l, &len) || get_i64(o, &off) || len < 0 || off < 0)
            return fail(err, errlen, ln, "expected 'zslice NAME len L off OFF'");
        char *nm = decode_name(f[1]);
        int found = 0;
        for (int i = 0; nm && i < c->nparams; i++)
            if (!strcmp(c->params[i].name, nm)) {
                c->params[i].zlen = len, c->params[i].off_zp = off;
                found = 1;
            }
        free(nm);
        if (!found) return fail(err, errlen, ln, "zslice '%s': no param record before it", f[1]);
        return 0;
    }
    if (!strcmp(k, "param")) return parse_param(c, f, nf, ln, err, errlen);
    if (!strcmp(k, "xfer")) return parse_xfer(c, f, nf, ln, err, errlen);
    if (!strcmp(k, "shared")) return parse_shared(c, f, nf, ln, err, errlen);
    if (!strcmp(k, "end")) {
        *seen_end = 1;
        return 0;
    }
    if (!strcmp(k, "tp") || !strcmp(k, "tpshard"))
        return stage_tp_parse_line(c, f, nf, ln, err, errlen);
    return 0; /* unknown record: tolerated */
}

static int check(StageConfig *c, char *err, size_t errlen) {
#define REQ(cond, ...)                             \
    if (!(cond)) {                                 \
        snprintf(err, errlen, "stage config: " __VA_ARGS__); \
        return -1;                                 \
    }
    REQ(c->nstages >= 1, "no 'stages' record");
    REQ(c->dp, "no 'dp' record");
    REQ(c->stage >= 0 && c->stage < c->nstages, "stage %d is not in [0, %d)", c->stage,
        c->nstages);
    REQ(c->rows >= 1 && c->local_rows >= 0 && c->seq >= 1 && c->accum >= 1,
        "rows, seq and accum must be positive (rows %lld, seq %lld, accum %lld)",
        (long long)c->rows, (long long)c->seq, (long long)c->accum);
    for (int s = 0; c->rowtab && s < c->nstages; s++) {
        int64_t sum = 0;
        for (int r = 0; c->rowtab[s] && r < c->dp[s]; r++) sum += c->rowtab[s][r];
        REQ(!c->rowtab[s] || sum == c->rows, "rowtable %d: the row counts sum to %lld, not the "
            "%lld rows of a microbatch", s, (long long)sum, (long long)c->rows);
    }
    for (int i = 0; i < c->nxfers; i++)
        REQ(c->xfers[i].peer >= 0 && c->xfers[i].peer < c->nstages &&
                c->xfers[i].peer != c->stage,
            "xfer %d: peer stage %d is not another stage of %d", c->xfers[i].id,
            c->xfers[i].peer, c->nstages);
    for (int i = 0; c->npipes > 1 && i < c->nxfers; i++)
        REQ(stage_pipe_of(c, c->xfers[i].peer) == stage_pipe_of(c, c->stage),
            "xfer %d: peer stage %d is in pipeline %d, stage %d in pipeline %d (pipelines "
            "exchange no boundary tensors)", c->xfers[i].id, c->xfers[i].peer,
            stage_pipe_of(c, c->xfers[i].peer) + 1, c->stage, stage_pipe_of(c, c->stage) + 1);
    for (int i = 0; i < c->nshared; i++)
        for (int j = 0; j < c->shared[i].nstages; j++)
            REQ(c->shared[i].stages[j] < c->nstages, "shared '%s': stage %d out of range",
                c->shared[i].name, c->shared[i].stages[j]);
    for (int i = 0; i < c->nparams; i++) {
        StageParam *p = &c->params[i];
        REQ(c->sgd || (p->off_m >= 0 && p->off_v >= 0), "param '%s': AdamW needs 'm' and 'v' offsets",
            p->name);
        if (!c->zero) p->zlen = p->numel, p->off_zp = p->off_param;
        REQ(p->zlen >= 0 && p->zlen <= p->numel && c->dp[c->stage] > 0 &&
                p->zlen >= (p->numel + c->dp[c->stage] - 1) / c->dp[c->stage],
            "param '%s': zero %d needs a zslice record of at least numel / dp elements",
            p->name, c->zero);
        if (!p->shared) continue;
        for (int j = 0; j < c->nshared; j++)
            if (!strcmp(c->shared[j].name, p->name)) p->shared_index = j;
        REQ(p->shared_index >= 0, "param '%s' is marked shared but no 'shared' line names it",
            p->name);
    }
#undef REQ
    return stage_tp_check(c, err, errlen);
}

int stage_config_parse(const char *text, StageConfig *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->off_lr = c->off_step = c->off_grad_norm = -1;
    c->lr_kind = RT_LR_CONSTANT;
    if (!text) {
        snprintf(err, errlen, "stage config: missing (the stage descriptor has none)");
        return -1;
    }
    char *buf = strdup(text);
    int ln = 0, seen_end = 0, rc = 0, header = 0;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line && !rc && !seen_end;
         line = strtok_r(NULL, "\n", &save)) {
        ln++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *f[MAX_FIELDS];
        int nf = 0;
        for (char *s2 = NULL, *t = strtok_r(line, " \t\r", &s2); t && nf < MAX_FIELDS;
             t = strtok_r(NULL, " \t\r", &s2))
            f[nf++] = t;
        if (!nf) continue;
        if (!header) {
            if (nf != 2 || strcmp(f[0], "hetc-stage") || strcmp(f[1], "1")) {
                rc = fail(err, errlen, ln, "expected the header 'hetc-stage 1'");
                break;
            }
            header = 1;
            continue;
        }
        rc = parse_line(c, f, nf, ln, &seen_end, err, errlen);
    }
    free(buf);
    if (!rc && !header) rc = fail(err, errlen, 1, "empty config (no 'hetc-stage 1' header)");
    if (!rc) rc = check(c, err, errlen);
    if (rc) stage_config_free(c);
    return rc;
}

void stage_config_free(StageConfig *c) {
    for (int i = 0; i < c->nparams; i++) free(c->params[i].name);
    for (int i = 0; i < c->nshared; i++) free(c->shared[i].name), free(c->shared[i].stages);
    free(c->params);
    free(c->xfers);
    free(c->shared);
    free(c->pipe_first);
    for (int s = 0; c->rowtab && s < c->nstages; s++) free(c->rowtab[s]);
    free(c->rowtab);
    free(c->dp);
    free(c->ptl);
    stage_tp_config_free(c);
    memset(c, 0, sizeof *c);
}

int stage_pipe_of(const StageConfig *c, int s) {
    int j = 0;
    while (c->pipe_first && j + 1 < c->npipes && c->pipe_first[j + 1] <= s) j++;
    return j;
}

int stage_pipe_last(const StageConfig *c, int s) {
    int j = stage_pipe_of(c, s);
    return s == (c->pipe_first && j + 1 < c->npipes ? c->pipe_first[j + 1] : c->nstages) - 1;
}
