/* Whole-graph analysis behind partition_stage (private to passes/).
 * Everything here depends on the forward graph and the spec only, so the
 * stages of one plan agree on boundary values and transfer ids. */
#ifndef HETC_PARTITION_ANA_H
#define HETC_PARTITION_ANA_H

#include "irtext.h"
#include "partition.h"

/* One boundary activation from stage `from` to stage `to`. */
typedef struct PartGx {
    int v;             /* value index in g->values */
    int from, to;
    int grad;          /* its gradient flows back (it depends on a parameter) */
    int id_act, id_grad;
} PartGx;

typedef struct PartAna {
    const IrGraph *g;
    const PartSpec *sp;
    IrPtrMap vix;          /* value -> index in g->values */
    int nv, nn;
    IrNode **nodes;        /* live nodes in graph order */
    int *layer, *stage;    /* by node: resolved layer, owning stage */
    unsigned char *dep;    /* by value: depends on a graph data input */
    unsigned char *needs;  /* by value: float, depends on a parameter (autodiff's rule) */
    unsigned char *reach;  /* by value: gradient flows to it from the loss or a boundary */
    unsigned char *incl;   /* [stage * nn + node]: node is computed on the stage */
    unsigned char *cons;   /* [value * nstages + stage]: the stage reads the value */
    int *ngrad_readers;    /* by value: boundary gradients it receives (stages) */
    PartGx *gx;            /* in producer-node order, then reader stage */
    int ngx;
    const IrValue *loss;
    int loss_node;
} PartAna;

int part_analyse(const IrGraph *g, const PartSpec *sp, PartAna *A, IrError *err);
void part_ana_free(PartAna *A);
int part_vi(const PartAna *A, const IrValue *v); /* index of v in g->values */
/* The parameters stage s holds, in value order (malloc'd). */
void part_stage_params(const PartAna *A, int s, PartParam **out, int *n);

#endif
