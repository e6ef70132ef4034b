/* hetc compile: plan (hetc plan's steps, or --plan FILE), then per stage:
 * the stage graph at the stage's local batch, training passes, partition
 * (passes/partition.h), memory plan + lowering (codegen/lower_stage.h), LLVM
 * emission and link into DIR/stage_K; the initial parameters as a
 * layer-wise checkpoint (DIR/init); launch.sh / srun.conf / job.sbatch /
 * hostfile.  docs/STAGES.md; the steps: docs/ARCHITECTURE.md.  Every step
 * reads and fills one CompileCtx (compile_ctx.h). */
#include "cmd_compile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends.h"
#include "build_dir.h"
#include "cli.h"
#include "compile_ctx.h"
#include "compile_elastic.h"
#include "compile_launch.h"
#include "compile_opts.h"
#include "compile_plan.h"
#include "compile_stage.h"
#include "layers.h"
#include "loss.h"
#include "modules.h"
#include "planner/cost_model.h"
#include "planner/planner.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    /* the backend list is the table's rows (backends.c), not a copy of it */
    char names[128];
    hetc_backend_names(names, sizeof names);
    fprintf(f,
            "usage: hetc [compile] MODEL.onnx CLUSTER.yaml -o DIR [options]\n"
            "\n"
            "Plan the model onto the cluster (as hetc plan does: plan.json, plan.txt, timeline.*),\n"
            "then build one executable per pipeline stage and the launcher:\n"
            "  DIR/stage_K        stage K's program (LLVM-emitted, linked to hetrt)\n"
            "  DIR/init/          the initial parameters, a layer-wise checkpoint\n"
            "  DIR/launch.sh      one MPMD mpirun of every stage (--data FILE --steps N --resume\n"
            "                     --checkpoint-every N --checkpoint-dir DIR; --hostfile, --slurm)\n"
            "  DIR/srun.conf      Slurm --multi-prog; DIR/hostfile: hosts per mesh (template)\n"
            "  DIR/job.sbatch     the Slurm job in one file: sbatch DIR/job.sbatch --data FILE\n"
            "  DIR/stages.txt     per-stage memory plan beside the planner's prediction\n"
            "\n"
            "compile options:\n"
            "  --plan FILE            compile this plan.json instead of planning (edit a plan, or\n"
            "                         write one by hand: docs/PLAN_FORMAT.md)\n"
            "  --emit-llvm            also write DIR/stage_K.ll\n"
            "  --interpret-nodes      every node through the node interpreter (hetrt_node),\n"
            "                         no direct kernel calls (to compare the two; links it and\n"
            "                         embeds the IR text)\n"
            "  --no-fuse              one kernel call per node: no generated fused elementwise\n"
            "                         kernels (to compare; docs/CODEGEN.md)\n"
            "  --fuse                 with --backend=cuda: the fused elementwise kernels as\n"
            "                         generated PTX too (off by default there until validated\n"
            "                         on a GPU; docs/CUDA.md); the host backend always fuses\n"
            "  --precision fp32|bf16-mixed  training precision.  bf16-mixed: every Linear on bf16\n"
            "                         operands with f32 accumulation, the rest fp32 (planned\n"
            "                         with bf16 GEMM time; docs/TRAINING.md \"Mixed precision\n"
            "                         (bf16)\"); fp32: every tensor fp32.  Default: a --plan\n"
            "                         file's \"precision\" when it has one, else fp32 with\n"
            "                         --backend cuda (its bf16 kernels have not yet run on a\n"
            "                         GPU), else bf16-mixed\n"
            "  --bf16-rounding nearest|stochastic  (bf16-mixed) how the bf16 copies of the\n"
            "                         fp32 master weights are rounded: nearest-even (default)\n"
            "                         or stochastically, as llm.c (docs/TRAINING.md)\n"
            "  --grad-reduce-dtype fp32|bf16  dtype of the gradient all-reduce between DP ranks\n"
            "                         and stages (default fp32, as Megatron; bf16 halves the\n"
            "                         bytes and rounds each partial sum; bf16-mixed only;\n"
            "                         the planner costs it so)\n"
            "  --tp-reduce-dtype fp32|bf16  dtype of the TP all-reduces of activations and\n"
            "                         their gradients (default fp32; bf16 halves the bytes\n"
            "                         and rounds each partial sum, as NCCL's bf16 all-reduce;\n"
            "                         the vocab-parallel loss's statistics stay fp32;\n"
            "                         bf16-mixed, host backend only)\n"
            "  --recompute none|full|selective  activation recompute of every stage, overriding\n"
            "                         the plan's per-stage \"recompute\" (docs/PARTITION.md)\n");
    fprintf(f,
            "  --backend NAME         runtime the stage binaries link: %s (default host);\n"
            "                         cuda runs nodes on an NVIDIA GPU (cuBLASLt, NCCL; docs/CUDA.md)\n",
            names);
    fprintf(f,
            "  --steps N              default --steps of the stage binaries (default 100)\n"
            "training options (as hetc train):\n"
            "  --optimizer adamw|sgd  --lr X (1e-3)  --beta1 X (0.9)  --beta2 X (0.95)\n"
            "  --adam-eps X (1e-8)  --weight-decay X (0.1)  --momentum X (0.9)  --clip X (1.0)\n"
            "  --lr-schedule constant|cosine  --warmup N  --loss xent|xent:ignore=N\n"
            "plan options: see hetc plan --help (all accepted here; --microbatch is the\n"
            "rows of one microbatch, --global-batch the rows of one optimizer step; with\n"
            "--global-batch and no --microbatch the planner searches the microbatch rows\n"
            "and the stage binaries run the chosen ones).\n");
}

