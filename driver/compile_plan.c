#include "compile_plan.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition.h"
#include "input_file.h"
#include "plan_json_check.h"
#include "plan_forms.h"
#include "plan_pipes.h"

static char *slurp(const char *path, IrError *err) {
    char ebuf[sizeof err->msg];
    FILE *f = input_fopen(path, ebuf, sizeof ebuf); /* a FIFO would block in fopen() */
    if (!f) {
        ir_errorf(err, "%s (the plan)", ebuf);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        ir_errorf(err, "%s: cannot read the plan", path);
        return NULL;
    }
    b[n] = 0;
    fclose(f);
    return b;
}

static int num(const cJSON *o, const char *key, double *v, const char *path, const char *where,
               IrError *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x))
        return ir_errorf(err, "%s: %s\"%s\" must be a number", path, where, key);
    *v = x->valuedouble;
    return 0;
}

static int whole(double v, int64_t lo, int64_t *out) {
    if (!(v >= (double)lo) || v > 9e15 || v != (double)(int64_t)v)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static void copy_str(char *dst, size_t n, const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    snprintf(dst, n, "%s", cJSON_IsString(x) ? x->valuestring : "");
}

/* stages[].rows (version 2): each DP rank's rows of a microbatch, any
 * split summing to the microbatch's rows with a row on every rank
 * (heterogeneous DP: Zorse's and Metis's shares in proportion to each
 * device's speed).  A split other than rt_row_split's becomes the stage's
 * row table (c->row_table): a stage binary per distinct count, the runtime
 * splitting boundary tensors and data by it (docs/STAGES.md). */
static int check_rows(const cJSON *o, CpStage *c, int64_t rows, const char *path,
                      const char *where, IrError *err) {
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(o, "rows");
    int dp = c->dp;
    if (!rw)
        return 0;
    if (!cJSON_IsArray(rw))
        return ir_errorf(err, "%s: %s\"rows\" must be an array of %d row counts (one per DP "
                         "rank)", path, where, dp);
    int len = cJSON_GetArraySize(rw), stale = len > 0;
    int64_t had = 0; /* the rows it split: the plan's before a hand edit of dp or the batch */
    for (int r = 0; r < len && stale; r++) {
        const cJSON *x = cJSON_GetArrayItem(rw, r);
        stale = cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 1e15;
        had += stale ? (int64_t)x->valuedouble : 0;
    }
    for (int r = 0; r < len && stale; r++) /* the runtime's split of them over len ranks? */
        stale = cJSON_GetArrayItem(rw, r)->valuedouble == (double)(had / len + (r < had % len));
    if (len != dp && stale) {
        /* the planner's split for another dp: a plan whose dp was edited
         * by hand (docs/PLAN_FORMAT.md) still carries it.  Say so and run
         * the runtime's split, as for a plan without rows. */
        fprintf(stderr, "hetc compile: %s: %s\"rows\" has %d counts for dp = %d (the runtime's "
                "split written for dp %d): ignored, the stage binaries split each microbatch's "
                "%lld rows over the %d DP ranks themselves\n", path, where, len, dp, len,
                (long long)rows, dp);
        return 0;
    }
    if (len != dp)
        return ir_errorf(err, "%s: %s\"rows\" has %d counts for \"dp\" = %d: give one row "
                         "count per DP rank (or leave \"rows\" out for the runtime's split of "
                         "the %lld rows)", path, where, len, dp, (long long)rows);
    char got[256];
    size_t ng = 0;
    int64_t sum = 0, differ = 0;
    int64_t *t = calloc(dp > 0 ? (size_t)dp : 1, sizeof *t); /* dp >= 1: read_stage checked */
    if (!t)
        return ir_errorf(err, "%s: out of memory", path);
    for (int r = 0; r < dp; r++) {
        const cJSON *x = cJSON_GetArrayItem(rw, r);
        int64_t n = 0;
        if (!cJSON_IsNumber(x) || whole(x->valuedouble, 0, &n)) {
            free(t);
            return ir_errorf(err, "%s: %s\"rows\"[%d] must be a whole number of rows", path,
                             where, r);
        }
        if (n < 1) {
            free(t);
            return ir_errorf(err, "%s: %s\"rows\"[%d] is %lld: every DP rank needs at least "
                             "one row of a microbatch (drop the rank: a smaller \"dp\")", path,
                             where, r, (long long)n);
        }
        t[r] = n;
        sum += n;
        differ |= n != rows / dp + (r < rows % dp ? 1 : 0);
        if (ng < sizeof got - 24)
            ng += (size_t)snprintf(got + ng, sizeof got - ng, "%s%lld", r ? ", " : "",
                                   (long long)n);
    }
    if (sum != rows) {
        free(t);
        return ir_errorf(err, "%s: %s\"rows\" [%s] sum to %lld, not the %lld rows of a "
                         "microbatch (global_batch / microbatches)", path, where, got,
                         (long long)sum, (long long)rows);
    }
    if (differ)
        c->row_table = t; /* another split than the runtime's: a row table */
    else
        free(t);
    return 0;
}

int64_t comp_plan_rank_rows(const CompPlan *p, int s, int r) {
    const CpStage *c = &p->stages[s];
    return c->row_table ? c->row_table[r] : p->prows / c->dp + (r < p->prows % c->dp ? 1 : 0);
}

void comp_plan_pipe_range(const CompPlan *p, int s, int *first, int *end) {
    int j = p->pipe_first ? p->stages[s].pipe : 0;
    *first = p->pipe_first ? p->pipe_first[j] : 0;
    *end = p->pipe_first ? p->pipe_first[j + 1] : p->nstages;
}

void comp_plan_binary_suffix(const CompPlan *p, int s, int64_t rows, char *buf, size_t n) {
    if (rows == comp_plan_rank_rows(p, s, 0))
        snprintf(buf, n, "%s", "");
    else if (!p->stages[s].row_table)
        snprintf(buf, n, "%s", "_lo");
    else
        snprintf(buf, n, "_r%lld", (long long)rows);
}

/* stages[].parts (a DP group over several meshes): each part's "mesh" and
 * "devices" (DP ranks x tp), summing to the stage's dp x tp devices.  The
 * launcher places each part's ranks on its mesh (compile_launch.c); the
 * row table says each rank's rows. */
static int read_parts(const cJSON *o, CpStage *c, const char *path, const char *where,
                      IrError *err) {
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(o, "parts");
    if (!pa || cJSON_IsNull(pa))
        return 0;
    int n = cJSON_IsArray(pa) ? cJSON_GetArraySize(pa) : -1;
    if (n < 1 || n > CP_MAX_PARTS)
        return ir_errorf(err, "%s: %s\"parts\" must be an array of 1 to %d {\"mesh\", "
                         "\"devices\"} objects", path, where, CP_MAX_PARTS);
    int sum = 0, j = 0;
    const cJSON *q;
    cJSON_ArrayForEach(q, pa) {
        const cJSON *me = cJSON_GetObjectItemCaseSensitive(q, "mesh");
        const cJSON *dv = cJSON_GetObjectItemCaseSensitive(q, "devices");
        int64_t d = 0;
        if (!cJSON_IsString(me) || !me->valuestring[0] || !cJSON_IsNumber(dv) ||
            whole(dv->valuedouble, 1, &d) || d > 4096)
            return ir_errorf(err, "%s: %s\"parts\"[%d] needs \"mesh\" (a mesh name) and "
                             "\"devices\" (a whole number >= 1)", path, where, j);
        if (d % c->tp)
            return ir_errorf(err, "%s: %s\"parts\"[%d] has %lld devices, not a multiple of "
                             "\"tp\" %d: a TP group cannot span two meshes' parts", path, where,
                             j, (long long)d, c->tp);
        snprintf(c->part_mesh[j], sizeof c->part_mesh[j], "%s", me->valuestring);
        c->part_dp[j] = (int)(d / c->tp);
        sum += c->part_dp[j];
        j++;
    }
    if (sum != c->dp)
        return ir_errorf(err, "%s: %s\"parts\" hold %d DP ranks (devices / tp), not the "
                         "stage's \"dp\" %d", path, where, sum, c->dp);
    c->nparts = n;
    return 0;
}

const char *comp_plan_rank_mesh(const CompPlan *p, int s, int r) {
    const CpStage *c = &p->stages[s];
    for (int j = 0; j < c->nparts; r -= c->part_dp[j], j++)
        if (r < c->part_dp[j])
            return c->part_mesh[j];
    return c->mesh;
}

int comp_plan_meshes(const CompPlan *p, const char **out, int max) {
    int n = 0;
    for (int s = 0; s < p->nstages; s++) {
        const CpStage *c = &p->stages[s];
        for (int j = 0; j < (c->nparts ? c->nparts : 1); j++) {
            const char *m = c->nparts ? c->part_mesh[j] : c->mesh;
            int seen = 0;
            for (int k = 0; k < n; k++)
                seen |= !strcmp(out[k], m);
            if (!seen && n < max)
                out[n++] = m;
        }
    }
    return n;
}

int comp_plan_mesh_index(const CompPlan *p, const char *mesh) {
    const char *names[CP_MAX_PARTS * 64];
    int n = comp_plan_meshes(p, names, (int)(sizeof names / sizeof *names));
    for (int k = 0; k < n; k++)
        if (!strcmp(names[k], mesh))
            return k;
    return -1;
}

/* Several pipelines (stages[].pipe 1..J, stored pipeline by pipeline; the
 * plan_forms_check before it has their holder sets): p->npipes,
 * p->pipe_first and p->prows, every pipeline running each microbatch's
 * rows / J rows (AutoHet's DP groups split a global batch evenly). */
static int read_pipes(const cJSON *st, CompPlan *p, const char *path, IrError *err) {
    int n = p->nstages, J = 0, prev = 0, k = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, st) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "pipe");
        int q = cJSON_IsNumber(x) ? (int)x->valuedouble : 0;
        if (k == 0 && q <= 0)
            break; /* one pipeline (plan_forms_check saw every stage's "pipe" or none) */
        if (q != prev && q != prev + 1)
            return ir_errorf(err, "%s: stages[%d].\"pipe\" %d after pipeline %d: store the "
                             "pipelines one after another, 1, 2, ..., each a run of stages",
                             path, k, q, prev);
        const cJSON *pm = cJSON_GetObjectItemCaseSensitive(o, "pipe_microbatches");
        if (pm && (!cJSON_IsNumber(pm) || pm->valuedouble != p->microbatches))
            return ir_errorf(err, "%s: stages[%d].\"pipe_microbatches\" is not the plan's "
                             "\"microbatches\" %d: the stage binaries run every pipeline on "
                             "all microbatches (its rows of each)", path, k, p->microbatches);
        prev = q;
        J = q;
        k++;
    }
    p->npipes = J > 1 ? J : 1;
    p->pipe_first = calloc((size_t)p->npipes + 1, sizeof *p->pipe_first);
    if (!p->pipe_first)
        return ir_errorf(err, "%s: out of memory", path);
    p->pipe_first[p->npipes] = n;
    if (J < 2)
        return 0;
    k = 0;
    cJSON_ArrayForEach(o, st) {
        int q = (int)cJSON_GetObjectItemCaseSensitive(o, "pipe")->valuedouble;
        if (k == 0 || q != prev)
            p->pipe_first[q - 1] = k;
        prev = q;
        k++;
    }
    if (p->rows % J)
        return ir_errorf(err, "%s: %d pipelines over microbatches of %lld rows (global_batch / "
                         "microbatches): each pipeline runs an equal share of every "
                         "microbatch, so the rows must be a multiple of %d", path, J,
                         (long long)p->rows, J);
    p->prows = p->rows / J;
    return 0;
}

