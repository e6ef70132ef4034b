/* Test helper: import a model, run the default passes, modules and layers,
 * and print what they found as JSON on stdout (for test_modules_layers.py).
 * usage: plan_ir_tool MODEL.onnx BATCH SEQ [TARGET_LAYERS [PARAM_DTYPE_BYTES]] */
#include <stdio.h>
#include <stdlib.h>

#include "layers.h"
#include "modules.h"
#include "onnx_import.h"
#include "op_cost.h"
#include "pass.h"

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: plan_ir_tool MODEL.onnx BATCH SEQ [TARGET_LAYERS [PARAM_BYTES]]\n");
        return 2;
    }
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.batch = atoll(argv[2]);
    io.seq = atoll(argv[3]);
    IrError err = {{0}};
    IrGraph *g = hetc_import_onnx(argv[1], &io, &err);
    if (!g || pass_run_pipeline(g, pass_default_pipeline(), NULL, &err)) {
        fprintf(stderr, "plan_ir_tool: %s\n", err.msg);
        return 1;
    }
    ModuleReport rep;
    if (modules_detect(g, NULL, &rep, &err)) {
        fprintf(stderr, "plan_ir_tool: %s\n", err.msg);
        return 1;
    }
    LayerOptions lo;
    layer_options_default(&lo);
    if (argc > 4)
        lo.target_layers = atoi(argv[4]);
    if (argc > 5)
        lo.param_dtype_bytes = atof(argv[5]);
    PlanLayer *L = NULL;
    LayerSummary s;
    if (layers_build(g, &lo, &L, &s, &err)) {
        fprintf(stderr, "plan_ir_tool: %s\n", err.msg);
        return 1;
    }
    printf("{\"per_module\": %d, \"heavy_bound\": %d, \"outside_layers\": %d,\n \"modules\": [",
           s.per_module, s.heavy_bound, s.outside_layers);
    for (int m = 0; m < rep.nmodules; m++)
        printf("%s{\"kind\": %d, \"first\": %d, \"last\": %d, \"nodes\": %d, \"heavy\": %d}",
               m ? ", " : "", rep.mods[m].kind, rep.mods[m].first_node, rep.mods[m].last_node,
               rep.mods[m].nnodes, rep.mods[m].heavy);
    printf("],\n \"layers\": [");
    for (int l = 0; l < s.L; l++)
        printf("%s\n  {\"fwd\": %.17g, \"bwd\": %.17g, \"param\": %.17g, \"act\": %.17g, "
               "\"out\": %.17g, \"heavy\": %d, \"sig\": \"%016llx\", \"first\": %d, \"last\": %d}",
               l ? "," : "", L[l].fwd_flops, L[l].bwd_flops, L[l].param_bytes, L[l].act_bytes,
               L[l].out_bytes, L[l].heavy_ops, (unsigned long long)L[l].sig, L[l].first_node,
               L[l].last_node);
    printf("],\n \"nodes\": [");
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        OpCost oc = {0};
        op_cost_node(n, &oc, NULL);
        printf("%s\n  {\"op\": \"%s\", \"dead\": %d, \"module\": %d, \"layer\": %d, \"out\": \"%s\", "
               "\"heavy\": %d, \"fwd\": %.17g, \"ins\": [", i ? "," : "", ir_op_name(n->op), n->dead,
               n->module_id, n->layer_id, n->nout ? n->out[0]->name : "", oc.heavy, oc.fwd_flops);
        for (int k = 0; k < n->nin; k++)
            printf("%s\"%s\"", k ? ", " : "", n->in[k] ? n->in[k]->name : "");
        printf("]}");
    }
    printf("],\n \"params\": {");
    int first = 1;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i]->kind == IR_VK_PARAM) {
            printf("%s\"%s\": %lld", first ? "" : ", ", g->values[i]->name,
                   (long long)ir_shape_numel(&g->values[i]->shape));
            first = 0;
        }
    printf("}}\n");
    free(L);
    module_report_free(&rep);
    ir_graph_free(g);
    return 0;
}
