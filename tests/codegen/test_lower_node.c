/* Each direct-call lowering (codegen/lower_node.c) against the host executor
 * (codegen/hostexec, what hetrt_node runs): per op, a small graph with random
 * dims (2..5) and random data; every node must lower, its calls run through
 * libffi on the extern signatures lower_node declares (so a wrong signature
 * in the table fails here), and its outputs must equal the executor's bit for
 * bit.  The direct arena's outputs start as garbage (0xA5 bytes), the
 * executor's zeroed: a kernel that relies on zeroed outputs fails too.
 *
 *   test_lower_node [SEEDS]
 */
#include <ffi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_bf16.h"
#include "hk_entry.h"
#include "hk_train.h"
#include "hostexec.h"
#include "ir.h"
#include "lower_node.h"
#include "stage_abi.h" /* HETC_KERNEL_ERRLEN */

/* stand-ins of the two runtime entries lowered calls use (stage_abi.h) */
static int32_t t_copy(void *d, const void *s, int64_t n) {
    memmove(d, s, (size_t)n);
    return 0;
}
static int32_t t_zero(void *d, int64_t n) {
    memset(d, 0, (size_t)n);
    return 0;
}

/* the runtime's vocab-parallel entries (stage_abi.h) as TP rank 0 runs them */
static int32_t t_tp_embedding(int32_t idt, const void *ids, int64_t n, const float *table,
                              int64_t st, int64_t V, int64_t vf, int64_t D, float *y) {
    return hk_embedding_shard_f32((HkDType)idt, ids, n, table, st, V, vf, D, y, NULL) != 0;
}
static int32_t t_tp_embedding_grad(int32_t idt, const void *ids, int64_t n, const float *dy,
                                   int64_t st, int64_t V, int64_t vf, int64_t D, float *dt) {
    return hk_embedding_backward_shard_f32((HkDType)idt, ids, n, dy, st, V, vf, D, dt, 0,
                                           NULL) != 0;
}
static int32_t t_tp_vocab_ce_stats(const float *l, int32_t tdt, const void *t, const float *m,
                                   int64_t N, int64_t Vl, int64_t st, int64_t vf, int32_t ui,
                                   int64_t ii, float *stats) {
    return hk_vocab_ce_stats_f32(l, (HkDType)tdt, t, m, N, Vl, st, vf, ui, ii, stats, NULL) != 0;
}
static int32_t t_tp_vocab_ce_bwd(const float *l, int32_t tdt, const void *t, const float *m,
                                 const float *stats, int64_t N, int64_t Vl, int64_t st,
                                 int64_t vf, int32_t ui, int64_t ii, const float *d, float *dl) {
    return hk_vocab_ce_bwd_f32(l, (HkDType)tdt, t, m, stats, N, Vl, st, vf, ui, ii, *d, dl,
                               NULL) != 0;
}

typedef struct Fn {
    const char *name;
    void (*fn)(void);
} Fn;
#define F(x) {#x, (void (*)(void))x}
static const Fn fns[] = {
    {"hetrt_copy", (void (*)(void))t_copy}, {"hetrt_zero", (void (*)(void))t_zero},
    F(hk_binary), F(hk_unary), F(hk_where), F(hk_clip), F(hk_cast), F(hk_fill), F(hk_isnan),
    F(hk_softmax), F(hk_cumsum), F(hk_layernorm_f32), F(hk_rmsnorm_f32), F(hk_matmul),
    F(hk_gemm_f32), F(hk_linear_f32), F(hk_linear_bf16), F(hk_linear_backward_bf16),
    F(hk_attention_f32), F(hk_transpose), F(hk_slice),
    F(hk_expand), F(hk_gather), F(hk_trilu), F(hk_tile), F(hk_embedding_shard_f32),
    F(hk_entry_reduce), F(hk_entry_concat_part), F(hk_entry_slice_grad_f32),
    F(hk_entry_ce_bwd_f32), F(hk_entry_memset), F(hk_entry_adamw_f32), F(hk_cross_entropy_fwd_f32),
    F(hk_linear_backward_f32), F(hk_layernorm_backward_f32), F(hk_rmsnorm_backward_f32),
    F(hk_attention_backward_f32), F(hk_unary_backward_f32), F(hk_softmax_backward_f32),
    F(hk_embedding_backward_shard_f32), F(hk_reduce_sum_to_shape_f32),
    F(hk_gather_backward_f32), F(hk_vocab_ce_loss_f32), F(hk_gather_nd), F(hk_gather_elements),
    F(hk_scatter_nd), F(hk_gather_nd_backward_f32), F(hk_gather_elements_backward_f32),
    {"hetrt_tp_embedding", (void (*)(void))t_tp_embedding},
    {"hetrt_tp_embedding_grad", (void (*)(void))t_tp_embedding_grad},
    {"hetrt_tp_vocab_ce_stats", (void (*)(void))t_tp_vocab_ce_stats},
    {"hetrt_tp_vocab_ce_bwd", (void (*)(void))t_tp_vocab_ce_bwd},
};
#undef F

