/* hetc train: import, build the training graph (tie-weights, loss,
 * autodiff), then run steps on the host backend: microbatches from an
 * llm.c / nanoGPT token file, gradients accumulated over --accum
 * microbatches (sum / K, as torch accumulating loss / K), global-norm
 * clipping, the learning-rate schedule, and the optimizer step (AdamW or
 * SGD with momentum, kernels/host/hk_train.h) on every parameter. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autodiff.h"
#include "cli.h"
#include "cmd_train.h"
#include "compile_opts.h"
#include "compile_stage.h"
#include "data_loader.h"
#include "rt.h"
#include "hk_parallel.h"
#include "hk_sgemm.h"
#include "hk_train.h"
#include "hostexec.h"
#include "loss.h"
#include "lr_schedule.h"
#include "optimizer.h"
#include "rt_metrics.h"
#include "precision.h"
#include "train_compiled.h"
#include "train_opts.h"
#include "train_state.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: hetc train MODEL.onnx --data TOKENS.bin --steps N [options]\n"
            "\n"
            "Train on this host, one process, in bf16-mixed unless --precision fp32.  By\n"
            "default hetc compiles the model into a one-stage program (hetc compile's stage\n"
            "binary for one device) and runs it; --engine executor runs the host executor.\n"
            "TOKENS.bin is an llm.c token file (header magic 20240520) or, with --data-format\n"
            "raw-u16, nanoGPT's headerless uint16 .bin; step k reads microbatch rows like\n"
            "llm.c's loader.\n"
            "\n"
            "  --data FILE            token file (required)\n"
            "  --data-format llmc|raw-u16  llmc (default) requires the llm.c header's magic\n"
            "  --steps N              optimizer steps (required)\n"
            "  --microbatch B         rows per microbatch (binds the batch dim; default 4)\n"
            "  --seq T                sequence length (binds the sequence dim; default 64)\n"
            "  --accum K              microbatches per step; gradients are averaged (default 1)\n"
            "  --precision fp32|bf16-mixed  training precision (default bf16-mixed).\n"
            "                         bf16-mixed: every Linear (and its gradient) runs on\n"
            "                         bf16 operands with f32 accumulation, as\n"
            "                         torch.autocast(bfloat16); weights, gradients, AdamW\n"
            "                         state, norms, softmax, attention and the loss stay fp32\n"
            "                         (docs/TRAINING.md); fp32: every tensor and kernel fp32\n"
            "  --bf16-rounding nearest|stochastic  (bf16-mixed) the bf16 copies of the fp32\n"
            "                         master weights rounded to nearest-even (default) or\n"
            "                         stochastically, as llm.c\n"
            "  --loss SPEC            xent | xent:ignore=N (default xent)\n"
            "  --optimizer adamw|sgd  (default adamw)\n"
            "  --lr X                 peak learning rate (default 1e-3)\n"
            "  --beta1 X --beta2 X    AdamW betas (default 0.9, 0.95)\n"
            "  --adam-eps X           AdamW epsilon (default 1e-8; --eps is no longer accepted)\n"
            "  --weight-decay X       decoupled (AdamW) or L2 (SGD) decay on parameters of rank\n"
            "                         >= 2; norms and biases are not decayed (default 0.1)\n"
            "  --momentum X           SGD momentum (default 0.9)\n"
            "  --clip X               global gradient-norm clip; 0 = off (default 1.0)\n"
            "  --lr-schedule constant|cosine   (default constant)\n"
            "  --warmup N             warm-up steps of the schedule (default 0)\n"
            "  --checkpoint-dir DIR   where checkpoints go (default: checkpoint)\n"
            "  --checkpoint-every N   also checkpoint every N steps (default: only at the end)\n"
            "  --no-checkpoint        write no checkpoint\n"
            "  --resume               continue from the newest checkpoint in --checkpoint-dir\n"
            "                         (weights, AdamW m and v, the step): the later steps equal\n"
            "                         the uninterrupted run's, bit for bit\n"
            "  --export FILE.onnx     write the trained weights into a copy of MODEL.onnx\n"
            "  --dump-grads DIR       write loss.npy and grad_<param>.npy of the first step\n"
            "                         (before clipping) for checks against a reference\n"
            "  --exec-stats           print the executor's memory plan and the allocations it\n"
            "                         made in step 1 and in the later steps (expected: none)\n"
            "  --metrics FILE         one JSON line per step (loss, grad norm, lr, tokens/s,\n"
            "                         memory) and loss.svg beside it (default:\n"
            "                         CHECKPOINT_DIR/metrics.jsonl, none with\n"
            "                         --no-checkpoint; 'none': off)\n"
            "  --val-data FILE        validation tokens (same format as --data)\n"
            "  --val-every N          validation loss every N steps and after the last\n"
            "                         (default with --val-data: 10)\n"
            "  --val-batches N        microbatches of the validation file per evaluation\n"
            "                         (default 10, at most the file's)\n"
            "  --quiet                only the final line\n"
            "  --engine compiled|executor  how the steps run (default compiled).  compiled:\n"
            "                         hetc compiles the model into a one-stage program for\n"
            "                         this host (the stage binaries' code: direct kernel\n"
            "                         calls, generated fused kernels, one planned arena) and\n"
            "                         runs it: its step lines, checkpoints (the stage\n"
            "                         binaries' layer format) and metrics.  executor: the host\n"
            "                         executor runs the training graph in this process (its\n"
            "                         own step-NNNNNN checkpoints); --dump-grads and\n"
            "                         --exec-stats need it and pick it without --engine\n"
            "  --program-dir DIR      compiled: keep the program in DIR (default: a scratch\n"
            "                         directory removed after the run)\n"
            "  --overwrite-checkpoints  compiled: start afresh in a --checkpoint-dir holding\n"
            "                         another run's checkpoints, deleting them\n");
    compile_opts_help(f);
}


static int parse_d(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "hetc train: %s: '%s' is not a number\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* argv[first..last]: an import option compile_opts_parse_one took.  The
 * compiled engine's `hetc compile` gets it too, but for the options hetc
 * train gives that compile itself (rows, sequence), -o (hetc train's
 * IR-dump directory, not a build) and the IR dumps, which hetc train
 * writes itself from the training graph it builds first. */
