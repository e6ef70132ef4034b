/* hetc plan's option parsing (plan_args.h), shared with hetc compile. */
#include "plan_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_plan_alt.h"
#include "cost_model.h"
#include "planner.h"
#include "planners.h"

static int parse_double(const char *opt, const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || *end || end == s || !isfinite(v) || v < 0) {
        fprintf(stderr, "hetc plan: %s expects a non-negative number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

void plan_args_default(PlanArgs *a, FILE *ibinds_log)
{
    memset(a, 0, sizeof *a);
    compile_opts_init(&a->co);
    compile_opts_bind_extra_inputs(&a->co, ibinds_log);
    a->eps = 0.1;
    a->imbalance = -1;
    a->efficiency = 0.5;
    a->min_heavy = 2;
    a->schedule = SCHED_H1F1B;
    a->max_tp = 8;
    a->zero = a->recompute = -1;
    a->max_groups = 32;
    a->precision = PRECISION_BF16_MIXED; /* precision.h: the default */
}

/* The options whose value is a word: schedule, intra-op modes, planner. */
static int parse_word(PlanArgs *a, const char *v, int r, const char *name)
{
    if (r < 0)
        return -1;
    if (!strcmp(name, "--schedule")) {
        a->schedule = schedule_from_name(v);
        if (a->schedule < 0) {
            char names[128];
            schedule_names(names, sizeof names, "");
            fprintf(stderr, "hetc plan: unknown schedule '%s' (%s)\n", v, names);
            return -1;
        }
    } else if (!strcmp(name, "--zero")) {
        if (strcmp(v, "auto") && strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "2")) {
            fprintf(stderr, "hetc plan: --zero expects auto, 0, 1 or 2, got '%s'\n", v);
            return -1;
        }
        a->zero = strcmp(v, "auto") ? v[0] - '0' : -1;
    } else if (!strcmp(name, "--recompute")) {
        a->recompute = strcmp(v, "auto") ? recompute_from_name(v) : -1;
        if (strcmp(v, "auto") && a->recompute < 0) {
            fprintf(stderr, "hetc plan: --recompute expects auto, none, full or selective, "
                    "got '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(name, "--planner")) {
        if (!planner_find(v)) {
            char names[256];
            planner_names(names, sizeof names);
            fprintf(stderr, "hetc plan: unknown planner '%s' (%s)\n", v, names);
            return -1;
        }
        a->planner = v;
    } else if (!strcmp(name, "--autohet-profile")) {
        if (strcmp(v, "exact") && strcmp(v, "binary")) {
            fprintf(stderr, "hetc plan: --autohet-profile must be exact or binary, not '%s'\n", v);
            return -1;
        }
        a->autohet_binary = !strcmp(v, "binary");
    } else if (!strcmp(name, "--precision")) {
        /* hetc compile refuses cluster-dtype itself (cmd_compile.c) */
        Precision pr;
        if (precision_parse("hetc plan", v, 1, &pr))
            return -1;
        a->precision = pr;
        a->precision_given = 1;
    } else if (!strcmp(name, "--grad-reduce-dtype")) {
        if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
            fprintf(stderr, "hetc plan: --grad-reduce-dtype %s: expected fp32 or bf16\n", v);
            return -1;
        }
        a->grad_reduce_bf16 = !strcmp(v, "bf16");
    } else if (!strcmp(name, "--tp-reduce-dtype")) {
        if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
            fprintf(stderr, "hetc plan: --tp-reduce-dtype %s: expected fp32 or bf16\n", v);
            return -1;
        }
        a->tp_reduce_bf16 = !strcmp(v, "bf16");
    } else if (!strcmp(name, "--profile-db")) {
        a->profile_db = v;
    } else {
        a->write_profile_db = v;
    }
    return 1;
}

/* The options with a bounded number: --max-tp, --time-limit, --max-node-groups. */
static int parse_bounded(PlanArgs *a, const char *v, int r, const char *name)
{
    if (!strcmp(name, "--max-tp")) {
        if (r < 0 || cli_parse_i64("--max-tp", v, &a->max_tp))
            return -1;
        if (a->max_tp < 1 || a->max_tp > 1024 || (a->max_tp & (a->max_tp - 1))) {
            fprintf(stderr, "hetc plan: --max-tp expects a power of two >= 1, got '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(name, "--time-limit")) {
        if (r < 0 || parse_double("--time-limit", v, &a->time_limit))
            return -1;
        if (!(a->time_limit > 0) || a->time_limit > 1e9) {
            fprintf(stderr, "hetc plan: --time-limit expects seconds > 0, got '%s'\n", v);
            return -1;
        }
    } else {
        if (r < 0 || cli_parse_i64("--max-node-groups", v, &a->max_groups))
            return -1;
        if (a->max_groups > 1000000) {
            fprintf(stderr, "hetc plan: --max-node-groups expects 0..1000000, got '%s'\n", v);
            return -1;
        }
    }
    return 1;
}

int plan_args_parse_one(PlanArgs *a, int argc, char **argv, int *i)
{
    const char *v = NULL;
    int r;
    if ((r = cli_opt(argc, argv, i, "--microbatch", &v)) != 0) {
        if (r > 0 && !strcmp(v, "auto")) { /* searched for the global batch */
            a->mb_search = 1;
            a->co.batch = -1;
            return 1;
        }
        a->mb_search = 0;
        return r < 0 || cli_parse_i64("--microbatch", v, &a->co.batch) ? -1 : 1;
    }
#define INTOPT(name, field)                                                     \
    if ((r = cli_opt(argc, argv, i, name, &v)) != 0)                            \
        return r < 0 || cli_parse_i64(name, v, &a->field) ? -1 : 1;
#define DBLOPT(name, field)                                                     \
    if ((r = cli_opt(argc, argv, i, name, &v)) != 0)                            \
        return r < 0 || parse_double(name, v, &a->field) ? -1 : 1;
    INTOPT("--global-batch", global_batch)
    INTOPT("--layers", layers)
    INTOPT("--threads", threads)
    INTOPT("--min-heavy", min_heavy)
    INTOPT("--max-stages", max_stages)
    INTOPT("--coarse-layers", coarse_layers)
    if (cli_old_eps("plan", argv[*i]))
        return -1;
    DBLOPT("--plan-eps", eps)
    DBLOPT("--imbalance", imbalance)
    DBLOPT("--efficiency", efficiency)
#undef INTOPT
#undef DBLOPT
    static const char *const words[] = {"--schedule", "--zero", "--recompute", "--planner",
                                        "--autohet-profile", "--profile-db",
                                        "--write-profile-db", "--precision",
                                        "--grad-reduce-dtype", "--tp-reduce-dtype", NULL};
    for (int k = 0; words[k]; k++)
        if ((r = cli_opt(argc, argv, i, words[k], &v)) != 0)
            return parse_word(a, v, r, words[k]);
    static const char *const bounded[] = {"--max-tp", "--time-limit", "--max-node-groups", NULL};
    for (int k = 0; bounded[k]; k++)
        if ((r = cli_opt(argc, argv, i, bounded[k], &v)) != 0)
            return parse_bounded(a, v, r, bounded[k]);
    const char *arg = argv[*i];
    if (!strcmp(arg, "--dp-divides-microbatch"))
        return a->dp_divides = 1;
    if (!strcmp(arg, "--no-intra-op"))
        return a->no_intra = 1;
    if (!strcmp(arg, "--baseline-equal"))
        return a->baseline_equal = 1;
    if (!strcmp(arg, "--progress") || !strcmp(arg, "--no-progress")) {
        a->progress = arg[2] == 'n' ? -1 : 1;
        return 1;
    }
    return compile_opts_parse_one(&a->co, argc, argv, i);
}

int plan_args_finish(PlanArgs *a)
{
    /* A global batch given without --microbatch (or --batch) fixes G and
     * leaves the microbatch rows to the planner (plan_pipeline.c,
     * mb_search); rows given pin them; with neither given the default
     * stays 1 row, G = 8 (pinned, as before). */
    if (a->co.batch > 0)
        a->mb_search = 0;
    else if (a->global_batch > 0)
        a->mb_search = 1;
    if (a->co.batch <= 0) {
        if (a->co.batch == 0) {
            fprintf(stderr, "hetc plan: --microbatch must be >= 1\n");
            return 2;
        }
        a->co.batch = 1;
    }
    if (a->global_batch == 0)
        a->global_batch = 8 * a->co.batch;
    if (a->global_batch % a->co.batch) {
        fprintf(stderr, "hetc plan: --global-batch %lld is not divisible by --microbatch %lld "
                "(B = G / b microbatches must be whole)\n", (long long)a->global_batch,
                (long long)a->co.batch);
        return 2;
    }
    if (a->min_heavy < 1) {
        fprintf(stderr, "hetc plan: --min-heavy must be >= 1\n");
        return 2;
    }
    if (!(a->efficiency > 0 && a->efficiency <= 1)) {
        fprintf(stderr, "hetc plan: --efficiency must be in (0, 1]\n");
        return 2;
    }
    return 0;
}

int plan_args_microbatches(const PlanArgs *a)
{
    return (int)(a->global_batch / a->co.batch);
}