static const Fn *find_fn(const char *name) {
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!strcmp(fns[i].name, name)) return &fns[i];
    return NULL;
}
static const LeExtern *find_extern(const char *name) {
    static const LeExtern rt[] = {{"hetrt_copy", LE_I32, 3, {LE_PTR, LE_PTR, LE_I64}},
                                  {"hetrt_zero", LE_I32, 2, {LE_PTR, LE_I64}}};
    for (int i = 0; i < 2; i++)
        if (!strcmp(rt[i].name, name)) return &rt[i];
    for (int i = 0; i < lower_node_nexterns; i++)
        if (!strcmp(lower_node_externs[i].name, name)) return &lower_node_externs[i];
    return NULL;
}

/* Cases: IR text with the dims as printf positional arguments:
 * %1$d A  %2$d B  %3$d C  %4$d A+B  %5$d B+C  %6$d B-1  %7$d C-1  %8$d A*B  %9$d 2A */
static const char *const cases[] = {
    "input %%x : f32[%1$d,%2$d]\n input %%y : f32[%2$d]\n %%z = Add(%%x, %%y) : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,1,%3$d]\n input %%y : f32[%2$d,1]\n %%z = Mul(%%x, %%y) : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%y : f32[%1$d,%2$d]\n %%z = Div(%%x, %%y) : f32[%1$d,%2$d]\n %%w = Sub(%%z, %%x) : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n const %%e : f32[] = dense[2]\n %%z = Pow(%%x, %%e) : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d]\n input %%y : f32[%1$d]\n %%z = Less(%%x, %%y) : bool[%1$d]",
    "input %%c : bool[%1$d,%2$d]\n input %%x : f32[%1$d,%2$d]\n input %%y : f32[%2$d]\n %%z = Where(%%c, %%x, %%y) : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n %%a = Exp(%%x) : f32[%1$d,%2$d]\n %%b = Tanh(%%a) : f32[%1$d,%2$d]\n %%c = Sigmoid(%%b) : f32[%1$d,%2$d]\n %%d = Relu(%%x) : f32[%1$d,%2$d]\n %%e = Neg(%%d) : f32[%1$d,%2$d]\n %%f = Sqrt(%%a) : f32[%1$d,%2$d]\n %%g = Erf(%%x) : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n %%a = Gelu(%%x) {approximate=\"tanh\"} : f32[%1$d,%2$d]\n %%b = Gelu(%%x) : f32[%1$d,%2$d]\n %%c = SiLU(%%x) : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n %%y = Cast(%%x) {to=6} : i32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%y : f32[%2$d]\n input %%z : f32[%1$d,1]\n %%m = Max(%%x, %%y, %%z) : f32[%1$d,%2$d]\n %%n = Min(%%x, %%y) : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n const %%lo : f32[] = dense[-0.5]\n const %%hi : f32[] = dense[0.5]\n %%y = Clip(%%x, %%lo, %%hi) : f32[%1$d,%2$d]",
    "input %%a : f32[%3$d,%1$d,%2$d]\n input %%b : f32[%2$d,%1$d]\n %%y = MatMul(%%a, %%b) : f32[%3$d,%1$d,%1$d]",
    "input %%a : f32[%2$d,%1$d]\n input %%b : f32[%2$d,%3$d]\n input %%c : f32[%3$d]\n %%y = Gemm(%%a, %%b, %%c) {transA=1, alpha=0.5, beta=2} : f32[%1$d,%3$d]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n input %%w : f32[%3$d,%2$d]\n input %%b : f32[%2$d]\n %%y = Linear(%%x, %%w, %%b) : f32[%1$d,%2$d,%2$d]",
    "input %%q : f32[%1$d,%2$d,%3$d]\n input %%k : f32[%1$d,%2$d,%3$d]\n input %%v : f32[%1$d,%2$d,%3$d]\n %%y = Attention(%%q, %%k, %%v) {causal=1} : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n const %%ax : i64[1] = dense[1]\n const %%al : i64[1] = dense[-1]\n %%s = ReduceSum(%%x, %%ax) {keepdims=0} : f32[%1$d,%3$d]\n %%m = ReduceMean(%%x, %%ax) : f32[%1$d,1,%3$d]\n %%x2 = ReduceMax(%%x, %%al) : f32[%1$d,%2$d,1]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n %%s = Softmax(%%x) {axis=1} : f32[%1$d,%2$d,%3$d]\n %%l = LogSoftmax(%%x) {axis=-1} : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n const %%ax : i64[] = dense[1]\n %%y = CumSum(%%x, %%ax) {exclusive=1} : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n input %%s : f32[%3$d]\n input %%b : f32[%3$d]\n %%y = LayerNorm(%%x, %%s, %%b) {axis=-1, epsilon=1e-05} : f32[%1$d,%2$d,%3$d]\n %%r = RMSNorm(%%x, %%s) {axis=-1, epsilon=1e-06} : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n %%y = Transpose(%%x) {perm=[2, 0, 1]} : f32[%3$d,%1$d,%2$d]",
    "input %%x : f32[%1$d,%5$d]\n %%a, %%b = Split(%%x) {axis=1} : f32[%1$d,%2$d], f32[%1$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%y : f32[%1$d,%3$d]\n %%z = Concat(%%x, %%y) {axis=1} : f32[%1$d,%5$d]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n const %%st : i64[2] = dense[1, -1]\n const %%en : i64[2] = dense[100, -1000]\n const %%ax : i64[2] = dense[1, 2]\n const %%sp : i64[2] = dense[1, -1]\n %%y = Slice(%%x, %%st, %%en, %%ax, %%sp) : f32[%1$d,%6$d,%3$d]",
    "input %%x : f32[%2$d,1]\n const %%sh : i64[3] = dense[%1$d, %2$d, %3$d]\n %%y = Expand(%%x, %%sh) : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n const %%sh : i64[1] = dense[%8$d]\n %%y = Reshape(%%x, %%sh) : f32[%8$d]\n %%z = Identity(%%y) : f32[%8$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%i : i64[%3$d]\n %%y = Gather(%%x, %%i) {axis=1} : f32[%1$d,%3$d]",
    "input %%t : f32[%2$d,%3$d]\n input %%i : i64[%1$d]\n %%y = Embedding(%%t, %%i) : f32[%1$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n const %%k : i64[] = dense[1]\n %%y = Trilu(%%x, %%k) {upper=0} : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n const %%r : i64[2] = dense[2, 1]\n %%y = Tile(%%x, %%r) : f32[%9$d,%2$d]",
    "input %%l : f32[%1$d,%3$d]\n input %%t : i64[%1$d]\n input %%d : f32[]\n %%y = CrossEntropy(%%l, %%t) : f32[]\n %%g = CrossEntropyGrad(%%l, %%t, %%d) : f32[%1$d,%3$d]\n %%y2 = CrossEntropy(%%l, %%t) {use_ignore=1, ignore_index=1} : f32[]\n %%g2 = CrossEntropyGrad(%%l, %%t, %%d) {use_ignore=1, ignore_index=1} : f32[%1$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%w : f32[%2$d,%3$d]\n input %%dy : f32[%1$d,%3$d]\n %%dx, %%dw, %%db = LinearGrad(%%x, %%w, %%dy) : f32[%1$d,%2$d], f32[%2$d,%3$d], f32[%3$d]",
    /* bf16-mixed (passes/mixed_precision.c): bf16 operands; dW, db in f32 */
    "input %%x : bf16[%1$d,%2$d,%3$d]\n input %%w : bf16[%3$d,%2$d]\n input %%b : bf16[%2$d]\n %%y = Linear(%%x, %%w, %%b) : bf16[%1$d,%2$d,%2$d]",
    "input %%x : bf16[%1$d,%2$d]\n input %%w : bf16[%2$d,%3$d]\n input %%dy : bf16[%1$d,%3$d]\n %%dx, %%dw, %%db = LinearGrad(%%x, %%w, %%dy) : bf16[%1$d,%2$d], f32[%2$d,%3$d], f32[%3$d]",
    "input %%x : f32[%1$d,%3$d]\n input %%s : f32[%3$d]\n input %%dy : f32[%1$d,%3$d]\n %%dx, %%ds, %%db = LayerNormGrad(%%x, %%s, %%dy) : f32[%1$d,%3$d], f32[%3$d], f32[%3$d]\n %%rx, %%rs = RMSNormGrad(%%x, %%s, %%dy) : f32[%1$d,%3$d], f32[%3$d]",
    "input %%q : f32[%1$d,%2$d,%3$d]\n input %%k : f32[%1$d,%2$d,%3$d]\n input %%v : f32[%1$d,%2$d,%3$d]\n input %%o : f32[%1$d,%2$d,%3$d]\n %%dq, %%dk, %%dv = AttentionGrad(%%q, %%k, %%v, %%o) : f32[%1$d,%2$d,%3$d], f32[%1$d,%2$d,%3$d], f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%dy : f32[%1$d,%2$d]\n %%y = Tanh(%%x) : f32[%1$d,%2$d]\n %%a = UnaryGrad(%%x, %%dy) {fn=\"gelu\"} : f32[%1$d,%2$d]\n %%b = UnaryGrad(%%x, %%dy, %%y) {fn=\"tanh\"} : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%dy : f32[%1$d,%2$d]\n %%y = Softmax(%%x) {axis=-1} : f32[%1$d,%2$d]\n %%d = SoftmaxGrad(%%y, %%dy) {axis=-1} : f32[%1$d,%2$d]\n %%d2 = SoftmaxGrad(%%y, %%dy) {axis=0, log=1} : f32[%1$d,%2$d]",
    "input %%t : f32[%2$d,%3$d]\n input %%i : i64[%1$d]\n input %%dy : f32[%1$d,%3$d]\n %%g = EmbeddingGrad(%%t, %%i, %%dy) : f32[%2$d,%3$d]",
    "input %%g : f32[%1$d,%2$d,%3$d]\n const %%sh : i64[2] = dense[%2$d, 1]\n %%y = SumToShape(%%g, %%sh) : f32[%2$d,1]",
    "input %%dy : f32[%1$d,%6$d,%3$d]\n const %%x : i64[3] = dense[%1$d, %2$d, %3$d]\n const %%st : i64[2] = dense[1, -1]\n const %%en : i64[2] = dense[100, -1000]\n const %%ax : i64[2] = dense[1, 2]\n const %%sp : i64[2] = dense[1, -1]\n %%y = SliceGrad(%%dy, %%x, %%st, %%en, %%ax, %%sp) : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n input %%i : i64[%1$d,2]\n const %%sh : i64[3] = dense[%1$d, %2$d, %3$d]\n input %%dy : f32[%1$d,%3$d]\n %%y = GatherND(%%x, %%i) : f32[%1$d,%3$d]\n %%g = GatherNDGrad(%%dy, %%sh, %%i) : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d,%3$d]\n input %%i : i64[%1$d,1]\n const %%sh : i64[3] = dense[%1$d, %2$d, %3$d]\n input %%dy : f32[%1$d,%3$d]\n %%y = GatherND(%%x, %%i) {batch_dims=1} : f32[%1$d,%3$d]\n %%g = GatherNDGrad(%%dy, %%sh, %%i) {batch_dims=1} : f32[%1$d,%2$d,%3$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%i : i64[%1$d,%3$d]\n const %%sh : i64[2] = dense[%1$d, %2$d]\n input %%dy : f32[%1$d,%3$d]\n %%y = GatherElements(%%x, %%i) {axis=1} : f32[%1$d,%3$d]\n %%g = GatherElementsGrad(%%dy, %%sh, %%i) {axis=1} : f32[%1$d,%2$d]",
    "input %%x : f32[%1$d,%2$d]\n input %%i : i64[%3$d,1]\n input %%u : f32[%3$d,%2$d]\n %%y = ScatterND(%%x, %%i, %%u) {reduction=\"add\"} : f32[%1$d,%2$d]",
    "input %%p : f32[%1$d,%2$d]\n input %%m : f32[%1$d,%2$d]\n input %%r : f32[%1$d,%2$d]\n input %%g : f32[%1$d,%2$d]\n %%v = Mul(%%r, %%r) : f32[%1$d,%2$d]\n const %%lr : f32[] = dense[0.001]\n const %%st : i64[] = dense[3]\n const %%cs : f32[] = dense[0.5]\n %%p2, %%m2, %%v2 = AdamW(%%p, %%m, %%v, %%g, %%lr, %%st, %%cs) {beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.1} : f32[%1$d,%2$d], f32[%1$d,%2$d], f32[%1$d,%2$d]\n %%p3, %%m3, %%v3 = AdamW(%%p, %%m, %%v, %%g, %%lr, %%st) {beta1=0.8, beta2=0.99, eps=1e-06, weight_decay=0} : f32[%1$d,%2$d], f32[%1$d,%2$d], f32[%1$d,%2$d]",
    /* vocab-parallel ops (cases with vocab_start run as a TP stage) */
    "input %%l : f32[%1$d,%3$d]\n input %%t : i64[%1$d]\n input %%m : f32[%1$d]\n input %%d : f32[]\n %%s = VocabCeStats(%%l, %%t, %%m) {vocab_start=1, vocab_size=%5$d} : f32[%1$d,2]\n %%y = VocabCrossEntropy(%%l, %%t, %%m, %%s) {vocab_start=1, vocab_size=%5$d} : f32[]\n %%g = VocabCrossEntropyGrad(%%l, %%t, %%m, %%s, %%d) {vocab_start=1, vocab_size=%5$d} : f32[%1$d,%3$d]",
    "input %%t : f32[%2$d,%3$d]\n input %%i : i64[%1$d]\n input %%dy : f32[%1$d,%3$d]\n %%y = Embedding(%%t, %%i) {vocab_start=1, vocab_size=%4$d} : f32[%1$d,%3$d]\n %%g = EmbeddingGrad(%%t, %%i, %%dy) {vocab_start=1, vocab_size=%4$d} : f32[%2$d,%3$d]",
    "input %%dy : f32[%1$d,%3$d]\n const %%x : i64[2] = dense[%1$d, %2$d]\n input %%i : i64[%3$d]\n %%y = GatherGrad(%%dy, %%x, %%i) {axis=1} : f32[%1$d,%2$d]",
};

