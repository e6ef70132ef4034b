/* hetrt_stage_main: the main of every generated stage binary.
 *
 * The generated object holds the compute (stage functions of straight-line
 * kernel and hetrt_* calls, the schedule table and the config text);
 * this file holds everything dynamic: command line, MPI bootstrap, arena,
 * parameters, the step loop (schedule, gradient sync, learning rate,
 * update), logging and checkpoints.  The step loop mirrors `hetc train`
 * (driver/cmd_train.c): microbatch m of step k reads data batch k*K + m,
 * gradients are accumulated as g / K, the loss printed is the mean over
 * the step's microbatches, and the log line has the same format, so the
 * two runs can be compared line by line. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stage_interp.h"
#include "stage_internal.h"

typedef struct StageOpts {
    const char *data, *ckpt_dir, *init_dir;
    const char *metrics;       /* --metrics FILE ("none": off; NULL: CKPT_DIR/metrics.jsonl) */
    const char *val_data;      /* --val-data FILE */
    int64_t val_every, val_batches;
    int64_t trace_spans;       /* --trace-spans: the trace ring's size per rank */
    int trace, print_schedule, print_memory;
    char metrics_default[PATH_MAX + 16];
    int64_t steps, ckpt_every;
    int64_t lr_horizon; /* --lr-horizon (0: the compiled --steps) */
    int resume, quiet, overwrite, print_build_id;
    RtTokenFormat data_format; /* --data-format (default llmc: 0 in the zeroed struct) */
    char init_default[PATH_MAX + 8];
} StageOpts;

static void usage(FILE *f, const char *prog) {
    fprintf(f,
            "usage: %s --data TOKENS.bin [options]\n"
            "\n"
            "One pipeline stage of a hetc-compiled training job; launch every stage together\n"
            "with one MPMD mpirun (build/launch.sh).  TOKENS.bin is an llm.c token file or,\n"
            "with --data-format raw-u16, nanoGPT's headerless uint16 .bin; every rank reads\n"
            "its own rows.\n"
            "\n"
            "  --data FILE              token file (required)\n"
            "  --data-format llmc|raw-u16  llmc (default) requires the llm.c header's magic\n"
            "  --steps N                optimizer steps (default: the plan's)\n"
            "  --lr-horizon N           steps the lr schedule decays over (default: hetc\n"
            "                           compile's --steps; past it the lr stays at its minimum)\n"
            "  --checkpoint-dir DIR     where checkpoints go (default: checkpoints)\n"
            "  --checkpoint-every N     also checkpoint every N steps (default 0: only at the end)\n"
            "  --resume                 continue from the newest complete checkpoint in\n"
            "                           --checkpoint-dir (none: start from --init)\n"
            "  --overwrite-checkpoints  start afresh in a --checkpoint-dir holding another\n"
            "                           run's checkpoints, deleting them\n"
            "  --init DIR               initial parameters (default: init/ beside the binary)\n"
            "  --quiet                  only the final step line\n"
            "  --metrics FILE           one JSON line per step (loss, grad norm, lr, tokens/s,\n"
            "                           MFU, per-stage compute / comm / bubble time, memory)\n"
            "                           and loss.svg beside it (default:\n"
            "                           CHECKPOINT_DIR/metrics.jsonl; 'none': off)\n"
            "  --no-trace               do not record every rank's F/B/send/recv/all-reduce\n"
            "                           spans (recorded by default: trace.json, Chrome /\n"
            "                           Perfetto, the newest 131072 spans per rank, and\n"
            "                           trace.svg, the last step under the plan's predicted\n"
            "                           timeline, beside --metrics; --trace is accepted)\n"
            "  --trace-spans N          spans the trace keeps per rank (default 131072: the\n"
            "                           newest; older ones are dropped)\n"
            "  --val-data FILE          validation tokens (same format as --data)\n"
            "  --val-every N            validation loss every N steps and after the last\n"
            "                           (default with --val-data: 10)\n"
            "  --val-batches N          batches of the validation file per evaluation\n"
            "                           (default 10, at most the file's)\n"
            "  --print-schedule         print this stage's schedule table (F/B per microbatch)\n"
            "                           and exit\n"
            "  --print-memory           print the arena this stage allocates per rank (bytes,\n"
            "                           activation slots) and exit\n"
            "  --build-id               print the hetc compile build id of this binary and exit\n"
            "  --help                   this text\n",
            prog);
}

