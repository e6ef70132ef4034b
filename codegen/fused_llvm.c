/* LLVM lowering of fused elementwise kernels: host loop nests and NVPTX
 * kernels from one scalar program (fused_llvm.h). */
#include "fused_llvm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "hk.h"
#include "hk_parallel.h"
#include "hk_train.h"

typedef struct Fe {
    LLVMContextRef c;
    LLVMModuleRef m;
    LLVMBuilderRef b;
    LLVMTypeRef i1, i8, i8p, i16, i32, i64, f32, f64, vd;
    int nvptx;
} Fe;

static void fe_init(Fe *e, LLVMModuleRef m, int nvptx) {
    e->m = m;
    e->c = LLVMGetModuleContext(m);
    e->b = LLVMCreateBuilderInContext(e->c);
    e->i1 = LLVMInt1TypeInContext(e->c);
    e->i8 = LLVMInt8TypeInContext(e->c);
    e->i8p = LLVMPointerType(e->i8, 0);
    e->i16 = LLVMInt16TypeInContext(e->c);
    e->i32 = LLVMInt32TypeInContext(e->c);
    e->i64 = LLVMInt64TypeInContext(e->c);
    e->f32 = LLVMFloatTypeInContext(e->c);
    e->f64 = LLVMDoubleTypeInContext(e->c);
    e->vd = LLVMVoidTypeInContext(e->c);
    e->nvptx = nvptx;
}

/* ------------------------------------------------------------ double math
 * Each helper emits exactly the IEEE operations, in the same order, of its
 * C twin in kernels/host/hk_vmath.h (compiled there with -ffp-contract=off):
 * plain fadd / fmul / fdiv without fast-math flags, so LLVM may not
 * reassociate or contract them. */

static LLVMValueRef dc(Fe *e, double v) { return LLVMConstReal(e->f64, v); }
static LLVMValueRef fadd(Fe *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFAdd(e->b, a, b, ""); }
static LLVMValueRef fsub(Fe *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFSub(e->b, a, b, ""); }
static LLVMValueRef fmul(Fe *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFMul(e->b, a, b, ""); }
static LLVMValueRef fdiv(Fe *e, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFDiv(e->b, a, b, ""); }
static LLVMValueRef fneg(Fe *e, LLVMValueRef a) { return LLVMBuildFNeg(e->b, a, ""); }
static LLVMValueRef fcmp(Fe *e, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildFCmp(e->b, p, a, b, "");
}
static LLVMValueRef sel(Fe *e, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildSelect(e->b, c, a, b, "");
}
/* x != x */
static LLVMValueRef isnan_(Fe *e, LLVMValueRef x) { return fcmp(e, LLVMRealUNO, x, x); }

static LLVMValueRef call1(Fe *e, const char *name, LLVMTypeRef t, LLVMValueRef x) {
    LLVMTypeRef ft = LLVMFunctionType(t, &t, 1, 0);
    LLVMValueRef f = LLVMGetNamedFunction(e->m, name);
    if (!f) f = LLVMAddFunction(e->m, name, ft);
    return LLVMBuildCall2(e->b, ft, f, &x, 1, "");
}

/* hk_exp_d */
static LLVMValueRef exp_d(Fe *e, LLVMValueRef x) {
    const double shift = 0x1.8p52, log2e = 1.4426950408889634074;
    const double ln2hi = 6.93147180369123816490e-01, ln2lo = 1.90821492927058770002e-10;
    LLVMValueRef xc = sel(e, isnan_(e, x), dc(e, 0.0), x);
    xc = sel(e, fcmp(e, LLVMRealOGT, xc, dc(e, 800.0)), dc(e, 800.0), xc);
    xc = sel(e, fcmp(e, LLVMRealOLT, xc, dc(e, -800.0)), dc(e, -800.0), xc);
    LLVMValueRef kd = fadd(e, fmul(e, xc, dc(e, log2e)), dc(e, shift));
    kd = fsub(e, kd, dc(e, shift));
    LLVMValueRef r = fsub(e, fsub(e, xc, fmul(e, kd, dc(e, ln2hi))), fmul(e, kd, dc(e, ln2lo)));
    static const double coef[] = {
        1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0,
        1.0 / 120.0,     1.0 / 24.0,     1.0 / 6.0,     0.5,          1.0,
        1.0};
    LLVMValueRef p = dc(e, 1.0 / 39916800.0);
    for (size_t i = 0; i < sizeof coef / sizeof coef[0]; i++)
        p = fadd(e, fmul(e, p, r), dc(e, coef[i]));
    LLVMValueRef k1 = fsub(e, fadd(e, fmul(e, kd, dc(e, 0.5)), dc(e, shift)), dc(e, shift));
    LLVMValueRef k2 = fsub(e, kd, k1);
    uint64_t shu;
    memcpy(&shu, &shift, sizeof shu);
    LLVMValueRef pw[2];
    LLVMValueRef ks[2] = {k1, k2};
    for (int i = 0; i < 2; i++) {
        LLVMValueRef bits = LLVMBuildBitCast(e->b, fadd(e, ks[i], dc(e, shift)), e->i64, "");
        bits = LLVMBuildSub(e->b, bits, LLVMConstInt(e->i64, shu, 0), "");
        bits = LLVMBuildAdd(e->b, bits, LLVMConstInt(e->i64, 1023, 0), "");
        bits = LLVMBuildShl(e->b, bits, LLVMConstInt(e->i64, 52, 0), "");
        pw[i] = LLVMBuildBitCast(e->b, bits, e->f64, "");
    }
    LLVMValueRef y = fmul(e, fmul(e, p, pw[0]), pw[1]);
    return sel(e, isnan_(e, x), x, y);
}

