/* Repeated-module detection (HAPT §5.1) and helpers shared with layers.c.
 *
 * The forward graph's live nodes in topological order form a sequence of
 * node signatures (op + attribute summary + input/output dtypes, shapes and
 * value kinds; never names).  A module is the most frequent contiguous
 * subsequence holding at least z heavy ops (op_cost.h), counted without
 * overlap; among equally frequent candidates the longest wins (so a whole
 * block beats a pattern inside it), then the alignment whose cuts carry the
 * fewest live bytes (a block starts where only the residual stream is live),
 * then the earliest.  Its occurrences become modules 0, 1, ...; the search
 * repeats on the nodes left (a model with two kinds of blocks gets both)
 * until nothing repeats.  Algorithm: modules.c (seeds of exactly z heavy ops
 * grouped by rolling hash, then extended; O(n log n + seeds x period)).
 */
#ifndef HETC_MODULES_H
#define HETC_MODULES_H

#include <stdint.h>
#include <stdio.h>

#include "pass.h"

typedef struct ModuleOptions {
    int min_heavy;          /* z: heavy ops a module must hold (default 2) */
    int max_kinds;          /* rounds of the search (default 8) */
} ModuleOptions;
void module_options_default(ModuleOptions *o);

typedef struct ModuleInfo {
    int kind;               /* which pattern (0: the first found) */
    int first_node, last_node;  /* indices into g->nodes, inclusive */
    int nnodes, heavy;      /* live nodes and heavy ops in it */
} ModuleInfo;

typedef struct ModuleReport {
    ModuleInfo *mods;       /* in graph order; mods[k] is module_id k */
    int nmodules;
    int nkinds;
    int outside_nodes;      /* live nodes in no module */
    int live_nodes;
} ModuleReport;
void module_report_free(ModuleReport *r);
/* "modules: 12 x 19 nodes (5 heavy) starting at nodes 3, 22, ...; 7 nodes outside" */
void module_report_print(FILE *f, const ModuleReport *r, const IrGraph *g);

/* Find modules and set node->module_id (-1 outside).  rep may be NULL. */
int modules_detect(IrGraph *g, const ModuleOptions *o, ModuleReport *rep, IrError *err);
/* The pass-table entry ("modules"), with default options. */
int pass_modules(IrGraph *g, PassContext *ctx, IrError *err);

/* ---- helpers shared with layers.c ---- */
/* Structural signature of a node: equal for nodes that compute the same
 * thing on the same shapes, whatever their names. */
uint64_t node_signature(const IrNode *n);

/* The live forward (@fwd) nodes of g in order.  pos[i] is the g->nodes
 * index of the i-th one; returns the count (malloc'd *pos; -1 on OOM). */
int live_nodes(const IrGraph *g, int **pos);

/* cut[j], j = 0..n: bytes of the activations and graph inputs live across
 * the cut just before live node j (produced before it, consumed at or after
 * it); cut[0] and cut[n] count only graph inputs / nothing.  order: the
 * live nodes (from live_nodes).  Returns a malloc'd array of n + 1 or NULL. */
double *cut_bytes(const IrGraph *g, const int *order, int n);

#endif