/* stages[s] of plan.json into p->stages[s] (the stages before it read). */
static int read_stage(const cJSON *o, int s, CompPlan *p, const char *path, IrError *err) {
    double v = 0;
    int64_t i64 = 0;
    CpStage *c = &p->stages[s];
    char where[48];
    snprintf(where, sizeof where, "stages[%d].", s);
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(o, "layers");
    int64_t a, b;
    if (!cJSON_IsArray(ly) || cJSON_GetArraySize(ly) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(ly, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(ly, 1)) ||
        whole(cJSON_GetArrayItem(ly, 0)->valuedouble, 1, &a) ||
        whole(cJSON_GetArrayItem(ly, 1)->valuedouble, 1, &b) || b < a) {
        ir_errorf(err, "%s: %s\"layers\" must be [first, last] with 1 <= first <= last", path,
                  where);
        return -1;
    }
    c->first_layer = (int)a, c->last_layer = (int)b;
    c->pipe = p->npipes > 1 ? (int)cJSON_GetObjectItemCaseSensitive(o, "pipe")->valuedouble - 1 : 0;
    int head = !s || c->pipe != p->stages[s - 1].pipe; /* its pipeline's first stage */
    int expect = head ? 1 : p->stages[s - 1].last_layer + 1;
    if (c->first_layer != expect) {
        ir_errorf(err, "%s: %s\"layers\" starts at %d; the stages must cover the layers in "
                  "order without gaps (expected %d%s)", path, where, c->first_layer, expect,
                  p->npipes > 1 ? ": every pipeline is a whole copy of the model" : "");
        return -1;
    }
    if (num(o, "dp", &v, path, where, err))
        return -1;
    if (whole(v, 1, &i64) || i64 > 4096) {
        ir_errorf(err, "%s: %s\"dp\" must be a whole number >= 1, got %g", path, where, v);
        return -1;
    }
    c->dp = (int)i64;
    c->tp = 1;
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(o, "tp");
    if (tp && (!cJSON_IsNumber(tp) || whole(tp->valuedouble, 1, &i64) || i64 > 4096)) {
        ir_errorf(err, "%s: %s\"tp\" must be a whole number >= 1", path, where);
        return -1;
    }
    if (tp)
        c->tp = (int)i64;
    const cJSON *zr = cJSON_GetObjectItemCaseSensitive(o, "zero");
    if (zr && (!cJSON_IsNumber(zr) || whole(zr->valuedouble, 0, &i64) || i64 > 2)) {
        ir_errorf(err, "%s: %s\"zero\" must be 0, 1 or 2", path, where);
        return -1;
    }
    c->zero = zr ? (int)i64 : 0; /* ZeRO 1/2: passes/partition.h, runtime stage_sync.c */
    /* Zorse's CPU offload: the stage's config gets an `offload 1` record
     * (runtime/stage/stage_offload.c).  Only true / false (or 1 / 0): any
     * other value would be a guess at what the plan asked for. */
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "offload");
    if (off && !cJSON_IsBool(off) && !cJSON_IsNull(off) &&
        !(cJSON_IsNumber(off) && (off->valuedouble == 0 || off->valuedouble == 1))) {
        ir_errorf(err, "%s: %s\"offload\" must be true or false", path, where);
        return -1;
    }
    c->offload = off && (cJSON_IsTrue(off) || (cJSON_IsNumber(off) && off->valuedouble == 1));
    const cJSON *rcm = cJSON_GetObjectItemCaseSensitive(o, "recompute");
    PartRecompute rm = PART_RC_NONE;
    if (rcm && (!cJSON_IsString(rcm) || part_recompute_parse(rcm->valuestring, &rm))) {
        ir_errorf(err, "%s: %s\"recompute\" must be \"none\", \"full\" or \"selective\"",
                  path, where);
        return -1;
    }
    c->recompute = (int)rm;
    if (num(o, "warmup", &v, path, where, err))
        return -1;
    if (whole(v, 1, &i64) || i64 > p->microbatches) {
        ir_errorf(err, "%s: %s\"warmup\" must be in [1, microbatches = %d], got %g", path,
                  where, p->microbatches, v);
        return -1;
    }
    c->warmup = (int)i64;
    if (!head && c->warmup > p->stages[s - 1].warmup) {
        ir_errorf(err, "%s: %s\"warmup\" %d exceeds the previous stage's %d: the pipeline "
                  "would deadlock (warm-ups must not increase along the pipe)", path, where,
                  c->warmup, p->stages[s - 1].warmup);
        return -1;
    }
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(o, "mem_pred_bytes");
    c->mem_pred = cJSON_IsNumber(mp) ? mp->valuedouble : 0;
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(o, "mem_arena_pred_bytes");
    c->mem_arena_pred = cJSON_IsNumber(ma) ? ma->valuedouble : -1;
    copy_str(c->mesh, sizeof c->mesh, o, "mesh");
    copy_str(c->device, sizeof c->device, o, "device");
    /* Zorse's ministages sharing devices: a group number, placed by
     * check_groups once every stage is read */
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(o, "group");
    c->group = 0;
    if (gr && !cJSON_IsNull(gr)) {
        if (!cJSON_IsNumber(gr) || whole(gr->valuedouble, 0, &i64) || i64 > 1000000) {
            ir_errorf(err, "%s: %s\"group\" must be a whole number >= 0 (0: the stage has its "
                      "own devices)", path, where);
            return -1;
        }
        c->group = (int)i64;
    }
    /* dp need not divide the rows (heterogeneous DP: the first rows % dp
     * ranks take one row more, stage_S_lo runs the rest, or the plan's
     * row table), but every DP rank needs a row */
    if (p->prows < c->dp) {
        ir_errorf(err, "%s: %s\"dp\" %d exceeds the %lld rows of a microbatch "
                  "(global_batch / microbatches%s): a DP rank would hold no row (plan with a "
                  "larger --microbatch or fewer DP ranks)", path, where, c->dp,
                  (long long)p->prows, p->npipes > 1 ? " / pipes" : "");
        return -1;
    }
    if (check_rows(o, c, p->prows, path, where, err))
        return -1;
    return read_parts(o, c, path, where, err);
}