/* hk_tanh_d */
static LLVMValueRef tanh_d(Fe *e, LLVMValueRef u) {
    LLVMValueRef neg = fcmp(e, LLVMRealOLT, u, dc(e, 0.0));
    LLVMValueRef a = sel(e, neg, fneg(e, u), u);
    LLVMValueRef ac = sel(e, fcmp(e, LLVMRealOGT, a, dc(e, 20.0)), dc(e, 20.0), a);
    LLVMValueRef ex = exp_d(e, fmul(e, dc(e, 2.0), ac));
    LLVMValueRef big = fdiv(e, fsub(e, ex, dc(e, 1.0)), fadd(e, ex, dc(e, 1.0)));
    LLVMValueRef a2 = fmul(e, a, a);
    LLVMValueRef s = fadd(e, dc(e, 2.0 / 15.0), fmul(e, a2, dc(e, -17.0 / 315.0)));
    s = fadd(e, dc(e, -1.0 / 3.0), fmul(e, a2, s));
    s = fadd(e, dc(e, 1.0), fmul(e, a2, s));
    LLVMValueRef small = fmul(e, a, s);
    LLVMValueRef t = sel(e, fcmp(e, LLVMRealOLT, a, dc(e, 0.01)), small, big);
    t = sel(e, neg, fneg(e, t), t);
    return sel(e, isnan_(e, u), u, t);
}

/* hk_sigmoid_d */
static LLVMValueRef sigmoid_d(Fe *e, LLVMValueRef x) {
    LLVMValueRef neg = fcmp(e, LLVMRealOLT, x, dc(e, 0.0));
    LLVMValueRef ex = exp_d(e, sel(e, neg, x, fneg(e, x)));
    LLVMValueRef s = fdiv(e, dc(e, 1.0), fadd(e, dc(e, 1.0), ex));
    return sel(e, neg, fmul(e, ex, s), s);
}

/* ------------------------------------------------------------ float math
 * The float twins (hk_vmath.h's hk_exp_f, hk_gelu_tanh_f and its grad), the
 * same operations in the same order on f32 values. */
static LLVMValueRef fc(Fe *e, float v) { return LLVMConstReal(e->f32, (double)v); }
static LLVMValueRef ext(Fe *e, LLVMValueRef f) { return LLVMBuildFPExt(e->b, f, e->f64, ""); }
static LLVMValueRef trunc_(Fe *e, LLVMValueRef d) { return LLVMBuildFPTrunc(e->b, d, e->f32, ""); }

/* hk_exp_f */
static LLVMValueRef exp_f(Fe *e, LLVMValueRef x) {
    const float shift = 0x1.8p23f, log2e = 1.44269504088896341f;
    const float ln2hi = 0x1.62e4p-1f, ln2lo = 0x1.7f7d1cp-20f;
    LLVMValueRef xc = sel(e, isnan_(e, x), fc(e, 0.0f), x);
    xc = sel(e, fcmp(e, LLVMRealOGT, xc, fc(e, 88.8f)), fc(e, 88.8f), xc);
    xc = sel(e, fcmp(e, LLVMRealOLT, xc, fc(e, -104.0f)), fc(e, -104.0f), xc);
    LLVMValueRef kd = fadd(e, fmul(e, xc, fc(e, log2e)), fc(e, shift));
    kd = fsub(e, kd, fc(e, shift));
    LLVMValueRef r = fsub(e, fsub(e, xc, fmul(e, kd, fc(e, ln2hi))), fmul(e, kd, fc(e, ln2lo)));
    static const float coef[] = {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f};
    LLVMValueRef q = fc(e, 1.0f / 5040.0f);
    for (size_t i = 0; i < sizeof coef / sizeof coef[0]; i++)
        q = fadd(e, fmul(e, q, r), fc(e, coef[i]));
    LLVMValueRef p = fadd(e, fc(e, 1.0f), fadd(e, r, fmul(e, fmul(e, r, r), q)));
    LLVMValueRef k1 = fsub(e, fadd(e, fmul(e, kd, fc(e, 0.5f)), fc(e, shift)), fc(e, shift));
    LLVMValueRef k2 = fsub(e, kd, k1);
    uint32_t shu;
    memcpy(&shu, &shift, sizeof shu);
    LLVMValueRef pw[2];
    LLVMValueRef ks[2] = {k1, k2};
    for (int i = 0; i < 2; i++) {
        LLVMValueRef bits = LLVMBuildBitCast(e->b, fadd(e, ks[i], fc(e, shift)), e->i32, "");
        bits = LLVMBuildSub(e->b, bits, LLVMConstInt(e->i32, shu, 0), "");
        bits = LLVMBuildAdd(e->b, bits, LLVMConstInt(e->i32, 127, 0), "");
        bits = LLVMBuildShl(e->b, bits, LLVMConstInt(e->i32, 23, 0), "");
        pw[i] = LLVMBuildBitCast(e->b, bits, e->f32, "");
    }
    LLVMValueRef y = fmul(e, fmul(e, p, pw[0]), pw[1]);
    return sel(e, isnan_(e, x), x, y);
}

