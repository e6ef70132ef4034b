/* Text IR tests: printer/parser round trip checked against the graph built
 * through the builder API (the oracle is the builder's graph, compared field
 * by field and bit for bit), golden files that must print as themselves,
 * parser errors with line:col, and robustness on truncated / mutated text. */
#include <dirent.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_ir.h"

/* ------------------------------------------------------------ comparison */
static int streq0(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

/* Does `b` (parsed) carry the same information as `a` (built)?  Constants
 * printed inline must match bit for bit; elided ones by size and hash. */
static int values_match(const IrValue *a, const IrValue *b, const IrPrintOptions *o, char *why,
                        size_t n) {
    if (!b) return snprintf(why, n, "value %s missing", a->name), 0;
    if (a->kind != b->kind || a->dtype != b->dtype || a->shape_known != b->shape_known)
        return snprintf(why, n, "value %s: kind/dtype/shape_known differ", a->name), 0;
    if (a->shape_known) {
        if (!ir_shape_equal(&a->shape, &b->shape))
            return snprintf(why, n, "value %s: shape differs", a->name), 0;
        for (int i = 0; i < a->shape.rank; i++)
            if (!streq0(a->sym[i], b->sym[i]))
                return snprintf(why, n, "value %s: sym[%d] differs", a->name, i), 0;
    }
    if (a->kind != IR_VK_CONST && a->kind != IR_VK_PARAM) return 1;
    if (a->producer) return 1;
    if (a->has_ext) {
        if (!b->has_ext || !streq0(a->ext.path, b->ext.path) || a->ext.offset != b->ext.offset ||
            a->ext.length != b->ext.length)
            return snprintf(why, n, "value %s: ext ref differs", a->name), 0;
        return 1;
    }
    if (!a->data) return 1;
    int64_t numel = ir_shape_numel(&a->shape);
    int inline_ok = a->kind == IR_VK_CONST && numel >= 0 && numel <= o->max_inline_elems &&
                    ir_dtype_size(a->dtype) > 0 && a->dtype != IR_STRING;
    if (inline_ok) {
        if (!b->data || b->nbytes != a->nbytes || memcmp(a->data, b->data, a->nbytes) != 0)
            return snprintf(why, n, "value %s: inline data differs", a->name), 0;
    } else {
        if (!b->data_elided || b->nbytes != a->nbytes ||
            b->elided_hash != ir_fnv1a(a->data, a->nbytes))
            return snprintf(why, n, "value %s: elided size/hash differs", a->name), 0;
    }
    return 1;
}

static int attrs_match(const IrAttr *a, const IrAttr *b) {
    if (!streq0(a->name, b->name) || a->type != b->type) return 0;
    switch (a->type) {
    case IR_ATTR_INT: return a->i == b->i;
    case IR_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case IR_ATTR_STRING: return streq0(a->s, b->s);
    case IR_ATTR_INTS:
        return a->n == b->n && (a->n == 0 || memcmp(a->ints, b->ints, (size_t)a->n * 8) == 0);
    case IR_ATTR_FLOATS:
        return a->n == b->n && (a->n == 0 || memcmp(a->floats, b->floats, (size_t)a->n * 8) == 0);
    }
    return 0;
}

static const char *nm(const IrValue *v) { return v ? v->name : NULL; }

static int graphs_match(const IrGraph *a, const IrGraph *b, const IrPrintOptions *o, char *why,
                        size_t n) {
    if (!streq0(a->name, b->name) || a->opset != b->opset ||
        !streq0(a->model_path, b->model_path) || !streq0(a->model_dir, b->model_dir))
        return snprintf(why, n, "graph header differs"), 0;
    if (a->nvalues != b->nvalues)
        return snprintf(why, n, "value count %d vs %d", a->nvalues, b->nvalues), 0;
    for (int i = 0; i < a->nvalues; i++)
        if (!values_match(a->values[i], ir_graph_find_value(b, a->values[i]->name), o, why, n))
            return 0;
    if (a->ninputs != b->ninputs || a->noutputs != b->noutputs)
        return snprintf(why, n, "input/output counts differ"), 0;
    for (int i = 0; i < a->ninputs; i++)
        if (!streq0(nm(a->inputs[i]), nm(b->inputs[i])))
            return snprintf(why, n, "input %d differs", i), 0;
    for (int i = 0; i < a->noutputs; i++)
        if (!streq0(nm(a->outputs[i]), nm(b->outputs[i])) || !b->outputs[i]->is_graph_output)
            return snprintf(why, n, "output %d differs", i), 0;
    if (a->nnodes != b->nnodes) return snprintf(why, n, "node count differs"), 0;
    for (int i = 0; i < a->nnodes; i++) {
        const IrNode *x = a->nodes[i], *y = b->nodes[i];
        if (x->op != y->op || !streq0(x->name, y->name) || x->nin != y->nin || x->nout != y->nout ||
            x->phase != y->phase || x->module_id != y->module_id || x->layer_id != y->layer_id ||
            x->stage_id != y->stage_id || x->dead != y->dead || x->nattrs != y->nattrs)
            return snprintf(why, n, "node %d (%s) header differs", i, x->name), 0;
        for (int j = 0; j < x->nin; j++)
            if (!streq0(nm(x->in[j]), nm(y->in[j])))
                return snprintf(why, n, "node %d input %d", i, j), 0;
        for (int j = 0; j < x->nout; j++) {
            if (!streq0(nm(x->out[j]), nm(y->out[j])))
                return snprintf(why, n, "node %d output %d", i, j), 0;
            if (y->out[j] && (y->out[j]->producer != y || y->out[j]->producer_slot != j))
                return snprintf(why, n, "node %d output %d producer", i, j), 0;
        }
        for (int j = 0; j < x->nattrs; j++)
            if (!attrs_match(&x->attrs[j], &y->attrs[j]))
                return snprintf(why, n, "node %d attr %s differs", i, x->attrs[j].name), 0;
    }
    return 1;
}

/* print -> parse -> compare with the original -> print again: same text. */
static void check_round_trip(const IrGraph *g, int max_inline, const char *label) {
    IrPrintOptions o;
    ir_print_options_default(&o);
    if (max_inline >= 0) o.max_inline_elems = max_inline;
    char *t1 = ir_print_to_string(g, &o);
    CHECK(t1 != NULL);
    if (!t1) return;
    IrError err = {{0}};
    IrGraph *g2 = ir_parse(t1, label, &err);
    CHECK_MSG(g2 != NULL, "%s: %s\n%s", label, err.msg, t1);
    if (!g2) {
        free(t1);
        return;
    }
    char why[256] = "";
    CHECK_MSG(graphs_match(g, g2, &o, why, sizeof why), "%s: %s", label, why);
    char *t2 = ir_print_to_string(g2, &o);
    CHECK_MSG(t2 && strcmp(t1, t2) == 0, "%s: reprint differs:\n%s\n----\n%s", label, t1,
              t2 ? t2 : "");
    free(t1);
    free(t2);
    ir_graph_free(g2);
}

/* ------------------------------------------------------------ graphs */
static IrShape shp(int rank, int64_t a, int64_t b, int64_t c) {
    int64_t d[3] = {a, b, c};
    return ir_shape_make(rank, d);
}

static float f32_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static double f64_bits(uint64_t b) {
    double d;
    memcpy(&d, &b, 8);
    return d;
}

/* A graph touching every value kind, dtype, attribute type, annotation and
 * special float the text form has to carry. */
static IrGraph *build_everything(void) {
    IrGraph *g = ir_graph_new("every thing");
    g->opset = 17;
    g->model_path = ir_strdup("/models/m.onnx");
    g->model_dir = ir_strdup("/models");

    IrShape s_ids = shp(2, -1, 16, 0);
    IrValue *ids = ir_value_new(g, "input_ids", IR_I64, &s_ids, IR_VK_INPUT);
    ids->sym[0] = ir_strdup("batch");
    ids->sym[1] = ir_strdup("seq");
    ir_graph_add_input(g, ids);
    IrShape s_x = shp(3, 2, 16, 64);
    IrValue *x = ir_value_new(g, "onnx::MatMul_12", IR_F32, &s_x, IR_VK_INPUT);
    x->sym[2] = ir_strdup("_"); /* a dim really named "_" */
    ir_graph_add_input(g, x);
    IrValue *unk = ir_value_new(g, "x:", IR_UNDEF, NULL, IR_VK_INPUT); /* unknown dtype + shape */
    ir_graph_add_input(g, unk);

    IrShape s_wte = shp(2, 256, 64, 0);
    IrValue *wte = ir_value_new(g, "wte", IR_F32, &s_wte, IR_VK_PARAM);
    wte->has_ext = 1;
    wte->ext.path = ir_strdup("model.onnx.data");
    wte->ext.offset = 4096;
    wte->ext.length = 65536;
    IrShape s64 = shp(1, 64, 0, 0);
    float lnw[64];
    for (int i = 0; i < 64; i++)
        lnw[i] = 1.0f + (float)i / 64.0f;
    IrValue *ln_w = ir_const_new(g, "ln w \"q\"", IR_F32, &s64, lnw);
    ln_w->kind = IR_VK_PARAM; /* inline param: prints size + hash */
    IrShape s2 = shp(1, 2, 0, 0);
    float tiny[2] = {3, 4};
    IrValue *small_param = ir_const_new(g, "small_param", IR_F32, &s2, tiny);
    small_param->kind = IR_VK_PARAM; /* params never print inline, even small */
    IrValue *noinit = ir_value_new(g, "noinit", IR_F32, &s64, IR_VK_PARAM);
    (void)noinit;

    ir_const_scalar_f32(g, "c0", 0.5f);
    float sp[10] = {-0.0f,
                    INFINITY,
                    -INFINITY,
                    f32_bits(0x7fc00000u),
                    f32_bits(0x7fc00123u),
                    f32_bits(0xffc00000u),
                    f32_bits(1u) /* smallest denormal */,
                    FLT_MAX,
                    0.1f,
                    f32_bits(0x7f800001u) /* signalling NaN */};
    IrShape s10 = shp(1, 10, 0, 0);
    ir_const_new(g, "special_f32", IR_F32, &s10, sp);
    double dp[7] = {-0.0,
                    f64_bits(1),
                    DBL_MAX,
                    f64_bits(0x7ff0000000000abcULL),
                    0.1,
                    1.0 / 3,
                    f64_bits(0xfff8000000000000ULL)};
    IrShape s7 = shp(1, 7, 0, 0);
    ir_const_new(g, "special_f64", IR_F64, &s7, dp);
    uint16_t hp[8] = {0x0000, 0x8000, 0x0001, 0x3c00, 0x7c00, 0xfc00, 0x7e00, 0x7d01};
    IrShape s8 = shp(1, 8, 0, 0);
    ir_const_new(g, "halves", IR_F16, &s8, hp);
    uint16_t bp[6] = {0x3f80, 0x8000, 0x0001, 0x7f80, 0x7fc0, 0xffc1};
    IrShape s6 = shp(1, 6, 0, 0);
    ir_const_new(g, "bhalves", IR_BF16, &s6, bp);
    unsigned char bools[4] = {1, 0, 0, 1};
    IrShape s22 = shp(2, 2, 2, 0);
    ir_const_new(g, "flags", IR_BOOL, &s22, bools);
    int8_t i8[2] = {-128, 127};
    ir_const_new(g, "i8s", IR_I8, &s2, i8);
    uint8_t u8[2] = {0, 255};
    ir_const_new(g, "u8s", IR_U8, &s2, u8);
    int16_t i16[2] = {-32768, 32767};
    ir_const_new(g, "i16s", IR_I16, &s2, i16);
    uint16_t u16[2] = {0, 65535};
    ir_const_new(g, "u16s", IR_U16, &s2, u16);
    int32_t i32[2] = {INT32_MIN, INT32_MAX};
    ir_const_new(g, "i32s", IR_I32, &s2, i32);
    uint32_t u32[2] = {0, UINT32_MAX};
    ir_const_new(g, "u32s", IR_U32, &s2, u32);
    int64_t i64[3] = {INT64_MIN, -1, INT64_MAX};
    IrValue *shape_c = ir_const_i64s(g, "shape", 3, i64);
    uint64_t u64[2] = {0, UINT64_MAX};
    ir_const_new(g, "u64s", IR_U64, &s2, u64);
    IrShape s0 = shp(1, 0, 0, 0);
    ir_const_new(g, "empty", IR_F32, &s0, NULL);
    float big[32];
    for (int i = 0; i < 32; i++)
        big[i] = (float)i * 0.25f;
    IrShape s32 = shp(1, 32, 0, 0);
    ir_const_new(g, "big", IR_F32, &s32, big);
    unsigned char mask[256];
    for (int i = 0; i < 256; i++)
        mask[i] = (unsigned char)((i % 16) <= (i / 16));
    IrShape s1616 = shp(2, 16, 16, 0);
    ir_const_new(g, "mask", IR_BOOL, &s1616, mask);
    IrShape s1 = shp(1, 1, 0, 0);
    ir_const_new(g, "strs", IR_STRING, &s1, NULL);

    /* nodes */
    IrValue *h = ir_value_new(g, "h", IR_F32, &s_x, IR_VK_ACT);
    IrValue *h2 = ir_value_new(g, "h2", IR_F32, &s_x, IR_VK_ACT);
    IrValue *sizes = ir_const_i64s(g, "sizes", 2, (int64_t[]){32, 32});
    IrValue *split_in[2] = {x, sizes}, *split_out[2] = {h, h2};
    IrNode *sp_n = ir_node_new(g, IR_OP_SPLIT, "/blk/Split", 2, split_in, 2, split_out);
    ir_node_set_int(sp_n, "axis", -1);
    sp_n->module_id = 0;
    sp_n->layer_id = 3;
    sp_n->stage_id = 1;

    IrValue *cl = ir_value_new(g, "clipped", IR_F32, &s_x, IR_VK_ACT);
    IrValue *c0 = ir_graph_find_value(g, "c0");
    IrValue *clip_in[3] = {h, NULL, c0};
    IrNode *clip = ir_node_new(g, IR_OP_CLIP, "", 3, clip_in, 1, &cl);
    (void)clip;

    IrValue *dr = ir_value_new(g, "dropped", IR_F32, &s_x, IR_VK_ACT);
    IrValue *dr_out[2] = {dr, NULL};
    IrNode *drop = ir_node_new(g, IR_OP_DROPOUT, "drop\nout", 1, &cl, 2, dr_out);
    ir_node_set_float(drop, "ratio", 0.1);
    ir_node_set_float(drop, "one", 1.0);
    ir_node_set_float(drop, "negzero", -0.0);
    ir_node_set_float(drop, "inf", -INFINITY);
    ir_node_set_float(drop, "nan", f64_bits(0x7ff8000000000001ULL));
    ir_node_set_float(drop, "eps", (double)1e-5f);
    ir_node_set_string(drop, "mode", "a \"quoted\"\\ string\twith\x01 ctl and UTF-8 \xc3\xa9");
    ir_node_set_string(drop, "empty", "");
    ir_node_set_ints(drop, "perm", 4, (int64_t[]){0, 2, 1, 3});
    ir_node_set_ints(drop, "extremes", 2, (int64_t[]){INT64_MIN, INT64_MAX});
    ir_node_set_ints(drop, "none", 0, NULL);
    ir_node_set_floats(drop, "scales", 3, (double[]){1.0, 2.5, -0.0});
    ir_node_set_floats(drop, "nofloats", 0, NULL);
    ir_node_set_int(drop, "weird name!", 7);

    IrShape s_l = shp(3, -1, 16, 64);
    IrValue *grad = ir_value_new(g, "grad/h", IR_F32, &s_l, IR_VK_GRAD);
    grad->sym[0] = ir_strdup("batch size");
    IrValue *mm_in[2] = {dr, h2};
    IrNode *mul = ir_node_new(g, IR_OP_MUL, "bwd \"mul\"", 2, mm_in, 1, &grad);
    mul->phase = IR_PHASE_BWD;
    mul->stage_id = 2;

    IrValue *m = ir_value_new(g, "adam.m", IR_F32, &s_x, IR_VK_OPTSTATE);
    IrNode *upd = ir_node_new(g, IR_OP_ADD, "upd", 2, (IrValue *[]){grad, h}, 1, &m);
    upd->phase = IR_PHASE_UPD;
    upd->module_id = 7;

    IrValue *un = ir_value_new(g, "unknown_shape", IR_F32, NULL, IR_VK_ACT);
    ir_node_new(g, IR_OP_RELU, "relu", 1, &m, 1, &un);
    IrValue *cat = ir_value_new(g, "cat", IR_F32, NULL, IR_VK_ACT);
    ir_node_new(g, IR_OP_CONCAT, "variadic", 4, (IrValue *[]){x, h, h2, dr}, 1, &cat);
    IrValue *rs = ir_value_new(g, "rs", IR_I64, NULL, IR_VK_ACT);
    ir_node_new(g, IR_OP_RESHAPE, "r", 2, (IrValue *[]){ids, shape_c}, 1, &rs);
    IrValue *emb = ir_value_new(g, "emb", IR_F32, NULL, IR_VK_ACT);
    ir_node_new(g, IR_OP_EMBEDDING, "e", 2, (IrValue *[]){wte, ids}, 1, &emb);

    ir_graph_add_output(g, m);
    ir_graph_add_output(g, un);
    ir_graph_add_output(g, emb);
    ir_graph_add_output(g, ln_w);
    return g;
}

static void test_round_trips(void) {
    IrGraph *g = build_everything();
    IrError err = {{0}};
    CHECK_MSG(ir_verify(g, 0, &err) == 0, "%s", err.msg);
    check_round_trip(g, -1, "everything");
    check_round_trip(g, 0, "everything-inline0");
    check_round_trip(g, 1000, "everything-inline1000");

    /* dead nodes and unverifiable graphs still print and read back */
    g->nodes[1]->dead = 1;
    check_round_trip(g, -1, "everything-dead");
    ir_graph_free(g);

    IrGraph *e = ir_graph_new("");
    check_round_trip(e, -1, "empty graph");
    ir_graph_free(e);

    /* a node without outputs and a value used before its producer */
    IrGraph *f = ir_graph_new("fwdref");
    IrShape s = shp(1, 4, 0, 0);
    IrValue *a = ir_value_new(f, "a", IR_F32, &s, IR_VK_INPUT);
    ir_graph_add_input(f, a);
    IrValue *b = ir_value_new(f, "b", IR_F32, &s, IR_VK_ACT);
    IrValue *c = ir_value_new(f, "c", IR_F32, &s, IR_VK_ACT);
    ir_node_new(f, IR_OP_ADD, "uses_b_first", 2, (IrValue *[]){a, b}, 1, &c);
    ir_node_new(f, IR_OP_NEG, "makes_b", 1, &a, 1, &b);
    ir_node_new(f, IR_OP_IDENTITY, "no_outputs", 1, &c, 0, NULL);
    ir_graph_add_output(f, c);
    check_round_trip(f, -1, "forward reference");
    ir_graph_free(f);

    /* the fused optimizer step: three outputs, optional 7th input, double
     * attrs that must read back to the bit (the kernel rounds 1 - beta1) */
    IrGraph *o = ir_graph_new("adamw");
    IrShape ps = shp(2, 3, 4, 0), s0 = {0};
    IrValue *P = ir_value_new(o, "w", IR_F32, &ps, IR_VK_PARAM);
    IrValue *om = ir_value_new(o, "opt/m/w", IR_F32, &ps, IR_VK_OPTSTATE);
    IrValue *ov = ir_value_new(o, "opt/v/w", IR_F32, &ps, IR_VK_OPTSTATE);
    IrValue *G = ir_value_new(o, "grad/w", IR_F32, &ps, IR_VK_INPUT);
    IrValue *lr = ir_value_new(o, "lr", IR_F32, &s0, IR_VK_INPUT);
    IrValue *st = ir_value_new(o, "step", IR_I64, &s0, IR_VK_INPUT);
    IrValue *cs = ir_value_new(o, "clip_scale", IR_F32, &s0, IR_VK_INPUT);
    ir_graph_add_input(o, G), ir_graph_add_input(o, lr), ir_graph_add_input(o, st);
    ir_graph_add_input(o, cs);
    IrValue *outs[3] = {ir_value_new(o, "upd/w", IR_F32, &ps, IR_VK_ACT),
                        ir_value_new(o, "upd/m/w", IR_F32, &ps, IR_VK_OPTSTATE),
                        ir_value_new(o, "upd/v/w", IR_F32, &ps, IR_VK_OPTSTATE)};
    IrNode *an = ir_node_new(o, IR_OP_ADAMW, "", 7, (IrValue *[]){P, om, ov, G, lr, st, cs}, 3,
                             outs);
    an->phase = IR_PHASE_UPD;
    ir_node_set_float(an, "beta1", 0.9);
    ir_node_set_float(an, "beta2", 0.95);
    ir_node_set_float(an, "eps", 1e-8);
    ir_node_set_float(an, "weight_decay", 0.1);
    for (int i = 0; i < 3; i++) ir_graph_add_output(o, outs[i]);
    check_round_trip(o, -1, "adamw");
    ir_graph_free(o);
}

/* Every float32 bit pattern class reads back bit-exactly from its text. */
static void test_float_bits(void) {
    unsigned long long seed = 42;
    IrGraph *g = ir_graph_new("floats");
    enum { N = 512 };
    uint32_t bits[N];
    uint64_t dbits[N];
    uint16_t hbits[N];
    for (int i = 0; i < N; i++) {
        unsigned long long r = test_rand(&seed);
        bits[i] = (uint32_t)r;
        dbits[i] = (uint64_t)test_rand(&seed);
        hbits[i] = (uint16_t)(r >> 40);
    }
    IrShape s = shp(1, N, 0, 0);
    ir_const_new(g, "f", IR_F32, &s, bits);
    ir_const_new(g, "d", IR_F64, &s, dbits);
    ir_const_new(g, "h", IR_F16, &s, hbits);
    ir_const_new(g, "b", IR_BF16, &s, hbits);
    check_round_trip(g, N, "random float bits");
    ir_graph_free(g);
}

/* ------------------------------------------------------------ golden */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            buf = realloc(buf, cap);
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    fclose(f);
    buf[len] = 0;
    return buf;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* X.ir must print as itself; X.in.ir must print as X.out.ir. */
static void test_golden(const char *dir) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open golden dir %s", dir);
    if (!d) return;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *fn = e->d_name;
        if (!ends_with(fn, ".ir") || ends_with(fn, ".out.ir")) continue;
        char path[1024], want_path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, fn);
        if (ends_with(fn, ".in.ir")) {
            snprintf(want_path, sizeof want_path, "%s/%.*s.out.ir", dir, (int)(strlen(fn) - 6), fn);
        } else {
            snprintf(want_path, sizeof want_path, "%s", path);
        }
        char *text = read_file(path), *want = read_file(want_path);
        CHECK_MSG(text && want, "cannot read %s / %s", path, want_path);
        if (text && want) {
            IrError err = {{0}};
            IrGraph *g = ir_parse(text, fn, &err);
            CHECK_MSG(g != NULL, "%s", err.msg);
            if (g) {
                char *out = ir_print_to_string(g, NULL);
                CHECK_MSG(out && strcmp(out, want) == 0, "%s does not print as %s:\n%s", path,
                          want_path, out ? out : "");
                /* golden graphs are well formed, with static shapes */
                CHECK_MSG(ir_verify(g, 1, &err) == 0, "%s: %s", fn, err.msg);
                free(out);
                ir_graph_free(g);
            }
            count++;
        }
        free(text);
        free(want);
    }
    closedir(d);
    CHECK_MSG(count >= 3, "only %d golden files found in %s", count, dir);
}