static void forward_import_opt(TrainOpts *t, char **argv, int first, int last) {
    static const char *const own[] = {"--batch", "--seq", "-o", "--output", "--dump-ir-after",
                                      "--print-ir", NULL};
    for (int k = 0; own[k]; k++) {
        size_t n = strlen(own[k]);
        if (!strncmp(argv[first], own[k], n) && (!argv[first][n] || argv[first][n] == '='))
            return;
    }
    for (int j = first; j <= last && t->nfwd < TRAIN_FWD_MAX; j++) t->fwd[t->nfwd++] = argv[j];
}

static int parse_args(int argc, char **argv, CompileOpts *co, TrainOpts *t) {
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        int first = i;
        if ((r = compile_opts_parse_one(co, argc, argv, &i)) != 0) {
            if (r < 0) return -1;
            forward_import_opt(t, argv, first, i);
            continue;
        }
#define STR(name, field)                                                     \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                      \
        if (r < 0) return -1;                                                \
        t->field = v;                                                        \
        continue;                                                            \
    }
#define I64(name, field)                                                     \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                      \
        if (r < 0 || cli_parse_i64(name, v, &t->field)) return -1;           \
        continue;                                                            \
    }
#define DBL(name, field)                                                     \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                      \
        if (r < 0 || parse_d(name, v, &t->field)) return -1;                 \
        continue;                                                            \
    }
        if (cli_old_eps("train", argv[i])) return -1;
        STR("--data", data) STR("--data-format", data_format) STR("--loss", loss)
        STR("--optimizer", optimizer)
        STR("--lr-schedule", schedule) STR("--checkpoint-dir", ckpt_dir)
        STR("--export", export_path) STR("--dump-grads", dump_grads)
        STR("--metrics", metrics) STR("--val-data", val_data)
        if ((r = cli_opt(argc, argv, &i, "--precision", &v)) != 0) {
            if (r < 0 || precision_parse("hetc train", v, 0, &t->precision)) return -1;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--bf16-rounding", &v)) != 0) {
            if (r < 0 || precision_rounding_parse("hetc train", v, &t->bf16_sr)) return -1;
            continue;
        }
        I64("--val-every", val_every) I64("--val-batches", val_batches)
        I64("--steps", steps) I64("--accum", accum) I64("--warmup", warmup)
        I64("--checkpoint-every", ckpt_every)
        DBL("--lr", lr) DBL("--beta1", beta1) DBL("--beta2", beta2) DBL("--adam-eps", eps)
        DBL("--weight-decay", wd) DBL("--momentum", momentum) DBL("--clip", clip)
        if ((r = cli_opt(argc, argv, &i, "--microbatch", &v)) != 0) {
            if (r < 0 || cli_parse_i64("--microbatch", v, &co->batch)) return -1;
            continue;
        }
        if (!strcmp(argv[i], "--quiet")) {
            t->quiet = 1;
            continue;
        }
        if (!strcmp(argv[i], "--exec-stats")) {
            t->exec_stats = 1;
            continue;
        }
        if (!strcmp(argv[i], "--no-checkpoint")) {
            t->no_ckpt = 1;
            continue;
        }
        if (!strcmp(argv[i], "--resume")) {
            t->resume = 1;
            continue;
        }
        if (!strcmp(argv[i], "--overwrite-checkpoints")) {
            t->overwrite = 1;
            continue;
        }
        STR("--program-dir", program_dir)
        if ((r = cli_opt(argc, argv, &i, "--engine", &v)) != 0) {
            if (r < 0) return -1;
            t->engine_given = 1;
            if (!strcmp(v, "executor")) t->engine = TRAIN_ENGINE_EXECUTOR;
            else if (!strcmp(v, "compiled")) t->engine = TRAIN_ENGINE_COMPILED;
            else {
                fprintf(stderr, "hetc train: --engine must be executor or compiled, not '%s'\n", v);
                return -1;
            }
            continue;
        }
        if (cli_take_model("train", argv[i], &co->model)) return -1;
    }