static uint64_t rng = 88172645463325252ull;
static int nodes_checked; /* nodes lowered and compared */
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct Img {
    unsigned char *arena;
    int64_t *off; /* per value index; -1: constant */
} Img;

typedef struct Loc {
    const IrGraph *g;
    const int64_t *off;
} Loc;
static int loc(void *u, const IrValue *v, LeArg *a) {
    const Loc *l = u;
    for (int i = 0; i < l->g->nvalues; i++)
        if (l->g->values[i] == v) {
            if (l->off[i] < 0) return 1;
            *a = (LeArg){.kind = LE_ARG_ARENA, .off = l->off[i]};
            return 0;
        }
    return -1;
}

static ffi_type *ffi_of(LeType t) {
    switch (t) {
    case LE_I32: return &ffi_type_sint32;
    case LE_I64: return &ffi_type_sint64;
    case LE_F32: return &ffi_type_float;
    case LE_F64: return &ffi_type_double;
    case LE_PTR: return &ffi_type_pointer;
    default: return &ffi_type_void;
    }
}

/* run one lowered call on the arena; 0 or the callee's nonzero status */
static int run_call(const LeCall *c, unsigned char *arena, char *msg) {
    char kerr[HETC_KERNEL_ERRLEN] = "";
    const LeExtern *x = find_extern(c->fn);
    const Fn *f = find_fn(c->fn);
    if (!x || !f) return sprintf(msg, "no function %s", c->fn), -1;
    if (c->nargs != x->nparams) return sprintf(msg, "%s: %d args", c->fn, c->nargs), -1;
    ffi_cif cif;
    ffi_type *types[LE_MAX_ARGS];
    void *vals[LE_MAX_ARGS];
    int32_t i32[LE_MAX_ARGS];
    int64_t i64[LE_MAX_ARGS];
    float f32[LE_MAX_ARGS];
    double f64[LE_MAX_ARGS];
    void *ptr[LE_MAX_ARGS];
    for (int i = 0; i < c->nargs; i++) {
        const LeArg *a = &c->args[i];
        types[i] = ffi_of(x->params[i]);
        switch (a->kind) {
        case LE_ARG_I32: i32[i] = (int32_t)a->i, vals[i] = &i32[i]; break;
        case LE_ARG_I64: i64[i] = a->i, vals[i] = &i64[i]; break;
        case LE_ARG_F32: f32[i] = (float)a->f, vals[i] = &f32[i]; break;
        case LE_ARG_F64: f64[i] = a->f, vals[i] = &f64[i]; break;
        case LE_ARG_ARENA: ptr[i] = arena + a->off, vals[i] = &ptr[i]; break;
        case LE_ARG_NULL: ptr[i] = NULL, vals[i] = &ptr[i]; break;
        case LE_ARG_I64S: ptr[i] = (void *)a->vals, vals[i] = &ptr[i]; break;
        case LE_ARG_BYTES: ptr[i] = (void *)a->bytes, vals[i] = &ptr[i]; break;
        case LE_ARG_ERRBUF: ptr[i] = kerr, vals[i] = &ptr[i]; break;
        default: return sprintf(msg, "%s: arg %d kind %d", c->fn, i, (int)a->kind), -1;
        }
        static const LeType want[] = {[LE_ARG_I32] = LE_I32, [LE_ARG_I64] = LE_I64,
                                      [LE_ARG_F32] = LE_F32, [LE_ARG_F64] = LE_F64,
                                      [LE_ARG_ARENA] = LE_PTR, [LE_ARG_SLOT] = LE_PTR,
                                      [LE_ARG_NULL] = LE_PTR, [LE_ARG_I64S] = LE_PTR,
                                      [LE_ARG_BYTES] = LE_PTR, [LE_ARG_ERRBUF] = LE_PTR};
        if (want[a->kind] != x->params[i])
            return sprintf(msg, "%s: arg %d kind %d for type %d", c->fn, i, (int)a->kind,
                           (int)x->params[i]), -1;
    }
    ffi_type *rt = x->ret == LE_I32 ? &ffi_type_sint32 : &ffi_type_void;
    if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, (unsigned)c->nargs, rt, types) != FFI_OK)
        return sprintf(msg, "%s: ffi_prep_cif", c->fn), -1;
    ffi_arg r = 0;
    ffi_call(&cif, f->fn, &r, vals);
    if (x->ret == LE_I32 && (int32_t)r != 0)
        return snprintf(msg, 256, "%s returned %d: %s", c->fn, (int)r, kerr), 1;
    return 0;
}

