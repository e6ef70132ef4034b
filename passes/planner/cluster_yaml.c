/* cluster.yaml loader (libyaml document API; schema in docs/CLUSTER.md).
 *
 * The file is loaded into a libyaml document and walked by a fixed,
 * schema-driven descent (never by generic recursion, so aliases that form
 * cycles cannot loop).  Every error names the file, the line libyaml marked
 * for the offending node, the key path ("meshes[1].inter_node.bandwidth_gbps")
 * and what was expected.
 *
 * Units in the file: bandwidth_gbps in gigabits/s (network convention),
 * latency_us in microseconds, memory_gb in GiB, tflops_* in 1e12 FLOP/s,
 * hbm_gbytes_s in gigabytes/s.  ClusterSpec holds SI units (bytes/s, s).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "planner.h"
#include "input_file.h"

#define GIB 1073741824.0
#define MAX_DEVICES_PER_MESH (1 << 20)   /* guards n*m against overflow */
#define MAX_MESHES 256

typedef struct Ctx {
    const char *file;
    yaml_document_t *doc;
    IrError *err;
} Ctx;

static int line_of(const yaml_node_t *n)
{
    return n ? (int)n->start_mark.line + 1 : 0;
}

static int fail(Ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(Ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && *path)
        return ir_errorf(c->err, "%s:%d: %s: %s", c->file, line_of(n), path, msg);
    return ir_errorf(c->err, "%s:%d: %s", c->file, line_of(n), msg);
}

static yaml_node_t *node(Ctx *c, yaml_node_item_t id)
{
    return yaml_document_get_node(c->doc, id);
}

static const char *kind_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

/* A scalar's text, or NULL. */
static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static void describe(const yaml_node_t *n, char *buf, size_t cap)
{
    const char *s = scalar(n);
    if (s)
        snprintf(buf, cap, "'%.60s'", s);
    else
        snprintf(buf, cap, "%s", kind_name(n));
}

/* ---------------------------------------------------------------- mappings */

/* Check a mapping's keys: all scalars, known, not repeated (libyaml accepts
 * duplicate keys; a repeated key is almost always a mistake). */
static int check_keys(Ctx *c, const yaml_node_t *map, const char *path,
                      const char *const *known, int nknown)
{
    yaml_node_pair_t *p0 = map->data.mapping.pairs.start;
    yaml_node_pair_t *pe = map->data.mapping.pairs.top;
    for (yaml_node_pair_t *p = p0; p < pe; p++) {
        yaml_node_t *k = node(c, p->key);
        const char *ks = scalar(k);
        if (!ks)
            return fail(c, k, path, "expected scalar keys, got %s as a key", k ? kind_name(k) : "nothing");
        int ok = 0;
        for (int i = 0; i < nknown; i++)
            if (strcmp(ks, known[i]) == 0)
                ok = 1;
        if (!ok) {
            char list[512] = "";
            for (int i = 0; i < nknown; i++) {
                strncat(list, known[i], sizeof list - strlen(list) - 1);
                if (i + 1 < nknown)
                    strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            return fail(c, k, path, "unknown key '%.60s' (expected one of: %s)", ks, list);
        }
        for (yaml_node_pair_t *q = p0; q < p; q++)
            if (strcmp(scalar(node(c, q->key)), ks) == 0)
                return fail(c, k, path, "duplicate key '%s' (first given on line %d)", ks,
                            line_of(node(c, q->key)));
    }
    return 0;
}

static yaml_node_t *lookup(Ctx *c, const yaml_node_t *map, const char *key)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *ks = scalar(node(c, p->key));
        if (ks && strcmp(ks, key) == 0)
            return node(c, p->value);
    }
    return NULL;
}

static int expect_mapping(Ctx *c, const yaml_node_t *n, const char *path, const char *what)
{
    if (!n || n->type != YAML_MAPPING_NODE) {
        char got[96];
        describe(n, got, sizeof got);
        return fail(c, n, path, "expected a mapping (%s), got %s", what, got);
    }
    return 0;
}