#undef STR
#undef I64
#undef DBL
    if (!co->model || !t->data || t->steps <= 0) {
        fprintf(stderr, "hetc train: MODEL.onnx, --data and --steps N (N > 0) are required\n");
        return -1;
    }
    if (t->accum < 1) {
        fprintf(stderr, "hetc train: --accum must be at least 1\n");
        return -1;
    }
    if ((t->val_every || t->val_batches) && !t->val_data) {
        fprintf(stderr, "hetc train: --val-every / --val-batches need --val-data FILE\n");
        return -1;
    }
    if (t->val_data && !t->val_every) t->val_every = 10;
    if (t->val_data && !t->val_batches) t->val_batches = 10;
    if (t->val_every < 0 || t->val_batches < 0) {
        fprintf(stderr, "hetc train: --val-every and --val-batches must be at least 1\n");
        return -1;
    }
    if (strcmp(t->optimizer, "adamw") && strcmp(t->optimizer, "sgd")) {
        fprintf(stderr, "hetc train: --optimizer must be adamw or sgd, not '%s'\n", t->optimizer);
        return -1;
    }
    if (precision_rounding_check("hetc train", t->bf16_sr, t->precision, "--precision"))
        return -1;
    if (t->engine == TRAIN_ENGINE_COMPILED) {
        /* what only the executor's in-process loop can do: without --engine it
         * picks the executor, with --engine compiled it is refused */
        const char *only = t->dump_grads ? "--dump-grads" : t->exec_stats ? "--exec-stats" : NULL;
        if (only && !t->engine_given && !t->program_dir && !t->overwrite) {
            if (!t->quiet)
                printf("hetc train: %s: running the executor engine (--engine executor)\n", only);
            t->engine = TRAIN_ENGINE_EXECUTOR;
        } else if (only) {
            fprintf(stderr, "hetc train: %s needs the executor (--engine executor): the compiled "
                    "program keeps its gradients and memory plan inside its own process\n", only);
            return -1;
        }
        if (t->nfwd == TRAIN_FWD_MAX) {
            fprintf(stderr, "hetc train: --engine compiled: more than %d import-option words\n",
                    TRAIN_FWD_MAX - 1);
            return -1;
        }
    } else if (t->program_dir || t->overwrite) {
        fprintf(stderr, "hetc train: %s belongs to --engine compiled\n",
                t->program_dir ? "--program-dir" : "--overwrite-checkpoints");
        return -1;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Output names may contain '/' and ':' (ONNX initializer names). */
static void safe_name(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src);
    for (char *c = dst; *c; c++)
        if (*c == '/' || *c == ':') *c = '_';
}

/* The executor arenas of the train and update runs, bytes. */
static double train_arena_bytes(const TrainState *st) {
    HxRunStats a, b;
    hexec_run_stats(st->run, &a);
    hexec_run_stats(st->urun, &b);
    return (double)(a.arena_bytes + b.arena_bytes);
}

/* Validation loss: the mean loss over the first `nb` microbatches of the
 * validation file with the parameters as they are (llm.c / nanoGPT's
 * evaluation).  The executor runs forward and backward as one graph, so the
 * gradients are computed and discarded (zeroed before, accumulated with
 * scale 0; the next step zeroes them again): the update never sees them. */
