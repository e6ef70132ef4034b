/* hetc profile: the measured profile database of docs/PROFILE_DB.md.
 *
 * For each distinct layer of the planner's layering (PlanLayer.sig, the
 * same options hetc plan takes: --microbatch, --seq, --layers,
 * --min-heavy) the command builds that layer's training graph -- the
 * forward + loss graph at the local batch (microbatch / dp), cut by
 * partition_stage into one stage per layer, so the graph is exactly what a
 * stage binary holding only that layer runs -- and times its forward and
 * backward nodes on the local GPU through the device executor (cudaEvents
 * around cudaexec_call_node: interp/cuda/cudaprof.c).  Memory comes from
 * the same graph: each trained parameter at the planner's model-state
 * bytes (passes/planner/zero_memory.h, --dtype's size, no ZeRO: the layer
 * runs as one DP rank without it; 16 B in every dtype), each read-only one
 * as stored, and the bytes of the forward values (and received boundary
 * activations) its backward nodes read, per microbatch.
 *
 * Two modes need no device: --analytic writes the analytic model's
 * figures for a one-mesh cluster of the device type (the writer of hetc plan
 * --write-profile-db), --dry-run builds every layer graph and runs it on the
 * host executor (times are the host CPU's, said so in the file's comment;
 * it exercises everything but the device).  Without a device (or in a
 * build without CUDA) the default mode exits 1 with "no CUDA device".
 */
#include "cmd_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"
#include "compile_opts.h"
#include "hostexec.h"
#include "layers.h"
#include "loss.h"
#include "modules.h"
#include "optimizer.h"
#include "partition.h"
#include "planner/cost_model.h"
#include "planner/planner.h"
#include "planner/zero_memory.h"
#ifdef HETC_PROFILE_CUDA
#include "cudaprof.h"
#endif

typedef struct ProfArgs {
    const char *device_type, *out, *dtype, *loss;
    int64_t microbatch, layers, min_heavy, n, m, dp, tp, reps, warmup, ordinal;
    int analytic, dry_run;
} ProfArgs;

static void usage(FILE *f) {
    fprintf(f,
            "usage: hetc profile --device-type NAME MODEL.onnx [options] -o profile.json\n"
            "\n"
            "Measures each distinct layer (the planner's structural signatures) on the local\n"
            "GPU: forward and backward time of the layer's training graph through the device\n"
            "executor, and its memory; writes the planner's profile database\n"
            "(docs/PROFILE_DB.md) for hetc plan --profile-db.\n"
            "\n"
            "  --device-type NAME     device name the entries are filed under (the cluster's\n"
            "                         `device:`, e.g. A100-80GB); the local GPU is measured\n"
            "  --microbatch B         rows per microbatch (default 1)\n"
            "  --seq T                sequence length (the model's own when omitted)\n"
            "  --submesh n,m          the stage's submesh (default 1,1)\n"
            "  --dp D  --tp T         intra-op plan, dp x tp = n x m (default dp = n x m, tp = 1);\n"
            "                         the layer runs on B / dp rows, as one DP rank does\n"
            "  --dtype D              the context dtype the entries are filed under (default\n"
            "                         fp32, what the CUDA backend stores; hetc plan uses only\n"
            "                         entries of the cluster's dtype)\n"
            "  --layers N --min-heavy N  layering options: pass the ones given to hetc plan\n"
            "  --loss SPEC            loss of the last layer (default xent)\n"
            "  --reps N --warmup N    timed / untimed runs per layer (default 10, 3); the\n"
            "                         median is written\n"
            "  --device-index I       local GPU ordinal (default 0)\n"
            "  --analytic             write the analytic model's figures instead (no device)\n"
            "  --dry-run              run every layer on the host executor instead (no device;\n"
            "                         host times: for testing the pipeline)\n"
            "  -o FILE                output (default profile.json)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ host dry run */

static int value_index(const IrGraph *g, const IrValue *v) {
    if (v->id >= 0 && v->id < g->nvalues && g->values[v->id] == v) return v->id;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] == v) return i;
    return -1;
}

/* The device runner's host twin: one buffer per value, nodes of one phase
 * through hexec_call_node_into on zeroed outputs, the host clock around. */
