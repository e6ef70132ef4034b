/* --seq against the model's maximum positions (issue 16 item 14).  A model
 * with a learned position table (gpt2's wpe: P rows) or a causal-mask
 * buffer (nanoGPT's bias [1,1,P,P]) covers at most P positions; beyond it
 * the failure surfaced far from the cause (a Where that does not
 * broadcast, an index out of range at step 1).  These say so by name. */
#ifndef HETC_SEQ_LIMIT_H
#define HETC_SEQ_LIMIT_H

#include <stdint.h>

#include "ir.h"

/* After the pass pipeline failed: when the graph holds a position table or
 * mask buffer smaller than seq (> 0), append to err's message that --seq
 * exceeds the model's maximum positions, naming the tensor. */
void seq_limit_explain(IrGraph *g, int64_t seq, IrError *err);
/* After the pipeline succeeded: a Gather / Embedding of a parameter or
 * constant table with constant indices (positions folded at this --seq)
 * reaching past the table is an error naming the node, the table, its
 * rows and, when seq (> 0) is the reason, the limit. */
int seq_limit_check(IrGraph *g, int64_t seq, IrError *err);

#endif
