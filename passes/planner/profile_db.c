/* Profile database loader (format: docs/PROFILE_DB.md).  See profile_db.h. */
#include "profile_db.h"
#include "input_file.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void profile_db_free(ProfileDb *db)
{
    if (!db)
        return;
    free(db->e);
    free(db->links);
    free(db->hslot);
    memset(db, 0, sizeof *db);
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t key_hash(const char *device, uint64_t sig, int n, int m, int dp, int tp)
{
    uint64_t h = 0x70726f66ULL; /* "prof" */
    for (const char *c = device; *c; c++)
        h = mix64(h ^ (uint64_t)tolower((unsigned char)*c));
    h = mix64(h ^ sig);
    h = mix64(h ^ ((uint64_t)(unsigned)n << 32 | (unsigned)m));
    return mix64(h ^ ((uint64_t)(unsigned)dp << 32 | (unsigned)tp));
}

static int same_key(const ProfileEntry *e, const char *device, uint64_t sig, int n, int m, int dp,
                    int tp)
{
    return e->sig == sig && e->n == n && e->m == m && e->dp == dp && e->tp == tp &&
           strcasecmp(e->device, device) == 0;
}

/* Slot of the key: its entry, or the empty slot where it would go. */
static int find_slot(const ProfileDb *db, const char *device, uint64_t sig, int n, int m, int dp,
                     int tp)
{
    int s = (int)(key_hash(device, sig, n, m, dp, tp) & (uint64_t)(db->nhslot - 1));
    while (db->hslot[s] >= 0 && !same_key(&db->e[db->hslot[s]], device, sig, n, m, dp, tp))
        s = (s + 1) & (db->nhslot - 1);
    return s;
}

const ProfileEntry *profile_db_find(const ProfileDb *db, const char *device, uint64_t sig, int n,
                                    int m, int dp, int tp)
{
    if (!db || db->ne == 0)
        return NULL;
    int s = find_slot(db, device, sig, n, m, dp, tp);
    return db->hslot[s] >= 0 ? &db->e[db->hslot[s]] : NULL;
}

const ProfileLink *profile_db_link(const ProfileDb *db, const char *a, const char *b)
{
    if (!db)
        return NULL;
    for (int q = 0; q < db->nlinks; q++) {
        const ProfileLink *l = &db->links[q];
        if ((strcmp(l->a, a) == 0 && strcmp(l->b, b) == 0) ||
            (strcmp(l->a, b) == 0 && strcmp(l->b, a) == 0))
            return l;
    }
    return NULL;
}

/* ------------------------------------------------------------ parsing */

typedef struct P {
    const char *name;
    IrError *err;
} P;

static int fail(const P *p, const char *path, const char *fmt, const char *what)
{
    return ir_errorf(p->err, "%s: %s: %s%s", p->name, path, fmt, what ? what : "");
}

static const char *kind_of(const cJSON *v)
{
    if (!v)
        return "nothing (missing)";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    return "something else";
}

/* A finite number >= 0 (>  0 when positive). */
static int get_num(const P *p, const cJSON *obj, const char *base, const char *key, int positive,
                   double *out)
{
    char path[160];
    snprintf(path, sizeof path, "%s.%s", base, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) {
        char buf[96];
        snprintf(buf, sizeof buf, "expected %s number, got %s",
                 positive ? "a positive" : "a non-negative", kind_of(v));
        return fail(p, path, buf, NULL);
    }
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || (positive && !(d > 0))) {
        char buf[96];
        snprintf(buf, sizeof buf, "expected %s number, got %g",
                 positive ? "a positive" : "a non-negative", d);
        return fail(p, path, buf, NULL);
    }
    *out = d;
    return 0;
}

/* An integer >= 1. */
static int as_int(const P *p, const cJSON *v, const char *path, int *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > 1e9) {
        char buf[96];
        if (cJSON_IsNumber(v))
            snprintf(buf, sizeof buf, "expected an integer >= 1, got %g", v->valuedouble);
        else
            snprintf(buf, sizeof buf, "expected an integer >= 1, got %s", kind_of(v));
        return fail(p, path, buf, NULL);
    }
    *out = (int)v->valuedouble;
    return 0;
}