static int require(Ctx *c, const yaml_node_t *map, const char *path, const char *key,
                   const char *what, yaml_node_t **out)
{
    *out = lookup(c, map, key);
    if (!*out)
        return fail(c, map, path, "missing required key '%s' (%s)", key, what);
    return 0;
}

/* ---------------------------------------------------------------- scalars */

enum { NUM_POSITIVE, NUM_NONNEG };

/* Accepted range of a number in the file's own unit (0 is also accepted
 * where the rule is NUM_NONNEG).  Finite values beyond these overflowed
 * after unit scaling (bandwidth_gbps: 1e308 -> inf bytes/s, written to
 * plan.json as null) or made every time infinite (tflops_fp16: 1e-300);
 * inside them every product the cost model forms stays far from double's
 * limits.  docs/CLUSTER.md lists them. */
typedef struct NumRange {
    double lo, hi;
    const char *unit;
} NumRange;

static const NumRange R_BANDWIDTH = {1e-6, 1e7, "gigabits/s"};  /* 1 kbit/s .. 10 Pbit/s */
static const NumRange R_LATENCY = {0, 1e9, "microseconds"};     /* .. 1000 s */
static const NumRange R_MEMORY = {1e-6, 1e6, "GiB"};            /* ~1 KiB .. ~1 PiB */
static const NumRange R_TFLOPS = {1e-6, 1e6, "TFLOP/s"};        /* 1 MFLOP/s .. 1 EFLOP/s */
static const NumRange R_HBM = {1e-6, 1e7, "gigabytes/s"};

static int get_number(Ctx *c, const yaml_node_t *n, const char *path, int rule,
                      const NumRange *r, double *out)
{
    const char *s = scalar(n);
    const char *want = rule == NUM_POSITIVE ? "a positive number" : "a non-negative number";
    char got[96];
    describe(n, got, sizeof got);
    if (!s || !*s)
        return fail(c, n, path, "expected %s, got %s", want, got);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end == ' ')
        end++;
    if (end == s || *end || isnan(v) || (isinf(v) && errno != ERANGE))
        return fail(c, n, path, "expected %s, got %s", want, got);
    if ((rule == NUM_POSITIVE && !(v > 0)) || (rule == NUM_NONNEG && !(v >= 0)))
        return fail(c, n, path, "expected %s, got %s", want, got);
    /* ERANGE: beyond double (1e400) or below its smallest normal (1e-320) */
    if (errno == ERANGE || ((v < r->lo || v > r->hi) && !(rule == NUM_NONNEG && v == 0)))
        return fail(c, n, path, "%s is outside [%g, %g] %s%s (hetc's bounds, docs/CLUSTER.md)",
                    s, r->lo, r->hi, r->unit, rule == NUM_NONNEG && r->lo > 0 ? " or 0" : "");
    *out = v;
    return 0;
}

static int get_count(Ctx *c, const yaml_node_t *n, const char *path, int *out)
{
    const char *s = scalar(n);
    char got[96];
    describe(n, got, sizeof got);
    if (!s || !*s)
        return fail(c, n, path, "expected a positive integer, got %s", got);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE)
        return fail(c, n, path, "expected a positive integer, got %s", got);
    if (v <= 0 || v > MAX_DEVICES_PER_MESH)
        return fail(c, n, path, "expected a positive integer (1..%d), got %s", MAX_DEVICES_PER_MESH, got);
    *out = (int)v;
    return 0;
}

static int get_name(Ctx *c, const yaml_node_t *n, const char *path, char *dst, size_t cap)
{
    const char *s = scalar(n);
    char got[96];
    describe(n, got, sizeof got);
    if (!s || !*s)
        return fail(c, n, path, "expected a non-empty name, got %s", got);
    if (strlen(s) >= cap)
        return fail(c, n, path, "name '%.40s...' is too long (at most %zu characters)", s, cap - 1);
    snprintf(dst, cap, "%s", s);
    return 0;
}

/* ---------------------------------------------------------------- parts */

