/* Fusion of elementwise nodes (DESIGN §5, issue 15 item 2).
 *
 * fuse_graph groups chains / DAGs of elementwise f32 nodes of one graph
 * (Add Sub Mul Div, two-input Max Min, Neg Abs Sqrt Reciprocal Exp Log Tanh
 * Sigmoid Erf Relu Gelu SiLU, UnaryGrad, Where with an external bool
 * condition; numpy broadcasting of the external inputs; and bf16-mixed's
 * Casts f32 <-> bf16, so a kernel may load and store bf16) into groups of at
 * least two nodes, each becoming one generated kernel (FkKernel).  A group:
 *
 *  - has one phase and one output shape (every member's output is the
 *    iteration space; inputs from outside may broadcast, scalar f32
 *    constants become immediates);
 *  - runs at the execution position of its LAST member (`pos`, the order
 *    memplan calls the nodes in), so every reader outside the group of a
 *    value it computes must come later than that; this also makes the group
 *    convex (no path leaves it and comes back);
 *  - keeps in registers every value only its own members read that is not a
 *    graph output ("internal": memplan gives it no buffer); the others are
 *    the kernel's outputs.
 *
 * The kernel's arguments are the group's external inputs then its outputs,
 * each a pointer (at most FK_MAX_ARGS). */
#ifndef HETC_FUSE_H
#define HETC_FUSE_H

#include "fused_kernel.h"
#include "ir.h"

typedef struct FuseGroup {
    int nnodes;
    int *nodes;       /* node indices, in execution order */
    int last;         /* the node index whose action runs the group */
    int nins, nouts;
    IrValue *ins[FK_MAX_IN];   /* external inputs, kernel order (constant scalars excluded) */
    IrValue *outs[FK_MAX_OUT]; /* materialised values, kernel order */
    FkKernel k;
} FuseGroup;

typedef struct FuseGraph {
    int ngroups;
    FuseGroup *groups;
    int nnodes_graph, nvalues_graph;
    int *group_of;    /* [node index]: group, or -1 */
    char *internal;   /* [value id]: 1 = register only, no buffer */
    int nfused;       /* nodes inside groups */
} FuseGraph;

/* Group g's nodes; pos[i] = execution position of node i (NULL: i).
 * Only nodes with phase == want_phase (or any phase if want_phase < 0)
 * that the table accepts are fused.  prefix names the kernels
 * ("hetc_fused_s0_t": symbol prefix + "_<group>"). */
int fuse_graph(const IrGraph *g, const int *pos, const char *prefix, FuseGraph *fg,
               IrError *err);
void fuse_free(FuseGraph *fg);
/* Drop the groups whose kernel keep() refuses (g: the graph fuse_graph
 * grouped): their nodes go back to one call each, their values to buffers.
 * For a backend whose code generator lowers fewer kernels (NVPTX: none that
 * needs libm). */
void fuse_keep(const IrGraph *g, FuseGraph *fg, int (*keep)(const FkKernel *k));
/* group whose last member is node i, or NULL */
const FuseGroup *fuse_group_at(const FuseGraph *fg, int node);
/* 1 if node i is in a group but not its last member (no call of its own) */
int fuse_skipped(const FuseGraph *fg, int node);
/* 1 if value v lives only in registers */
int fuse_internal(const FuseGraph *fg, const IrValue *v);

#endif