/* hk_one_pm_tanh_f */
static void one_pm_tanh_f(Fe *e, LLVMValueRef u, LLVMValueRef *plus, LLVMValueRef *minus) {
    LLVMValueRef neg = fcmp(e, LLVMRealOLT, u, fc(e, 0.0f));
    LLVMValueRef a = sel(e, neg, fneg(e, u), u);
    LLVMValueRef ex = exp_f(e, fmul(e, fc(e, -2.0f), a));
    LLVMValueRef big = fdiv(e, fc(e, 2.0f), fadd(e, fc(e, 1.0f), ex));
    LLVMValueRef small = fmul(e, big, ex);
    *plus = sel(e, neg, small, big);
    *minus = sel(e, neg, big, small);
}

/* hk_vmath.h's HK_SQRT_2_OVER_PI_F, HK_GELU_A_F, HK_GELU_3A_F (that header
 * includes math.h, whose fadd / fmul this file's helpers shadow) */
#define GELU_S_F ((float)0.79788456080286535588)
#define GELU_A_F 0.044715f
#define GELU_3A_F (3.0f * 0.044715f)
/* hk_gelu_tanh_u_f: sqrt(2/pi) (x + 0.044715 x^3) */
static LLVMValueRef gelu_u_f(Fe *e, LLVMValueRef x) {
    LLVMValueRef c = fmul(e, fmul(e, fmul(e, fc(e, GELU_A_F), x), x), x);
    return fmul(e, fc(e, GELU_S_F), fadd(e, x, c));
}

/* hk_gelu_tanh_f and hk_gelu_tanh_grad_f of a double holding a float,
 * widened back (exactly) for the double caller */
static LLVMValueRef gelu_tanh_f(Fe *e, LLVMValueRef xd) {
    LLVMValueRef x = trunc_(e, xd), p, m;
    one_pm_tanh_f(e, gelu_u_f(e, x), &p, &m);
    return ext(e, fmul(e, fmul(e, fc(e, 0.5f), x), p));
}
static LLVMValueRef gelu_tanh_grad_f(Fe *e, LLVMValueRef xd) {
    LLVMValueRef x = trunc_(e, xd), p, m;
    one_pm_tanh_f(e, gelu_u_f(e, x), &p, &m);
    LLVMValueRef xc = sel(e, fcmp(e, LLVMRealOGT, x, fc(e, 20.0f)), fc(e, 20.0f), x);
    xc = sel(e, fcmp(e, LLVMRealOLT, xc, fc(e, -20.0f)), fc(e, -20.0f), xc);
    LLVMValueRef t = fmul(e, fmul(e, fmul(e, fc(e, 0.5f), xc), fmul(e, p, m)),
                          fc(e, GELU_S_F));
    LLVMValueRef q = fadd(e, fc(e, 1.0f), fmul(e, fmul(e, fc(e, GELU_3A_F), xc), xc));
    return ext(e, fadd(e, fmul(e, fc(e, 0.5f), p), fmul(e, t, q)));
}

/* hk_unary.c apply_f32 (f32 data evaluated in double) */
static LLVMValueRef unary_d(Fe *e, int op, LLVMValueRef x) {
    switch (op) {
    case HK_NEG: return fneg(e, x);
    case HK_ABS: return call1(e, "llvm.fabs.f64", e->f64, x);
    case HK_SQRT: return call1(e, "llvm.sqrt.f64", e->f64, x);
    case HK_RECIP: return fdiv(e, dc(e, 1.0), x);
    case HK_EXP: return exp_d(e, x);
    case HK_LOG: return call1(e, "log", e->f64, x);
    case HK_SIN: return call1(e, "sin", e->f64, x);
    case HK_COS: return call1(e, "cos", e->f64, x);
    case HK_TANH: return tanh_d(e, x);
    case HK_SIGMOID: return sigmoid_d(e, x);
    case HK_ERF: return call1(e, "erf", e->f64, x);
    case HK_RELU: /* x > 0 ? x : 0 * x */
        return sel(e, fcmp(e, LLVMRealOGT, x, dc(e, 0.0)), x, fmul(e, dc(e, 0.0), x));
    case HK_FLOOR: return call1(e, "llvm.floor.f64", e->f64, x);
    case HK_CEIL: return call1(e, "llvm.ceil.f64", e->f64, x);
    case HK_GELU: {
        LLVMValueRef er = call1(e, "erf", e->f64, fmul(e, x, dc(e, 0.70710678118654752440)));
        return fmul(e, fmul(e, dc(e, 0.5), x), fadd(e, dc(e, 1.0), er));
    }
    case HK_GELU_TANH: return gelu_tanh_f(e, x);
    case HK_SILU: return fmul(e, x, sigmoid_d(e, x));
    default: return x;
    }
}