static int host_layer(IrGraph *g, int warmup, int reps, double *t_f, double *t_b, IrError *err) {
    void **buf = calloc((size_t)g->nvalues + 1, sizeof *buf);
    double *tf = calloc((size_t)reps, sizeof *tf), *tb = calloc((size_t)reps, sizeof *tb);
    int rc = -1;
    if (!buf || !tf || !tb) {
        ir_errorf(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        if (v->kind == IR_VK_CONST) continue; /* read in place below */
        size_t nb = ir_value_bytes(v);
        if (!(buf[i] = calloc(nb ? nb : 1, 1))) {
            ir_errorf(err, "out of memory for value '%s' (%zu bytes)", v->name, nb);
            goto done;
        }
        if (!v->producer) hexec_fill_pattern(v, buf[i], nb);
    }
    for (int r = 0; r < warmup + reps; r++) {
        double t[3];
        for (int ph = 0; ph < 2; ph++) {
            t[ph] = now_s();
            for (int k = 0; k < g->nnodes; k++) {
                IrNode *n = g->nodes[k];
                if (n->dead || n->phase != (ph ? IR_PHASE_BWD : IR_PHASE_FWD)) continue;
                const void *in[64] = {0};
                void *out[64] = {0};
                if (n->nin > 64 || n->nout > 64) {
                    ir_errorf(err, "node '%s': too many operands", n->name);
                    goto done;
                }
                for (int i = 0; i < n->nin + n->nout; i++) {
                    IrValue *v = i < n->nin ? n->in[i] : n->out[i - n->nin];
                    if (v && value_index(g, v) < 0) {
                        ir_errorf(err, "node '%s': value '%s' is not in the graph", n->name,
                                  v->name);
                        goto done;
                    }
                }
                for (int i = 0; i < n->nin; i++) {
                    IrValue *v = n->in[i];
                    if (!v) continue;
                    if (v->kind == IR_VK_CONST) {
                        if (!(in[i] = ir_value_data(v, err))) goto done;
                    } else {
                        in[i] = buf[value_index(g, v)];
                    }
                }
                for (int i = 0; i < n->nout; i++) {
                    if (!n->out[i]) continue;
                    out[i] = buf[value_index(g, n->out[i])];
                    memset(out[i], 0, ir_value_bytes(n->out[i]));
                }
                if (hexec_call_node_into(n, in, out, err)) goto done;
            }
        }
        t[2] = now_s();
        if (r >= warmup) {
            tf[r - warmup] = t[1] - t[0];
            tb[r - warmup] = t[2] - t[1];
        }
    }
    /* median, as the device runner */
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && tf[j] < tf[j - 1]; j--) {
            double x = tf[j]; tf[j] = tf[j - 1]; tf[j - 1] = x;
        }
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && tb[j] < tb[j - 1]; j--) {
            double x = tb[j]; tb[j] = tb[j - 1]; tb[j - 1] = x;
        }
    *t_f = tf[reps / 2];
    *t_b = tb[reps / 2];
    rc = 0;
done:
    for (int i = 0; buf && i < g->nvalues; i++) free(buf[i]);
    free(buf);
    free(tf);
    free(tb);
    return rc;
}

/* ------------------------------------------------------------ layer graphs */

/* Memory of one layer's stage graph (see the file comment): model states
 * by the formula every planner uses, in dtype_bytes at ZeRO 0 over dp. */
static void layer_memory(const PartStage *ps, double dtype_bytes, int dp, double *mem_static,
                         double *mem_act) {
    IrGraph *g = ps->train;
    double per_param = zero_state_bytes_per_param(dtype_bytes, 0, dp);
    *mem_static = 0;
    for (int p = 0; p < ps->nparams; p++) {
        IrValue *v = ir_graph_find_value(g, ps->params[p].name);
        if (!v) continue;
        int64_t ne = ir_shape_numel(&v->shape);
        *mem_static += ps->params[p].trained ? (ne > 0 ? (double)ne : 0) * per_param
                                             : (double)ir_value_bytes(v);
    }
    /* forward values and received activations that a backward node reads,
     * each once */
    char *seen = calloc((size_t)g->nvalues + 1, 1);
    *mem_act = 0;
    for (int k = 0; seen && k < g->nnodes; k++) {
        IrNode *n = g->nodes[k];
        if (n->dead || n->phase != IR_PHASE_BWD) continue;
        for (int i = 0; i < n->nin; i++) {
            IrValue *v = n->in[i];
            if (!v || v->kind == IR_VK_PARAM || v->kind == IR_VK_CONST) continue;
            int fwd = v->producer ? v->producer->phase == IR_PHASE_FWD
                                  : strncmp(v->name, "bgrad/", 6) != 0;
            int x = value_index(g, v);
            if (!fwd || x < 0 || seen[x]) continue;
            seen[x] = 1;
            *mem_act += (double)ir_value_bytes(v);
        }
    }
    free(seen);
}