static int get_int(const P *p, const cJSON *obj, const char *base, const char *key, int *out)
{
    char path[160];
    snprintf(path, sizeof path, "%s.%s", base, key);
    return as_int(p, cJSON_GetObjectItemCaseSensitive(obj, key), path, out);
}

static int get_str(const P *p, const cJSON *obj, const char *base, const char *key, char *out,
                   size_t cap)
{
    char path[160];
    snprintf(path, sizeof path, "%s.%s", base, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v) || !v->valuestring[0]) {
        char buf[96];
        snprintf(buf, sizeof buf, "expected a non-empty string, got %s", kind_of(v));
        return fail(p, path, buf, NULL);
    }
    if (strlen(v->valuestring) >= cap) {
        char buf[96];
        snprintf(buf, sizeof buf, "string longer than %zu characters", cap - 1);
        return fail(p, path, buf, NULL);
    }
    snprintf(out, cap, "%s", v->valuestring);
    return 0;
}

/* Reject keys the format does not define: a typo ("t_fwd") would otherwise
 * silently fall back to the analytic model. */
static int only_keys(const P *p, const cJSON *obj, const char *base, const char *const *keys)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        int ok = 0;
        for (int q = 0; keys[q] && !ok; q++)
            ok = strcmp(c->string, keys[q]) == 0;
        if (!ok) {
            char path[200], buf[320];
            snprintf(path, sizeof path, "%s.%s", base, c->string);
            snprintf(buf, sizeof buf, "unknown key (expected one of: ");
            size_t len = strlen(buf);
            for (int q = 0; keys[q] && len + strlen(keys[q]) + 3 < sizeof buf; q++)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", q ? ", " : "", keys[q]);
            snprintf(buf + len, sizeof buf - len, ")");
            return fail(p, path, buf, NULL);
        }
    }
    return 0;
}