/* {bandwidth_gbps: >0, latency_us: >=0 (default 0)} -> bytes/s, s */
static int parse_net(Ctx *c, const yaml_node_t *n, const char *path, double *bw, double *lat,
                     int *cpu_mediated)
{
    static const char *const keys_net[] = {"bandwidth_gbps", "latency_us"};
    static const char *const keys_link[] = {"bandwidth_gbps", "latency_us", "transport", "between"};
    if (expect_mapping(c, n, path, "{bandwidth_gbps: G, latency_us: U}"))
        return -1;
    if (cpu_mediated) {
        if (check_keys(c, n, path, keys_link, 4))
            return -1;
    } else if (check_keys(c, n, path, keys_net, 2)) {
        return -1;
    }
    char sub[256];
    yaml_node_t *v;
    double g, us = 0;
    if (require(c, n, path, "bandwidth_gbps", "gigabits per second", &v))
        return -1;
    snprintf(sub, sizeof sub, "%s.bandwidth_gbps", path);
    if (get_number(c, v, sub, NUM_POSITIVE, &R_BANDWIDTH, &g))
        return -1;
    if ((v = lookup(c, n, "latency_us"))) {
        snprintf(sub, sizeof sub, "%s.latency_us", path);
        if (get_number(c, v, sub, NUM_NONNEG, &R_LATENCY, &us))
            return -1;
    }
    *bw = g * 1e9 / 8.0;
    *lat = us * 1e-6;
    if (cpu_mediated) {
        *cpu_mediated = 0;
        if ((v = lookup(c, n, "transport"))) {
            const char *t = scalar(v);
            snprintf(sub, sizeof sub, "%s.transport", path);
            if (t && strcmp(t, "cpu-mediated") == 0)
                *cpu_mediated = 1;
            else if (!t || strcmp(t, "device-direct") != 0) {
                char got[96];
                describe(v, got, sizeof got);
                return fail(c, v, sub, "expected 'device-direct' or 'cpu-mediated', got %s", got);
            }
        }
    }
    return 0;
}

