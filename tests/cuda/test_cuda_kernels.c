/* Every device kernel against its host twin (issue 7: "every CUDA kernel
 * matches its host twin, documented tolerances").  Each case is a one-node
 * IR graph; its inputs get seeded random values; the node runs through
 * codegen/hostexec (the oracle, itself checked against PyTorch in
 * tests/train_kernels) and through the device executor, which must take
 * its native path (no host fallback; two cases check the fallback
 * itself).  Outputs must agree elementwise to |dev - host| <= atol +
 * rtol |host| (docs/CUDA.md has the table and why).
 *
 * Needs a GPU: without one it prints why and exits 77 (ctest SKIP). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cudaexec.h"
#include "hostexec.h"

typedef struct Case {
    const char *name;
    const char *text; /* graph body: inputs, consts, one node, outputs */
    double rtol, atol;
    int pos;          /* float inputs positive (sqrt, log, pow) */
    int64_t ihi;      /* integer inputs in [0, ihi) */
    int fallback;     /* expected to run on the host fallback (no device kernel) */
} Case;

#define EW 1e-5, 1e-6 /* elementwise / row kernels: float vs double math */
#define MM 1e-4, 2e-5 /* cuBLASLt: fp32 with another summation order */

static const Case cases[] = {
    {"Add broadcast", "input %a : f32[4,8,16]\n input %b : f32[16]\n %y = Add(%a, %b) : f32[4,8,16]\n output %y", EW, 0, 0},
    {"Sub", "input %a : f32[4,8]\n input %b : f32[4,8]\n %y = Sub(%a, %b) : f32[4,8]\n output %y", EW, 0, 0},
    {"Mul broadcast both", "input %a : f32[4,1,16]\n input %b : f32[8,1]\n %y = Mul(%a, %b) : f32[4,8,16]\n output %y", EW, 0, 0},
    {"Div scalar", "input %a : f32[4,8]\n input %b : f32[]\n %y = Div(%a, %b) : f32[4,8]\n output %y", EW, 1, 0},
    {"Pow", "input %a : f32[64]\n input %b : f32[]\n %y = Pow(%a, %b) : f32[64]\n output %y", EW, 1, 0},
    {"Min", "input %a : f32[4,8]\n input %b : f32[4,8]\n %y = Min(%a, %b) : f32[4,8]\n output %y", EW, 0, 0},
    {"Max", "input %a : f32[4,8]\n input %b : f32[8]\n %y = Max(%a, %b) : f32[4,8]\n output %y", EW, 0, 0},
    {"Sqrt", "input %a : f32[300]\n %y = Sqrt(%a) : f32[300]\n output %y", EW, 1, 0},
    {"Log", "input %a : f32[300]\n %y = Log(%a) : f32[300]\n output %y", EW, 1, 0},
    {"Exp", "input %a : f32[300]\n %y = Exp(%a) : f32[300]\n output %y", EW, 0, 0},
    {"Tanh", "input %a : f32[300]\n %y = Tanh(%a) : f32[300]\n output %y", EW, 0, 0},
    {"Erf", "input %a : f32[300]\n %y = Erf(%a) : f32[300]\n output %y", EW, 0, 0},
    {"Sigmoid", "input %a : f32[300]\n %y = Sigmoid(%a) : f32[300]\n output %y", EW, 0, 0},
    {"Relu", "input %a : f32[300]\n %y = Relu(%a) : f32[300]\n output %y", EW, 0, 0},
    {"Neg", "input %a : f32[300]\n %y = Neg(%a) : f32[300]\n output %y", EW, 0, 0},
    {"Gelu", "input %a : f32[300]\n %y = Gelu(%a) : f32[300]\n output %y", EW, 0, 0},
    {"Gelu tanh", "input %a : f32[300]\n %y = Gelu(%a) {approximate=\"tanh\"} : f32[300]\n output %y", EW, 0, 0},
    {"SiLU", "input %a : f32[300]\n %y = SiLU(%a) : f32[300]\n output %y", EW, 0, 0},
    {"UnaryGrad gelu_tanh", "input %x : f32[300]\n input %dy : f32[300]\n input %yy : f32[300]\n %d = UnaryGrad(%x, %dy, %yy) {fn=\"gelu_tanh\"} : f32[300]\n output %d", EW, 0, 0},
    {"UnaryGrad gelu", "input %x : f32[300]\n input %dy : f32[300]\n %d = UnaryGrad(%x, %dy) {fn=\"gelu\"} : f32[300]\n output %d", EW, 0, 0},
    {"UnaryGrad silu", "input %x : f32[300]\n input %dy : f32[300]\n %d = UnaryGrad(%x, %dy) {fn=\"silu\"} : f32[300]\n output %d", EW, 0, 0},
    {"UnaryGrad sqrt", "input %x : f32[300]\n input %dy : f32[300]\n %d = UnaryGrad(%x, %dy) {fn=\"sqrt\"} : f32[300]\n output %d", EW, 1, 0},
    {"Identity", "input %a : f32[5,7]\n %y = Identity(%a) : f32[5,7]\n output %y", 0, 0, 0, 0},
    {"TpCopy", "input %a : f32[5,7]\n %y = TpCopy(%a) : f32[5,7]\n output %y", 0, 0, 0, 0},
    {"Reshape", "input %a : f32[4,8,16]\n const %s : i64[2] = dense[32, 16]\n %y = Reshape(%a, %s) : f32[32,16]\n output %y", 0, 0, 0, 0},
    {"Transpose 0213", "input %a : f32[2,5,3,4]\n %y = Transpose(%a) {perm=[0, 2, 1, 3]} : f32[2,3,5,4]\n output %y", 0, 0, 0, 0},
    /* movement.cu's paths: widened 16-byte rows (head transpose), the tiled
     * transpose with partial tiles and a batch dim, the 32-bit walk on
     * unaligned rows, widened Concat/Split into a strided destination */
    {"Transpose 0213 heads", "input %a : f32[2,16,4,64]\n %y = Transpose(%a) {perm=[0, 2, 1, 3]} : f32[2,4,16,64]\n output %y", 0, 0, 0, 0},
    {"Transpose 0132 tiled", "input %a : f32[2,3,70,66]\n %y = Transpose(%a) {perm=[0, 1, 3, 2]} : f32[2,3,66,70]\n output %y", 0, 0, 0, 0},
    {"Transpose 021 tiled wide", "input %a : f32[3,40,200]\n %y = Transpose(%a) {perm=[0, 2, 1]} : f32[3,200,40]\n output %y", 0, 0, 0, 0},
    {"Transpose 0213 odd rows", "input %a : f32[2,17,3,5]\n %y = Transpose(%a) {perm=[0, 2, 1, 3]} : f32[2,3,17,5]\n output %y", 0, 0, 0, 0},
    {"Concat wide", "input %a : f32[2,3,64]\n input %b : f32[2,3,128]\n %y = Concat(%a, %b) {axis=2} : f32[2,3,192]\n output %y", 0, 0, 0, 0},
    {"Split wide", "input %a : f32[4,2304]\n const %s : i64[3] = dense[768, 768, 768]\n %p, %q, %r = Split(%a, %s) {axis=1} : f32[4,768], f32[4,768], f32[4,768]\n output %p\n output %q\n output %r", 0, 0, 0, 0},
    {"Transpose default", "input %a : f32[6,5]\n %y = Transpose(%a) : f32[5,6]\n output %y", 0, 0, 0, 0},
    {"Split", "input %a : f32[2,3,12]\n const %s : i64[3] = dense[4, 4, 4]\n %p, %q, %r = Split(%a, %s) {axis=2} : f32[2,3,4], f32[2,3,4], f32[2,3,4]\n output %p\n output %q\n output %r", 0, 0, 0, 0},
    {"Concat", "input %a : f32[2,3,4]\n input %b : f32[2,3,5]\n %y = Concat(%a, %b) {axis=2} : f32[2,3,9]\n output %y", 0, 0, 0, 0},
    {"Slice rotary half", "input %a : f32[2,4,6,8]\n const %s : i64[1] = dense[4]\n const %e : i64[1] = dense[9223372036854775807]\n const %x : i64[1] = dense[-1]\n %y = Slice(%a, %s, %e, %x) : f32[2,4,6,4]\n output %y", 0, 0, 0, 0},
    {"Slice negative step", "input %a : f32[5,7]\n const %s : i64[2] = dense[-1, 1]\n const %e : i64[2] = dense[-9223372036854775807, 7]\n const %x : i64[2] = dense[0, 1]\n const %p : i64[2] = dense[-2, 3]\n %y = Slice(%a, %s, %e, %x, %p) : f32[3,2]\n output %y", 0, 0, 0, 0},
    {"SliceGrad", "input %g : f32[2,4,6,4]\n const %sh : i64[4] = dense[2, 4, 6, 8]\n const %s : i64[1] = dense[0]\n const %e : i64[1] = dense[4]\n const %x : i64[1] = dense[3]\n %d = SliceGrad(%g, %sh, %s, %e, %x) : f32[2,4,6,8]\n output %d", 0, 0, 0, 0},
    {"Expand", "input %a : f32[3,1]\n const %s : i64[3] = dense[2, 3, 4]\n %y = Expand(%a, %s) : f32[2,3,4]\n output %y", 0, 0, 0, 0},
    {"Cast i64->f32", "input %a : i64[20]\n %y = Cast(%a) {to=1} : f32[20]\n output %y", 0, 0, 0, 1000},
    {"Cast i64->i32", "input %a : i64[20]\n %y = Cast(%a) {to=6} : i32[20]\n output %y", 0, 0, 0, 1000},
    {"Linear bias", "input %x : f32[4,8,16]\n input %w : f32[16,24]\n input %b : f32[24]\n %y = Linear(%x, %w, %b) : f32[4,8,24]\n output %y", MM, 0, 0},
    {"Linear", "input %x : f32[7,16]\n input %w : f32[16,3]\n %y = Linear(%x, %w) : f32[7,3]\n output %y", MM, 0, 0},
    {"LinearGrad", "input %x : f32[4,8,16]\n input %w : f32[16,24]\n input %dy : f32[4,8,24]\n %dx, %dw, %db = LinearGrad(%x, %w, %dy) : f32[4,8,16], f32[16,24], f32[24]\n output %dx\n output %dw\n output %db", MM, 0, 0},
    {"MatMul batched", "input %a : f32[2,3,8,16]\n input %b : f32[2,3,16,5]\n %y = MatMul(%a, %b) : f32[2,3,8,5]\n output %y", MM, 0, 0},
    {"MatMul shared B", "input %a : f32[2,8,16]\n input %b : f32[16,5]\n %y = MatMul(%a, %b) : f32[2,8,5]\n output %y", MM, 0, 0},
    {"LayerNorm", "input %x : f32[4,8,48]\n input %s : f32[48]\n input %b : f32[48]\n %y = LayerNorm(%x, %s, %b) {axis=-1, epsilon=1e-05} : f32[4,8,48]\n output %y", EW, 0, 0},
    /* more than 512 rows: the column reductions' row chunks and their finish */
    {"LinearGrad 1400 rows", "input %x : f32[2,700,16]\n input %w : f32[16,40]\n input %dy : f32[2,700,40]\n %dx, %dw, %db = LinearGrad(%x, %w, %dy) : f32[2,700,16], f32[16,40], f32[40]\n output %dx\n output %dw\n output %db", MM, 0, 0},
    {"LayerNormGrad", "input %x : f32[4,8,48]\n input %s : f32[48]\n input %dy : f32[4,8,48]\n %dx, %ds, %db = LayerNormGrad(%x, %s, %dy) {axis=-1, epsilon=1e-05} : f32[4,8,48], f32[48], f32[48]\n output %dx\n output %ds\n output %db", 1e-4, 1e-5, 0, 0},
    {"LayerNormGrad 2100 rows", "input %x : f32[3,700,40]\n input %s : f32[40]\n input %dy : f32[3,700,40]\n %dx, %ds, %db = LayerNormGrad(%x, %s, %dy) {axis=-1, epsilon=1e-05} : f32[3,700,40], f32[40], f32[40]\n output %dx\n output %ds\n output %db", 1e-4, 1e-5, 0, 0},
    {"RMSNorm", "input %x : f32[6,40]\n input %s : f32[40]\n %y = RMSNorm(%x, %s) {axis=-1, epsilon=1e-06} : f32[6,40]\n output %y", EW, 0, 0},
    {"RMSNormGrad", "input %x : f32[6,40]\n input %s : f32[40]\n input %dy : f32[6,40]\n %dx, %ds = RMSNormGrad(%x, %s, %dy) {axis=-1, epsilon=1e-06} : f32[6,40], f32[40]\n output %dx\n output %ds", 1e-4, 1e-5, 0, 0},
    {"RMSNormGrad 1000 rows", "input %x : f32[1000,40]\n input %s : f32[40]\n input %dy : f32[1000,40]\n %dx, %ds = RMSNormGrad(%x, %s, %dy) {axis=-1, epsilon=1e-06} : f32[1000,40], f32[40]\n output %dx\n output %ds", 1e-4, 1e-5, 0, 0},
    {"Softmax", "input %x : f32[6,300]\n %y = Softmax(%x) {axis=-1} : f32[6,300]\n output %y", EW, 0, 0},
    {"LogSoftmax", "input %x : f32[6,300]\n %y = LogSoftmax(%x) {axis=-1} : f32[6,300]\n output %y", EW, 0, 0},
    /* the fused optimizer step (positive inputs: v >= 0); the device repeats
     * the host's fp32 operations without FMA, so only pow may differ */
    {"AdamW clip", "input %p : f32[1000]\n input %m : f32[1000]\n input %v : f32[1000]\n input %g : f32[1000]\n const %lr : f32[] = dense[0.001]\n const %t : i64[] = dense[3]\n input %c : f32[]\n %q, %mm, %vv = AdamW(%p, %m, %v, %g, %lr, %t, %c) {beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.1} : f32[1000], f32[1000], f32[1000]\n output %q\n output %mm\n output %vv", EW, 1, 0},
    {"AdamW", "input %p : f32[7,33]\n input %m : f32[7,33]\n input %v : f32[7,33]\n input %g : f32[7,33]\n const %lr : f32[] = dense[0.03]\n const %t : i64[] = dense[1]\n %q, %mm, %vv = AdamW(%p, %m, %v, %g, %lr, %t) {beta1=0.8, beta2=0.999, eps=1e-06, weight_decay=0.0} : f32[7,33], f32[7,33], f32[7,33]\n output %q\n output %mm\n output %vv", EW, 1, 0},
    {"SoftmaxGrad", "input %y : f32[6,30]\n input %dy : f32[6,30]\n %d = SoftmaxGrad(%y, %dy) {axis=-1, log=0} : f32[6,30]\n output %d", EW, 0, 0},
    {"SoftmaxGrad log", "input %y : f32[6,30]\n input %dy : f32[6,30]\n %d = SoftmaxGrad(%y, %dy) {axis=-1, log=1} : f32[6,30]\n output %d", EW, 0, 0},
    {"Attention causal", "input %q : f32[2,4,64,32]\n input %k : f32[2,4,64,32]\n input %v : f32[2,4,64,32]\n %y = Attention(%q, %k, %v) {causal=1, scale=0.1767766922712326} : f32[2,4,64,32]\n output %y", MM, 0, 0},
    /* k_attn_softmax_reg's PER 4 with a partial last pass, and the row
     * walk past 8 x 256 keys */
    {"Attention long causal", "input %q : f32[1,2,600,16]\n input %k : f32[1,2,600,16]\n input %v : f32[1,2,600,16]\n %y = Attention(%q, %k, %v) {causal=1, scale=0.25} : f32[1,2,600,16]\n output %y", MM, 0, 0},
    {"Attention 2100 keys", "input %q : f32[1,1,40,8]\n input %k : f32[1,1,2100,8]\n input %v : f32[1,1,2100,8]\n %y = Attention(%q, %k, %v) {causal=0} : f32[1,1,40,8]\n output %y", MM, 0, 0},
    {"Attention T<S", "input %q : f32[3,5,8]\n input %k : f32[3,9,8]\n input %v : f32[3,9,6]\n %y = Attention(%q, %k, %v) {causal=1} : f32[3,5,6]\n output %y", MM, 0, 0},
    {"Attention full", "input %q : f32[3,5,8]\n input %k : f32[3,9,8]\n input %v : f32[3,9,6]\n %y = Attention(%q, %k, %v) {causal=0} : f32[3,5,6]\n output %y", MM, 0, 0},
    {"AttentionGrad causal", "input %q : f32[2,4,64,32]\n input %k : f32[2,4,64,32]\n input %v : f32[2,4,64,32]\n input %g : f32[2,4,64,32]\n %dq, %dk, %dv = AttentionGrad(%q, %k, %v, %g) {causal=1, scale=0.1767766922712326} : f32[2,4,64,32], f32[2,4,64,32], f32[2,4,64,32]\n output %dq\n output %dk\n output %dv", MM, 0, 0},
    {"Embedding", "input %t : f32[50,16]\n input %ids : i64[4,8]\n %y = Embedding(%t, %ids) : f32[4,8,16]\n output %y", 0, 0, 0, 50},
    {"EmbeddingGrad", "input %t : f32[50,16]\n input %ids : i64[4,8]\n input %dy : f32[4,8,16]\n %d = EmbeddingGrad(%t, %ids, %dy) : f32[50,16]\n output %d", EW, 0, 50},
    {"CrossEntropy", "input %l : f32[32,50]\n input %t : i64[32]\n %y = CrossEntropy(%l, %t) : f32[]\n output %y", EW, 0, 50},
    {"CrossEntropy ignore", "input %l : f32[32,50]\n input %t : i64[32]\n %y = CrossEntropy(%l, %t) {use_ignore=1, ignore_index=3} : f32[]\n output %y", EW, 0, 6},
    {"CrossEntropyGrad", "input %l : f32[32,50]\n input %t : i32[32]\n input %g : f32[]\n %d = CrossEntropyGrad(%l, %t, %g) : f32[32,50]\n output %d", EW, 0, 50},
    {"SumToShape", "input %g : f32[4,8,16]\n const %s : i64[1] = dense[16]\n %y = SumToShape(%g, %s) : f32[16]\n output %y", EW, 0, 0},
    {"Gather (host fallback)", "input %t : f32[10,4]\n input %i : i64[3]\n %y = Gather(%t, %i) {axis=0} : f32[3,4]\n output %y", 0, 0, 0, 10, 1},
    {"Softmax axis 0 (fallback)", "input %x : f32[5,7]\n %y = Softmax(%x) {axis=0} : f32[5,7]\n output %y", EW, 0, 0, 1},
    {"SumToShape keep", "input %g : f32[4,8,16]\n const %s : i64[3] = dense[4, 1, 16]\n %y = SumToShape(%g, %s) : f32[4,1,16]\n output %y", EW, 0, 0},
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static size_t vbytes(const IrValue *v) {
    int64_t n = ir_shape_numel(&v->shape);
    return n > 0 ? (size_t)n * ir_dtype_size(v->dtype) : 0;
}

static void fill(IrValue *v, void *h, const Case *c) {
    int64_t n = ir_shape_numel(&v->shape);
    for (int64_t i = 0; i < n; i++) {
        double u = urand();
        switch (v->dtype) {
        case IR_F32: ((float *)h)[i] = (float)(c->pos ? 0.1 + 2 * u : 4 * u - 2); break;
        case IR_I64: ((int64_t *)h)[i] = (int64_t)(u * (double)c->ihi); break;
        case IR_I32: ((int32_t *)h)[i] = (int32_t)(u * (double)c->ihi); break;
        default: memset((char *)h + i * ir_dtype_size(v->dtype), 0, ir_dtype_size(v->dtype));
        }
    }
}

/* The case's graph goes to *keep, freed by the caller after the executor:
 * cudaexec_const caches device copies by IrValue address, so a graph freed
 * while the executor lives would let the next case's constants (allocated
 * at the same addresses) hit the stale copies. */
static int run_case(CudaExec *x, const Case *c, IrGraph **keep) {
    char text[4096];
    snprintf(text, sizeof text, "graph \"t\" opset=0 {\n %s\n}\n", c->text);
    IrError err = {{0}};
    IrGraph *g = ir_parse(text, c->name, &err);
    if (!g || g->nnodes != 1) {
        printf("FAIL %s: cannot parse the case: %s\n", c->name, err.msg);
        if (g) ir_graph_free(g);
        return 1;
    }
    *keep = g;
    IrNode *n = g->nodes[0];
    const void *hin[8] = {0}, *din[8] = {0};
    void *hout[4] = {0}, *dout[4] = {0}, *back[4] = {0};
    int fails = 0;
    for (int i = 0; i < n->nin; i++) {
        IrValue *v = n->in[i];
        if (!v) continue;
        size_t nb = vbytes(v);
        if (v->kind == IR_VK_CONST) {
            hin[i] = ir_value_data(v, &err);
            din[i] = cudaexec_const(x, v, &err);
            continue;
        }
        void *h = calloc(nb + 8, 1), *d = NULL;
        fill(v, h, c);
        cudaMalloc(&d, nb + 8);
        cudaMemcpy(d, h, nb, cudaMemcpyHostToDevice);
        hin[i] = h, din[i] = d;
    }
    for (int i = 0; i < n->nout; i++) {
        size_t nb = vbytes(n->out[i]);
        hout[i] = calloc(nb + 8, 1);
        back[i] = calloc(nb + 8, 1);
        cudaMalloc(&dout[i], nb + 8);
        /* an output the executor says it overwrites (cudaexec_op_overwrites:
         * the interpreter then skips zeroing it) starts as NaN bytes here: a
         * kernel that leaves any element unwritten fails the comparison */
        unsigned ow = cudaexec_op_overwrites(n->op);
        cudaMemset(dout[i], i < 32 && (ow >> i & 1u) ? 0xff : 0, nb + 8);
    }
    cudaDeviceSynchronize(); /* the setup copies ran on the legacy stream */
    int64_t fb = x->fallbacks;
    if (hexec_call_node_into(n, hin, hout, &err)) {
        printf("FAIL %s: host: %s\n", c->name, err.msg);
        fails++;
    } else if (cudaexec_call_node(x, n, din, dout, &err) || cudaexec_sync(x, c->name, &err)) {
        printf("FAIL %s: device: %s\n", c->name, err.msg);
        fails++;
    } else if ((x->fallbacks != fb) != (c->fallback != 0)) {
        printf("FAIL %s: %s\n", c->name,
               c->fallback ? "expected the host fallback, a device kernel ran"
                           : "ran on the host fallback, not a device kernel");
        fails++;
    }
    for (int o = 0; o < n->nout && !fails; o++) {
        const IrValue *v = n->out[o];
        cudaMemcpy(back[o], dout[o], vbytes(v), cudaMemcpyDeviceToHost);
        int64_t cnt = ir_shape_numel(&v->shape), bad = 0;
        double worst = 0;
        for (int64_t i = 0; i < cnt; i++) {
            double h, d;
            if (v->dtype == IR_F32) h = ((float *)hout[o])[i], d = ((float *)back[o])[i];
            else if (v->dtype == IR_I32) h = ((int32_t *)hout[o])[i], d = ((int32_t *)back[o])[i];
            else h = (double)((int64_t *)hout[o])[i], d = (double)((int64_t *)back[o])[i];
            double e = fabs(d - h), lim = c->atol + c->rtol * fabs(h);
            if (e / (lim > 0 ? lim : 1e-300) > worst) worst = e / (lim > 0 ? lim : 1e-300);
            if (!(e <= lim) && !(h != h && d != d)) {
                if (bad++ < 3)
                    printf("  %s output %d [%lld]: device %.9g host %.9g\n", c->name, o,
                           (long long)i, d, h);
            }
        }
        if (bad) {
            printf("FAIL %s: output %d: %lld of %lld elements outside atol %g + rtol %g\n",
                   c->name, o, (long long)bad, (long long)cnt, c->atol, c->rtol);
            fails++;
        } else {
            printf("ok   %-24s output %d: %lld elements, worst error %.3g of the tolerance\n",
                   c->name, o, (long long)cnt, worst);
        }
    }
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && n->in[i]->kind != IR_VK_CONST) {
            free((void *)hin[i]);
            cudaFree((void *)din[i]);
        }
    for (int i = 0; i < n->nout; i++) {
        free(hout[i]);
        free(back[i]);
        cudaFree(dout[i]);
    }
    return fails;
}

int main(void) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device (%s): the device kernels are compared with their host "
               "twins only on a machine with a GPU\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 77;
    }
    CudaExec x;
    IrError err = {{0}};
    if (cudaexec_init(&x, &err)) {
        printf("FAIL: device executor: %s\n", err.msg);
        return 1;
    }
    int fails = 0, n = (int)(sizeof cases / sizeof *cases);
    IrGraph *graphs[sizeof cases / sizeof *cases] = {0};
    for (int i = 0; i < n; i++) fails += run_case(&x, &cases[i], &graphs[i]) != 0;
    cudaexec_free(&x);
    for (int i = 0; i < n; i++)
        if (graphs[i]) ir_graph_free(graphs[i]);
    printf("%d of %d cases failed\n", fails, n);
    return fails ? 1 : 0;
}