static int val_loss(TrainState *st, RtDataLoader *vdl, int64_t nb, IrTensor *const *in,
                    double *out, IrError *err) {
    char rerr[RT_ERRLEN];
    double sum = 0;
    train_state_zero_grads(st);
    for (int64_t b = 0; b < nb; b++) {
        double l;
        if (rt_data_batch(vdl, b, in[0]->data, in[1]->data, rerr))
            return ir_errorf(err, "--val-data: %s", rerr);
        if (train_state_forward_backward(st, in, 2, 0.0f, &l, err)) return -1;
        sum += l;
    }
    *out = nb ? sum / (double)nb : NAN;
    return 0;
}

static int dump_first(const char *dir, TrainState *st, double loss, IrError *err) {
    char path[4096], nm[1024];
    if (cli_mkdirs(dir, err)) return -1;
    IrShape s0 = {0};
    IrTensor *t = ir_tensor_new("loss", IR_F32, &s0);
    *(float *)t->data = (float)loss;
    snprintf(path, sizeof path, "%s/loss.npy", dir);
    int rc = hetc_write_npy(path, t, err);
    ir_tensor_free(t);
    for (int i = 0; i < st->nparams && !rc; i++) {
        TrainParam *p = &st->params[i];
        safe_name(nm, sizeof nm, p->value->name);
        snprintf(path, sizeof path, "%s/grad_%s.npy", dir, nm);
        IrTensor tt = {.name = p->value->name, .dtype = IR_F32, .shape = p->value->shape,
                       .data = (void *)train_state_grad(st, i), .nbytes = (size_t)p->n * sizeof(float)};
        rc = hetc_write_npy(path, &tt, err);
    }
    return rc;
}

/* The executor runs' memory plans and allocations (--exec-stats): after
 * step 1 the step loop must allocate nothing (tests/train checks it). */
static void print_exec_stats(const TrainState *st, int64_t allocs1) {
    HxRunStats a, b;
    hexec_run_stats(st->run, &a);
    hexec_run_stats(st->urun, &b);
    printf("exec: train arena %lld B (outputs %lld B), %d in place | update arena %lld B "
           "(outputs %lld B), %d in place, %d over donated P/m/v/grad\n",
           (long long)a.arena_bytes, (long long)a.value_bytes, a.inplace,
           (long long)b.arena_bytes, (long long)b.value_bytes, b.inplace, b.donated);
    printf("exec: allocations: %lld in step 1, %lld in steps 2..%lld\n", (long long)allocs1,
           (long long)(a.allocs + b.allocs - allocs1), (long long)st->step);
    /* which OpenBLAS kernel ran (OPENBLAS_CORETYPE picks it on some machines) */
    char blas[256];
    hk_blas_info(blas, sizeof blas);
    printf("exec: %d kernel threads; BLAS %s (single-threaded under the kernel pool)\n",
           hk_parallel_threads(), blas);
}

/* The training data (and --val-data) loaders, their ids checked against
 * the model's vocabulary; 1 after saying what is wrong. */
static int open_data(TrainOpts *t, const CompileOpts *co, const IrGraph *g, RtDataLoader *dl,
                     RtDataLoader *vdl) {
    char rerr[RT_ERRLEN] = "";
    RtTokenFormat fmt = RT_TOKENS_LLMC;
    if (t->data_format && rt_token_format_parse(t->data_format, &fmt)) {
        fprintf(stderr, "hetc train: --data-format %s: expected llmc or raw-u16\n", t->data_format);
        return 1;
    }
    if (rt_data_open_format(dl, t->data, fmt, co->batch, co->seq, 0, 1, rerr)) {
        fprintf(stderr, "hetc train: %s: %s\n", t->data, rerr);
        return 1;
    }
    /* token ids must index the model's vocabulary (an id past it is a clear
     * error naming the file, not a read outside the embedding) */
    dl->vocab = graph_token_vocab(g, input_binds_token_input(g));
    if (dl->vocab > 0 && rt_data_check_vocab(dl, dl->vocab, rerr)) {
        fprintf(stderr, "hetc train: %s\n", rerr);
        return 1;
    }
    if (t->val_data) {
        if (rt_data_open_format(vdl, t->val_data, fmt, co->batch, co->seq, 0, 1, rerr)) {
            fprintf(stderr, "hetc train: --val-data %s: %s\n", t->val_data, rerr);
            return 1;
        }
        vdl->vocab = dl->vocab;
        if (vdl->vocab > 0 && rt_data_check_vocab(vdl, vdl->vocab, rerr)) {
            fprintf(stderr, "hetc train: --val-data: %s\n", rerr);
            return 1;
        }
        if (t->val_batches > vdl->nbatches) t->val_batches = vdl->nbatches;
    }
    return 0;
}

