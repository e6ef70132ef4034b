/* Test helper (issue 9): import a model, run the default passes, modules and
 * layers, then layer_intra_from_ir, and print per layer what it read as JSON
 * (for test_intra_ir.py), with the graph's op counts to check against.
 * usage: intra_ir_tool MODEL.onnx BATCH SEQ [TARGET_LAYERS] */
#include <stdio.h>
#include <stdlib.h>

#include "cost_model.h"
#include "layers.h"
#include "modules.h"
#include "onnx_import.h"
#include "pass.h"

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: intra_ir_tool MODEL.onnx BATCH SEQ [TARGET_LAYERS]\n");
        return 2;
    }
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.batch = atoll(argv[2]);
    io.seq = atoll(argv[3]);
    IrError err = {{0}};
    IrGraph *g = hetc_import_onnx(argv[1], &io, &err);
    ModuleReport rep;
    if (!g || pass_run_pipeline(g, pass_default_pipeline(), NULL, &err) ||
        modules_detect(g, NULL, &rep, &err)) {
        fprintf(stderr, "intra_ir_tool: %s\n", err.msg);
        return 1;
    }
    LayerOptions lo;
    layer_options_default(&lo);
    if (argc > 4)
        lo.target_layers = atoi(argv[4]);
    PlanLayer *L = NULL;
    LayerSummary s;
    if (layers_build(g, &lo, &L, &s, &err)) {
        fprintf(stderr, "intra_ir_tool: %s\n", err.msg);
        return 1;
    }
    LayerIntra *li = calloc((size_t)s.L, sizeof *li);
    if (!li || layer_intra_from_ir(g, L, s.L, li, &err)) {
        fprintf(stderr, "intra_ir_tool: %s\n", li ? err.msg : "out of memory");
        return 1;
    }
    int lin = 0, emb = 0, attn = 0, ce = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->dead)
            continue;
        lin += n->op == IR_OP_LINEAR && n->nin > 1 && n->in[1]->kind == IR_VK_PARAM;
        emb += n->op == IR_OP_EMBEDDING && n->in[0]->kind == IR_VK_PARAM;
        attn += n->op == IR_OP_ATTENTION;
        ce += n->op == IR_OP_CROSS_ENTROPY;
    }
    printf("{\"modules\": %d, \"linear\": %d, \"embedding\": %d, \"attention\": %d, "
           "\"cross_entropy\": %d, \"layers\": [", rep.nmodules, lin, emb, attn, ce);
    for (int l = 0; l < s.L; l++) {
        int mod = 0;
        for (int i = 0; i < g->nnodes; i++)
            if (!g->nodes[i]->dead && g->nodes[i]->layer_id == l + 1 && g->nodes[i]->module_id >= 0)
                mod = 1;
        printf("%s\n {\"in_module\": %d, \"fwd\": %.17g, \"param\": %.17g, \"act\": %.17g, "
               "\"out\": %.17g, \"tp_flops_frac\": %.17g, \"tp_param_frac\": %.17g, "
               "\"tp_act_frac\": %.17g, \"ar_fwd\": %d, \"ar_bwd\": %d, \"ar_fwd_bytes\": %.17g, "
               "\"ar_bwd_bytes\": %.17g, \"attn_bytes\": %.17g}", l ? "," : "", mod, L[l].fwd_flops,
               L[l].param_bytes, L[l].act_bytes, L[l].out_bytes, li[l].tp_flops_frac,
               li[l].tp_param_frac, li[l].tp_act_frac, li[l].ar_fwd, li[l].ar_bwd,
               li[l].ar_fwd_bytes, li[l].ar_bwd_bytes, li[l].attn_bytes);
    }
    printf("]}\n");
    free(li);
    free(L);
    module_report_free(&rep);
    ir_graph_free(g);
    return 0;
}