/* The forward + loss graph at `local` rows with the layer ids of the
 * planner's graph (by node name, as hetc compile does). */
static IrGraph *layer_graph(const ProfArgs *a, const CompileOpts *co, int64_t local,
                            const LayerIndex *lix, IrError *err) {
    CompileOpts o = *co;
    o.batch = local;
    o.dump_after = NULL;
    o.ibinds.log = NULL; /* the planner graph's import said what it bound */
    PassContext ctx;
    pass_context_default(&ctx);
    LossOpts lo;
    loss_opts_default(&lo);
    if (loss_opts_parse(&lo, a->loss, err)) return NULL;
    IrGraph *g = compile_import(&o, NULL, 0, 0, &ctx, err);
    if (!g || compile_run_passes(g, &o, &ctx, err) ||
        pass_run_pipeline(g, "tie-weights", &ctx, err) || pass_loss_with(g, &lo, err) ||
        pass_run_pipeline(g, "shape-infer", &ctx, err)) {
        ir_graph_free(g);
        return NULL;
    }
    for (int i = 0; i < g->nnodes; i++) g->nodes[i]->layer_id = layer_index_of(lix, g->nodes[i]->name);
    return g;
}

/* ------------------------------------------------------------ analytic */

static int write_analytic(const ProfArgs *a, const CompileOpts *co, const PlanLayer *layers,
                          int L, IrError *err) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "name: profile\ndtype: %s\nmeshes:\n  - name: m\n    device: %s\n"
             "    nodes: %lld\n    devices_per_node: %lld\n",
             a->dtype, a->device_type, (long long)a->n, (long long)a->m);
    ClusterSpec cl;
    memset(&cl, 0, sizeof cl);
    if (cluster_load_yaml_string(yaml, "--device-type/--submesh", &cl, err)) return -1;
    CostOptions cop;
    cost_options_default(&cop);
    CostModel *cm = cost_model_new(&cl, layers, L, &cop, err);
    int rc = cm ? cost_model_write_profile_db(cm, a->out, (int)a->microbatch,
                                              co->seq > 0 ? (int)co->seq : 0, err)
                : -1;
    cost_model_free(cm);
    cluster_free(&cl);
    return rc;
}

/* ------------------------------------------------------------ command */

static int parse_submesh(const char *v, int64_t *n, int64_t *m) {
    long long a, b;
    char c;
    if (sscanf(v, "%lld,%lld%c", &a, &b, &c) != 2 || a < 1 || b < 1) {
        fprintf(stderr, "hetc profile: --submesh expects n,m (two integers >= 1), got '%s'\n", v);
        return -1;
    }
    *n = a;
    *m = b;
    return 0;
}

static int parse_args(int argc, char **argv, ProfArgs *a, CompileOpts *co) {
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
#define I64(opt, field)                                                   \
    if ((r = cli_opt(argc, argv, &i, opt, &v)) != 0) {                    \
        if (r < 0 || cli_parse_i64(opt, v, &a->field)) return 2;          \
        continue;                                                         \
    }
#define STR(opt, field)                                                   \
    if ((r = cli_opt(argc, argv, &i, opt, &v)) != 0) {                    \
        if (r < 0) return 2;                                              \
        a->field = v;                                                     \
        continue;                                                         \
    }
        STR("--device-type", device_type) STR("--dtype", dtype) STR("--loss", loss)
        I64("--microbatch", microbatch) I64("--layers", layers) I64("--min-heavy", min_heavy)
        I64("--dp", dp) I64("--tp", tp) I64("--reps", reps) I64("--warmup", warmup)
        I64("--device-index", ordinal)
#undef I64
#undef STR
        if ((r = cli_opt(argc, argv, &i, "--submesh", &v)) != 0) {
            if (r < 0 || parse_submesh(v, &a->n, &a->m)) return 2;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0 ||
            (r = cli_opt(argc, argv, &i, "--output", &v)) != 0) {
            if (r < 0) return 2;
            a->out = v;
            continue;
        }
        if (!strcmp(argv[i], "--analytic")) {
            a->analytic = 1;
            continue;
        }
        if (!strcmp(argv[i], "--dry-run")) {
            a->dry_run = 1;
            continue;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 1;
        }
        r = compile_opts_parse_one(co, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_take_model("profile", argv[i], &co->model)) return 2;
    }
    return 0;
}