/* train_elementwise.c ug_deriv(op, x, y) */
static LLVMValueRef ug_deriv(Fe *e, int op, LLVMValueRef x, LLVMValueRef y) {
    switch (op) {
    case HK_UG_EXP: return y;
    case HK_UG_LOG: return fdiv(e, dc(e, 1.0), x);
    case HK_UG_SQRT: return fdiv(e, dc(e, 0.5), y);
    case HK_UG_TANH: return fsub(e, dc(e, 1.0), fmul(e, y, y));
    case HK_UG_SIGMOID: {
        LLVMValueRef s = sigmoid_d(e, x);
        return fmul(e, s, fsub(e, dc(e, 1.0), s));
    }
    case HK_UG_ERF:
        return fmul(e, dc(e, 1.12837916709551257390), exp_d(e, fmul(e, fneg(e, x), x)));
    case HK_UG_RELU: return sel(e, fcmp(e, LLVMRealOGT, x, dc(e, 0.0)), dc(e, 1.0), dc(e, 0.0));
    case HK_UG_NEG: return dc(e, -1.0);
    case HK_UG_RECIPROCAL: return fmul(e, fneg(e, y), y);
    case HK_UG_GELU: {
        LLVMValueRef er = call1(e, "erf", e->f64, fmul(e, x, dc(e, 0.70710678118654752440)));
        LLVMValueRef a = fmul(e, dc(e, 0.5), fadd(e, dc(e, 1.0), er));
        LLVMValueRef g = exp_d(e, fmul(e, fmul(e, dc(e, -0.5), x), x));
        return fadd(e, a, fmul(e, fmul(e, x, dc(e, 0.39894228040143267794)), g));
    }
    case HK_UG_GELU_TANH: return gelu_tanh_grad_f(e, x);
    case HK_UG_SILU: {
        LLVMValueRef s = sigmoid_d(e, x);
        return fmul(e, s, fadd(e, dc(e, 1.0), fmul(e, x, fsub(e, dc(e, 1.0), s))));
    }
    default: return dc(e, 0.0);
    }
}

/* train_elementwise.c ug_fwd: y from x when the rule reads y and none is given */
static LLVMValueRef ug_fwd(Fe *e, int op, LLVMValueRef x) {
    switch (op) {
    case HK_UG_EXP: return exp_d(e, x);
    case HK_UG_SQRT: return call1(e, "llvm.sqrt.f64", e->f64, x);
    case HK_UG_TANH: return tanh_d(e, x);
    case HK_UG_RECIPROCAL: return fdiv(e, dc(e, 1.0), x);
    default: return dc(e, 0.0);
    }
}

static int ug_reads_y(int op) {
    return op == HK_UG_EXP || op == HK_UG_SQRT || op == HK_UG_TANH || op == HK_UG_RECIPROCAL;
}

/* ------------------------------------------------------------ the program */


/* bf16 as integer operations (kernels/host/hk_bf16.h's twins), so every
 * target lowers them: widen = the bits in the top half; the rounding is
 * hk_f32_to_bf16's nearest even, a NaN kept quiet, returned as the f32 it
 * widens to (its low 16 bits zero). */
static LLVMValueRef ci32(Fe *e, unsigned v) { return LLVMConstInt(e->i32, v, 0); }

static LLVMValueRef bf16_widen(Fe *e, LLVMValueRef h) {
    LLVMValueRef w = LLVMBuildShl(e->b, LLVMBuildZExt(e->b, h, e->i32, ""), ci32(e, 16), "");
    return LLVMBuildBitCast(e->b, w, e->f32, "");
}

static LLVMValueRef bf16_round(Fe *e, LLVMValueRef f) {
    LLVMBuilderRef b = e->b;
    LLVMValueRef x = LLVMBuildBitCast(b, f, e->i32, "");
    LLVMValueRef nan = LLVMBuildICmp(b, LLVMIntUGT, LLVMBuildAnd(b, x, ci32(e, 0x7fffffffu), ""),
                                     ci32(e, 0x7f800000u), "");
    LLVMValueRef odd = LLVMBuildAnd(b, LLVMBuildLShr(b, x, ci32(e, 16), ""), ci32(e, 1), "");
    LLVMValueRef r = LLVMBuildAdd(b, x, LLVMBuildAdd(b, odd, ci32(e, 0x7fff), ""), "");
    LLVMValueRef q = LLVMBuildOr(b, x, ci32(e, 0x400000u), ""); /* (x >> 16) | 0x40, in place */
    r = LLVMBuildAnd(b, LLVMBuildSelect(b, nan, q, r, ""), ci32(e, 0xffff0000u), "");
    return LLVMBuildBitCast(b, r, e->f32, "");
}

static LLVMValueRef bf16_bits(Fe *e, LLVMValueRef f) {
    LLVMValueRef x = LLVMBuildBitCast(e->b, f, e->i32, "");
    return LLVMBuildTrunc(e->b, LLVMBuildLShr(e->b, x, ci32(e, 16), ""), e->i16, "");
}

/* Emits the element at input indices idx[]: loads, the instructions, and
 * stores of the outputs at element index oidx. */
