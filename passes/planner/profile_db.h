/* Measured profile database (issue 5 part 4; format: docs/PROFILE_DB.md).
 *
 * A profiler (`hetc profile`, the CUDA issue) measures one fine-grained
 * layer at a time: per (device type, layer structural signature, submesh
 * (n, m), intra-op plan dp x tp) and a context (microbatch, seq, dtype) it
 * records t_f, t_b and optionally the layer's static and per-microbatch
 * activation memory per device.  The cost oracle sums those over a stage's
 * layers k..i, exactly as the analytic model sums its per-layer roofline,
 * and falls back to the analytic figure for any layer the database lacks.
 * Optional link entries replace a cluster link's bandwidth and latency.
 *
 * The loader (cJSON) reads the whole file, keeps the entries of the
 * requested context and indexes them; every error names the file, the JSON
 * path (e.g. entries[3].submesh[1]) and what was expected.
 */
#ifndef HETC_PROFILE_DB_H
#define HETC_PROFILE_DB_H

#include <stdint.h>

#include "ir.h"

typedef struct ProfileEntry {
    char device[48];        /* catalog / cluster device name (compared case-insensitively) */
    uint64_t sig;           /* PlanLayer.sig of the layer */
    int n, m;               /* submesh: n nodes x m devices */
    int dp, tp;             /* intra-op plan */
    double t_f, t_b;        /* seconds per microbatch */
    int has_mem;            /* mem_static and mem_act given */
    double mem_static;      /* bytes per device: weights, grads, optimizer states (no reserve) */
    double mem_act;         /* bytes per device per in-flight microbatch */
} ProfileEntry;

typedef struct ProfileLink {
    char a[64], b[64];      /* mesh names; a == b: boundaries inside that mesh */
    double bw, lat;         /* bytes/s, seconds */
} ProfileLink;

typedef struct ProfileDb {
    char path[256];
    ProfileEntry *e;
    int ne;
    int skipped;            /* entries of another microbatch / seq / dtype */
    ProfileLink *links;
    int nlinks;
    int *hslot;             /* open-addressing index into e, -1 empty */
    int nhslot;
} ProfileDb;

/* Load `path`, keeping the entries whose microbatch, seq and dtype equal
 * the arguments (seq <= 0 or dtype NULL: any).  Returns 0, or -1 with err
 * naming the file, the JSON path and what was expected. */
int profile_db_load(const char *path, int microbatch, int seq, const char *dtype, ProfileDb *db,
                    IrError *err);
/* The same from a string; `name` stands for the file in messages. */
int profile_db_load_string(const char *text, const char *name, int microbatch, int seq,
                           const char *dtype, ProfileDb *db, IrError *err);
void profile_db_free(ProfileDb *db);

/* The entry for (device, sig, n, m, dp, tp), or NULL. */
const ProfileEntry *profile_db_find(const ProfileDb *db, const char *device, uint64_t sig, int n,
                                    int m, int dp, int tp);
/* The link entry between two meshes (either order), or NULL. */
const ProfileLink *profile_db_link(const ProfileDb *db, const char *a, const char *b);

#endif