/* Ministages sharing devices (plan.json "group", Zorse's round-robin): each
 * stage of a group runs on its first stage's devices, rank for rank
 * (c->mate; launch.sh's device_of), so they must be placed alike: the same
 * mesh or parts, dp and tp.  A group of one stage is the plain form. */
static int check_groups(CompPlan *p, const char *path, IrError *err) {
    for (int s = 0; s < p->nstages; s++) {
        CpStage *c = &p->stages[s];
        c->mate = s;
        for (int q = 0; q < s && c->group > 0; q++)
            if (p->stages[q].group == c->group) {
                c->mate = q;
                break;
            }
        const CpStage *f = &p->stages[c->mate];
        int same = f->dp == c->dp && f->tp == c->tp && f->nparts == c->nparts &&
                   !strcmp(f->mesh, c->mesh);
        for (int j = 0; same && j < c->nparts; j++)
            same = !strcmp(f->part_mesh[j], c->part_mesh[j]) && f->part_dp[j] == c->part_dp[j];
        if (!same)
            return ir_errorf(err, "%s: stages[%d] (\"group\" %d) is placed unlike stages[%d], "
                             "the group's first ministage (mesh %s, dp %d, tp %d, %d parts vs "
                             "mesh %s, dp %d, tp %d, %d parts): ministages sharing devices run "
                             "rank for rank on the same devices, so they need the same \"mesh\" "
                             "(or \"parts\"), \"dp\" and \"tp\"", path, s, c->group, c->mate,
                             c->mesh, c->dp, c->tp, c->nparts, f->mesh, f->dp, f->tp, f->nparts);
    }
    return 0;
}