static int parse_i64(const char *opt, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0) {
        fprintf(stderr, "stage: %s: '%s' is not a non-negative integer\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* 0 ok, 1 --help shown, -1 error (printed). */
static int parse_args(int argc, char **argv, StageOpts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, argv[0]);
            return 1;
        }
        if (!strcmp(a, "--resume")) {
            o->resume = 1;
            continue;
        }
        if (!strcmp(a, "--build-id")) { /* launch.sh's check, before MPI */
            o->print_build_id = 1;
            return 0;
        }
        if (!strcmp(a, "--overwrite-checkpoints")) {
            o->overwrite = 1;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (!strcmp(a, "--trace") || !strcmp(a, "--no-trace")) {
            o->trace = a[2] == 't';
            continue;
        }
        if (!strcmp(a, "--print-schedule")) { /* before MPI, like --build-id */
            o->print_schedule = 1;
            return 0;
        }
        if (!strcmp(a, "--print-memory")) { /* before MPI: what the planner is checked against */
            o->print_memory = 1;
            return 0;
        }
        const char *names[] = {"--data", "--steps", "--checkpoint-dir", "--checkpoint-every",
                               "--init", "--data-format", "--lr-horizon", "--metrics",
                               "--val-data", "--val-every", "--val-batches", "--trace-spans"};
        int k = -1;
        const char *v = NULL;
        for (int j = 0; j < (int)(sizeof names / sizeof *names); j++) {
            size_t n = strlen(names[j]);
            if (!strncmp(a, names[j], n) && (a[n] == 0 || a[n] == '=')) {
                k = j;
                if (a[n] == '=') v = a + n + 1;
                else if (i + 1 < argc) v = argv[++i];
                else {
                    fprintf(stderr, "stage: %s needs a value\n", names[j]);
                    return -1;
                }
            }
        }
        switch (k) {
        case 0: o->data = v; break;
        case 1: if (parse_i64("--steps", v, &o->steps)) return -1; break;
        case 2: o->ckpt_dir = v; break;
        case 3: if (parse_i64("--checkpoint-every", v, &o->ckpt_every)) return -1; break;
        case 4: o->init_dir = v; break;
        case 5:
            if (rt_token_format_parse(v, &o->data_format)) {
                fprintf(stderr, "stage: --data-format %s: expected llmc or raw-u16\n", v);
                return -1;
            }
            break;
        case 6:
            if (parse_i64("--lr-horizon", v, &o->lr_horizon)) return -1;
            if (o->lr_horizon < 1) {
                fprintf(stderr, "stage: --lr-horizon must be at least 1\n");
                return -1;
            }
            break;
        case 7: o->metrics = v; break;
        case 8: o->val_data = v; break;
        case 9:
        case 10:
            if (parse_i64(names[k], v, k == 9 ? &o->val_every : &o->val_batches)) return -1;
            if (k == 9 ? o->val_every < 1 : o->val_batches < 1) {
                fprintf(stderr, "stage: %s must be at least 1\n", names[k]);
                return -1;
            }
            break;
        case 11:
            if (parse_i64("--trace-spans", v, &o->trace_spans)) return -1;
            if (o->trace_spans < 1) {
                fprintf(stderr, "stage: --trace-spans must be at least 1\n");
                return -1;
            }
            break;
        default:
            fprintf(stderr, "stage: unknown option '%s' (see --help)\n", a);
            return -1;
        }
    }
    if ((o->val_every || o->val_batches) && !o->val_data) {
        fprintf(stderr, "stage: --val-every / --val-batches need --val-data FILE\n");
        return -1;
    }
    if (o->val_data && !o->val_every) o->val_every = 10;
    if (o->val_data && !o->val_batches) o->val_batches = 10;
    if (!o->data && !o->print_build_id && !o->print_memory) {
        fprintf(stderr, "stage: --data TOKENS.bin is required (see --help)\n");
        return -1;
    }
    return 0;
}

/* <directory of /proc/self/exe>/init */
static const char *default_init(StageOpts *o) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return "init";
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(o->init_default, sizeof o->init_default, "%s/init", slash ? exe : ".");
    return o->init_default;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const HetcStageFn *find_fn(const HetcStageDesc *d, const char *name) {
    for (int i = 0; i < d->nfuncs; i++)
        if (d->funcs[i].name && !strcmp(d->funcs[i].name, name)) return &d->funcs[i];
    return NULL;
}

/* Run a stage function; a nonzero status names the failing call and ends
 * the job (the callee already printed why). */
/* defined by a stage module whose direct kernel calls report errors */
extern char hetc_kernel_err[HETC_KERNEL_ERRLEN] __attribute__((weak));

static void run_fn_failed(StageRt *rt, const HetcStageFn *f, int32_t st, const char *when) {
    const char *callee = st >= 1 && st <= f->ncalls && f->calls ? f->calls[st - 1] : "?";
    /* a kernel called directly says why in hetc_kernel_err (hetrt_* calls
     * printed their reason already) */
    const char *why = strncmp(callee, "hetrt_", 6) && hetc_kernel_err ? hetc_kernel_err : "";
    STAGE_DIE("stage %d: %s: call %d (%s) failed %s%s%.*s", rt->cfg.stage, f->name, st, callee,
              when, why[0] ? ": " : "", HETC_KERNEL_ERRLEN, why);
}

static void run_fn(StageRt *rt, const HetcStageFn *f, void *slot, const char *when) {
    int32_t st = f->fn(rt->arena.base, slot);
    if (st == 0) return;
    run_fn_failed(rt, f, st, when);
}

/* run_fn with metrics: the function's time less the sends and receives it
 * made (stage_exec.c transfer) is compute; span kind k for --trace. */
static void run_fn_timed(StageRt *rt, const HetcStageFn *f, void *slot, const char *when,
                         char k, int mb) {
    StageMet *m = &rt->met;
    m->in_fn_send = m->in_fn_recv = 0;
    double t0 = stage_now();
    run_fn(rt, f, slot, when);
    double t1 = stage_now();
    m->compute += (t1 - t0) - m->in_fn_send - m->in_fn_recv;
    m->comm += m->in_fn_send;
    m->bubble += m->in_fn_recv;
    stage_span(rt, k, mb, t0, t1);
}

/* The node interpreter (interp/, runtime/abi/stage_interp.h) is linked
 * only into binaries whose program calls hetrt_node; weak, so a binary of
 * direct kernel calls links without it (and without the IR parser). */
#pragma weak hetrt_interp_open
#pragma weak hetrt_interp_close