static int check_args(ProfArgs *a, CompileOpts *co) {
    if (!co->model || !a->device_type) {
        fprintf(stderr, "hetc profile: %s is required\n",
                !co->model ? "MODEL.onnx" : "--device-type NAME");
        usage(stderr);
        return 2;
    }
    if (a->analytic && a->dry_run) {
        fprintf(stderr, "hetc profile: --analytic and --dry-run exclude each other\n");
        return 2;
    }
    if (a->microbatch < 1 || a->reps < 1 || a->warmup < 0 || a->min_heavy < 1 || a->layers < 0) {
        fprintf(stderr, "hetc profile: --microbatch, --reps, --min-heavy must be >= 1, "
                "--warmup and --layers >= 0\n");
        return 2;
    }
    if (a->dp == 0) a->dp = a->n * a->m / (a->tp > 0 ? a->tp : 1);
    if (a->dp < 1 || a->tp < 1 || a->dp * a->tp != a->n * a->m) {
        fprintf(stderr, "hetc profile: --dp %lld x --tp %lld must equal the submesh's %lld x %lld "
                "devices\n", (long long)a->dp, (long long)a->tp, (long long)a->n, (long long)a->m);
        return 2;
    }
    if (!a->analytic && a->tp != 1) {
        fprintf(stderr, "hetc profile: --tp %lld: tensor-parallel layers are not measured (their "
                "TpAllReduce has no device kernel); use --analytic for tp > 1\n", (long long)a->tp);
        return 2;
    }
    if (a->analytic && a->tp != 1) {
        fprintf(stderr, "hetc profile: --analytic writes the tp = 1 figures of hetc plan "
                "--write-profile-db; --tp %lld is not supported\n", (long long)a->tp);
        return 2;
    }
    if (!a->analytic && a->microbatch % a->dp) {
        fprintf(stderr, "hetc profile: --microbatch %lld is not divisible by --dp %lld (each DP "
                "rank runs B / dp rows)\n", (long long)a->microbatch, (long long)a->dp);
        return 2;
    }
    if (dtype_size_bytes(a->dtype) <= 0) {
        fprintf(stderr, "hetc profile: --dtype '%s': expected fp32, fp16 or bf16\n", a->dtype);
        return 2;
    }
    co->batch = a->microbatch;
    return 0;
}

static int write_entry(FILE *f, int first, const ProfArgs *a, const CompileOpts *co, uint64_t sig,
                       double tf, double tb, double ms, double ma) {
    char seqs[32] = "";
    if (co->seq > 0) snprintf(seqs, sizeof seqs, "\"seq\": %lld, ", (long long)co->seq);
    return fprintf(f, "%s\n    {\"device\": \"%s\", \"layer_sig\": \"0x%016llx\", "
                   "\"submesh\": [%lld, %lld], \"dp\": %lld, \"tp\": %lld, \"microbatch\": %lld, "
                   "%s\"dtype\": \"%s\", \"t_f\": %.17g, \"t_b\": %.17g, "
                   "\"mem_static\": %.17g, \"mem_act\": %.17g}",
                   first ? "" : ",", a->device_type, (unsigned long long)sig, (long long)a->n,
                   (long long)a->m, (long long)a->dp, (long long)a->tp, (long long)a->microbatch,
                   seqs, a->dtype, tf, tb, ms, ma);
}

/* The database's head: format, how it was measured, the layers' signatures. */
static void write_db_head(FILE *f, const ProfArgs *a, const char *gpu, const PlanLayer *layers,
                          int L) {
    fprintf(f, "{\n  \"format\": \"hetc-profile-db\",\n  \"version\": 1,\n"
            "  \"comment\": \"hetc profile: %s, %lld timed runs (median) after %lld warm-up; "
            "fp32 storage, AdamW%s\",\n  \"layers\": [",
            a->dry_run ? "dry run: HOST executor times, not the device's" : gpu,
            (long long)a->reps, (long long)a->warmup,
            strcmp(a->dtype, "fp32") ? "; filed under another dtype with --dtype" : "");
    for (int l = 0; l < L; l++)
        fprintf(f, "%s\"0x%016llx\"", l ? ", " : "", (unsigned long long)layers[l].sig);
    fprintf(f, "],\n  \"entries\": [");
}

/* Layer l's stage (its fwd + bwd, partition's) timed on the device or
 * the host executor, and its entry in f; 1 after saying what failed. */