/* --metrics FILE (default: beside the checkpoints); 1 after saying why not. */
static int open_metrics(const TrainOpts *t, RtMetrics *met, int64_t resume_step) {
    char mdef[4200], merr[512];
    /* default: beside the checkpoints; --no-checkpoint writes no files
     * unless --metrics names one */
    const char *mp = t->metrics ? t->metrics : t->no_ckpt ? "none" : NULL;
    if (!mp) {
        snprintf(mdef, sizeof mdef, "%s/metrics.jsonl", t->ckpt_dir);
        mp = mdef;
    }
    if (strcmp(mp, "none") && rt_metrics_open(met, mp, NULL, resume_step, merr, sizeof merr)) {
        fprintf(stderr, "hetc train: --metrics: %s\n", merr);
        return 1;
    }
    return 0;
}

/* Step `step`'s forward + backward over t->accum microbatches: gradients
 * summed, *loss their mean; 1 after saying what failed. */
static int accumulate(TrainState *st, const TrainOpts *t, RtDataLoader *dl, IrTensor **in,
                      int64_t step, double *loss, IrError *err) {
    char rerr[RT_ERRLEN] = "";
    *loss = 0;
    train_state_zero_grads(st);
    for (int64_t a = 0; a < t->accum; a++) {
        int64_t mb = (step * t->accum + a) % (dl->nbatches > 0 ? dl->nbatches : 1);
        if (rt_data_batch(dl, mb, in[0]->data, in[1]->data, rerr)) {
            fprintf(stderr, "hetc train: %s\n", rerr);
            return 1;
        }
        double l;
        if (train_state_forward_backward(st, in, 2, 1.0f / (float)t->accum, &l, err)) {
            fprintf(stderr, "hetc train: step %lld: %s\n", (long long)step + 1, err->msg);
            return 1;
        }
        *loss += l / (double)t->accum;
    }
    return 0;
}

/* After step `step`'s update: validation, the metrics line, checkpoints;
 * 1 after saying what failed. */
static int after_step(TrainState *st, const TrainOpts *t, RtDataLoader *vdl, IrTensor **in,
                      RtMetrics *met, int64_t step, const RtStepMetrics *base, IrError *err) {
    int last = step + 1 == t->steps;
    double vl = NAN;
    if (t->val_data && (last || (step + 1) % t->val_every == 0)) {
        if (val_loss(st, vdl, t->val_batches, in, &vl, err)) {
            fprintf(stderr, "hetc train: validation at step %lld: %s\n", (long long)step + 1,
                    err->msg);
            return 1;
        }
        printf("step %5lld/%lld | val loss %.9g (%lld batches of %s)\n", (long long)step + 1,
               (long long)t->steps, vl, (long long)t->val_batches, t->val_data);
        fflush(stdout);
    }
    /* one process on the host: no plan, no device peak, so no MFU (the
     * FLOPs are there for a user's own peak) */
    RtStageTimes one = {.stage = 0, .ranks = 1, .compute_s = base->step_s,
                        .arena_bytes = train_arena_bytes(st),
                        .peak_rss_bytes = rt_peak_rss_bytes()};
    RtStepMetrics sm = *base;
    sm.step = step + 1;
    sm.val_loss = vl;
    sm.stages = &one;
    sm.nstages = 1;
    if (rt_metrics_step(met, &sm)) {
        fprintf(stderr, "hetc train: --metrics: cannot write the line of step %lld\n",
                (long long)step + 1);
        return 1;
    }
    if (!t->no_ckpt && (last || (t->ckpt_every > 0 && (step + 1) % t->ckpt_every == 0)) &&
        train_state_save(st, t->ckpt_dir, step + 1, err)) {
        fprintf(stderr, "hetc train: checkpoint: %s\n", err->msg);
        return 1;
    }
    return 0;
}

/* After the last step: --export, then the metrics file closed (its
 * loss.svg written).  The run's status rc, or 1 after saying what failed. */
static int finish_run(const TrainOpts *t, TrainState *st, const char *model, RtMetrics *met,
                      int rc, IrError *err) {
    if (!rc && t->export_path && train_state_export_onnx(st, model, t->export_path, err)) {
        fprintf(stderr, "hetc train: --export: %s\n", err->msg);
        rc = 1;
    }
    char merr[512];
    if (met->f && rt_metrics_close(met, merr, sizeof merr)) {
        fprintf(stderr, "hetc train: --metrics: %s\n", merr);
        rc = 1;
    }
    return rc;
}

/* --resume: load the newest checkpoint of t->ckpt_dir into st.  0 loaded,
 * 1 after saying why not, 2 when it already reaches --steps (said so). */
