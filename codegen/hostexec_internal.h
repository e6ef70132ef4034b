/* Shared between the host executor's runner (hostexec.c) and its op table
 * (hostexec_ops.c).  Not part of the public interface. */
#ifndef HETC_HOSTEXEC_INTERNAL_H
#define HETC_HOSTEXEC_INTERNAL_H

#include "hostexec.h"

/* What an op adapter sees: the node (for attrs, dtypes and the static
 * shapes shape-infer set), the input bytes (NULL for an omitted optional
 * input) and zeroed output buffers sized from the output shapes. */
typedef struct HxCall {
    const IrNode *n;
    const void **in;
    void **out;
    int k;            /* the table entry's kernel selector (HkBinOp, HkUnOp, ...) */
    IrError *err;
    /* the 0-based optimizer step being run (hexec_run_set_step), which a
     * stochastically rounded Cast draws its bits with; -1 outside a run */
    int64_t step;
} HxCall;

typedef int (*HxRunFn)(HxCall *c);
/* 1 if the adapter handles the node's dtypes; else 0 with a reason. */
typedef int (*HxCheckFn)(const IrNode *n, int k, char *why, size_t whylen);

typedef struct HxOpEntry {
    HxRunFn run;
    HxCheckFn check;  /* NULL: any dtype with a known element size */
    int k;
    int shape_only;   /* reads only its inputs' shapes (Shape): no data needed */
    unsigned same;    /* bit i: input i must have output 0's dtype (HX_ALL: every input) */
    /* bit i: output i may take input i's buffer (same dtype and byte size):
     * the kernel reads element j of input i before it writes element j of
     * output i, and does not rely on a zeroed output.  The executor
     * (hostexec_run.c) uses it when input i is dead after the node. */
    unsigned inplace;
    /* bit i: the kernel writes every element of output i whatever its
     * buffer held, so the executor need not zero it first (the kernels'
     * contract is zeroed outputs; an output neither marked here nor taken
     * in place is zeroed).  HETC_HX_POISON=1 fills such outputs with NaN
     * bytes instead, so a wrong mark shows (tests/train train_poison). */
    unsigned overwrite;
} HxOpEntry;
#define HX_ALL (~0u)

const HxOpEntry *hx_op_entry(IrOp op); /* NULL if none */
/* Inputs flagged in entry->same must share output 0's dtype, the arities
 * must satisfy ops.def, and required inputs must be present: a malformed
 * node is an error here rather than a mis-sized read in a kernel. */
int hx_check_node(const IrNode *n, const HxOpEntry *e, IrError *err);

#endif
