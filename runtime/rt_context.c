/* hetrt context: MPI bootstrap, world/stage layout, DP and TP communicators, the
 * fatal-error path (rt_die / rtCheck) and the row split rule. */
#include "rt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

int rt_launched(void) {
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK")) return 1;
    if (!getenv("SLURM_PROCID")) return 0;
    return env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1)) > 1;
}

/* The rank for error prefixes, asked of MPI each time rather than cached in
 * a global: it works before rt_init and needs no shared state.  Without MPI
 * a process no launcher started is rank 0 of its world of one (a solo run);
 * a launched one's rank is not known yet (-1). */
static int current_rank(void) {
    int init = 0, fin = 0, r = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    else if (!rt_launched()) r = 0;
    return r;
}

void rt_log_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[hetrt rank %d] %s\n", current_rank(), msg);
    fflush(stderr);
}

void rt_die(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int rank = current_rank();
    fprintf(stderr, "[hetrt rank %d] %s:%d: %s -- aborting the job\n", rank, file, line, msg);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* HETRT_TIMEOUT_S: positive number of seconds; anything else keeps the
 * default, with a warning so a typo does not silently mean 300 s. */
static double timeout_from_env(void) {
    const double def = 300.0;
    const char *s = getenv("HETRT_TIMEOUT_S");
    if (!s || !*s) return def;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v > 0)) {
        rt_log_error("ignoring HETRT_TIMEOUT_S='%s' (want a positive number); using %.0f s", s,
                     def);
        return def;
    }
    return v;
}

/* Each stage's TP degree, learnt from its own ranks: every rank tells its
 * (stage, tp), so a stage binary needs to know only its own stage's TP
 * degree.  The ranks must come in stage order (MPMD launch order). */
static int gather_tp(RtContext *ctx, int nstages, int my_stage, int my_tp, int *stage_tp) {
    int mine[2] = {my_stage, my_tp}, n = ctx->world_size;
    int *all = malloc(sizeof(int) * 2 * (size_t)n);
    if (!all) {
        rt_log_error("rt_init: out of memory");
        return 1;
    }
    if (MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
        rt_log_error("rt_init: MPI_Allgather of the stages' TP degrees failed");
        free(all);
        return 1;
    }
    int rc = 0;
    for (int s = 0; s < nstages; s++) stage_tp[s] = 0;
    for (int r = 0; r < n && !rc; r++) {
        int s = all[2 * r], t = all[2 * r + 1];
        if (s < 0 || s >= nstages || t < 1) {
            rt_log_error("rt_init: world rank %d runs stage %d with TP %d (want stage 0..%d, "
                         "TP >= 1)", r, s, t, nstages - 1);
            rc = 1;
        } else if (r > 0 && s < all[2 * (r - 1)]) {
            rt_log_error("rt_init: world rank %d runs stage %d after a rank of stage %d: launch "
                         "the stages in order", r, s, all[2 * (r - 1)]);
            rc = 1;
        } else if (stage_tp[s] && stage_tp[s] != t) {
            rt_log_error("rt_init: the ranks of stage %d disagree on its TP degree (%d, %d)", s,
                         stage_tp[s], t);
            rc = 1;
        } else {
            stage_tp[s] = t;
        }
    }
    for (int s = 0; s < nstages && !rc; s++)
        if (!stage_tp[s]) {
            rt_log_error("rt_init: no rank runs stage %d (%d stages, %d ranks: launch every "
                         "stage with -np dp x tp ranks)", s, nstages, n);
            rc = 1;
        }
    free(all);
    return rc;
}

/* The world of a process no launcher started: one rank (solo, MPI never
 * initialised), or an error naming the ranks the layout needs (other
 * stages' TP degrees are not known here: at least that many). */
static int init_solo(RtContext *ctx, int nstages, const int *stage_dp, int my_stage, int my_tp) {
    if (nstages < 1 || nstages > RT_MAX_STAGES || !stage_dp) {
        rt_log_error("rt_init: %d stages (want 1..%d)", nstages, RT_MAX_STAGES);
        return 1;
    }
    char degrees[256] = "";
    int ranks = 0, n = 0;
    for (int s = 0; s < nstages; s++) {
        if (stage_dp[s] < 1) {
            rt_log_error("rt_init: stage %d has DP degree %d (want >= 1)", s, stage_dp[s]);
            return 1;
        }
        int tp = s == my_stage && my_tp > 1 ? my_tp : 1;
        ranks += stage_dp[s] * tp;
        if (n < (int)sizeof degrees - 24)
            n += snprintf(degrees + n, sizeof degrees - (size_t)n, "%s%d%s", s ? " + " : "",
                          stage_dp[s], tp > 1 ? "x" : "");
        if (tp > 1 && n < (int)sizeof degrees - 24)
            n += snprintf(degrees + n, sizeof degrees - (size_t)n, "%d TP", tp);
    }
    if (ranks != 1) {
        rt_log_error("started without a launcher (none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, "
                     "PMI_RANK, or SLURM_PROCID with several tasks, is set), but the plan's "
                     "world is %s%d ranks (%d stage%s: DP degrees %s): run the launch.sh of "
                     "its build, which starts every rank under mpirun or srun",
                     nstages > 1 ? "at least " : "", ranks, nstages, nstages == 1 ? "" : "s",
                     degrees);
        return 1;
    }
    ctx->solo = 1;
    ctx->world_size = 1;
    ctx->nstages = 1;
    ctx->stage_dp[0] = ctx->stage_tp[0] = 1;
    ctx->dp_size = ctx->tp_size = 1;
    ctx->timeout_s = timeout_from_env();
    return 0;
}