/* cluster.links and cluster.meshes[].peak_flops of plan.json. */
static int read_cluster(const cJSON *root, CompPlan *p, const char *path, IrError *err) {
    /* cluster.links: the transport of each stage boundary (optional: a
     * hand-written plan without them gets CPU-mediated links) */
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    const cJSON *lk = cl ? cJSON_GetObjectItemCaseSensitive(cl, "links") : NULL;
    int nl = cJSON_IsArray(lk) ? cJSON_GetArraySize(lk) : 0;
    if (nl > 0 && !(p->links = calloc((size_t)nl, sizeof *p->links))) {
        ir_errorf(err, "%s: out of memory", path);
        return -1;
    }
    for (int l = 0; l < nl; l++) {
        const cJSON *o = cJSON_GetArrayItem(lk, l);
        const cJSON *bt = cJSON_GetObjectItemCaseSensitive(o, "between");
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(o, "transport");
        if (!cJSON_IsArray(bt) || cJSON_GetArraySize(bt) != 2 ||
            !cJSON_IsString(cJSON_GetArrayItem(bt, 0)) ||
            !cJSON_IsString(cJSON_GetArrayItem(bt, 1)) ||
            (tr && (!cJSON_IsString(tr) || (strcmp(tr->valuestring, "device-direct") &&
                                            strcmp(tr->valuestring, "cpu-mediated"))))) {
            ir_errorf(err, "%s: cluster.links[%d]: expected {\"between\": [MESH, MESH], "
                      "\"transport\": \"device-direct\"|\"cpu-mediated\"}", path, l);
            return -1;
        }
        CpLink *k = &p->links[p->nlinks++];
        snprintf(k->a, sizeof k->a, "%s", cJSON_GetArrayItem(bt, 0)->valuestring);
        snprintf(k->b, sizeof k->b, "%s", cJSON_GetArrayItem(bt, 1)->valuestring);
        k->cpu_mediated = tr && !strcmp(tr->valuestring, "cpu-mediated");
    }
    /* cluster.meshes[].peak_flops: the metrics' MFU denominator (optional) */
    const cJSON *ms = cl ? cJSON_GetObjectItemCaseSensitive(cl, "meshes") : NULL;
    for (int m = 0; cJSON_IsArray(ms) && m < cJSON_GetArraySize(ms); m++) {
        const cJSON *o = cJSON_GetArrayItem(ms, m);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *pk = cJSON_GetObjectItemCaseSensitive(o, "peak_flops");
        if (!cJSON_IsString(nm) || !cJSON_IsNumber(pk) || !(pk->valuedouble > 0)) continue;
        for (int s = 0; s < p->nstages; s++)
            if (!strcmp(p->stages[s].mesh, nm->valuestring))
                p->stages[s].peak_flops = pk->valuedouble;
    }
    return 0;
}

