/* hetc plan: import, forward passes, modules, layers, profile, HAPT DP over
 * every mesh order, simulate the plan under its schedule, write
 * plan.json / plan.txt / timeline.json / timeline.svg (docs/PLAN_FORMAT.md).
 * The options are plan_args.c's, the steps plan_pipeline.c's. */
#include "cmd_plan.h"

#include <stdio.h>
#include <string.h>

#include "plan_pipeline.h"
#include "planners.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hetc plan MODEL.onnx CLUSTER.yaml -o DIR [options]\n"
            "\n"
            "(hetc compile, or hetc MODEL.onnx CLUSTER.yaml, plans the same way and then\n"
            "builds the per-stage executables and launch.sh: hetc compile --help.)\n"
            "\n"
            "Plan a heterogeneity-aware pipeline (HAPT): repeated modules, fine-grained\n"
            "layers, zero-redundant profiling, the DP of Eq. 13-24 over every mesh order,\n"
            "and a simulated iteration.  Writes DIR/plan.json, plan.txt, timeline.json,\n"
            "timeline.svg (docs/PLAN_FORMAT.md) and prints plan.txt.\n"
            "\n"
            "  --precision P          training precision planned: bf16-mixed (default: the\n"
            "                         stage binaries' mixed precision, their bf16 Linears\n"
            "                         timed at the bf16 peak, memory from their arena), fp32\n"
            "                         (4-byte weights, gradients, AdamW m and v and activations\n"
            "                         at the devices' fp32 peak; what hetc compile --backend\n"
            "                         cuda runs unless told otherwise: plan with --precision\n"
            "                         fp32 for it), or cluster-dtype (the cluster file's dtype,\n"
            "                         e.g. fp16 mixed precision as the papers plan: a what-if\n"
            "                         that hetc compile refuses).  hetc compile --plan FILE\n"
            "                         compiles the plan's precision unless given --precision\n"
            "  --grad-reduce-dtype fp32|bf16, --tp-reduce-dtype fp32|bf16  (bf16-mixed) the DP\n"
            "                         gradient sums / the TP sums of activations over a bf16\n"
            "                         wire: planned at half the bytes (as hetc compile runs\n"
            "                         them; pass them to hetc compile too)\n"
            "  --global-batch G       samples per iteration (default 8 x microbatch).  Given\n"
            "                         without --microbatch, the planner searches the rows per\n"
            "                         microbatch: every power of two dividing G, and G; the\n"
            "                         fastest plan by Eq. 13 wins (--planner hapt)\n"
            "  --microbatch b|auto    samples per microbatch = the bound batch dim (default 1;\n"
            "                         --batch is the same option); b pins them, auto searches\n"
            "                         them as above (G default 8)\n"
            "  --layers N             target number of fine-grained layers (default: >= 4 per\n"
            "                         block, see passes/layers.h)\n"
            "  --schedule S           h1f1b (default) | 1f1b | eager1f1b | gpipe\n"
            "  --threads N            DP worker threads (default: CPUs online)\n"
            "  --plan-eps E           the planner's epsilon of Eq. 2 (default 0.1; AdamW's is\n"
            "                         hetc train / compile's --adam-eps)\n"
            "  --imbalance X          imbalance pruning threshold T of docs/CLUSTER.md\n"
            "                         (default 4; 0 = off)\n"
            "  --min-heavy Z          heavy ops a repeated module must hold (default 2)\n"
            "  --max-stages S         cap on pipeline stages (default: what keeps the DP\n"
            "                         table under 16M states per thread)\n"
            "  --efficiency F         fraction of peak FLOP/s GEMMs reach (default 0.5)\n"
            "  --profile-db FILE      measured per-layer costs (docs/PROFILE_DB.md); layers it\n"
            "                         lacks are costed by the analytic model\n"
            "  --write-profile-db FILE  write the analytic model's per-layer figures in the\n"
            "                         profile database format (a template for hetc profile)\n"
            "  --progress             print the live search progress line even when stderr is\n"
            "                         not a terminal (default: live on a terminal; otherwise\n"
            "                         one 'progress:' line every 10 s once the search has\n"
            "                         run 5 s, on stderr)\n"
            "  --no-progress          no progress lines\n"
            "  --time-limit SECONDS   stop the search after SECONDS and write the best plan\n"
            "                         found so far, marked as such in plan.txt, plan.json and\n"
            "                         on stderr (default: none)\n"
            "  --max-node-groups G    search a mesh of more than G nodes in G node groups or\n"
            "                         fewer (a heuristic, stated in the output; default 32;\n"
            "                         0 = every submesh shape, exact: slow beyond ~64 nodes)\n"
            "  --dp-divides-microbatch  only DP degrees that divide the microbatch rows (even\n"
            "                         rows per rank; hetc compile always sets it).  A DP degree\n"
            "                         above the rows is never chosen (a rank without a row)\n"
            "  --max-tp N             largest tensor-parallel degree per stage (power of two,\n"
            "                         inside a node; default 8)\n"
            "  --zero auto|0|1|2      ZeRO stage inside a stage's DP group (default auto: the\n"
            "                         cheapest plan that fits memory)\n"
            "  --recompute auto|none|full|selective  activation recompute per stage (default auto)\n"
            "  --no-intra-op          tp = 1, ZeRO 0, no recompute (the plans before issue 9)\n"
            "  --planner NAME         one of these (the seed planners of docs/COMPARISON.md\n"
            "                         plan on the same layers and simulator):\n");
    planner_help(f, "    ");
    fprintf(f,
            "  --coarse-layers N      --planner coarse: merge the layers into N (default 8)\n"
            "  --autohet-profile exact|binary  --planner autohet: cost stages from every layer\n"
            "                         count, or from power-of-two counts composed (Eq. 5)\n"
            "  --baseline-equal       also simulate the same stages and submeshes with an\n"
            "                         equal number of layers per stage, and print the ratio\n"
            "  --dump-ir-after=modules,layers,plan  (or any pass) IR with module/layer/stage ids\n"
            "\n");
    compile_opts_help(f);
}

int cmd_plan(int argc, char **argv)
{
    PlanArgs a;
    plan_args_default(&a, stderr);
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        int r = plan_args_parse_one(&a, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "hetc plan: unknown option '%s' (see hetc plan --help)\n", argv[i]);
            return 2;
        }
        if (!model)
            model = argv[i];
        else if (!a.cluster)
            a.cluster = argv[i];
        else {
            fprintf(stderr, "hetc plan: unexpected argument '%s' (MODEL.onnx CLUSTER.yaml)\n", argv[i]);
            return 2;
        }
    }
    if (!model || !a.cluster) {
        usage(stderr);
        return 2;
    }
    a.co.model = model;
    if (plan_args_finish(&a))
        return 2;
    PlanCtx pc;
    plan_ctx_init(&pc, &a, "hetc plan");
    int rc = plan_pipeline_run(&pc);
    plan_ctx_free(&pc);
    return rc;
}
