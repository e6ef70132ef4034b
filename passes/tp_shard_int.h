/* tp_shard's internals, shared by its matcher files (tp_shard.c: MLP and
 * attention; tp_shard_vocab.c: vocabulary-parallel embedding and loss).
 * Not an API: include only from passes/tp_shard*.c. */
#ifndef HETC_TP_SHARD_INT_H
#define HETC_TP_SHARD_INT_H

#include "tp_shard.h"

typedef struct Ts {
    IrGraph *c;
    int tp, rank;
    TpShardResult *res;
    int capsh;
    IrValue **copy_of, **copy_val; /* TpCopy memo: one per Linear input value */
    int ncopy;
    int first, last;               /* layer range of the patterns to shard (0, 0: all) */
    /* tp_shard_find: match only, on the caller's graph; the matches go here */
    int dry;
    TpPattern *found;
    int nfound, capfound;
} Ts;

/* dry mode: record a match (the graph is left as it is) */
TpPattern *tps_add_found(Ts *t, int kind, const IrNode *row);
void tps_add_inner(TpPattern *p, const IrNode *n);
/* n's layer is inside the range being sharded */
int tps_in_range(const Ts *t, const IrNode *n);
int tps_uses(const IrGraph *g, const IrValue *v);
int tps_is_act(IrOp op);
/* a Linear with a single-use rank-2 f32 parameter weight (and bias) */
int tps_linear_ok(const IrGraph *g, const IrNode *l);
int64_t tps_last_dim(const IrValue *v);
/* an i64 rank-1 constant's elements (NULL if v is not one) */
const int64_t *tps_const_i64(IrValue *v, int64_t *n);
void tps_record_shard(Ts *t, const IrValue *p, int axis, int nr, const int64_t *st,
                      const int64_t *ln);
/* keep ranges of `axis` of parameter p (recorded as its TpParamShard) */
void tps_slice_param(Ts *t, IrValue *p, int axis, int nr, const int64_t *st, const int64_t *ln);
/* TpCopy(x) placed before its first reader `at`, one per value */
IrValue *tps_copy(Ts *t, IrValue *x, IrNode *at);
void tps_column_linear(Ts *t, IrNode *l, int nr, const int64_t *st, const int64_t *ln);
void tps_row_linear(Ts *t, IrNode *l, int64_t st, int64_t ln);
int tps_retarget_ok(const Ts *t, IrNode *r, int from_end);
int tps_retarget(Ts *t, IrNode *r, int from_end);

/* tp_shard_vocab.c: vocabulary-parallel embedding and LM head + loss,
 * matched/rewritten over the whole graph once the Linear-anchored patterns
 * are done (returns the number of patterns, -1 on error in err) */
int tps_vocab(Ts *t, IrError *err);

#endif
