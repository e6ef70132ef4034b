/* Fused elementwise kernel descriptions (fused_kernel.h). */
#include "fused_kernel.h"

#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_train.h"
#include "ir.h" /* ir_xrealloc */

static const char *const op_names[FK_NOPS] = {
    [FK_LOAD] = "load", [FK_CONST] = "const", [FK_ADD] = "add", [FK_SUB] = "sub",
    [FK_MUL] = "mul",   [FK_DIV] = "div",     [FK_MAX] = "max", [FK_MIN] = "min",
    [FK_UNARY] = "unary", [FK_UGRAD] = "ugrad", [FK_WHERE] = "where", [FK_RBF16] = "rbf16",
};

static const char *const unary_names[HK_UNOP_COUNT] = {
    [HK_NEG] = "neg",     [HK_ABS] = "abs",         [HK_SQRT] = "sqrt", [HK_RECIP] = "recip",
    [HK_EXP] = "exp",     [HK_LOG] = "log",         [HK_SIN] = "sin",   [HK_COS] = "cos",
    [HK_TANH] = "tanh",   [HK_SIGMOID] = "sigmoid", [HK_ERF] = "erf",   [HK_RELU] = "relu",
    [HK_FLOOR] = "floor", [HK_CEIL] = "ceil",       [HK_NOT] = "not",   [HK_GELU] = "gelu",
    [HK_GELU_TANH] = "gelu_tanh", [HK_SILU] = "silu",
};

const char *fk_op_name(FkOp op) { return (unsigned)op < FK_NOPS ? op_names[op] : "?"; }

int fk_push(FkKernel *k, FkOp op, int sub, int a, int b, int c, float imm) {
    if (k->ninst == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 16;
        k->inst = ir_xrealloc(k->inst, sizeof *k->inst * (size_t)k->cap);
    }
    k->inst[k->ninst] = (FkInst){op, sub, a, b, c, imm};
    return k->ninst++;
}

int64_t fk_numel(const FkKernel *k) {
    int64_t n = 1;
    for (int d = 0; d < k->rank; d++) n *= k->dims[d];
    return n;
}

void fk_collapse(FkKernel *k) {
    int r = 0;
    for (int d = 0; d < k->rank; d++) { /* drop size-1 dims (their strides never matter) */
        if (k->dims[d] == 1) continue;
        k->dims[r] = k->dims[d];
        for (int i = 0; i < k->nin; i++) k->in[i].strides[r] = k->in[i].strides[d];
        r++;
    }
    k->rank = r;
    r = 0;
    for (int d = 1; d < k->rank; d++) {
        int ok = 1;
        for (int i = 0; i < k->nin && ok; i++)
            ok = k->in[i].strides[r] == k->in[i].strides[d] * k->dims[d];
        if (ok) { /* merge d into r: (r, d) is one dim of dims[r] * dims[d] */
            k->dims[r] *= k->dims[d];
            for (int i = 0; i < k->nin; i++) k->in[i].strides[r] = k->in[i].strides[d];
        } else {
            r++;
            k->dims[r] = k->dims[d];
            for (int i = 0; i < k->nin; i++) k->in[i].strides[r] = k->in[i].strides[d];
        }
    }
    if (k->rank) k->rank = r + 1;
}

static int unary_libm(int sub) {
    return sub == HK_LOG || sub == HK_SIN || sub == HK_COS || sub == HK_ERF || sub == HK_GELU ||
           sub == HK_FLOOR || sub == HK_CEIL;
}

int fk_needs_libm(const FkKernel *k) {
    for (int i = 0; i < k->ninst; i++) {
        const FkInst *s = &k->inst[i];
        if (s->op == FK_UNARY && unary_libm(s->sub)) return 1;
        if (s->op == FK_UGRAD && (s->sub == HK_UG_GELU)) return 1;
    }
    return 0;
}

int fk_is_math(const FkKernel *k) {
    for (int i = 0; i < k->ninst; i++) {
        const FkInst *s = &k->inst[i];
        if (s->op == FK_UGRAD || s->op == FK_DIV) return 1;
        if (s->op == FK_UNARY && s->sub != HK_NEG && s->sub != HK_ABS && s->sub != HK_RELU)
            return 1;
    }
    return 0;
}

