/* hetc: the driver.  Subcommands string the frontend, passes and backends
 * together; each lives in its own cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cmd_compile.h"
#include "cmd_plan.h"
#include "cmd_profile.h"
#include "cmd_train.h"
#include "pass.h"
#include "plan_pipeline.h"

static void usage(FILE *f) {
    fprintf(f,
            "hetc %s: a compiler for training LLMs on heterogeneous GPU clusters\n"
            "\n"
            "usage: hetc COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  import MODEL.onnx   import into hetc IR, run the passes, dump the IR\n"
            "  run MODEL.onnx      execute on the host backend (fp32 reference kernels)\n"
            "  plan MODEL.onnx CLUSTER.yaml -o DIR\n"
            "                      plan a heterogeneous pipeline (HAPT): plan.json, plan.txt,\n"
            "                      timeline.json, timeline.svg\n"
            "  train MODEL.onnx --data TOKENS.bin --steps N\n"
            "                      train on the host backend (loss, autodiff, AdamW/SGD),\n"
            "                      checkpoints, --export trained.onnx\n"
            "  profile --device-type NAME MODEL.onnx -o profile.json\n"
            "                      measure each distinct layer on the local GPU: the profile\n"
            "                      database of hetc plan --profile-db (docs/PROFILE_DB.md)\n"
            "  [compile] MODEL.onnx CLUSTER.yaml -o DIR\n"
            "                      the default: plan, then one executable per pipeline stage\n"
            "                      (DIR/stage_K) and DIR/launch.sh to train across processes\n"
            "\n"
            "  hetc COMMAND --help       options of one command\n"
            "  hetc --list-passes        the passes --passes and --dump-ir-after accept\n"
            "  hetc --version\n"
            "\n"
            "examples:\n"
            "  hetc import examples/gpt_tiny.onnx --batch 2 --seq 64 --dump-ir-after=all -o build/\n"
            "  hetc plan examples/gpt_tiny.onnx examples/clusters/case_study.yaml --seq 64 \\\n"
            "      --microbatch 2 --global-batch 64 -o build/\n"
            "  hetc run examples/gpt_tiny.onnx --input input_ids=examples/gpt_tiny.input_ids.npy \\\n"
            "      --output-dir out/ --expect logits=examples/gpt_tiny.logits.npy\n"
            "  hetc examples/gpt_tiny.onnx examples/clusters/three_mesh.yaml --seq 64 \\\n"
            "      --microbatch 4 --global-batch 16 -o build/ && build/launch.sh \\\n"
            "      --data examples/tiny_corpus.bin --steps 20\n",
            HETC_VERSION);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("hetc %s\n", HETC_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "--list-passes")) {
        pass_list(stdout);
        plan_pipeline_list(stdout);
        return 0;
    }
    if (!strcmp(cmd, "import")) return cmd_import(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "compile")) return cmd_compile(argc - 1, argv + 1);
    if (!strcmp(cmd, "profile")) return cmd_profile(argc - 1, argv + 1);
    /* default: hetc MODEL.onnx CLUSTER.yaml ... = compile */
    size_t cl = strlen(cmd);
    if (cl > 5 && !strcmp(cmd + cl - 5, ".onnx")) return cmd_compile(argc, argv);
    fprintf(stderr, "hetc: unknown command '%s' (see hetc --help)\n", cmd);
    return 2;
}