static int unknown_device(Ctx *c, const yaml_node_t *n, const char *path, const char *name)
{
    char list[1024] = "";
    for (int i = 0; i < catalog_count(); i++) {
        strncat(list, catalog_at(i)->name, sizeof list - strlen(list) - 1);
        if (i + 1 < catalog_count())
            strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return fail(c, n, path, "unknown device '%.60s' (catalog: %s; or give a mapping with "
                "'base' or all of name, memory_gb, tflops_fp32, tflops_fp16, hbm_gbytes_s)",
                name, list);
}

/* device: KEY | {base: KEY, name, memory_gb, tflops_fp32, tflops_fp16, tflops_bf16, hbm_gbytes_s} */
static int parse_device(Ctx *c, const yaml_node_t *n, const char *path, DeviceSpec *d)
{
    static const char *const keys[] = {"base", "name", "memory_gb", "tflops_fp32",
                                       "tflops_fp16", "tflops_bf16", "hbm_gbytes_s"};
    const char *s = scalar(n);
    if (s) {
        const DeviceSpec *cat = catalog_find(s);
        if (!cat)
            return unknown_device(c, n, path, s);
        *d = *cat;
        return 0;
    }
    if (expect_mapping(c, n, path, "a catalog device name or {base: NAME, overrides...}"))
        return -1;
    if (check_keys(c, n, path, keys, 7))
        return -1;
    char sub[256];
    yaml_node_t *v;
    memset(d, 0, sizeof *d);
    if ((v = lookup(c, n, "base"))) {
        snprintf(sub, sizeof sub, "%s.base", path);
        const char *b = scalar(v);
        const DeviceSpec *cat = b ? catalog_find(b) : NULL;
        if (!cat)
            return unknown_device(c, v, sub, b ? b : kind_name(v));
        *d = *cat;
        d->source = "cluster.yaml override of a catalog entry (base figures: see the catalog)";
        snprintf(d->name, sizeof d->name, "%.40s*", cat->name);
    } else {
        /* A device outside the catalog: everything but BF16 must be given. */
        static const char *const need[] = {"name", "memory_gb", "tflops_fp32", "tflops_fp16", "hbm_gbytes_s"};
        for (int i = 0; i < 5; i++)
            if (!lookup(c, n, need[i]))
                return fail(c, n, path, "missing required key '%s' (a device without 'base' "
                            "needs name, memory_gb, tflops_fp32, tflops_fp16, hbm_gbytes_s)", need[i]);
        d->source = "given in cluster.yaml";
    }
    if ((v = lookup(c, n, "name"))) {
        snprintf(sub, sizeof sub, "%s.name", path);
        if (get_name(c, v, sub, d->name, sizeof d->name))
            return -1;
    }
    struct { const char *key; double *dst; double scale; int rule; const NumRange *r; } nums[] = {
        {"memory_gb", &d->mem_bytes, GIB, NUM_POSITIVE, &R_MEMORY},
        {"tflops_fp32", &d->flops_fp32, 1e12, NUM_POSITIVE, &R_TFLOPS},
        {"tflops_fp16", &d->flops_fp16, 1e12, NUM_NONNEG, &R_TFLOPS},
        {"tflops_bf16", &d->flops_bf16, 1e12, NUM_NONNEG, &R_TFLOPS},
        {"hbm_gbytes_s", &d->hbm_bw, 1e9, NUM_POSITIVE, &R_HBM},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if (!(v = lookup(c, n, nums[i].key)))
            continue;
        snprintf(sub, sizeof sub, "%s.%s", path, nums[i].key);
        double x;
        if (get_number(c, v, sub, nums[i].rule, nums[i].r, &x))
            return -1;
        *nums[i].dst = x * nums[i].scale;
    }
    return 0;
}

static double dtype_peak(const DeviceSpec *d, const char *dtype)
{
    if (strcmp(dtype, "bf16") == 0)
        return d->flops_bf16;
    if (strcmp(dtype, "fp16") == 0)
        return d->flops_fp16;
    return d->flops_fp32;
}

static int parse_mesh(Ctx *c, const yaml_node_t *n, int idx, MeshSpec *m, const char *dtype)
{
    static const char *const keys[] = {"name", "device", "nodes", "devices_per_node",
                                       "intra_node", "inter_node"};
    char path[128], sub[256];
    snprintf(path, sizeof path, "meshes[%d]", idx);
    if (expect_mapping(c, n, path, "a mesh: {name, device, nodes, devices_per_node, intra_node, inter_node}"))
        return -1;
    if (check_keys(c, n, path, keys, 6))
        return -1;
    yaml_node_t *v;
    if (require(c, n, path, "name", "the mesh's name", &v))
        return -1;
    snprintf(sub, sizeof sub, "%s.name", path);
    if (get_name(c, v, sub, m->name, sizeof m->name))
        return -1;
    if (require(c, n, path, "device", "a catalog device name or a mapping", &v))
        return -1;
    snprintf(sub, sizeof sub, "%s.device", path);
    if (parse_device(c, v, sub, &m->dev))
        return -1;
    if (dtype && !(dtype_peak(&m->dev, dtype) > 0))
        return fail(c, v, sub, "device '%s' has no %s tensor throughput; set 'dtype: fp16' "
                    "(or fp32) at the top level, or give tflops_%s", m->dev.name, dtype, dtype);
    if (require(c, n, path, "nodes", "number of nodes N", &v))
        return -1;
    snprintf(sub, sizeof sub, "%s.nodes", path);
    if (get_count(c, v, sub, &m->nodes))
        return -1;
    if (require(c, n, path, "devices_per_node", "devices per node M", &v))
        return -1;
    snprintf(sub, sizeof sub, "%s.devices_per_node", path);
    if (get_count(c, v, sub, &m->per_node))
        return -1;
    if ((long)m->nodes * m->per_node > MAX_DEVICES_PER_MESH)
        return fail(c, n, path, "nodes x devices_per_node = %ld exceeds %d devices",
                    (long)m->nodes * m->per_node, MAX_DEVICES_PER_MESH);
    /* A link is required only where it can be used: intra_node when a node
     * holds more than one device, inter_node when there is more than one node. */
    if ((v = lookup(c, n, "intra_node"))) {
        snprintf(sub, sizeof sub, "%s.intra_node", path);
        if (parse_net(c, v, sub, &m->intra_bw, &m->intra_lat, NULL))
            return -1;
    } else if (m->per_node > 1) {
        return fail(c, n, path, "missing required key 'intra_node' ({bandwidth_gbps, latency_us}; "
                    "needed because devices_per_node > 1)");
    }
    if ((v = lookup(c, n, "inter_node"))) {
        snprintf(sub, sizeof sub, "%s.inter_node", path);
        if (parse_net(c, v, sub, &m->inter_bw, &m->inter_lat, NULL))
            return -1;
    } else if (m->nodes > 1) {
        return fail(c, n, path, "missing required key 'inter_node' ({bandwidth_gbps, latency_us}; "
                    "needed because nodes > 1)");
    }
    return 0;
}

static int mesh_index(const ClusterSpec *cl, const char *name)
{
    for (int i = 0; i < cl->nmeshes; i++)
        if (strcmp(cl->meshes[i].name, name) == 0)
            return i;
    return -1;
}

static int parse_link(Ctx *c, const yaml_node_t *n, int idx, ClusterSpec *cl, LinkSpec *l)
{
    char path[64], sub[128];
    snprintf(path, sizeof path, "links[%d]", idx);
    if (expect_mapping(c, n, path, "{between: [MESH, MESH], bandwidth_gbps, latency_us, transport}"))
        return -1;
    if (parse_net(c, n, path, &l->bw, &l->lat, &l->cpu_mediated))
        return -1;
    yaml_node_t *v;
    if (require(c, n, path, "between", "a list of two mesh names", &v))
        return -1;
    snprintf(sub, sizeof sub, "%s.between", path);
    int cnt = v->type == YAML_SEQUENCE_NODE
                  ? (int)(v->data.sequence.items.top - v->data.sequence.items.start) : -1;
    if (cnt != 2) {
        char got[96];
        if (cnt >= 0)
            snprintf(got, sizeof got, "a list of %d", cnt);
        else
            describe(v, got, sizeof got);
        return fail(c, v, sub, "expected a list of two mesh names, got %s", got);
    }
    int ends[2];
    for (int j = 0; j < 2; j++) {
        yaml_node_t *e = node(c, v->data.sequence.items.start[j]);
        const char *s = scalar(e);
        ends[j] = s ? mesh_index(cl, s) : -1;
        if (ends[j] < 0) {
            char got[96], list[512] = "";
            describe(e, got, sizeof got);
            for (int i = 0; i < cl->nmeshes; i++) {
                strncat(list, cl->meshes[i].name, sizeof list - strlen(list) - 1);
                if (i + 1 < cl->nmeshes)
                    strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            return fail(c, e, sub, "unknown mesh %s (meshes: %s)", got, list);
        }
    }
    if (ends[0] == ends[1])
        return fail(c, v, sub, "a link joins two different meshes, got '%s' twice",
                    cl->meshes[ends[0]].name);
    l->a = ends[0];
    l->b = ends[1];
    return 0;
}

/* ---------------------------------------------------------------- top level */

static int parse_root(Ctx *c, yaml_node_t *root, ClusterSpec *cl)
{
    static const char *const keys[] = {"name", "dtype", "meshes", "links", "default_link"};
    if (expect_mapping(c, root, "", "the top level: {name, dtype, meshes, links, default_link}"))
        return -1;
    if (check_keys(c, root, "", keys, 5))
        return -1;
    yaml_node_t *v;
    if ((v = lookup(c, root, "name")) && get_name(c, v, "name", cl->name, sizeof cl->name))
        return -1;
    int dtype_given = 0;
    if ((v = lookup(c, root, "dtype"))) {
        dtype_given = 1;
        const char *s = scalar(v);
        if (!s || (strcmp(s, "bf16") && strcmp(s, "fp16") && strcmp(s, "fp32"))) {
            char got[96];
            describe(v, got, sizeof got);
            return fail(c, v, "dtype", "expected one of bf16, fp16, fp32, got %s", got);
        }
        snprintf(cl->dtype, sizeof cl->dtype, "%s", s);
    }

    if (require(c, root, "", "meshes", "a list of device meshes", &v))
        return -1;
    int nm = v->type == YAML_SEQUENCE_NODE
                 ? (int)(v->data.sequence.items.top - v->data.sequence.items.start) : -1;
    if (nm <= 0 || nm > MAX_MESHES) {
        char got[96];
        if (nm >= 0)
            snprintf(got, sizeof got, "a list of %d", nm);
        else
            describe(v, got, sizeof got);
        return fail(c, v, "meshes", "expected a list of 1..%d meshes, got %s", MAX_MESHES, got);
    }
    cl->meshes = calloc((size_t)nm, sizeof *cl->meshes);
    if (!cl->meshes)
        return ir_errorf(c->err, "%s: out of memory", c->file);
    for (int i = 0; i < nm; i++) {
        yaml_node_t *mn = node(c, v->data.sequence.items.start[i]);
        if (parse_mesh(c, mn, i, &cl->meshes[i], dtype_given ? cl->dtype : NULL))
            return -1;
        int dup = mesh_index(cl, cl->meshes[i].name);
        cl->nmeshes = i + 1;
        if (dup >= 0) {
            char path[64];
            snprintf(path, sizeof path, "meshes[%d].name", i);
            return fail(c, lookup(c, mn, "name"), path, "duplicate mesh name '%s' (also meshes[%d])",
                        cl->meshes[i].name, dup);
        }
    }

    /* No dtype in the file: the best 16-bit dtype every device has (bf16,
     * else fp16 -- V100s and T4s beside newer cards --, else fp32), so a
     * cluster that never asks for bf16 is not refused for lacking it (the
     * default --precision fp32 does not use this key at all). */
    if (!dtype_given) {
        static const char *const order[] = {"bf16", "fp16", "fp32"};
        for (int k = 0; k < 3; k++) {
            int all = 1;
            for (int i = 0; i < nm; i++)
                all &= dtype_peak(&cl->meshes[i].dev, order[k]) > 0;
            snprintf(cl->dtype, sizeof cl->dtype, "%s", order[k]);
            if (all)
                break;
        }
    }

    /* Every pair of meshes needs a link: the planner tries every mesh order,
     * so any two meshes may end up adjacent in the pipeline. */
    int npairs = nm * (nm - 1) / 2;
    cl->links = calloc((size_t)(npairs ? npairs : 1), sizeof *cl->links);
    if (!cl->links)
        return ir_errorf(c->err, "%s: out of memory", c->file);
    if ((v = lookup(c, root, "links"))) {
        int nl = v->type == YAML_SEQUENCE_NODE
                     ? (int)(v->data.sequence.items.top - v->data.sequence.items.start) : -1;
        if (nl < 0) {
            char got[96];
            describe(v, got, sizeof got);
            return fail(c, v, "links", "expected a list of links, got %s", got);
        }
        for (int i = 0; i < nl; i++) {
            yaml_node_t *ln = node(c, v->data.sequence.items.start[i]);
            LinkSpec l;
            if (parse_link(c, ln, i, cl, &l))
                return -1;
            const LinkSpec *old = cluster_link(cl, l.a, l.b);
            if (old) {
                char path[64];
                snprintf(path, sizeof path, "links[%d].between", i);
                return fail(c, lookup(c, ln, "between"), path, "meshes '%s' and '%s' are already linked",
                            cl->meshes[l.a].name, cl->meshes[l.b].name);
            }
            cl->links[cl->nlinks++] = l;
        }
    }
    LinkSpec def;
    int have_def = 0;
    if ((v = lookup(c, root, "default_link"))) {
        if (parse_net(c, v, "default_link", &def.bw, &def.lat, &def.cpu_mediated))
            return -1;
        if (lookup(c, v, "between"))
            return fail(c, lookup(c, v, "between"), "default_link.between",
                        "unknown key 'between' (default_link applies to every unlinked pair)");
        have_def = 1;
    }
    for (int a = 0; a < nm; a++)
        for (int b = a + 1; b < nm; b++) {
            if (cluster_link(cl, a, b))
                continue;
            if (!have_def)
                return fail(c, root, "links",
                            "meshes '%s' and '%s' have no link and there is no default_link "
                            "(expected a links entry {between: [%s, %s], bandwidth_gbps, latency_us} "
                            "or a default_link)", cl->meshes[a].name, cl->meshes[b].name,
                            cl->meshes[a].name, cl->meshes[b].name);
            def.a = a;
            def.b = b;
            cl->links[cl->nlinks++] = def;
        }
    return 0;
}

int cluster_load_yaml_string(const char *text, const char *name, ClusterSpec *cl, IrError *err)
{
    memset(cl, 0, sizeof *cl);
    if (!name)
        name = "<cluster>";
    if (!text)
        return ir_errorf(err, "%s: no text", name);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return ir_errorf(err, "%s: cannot initialise the YAML parser", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
    if (!yaml_parser_load(&parser, &doc)) {
        int rc = ir_errorf(err, "%s:%d:%d: YAML syntax error: %s%s%s", name,
                           (int)parser.problem_mark.line + 1, (int)parser.problem_mark.column + 1,
                           parser.problem ? parser.problem : "malformed input",
                           parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    Ctx c = {name, &doc, err};
    int rc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        rc = ir_errorf(err, "%s:1: empty file: expected a mapping with at least the key 'meshes'", name);
    } else {
        /* A second document is ignored by most tools; refuse it rather than
         * silently planning for half of what was written. */
        yaml_document_t doc2;
        rc = parse_root(&c, root, cl);
        if (rc == 0) {
            if (!yaml_parser_load(&parser, &doc2)) {
                rc = ir_errorf(err, "%s:%d:%d: YAML syntax error: %s", name,
                               (int)parser.problem_mark.line + 1, (int)parser.problem_mark.column + 1,
                               parser.problem ? parser.problem : "malformed input");
            } else {
                yaml_node_t *r2 = yaml_document_get_root_node(&doc2);
                if (r2)
                    rc = ir_errorf(err, "%s:%d: expected one YAML document, found a second one",
                                   name, line_of(r2));
                yaml_document_delete(&doc2);
            }
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc) {
        cluster_free(cl);
        return -1;
    }
    if (!cl->name[0]) {
        /* Default name: the file's base name without extension. */
        const char *b = strrchr(name, '/');
        b = b ? b + 1 : name;
        snprintf(cl->name, sizeof cl->name, "%s", b);
        char *dot = strrchr(cl->name, '.');
        if (dot && dot != cl->name)
            *dot = 0;
    }
    return 0;
}

int cluster_load_yaml(const char *path, ClusterSpec *cl, IrError *err)
{
    memset(cl, 0, sizeof *cl);
    char ebuf[sizeof err->msg];
    FILE *f = input_fopen(path, ebuf, sizeof ebuf); /* a FIFO would block in fopen() */
    if (!f)
        return ir_errorf(err, "%s", ebuf);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            if (cap > ((size_t)64 << 20)) {
                free(buf);
                fclose(f);
                return ir_errorf(err, "%s: file larger than 64 MiB; not a cluster description", path);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int rerr = ferror(f);
    fclose(f);
    if (!buf)
        return ir_errorf(err, "%s: out of memory", path);
    if (rerr) {
        free(buf);
        return ir_errorf(err, "%s: read error", path);
    }
    buf[len] = 0;
    if (memchr(buf, 0, len)) {
        free(buf);
        return ir_errorf(err, "%s: contains NUL bytes; not a YAML text file", path);
    }
    int rc = cluster_load_yaml_string(buf, path, cl, err);
    free(buf);
    return rc;
}

void cluster_free(ClusterSpec *c)
{
    if (!c)
        return;
    free(c->meshes);
    free(c->links);
    c->meshes = NULL;
    c->links = NULL;
    c->nmeshes = c->nlinks = 0;
}

const LinkSpec *cluster_link(const ClusterSpec *c, int a, int b)
{
    if (!c || a == b)
        return NULL;
    for (int i = 0; i < c->nlinks; i++) {
        const LinkSpec *l = &c->links[i];
        if ((l->a == a && l->b == b) || (l->a == b && l->b == a))
            return l;
    }
    return NULL;
}

int cluster_total_devices(const ClusterSpec *c)
{
    int t = 0;
    for (int i = 0; i < c->nmeshes; i++)
        t += c->meshes[i].nodes * c->meshes[i].per_node;
    return t;
}