static void fill(const IrValue *v, unsigned char *p) {
    int64_t n = ir_shape_numel(&v->shape);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next();
        switch (v->dtype) {
        case IR_F32: ((float *)p)[i] = (float)((double)(r % 20001) / 10000.0 - 1.0); break;
        case IR_I64: ((int64_t *)p)[i] = (int64_t)(r % 2); break; /* in range: dims >= 2 */
        case IR_I32: ((int32_t *)p)[i] = (int32_t)(r % 2); break;
        case IR_BOOL: p[i] = (unsigned char)(r % 2); break;
        case IR_BF16:
            ((uint16_t *)p)[i] = hk_f32_to_bf16((float)((double)(r % 20001) / 10000.0 - 1.0));
            break;
        default: break;
        }
    }
}

/* one case: 0 ok, else failures */
static int run_case(int ci, int seed) {
    int A = 2 + (int)(next() % 4), B = 2 + (int)(next() % 4), C = 2 + (int)(next() % 4);
    char body[4096], text[4600];
    snprintf(body, sizeof body, cases[ci], A, B, C, A + B, B + C, B - 1, C - 1, A * B, 2 * A);
    snprintf(text, sizeof text, "graph t opset=18 {\n %s\n}\n", body);
    IrError err = {{0}};
    IrGraph *g = ir_parse(text, "case", &err);
    if (!g) {
        fprintf(stderr, "case %d: parse: %s\n%s", ci, err.msg, text);
        return 1;
    }
    int fails = 0;
    int64_t *off = calloc((size_t)g->nvalues, sizeof *off), total = 0;
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        if (v->kind == IR_VK_CONST) {
            off[i] = -1;
            continue;
        }
        off[i] = total;
        total += ((int64_t)ir_value_bytes(v) + 63) / 64 * 64 + 64;
    }
    unsigned char *ref = calloc((size_t)total + 64, 1), *dir = malloc((size_t)total + 64);
    memset(dir, 0xA5, (size_t)total + 64);
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i]->kind == IR_VK_INPUT) {
            fill(g->values[i], ref + off[i]);
            memcpy(dir + off[i], ref + off[i], ir_value_bytes(g->values[i]));
        }
    Loc l = {g, off};
    for (int ni = 0; ni < g->nnodes && !fails; ni++) {
        IrNode *n = g->nodes[ni];
        const void *in[16];
        void *out[16];
        for (int i = 0; i < n->nin; i++) {
            in[i] = NULL;
            if (!n->in[i]) continue;
            int vi = -1;
            for (int k = 0; k < g->nvalues; k++)
                if (g->values[k] == n->in[i]) vi = k;
            in[i] = off[vi] < 0 ? ir_value_data(n->in[i], &err) : ref + off[vi];
        }
        for (int o = 0; o < n->nout; o++) {
            int vi = -1;
            for (int k = 0; k < g->nvalues; k++)
                if (g->values[k] == n->out[o]) vi = k;
            out[o] = ref + off[vi];
            memset(out[o], 0, ir_value_bytes(n->out[o]));
        }
        if (hexec_call_node_into(n, in, out, &err)) {
            fprintf(stderr, "case %d seed %d: %s: executor: %s\n", ci, seed, ir_op_name(n->op),
                    err.msg);
            fails++;
            break;
        }
        LnOut lo = {0};
        LnCtx c = {.n = n, .loc = loc, .u = &l, .tp = strstr(body, "vocab_start") ? 2 : 1,
                   .out = &lo};
        if (!lower_node(&c)) {
            fprintf(stderr, "case %d seed %d: %s '%s' not lowered: %s\n", ci, seed,
                    ir_op_name(n->op), n->name, c.why);
            fails++;
        }
        for (int k = 0; k < lo.n && !fails; k++) {
            char msg[256];
            if (run_call(&lo.calls[k], dir, msg)) {
                fprintf(stderr, "case %d seed %d: %s: %s\n", ci, seed, ir_op_name(n->op), msg);
                fails++;
            }
        }
        nodes_checked += !fails;
        for (int k = 0; k < lo.n; k++) lower_call_free(&lo.calls[k]);
        free(lo.calls);
        for (int o = 0; o < n->nout && !fails; o++)
            if (memcmp(out[o], dir + ((unsigned char *)out[o] - ref), ir_value_bytes(n->out[o]))) {
                char sh[64];
                fprintf(stderr, "case %d seed %d (A=%d B=%d C=%d): %s output '%s' %s differs "
                        "from the executor's\n", ci, seed, A, B, C, ir_op_name(n->op),
                        n->out[o]->name, ir_shape_str(&n->out[o]->shape, sh, sizeof sh));
                fails++;
            }
    }
    free(ref);
    free(dir);
    free(off);
    ir_graph_free(g);
    return fails;
}