static int parse_d(const char *opt, const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) {
        fprintf(stderr, "hetc compile: %s: '%s' is not a number\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

#define OPT_BAD (-1)
#define OPT_HELP 2

/* The training options (hetc train's): 1 consumed, 0 not one, OPT_BAD. */
static int parse_train_opt(CompileArgs *ca, int argc, char **argv, int *i) {
    const char *v = NULL;
    int r;
#define DBL(name, field)                                                      \
    if ((r = cli_opt(argc, argv, i, name, &v)) != 0)                          \
        return r < 0 || parse_d(name, v, &ca->field) ? OPT_BAD : 1;
#define I64(name, field)                                                      \
    if ((r = cli_opt(argc, argv, i, name, &v)) != 0)                          \
        return r < 0 || cli_parse_i64(name, v, &ca->field) ? OPT_BAD : 1;
#define STR(name, field)                                                      \
    if ((r = cli_opt(argc, argv, i, name, &v)) != 0) {                        \
        if (r < 0) return OPT_BAD;                                            \
        ca->field = v;                                                        \
        return 1;                                                             \
    }
    if (cli_old_eps("compile", argv[*i])) return OPT_BAD;
    DBL("--lr", lr) DBL("--beta1", beta1) DBL("--beta2", beta2) DBL("--adam-eps", adam_eps)
    DBL("--weight-decay", weight_decay) DBL("--momentum", momentum) DBL("--clip", clip)
    I64("--steps", steps) I64("--warmup", warmup)
    STR("--optimizer", optimizer) STR("--lr-schedule", lr_schedule) STR("--loss", loss)
    if ((r = cli_opt(argc, argv, i, "--bf16-rounding", &v)) != 0)
        return r < 0 || precision_rounding_parse("hetc compile", v, &ca->bf16_sr) ? OPT_BAD : 1;
#undef DBL
#undef I64
#undef STR
    return 0;
}

/* hetc compile's own options: 1 consumed, 0 not one, OPT_BAD, OPT_HELP. */
static int parse_compile_opt(CompileCtx *c, int argc, char **argv, int *ip) {
    CompileArgs *ca = &c->ca;
    const char *v = NULL;
    int r, i = *ip;
    if ((r = parse_train_opt(ca, argc, argv, ip)) != 0) return r;
    if ((r = cli_opt(argc, argv, ip, "--plan", &v)) != 0) {
        if (r < 0) return OPT_BAD;
        c->plan_file = v;
        return 1;
    }
    if (!strcmp(argv[i], "--emit-llvm")) return ca->emit_llvm = 1;
    if (!strcmp(argv[i], "--interpret-nodes")) return ca->interpret_nodes = 1;
    if (!strcmp(argv[i], "--no-fuse")) return ca->no_fuse = 1;
    if (!strcmp(argv[i], "--fuse")) return ca->fuse = 1;
    if ((r = cli_opt(argc, argv, ip, "--recompute", &v)) != 0) {
        PartRecompute rm;
        if (r < 0) return OPT_BAD;
        if (part_recompute_parse(v, &rm)) {
            fprintf(stderr, "hetc compile: --recompute %s: expected none, full or selective\n",
                    v);
            return OPT_BAD;
        }
        c->recompute = v;
        return 1;
    }
    if ((r = cli_opt(argc, argv, ip, "--backend", &v)) != 0) {
        if (r < 0) return OPT_BAD;
        const HetcBackend *be = hetc_backend_find(v);
        char names[200];
        hetc_backend_names(names, sizeof names);
        if (!be) {
            fprintf(stderr, "hetc compile: --backend must be %s, not '%s'\n", names, v);
            return OPT_BAD;
        }
        if (!hetc_backend_available(be)) {
            fprintf(stderr, "hetc compile: --backend %s: this hetc was built without %s\n", v,
                    be->missing);
            return OPT_BAD;
        }
        ca->backend = be;
        return 1;
    }
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return OPT_HELP;
    return 0;
}

/* The training options' values, once all are in: 0, or exit status 2. */
static int check_train_opts(const CompileArgs *ca) {
    if (strcmp(ca->optimizer, "adamw") && strcmp(ca->optimizer, "sgd")) {
        fprintf(stderr, "hetc compile: --optimizer must be adamw or sgd, not '%s'\n",
                ca->optimizer);
        return 2;
    }
    if (strcmp(ca->lr_schedule, "constant") && strcmp(ca->lr_schedule, "cosine")) {
        fprintf(stderr, "hetc compile: --lr-schedule must be constant or cosine, not '%s'\n",
                ca->lr_schedule);
        return 2;
    }
    if (ca->steps < 1) {
        fprintf(stderr, "hetc compile: --steps must be >= 1\n");
        return 2;
    }
    if (ca->bf16_sr && ca->interpret_nodes) {
        fprintf(stderr, "hetc compile: --bf16-rounding stochastic needs direct calls (the node "
                "interpreter does not know the step its bits are drawn with): leave out "
                "--interpret-nodes\n");
        return 2;
    }
    if (ca->fuse && (ca->no_fuse || ca->interpret_nodes)) {
        fprintf(stderr, "hetc compile: --fuse contradicts %s: give one of them\n",
                ca->no_fuse ? "--no-fuse" : "--interpret-nodes");
        return 2;
    }
    return 0;
}

/* The precision this compile runs (precision.h): --precision; else the
 * --plan file's "precision" (`planned`, "" or NULL: none); else fp32 with
 * --backend cuda, else bf16-mixed.  Then the options that depend on it.
 * 0, or -1 after saying why. */
static int set_precision(CompileCtx *c, const char *planned) {
    PlanArgs *pa = &c->pa;
    const char *be = c->ca.backend ? c->ca.backend->name : "host";
    c->precision_why = "--precision";
    if (!pa->precision_given)
        pa->precision = precision_compile_default(planned, be, &c->precision_why);
    else if (planned && planned[0] && strcmp(planned, precision_name(pa->precision)))
        fprintf(stderr, "hetc compile: --precision %s overrides %s's \"precision\" %s (its "
                "memory and time were planned for %s)\n", precision_name(pa->precision),
                c->plan_file, planned, planned);
    c->ca.bf16_mixed = pa->precision == PRECISION_BF16_MIXED;
    if (precision_rounding_check("hetc compile", c->ca.bf16_sr, pa->precision,
                                 c->precision_why))
        return -1;
    c->ca.grad_reduce_bf16 = pa->grad_reduce_bf16; /* parsed with the plan options */
    if (c->ca.grad_reduce_bf16 && !c->ca.bf16_mixed) {
        fprintf(stderr, "hetc compile: --grad-reduce-dtype bf16 needs --precision bf16-mixed "
                "(this compile runs fp32, %s; an fp32 run reduces its fp32 gradients in fp32)\n",
                c->precision_why);
        return -1;
    }
    c->ca.tp_reduce_bf16 = pa->tp_reduce_bf16;
    if (c->ca.tp_reduce_bf16 && !c->ca.bf16_mixed) {
        fprintf(stderr, "hetc compile: --tp-reduce-dtype bf16 needs --precision bf16-mixed "
                "(this compile runs fp32, %s; an fp32 run sums its fp32 activations in fp32)\n",
                c->precision_why);
        return -1;
    }
    if (c->ca.tp_reduce_bf16 && strcmp(be, "host")) {
        fprintf(stderr, "hetc compile: --tp-reduce-dtype bf16 runs on the host backend only "
                "(the %s runtime all-reduces fp32 activations); leave it out with --backend %s\n",
                be, be);
        return -1;
    }
    if (c->ca.grad_reduce_bf16 && strcmp(be, "host")) {
        fprintf(stderr, "hetc compile: --grad-reduce-dtype bf16 runs on the host backend only "
                "(the %s runtime all-reduces fp32 gradients); leave it out with --backend %s\n",
                be, be);
        return -1;
    }
    return 0;
}

/* Step 0, the command line, parsed once: compile's own options, then hetc
 * plan's (plan_args.c: --microbatch, --layers, the import options ...).
 * -1: go on; otherwise the exit status. */
static int step_parse(CompileCtx *c, int argc, char **argv) {
    compile_args_default(&c->ca);
    plan_args_default(&c->pa, stderr);
    c->argc = argc;
    c->argv = argv;
    for (int i = 1; i < argc; i++) {
        int r = parse_compile_opt(c, argc, argv, &i);
        if (r == OPT_HELP) {
            usage(stdout);
            return 0;
        }
        if (!r) r = plan_args_parse_one(&c->pa, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (argv[i][0] == '-' && argv[i][1]) { /* what hetc plan said of it before */
            fprintf(stderr, "hetc plan: unknown option '%s' (see hetc plan --help)\n", argv[i]);
            return 2;
        }
        if (!c->model) c->model = argv[i];
        else if (!c->cluster) c->cluster = argv[i];
        else {
            fprintf(stderr, "hetc compile: unexpected argument '%s' (MODEL.onnx CLUSTER.yaml)\n",
                    argv[i]);
            return 2;
        }
    }
    if (!c->model || !c->cluster) {
        usage(stderr);
        return 2;
    }
    if (check_train_opts(&c->ca)) return 2;
    if (c->pa.precision == PRECISION_CLUSTER_DTYPE) { /* plan_args accepts it for hetc plan */
        Precision pr;
        precision_parse("hetc compile", "cluster-dtype", 0, &pr);
        return 2;
    }
    /* the precision now, unless a --plan file's "precision" decides it
     * (step_read_plan): the planner plans in it */
    if ((!c->plan_file || c->pa.precision_given) && set_precision(c, NULL)) return 2;
    c->pa.co.model = c->model;
    c->pa.cluster = c->cluster;
    c->pa.co.src = &c->src; /* one read of the model for every import below */
    return -1;
}

/* Step 1, the output: a fresh sibling of the output directory, swapped in
 * at the end (build_dir.h): a compile killed half-way leaves the old
 * build whole.  One id for this compile: every stage binary and launch.sh
 * carry it and check it at start-up. */
static int step_begin(CompileCtx *c, IrError *err) {
    c->final = c->pa.co.out_dir ? c->pa.co.out_dir : "build";
    c->co = c->pa.co; /* the stage graphs': out_dir stays the user's */
    c->t0 = now_s();
    if (build_dir_begin(c->final, c->out_tmp, sizeof c->out_tmp, err)) return 1;
    c->build_id = build_dir_new_id();
    return 0;
}

/* Step 2, the plan: hetc plan's steps (import, passes, modules, layers,
 * profile, search, simulate, outputs) into the new build, the planner's
 * graph kept; or --plan FILE, with nothing planned. */
static int step_plan(CompileCtx *c) {
    if (c->plan_file) {
        snprintf(c->planpath, sizeof c->planpath, "%s", c->plan_file);
        return 0;
    }
    /* the stage binaries split a microbatch's rows evenly over a stage's DP ranks (ZeRO,
     * recompute and TP they run): plan within that.  TP needs no
     * restriction: the planner offers tp > 1 only to stages holding whole attention /
     * MLP patterns that tp_shard shards at that tp (passes/planner/intra_ir.c). */
    c->pa.dp_divides = 1;
    /* no --backend restriction either: the CUDA stage runtime runs TP and ZeRO on
     * NCCL (runtime/cuda/stage_coll_cuda.c, docs/CUDA.md) */
    c->pa.co.out_dir = c->out_tmp; /* hetc plan writes into the new build */
    int prc = plan_args_finish(&c->pa);
    if (prc) return prc;
    plan_ctx_init(&c->pc, &c->pa, "hetc plan");
    prc = plan_pipeline_run(&c->pc);
    if (prc) return prc;
    snprintf(c->planpath, sizeof c->planpath, "%s/plan.json", c->out_tmp);
    c->t_plan = now_s() - c->t0;
    return 0;
}

/* Step 3, the chosen plan as plan.json has it, and the row counts every
 * later step uses: computed here, once. */
static int step_read_plan(CompileCtx *c, IrError *err) {
    if (comp_plan_read(c->planpath, &c->plan, err)) return 1;
    if (c->plan_file && set_precision(c, c->plan.precision)) return -1;
    snprintf(c->plan.precision, sizeof c->plan.precision, "%s", precision_name(c->pa.precision));
    fprintf(stderr, "compile: precision %s (%s)\n", c->plan.precision, c->precision_why);
    if (c->ca.bf16_mixed && c->ca.backend && !strcmp(c->ca.backend->name, "cuda"))
        fprintf(stderr, "hetc compile: note: bf16-mixed on --backend cuda (%s): its bf16 "
                "kernels are compiled but have not yet run on a GPU, the fp32 ones have "
                "(--precision fp32; docs/CUDA.md)\n", c->precision_why);
    if (c->recompute && comp_plan_set_recompute(&c->plan, c->recompute, err)) return 1;
    c->global_batch = c->plan.global_batch;
    c->microbatches = c->plan.microbatches;
    c->rows = c->plan.rows;
    if (c->co.batch > 0 && c->co.batch != c->rows) {
        fprintf(stderr, "hetc compile: --microbatch %lld disagrees with the plan's %lld rows per "
                "microbatch (%s: global_batch / microbatches)\n", (long long)c->co.batch,
                (long long)c->rows, c->planpath);
        return -1;
    }
    c->co.batch = c->rows;
    if (c->co.seq < 0 && c->plan.seq > 0) c->co.seq = c->plan.seq;
    return 0;
}

/* Step 4, layer ids: the planner's graph's (its import, passes, modules,
 * layers); with --plan FILE those steps alone, at the plan's rows. */
static int step_layers(CompileCtx *c, IrError *err) {
    if (c->plan_file) {
        c->pa.co.batch = c->co.batch;
        c->pa.co.seq = c->co.seq;
        c->pa.co.dump_after = NULL;
        plan_ctx_init(&c->pc, &c->pa, "hetc compile");
        c->pc.layers_only = 1;
        if (plan_pipeline_layers(&c->pc)) return -1;
    }
    c->L = c->pc.ls.L;
    const CpStage *last = &c->plan.stages[c->plan.nstages - 1];
    if (last->last_layer != c->L) {
        fprintf(stderr, "hetc compile: %s covers layers 1..%d but the model has %d layers with "
                "these options (pass the same --layers / --min-heavy / --microbatch / --seq the "
                "plan was made with)\n", c->planpath, last->last_layer, c->L);
        return -1;
    }
    if (layer_index_build(&c->lix, c->pc.g, err)) return 1;
    fprintf(stderr, "compile: %d stages, %d layers, %d microbatches of %lld rows x %lld tokens "
            "per step\n", c->plan.nstages, c->L, c->microbatches, (long long)c->rows,
            (long long)c->co.seq);
    return 0;
}

/* Steps 5-9, per stage: stage graphs, partition, initial parameters,
 * memory plan, lowering, emission, link (compile_stage.c, compile_emit.c);
 * then the launchers. */
static int step_stages(CompileCtx *c, CompileStages *cs, IrError *err) {
    memset(cs, 0, sizeof *cs);
    c->co.ibinds.log = NULL; /* said once; not again per stage */
    c->co.report_params = 0;
    cs->plan = &c->plan;
    cs->args = &c->ca;
    cs->co = &c->co;
    cs->out_dir = c->out_tmp;
    cs->build_id = c->build_id;
    cs->nlayers = c->L;
    cs->layers = &c->lix;
    cs->plan_path = c->planpath;
    cs->rows = c->rows;
    int rc = compile_stages(cs, err);
    compile_stages_free(cs);
    if (rc) return 1;
    return compile_write_launchers(c->out_tmp, c->final, &c->plan, c->build_id, err) ||
           compile_write_elastic_env(c->out_tmp, c->argc, c->argv, c->model, c->cluster,
                                     &c->plan, err);
}

/* Step 10: swap the new build in; what was done, how long it took. */
static int step_commit(CompileCtx *c, const CompileStages *cs, IrError *err) {
    if (build_dir_commit(c->final, c->out_tmp, err)) return 1;
    const char *out = c->final;
    fprintf(stderr, "compile: graphs %.2f s, initial parameters %.2f s, lower+emit+link %.2f s\n",
            cs->t_graphs, cs->t_init, cs->t_lower);
    fprintf(stderr, "compile: wrote %s/stage_0..%d, %s/init, %s/launch.sh in %.2f s (plan %.2f s)\n",
            out, c->plan.nstages - 1, out, out, now_s() - c->t0, c->t_plan);
    printf("run it: %s/launch.sh --data TOKENS.bin --steps %lld\n", out, (long long)c->ca.steps);
    fprintf(stderr, "compile: build id %016llx\n", (unsigned long long)c->build_id);
    if (c->pa.co.verbose)
        fprintf(stderr, "compile: model read %d time(s), %d graph(s) built from it\n",
                c->src.reads, c->src.builds);
    return 0;
}

static void compile_ctx_free(CompileCtx *c) {
    layer_index_free(&c->lix);
    plan_ctx_free(&c->pc);
    comp_plan_free(&c->plan);
    model_source_free(&c->src);
}

/* The pipeline, top to bottom (docs/ARCHITECTURE.md). */
int cmd_compile(int argc, char **argv) {
    CompileCtx *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "hetc compile: out of memory\n");
        return 1;
    }
    IrError err = {{0}};
    CompileStages cs;
    memset(&cs, 0, sizeof cs);
    int rc = step_parse(c, argc, argv);
    if (rc >= 0) goto out;
    rc = 1;
    if (step_begin(c, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        goto out;
    }
    int r = step_plan(c);
    if (r) {
        rc = r;
    } else if ((r = step_read_plan(c, &err)) || (r = step_layers(c, &err)) ||
               (r = step_stages(c, &cs, &err)) || (r = step_commit(c, &cs, &err))) {
        if (r > 0) fprintf(stderr, "hetc compile: %s\n", err.msg);
    } else {
        rc = 0;
    }
    if (rc) build_dir_abandon(c->final, c->out_tmp);
out:
    compile_ctx_free(c);
    free(c);
    return rc;
}
