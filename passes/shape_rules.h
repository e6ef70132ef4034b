/* Shape rules (private to passes/): one entry per IrOp in shape_rules.c.
 * A rule reads its node's input dtypes and shapes (and, where ONNX makes a
 * shape depend on data, the data of CONST inputs) and sets the dtype and
 * static shape of every output. */
#ifndef HETC_SHAPE_RULES_H
#define HETC_SHAPE_RULES_H

#include "ir.h"

typedef int (*ShapeRuleFn)(IrNode *n, IrError *err);

/* 1 if op has a rule (table-completeness test). */
int shape_rule_exists(IrOp op);
/* Run n's rule; errors name the node, op and offending shapes. */
int shape_infer_node(IrNode *n, IrError *err);


/* Helpers shared with canonicalize / const-fold. */
/* Error "node 'NAME' (Op): ..." */
int node_errorf(IrError *err, const IrNode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Read an integer tensor (i64 or i32) CONST value's elements as int64.
 * Returns the count, or -1 with err set (not constant / too many / bad dtype). */
int value_read_ints(IrValue *v, int64_t *out, int max, IrError *err);
/* Read element i of a numeric CONST/PARAM value as double; 0 on success. */
int value_read_double(IrValue *v, int64_t i, double *out);

#endif