static int resume_state(const TrainOpts *t, TrainState *st, IrError *err) {
    char sd[4200];
    int64_t n;
    int r = train_state_newest(t->ckpt_dir, &n, sd, sizeof sd, err);
    if (r) {
        if (r > 0)
            fprintf(stderr, "hetc train: --resume: no checkpoint in '%s' (a complete "
                    "step-NNNNNN/ with its MANIFEST); see --checkpoint-dir\n", t->ckpt_dir);
        else
            fprintf(stderr, "hetc train: --resume: %s\n", err->msg);
        return 1;
    }
    if (train_state_load(st, sd, err)) {
        fprintf(stderr, "hetc train: --resume: %s\n", err->msg);
        return 1;
    }
    if (st->step >= t->steps) {
        printf("hetc train: the checkpoint %s is at step %lld, --steps is %lld: nothing to "
               "train\n", sd, (long long)st->step, (long long)t->steps);
        return 2;
    }
    if (!t->quiet) printf("hetc train: resumed from %s (step %lld)\n", sd, (long long)st->step);
    return 0;
}

/* The training graph both engines start from: import, the forward passes,
 * tie-weights, the loss, (mixed-precision,) autodiff.  NULL with err set. */
static IrGraph *train_graph(CompileOpts *co, const TrainOpts *t, const LossOpts *lo,
                            PassContext *ctx, IrError *err) {
    IrGraph *g = compile_import(co, NULL, 0, 0, ctx, err);
    if (!g || compile_check_token_shape(g, co, "--microbatch", err) ||
        compile_run_passes(g, co, ctx, err) ||
        pass_run_pipeline(g, "tie-weights", ctx, err) || pass_loss_with(g, lo, err) ||
        pass_maybe_dump(g, "loss", ctx, err) || (ctx->dump_index++, 0) ||
        pass_run_pipeline(g, t->precision != PRECISION_BF16_MIXED ? "autodiff,shape-infer"
                             : t->bf16_sr ? "mixed-precision,stochastic-rounding,autodiff,shape-infer"
                                          : "mixed-precision,autodiff,shape-infer", ctx, err)) {
        if (g) ir_graph_free(g);
        return NULL;
    }
    return g;
}

static void optim_opts_of(const TrainOpts *t, OptimOpts *oo) {
    optim_opts_default(oo);
    oo->sgd = !strcmp(t->optimizer, "sgd");
    oo->beta1 = t->beta1, oo->beta2 = t->beta2, oo->eps = t->eps, oo->weight_decay = t->wd;
    oo->momentum = t->momentum, oo->clip = t->clip;
}

/* The trained parameters of a training graph: its grad/<param> outputs. */
static int count_trained(const IrGraph *g, int64_t *elements) {
    int n = 0;
    *elements = 0;
    for (int j = 0; j < g->noutputs; j++)
        if (!strncmp(g->outputs[j]->name, "grad/", 5)) {
            n++;
            *elements += ir_shape_numel(&g->outputs[j]->shape);
        }
    return n;
}

/* --resume with the compiled engine: a --checkpoint-dir holding the
 * executor's step-NNNNNN/ checkpoints and none of the program's layer-wise
 * ones would start afresh from the initial weights (the program resumes
 * from its own format, or starts from init/ without one): 1 after saying
 * so, 0 otherwise. */
static int executor_checkpoints(const char *dir) {
    char path[4200], e[RT_ERRLEN];
    int64_t step;
    IrError err = {{0}};
    if (rt_checkpoint_latest(dir, path, sizeof path, &step, e, sizeof e) != 1 ||
        train_state_newest(dir, &step, path, sizeof path, &err))
        return 0;
    fprintf(stderr, "hetc train: --resume: %s holds hetc train --engine executor's checkpoints "
            "(%s, step %lld), not the compiled program's; continue them with --engine executor\n",
            dir, path, (long long)step);
    return 1;
}

/* --engine compiled: compile and run the one-stage program
 * (train_compiled.c).  The training graph is built here first, as the
 * executor builds it (import, passes, loss, autodiff): a model that cannot
 * train, or token files it cannot read (ids past its vocabulary included),
 * are said before anything is compiled; the `params:` line, the header and
 * --dump-ir-after / --print-ir come from it; it is freed before the
 * program runs (its weights would sit beside the program's).  --export
 * builds it again and loads the program's final checkpoint into it. */