int comp_plan_read(const char *path, CompPlan *p, IrError *err) {
    memset(p, 0, sizeof *p);
    p->seq = -1;
    char *text = slurp(path, err);
    if (!text)
        return -1;
    cJSON *root = cJSON_Parse(text);
    int rc = -1;
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1;
        for (const char *c = text; at && c < at && *c; c++)
            line += *c == '\n';
        ir_errorf(err, "%s:%d: not valid JSON", path, line);
        goto done;
    }
    if (plan_json_check(root, path, err)) /* ranges and enumerations first */
        goto done;
    plan_pipes_merge(root, path); /* pipelines whose stages line up: one pipeline */
    if (plan_forms_check(root, path, err)) /* a seed planner's forms the binaries lack */
        goto done;
    double v = 0;
    int64_t i64 = 0;
    if (num(root, "version", &v, path, "", err))
        goto done;
    if (v != 1 && v != 2) { /* 2 adds stages[].rows */
        ir_errorf(err, "%s: plan version %g is not supported (this hetc reads versions 1 and 2)",
                  path, v);
        goto done;
    }
    /* "precision" (issue 17): the stage binaries run fp32 or bf16-mixed,
     * both planned with fp32 model states (cluster dtype fp32); a plan made in the
     * cluster file's 16-bit dtype (--precision cluster-dtype) sized memory
     * and time for what they do not run.  Absent (plans before it,
     * hand-written ones): not checked. */
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "precision");
    const cJSON *pcl = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    const cJSON *pdt = cJSON_IsObject(pcl) ? cJSON_GetObjectItemCaseSensitive(pcl, "dtype") : NULL;
    int pr_ok = pr && cJSON_IsString(pr) &&
                (!strcmp(pr->valuestring, "fp32") ||
                 (!strcmp(pr->valuestring, "bf16-mixed") &&
                  (!cJSON_IsString(pdt) || !strcmp(pdt->valuestring, "fp32"))));
    if (pr && !pr_ok) {
        ir_errorf(err, "%s: \"precision\" %s%s%s: a plan in the cluster file's 16-bit dtype, "
                  "which no stage binary runs (they run fp32 or bf16-mixed, planned with fp32 "
                  "model states); "
                  "plan again with hetc plan --precision bf16-mixed (the default) or fp32", path, cJSON_IsString(pr) ? "\"" : "",
                  cJSON_IsString(pr) ? pr->valuestring : "(not a string)",
                  cJSON_IsString(pr) ? "\"" : "");
        goto done;
    }
    if (pr)
        snprintf(p->precision, sizeof p->precision, "%s", pr->valuestring);
    if (num(root, "microbatches", &v, path, "", err))
        goto done;
    if (whole(v, 1, &i64) || i64 > 1000000) {
        ir_errorf(err, "%s: \"microbatches\" must be a whole number >= 1, got %g", path, v);
        goto done;
    }
    p->microbatches = (int)i64;
    const cJSON *gb = cJSON_GetObjectItemCaseSensitive(root, "global_batch");
    if (!cJSON_IsNumber(gb) || whole(gb->valuedouble, 1, &p->global_batch)) {
        ir_errorf(err, "%s: \"global_batch\" must be a whole number >= 1 (compiling needs the "
                  "rows per step)", path);
        goto done;
    }
    if (p->global_batch % p->microbatches) {
        ir_errorf(err, "%s: \"global_batch\" %lld is not divisible by \"microbatches\" %d", path,
                  (long long)p->global_batch, p->microbatches);
        goto done;
    }
    p->rows = p->global_batch / p->microbatches;
    p->prows = p->rows;
    const cJSON *sq = cJSON_GetObjectItemCaseSensitive(root, "seq");
    if (cJSON_IsNumber(sq) && whole(sq->valuedouble, 1, &p->seq))
        p->seq = -1;
    copy_str(p->schedule, sizeof p->schedule, root, "schedule");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stages");
    int n = cJSON_IsArray(st) ? cJSON_GetArraySize(st) : 0;
    if (n < 1) {
        ir_errorf(err, "%s: \"stages\" must be a non-empty array", path);
        goto done;
    }
    p->stages = calloc((size_t)n, sizeof *p->stages);
    p->nstages = n;
    if (read_pipes(st, p, path, err))
        goto done;
    for (int s = 0; s < n; s++) {
        if (read_stage(cJSON_GetArrayItem(st, s), s, p, path, err))
            goto done;
    }
    for (int j = 0; j + 1 < p->npipes; j++) {
        const CpStage *e = &p->stages[p->pipe_first[j + 1] - 1];
        if (e->last_layer != p->stages[n - 1].last_layer) {
            ir_errorf(err, "%s: pipeline %d ends at layer %d, pipeline %d at layer %d: every "
                      "pipeline is a whole copy of the model", path, j + 1, e->last_layer,
                      p->npipes, p->stages[n - 1].last_layer);
            goto done;
        }
    }
    if (check_groups(p, path, err) || read_cluster(root, p, path, err))
        goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    free(text);
    if (rc)
        comp_plan_free(p);
    return rc;
}

int comp_plan_set_recompute(CompPlan *p, const char *mode, IrError *err) {
    PartRecompute rm;
    if (part_recompute_parse(mode, &rm))
        return ir_errorf(err, "--recompute %s: expected none, full or selective",
                         mode ? mode : "(null)");
    for (int s = 0; s < p->nstages; s++)
        p->stages[s].recompute = (int)rm;
    return 0;
}

void comp_plan_free(CompPlan *p) {
    for (int s = 0; p->stages && s < p->nstages; s++)
        free(p->stages[s].row_table);
    free(p->stages);
    free(p->links);
    free(p->pipe_first);
    memset(p, 0, sizeof *p);
}