int main(int argc, char **argv) {
    int seeds = argc > 1 ? atoi(argv[1]) : 4, fails = 0, ncase = (int)(sizeof cases / sizeof cases[0]);
    /* every extern lower_node declares has a function here */
    for (int i = 0; i < lower_node_nexterns; i++)
        if (!find_fn(lower_node_externs[i].name)) {
            fprintf(stderr, "extern %s has no function in this test\n", lower_node_externs[i].name);
            fails++;
        }
    /* every op the executor runs has a lowering, but Range (a constant in
     * every graph const-fold has seen; left to hetrt_node) and TpAllReduce
     * (lower_stage emits hetrt_tp_allreduce itself) */
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (hexec_op_supported((IrOp)op) && !lower_node_has_op((IrOp)op) && op != IR_OP_RANGE &&
            op != IR_OP_TP_ALL_REDUCE) {
            fprintf(stderr, "op %s: the executor runs it, lower_node has no entry\n",
                    ir_op_name((IrOp)op));
            fails++;
        }
    for (int ci = 0; ci < ncase; ci++)
        for (int s = 0; s < seeds; s++) fails += run_case(ci, s);
    printf("%d cases x %d seeds, %d nodes equal to the executor's: %s (%d failures)\n", ncase,
           seeds, nodes_checked, fails ? "FAILED" : "OK", fails);
    return fails != 0;
}