static int train_with_program(CompileOpts *co, TrainOpts *t, const LossOpts *lo,
                              PassContext *ctx) {
    IrError err = {{0}};
    TrainState st;
    memset(&st, 0, sizeof st);
    OptimOpts oo;
    optim_opts_of(t, &oo);
    RtDataLoader dl, vdl;
    memset(&dl, 0, sizeof dl);
    memset(&vdl, 0, sizeof vdl);
    IrGraph *g = train_graph(co, t, lo, ctx, &err);
    if (!g) {
        fprintf(stderr, "hetc train: %s\n", err.msg);
        return 1;
    }
    int rc = open_data(t, co, g, &dl, &vdl);
    /* the update graph is the optimizer pass's: the executor's dump of it */
    if (!rc && co->dump_after &&
        (train_state_init(&st, g, &oo, &err) || pass_maybe_dump(st.upd, "optimizer", ctx, &err))) {
        fprintf(stderr, "hetc train: %s\n", err.msg);
        rc = 1;
    }
    if (!rc && !t->quiet) {
        int64_t elements;
        int n = count_trained(g, &elements);
        printf("hetc train: %s, %d parameters (%lld elements), %lld tokens/step, %s, %s%s, data "
               "%s (%s, %lld microbatches)\n", co->model, n, (long long)elements,
               (long long)(co->batch * co->seq * t->accum), t->optimizer,
               precision_name(t->precision), t->bf16_sr ? " (weights rounded stochastically)" : "",
               t->data, rt_token_format_name(dl.format),
               (long long)dl.nbatches);
    }
    rt_data_close(&vdl);
    rt_data_close(&dl);
    train_state_free(&st);
    ir_graph_free(g);
    if (rc || (t->resume && !t->no_ckpt && executor_checkpoints(t->ckpt_dir))) return 1;
    TrainCompiled tc;
    rc = train_compiled_run(&tc, co, t);
    if (!rc && t->export_path) {
        co->report_params = 0; /* said above */
        co->print_ir = 0;
        ctx->dump_after = NULL;
        memset(&st, 0, sizeof st);
        g = train_graph(co, t, lo, ctx, &err);
        if (!g || train_state_init(&st, g, &oo, &err) ||
            train_state_load_weights_layers(&st, tc.final_step, &err) ||
            train_state_export_onnx(&st, co->model, t->export_path, &err)) {
            fprintf(stderr, "hetc train: --export: %s\n", err.msg);
            rc = 1;
        } else if (!t->quiet) {
            printf("hetc train: exported the weights of %s to %s\n", tc.final_step,
                   t->export_path);
        }
        train_state_free(&st);
        if (g) ir_graph_free(g);
    }
    train_compiled_cleanup(&tc);
    return rc;
}