int rt_init_tp(RtContext *ctx, int *argc, char ***argv, int nstages, const int *stage_dp,
               int my_stage, int my_tp) {
    memset(ctx, 0, sizeof *ctx);
    ctx->dp_comm = MPI_COMM_NULL;
    ctx->tp_comm = MPI_COMM_NULL;
    int init = 0;
    MPI_Initialized(&init);
    if (!init && !rt_launched()) return init_solo(ctx, nstages, stage_dp, my_stage, my_tp);
    if (!init) {
        if (MPI_Init(argc, argv) != MPI_SUCCESS) {
            rt_log_error("MPI_Init failed");
            return 1;
        }
        ctx->owns_mpi = 1;
    }
    /* Errors come back as codes so that rtMpiCheck can name the call. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &ctx->world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ctx->world_size);
    ctx->timeout_s = timeout_from_env();

    if (nstages < 1 || nstages > RT_MAX_STAGES || !stage_dp) {
        rt_log_error("rt_init: %d stages (want 1..%d)", nstages, RT_MAX_STAGES);
        return 1;
    }
    int stage_tp[RT_MAX_STAGES];
    for (int s = 0; s < nstages; s++) stage_tp[s] = 1;
    /* Collective whenever TP is asked for: every rank of the job calls
     * rt_init_tp with a stage (stage binaries do). */
    if (my_stage >= 0 && gather_tp(ctx, nstages, my_stage, my_tp, stage_tp)) return 1;
    int total = 0, any_tp = 0;
    for (int s = 0; s < nstages; s++) {
        if (stage_dp[s] < 1) {
            rt_log_error("rt_init: stage %d has DP degree %d (want >= 1)", s, stage_dp[s]);
            return 1;
        }
        ctx->stage_dp[s] = stage_dp[s];
        ctx->stage_tp[s] = stage_tp[s];
        ctx->stage_first[s] = total;
        total += stage_dp[s] * stage_tp[s];
        any_tp |= stage_tp[s] > 1;
    }
    if (total != ctx->world_size) {
        rt_log_error("rt_init: the stages' DP%s degrees sum to %d ranks but the job has %d "
                     "(launch with one -np per stage matching the plan)",
                     any_tp ? " x TP" : "", total, ctx->world_size);
        return 1;
    }
    ctx->nstages = nstages;
    for (int s = 0; s < nstages; s++) {
        int size = stage_dp[s] * stage_tp[s];
        if (ctx->world_rank >= ctx->stage_first[s] && ctx->world_rank < ctx->stage_first[s] + size) {
            int i = ctx->world_rank - ctx->stage_first[s];
            ctx->stage = s;
            ctx->tp_size = stage_tp[s];
            ctx->tp_rank = i % stage_tp[s];
            ctx->dp_rank = i / stage_tp[s];
            ctx->dp_size = stage_dp[s];
        }
    }
    /* Colours: the world rank of the group's first member, unique per
     * group.  DP group = same stage and tp_rank; TP group = same stage and
     * dp_rank. */
    int first = ctx->stage_first[ctx->stage];
    if (MPI_Comm_split(MPI_COMM_WORLD, first + ctx->tp_rank, ctx->dp_rank, &ctx->dp_comm) !=
        MPI_SUCCESS) {
        rt_log_error("rt_init: MPI_Comm_split for stage %d failed", ctx->stage);
        return 1;
    }
    MPI_Comm_set_errhandler(ctx->dp_comm, MPI_ERRORS_RETURN);
    if (any_tp) {
        if (MPI_Comm_split(MPI_COMM_WORLD, first + ctx->dp_rank * ctx->tp_size, ctx->tp_rank,
                           &ctx->tp_comm) != MPI_SUCCESS) {
            rt_log_error("rt_init: MPI_Comm_split of the TP groups of stage %d failed",
                         ctx->stage);
            return 1;
        }
        MPI_Comm_set_errhandler(ctx->tp_comm, MPI_ERRORS_RETURN);
    }
    return 0;
}

int rt_init(RtContext *ctx, int *argc, char ***argv, int nstages, const int *stage_dp) {
    return rt_init_tp(ctx, argc, argv, nstages, stage_dp, -1, 1);
}