static void emit_element(Fe *e, const FkKernel *k, LLVMValueRef *inp, LLVMValueRef *idx,
                         LLVMValueRef *outp, LLVMValueRef oidx, LLVMValueRef *reg) {
    for (int i = 0; i < k->ninst; i++) {
        const FkInst *s = &k->inst[i];
        LLVMValueRef r = NULL;
        switch (s->op) {
        case FK_LOAD: {
            int bl = k->in[s->a].is_bool, h = k->in[s->a].is_bf16;
            LLVMTypeRef t = bl ? e->i8 : h ? e->i16 : e->f32;
            LLVMValueRef p = LLVMBuildInBoundsGEP2(e->b, t, inp[s->a], &idx[s->a], 1, "");
            r = LLVMBuildLoad2(e->b, t, p, "");
            if (bl) r = LLVMBuildICmp(e->b, LLVMIntNE, r, LLVMConstInt(e->i8, 0, 0), "");
            if (h) r = bf16_widen(e, r);
            break;
        }
        case FK_CONST: r = LLVMConstReal(e->f32, (double)s->imm); break;
        case FK_ADD: r = LLVMBuildFAdd(e->b, reg[s->a], reg[s->b], ""); break;
        case FK_SUB: r = LLVMBuildFSub(e->b, reg[s->a], reg[s->b], ""); break;
        case FK_MUL: r = LLVMBuildFMul(e->b, reg[s->a], reg[s->b], ""); break;
        case FK_DIV: r = LLVMBuildFDiv(e->b, reg[s->a], reg[s->b], ""); break;
        case FK_MAX:
        case FK_MIN: { /* x != x || x > y ? x : y (FMAX / FMIN of hk_binary) */
            LLVMValueRef x = reg[s->a], y = reg[s->b];
            LLVMValueRef c = LLVMBuildOr(
                e->b, fcmp(e, LLVMRealUNO, x, x),
                fcmp(e, s->op == FK_MAX ? LLVMRealOGT : LLVMRealOLT, x, y), "");
            r = sel(e, c, x, y);
            break;
        }
        case FK_UNARY: r = trunc_(e, unary_d(e, s->sub, ext(e, reg[s->a]))); break;
        case FK_UGRAD: {
            LLVMValueRef x = ext(e, reg[s->a]), y = dc(e, 0.0);
            if (ug_reads_y(s->sub)) y = s->c >= 0 ? ext(e, reg[s->c]) : ug_fwd(e, s->sub, x);
            r = trunc_(e, fmul(e, ext(e, reg[s->b]), ug_deriv(e, s->sub, x, y)));
            break;
        }
        case FK_WHERE: r = sel(e, reg[s->a], reg[s->b], reg[s->c]); break;
        case FK_RBF16: r = bf16_round(e, reg[s->a]); break;
        default: r = LLVMConstReal(e->f32, 0.0); break;
        }
        reg[i] = r;
    }
    for (int o = 0; o < k->nout; o++) {
        int h = k->out_bf16[o];
        LLVMValueRef p = LLVMBuildInBoundsGEP2(e->b, h ? e->i16 : e->f32, outp[o], &oidx, 1, "");
        LLVMBuildStore(e->b, h ? bf16_bits(e, reg[k->out[o]]) : reg[k->out[o]], p);
    }
}

/* base offset of each input for outer row r (all dims but the last) */
static void row_bases(Fe *e, const FkKernel *k, LLVMValueRef r, LLVMValueRef *base) {
    for (int i = 0; i < k->nin; i++) base[i] = LLVMConstInt(e->i64, 0, 0);
    int64_t div = 1;
    for (int d = k->rank - 2; d >= 0; d--) {
        LLVMValueRef q = div == 1 ? r : LLVMBuildUDiv(e->b, r, LLVMConstInt(e->i64, (unsigned long long)div, 0), "");
        q = d == 0 ? q : LLVMBuildURem(e->b, q, LLVMConstInt(e->i64, (unsigned long long)k->dims[d], 0), "");
        for (int i = 0; i < k->nin; i++) {
            int64_t st = k->in[i].strides[d];
            if (!st) continue;
            base[i] = LLVMBuildAdd(e->b, base[i],
                                   LLVMBuildMul(e->b, q, LLVMConstInt(e->i64, (unsigned long long)st, 0), ""), "");
        }
        div *= k->dims[d];
    }
}

/* idx = base + j * inner stride */
static LLVMValueRef inner_idx(Fe *e, const FkKernel *k, int i, LLVMValueRef base, LLVMValueRef j) {
    int64_t st = k->rank ? k->in[i].strides[k->rank - 1] : 0;
    if (st == 0) return base;
    LLVMValueRef t = st == 1 ? j : LLVMBuildMul(e->b, j, LLVMConstInt(e->i64, (unsigned long long)st, 0), "");
    return LLVMBuildAdd(e->b, base, t, "");
}

static LLVMValueRef arg_ptr(Fe *e, const FkKernel *k, int a, LLVMValueRef p) {
    int bl = a < k->nin && k->in[a].is_bool;
    int h = a < k->nin ? k->in[a].is_bf16 : k->out_bf16[a - k->nin];
    return bl ? p : LLVMBuildBitCast(e->b, p, LLVMPointerType(h ? e->i16 : e->f32, 0), "");
}

static LLVMTypeRef kernel_type(Fe *e, const FkKernel *k) {
    LLVMTypeRef ps[FK_MAX_ARGS];
    for (int i = 0; i < k->nin + k->nout; i++) ps[i] = e->i8p;
    return LLVMFunctionType(e->vd, ps, (unsigned)(k->nin + k->nout), 0);
}

/* @NAME.rows<suffix>(i8* ctx, i64 lo, i64 hi), compiled with the given
 * target features (NULL: the module's baseline) */