static int parse_entry(const P *p, const cJSON *v, int idx, int microbatch, int seq,
                       const char *dtype, ProfileEntry *e, int *keep)
{
    static const char *const keys[] = {"device", "layer_sig", "submesh", "dp", "tp", "microbatch",
                                       "seq", "dtype", "t_f", "t_b", "mem_static", "mem_act",
                                       "comment", NULL};
    char base[48];
    snprintf(base, sizeof base, "entries[%d]", idx);
    if (!cJSON_IsObject(v)) {
        char buf[96];
        snprintf(buf, sizeof buf, "expected an object, got %s", kind_of(v));
        return fail(p, base, buf, NULL);
    }
    if (only_keys(p, v, base, keys))
        return -1;
    memset(e, 0, sizeof *e);
    if (get_str(p, v, base, "device", e->device, sizeof e->device))
        return -1;
    char sig[40], path[96];
    if (get_str(p, v, base, "layer_sig", sig, sizeof sig))
        return -1;
    snprintf(path, sizeof path, "%s.layer_sig", base);
    char *end = NULL;
    errno = 0;
    unsigned long long s = strtoull(sig, &end, 16);
    if (strncmp(sig, "0x", 2) != 0 || sig[2] == '\0' || *end || errno)
        return fail(p, path, "expected a hexadecimal string \"0x...\" (64-bit structural "
                    "signature), got ", sig);
    e->sig = (uint64_t)s;
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(v, "submesh");
    snprintf(path, sizeof path, "%s.submesh", base);
    if (!cJSON_IsArray(sm) || cJSON_GetArraySize(sm) != 2) {
        char buf[96];
        snprintf(buf, sizeof buf, "expected [n, m] (nodes, devices per node), got %s",
                 cJSON_IsArray(sm) ? "an array of another length" : kind_of(sm));
        return fail(p, path, buf, NULL);
    }
    snprintf(path, sizeof path, "%s.submesh[0]", base);
    if (as_int(p, cJSON_GetArrayItem(sm, 0), path, &e->n))
        return -1;
    snprintf(path, sizeof path, "%s.submesh[1]", base);
    if (as_int(p, cJSON_GetArrayItem(sm, 1), path, &e->m))
        return -1;
    if (get_int(p, v, base, "dp", &e->dp) || get_int(p, v, base, "tp", &e->tp))
        return -1;
    if ((long)e->dp * e->tp != (long)e->n * e->m) {
        snprintf(path, sizeof path, "%s.dp", base);
        char buf[128];
        snprintf(buf, sizeof buf, "expected dp x tp = n x m = %d devices, got %d x %d", e->n * e->m,
                 e->dp, e->tp);
        return fail(p, path, buf, NULL);
    }
    int mb, sq = 0;
    char dt[8];
    if (get_int(p, v, base, "microbatch", &mb))
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(v, "seq") && get_int(p, v, base, "seq", &sq))
        return -1;
    if (get_str(p, v, base, "dtype", dt, sizeof dt))
        return -1;
    if (strcmp(dt, "bf16") && strcmp(dt, "fp16") && strcmp(dt, "fp32")) {
        snprintf(path, sizeof path, "%s.dtype", base);
        return fail(p, path, "expected \"bf16\", \"fp16\" or \"fp32\", got ", dt);
    }
    if (get_num(p, v, base, "t_f", 0, &e->t_f) || get_num(p, v, base, "t_b", 0, &e->t_b))
        return -1;
    int hs = cJSON_GetObjectItemCaseSensitive(v, "mem_static") != NULL;
    int ha = cJSON_GetObjectItemCaseSensitive(v, "mem_act") != NULL;
    if (hs != ha) {
        snprintf(path, sizeof path, "%s.%s", base, hs ? "mem_act" : "mem_static");
        return fail(p, path, "expected mem_static and mem_act together (or neither: analytic "
                    "memory)", NULL);
    }
    if (hs && (get_num(p, v, base, "mem_static", 0, &e->mem_static) ||
               get_num(p, v, base, "mem_act", 0, &e->mem_act)))
        return -1;
    e->has_mem = hs;
    *keep = mb == microbatch && (seq <= 0 || sq == 0 || sq == seq) &&
            (!dtype || strcmp(dt, dtype) == 0);
    return 0;
}

static int parse_link(const P *p, const cJSON *v, int idx, ProfileLink *l)
{
    static const char *const keys[] = {"between", "bandwidth", "latency", "comment", NULL};
    char base[48], path[96];
    snprintf(base, sizeof base, "links[%d]", idx);
    if (!cJSON_IsObject(v)) {
        char buf[96];
        snprintf(buf, sizeof buf, "expected an object, got %s", kind_of(v));
        return fail(p, base, buf, NULL);
    }
    if (only_keys(p, v, base, keys))
        return -1;
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(v, "between");
    snprintf(path, sizeof path, "%s.between", base);
    if (!cJSON_IsArray(bt) || cJSON_GetArraySize(bt) != 2 ||
        !cJSON_IsString(cJSON_GetArrayItem(bt, 0)) || !cJSON_IsString(cJSON_GetArrayItem(bt, 1)))
        return fail(p, path, "expected [\"mesh\", \"mesh\"] (two mesh names of the cluster; the "
                    "same name twice for boundaries inside a mesh)", NULL);
    snprintf(l->a, sizeof l->a, "%s", cJSON_GetArrayItem(bt, 0)->valuestring);
    snprintf(l->b, sizeof l->b, "%s", cJSON_GetArrayItem(bt, 1)->valuestring);
    if (get_num(p, v, base, "bandwidth", 1, &l->bw) || get_num(p, v, base, "latency", 0, &l->lat))
        return -1;
    return 0;
}

/* Line of a byte offset, for parse errors. */
static int line_of(const char *text, const char *at)
{
    int line = 1;
    for (const char *c = text; c < at && *c; c++)
        line += *c == '\n';
    return line;
}