int rt_finalize(RtContext *ctx) {
    if (ctx->dp_comm != MPI_COMM_NULL) MPI_Comm_free(&ctx->dp_comm);
    if (ctx->tp_comm != MPI_COMM_NULL) MPI_Comm_free(&ctx->tp_comm);
    if (ctx->owns_mpi) {
        ctx->owns_mpi = 0;
        if (MPI_Finalize() != MPI_SUCCESS) {
            rt_log_error("MPI_Finalize failed");
            return 1;
        }
    }
    return 0;
}

int rt_stage_rank(const RtContext *ctx, int stage, int dp_rank) {
    if (stage < 0 || stage >= ctx->nstages || dp_rank < 0 || dp_rank >= ctx->stage_dp[stage])
        return -1;
    return ctx->stage_first[stage] + dp_rank * ctx->stage_tp[stage];
}

void rt_row_split(int64_t B, int dp, int r, int64_t *start, int64_t *count) {
    int64_t base = B / dp, rem = B % dp;
    *start = (int64_t)r * base + (r < rem ? r : rem);
    *count = base + (r < rem ? 1 : 0);
}

void rt_row_piece(int64_t B, int dp, int tp, int v, int64_t *start, int64_t *count) {
    int64_t s, c, ps, pc;
    rt_row_split(B, dp, v / tp, &s, &c);
    rt_row_split(c, tp, v % tp, &ps, &pc);
    *start = s + ps;
    *count = pc;
}

void rt_stage_row_split(const RtContext *ctx, int stage, int64_t B, int r, int64_t *start,
                        int64_t *count) {
    int dp = ctx->stage_dp[stage];
    const int64_t *t = ctx->stage_rows[stage];
    int64_t sum = 0, at = 0;
    for (int q = 0; t && q < dp; q++) {
        if (q == r) at = sum;
        sum += t[q];
    }
    if (!t || sum != B) { /* no table, or a batch of another size than a microbatch */
        rt_row_split(B, dp, r, start, count);
        return;
    }
    *start = at;
    *count = t[r];
}

void rt_stage_row_piece(const RtContext *ctx, int stage, int64_t B, int v, int64_t *start,
                        int64_t *count) {
    int tp = ctx->stage_tp[stage] > 0 ? ctx->stage_tp[stage] : 1;
    int64_t s, c, ps, pc;
    rt_stage_row_split(ctx, stage, B, v / tp, &s, &c);
    rt_row_split(c, tp, v % tp, &ps, &pc);
    *start = s + ps;
    *count = pc;
}

static void shard_piece(const RtContext *ctx, int stage, int64_t B, int v, int with_tp,
                        int64_t *start, int64_t *count) {
    if (with_tp) rt_stage_row_piece(ctx, stage, B, v, start, count);
    else rt_stage_row_split(ctx, stage, B, v, start, count);
}

int rt_stage_row_overlaps(const RtContext *ctx, int stage_a, int stage_b, int64_t B,
                          int with_tp, RtOverlap *out) {
    int ta = with_tp && ctx->stage_tp[stage_a] > 0 ? ctx->stage_tp[stage_a] : 1;
    int tb = with_tp && ctx->stage_tp[stage_b] > 0 ? ctx->stage_tp[stage_b] : 1;
    int n = 0, a = 0, b = 0, na = ctx->stage_dp[stage_a] * ta, nb = ctx->stage_dp[stage_b] * tb;
    while (a < na && b < nb) { /* as rt_row_overlaps_tp */
        int64_t sa, ca, sb, cb;
        shard_piece(ctx, stage_a, B, a, with_tp, &sa, &ca);
        shard_piece(ctx, stage_b, B, b, with_tp, &sb, &cb);
        int64_t lo = sa > sb ? sa : sb;
        int64_t hi = (sa + ca) < (sb + cb) ? (sa + ca) : (sb + cb);
        if (hi > lo) out[n++] = (RtOverlap){.src = a, .dst = b, .start = lo, .count = hi - lo};
        if (sa + ca <= sb + cb) a++;
        else b++;
    }
    return n;
}

/* Walk both splits' boundaries together, like merging two sorted lists:
 * each step emits the overlap of the current A piece and B piece and
 * advances whichever ends first. */
int rt_row_overlaps_tp(int64_t B, int dp_a, int tp_a, int dp_b, int tp_b, RtOverlap *out) {
    int n = 0, a = 0, b = 0, na = dp_a * tp_a, nb = dp_b * tp_b;
    while (a < na && b < nb) {
        int64_t sa, ca, sb, cb;
        rt_row_piece(B, dp_a, tp_a, a, &sa, &ca);
        rt_row_piece(B, dp_b, tp_b, b, &sb, &cb);
        int64_t lo = sa > sb ? sa : sb;
        int64_t hi = (sa + ca) < (sb + cb) ? (sa + ca) : (sb + cb);
        if (hi > lo) out[n++] = (RtOverlap){.src = a, .dst = b, .start = lo, .count = hi - lo};
        if (sa + ca <= sb + cb) a++;
        else b++;
    }
    return n;
}

int rt_row_overlaps(int64_t B, int dp_a, int dp_b, RtOverlap *out) {
    return rt_row_overlaps_tp(B, dp_a, 1, dp_b, 1, out);
}