static int profile_layer(const ProfArgs *a, const CompileOpts *co, IrGraph *g,
                         const PartSpec *spec, const PlanLayer *layers, int l, FILE *f,
                         int *nent, IrError *err) {
    int failed = 0;
    PartStage ps;
    memset(&ps, 0, sizeof ps);
    double tf = 0, tb = 0, ms = 0, ma = 0, t = now_s();
    if (partition_stage(g, spec, l, &ps, err)) {
        fprintf(stderr, "hetc profile: layer %d: %s\n", l + 1, err->msg);
        return 1;
    }
    layer_memory(&ps, dtype_size_bytes(a->dtype), (int)a->dp, &ms, &ma);
    int nf = 0, nb = 0;
    for (int k = 0; k < ps.train->nnodes; k++) {
        nf += ps.train->nodes[k]->phase == IR_PHASE_FWD;
        nb += ps.train->nodes[k]->phase == IR_PHASE_BWD;
    }
    long long fallbacks = 0;
    if (a->dry_run) {
        failed = host_layer(ps.train, (int)a->warmup, (int)a->reps, &tf, &tb, err);
    } else {
#ifdef HETC_PROFILE_CUDA
        CudaProfResult pr;
        failed = cudaprof_layer(ps.train, (int)a->ordinal, (int)a->warmup, (int)a->reps, &pr,
                                err);
        tf = pr.t_f;
        tb = pr.t_b;
        fallbacks = (long long)pr.fallbacks;
#endif
    }
    if (failed) {
        fprintf(stderr, "hetc profile: layer %d (sig 0x%016llx): %s\n", l + 1,
                (unsigned long long)layers[l].sig, err->msg);
    } else {
        write_entry(f, *nent == 0, a, co, layers[l].sig, tf, tb, ms, ma);
        (*nent)++;
        fprintf(stderr, "layer %3d sig 0x%016llx: %d fwd + %d bwd nodes, t_f %.3g s, t_b "
                "%.3g s, static %.3g MB, act %.3g MB%s (%.2f s)\n", l + 1,
                (unsigned long long)layers[l].sig, nf, nb, tf, tb, ms / 1e6, ma / 1e6,
                fallbacks ? ", some nodes on the host fallback" : "", now_s() - t);
    }
    partition_stage_free(&ps);
    return failed;
}

/* Every distinct layer measured into a->out, one stage per layer of g at
 * `local` rows; 1 after saying what failed (no half database is left). */
static int profile_all(const ProfArgs *a, const CompileOpts *co, IrGraph *g,
                       const PlanLayer *layers, int L, int64_t local, const char *gpu,
                       int *nent, IrError *err) {
    /* one stage per layer: stage l's train graph is layer l+1's fwd + bwd */
    int *first = malloc((size_t)L * sizeof *first), *dps = malloc((size_t)L * sizeof *dps);
    if (!first || !dps) {
        free(first);
        free(dps);
        fprintf(stderr, "hetc profile: out of memory\n");
        return 1;
    }
    for (int l = 0; l < L; l++) {
        first[l] = l + 1;
        dps[l] = 1;
    }
    PartSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.nstages = L;
    spec.first_layer = first;
    spec.last_layer = first;
    spec.dp = dps;
    spec.rows = local;
    optim_opts_default(&spec.optim);

    FILE *f;
    if (!(f = fopen(a->out, "w"))) {
        fprintf(stderr, "hetc profile: %s: cannot write\n", a->out);
        free(first);
        free(dps);
        return 1;
    }
    write_db_head(f, a, gpu, layers, L);
    int failed = 0;
    for (int l = 0; l < L && !failed; l++) {
        int dup = 0;
        for (int q = 0; q < l && !dup; q++) dup = layers[q].sig == layers[l].sig;
        if (dup) continue;
        failed = profile_layer(a, co, g, &spec, layers, l, f, nent, err);
    }
    free(first);
    free(dps);
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0 && !failed) {
        fprintf(stderr, "hetc profile: %s: write error\n", a->out);
        return 1;
    }
    if (failed) {
        remove(a->out); /* no half database */
        return 1;
    }
    return 0;
}

