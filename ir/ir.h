/* hetc IR: an SSA-like graph of values and nodes (DESIGN.md §3).
 *
 * Ownership: an IrGraph owns every IrValue and IrNode created through it,
 * every string given to it (copied), and constant data it was handed (copied)
 * or that it mapped (external data, unmapped on free).  Pointers to values and
 * nodes stay valid until ir_graph_free or ir_graph_compact (which frees nodes
 * marked dead and values no longer referenced).
 *
 * Errors: functions that can fail return 0 on success and -1 on failure, with
 * a message in the caller's IrError naming the file / node / value involved.
 * ir/ uses no other hetc folder.
 */
#ifndef HETC_IR_H
#define HETC_IR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAX_RANK 8

/* ---------------------------------------------------------------- errors */
typedef struct IrError {
    char msg[2048];
} IrError;

/* Format into err (if non-NULL); always returns -1 so callers can
 * `return ir_errorf(err, "...")`. */
int ir_errorf(IrError *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix an existing message with more context ("while importing X: ..."). */
int ir_error_prefix(IrError *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "WHAT stage S: msg", or "WHAT: msg" when msg already names stage S
 * (callees name their stage; callers that added it again made "stage 0:
 * stage 0:").  what may be NULL (then msg stays as it is if it names S). */
int ir_error_prefix_stage(IrError *err, const char *what, int stage);

/* ---------------------------------------------------------------- dtypes */
/* Numbered as ONNX TensorProto.DataType so import/export is the identity. */
typedef enum IrDType {
    IR_UNDEF = 0,
    IR_F32 = 1,
    IR_U8 = 2,
    IR_I8 = 3,
    IR_U16 = 4,
    IR_I16 = 5,
    IR_I32 = 6,
    IR_I64 = 7,
    IR_STRING = 8,
    IR_BOOL = 9,
    IR_F16 = 10,
    IR_F64 = 11,
    IR_U32 = 12,
    IR_U64 = 13,
    IR_BF16 = 16,
} IrDType;

size_t ir_dtype_size(IrDType t);            /* bytes per element; 0 if unknown */
const char *ir_dtype_name(IrDType t);       /* "f32", "i64", "bool", ... */
IrDType ir_dtype_from_name(const char *s);  /* inverse; IR_UNDEF if unknown */
int ir_dtype_is_float(IrDType t);

/* ---------------------------------------------------------------- shapes */
/* dims[i] >= 0 is a known extent.  Before symbolic dims are bound, an
 * unknown extent is -1 and sym[i] (in IrValue) holds its ONNX dim_param. */
typedef struct IrShape {
    int rank;
    int64_t dims[IR_MAX_RANK];
} IrShape;

int64_t ir_shape_numel(const IrShape *s); /* -1 if any dim unknown; 1 for rank 0 */
int ir_shape_equal(const IrShape *a, const IrShape *b);
int ir_shape_is_static(const IrShape *s);
IrShape ir_shape_make(int rank, const int64_t *dims);
/* "[2,16,64]" into buf; returns buf */
char *ir_shape_str(const IrShape *s, char *buf, size_t len);

/* ---------------------------------------------------------------- values */
typedef enum IrValueKind {
    IR_VK_INPUT = 0,    /* graph input fed at run time */
    IR_VK_PARAM,        /* trainable parameter (ONNX initializer) */
    IR_VK_CONST,        /* compile-time constant with data */
    IR_VK_ACT,          /* activation produced by a node */
    IR_VK_GRAD,         /* gradient (training graph) */
    IR_VK_OPTSTATE,     /* optimizer state (training graph) */
    IR_VK_COUNT
} IrValueKind;
const char *ir_value_kind_name(IrValueKind k); /* "input","param","const","act","grad","optstate" */

/* Where a parameter's bytes live on disk when they are not in memory. */
typedef struct IrExtRef {
    char *path;      /* absolute or model-dir-relative, already validated */
    int64_t offset;
    int64_t length;
} IrExtRef;

struct IrNode;

typedef struct IrValue {
    int id;                 /* index in graph->values at creation; stable */
    char *name;             /* unique within the graph */
    IrDType dtype;
    IrShape shape;
    int shape_known;        /* 0 until the importer or shape-infer sets it */
    char *sym[IR_MAX_RANK]; /* symbolic dim names (NULL = none); owned */
    IrValueKind kind;

    struct IrNode *producer; /* NULL for inputs, params, consts */
    int producer_slot;

    /* Data, for IR_VK_CONST (always) and IR_VK_PARAM (inline or external).
     * Read it with ir_value_data(), which maps external data lazily. */
    void *data;
    size_t nbytes;
    int data_owned;         /* 1: free(data); 0: borrowed or mmapped */
    int has_ext;
    IrExtRef ext;
    void *map_base;         /* page-aligned mapping for ext data */
    size_t map_len;
    uint64_t elided_hash;   /* set by the parser when data was elided in text */
    int data_elided;

    int is_graph_output;
} IrValue;

/* ---------------------------------------------------------------- ops */
typedef enum IrOp {
#define OP(e, name, mini, maxi, mino, maxo, flags) IR_OP_##e,
#include "ops.def"
#undef OP
    IR_OP_COUNT
} IrOp;

/* Op properties, the last column of ops.def (written F_X there; what each
 * means and which pass reads it is documented at the top of ops.def).
 * Passes test these instead of lists of ops, so a new op is table rows. */
typedef enum IrOpFlag {
    IR_OPF_ARITH = 1u << 0,
    IR_OPF_ACTIVATION = 1u << 1,
    IR_OPF_TP_SPLITTABLE = 1u << 2,
    IR_OPF_AUX_INPUTS = 1u << 3,
    IR_OPF_MOVES_IN0 = 1u << 4,
    IR_OPF_GRAD_SINK = 1u << 5,
    IR_OPF_VIEW = 1u << 6,
    IR_OPF_RECOMPUTE_CHEAP = 1u << 7,
    IR_OPF_OPT_OUTS = 1u << 8,
} IrOpFlag;

typedef struct IrOpInfo {
    const char *name;
    int min_inputs, max_inputs;   /* max -1 = variadic */
    int min_outputs, max_outputs;
    unsigned flags;               /* IrOpFlag bits */
} IrOpInfo;

const IrOpInfo *ir_op_info(IrOp op);
const char *ir_op_name(IrOp op);
/* 1 if op has any of the IrOpFlag bits in flags (0 for an invalid op) */
int ir_op_has(IrOp op, unsigned flags);
int ir_op_from_name(const char *name); /* IrOp, or -1 */

/* ---------------------------------------------------------------- attrs */
typedef enum IrAttrType {
    IR_ATTR_INT = 0,
    IR_ATTR_FLOAT,
    IR_ATTR_STRING,
    IR_ATTR_INTS,
    IR_ATTR_FLOATS,
} IrAttrType;

typedef struct IrAttr {
    char *name;
    IrAttrType type;
    int64_t i;
    double f;
    char *s;
    int64_t *ints;
    double *floats;
    int n;              /* length of ints / floats */
} IrAttr;

/* ---------------------------------------------------------------- nodes */
typedef enum IrPhase {
    IR_PHASE_FWD = 0,
    IR_PHASE_BWD,
    IR_PHASE_UPD,
} IrPhase;
const char *ir_phase_name(IrPhase p); /* "fwd","bwd","upd" */

typedef struct IrNode {
    int id;               /* stable creation index */
    IrOp op;
    char *name;           /* ONNX node name or generated; may be "" but not NULL */
    int nin, nout;
    IrValue **in;         /* in[i] may be NULL: omitted optional input */
    IrValue **out;
    IrAttr *attrs;
    int nattrs;

    /* annotations added by passes; -1 = not set */
    int module_id, layer_id, stage_id;
    IrPhase phase;

    int dead;             /* marked for removal by ir_graph_compact */
} IrNode;

/* ---------------------------------------------------------------- graph */
typedef struct IrGraph {
    char *name;
    char *model_path;     /* the .onnx file this came from (may be NULL) */
    char *model_dir;      /* its directory, for external data */
    int64_t opset;        /* default-domain opset of the source model */

    IrValue **values;
    int nvalues, values_cap;
    IrNode **nodes;       /* topological order is maintained by passes */
    int nnodes, nodes_cap;

    IrValue **inputs;     /* IR_VK_INPUT values in declaration order */
    int ninputs, inputs_cap;
    IrValue **outputs;    /* graph outputs in declaration order */
    int noutputs, outputs_cap;

    int next_auto_name;   /* counter for generated names */
    int next_node_id;     /* node ids are unique over the graph's life */

    /* name -> value index (open addressing, owned; rebuilt on compact).
     * Keeps ir_value_new and ir_graph_find_value O(1) on graphs with
     * hundreds of thousands of values. */
    IrValue **name_slots;
    int name_cap;         /* power of two, or 0 */
    int name_used;
} IrGraph;

IrGraph *ir_graph_new(const char *name);
void ir_graph_free(IrGraph *g);

/* Create a value.  name may be NULL: a fresh "%tN" name is generated.  If a
 * value of that name exists, a suffix is appended to keep names unique.
 * shape may be NULL (unknown). */
IrValue *ir_value_new(IrGraph *g, const char *name, IrDType dt,
                      const IrShape *shape, IrValueKind kind);
IrValue *ir_graph_find_value(const IrGraph *g, const char *name);

/* A constant whose data is copied from `data` (nbytes = numel * dtype size). */
IrValue *ir_const_new(IrGraph *g, const char *name, IrDType dt,
                      const IrShape *shape, const void *data);
IrValue *ir_const_scalar_f32(IrGraph *g, const char *name, float v);
IrValue *ir_const_i64s(IrGraph *g, const char *name, int n, const int64_t *v); /* 1-D */

/* Give v owned data (takes ownership of `data`, allocated with malloc). */
void ir_value_set_data(IrValue *v, void *data, size_t nbytes);
/* Bytes of v's tensor from its shape and dtype; 0 while a dim is unknown. */
size_t ir_value_bytes(const IrValue *v);

/* Bytes of a CONST or PARAM value; maps external data on first use.
 * NULL with err set if there is none or mapping failed. */
const void *ir_value_data(IrValue *v, IrError *err);
int ir_value_has_data(const IrValue *v); /* inline data or external ref */

/* Create a node, append it to g->nodes, and set out[i]->producer.
 * in/out arrays are copied. */
IrNode *ir_node_new(IrGraph *g, IrOp op, const char *name,
                    int nin, IrValue *const *in, int nout, IrValue *const *out);
/* Insert a node at position pos of g->nodes (same contract otherwise). */
IrNode *ir_node_insert(IrGraph *g, int pos, IrOp op, const char *name,
                       int nin, IrValue *const *in, int nout, IrValue *const *out);
int ir_node_index(const IrGraph *g, const IrNode *n); /* -1 if absent */

/* attributes: setters replace an existing attribute of the same name */
void ir_node_set_int(IrNode *n, const char *name, int64_t v);
void ir_node_set_float(IrNode *n, const char *name, double v);
void ir_node_set_string(IrNode *n, const char *name, const char *v);
void ir_node_set_ints(IrNode *n, const char *name, int cnt, const int64_t *v);
void ir_node_set_floats(IrNode *n, const char *name, int cnt, const double *v);
const IrAttr *ir_node_attr(const IrNode *n, const char *name);
int64_t ir_attr_int(const IrNode *n, const char *name, int64_t dflt);
double ir_attr_float(const IrNode *n, const char *name, double dflt);
/* [start, end) of a Shape node's attrs for an input of rank `rank`, clamped
 * as ONNX 15 says (shape rule, const-fold, host executor, stage lowering) */
void ir_shape_op_range(const IrNode *n, int rank, int *start, int *end);
/* One axis of an ONNX Slice (ir/slice.c): an axis of length dim read from
 * start s to end e by step k (k != 0); returns the elements read and sets
 * *first to the first index.  Negative s and e count from the end, then
 * clamp to [0, dim] (k > 0) or [-1, dim - 1] (k < 0).  The executors and
 * the stage lowering (Slice, SliceGrad) all resolve a slice with it. */
int64_t ir_slice_axis(int64_t dim, int64_t s, int64_t e, int64_t k, int64_t *first);
const char *ir_attr_string(const IrNode *n, const char *name, const char *dflt);
/* returns count (0 if absent) and sets *v */
int ir_attr_ints(const IrNode *n, const char *name, const int64_t **v);

void ir_graph_add_input(IrGraph *g, IrValue *v);
void ir_graph_add_output(IrGraph *g, IrValue *v);

/* Rewrite every use of `from` (node inputs and graph outputs) to `to`. */
void ir_replace_uses(IrGraph *g, IrValue *from, IrValue *to);
int ir_value_num_uses(const IrGraph *g, const IrValue *v); /* node inputs + outputs list */
/* Mark a node dead (removed at next compact). */
void ir_node_kill(IrNode *n);
/* Free dead nodes and values that are neither used, produced by a live node,
 * graph inputs nor graph outputs. */
void ir_graph_compact(IrGraph *g);

/* Reorder g->nodes topologically (stable: keeps existing order where legal).
 * Fails naming a node on the cycle if the graph is cyclic. */
int ir_graph_toposort(IrGraph *g, IrError *err);

/* Structural checks (ir/verify.c): unique names, every input defined before
 * use, producers consistent, arities within the op table, shapes known and
 * static when require_shapes, dtype/data sizes consistent. */
int ir_verify(const IrGraph *g, int require_shapes, IrError *err);

/* Text form (ir/print.c, ir/parse.c).  print(parse(print(g))) == print(g). */
typedef struct IrPrintOptions {
    int max_inline_elems;   /* constants up to this many elements print their
                               values; larger ones print a size + hash */
} IrPrintOptions;
void ir_print_options_default(IrPrintOptions *o);
int ir_print(const IrGraph *g, FILE *f, const IrPrintOptions *o);
char *ir_print_to_string(const IrGraph *g, const IrPrintOptions *o); /* malloc'd */
IrGraph *ir_parse(const char *text, const char *filename, IrError *err);

/* ---------------------------------------------------------------- tensors */
/* A free-standing tensor: graph inputs/outputs of `hetc run`, .npy/.pb I/O. */
typedef struct IrTensor {
    char *name;           /* owned, may be NULL */
    IrDType dtype;
    IrShape shape;
    void *data;           /* owned (malloc) */
    size_t nbytes;
} IrTensor;
void ir_tensor_free(IrTensor *t); /* frees members and t itself */
IrTensor *ir_tensor_new(const char *name, IrDType dt, const IrShape *shape); /* zeroed */

/* ---------------------------------------------------------------- misc */
char *ir_strdup(const char *s);
void *ir_xmalloc(size_t n);   /* abort with a message on OOM */
void *ir_xcalloc(size_t n, size_t m);
void *ir_xrealloc(void *p, size_t n);
uint64_t ir_fnv1a(const void *data, size_t n);

#endif