static void open_interp(StageRt *rt) {
    if (!hetrt_interp_open) return;
    HetrtInterpEnv env = {.desc = rt->desc,
                          .stage = rt->cfg.stage,
                          .tp_rank = rt->ctx.tp_rank,
                          .arena = rt->arena.base,
                          .arena_bytes = rt->arena.size,
                          .kernel_ctx = stage_be_kernel_ctx(rt)};
    char err[RT_ERRLEN];
    if (hetrt_interp_open(&env, err, sizeof err))
        STAGE_DIE("stage %d: node interpreter: %s", rt->cfg.stage, err);
    rt->interp_up = 1;
}

/* Forward-only passes over --val-batches batches of --val-data, with the
 * parameters as they are (no gradient, no update): like llm.c / nanoGPT's
 * validation.  Each pass runs the schedule's microbatch ids 0..accum-1 (so
 * the transfer tags are the training ones) over data batch val_batch; the
 * last stage's losses are summed over its DP group and averaged.  Every
 * rank calls it at the same step.  Returns the mean loss (0 off the last
 * stage). */
static double val_loss(StageRt *rt, int64_t nbatches) {
    const HetcStageDesc *d = rt->desc;
    const StageConfig *c = &rt->cfg;
    const HetcStageFn *fwd = find_fn(d, "forward");
    double saved = rt->step_loss, sum = 0;
    char when[96];
    rt->in_val = 1;
    rt->tok_mb = -1;
    /* an offloaded stage's parameters are in its store between steps */
    if (stage_offload_in(rt, STAGE_OFF_PARAMS))
        STAGE_DIE("stage %d: offload: validation parameters failed", c->stage);
    int64_t done = 0;
    for (int64_t b = 0; b < nbatches; done++) {
        rt->step_loss = 0;
        for (int e = 0; e < d->nsched && b < nbatches; e++) {
            const HetcSchedEntry *se = &d->sched[e];
            if (se->kind != HETC_SCHED_F) continue;
            rt->micro = se->microbatch;
            rt->val_batch = b++;
            void *slot = rt->arena.base + d->slot_base +
                         (int64_t)(se->microbatch % d->nslots) * d->slot_bytes;
            snprintf(when, sizeof when, "in validation batch %lld", (long long)rt->val_batch);
            double t0 = stage_now();
            run_fn(rt, fwd, slot, when);
            stage_span(rt, 'V', se->microbatch, t0, stage_now());
        }
        if (rt_send_queue_wait(&rt->ctx, &rt->sendq, "validation sends"))
            STAGE_DIE("stage %d: validation sends failed", c->stage);
        double l = 0;
        if (stage_sync_loss(rt, &l)) STAGE_DIE("validation loss sum failed");
        sum += l * (double)c->accum; /* stage_sync_loss divides by accum */
    }
    rt->in_val = 0;
    rt->tok_mb = -1;
    rt->step_loss = saved;
    stage_offload_evict(rt, STAGE_OFF_PARAMS);
    return done ? sum / (double)nbatches : 0;
}

static void write_scalars(StageRt *rt, double lr, int64_t step, double norm) {
    const StageConfig *c = &rt->cfg;
    float lr32 = (float)lr, n32 = (float)norm;
    int rc = 0;
    if (c->off_lr >= 0)
        rc |= stage_be_put(rt, STAGE_AT(&rt->arena, (size_t)c->off_lr, 4), &lr32, 4);
    if (c->off_step >= 0)
        rc |= stage_be_put(rt, STAGE_AT(&rt->arena, (size_t)c->off_step, 8), &step, 8);
    if (c->off_grad_norm >= 0)
        rc |= stage_be_put(rt, STAGE_AT(&rt->arena, (size_t)c->off_grad_norm, 4), &n32, 4);
    if (rc) STAGE_DIE("stage %d: cannot write the update scalars", c->stage);
}

static void zero_accumulators(StageRt *rt) {
    for (int i = 0; i < rt->cfg.nparams; i++) {
        const StageParam *p = &rt->cfg.params[i];
        size_t nb = (size_t)stage_acc_len(&rt->cfg, p) * sizeof(float);
        if (stage_be_zero(rt, STAGE_AT(&rt->arena, (size_t)p->off_acc, nb), nb))
            STAGE_DIE("stage %d: cannot zero the gradient of '%s'", rt->cfg.stage, p->name);
    }
}

/* The checkpoint directory belongs to one run at a time: world rank 0
 * locks it (a second launch into it fails naming the holder), and a fresh
 * run refuses a directory holding checkpoints -- they would be another
 * run's, and a later --resume would mix or pick them -- unless
 * --overwrite-checkpoints deletes them.  Rank 0 dies with the reason
 * (MPI_Abort ends the others). */
static void claim_ckpt_dir(StageRt *rt, const StageOpts *o) {
    char err[1024];
    int fd, n;
    int64_t newest;
    if (rt->ctx.world_rank != 0) return;
    if (rt_ckpt_lock(o->ckpt_dir, &fd, err, sizeof err)) STAGE_DIE("--checkpoint-dir: %s", err);
    /* fd stays open: the lock lasts until the process exits */
    if (o->resume) return;
    if (rt_ckpt_count_steps(o->ckpt_dir, &n, &newest, err, sizeof err))
        STAGE_DIE("--checkpoint-dir: %s", err);
    if (n == 0) return;
    if (!o->overwrite)
        STAGE_DIE("--checkpoint-dir %s already holds checkpoints (%d step directories, the "
                  "newest step %lld) of an earlier run: pass --resume to continue it, "
                  "--overwrite-checkpoints to delete them and start afresh, or another "
                  "--checkpoint-dir", o->ckpt_dir, n, (long long)newest);
    if (rt_ckpt_clear(o->ckpt_dir, err, sizeof err))
        STAGE_DIE("--overwrite-checkpoints: %s", err);
    fprintf(stderr, "--overwrite-checkpoints: deleted %d step directories of %s\n", n,
            o->ckpt_dir);
}