/* ------------------------------------------------------------ errors */
/* Parse `text`; it must fail with "t.ir:L:C:" where L:C is where `at`
 * first occurs in the text (NULL: the end of the text), and the message
 * must contain `what`. */
static void expect_parse_error(const char *text, const char *at, const char *what) {
    IrError err = {{0}};
    IrGraph *g = ir_parse(text, "t.ir", &err);
    CHECK_MSG(g == NULL, "parse should fail: %s", text);
    ir_graph_free(g);
    const char *p = at ? strstr(text, at) : text + strlen(text);
    CHECK_MSG(p != NULL, "bad test: '%s' not in text", at);
    if (!p) return;
    int line = 1, col = 1;
    for (const char *q = text; q < p; q++) {
        if (*q == '\n')
            line++, col = 1;
        else
            col++;
    }
    char pre[64];
    snprintf(pre, sizeof pre, "t.ir:%d:%d: ", line, col);
    CHECK_MSG(strncmp(err.msg, pre, strlen(pre)) == 0, "want prefix '%s', got '%s'", pre, err.msg);
    CHECK_MSG(strstr(err.msg, what) != NULL, "want '%s' in '%s'", what, err.msg);
}

static void test_parse_errors(void) {
    expect_parse_error("", "", "expected 'graph'");
    expect_parse_error("graf g {\n}\n", "graf", "expected 'graph'");
    expect_parse_error("graph g opset=x {\n}\n", "x {", "expected");
    expect_parse_error("graph g {\n  input %a : f33[2]\n}\n", "f33", "dtype");
    expect_parse_error("graph g {\n  input %a : f32[2,-1]\n}\n", "-1", "dim");
    expect_parse_error("graph g {\n  input %a : f32[1,1,1,1,1,1,1,1,1]\n}\n", "1]", "more than 8");
    expect_parse_error("graph g {\n  input %a : f32[2]\n  input %a : f32[2]\n}\n", "a : f32[2]\n}",
                       "defined twice");
    expect_parse_error(
        "graph g {\n  input %a : f32[2]\n  %b = Add(%a, %zz) : f32[2]\n  output %b\n}\n", "%zz",
        "never defined");
    expect_parse_error("graph g {\n  input %a : f32[2]\n  %b = Frobnicate(%a) : f32[2]\n}\n",
                       "Frobnicate", "unknown op");
    expect_parse_error("graph g {\n  input %a : f32[2]\n  %b = Neg(%a : f32[2]\n}\n", ": f32[2]\n}",
                       "expected ',' or ')'");
    expect_parse_error("graph g {\n  input %a : f32[2]\n  %b = Neg(%a) {k=\"x} : f32[2]\n}\n",
                       "\"x}", "unterminated string");
    expect_parse_error("graph g {\n  const %c : f32[2] = dense[1, 2, 3]\n}\n", "3]", "more than");
    expect_parse_error("graph g {\n  const %c : f32[3] = dense[1, 2]\n}\n", "dense", "2 elements");
    expect_parse_error("graph g {\n  const %c : i8[1] = dense[200]\n}\n", "200", "out of range");
    expect_parse_error("graph g {\n  const %c : i32[1] = dense[1.5]\n}\n", "1.5", "integer");
    expect_parse_error("graph g {\n  const %c : f32[1] = dense[nan(0x3f800000)]\n}\n", "nan(",
                       "not a f32 NaN");
    expect_parse_error("graph g {\n  input %a : f32[2] = dense[1, 2]\n}\n", "dense", "initializer");
    expect_parse_error("graph g {\n  input %a : f32[2]\n  %b = Neg(%a) : f32[2] @sideways\n}\n",
                       "@sideways", "@fwd, @bwd or @upd");
    expect_parse_error(
        "graph g {\n  input %a : f32[2]\n  %b = Neg(%a) : f32[2] stage=1 stage=2\n}\n", "stage=2",
        "duplicate annotation");
    expect_parse_error("graph g {\n  input %a : f32[2]\n  %b, %c = Neg(%a) : f32[2]\n}\n", "\n}",
                       "',' and the next output type");
    expect_parse_error("graph g {\n  input %a : f32[2]\n  %b = Neg(%a) {k=1, k=2} : f32[2]\n}\n",
                       "k=2", "duplicate attribute");
    expect_parse_error("graph g {\n  input %a : f32[2]\n", NULL, "expected '}'");
    expect_parse_error("graph g {\n}\njunk\n", "junk", "end of input");
    expect_parse_error("graph g {\n  param %w : f32[2] = ext(\"f\", -1, 8)\n}\n", "-1", "offset");
    expect_parse_error("graph g {\n  input %a : f32[2,3] sym=[x]\n}\n", "]\n}",
                       "1 names for 2 dims");
    expect_parse_error("graph g {\n  input %a : f32[99999999,99999999]\n}\n", "]\n", "2^50");
    expect_parse_error("graph g {\n  input %\"\" : f32[2]\n}\n", "\"\"", "empty value name");
}