int profile_db_load_string(const char *text, const char *name, int microbatch, int seq,
                           const char *dtype, ProfileDb *db, IrError *err)
{
    memset(db, 0, sizeof *db);
    snprintf(db->path, sizeof db->path, "%s", name);
    P p = {name, err};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root)
        return ir_errorf(err, "%s: line %d: not valid JSON (near \"%.20s\")", name,
                         line_of(text, end ? end : text), end ? end : "");
    int rc = -1;
    static const char *const top[] = {"format", "version", "entries", "links", "layers", "comment",
                                      NULL};
    if (!cJSON_IsObject(root)) {
        fail(&p, "$", "expected an object {\"format\": \"hetc-profile-db\", ...}, got ",
             kind_of(root));
        goto out;
    }
    if (only_keys(&p, root, "$", top))
        goto out;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "hetc-profile-db") != 0) {
        fail(&p, "$.format", "expected \"hetc-profile-db\"", NULL);
        goto out;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
        fail(&p, "$.version", "expected 1 (the only version this hetc reads)", NULL);
        goto out;
    }
    const cJSON *ents = cJSON_GetObjectItemCaseSensitive(root, "entries");
    if (!cJSON_IsArray(ents)) {
        fail(&p, "$.entries", "expected an array of entries, got ", kind_of(ents));
        goto out;
    }
    int n = cJSON_GetArraySize(ents);
    db->e = calloc((size_t)n + 1, sizeof *db->e);
    db->nhslot = 16;
    while (db->nhslot < 2 * n)
        db->nhslot *= 2;
    db->hslot = malloc((size_t)db->nhslot * sizeof *db->hslot);
    if (!db->e || !db->hslot) {
        ir_errorf(err, "%s: out of memory for %d entries", name, n);
        goto out;
    }
    for (int s = 0; s < db->nhslot; s++)
        db->hslot[s] = -1;
    int idx = 0;
    for (const cJSON *v = ents->child; v; v = v->next, idx++) {
        ProfileEntry e;
        int keep = 0;
        if (parse_entry(&p, v, idx, microbatch, seq, dtype, &e, &keep))
            goto out;
        if (!keep) {
            db->skipped++;
            continue;
        }
        int s = find_slot(db, e.device, e.sig, e.n, e.m, e.dp, e.tp);
        if (db->hslot[s] >= 0) {
            char path[48];
            snprintf(path, sizeof path, "entries[%d]", idx);
            ir_errorf(err, "%s: %s: duplicate of an earlier entry for device %s, layer_sig "
                      "0x%016llx, submesh [%d, %d], dp %d, tp %d in the same context", name, path,
                      e.device, (unsigned long long)e.sig, e.n, e.m, e.dp, e.tp);
            goto out;
        }
        db->e[db->ne] = e;
        db->hslot[s] = db->ne++;
    }
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    if (links) {
        if (!cJSON_IsArray(links)) {
            fail(&p, "$.links", "expected an array of links, got ", kind_of(links));
            goto out;
        }
        int nl = cJSON_GetArraySize(links);
        db->links = calloc((size_t)nl + 1, sizeof *db->links);
        if (!db->links) {
            ir_errorf(err, "%s: out of memory", name);
            goto out;
        }
        idx = 0;
        for (const cJSON *v = links->child; v; v = v->next, idx++)
            if (parse_link(&p, v, idx, &db->links[db->nlinks++]))
                goto out;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc) {
        char keep[256];
        memcpy(keep, db->path, sizeof keep);
        profile_db_free(db);
        memcpy(db->path, keep, sizeof keep);
    }
    return rc;
}

int profile_db_load(const char *path, int microbatch, int seq, const char *dtype, ProfileDb *db,
                    IrError *err)
{
    memset(db, 0, sizeof *db);
    char ebuf[sizeof err->msg];
    FILE *f = input_fopen(path, ebuf, sizeof ebuf); /* a FIFO would block in fopen() */
    if (!f)
        return ir_errorf(err, "%s", ebuf);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return ir_errorf(err, "%s: out of memory", path);
        }
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return ir_errorf(err, "%s: read error", path);
    }
    buf[len] = '\0';
    int rc = profile_db_load_string(buf, path, microbatch, seq, dtype, db, err);
    free(buf);
    return rc;
}