/* --resume: the newest complete checkpoint every rank loads without error.
 * rt_checkpoint_find skips incomplete or inconsistent step directories (no
 * MANIFEST, a layer file of another step or run); a tensor checksum that
 * fails while loading makes every rank fall back to the previous step, with
 * a warning.  Returns the step to start from, -1 when there is none. */
static int64_t resume_state(StageRt *rt, const StageOpts *o, int printer) {
    char path[4096], err[1024], warn[4096];
    int64_t below = INT64_MAX, step = 0;
    int fell = 0;
    for (;;) {
        uint64_t run = 0;
        int r = rt_checkpoint_find(o->ckpt_dir, below, path, sizeof path, &step, &run, warn,
                                   sizeof warn, err, sizeof err);
        if (r < 0) STAGE_DIE("--resume: %s", err);
        if (warn[0] && printer)
            fprintf(stderr, "warning: --resume: skipping checkpoints that are not complete and "
                    "consistent: %s\n", warn);
        if (r > 0) {
            if (fell)
                STAGE_DIE("--resume: no intact checkpoint left in %s (the newer ones are "
                          "corrupt, see above)", o->ckpt_dir);
            return -1;
        }
        int bad = stage_ckpt_load(rt, path, 1) != 0;
        if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, &bad, 1, MPI_INT, MPI_MAX,
                         "--resume: checkpoint load status"))
            STAGE_DIE("--resume: the ranks could not agree on %s", path);
        if (!bad) {
            rt->run_id = run;
            return step;
        }
        if (printer)
            fprintf(stderr, "warning: --resume: %s is corrupt (see the errors above): falling "
                    "back to the previous complete checkpoint\n", path);
        fell = 1;
        below = step;
    }
}

/* Initial parameters (fresh start) or the newest checkpoint (--resume).
 * Returns the first step to run; sets rt->run_id (a fresh run: a new id on
 * rank 0, broadcast by the caller). */
static int64_t load_state(StageRt *rt, StageOpts *o, int printer) {
    char path[4096], err[1024];
    if (o->resume) {
        int64_t step = resume_state(rt, o, printer);
        if (step >= 0) {
            if (printer && !o->quiet)
                printf("resuming from %s/step_%08lld (step %lld)\n", o->ckpt_dir,
                       (long long)step, (long long)step);
            return step;
        }
        if (printer)
            printf("no checkpoint in %s: starting from the initial parameters\n", o->ckpt_dir);
    }
    if (rt->ctx.world_rank == 0) rt->run_id = rt_ckpt_new_run_id();
    if (rt->cfg.nparams == 0) return 0;
    int64_t s0;
    int r = rt_checkpoint_latest(o->init_dir, path, sizeof path, &s0, err, sizeof err);
    if (r < 0) STAGE_DIE("initial parameters (--init %s): %s", o->init_dir, err);
    if (r > 0)
        STAGE_DIE("initial parameters: no complete checkpoint (step_*/MANIFEST) in '%s'; "
                  "pass --init DIR (the compiler writes build/init)", o->init_dir);
    if (stage_ckpt_load(rt, path, 0))
        STAGE_DIE("stage %d: cannot load its initial parameters from %s", rt->cfg.stage, path);
    return 0;
}

/* The schedule's length is the plan's (hetc compile --steps), not
 * launch.sh's --steps: a run stopped early and resumed follows the same
 * schedule.  --lr-horizon N replaces it explicitly. */
static RtLrSchedule stage_lr_schedule(const StageConfig *c, const StageOpts *o) {
    int64_t d = o->lr_horizon > 0 ? o->lr_horizon : c->steps > 0 ? c->steps : o->steps;
    return (RtLrSchedule){.kind = c->lr_kind, .max_lr = c->lr, .warmup_steps = c->warmup,
                          .decay_steps = d, .min_lr_ratio = 0.1};
}

/* Steps past a decaying schedule's end train at its minimum lr: say so
 * once, at start-up, naming both numbers (issue 16 item 8). */
static void warn_past_horizon(const StageConfig *c, const StageOpts *o) {
    RtLrSchedule s = stage_lr_schedule(c, o);
    if (s.kind != RT_LR_COSINE || s.decay_steps <= s.warmup_steps || o->steps <= s.decay_steps)
        return;
    if (o->lr_horizon > 0)
        fprintf(stderr, "warning: --steps %lld is beyond --lr-horizon %lld: steps %lld..%lld "
                "train at the schedule's minimum lr %.4e\n", (long long)o->steps,
                (long long)s.decay_steps, (long long)s.decay_steps + 1, (long long)o->steps,
                s.max_lr * s.min_lr_ratio);
    else
        fprintf(stderr, "warning: --steps %lld is beyond the %lld steps the stages were "
                "compiled for (hetc compile --steps %lld): steps %lld..%lld train at the "
                "cosine schedule's minimum lr %.4e; pass --lr-horizon %lld to stretch the "
                "schedule over the whole run\n", (long long)o->steps,
                (long long)s.decay_steps, (long long)s.decay_steps, (long long)s.decay_steps + 1,
                (long long)o->steps, s.max_lr * s.min_lr_ratio, (long long)o->steps);
    fflush(stderr);
}