static LLVMValueRef build_rows(Fe *e, const FkKernel *k, const char *suffix, const char *features) {
    char nm[80];
    snprintf(nm, sizeof nm, "%s.rows%s", k->name, suffix);
    LLVMTypeRef ps[3] = {e->i8p, e->i64, e->i64};
    LLVMValueRef fn = LLVMAddFunction(e->m, nm, LLVMFunctionType(e->vd, ps, 3, 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    if (features)
        LLVMAddAttributeAtIndex(
            fn, LLVMAttributeFunctionIndex,
            LLVMCreateStringAttribute(e->c, "target-features", 15, features, (unsigned)strlen(features)));
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(e->c, fn, "entry");
    LLVMBasicBlockRef outer = LLVMAppendBasicBlockInContext(e->c, fn, "outer");
    LLVMBasicBlockRef row = LLVMAppendBasicBlockInContext(e->c, fn, "row");
    LLVMBasicBlockRef inner = LLVMAppendBasicBlockInContext(e->c, fn, "inner");
    LLVMBasicBlockRef rowend = LLVMAppendBasicBlockInContext(e->c, fn, "rowend");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->c, fn, "done");
    LLVMBuilderRef b = e->b;
    LLVMPositionBuilderAtEnd(b, entry);
    int na = k->nin + k->nout;
    LLVMValueRef ptr[FK_MAX_ARGS];
    LLVMValueRef ctx = LLVMBuildBitCast(b, LLVMGetParam(fn, 0), LLVMPointerType(e->i8p, 0), "");
    for (int a = 0; a < na; a++) {
        LLVMValueRef ix = LLVMConstInt(e->i64, (unsigned long long)a, 0);
        LLVMValueRef p = LLVMBuildLoad2(b, e->i8p, LLVMBuildInBoundsGEP2(b, e->i8p, ctx, &ix, 1, ""), "");
        ptr[a] = arg_ptr(e, k, a, p);
    }
    LLVMValueRef lo = LLVMGetParam(fn, 1), hi = LLVMGetParam(fn, 2);
    LLVMBuildBr(b, outer);

    LLVMPositionBuilderAtEnd(b, outer);
    LLVMValueRef s = LLVMBuildPhi(b, e->i64, "s");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, s, hi, ""), row, done);

    LLVMPositionBuilderAtEnd(b, row);
    int64_t innern = k->rank ? k->dims[k->rank - 1] : 1;
    LLVMValueRef inn = LLVMConstInt(e->i64, (unsigned long long)innern, 0);
    LLVMValueRef r = LLVMBuildUDiv(b, s, inn, "r");
    LLVMValueRef j0 = LLVMBuildURem(b, s, inn, "j0");
    LLVMValueRef j1c = LLVMBuildAdd(b, j0, LLVMBuildSub(b, hi, s, ""), "");
    LLVMValueRef j1 = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, j1c, inn, ""), j1c, inn, "j1");
    LLVMValueRef base[FK_MAX_IN];
    row_bases(e, k, r, base);
    LLVMValueRef obase = LLVMBuildSub(b, s, j0, "obase");
    LLVMBuildBr(b, inner);

    LLVMPositionBuilderAtEnd(b, inner);
    LLVMValueRef j = LLVMBuildPhi(b, e->i64, "j");
    LLVMValueRef idx[FK_MAX_IN];
    for (int i = 0; i < k->nin; i++) idx[i] = inner_idx(e, k, i, base[i], j);
    LLVMValueRef *reg = calloc((size_t)k->ninst + 1, sizeof *reg);
    emit_element(e, k, ptr, idx, ptr + k->nin, LLVMBuildAdd(b, obase, j, ""), reg);
    free(reg);
    LLVMValueRef jn = LLVMBuildAdd(b, j, LLVMConstInt(e->i64, 1, 0), "");
    LLVMBasicBlockRef inner_end = LLVMGetInsertBlock(b);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, jn, j1, ""), inner, rowend);
    LLVMValueRef jin[2] = {j0, jn};
    LLVMBasicBlockRef jbb[2] = {row, inner_end};
    LLVMAddIncoming(j, jin, jbb, 2);

    LLVMPositionBuilderAtEnd(b, rowend);
    LLVMValueRef sn = LLVMBuildAdd(b, s, LLVMBuildSub(b, j1, j0, ""), "");
    LLVMBuildBr(b, outer);
    LLVMValueRef sin_[2] = {lo, sn};
    LLVMBasicBlockRef sbb[2] = {entry, rowend};
    LLVMAddIncoming(s, sin_, sbb, 2);

    LLVMPositionBuilderAtEnd(b, done);
    LLVMBuildRetVoid(b);
    return fn;
}