int cmd_train(int argc, char **argv) {
    CompileOpts co;
    compile_opts_init(&co);
    co.batch = 4;
    co.seq = 64;
    TrainOpts t = {.loss = "xent", .optimizer = "adamw", .schedule = "constant",
                   .ckpt_dir = "checkpoint", .accum = 1, .lr = 1e-3, .beta1 = 0.9,
                   .beta2 = 0.95, .eps = 1e-8, .wd = 0.1, .momentum = 0.9, .clip = 1.0,
                   .precision = PRECISION_BF16_MIXED, /* precision.h: the default */
                   .engine = TRAIN_ENGINE_COMPILED};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    if (parse_args(argc, argv, &co, &t)) return 2;
    compile_opts_bind_extra_inputs(&co, t.quiet ? NULL : stdout);
    IrError err = {{0}};
    PassContext ctx;
    pass_context_default(&ctx);
    ctx.dump_after = co.dump_after;
    char irdir[4096];
    snprintf(irdir, sizeof irdir, "%s/ir", co.out_dir ? co.out_dir : "build");
    ctx.dump_dir = irdir;
    ctx.verbose = co.verbose;
    if (co.dump_after && cli_mkdirs(irdir, &err) != 0) {
        fprintf(stderr, "hetc train: %s\n", err.msg);
        return 1;
    }
    LossOpts lo;
    loss_opts_default(&lo);
    RtLrSchedule sched = {.max_lr = t.lr, .warmup_steps = t.warmup, .decay_steps = t.steps,
                          .min_lr_ratio = 0.1};
    if (rt_lr_kind_from_name(t.schedule, &sched.kind)) {
        fprintf(stderr, "hetc train: --lr-schedule must be constant or cosine\n");
        return 2;
    }
    if (loss_opts_parse(&lo, t.loss, &err)) {
        fprintf(stderr, "hetc train: %s\n", err.msg);
        return 2;
    }
    co.report_params = !t.quiet;
    if (t.engine == TRAIN_ENGINE_COMPILED) return train_with_program(&co, &t, &lo, &ctx);
    int rc = 1;
    RtDataLoader dl, vdl;
    memset(&dl, 0, sizeof dl);
    memset(&vdl, 0, sizeof vdl);
    RtMetrics met;
    memset(&met, 0, sizeof met);
    TrainState st;
    memset(&st, 0, sizeof st);
    IrGraph *g = train_graph(&co, &t, &lo, &ctx, &err);
    if (!g) {
        fprintf(stderr, "hetc train: %s\n", err.msg);
        goto done;
    }
    if (open_data(&t, &co, g, &dl, &vdl))
        goto done;
    OptimOpts oo;
    optim_opts_of(&t, &oo);
    if (train_state_init(&st, g, &oo, &err) ||
        /* the update graph (@upd nodes) is built apart from fwd+bwd: dump it too */
        pass_maybe_dump(st.upd, "optimizer", &ctx, &err)) {
        fprintf(stderr, "hetc train: %s\n", err.msg);
        goto done;
    }
    if (t.resume) {
        int r = resume_state(&t, &st, &err);
        if (r) { /* 1: failed, said why; 2: nothing left to train */
            rc = r == 2 ? 0 : 1;
            goto done;
        }
    }
    if (open_metrics(&t, &met, st.step))
        goto done;
    IrValue *ids = input_binds_token_input(g), *tg = ir_graph_find_value(g, "targets");
    if (!ids || !tg || ids == tg || ir_shape_numel(&ids->shape) != co.batch * co.seq ||
        ids->dtype != IR_I64) {
        fprintf(stderr, "hetc train: the model's token-ids input (input_ids, or the first input) must be "
                        "int64 [%lld,%lld]\n",
                (long long)co.batch, (long long)co.seq);
        goto done;
    }
    IrTensor *in[2] = {ir_tensor_new(ids->name, IR_I64, &ids->shape),
                       ir_tensor_new("targets", IR_I64, &tg->shape)};
    int64_t tok_per_step = co.batch * co.seq * t.accum;
    double step_flops = graph_flops(g) * (double)t.accum;
    double t0 = now_s();
    if (!t.quiet)
        printf("hetc train: %s, %d parameters (%lld elements), %lld tokens/step, %s, %s%s, data "
               "%s (%s, %lld microbatches)\n",
               co.model, st.nparams, (long long)st.total, (long long)tok_per_step, t.optimizer,
               precision_name(t.precision),
               t.bf16_sr ? " (weights rounded stochastically)" : "",
               t.data, rt_token_format_name(dl.format), (long long)dl.nbatches);
    double loss = 0;
    int64_t allocs1 = 0; /* the executor's allocations by the end of step 1 */
    rc = 0;
    const int64_t start = st.step; /* 0, or the resumed checkpoint's */
    for (int64_t step = start; step < t.steps && !rc; step++) {
        double ts = now_s();
        rc = accumulate(&st, &t, &dl, in, step, &loss, &err);
        if (rc) break;
        if (step == start && t.dump_grads && dump_first(t.dump_grads, &st, loss, &err)) {
            fprintf(stderr, "hetc train: --dump-grads: %s\n", err.msg);
            rc = 1;
            break;
        }
        double lr = rt_lr_at(&sched, step), norm;
        if (train_state_step(&st, lr, &norm, &err)) {
            fprintf(stderr, "hetc train: step %lld: %s\n", (long long)step + 1, err.msg);
            rc = 1;
            break;
        }
        if (step == start) allocs1 = train_state_allocs(&st);
        double te = now_s(), el = te - t0, dt = te - ts;
        double eta = el / (double)(step + 1 - start) * (double)(t.steps - step - 1);
        if (!t.quiet || step + 1 == t.steps)
            printf("step %5lld/%lld | loss %.9g | grad norm %.6g | lr %.4e | %.0f tok/s | "
                   "ETA %.1fs\n",
                   (long long)step + 1, (long long)t.steps, loss, norm, lr,
                   dt > 0 ? (double)tok_per_step / dt : 0.0, eta);
        fflush(stdout);
        RtStepMetrics base = {.loss = loss, .grad_norm = norm, .lr = lr, .step_s = dt,
                              .tokens = tok_per_step, .flops = step_flops};
        rc = after_step(&st, &t, &vdl, in, &met, step, &base, &err);
    }
    if (!rc && t.exec_stats) print_exec_stats(&st, allocs1);
    rc = finish_run(&t, &st, co.model, &met, rc, &err);
    ir_tensor_free(in[0]);
    ir_tensor_free(in[1]);
done:
    if (met.f) {
        char merr[512];
        rt_metrics_close(&met, merr, sizeof merr);
    }
    rt_data_close(&vdl);
    train_state_free(&st);
    rt_data_close(&dl);
    if (g) ir_graph_free(g);
    return rc;
}