int cmd_profile(int argc, char **argv) {
    ProfArgs a = {.out = "profile.json", .dtype = "fp32", .loss = "xent", .microbatch = 1,
                  .min_heavy = 2, .n = 1, .m = 1, .tp = 1, .reps = 10, .warmup = 3};
    CompileOpts co;
    compile_opts_init(&co);
    compile_opts_bind_extra_inputs(&co, stderr);
    int r = parse_args(argc, argv, &a, &co);
    if (r) return r == 1 ? 0 : r;
    if ((r = check_args(&a, &co))) return r;
    IrError err = {{0}};
    char gpu[256] = "host";
    /* the model is read and decoded once: the layering graph and the layer
     * graphs are both built from it (as hetc compile does) */
    ModelSource src = {0};
    co.src = &src;

    /* the device first: without one, fail before any work */
    if (!a.analytic && !a.dry_run) {
#ifdef HETC_PROFILE_CUDA
        if (!cudaprof_probe((int)a.ordinal, gpu, sizeof gpu, &err)) {
            fprintf(stderr, "hetc profile: %s; --analytic or --dry-run need no device\n", err.msg);
            return 1;
        }
#else
        fprintf(stderr, "hetc profile: no CUDA device (this hetc was built without the CUDA "
                "backend: docs/CUDA.md \"Build\"); --analytic or --dry-run need no device\n");
        return 1;
#endif
    }
    if (!catalog_find(a.device_type))
        fprintf(stderr, "hetc profile: note: '%s' is not in the device catalog; the entries "
                "match a cluster file's device of that name\n", a.device_type);

    int rc = 1;
    IrGraph *lg = NULL, *g = NULL;
    PlanLayer *layers = NULL;
    LayerIndex lix = {0};
    ModuleReport mrep;
    memset(&mrep, 0, sizeof mrep);
    PassContext ctx;
    pass_context_default(&ctx);
    ctx.verbose = co.verbose;
    double t0 = now_s();

    /* the planner's layering: same passes and options as hetc plan */
    CompileOpts lco = co;
    lco.dump_after = NULL;
    lg = compile_import(&lco, NULL, 0, 0, &ctx, &err);
    ModuleOptions mo;
    module_options_default(&mo);
    mo.min_heavy = (int)a.min_heavy;
    LayerOptions lo;
    layer_options_default(&lo);
    lo.target_layers = (int)a.layers;
    lo.param_dtype_bytes = dtype_size_bytes(a.dtype);
    LayerSummary ls;
    if (!lg || compile_check_token_shape(lg, &lco, "--microbatch", &err) ||
        compile_run_passes(lg, &lco, &ctx, &err) || modules_detect(lg, &mo, &mrep, &err) ||
        layers_build(lg, &lo, &layers, &ls, &err)) {
        fprintf(stderr, "hetc profile: %s\n", err.msg);
        goto done;
    }
    int L = ls.L, uniq = 0;
    for (int l = 0; l < L; l++) {
        int dup = 0;
        for (int q = 0; q < l && !dup; q++) dup = layers[q].sig == layers[l].sig;
        uniq += !dup;
    }
    fprintf(stderr, "profile: %d layers, %d distinct; device type %s, submesh [%lld, %lld], "
            "dp %lld, microbatch %lld (%lld rows per rank), %s\n", L, uniq, a.device_type,
            (long long)a.n, (long long)a.m, (long long)a.dp, (long long)a.microbatch,
            (long long)(a.microbatch / a.dp),
            a.analytic ? "analytic model" : a.dry_run ? "host executor (dry run)" : gpu);
    if (a.analytic) {
        if (write_analytic(&a, &co, layers, L, &err)) {
            fprintf(stderr, "hetc profile: %s\n", err.msg);
            goto done;
        }
        fprintf(stderr, "wrote %s (analytic per-layer figures)\n", a.out);
        rc = 0;
        goto done;
    }

    if (layer_index_build(&lix, lg, &err)) {
        fprintf(stderr, "hetc profile: %s\n", err.msg);
        goto done;
    }
    int64_t local = a.microbatch / a.dp;
    if (!(g = layer_graph(&a, &co, local, &lix, &err))) {
        fprintf(stderr, "hetc profile: forward + loss graph at %lld rows: %s\n", (long long)local,
                err.msg);
        goto done;
    }

    int nent = 0;
    if (profile_all(&a, &co, g, layers, L, local, gpu, &nent, &err)) goto done;
    fprintf(stderr, "wrote %s: %d entries in %.2f s\n", a.out, nent, now_s() - t0);
    rc = 0;
done:
    if (co.verbose)
        fprintf(stderr, "profile: model read %d time(s), %d graph(s) built from it\n", src.reads,
                src.builds);
    model_source_free(&src);
    layer_index_free(&lix);
    free(layers);
    module_report_free(&mrep);
    ir_graph_free(lg);
    ir_graph_free(g);
    return rc;
}