/* HETC_FAULT_INJECT=stage:S,step:N, a test hook of launch.sh --elastic
 * (docs/STAGES.md): every rank of stage S exits with status 3 at the start
 * of step N, as a lost mesh would, after saying so with the wall-clock time
 * (the launcher's detect time starts there).  Returns the step, 0 when the
 * hook is off or names another stage. */
static int64_t fault_step(const StageRt *rt) {
    const char *v = getenv("HETC_FAULT_INJECT");
    long long s = -1, n = 0;
    if (!v || !*v) return 0;
    if (sscanf(v, "stage:%lld,step:%lld", &s, &n) != 2 || s < 0 || n < 1)
        STAGE_DIE("HETC_FAULT_INJECT='%s': expected stage:S,step:N (S >= 0, N >= 1)", v);
    return s == rt->cfg.stage ? (int64_t)n : 0;
}

static void step_loop(StageRt *rt, StageOpts *o, int64_t start, int printer) {
    const HetcStageDesc *d = rt->desc;
    const StageConfig *c = &rt->cfg;
    const HetcStageFn *fwd = find_fn(d, "forward"), *bwd = find_fn(d, "backward"),
                      *upd = find_fn(d, "update");
    RtLrSchedule sched = stage_lr_schedule(c, o);
    int64_t tok_per_step = c->rows * (c->npipes > 1 ? c->npipes : 1) * c->seq * c->accum;
    double t0 = now_s();
    int64_t fault = fault_step(rt);
    for (int64_t k = start; k < o->steps; k++) {
        double ts = now_s();
        char when[96];
        if (k + 1 == fault) {
            struct timespec wall;
            clock_gettime(CLOCK_REALTIME, &wall);
            fprintf(stderr, "[hetrt rank %d] HETC_FAULT_INJECT: stage %d exits at step %lld "
                    "(test hook) at %.6f\n", rt->ctx.world_rank, c->stage, (long long)k + 1,
                    (double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec);
            fflush(stdout);
            fflush(stderr);
            _exit(3);
        }
        rt->step = k;
        rt->step_loss = 0;
        zero_accumulators(rt);
        /* CPU offload: the parameters come in from the host store before the
         * first forward (the copy counts as communication, like a device's
         * host transfer) */
        double to = now_s();
        if (stage_offload_in(rt, STAGE_OFF_PARAMS))
            STAGE_DIE("stage %d: offload: parameters of step %lld failed", c->stage,
                      (long long)k + 1);
        rt->met.comm += now_s() - to;
        for (int e = 0; e < d->nsched; e++) {
            const HetcSchedEntry *se = &d->sched[e];
            rt->micro = se->microbatch;
            const HetcStageFn *f = se->kind == HETC_SCHED_F ? fwd : bwd;
            void *slot = rt->arena.base + d->slot_base +
                         (int64_t)(se->microbatch % d->nslots) * d->slot_bytes;
            snprintf(when, sizeof when, "at step %lld, microbatch %d", (long long)k + 1,
                     se->microbatch);
            run_fn_timed(rt, f, slot, when, se->kind == HETC_SCHED_F ? 'F' : 'B', se->microbatch);
        }
        snprintf(when, sizeof when, "sends of step %lld", (long long)k + 1);
        double tq = now_s();
        if (rt_send_queue_wait(&rt->ctx, &rt->sendq, when))
            STAGE_DIE("stage %d: %s failed", c->stage, when);
        double ta = now_s();
        rt->met.comm += ta - tq;
        stage_span(rt, 'Q', -1, tq, ta);
        double norm = 0, loss = 0;
        if (stage_sync_grads(rt, &norm)) STAGE_DIE("gradient sync of step %lld failed", (long long)k + 1);
        double tu = now_s();
        rt->met.comm += tu - ta;
        stage_span(rt, 'A', -1, ta, tu);
        double lr = rt_lr_at(&sched, k);
        write_scalars(rt, lr, k + 1, norm);
        snprintf(when, sizeof when, "at step %lld", (long long)k + 1);
        if (stage_offload_in(rt, STAGE_OFF_OPT)) /* m, v from the host store */
            STAGE_DIE("stage %d: offload: optimizer state of step %lld failed", c->stage,
                      (long long)k + 1);
        if (stage_zero_pre_update(rt))
            STAGE_DIE("ZeRO parameter slices of step %lld failed", (long long)k + 1);
        if (upd) run_fn(rt, upd, NULL, when); /* no microbatch: no slot (STAGE_ABI.md) */
        if (stage_zero_post_update(rt))
            STAGE_DIE("ZeRO parameter all-gather of step %lld failed", (long long)k + 1);
        /* the updated parameters and state back to the host store (the
         * checkpoint below is written from it) */
        if (stage_offload_out(rt))
            STAGE_DIE("stage %d: offload: write-back of step %lld failed", c->stage,
                      (long long)k + 1);
        double tl = now_s();
        rt->met.compute += tl - tu; /* the ZeRO slice copies and all-gather count here too */
        stage_span(rt, 'U', -1, tu, tl);
        if (stage_sync_loss(rt, &loss)) STAGE_DIE("loss sum of step %lld failed", (long long)k + 1);
        rt->met.comm += now_s() - tl;
        double te = now_s(), el = te - t0, dt = te - ts;
        double eta = el / (double)(k - start + 1) * (double)(o->steps - k - 1);
        if (printer && (!o->quiet || k + 1 == o->steps)) {
            printf("step %5lld/%lld | loss %.9g | grad norm %.6g | lr %.4e | %.0f tok/s | "
                   "ETA %.1fs\n",
                   (long long)k + 1, (long long)o->steps, loss, norm, lr,
                   dt > 0 ? (double)tok_per_step / dt : 0.0, eta);
            fflush(stdout);
        }
        int last = k + 1 == o->steps;
        double vl = NAN;
        if (o->val_data && (last || (k + 1) % o->val_every == 0)) {
            vl = val_loss(rt, o->val_batches);
            if (printer) {
                printf("step %5lld/%lld | val loss %.9g (%lld batches of %s)\n", (long long)k + 1,
                       (long long)o->steps, vl, (long long)o->val_batches, o->val_data);
                fflush(stdout);
            }
        }
        RtStepMetrics sm = {.step = k + 1, .loss = loss, .grad_norm = norm, .lr = lr,
                            .tokens = tok_per_step, .val_loss = vl};
        if (stage_met_step(rt, &sm, dt)) STAGE_DIE("metrics of step %lld failed", (long long)k + 1);
        stage_offload_step_done(rt, k + 1);
        if (last || (o->ckpt_every > 0 && (k + 1) % o->ckpt_every == 0)) {
            if (stage_ckpt_save(rt, o->ckpt_dir, k + 1))
                STAGE_DIE("checkpoint of step %lld in '%s' failed", (long long)k + 1, o->ckpt_dir);
        }
    }
}

/* Every rank must run a binary of the same hetc compile: a recompile
 * interrupted (or a binary copied in) leaves a mixed build whose stages
 * disagree on the model split, and it would train with losses matching
 * neither build.  One all-reduce of (id, ~id) gives the max and the min. */
static void check_same_build(StageRt *rt, const char *exe) {
    uint64_t v[2] = {rt->cfg.build_id, ~rt->cfg.build_id};
    if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, v, 2, MPI_UINT64_T, MPI_MAX, "build id check"))
        STAGE_DIE("stage %d: the build id check failed", rt->cfg.stage);
    if (v[0] == ~v[1]) return;
    if (rt->ctx.dp_rank == 0 && rt->ctx.tp_rank == 0)
        rt_log_error("stage %d binary %s: build id %016llx", rt->cfg.stage, exe,
                     (unsigned long long)rt->cfg.build_id);
    rt_barrier(&rt->ctx, "build id report");
    STAGE_DIE("the stage binaries come from different hetc compiles (build ids %016llx .. "
              "%016llx; each stage's binary and id above): recompile into one directory and "
              "launch its launch.sh", (unsigned long long)~v[1], (unsigned long long)v[0]);
}