int fk_emit_host(void *modp, const FkKernel *k, IrError *err) {
    char why[160];
    if (fk_check(k, why, sizeof why)) return ir_errorf(err, "fused kernel %s: %s", k->name, why);
    Fe e;
    fe_init(&e, (LLVMModuleRef)modp, 0);
    LLVMTypeRef fty = kernel_type(&e, k);
    LLVMValueRef fn = LLVMGetNamedFunction(e.m, k->name);
    if (!fn) fn = LLVMAddFunction(e.m, k->name, fty);
    if (LLVMCountBasicBlocks(fn)) {
        LLVMDisposeBuilder(e.b);
        return ir_errorf(err, "fused kernel %s defined twice", k->name);
    }
    /* x86-64: the loop for the baseline ISA, AVX2 and AVX-512F, picked per
     * call by hk_vector_isa() (kernels/host/hk_cpu.h); the features add no
     * FMA contraction (plain fmul / fadd never fuse without `contract` or
     * AllowFPOpFusion=Fast), so all three compute the same bits */
    const char *triple = LLVMGetTarget(e.m);
    int x86 = triple && !strncmp(triple, "x86_64", 6);
    LLVMValueRef rows = build_rows(&e, k, "", NULL), rows_v[2] = {NULL, NULL};
    if (x86) {
        rows_v[0] = build_rows(&e, k, ".avx2", "+avx,+avx2");
        rows_v[1] = build_rows(&e, k, ".avx512", "+avx,+avx2,+avx512f");
    }
    /* void hk_parallel_for(i64 n, i64 grain, void (*)(i8*, i64, i64), i8* ctx) */
    LLVMTypeRef pf_ps[4] = {e.i64, e.i64, LLVMPointerType(LLVMGlobalGetValueType(rows), 0), e.i8p};
    LLVMTypeRef pf_ty = LLVMFunctionType(e.vd, pf_ps, 4, 0);
    LLVMValueRef pf = LLVMGetNamedFunction(e.m, "hk_parallel_for");
    if (!pf) pf = LLVMAddFunction(e.m, "hk_parallel_for", pf_ty);
    LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(e.c, fn, "entry");
    LLVMPositionBuilderAtEnd(e.b, bb);
    int na = k->nin + k->nout;
    LLVMTypeRef arr = LLVMArrayType(e.i8p, (unsigned)na);
    LLVMValueRef ctx = LLVMBuildAlloca(e.b, arr, "ctx");
    for (int a = 0; a < na; a++) {
        LLVMValueRef ix[2] = {LLVMConstInt(e.i64, 0, 0), LLVMConstInt(e.i64, (unsigned long long)a, 0)};
        LLVMBuildStore(e.b, LLVMGetParam(fn, (unsigned)a), LLVMBuildInBoundsGEP2(e.b, arr, ctx, ix, 2, ""));
    }
    int64_t grain = fk_is_math(k) ? HK_GRAIN_MATH : HK_GRAIN_CHEAP;
    LLVMValueRef pick = rows;
    if (x86) {
        LLVMTypeRef ity = LLVMFunctionType(e.i32, NULL, 0, 0);
        LLVMValueRef isaf = LLVMGetNamedFunction(e.m, "hk_vector_isa");
        if (!isaf) isaf = LLVMAddFunction(e.m, "hk_vector_isa", ity);
        LLVMValueRef isa = LLVMBuildCall2(e.b, ity, isaf, NULL, 0, "isa");
        pick = LLVMBuildSelect(e.b, LLVMBuildICmp(e.b, LLVMIntSGE, isa, LLVMConstInt(e.i32, 1, 0), ""),
                               rows_v[0], rows, "");
        pick = LLVMBuildSelect(e.b, LLVMBuildICmp(e.b, LLVMIntSGE, isa, LLVMConstInt(e.i32, 2, 0), ""),
                               rows_v[1], pick, "");
    }
    LLVMValueRef args[4] = {LLVMConstInt(e.i64, (unsigned long long)fk_numel(k), 0),
                            LLVMConstInt(e.i64, (unsigned long long)grain, 0),
                            LLVMBuildBitCast(e.b, pick, pf_ps[2], ""),
                            LLVMBuildBitCast(e.b, ctx, e.i8p, "")};
    LLVMBuildCall2(e.b, LLVMGlobalGetValueType(pf), pf, args, 4, "");
    LLVMBuildRetVoid(e.b);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    LLVMDisposeBuilder(e.b);
    return 0;
}

/* ------------------------------------------------------------ NVPTX */

static LLVMValueRef sreg(Fe *e, const char *name) {
    LLVMTypeRef ft = LLVMFunctionType(e->i32, NULL, 0, 0);
    LLVMValueRef f = LLVMGetNamedFunction(e->m, name);
    if (!f) f = LLVMAddFunction(e->m, name, ft);
    return LLVMBuildZExt(e->b, LLVMBuildCall2(e->b, ft, f, NULL, 0, ""), e->i64, "");
}

