/* The cost model's reports: profile counters as text, and the analytic
 * figures as a profile database (hetc plan --write-profile-db;
 * docs/PROFILE_DB.md) that a measured one can replace entry by entry. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cost_model_int.h"

void cost_counters_summary(const CostCounters *k, char *buf, size_t cap)
{
    snprintf(buf, cap, "profile: %ld candidates, %ld structural duplicates, %ld unique; "
             "%ld pruned (imbalance), %ld costed, %ld infeasible (memory)",
             k->total, k->duplicates, k->unique, k->pruned_imbalance, k->costed, k->pruned_memory);
    if (k->pruned_rows > 0) {
        size_t n = strlen(buf);
        if (n < cap)
            snprintf(buf + n, cap - n, ", %ld infeasible (every dp above the microbatch rows)",
                     k->pruned_rows);
    }
}

void cost_counters_db_summary(const CostCounters *k, const ProfileDb *db, char *buf, size_t cap)
{
    snprintf(buf, cap, "profile db %s: %d entries (%d of another microbatch/seq/dtype skipped), "
             "%d links; costed candidates: %ld from the database, %ld mixed, %ld analytic; layer "
             "lookups: %ld from the database, %ld analytic", db ? db->path : "-", db ? db->ne : 0,
             db ? db->skipped : 0, db ? db->nlinks : 0, k->db_full, k->db_mixed, k->db_none,
             k->db_layer_hits, k->db_layer_misses);
}

int cost_model_write_profile_db(const CostModel *cm, const char *path, int microbatch, int seq,
                                IrError *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ir_errorf(err, "%s: cannot write", path);
    fprintf(f, "{\n  \"format\": \"hetc-profile-db\",\n  \"version\": 1,\n"
            "  \"comment\": \"analytic model figures written by hetc plan --write-profile-db\",\n"
            "  \"layers\": [");
    for (int l = 0; l < cm->L; l++)
        fprintf(f, "%s\"0x%016llx\"", l ? ", " : "", (unsigned long long)cm->layers[l].sig);
    fprintf(f, "],\n  \"entries\": [");
    int first = 1;
    const ClusterSpec *c = cm->c;
    for (int a = 0; a < c->nmeshes; a++) {
        const DeviceSpec *d = &c->meshes[a].dev;
        double peak = device_peak_flops(d, c->dtype) * cm->o.efficiency;
        for (int s = 0; s < cm->nsubs[a]; s++) {
            Submesh sub = cm->subs[a][s];
            /* one entry per (device, submesh): skip what an earlier mesh wrote */
            int seen = 0;
            for (int b = 0; b < a && !seen; b++)
                if (strcasecmp(c->meshes[b].dev.name, d->name) == 0)
                    for (int t = 0; t < cm->nsubs[b] && !seen; t++)
                        seen = cm->subs[b][t].n == sub.n && cm->subs[b][t].m == sub.m;
            if (seen)
                continue;
            int dp = sub.n * sub.m, tp = 1;
            for (int l = 0; l < cm->L; l++) {
                const PlanLayer *p = &cm->layers[l];
                int dup = 0;
                for (int q = 0; q < l && !dup; q++)
                    dup = cm->layers[q].sig == p->sig;
                if (dup)
                    continue;
                double tf, tb;
                cm_layer_roofline(cm, p, d, peak, (double)dp * tp, tp, &tf, &tb);
                double stat = p->param_bytes / cm->dtype_bytes / tp * cm_bytes_per_param(cm, dp);
                char seqs[32] = ""; /* no --seq: the model's own, any on reading */
                if (seq > 0)
                    snprintf(seqs, sizeof seqs, "\"seq\": %d, ", seq);
                fprintf(f, "%s\n    {\"device\": \"%s\", \"layer_sig\": \"0x%016llx\", "
                        "\"submesh\": [%d, %d], \"dp\": %d, \"tp\": %d, \"microbatch\": %d, "
                        "%s\"dtype\": \"%s\", \"t_f\": %.17g, \"t_b\": %.17g, "
                        "\"mem_static\": %.17g, \"mem_act\": %.17g}",
                        first ? "" : ",", d->name, (unsigned long long)p->sig, sub.n, sub.m, dp, tp,
                        microbatch, seqs, c->dtype, tf, tb, stat, p->act_bytes / ((double)dp * tp));
                first = 0;
            }
        }
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0)
        return ir_errorf(err, "%s: write error", path);
    return 0;
}