static void check_desc(const HetcStageDesc *d) {
    if (!d) STAGE_DIE("no stage descriptor");
    if (d->abi_version != HETC_STAGE_ABI_VERSION)
        STAGE_DIE("stage binary has ABI version %d; this runtime implements %d (rebuild the "
                  "stage with the matching hetc)", d->abi_version, HETC_STAGE_ABI_VERSION);
    if (d->arena_bytes < 0 || d->slot_base < 0 || d->slot_bytes < 0 || d->nslots < 1 ||
        d->slot_base + (int64_t)d->nslots * d->slot_bytes > d->arena_bytes)
        STAGE_DIE("stage descriptor: %d slots of %lld bytes at %lld do not fit the %lld-byte "
                  "arena", d->nslots, (long long)d->slot_bytes, (long long)d->slot_base,
                  (long long)d->arena_bytes);
}

int hetrt_stage_main(int argc, char **argv, const HetcStageDesc *desc) {
    StageOpts o = {.ckpt_dir = "checkpoints", .steps = -1, .trace = 1, .trace_spans = 1 << 17};
    /* Options first, before MPI: every rank sees the same mistake and exits
     * with it, and --help works without a launcher. */
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    check_desc(desc);
    if (o.print_schedule) { /* the compiled table, for tools and the trace test */
        printf("stage %d schedule:", desc->stage);
        for (int e = 0; e < desc->nsched; e++)
            printf(" %c%d", desc->sched[e].kind == HETC_SCHED_F ? 'F' : 'B',
                   desc->sched[e].microbatch);
        printf("\n");
        return 0;
    }
    if (!o.init_dir) o.init_dir = default_init(&o);

    static StageRt rt; /* the process's one runtime state (hetrt_* read it) */
    memset(&rt, 0, sizeof rt);
    rt.desc = desc;
    rt.tok_mb = -1;
    char err[1024];
    if (stage_config_parse(desc->config, &rt.cfg, err, sizeof err))
        STAGE_DIE("stage %d: %s", desc->stage, err);
    StageConfig *c = &rt.cfg;
    if (o.print_build_id) {
        printf("%016llx\n", (unsigned long long)c->build_id);
        stage_config_free(c);
        return 0;
    }
    if (o.print_memory) { /* the one allocation the step loop works in (stage_be_arena_alloc) */
        /* codegen/memplan.h: [params][accumulators][optimizer state][scalars][scratch][slots];
         * the model state ends where the first scalar starts */
        int64_t state = desc->slot_base, sc[3] = {c->off_lr, c->off_step, c->off_grad_norm};
        for (int k = 0; k < 3; k++)
            if (sc[k] >= 0 && sc[k] < state) state = sc[k];
        printf("stage %d arena %lld bytes: model state %lld, scalars and scratch %lld, "
               "%d activation slots of %lld\n", desc->stage, (long long)desc->arena_bytes,
               (long long)state, (long long)(desc->slot_base - state), desc->nslots,
               (long long)desc->slot_bytes);
        stage_config_free(c);
        return 0;
    }
    if (c->stage != desc->stage)
        STAGE_DIE("stage descriptor says stage %d, its config says stage %d", desc->stage,
                  c->stage);
    /* The device check comes before MPI: a stage compiled for a device that
     * is not there fails at once with the reason, not in a collective. */
    if (stage_be_probe(err, sizeof err)) {
        fprintf(stderr, "stage %d (%s backend): %s\n", c->stage, stage_be_name(), err);
        stage_config_free(c);
        return 1;
    }
    if (o.steps < 0) o.steps = c->steps;
    if (o.steps <= 0) STAGE_DIE("no step count: pass --steps N (the config has 'steps %lld')",
                               (long long)c->steps);
    for (int e = 0; e < desc->nsched; e++)
        if ((desc->sched[e].kind != HETC_SCHED_F && desc->sched[e].kind != HETC_SCHED_B) ||
            desc->sched[e].microbatch < 0 || desc->sched[e].microbatch >= c->accum)
            STAGE_DIE("stage %d: schedule entry %d (%c %d) is not F/B of a microbatch in [0, %lld)",
                      c->stage, e, desc->sched[e].kind, desc->sched[e].microbatch,
                      (long long)c->accum);
    if (desc->nsched > 0 && (!find_fn(desc, "forward") || !find_fn(desc, "backward")))
        STAGE_DIE("stage %d: the descriptor has no forward/backward function", c->stage);

    int expect = 0;
    for (int s = 0; s < c->nstages; s++) expect += c->dp[s];
    /* Always the TP-aware init: it learns every stage's TP degree from the
     * stage's own ranks, so a config needs only its own stage's right. */
    if (rt_init_tp(&rt.ctx, &argc, &argv, c->nstages, c->dp, c->stage, stage_tp_degree(c)))
        STAGE_DIE("the plan needs %d ranks or more (%d stages, DP x TP degrees as in the "
                  "configs) -- launch it with build/launch.sh", expect, c->nstages);
    rt.ctx_up = 1;
    if (rt.ctx.stage != c->stage)
        STAGE_DIE("the binary of stage %d runs on world rank %d, which the plan gives to stage "
                  "%d: launch the stages in order (mpirun -np d0 ./stage_0 : -np d1 ./stage_1 ...)",
                  c->stage, rt.ctx.world_rank, rt.ctx.stage);
    for (int s = 0; c->rowtab && s < c->nstages; s++) rt.ctx.stage_rows[s] = c->rowtab[s];
    int64_t row0, my_rows; /* this DP rank's rows: the stage's row table, or rt_row_split's */
    rt_stage_row_split(&rt.ctx, c->stage, c->rows, rt.ctx.dp_rank, &row0, &my_rows);
    /* several pipelines: a data microbatch is every pipeline's rows, this
     * pipeline's the j-th share of them */
    int64_t npipes = c->npipes > 1 ? c->npipes : 1, data_rows = c->rows * npipes;
    if (c->local_rows != my_rows)
        STAGE_DIE("stage %d: this binary runs %lld rows per microbatch, DP rank %d of %d holds "
                  "%lld of the %lld rows: launch the stage's ranks with launch.sh (it starts "
                  "each DP rank with the stage_%d binary of its row count)", c->stage,
                  (long long)c->local_rows, rt.ctx.dp_rank, rt.ctx.dp_size, (long long)my_rows,
                  (long long)c->rows, c->stage);
    check_same_build(&rt, argv[0]);
    hetrt_stage_rt = &rt;

    char derr[RT_ERRLEN];
    row0 += (int64_t)stage_pipe_of(c, c->stage) * c->rows;
    if (rt_data_open_format(&rt.dl, o.data, o.data_format, data_rows, c->seq, rt.ctx.dp_rank,
                            rt.ctx.dp_size, derr))
        STAGE_DIE("--data: %s", derr);
    rt.dl_open = 1;
    if (rt_data_set_shard(&rt.dl, row0, my_rows, derr)) STAGE_DIE("--data: %s", derr);
    rt.dl.vocab = c->vocab;
    if (o.val_data) {
        if (rt_data_open_format(&rt.vdl, o.val_data, o.data_format, data_rows, c->seq,
                                rt.ctx.dp_rank, rt.ctx.dp_size, derr))
            STAGE_DIE("--val-data: %s", derr);
        if (rt_data_set_shard(&rt.vdl, row0, my_rows, derr)) STAGE_DIE("--val-data: %s", derr);
        rt.vdl.vocab = c->vocab;
        if (o.val_batches > rt.vdl.nbatches) o.val_batches = rt.vdl.nbatches;
    }
    size_t ntok = (size_t)(rt.dl.rows * c->seq);
    rt.tok_in = calloc(ntok + 1, sizeof *rt.tok_in);
    rt.tok_tg = calloc(ntok + 1, sizeof *rt.tok_tg);

    /* ZeRO-2's accumulators are shards only if the backward reduce-scatters
     * into them: a binary whose backward still calls hetrt_accum (an older
     * hetc's ZeRO-2, whole accumulators) would be misread */
    const HetcStageFn *bwd = find_fn(desc, "backward");
    for (int i = 0; c->zero >= 2 && bwd && i < bwd->ncalls; i++)
        if (!strcmp(bwd->calls[i], "hetrt_accum"))
            STAGE_DIE("stage %d: zero 2, but its backward calls hetrt_accum (whole gradient "
                      "accumulators): recompile the stage with this hetc", c->stage);
    if (stage_be_setup(&rt)) STAGE_DIE("stage %d: %s backend setup failed", c->stage,
                                       stage_be_name());
    if (!o.quiet) stage_log_binding(&rt); /* rank -> host -> device, for multi-node runs */
    if (stage_be_arena_alloc(&rt, (size_t)desc->arena_bytes))
        STAGE_DIE("stage %d: cannot allocate its %lld-byte arena", c->stage,
                  (long long)desc->arena_bytes);
    for (int i = 0; i < c->nparams; i++) {
        const StageParam *p = &c->params[i];
        size_t nb = (size_t)p->numel * 4;
        (void)STAGE_AT(&rt.arena, (size_t)p->off_param, nb);
        (void)STAGE_AT(&rt.arena, (size_t)p->off_acc, (size_t)stage_acc_len(c, p) * 4);
        (void)STAGE_AT(&rt.arena, (size_t)p->off_zp, (size_t)p->zlen * 4);
    }
    if (stage_sync_setup(&rt)) STAGE_DIE("stage %d: shared-parameter groups failed", c->stage);
    open_interp(&rt);
    const HetcStageFn *init = find_fn(desc, "init");
    if (init) run_fn(&rt, init, NULL, "during init");
    /* after init, before any checkpoint load: loads write the store */
    if (stage_offload_setup(&rt)) STAGE_DIE("stage %d: offload store setup failed", c->stage);

    int printer = c->stage == c->nstages - 1 && rt.ctx.dp_rank == 0 && rt.ctx.tp_rank == 0;
    claim_ckpt_dir(&rt, &o);
    int64_t start = load_state(&rt, &o, printer);
    /* every rank stamps its layer files with rank 0's run id */
    if (rt_bcast(&rt.ctx, MPI_COMM_WORLD, &rt.run_id, sizeof rt.run_id, 0, "run id"))
        STAGE_DIE("stage %d: cannot agree on the run id", c->stage);
    if (printer && !o.quiet) {
        printf("hetrt stage %d of %d: %d ranks, %d parameters, %lld tokens/step, %s, data %s "
               "(%s, %lld batches), steps %lld..%lld\n",
               c->stage, c->nstages, rt.ctx.world_size, c->nparams,
               (long long)(data_rows * c->seq * c->accum), c->sgd ? "sgd" : "adamw", o.data,
               rt_token_format_name(rt.dl.format), (long long)rt.dl.nbatches,
               (long long)start + 1, (long long)o.steps);
        fflush(stdout);
    }
    if (printer) warn_past_horizon(c, &o);
    /* metrics.jsonl (and the trace files) beside each other, by default in
     * the checkpoint directory: the run's output folder */
    const char *mpath = o.metrics;
    if (!mpath) {
        snprintf(o.metrics_default, sizeof o.metrics_default, "%s/metrics.jsonl", o.ckpt_dir);
        mpath = o.metrics_default;
    }
    rt.met.metrics = strcmp(mpath, "none") != 0;
    rt.met.trace = o.trace;
    rt.met.cap = o.trace_spans;
    if (stage_met_setup(&rt)) STAGE_DIE("stage %d: metrics setup failed", c->stage);
    if (printer && rt.met.metrics &&
        rt_metrics_open(&rt.met.out, mpath, NULL, o.resume ? start : 0, err, sizeof err))
        STAGE_DIE("--metrics: %s", err);
    if (start >= o.steps && printer)
        printf("checkpoint step %lld >= --steps %lld: nothing to run\n", (long long)start,
               (long long)o.steps);
    step_loop(&rt, &o, start, printer);
    fflush(stdout);
    if (rt.met.metrics && printer && rt_metrics_close(&rt.met.out, err, sizeof err))
        STAGE_DIE("--metrics: %s", err);
    if (o.trace) {
        /* beside metrics.jsonl (or in the checkpoint directory with --metrics none) */
        char tj[PATH_MAX + 32], ts[PATH_MAX + 32];
        const char *base = rt.met.metrics ? mpath : o.metrics_default;
        if (!rt.met.metrics)
            snprintf(o.metrics_default, sizeof o.metrics_default, "%s/x", o.ckpt_dir);
        const char *slash = strrchr(base, '/');
        int n = slash ? (int)(slash - base + 1) : 0;
        snprintf(tj, sizeof tj, "%.*strace.json", n, base);
        snprintf(ts, sizeof ts, "%.*strace.svg", n, base);
        if (stage_met_finish(&rt, tj, ts)) STAGE_DIE("--trace: writing the trace failed");
        if (printer && !o.quiet) printf("trace: %s, %s\n", tj, ts);
    }

    stage_met_free(&rt);
    stage_offload_free(&rt);
    rt_send_queue_free(&rt.sendq);
    stage_sync_teardown(&rt);
    hetrt_stage_rt = NULL;
    if (rt.interp_up) hetrt_interp_close();
    free(rt.tok_in);
    free(rt.tok_tg);
    rt_data_close(&rt.dl);
    rt_data_close(&rt.vdl);
    stage_be_arena_free(&rt);
    stage_be_teardown(&rt);
    free(rt.stage_buf);
    stage_config_free(&rt.cfg);
    int rc = rt_finalize(&rt.ctx);
    return rc ? 1 : 0;
}