static int emit_nvptx_kernel(Fe *e, const FkKernel *k, IrError *err) {
    char why[160];
    if (fk_check(k, why, sizeof why)) return ir_errorf(err, "fused kernel %s: %s", k->name, why);
    if (fk_needs_libm(k))
        return ir_errorf(err, "fused kernel %s: needs libm (erf / log / ...), not lowered to NVPTX",
                         k->name);
    LLVMValueRef fn = LLVMAddFunction(e->m, k->name, kernel_type(e, k));
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(e->c, fn, "entry");
    LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(e->c, fn, "loop");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->c, fn, "body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->c, fn, "done");
    LLVMBuilderRef b = e->b;
    LLVMPositionBuilderAtEnd(b, entry);
    int na = k->nin + k->nout;
    LLVMValueRef ptr[FK_MAX_ARGS];
    for (int a = 0; a < na; a++) ptr[a] = arg_ptr(e, k, a, LLVMGetParam(fn, (unsigned)a));
    LLVMValueRef ntid = sreg(e, "llvm.nvvm.read.ptx.sreg.ntid.x");
    LLVMValueRef tid = LLVMBuildAdd(
        b, LLVMBuildMul(b, sreg(e, "llvm.nvvm.read.ptx.sreg.ctaid.x"), ntid, ""),
        sreg(e, "llvm.nvvm.read.ptx.sreg.tid.x"), "tid");
    LLVMValueRef step = LLVMBuildMul(b, sreg(e, "llvm.nvvm.read.ptx.sreg.nctaid.x"), ntid, "step");
    LLVMValueRef n = LLVMConstInt(e->i64, (unsigned long long)fk_numel(k), 0);
    LLVMBuildBr(b, loop);

    LLVMPositionBuilderAtEnd(b, loop);
    LLVMValueRef el = LLVMBuildPhi(b, e->i64, "e");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, el, n, ""), body, done);

    LLVMPositionBuilderAtEnd(b, body);
    int64_t innern = k->rank ? k->dims[k->rank - 1] : 1;
    LLVMValueRef inn = LLVMConstInt(e->i64, (unsigned long long)innern, 0);
    LLVMValueRef r = LLVMBuildUDiv(b, el, inn, ""), j = LLVMBuildURem(b, el, inn, "");
    LLVMValueRef base[FK_MAX_IN], idx[FK_MAX_IN];
    row_bases(e, k, r, base);
    for (int i = 0; i < k->nin; i++) idx[i] = inner_idx(e, k, i, base[i], j);
    LLVMValueRef *reg = calloc((size_t)k->ninst + 1, sizeof *reg);
    emit_element(e, k, ptr, idx, ptr + k->nin, el, reg);
    free(reg);
    LLVMValueRef en = LLVMBuildAdd(b, el, step, "");
    LLVMBasicBlockRef body_end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, loop);
    LLVMValueRef ein[2] = {tid, en};
    LLVMBasicBlockRef ebb[2] = {entry, body_end};
    LLVMAddIncoming(el, ein, ebb, 2);

    LLVMPositionBuilderAtEnd(b, done);
    LLVMBuildRetVoid(b);

    LLVMValueRef md[3] = {fn, LLVMMDStringInContext(e->c, "kernel", 6), LLVMConstInt(e->i32, 1, 0)};
    LLVMAddNamedMetadataOperand(e->m, "nvvm.annotations", LLVMMDNodeInContext(e->c, md, 3));
    return 0;
}

int fk_optimize(void *mod, void *tm, int level, IrError *err) {
    char pipe[32];
    snprintf(pipe, sizeof pipe, "default<O%d>", level < 0 ? 0 : level > 3 ? 3 : level);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMErrorRef e = LLVMRunPasses((LLVMModuleRef)mod, pipe, (LLVMTargetMachineRef)tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (e) {
        char *m = LLVMGetErrorMessage(e);
        ir_errorf(err, "LLVM optimisation pipeline %s: %s", pipe, m);
        LLVMDisposeErrorMessage(m);
        return -1;
    }
    return 0;
}

int fk_ptx(const FkKernel *const *ks, int n, const char *cpu, char **ptx, char **ll,
           IrError *err) {
    *ptx = NULL;
    if (ll) *ll = NULL;
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    const char *triple = "nvptx64-nvidia-cuda";
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        ir_errorf(err, "LLVM: target %s: %s", triple, msg ? msg : "unknown");
        LLVMDisposeMessage(msg);
        return -1;
    }
    /* PTX ISA 7.0 is the first with sm_80 */
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, cpu ? cpu : "sm_80",
                                                      "+ptx70", LLVMCodeGenLevelAggressive,
                                                      LLVMRelocDefault, LLVMCodeModelDefault);
    if (!tm) return ir_errorf(err, "LLVM: no target machine for %s", triple);
    LLVMContextRef c = LLVMContextCreate();
    LLVMModuleRef m = LLVMModuleCreateWithNameInContext("hetc_fused", c);
    LLVMSetTarget(m, triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(m, dl);
    LLVMDisposeTargetData(dl);
    Fe e;
    fe_init(&e, m, 1);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = emit_nvptx_kernel(&e, ks[i], err);
    LLVMDisposeBuilder(e.b);
    if (!rc && LLVMVerifyModule(m, LLVMReturnStatusAction, &msg)) {
        rc = ir_errorf(err, "LLVM verifier rejected the NVPTX module: %s", msg ? msg : "");
    }
    LLVMDisposeMessage(msg);
    msg = NULL;
    /* No IR pipeline here: LLVM 14's InstCombine narrows index arithmetic
     * over dims of 2 into i1 multiplies, which its NVPTX instruction
     * selector cannot select ("Cannot select: i1 = mul"); the backend's own
     * -O3 code generation still runs. */
    if (!rc && ll) *ll = LLVMPrintModuleToString(m); /* LLVM-allocated: copied below */
    if (!rc && ll) {
        char *s = strdup(*ll);
        LLVMDisposeMessage(*ll);
        *ll = s;
    }
    LLVMMemoryBufferRef buf = NULL;
    if (!rc && LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMAssemblyFile, &msg, &buf)) {
        rc = ir_errorf(err, "LLVM: PTX emission: %s", msg ? msg : "");
        LLVMDisposeMessage(msg);
    }
    if (!rc) {
        size_t len = LLVMGetBufferSize(buf);
        char *s = malloc(len + 1);
        if (s) {
            memcpy(s, LLVMGetBufferStart(buf), len);
            s[len] = 0;
        }
        *ptx = s;
        if (!s) rc = ir_errorf(err, "out of memory");
    }
    if (buf) LLVMDisposeMemoryBuffer(buf);
    LLVMDisposeModule(m);
    LLVMContextDispose(c);
    LLVMDisposeTargetMachine(tm);
    if (rc && ll) {
        free(*ll);
        *ll = NULL;
    }
    return rc;
}
