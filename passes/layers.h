/* Fine-grained layer construction (HAPT §5.1).
 *
 * Each module (modules.h) is split into k contiguous layers of its nodes in
 * topological order, balanced by cost (forward + backward FLOPs, op_cost.h)
 * with at most `heavy_bound` heavy ops per layer: first the smallest
 * possible maximum layer cost M* (DP over cut points), then, among splits
 * whose layers all cost <= M* (1 + slack), the one whose cuts carry the
 * fewest live bytes.  The split is computed once per module kind and reused
 * for every module of that kind, so equal blocks give layers with equal
 * signatures (zero-redundant profiling).  Each maximal run of nodes outside
 * modules (embedding; final norm + head) forms its own layer(s) (one per
 * `heavy_bound` heavy ops).
 *
 * k per module: from target_layers (--layers N) as
 * ceil((N - outside layers) / modules), else max(min_per_module, ceil(heavy
 * / heavy_bound)) (default >= 4 per block).  A target below modules +
 * outside layers groups g = ceil(modules / (N - outside)) consecutive whole
 * modules into one layer (the coarse granularity of Alpa / HAPT §2.2.2).  When k forces more heavy ops
 * per layer than heavy_bound, the bound becomes ceil(heavy / k).
 *
 * Layer ids on nodes are 1-based (node->layer_id = l for PlanLayer l, as in
 * plan.txt's layer ranges).
 */
#ifndef HETC_LAYERS_H
#define HETC_LAYERS_H

#include "modules.h"
#include "planner/planner.h"

typedef struct LayerOptions {
    int target_layers;      /* --layers N (0: default) */
    int min_per_module;     /* default 4 */
    int heavy_bound;        /* heavy ops per layer (default 2) */
    double slack;           /* balance slack for choosing cheap cuts (default 0.1) */
    double param_dtype_bytes; /* bytes per parameter in the training dtype (default 2) */
} LayerOptions;
void layer_options_default(LayerOptions *o);

typedef struct LayerSummary {
    int L;                  /* layers built */
    int per_module;         /* k; -g when g whole modules share one layer (target
                               below the module count) */
    int heavy_bound;        /* bound actually used */
    int outside_layers;     /* layers of nodes outside modules */
    int modules;            /* modules seen (distinct module_id) */
    double total_param_bytes, total_fwd_flops, total_bwd_flops;
} LayerSummary;

/* Build layers from the module annotations (run modules_detect first; with
 * none, every node counts as outside and is split by the heavy bound).
 * Sets node->layer_id; *out (malloc'd, L entries; layers[0] is layer 1).
 *
 * Per layer (per microbatch, as the graph's batch dim is bound):
 *   fwd_flops, bwd_flops  sums of op_cost_node over its nodes
 *   param_bytes           parameters whose FIRST consumer (graph order) is in
 *                         the layer, numel x param_dtype_bytes: a tied
 *                         embedding/head weight counts once, in the embedding
 *   act_bytes             activations (and graph inputs) a backward of the
 *                         layer's nodes reads (op_cost saves_inputs /
 *                         saves_output), each value counted once, in the
 *                         first layer that needs it; IR dtype (f32 exports:
 *                         4 bytes)
 *   out_bytes             cut_bytes after its last node: every activation
 *                         produced at or before the cut and used after it
 *   heavy_ops, sig        count; hash of its node signatures in order
 *   first_node, last_node g->nodes indices
 * Hook: when the graph holds @bwd nodes (training IR), bwd_flops and
 * act_bytes should come from them; until that issue lands only forward
 * nodes are read and the backward is estimated from the op table. */
int layers_build(IrGraph *g, const LayerOptions *o, PlanLayer **out, LayerSummary *sum,
                 IrError *err);
/* Pass-table entry ("layers"): default options (needs "modules" before it
 * for blocks; without, nodes are split by heavy ops only). */
int pass_layers(IrGraph *g, PassContext *ctx, IrError *err);

#endif