/* ------------------------------------------------------------ robustness */
/* Every prefix and many random mutations of a valid text either parse
 * (and then round-trip) or fail with a located message; never crash. */
static void check_text_robust(const char *text, size_t len) {
    char *buf = malloc(len + 1);
    memcpy(buf, text, len);
    buf[len] = 0;
    IrError err = {{0}};
    IrGraph *g = ir_parse(buf, "m.ir", &err);
    if (!g) {
        CHECK_MSG(strncmp(err.msg, "m.ir:", 5) == 0, "unlocated error: %s", err.msg);
    } else {
        char *t1 = ir_print_to_string(g, NULL);
        IrGraph *g2 = t1 ? ir_parse(t1, "m2.ir", &err) : NULL;
        CHECK_MSG(g2 != NULL, "printed text does not parse: %s\n%s", err.msg, t1 ? t1 : "");
        char *t2 = g2 ? ir_print_to_string(g2, NULL) : NULL;
        CHECK(t1 && t2 && strcmp(t1, t2) == 0);
        free(t1);
        free(t2);
        ir_graph_free(g2);
        ir_graph_free(g);
    }
    free(buf);
}

static void test_robustness(void) {
    IrGraph *g = build_everything();
    char *text = ir_print_to_string(g, NULL);
    ir_graph_free(g);
    size_t len = strlen(text);
    for (size_t i = 0; i <= len; i += 3)
        check_text_robust(text, i);
    unsigned long long seed = 7;
    const char alphabet[] = "%_\"\\[](){},:=@#?-.0123456789e\n x";
    char *mut = malloc(len + 1);
    for (int round = 0; round < 1500; round++) {
        memcpy(mut, text, len + 1);
        int edits = 1 + (int)(test_rand(&seed) % 4);
        for (int k = 0; k < edits; k++) {
            size_t pos = (size_t)(test_rand(&seed) % len);
            unsigned long long r = test_rand(&seed);
            mut[pos] = (r & 1) ? alphabet[(r >> 8) % (sizeof alphabet - 1)] : (char)((r >> 16) | 1);
        }
        check_text_robust(mut, len);
    }
    free(mut);
    free(text);
}

void test_text(const char *golden_dir) {
    test_round_trips();
    test_float_bits();
    test_golden(golden_dir);
    test_parse_errors();
    test_robustness();
}