int fk_check(const FkKernel *k, char *why, size_t n) {
#define BAD(...) return snprintf(why, n, __VA_ARGS__), -1
    if (k->rank < 0 || k->rank > FK_MAX_RANK) BAD("rank %d", k->rank);
    if (k->nin < 0 || k->nin > FK_MAX_IN || k->nout < 1 || k->nout > FK_MAX_OUT ||
        k->nin + k->nout > FK_MAX_ARGS)
        BAD("%d inputs, %d outputs", k->nin, k->nout);
    for (int d = 0; d < k->rank; d++)
        if (k->dims[d] < 0) BAD("dim %d is %lld", d, (long long)k->dims[d]);
    for (int i = 0; i < k->ninst; i++) {
        const FkInst *s = &k->inst[i];
        int isbool = s->op == FK_LOAD && s->a >= 0 && s->a < k->nin && k->in[s->a].is_bool;
        (void)isbool;
        switch (s->op) {
        case FK_LOAD:
            if (s->a < 0 || s->a >= k->nin) BAD("r%d: load of input %d", i, s->a);
            if (k->in[s->a].is_bool && k->in[s->a].is_bf16) BAD("input %d: bool and bf16", s->a);
            break;
        case FK_CONST: break;
        case FK_ADD: case FK_SUB: case FK_MUL: case FK_DIV: case FK_MAX: case FK_MIN:
            if (s->a < 0 || s->a >= i || s->b < 0 || s->b >= i) BAD("r%d: operand", i);
            break;
        case FK_UNARY:
            if (s->sub < 0 || s->sub >= HK_UNOP_COUNT || s->sub == HK_NOT) BAD("r%d: unary %d", i, s->sub);
            if (s->a < 0 || s->a >= i) BAD("r%d: operand", i);
            break;
        case FK_RBF16:
            if (s->a < 0 || s->a >= i) BAD("r%d: operand", i);
            break;
        case FK_UGRAD:
            if (s->sub < 0 || s->sub >= HK_UG_COUNT) BAD("r%d: unary grad %d", i, s->sub);
            if (s->a < 0 || s->a >= i || s->b < 0 || s->b >= i || s->c >= i) BAD("r%d: operand", i);
            break;
        case FK_WHERE: {
            if (s->a < 0 || s->a >= i || s->b < 0 || s->b >= i || s->c < 0 || s->c >= i)
                BAD("r%d: operand", i);
            const FkInst *cd = &k->inst[s->a];
            if (cd->op != FK_LOAD || !k->in[cd->a].is_bool) BAD("r%d: condition not a bool load", i);
            break;
        }
        default: BAD("r%d: op %d", i, (int)s->op);
        }
        /* bool registers feed only Where's condition */
        for (int j = 0; j < 3; j++) {
            int o = j == 0 ? s->a : j == 1 ? s->b : s->c;
            if (s->op == FK_LOAD || s->op == FK_CONST || o < 0 || o >= i) continue;
            const FkInst *src = &k->inst[o];
            int b = src->op == FK_LOAD && k->in[src->a].is_bool;
            if (b && !(s->op == FK_WHERE && j == 0)) BAD("r%d: bool operand r%d", i, o);
        }
    }
    for (int o = 0; o < k->nout; o++) {
        int r = k->out[o];
        if (r < 0 || r >= k->ninst) BAD("output %d: register %d", o, r);
        if (k->inst[r].op == FK_LOAD && k->in[k->inst[r].a].is_bool) BAD("output %d is bool", o);
        /* a bf16 store keeps the top 16 bits: only a bf16-exact register may go there */
        if (k->out_bf16[o] && k->inst[r].op != FK_RBF16 &&
            !(k->inst[r].op == FK_LOAD && k->in[k->inst[r].a].is_bf16))
            BAD("output %d is bf16 but r%d is not rounded to bf16", o, r);
    }
    return 0;
#undef BAD
}

void fk_print(const FkKernel *k, FILE *f) {
    fprintf(f, "%s: dims [", k->name);
    for (int d = 0; d < k->rank; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)k->dims[d]);
    fprintf(f, "]\n");
    for (int i = 0; i < k->nin; i++) {
        fprintf(f, "  in%d %s strides [", i,
                k->in[i].is_bool ? "bool" : k->in[i].is_bf16 ? "bf16" : "f32");
        for (int d = 0; d < k->rank; d++)
            fprintf(f, "%s%lld", d ? "," : "", (long long)k->in[i].strides[d]);
        fprintf(f, "]\n");
    }
    for (int i = 0; i < k->ninst; i++) {
        const FkInst *s = &k->inst[i];
        fprintf(f, "  r%d = %s", i, fk_op_name(s->op));
        switch (s->op) {
        case FK_LOAD: fprintf(f, " in%d", s->a); break;
        case FK_CONST: fprintf(f, " %a", (double)s->imm); break;
        case FK_UNARY:
            fprintf(f, ".%s r%d", s->sub >= 0 && s->sub < HK_UNOP_COUNT && unary_names[s->sub]
                                      ? unary_names[s->sub] : "?", s->a);
            break;
        case FK_UGRAD: {
            const char *nm = hk_unary_grad_name((HkUnaryGrad)s->sub);
            fprintf(f, ".%s x=r%d dy=r%d", nm ? nm : "?", s->a, s->b);
            if (s->c >= 0) fprintf(f, " y=r%d", s->c);
            break;
        }
        case FK_WHERE: fprintf(f, " r%d r%d r%d", s->a, s->b, s->c); break;
        case FK_RBF16: fprintf(f, " r%d", s->a); break;
        default: fprintf(f, " r%d r%d", s->a, s->b); break;
        }
        fprintf(f, "\n");
    }
    for (int o = 0; o < k->nout; o++)
        fprintf(f, "  out%d%s = r%d\n", o, k->out_bf16[o] ? " bf16" : "", k->out[o]);
}

void fk_free(FkKernel *k) {
    free(k->inst);
    k->inst = NULL;
    k->ninst = k->cap = 0;
}
