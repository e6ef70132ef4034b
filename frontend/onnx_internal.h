/* Frontend internals shared by the importer, the op table and tensor I/O.
 * Not a public header: only the frontend sources include it. */
#ifndef HETC_ONNX_INTERNAL_H
#define HETC_ONNX_INTERNAL_H

#include "onnx.pb-c.h"
#include "onnx_import.h"

/* The newest default-domain opset the op table was checked against
 * (onnx 1.23.2, the version onnx.proto is vendored from). */
#define HETC_ONNX_MAX_OPSET 28
/* IR versions: 3 introduced opset_import; 14 is onnx 1.23.2's IR_VERSION. */
#define HETC_ONNX_MIN_IR_VERSION 3
#define HETC_ONNX_MAX_IR_VERSION 14

/* ---------------------------------------------------------- onnx_tensor.c */
/* ONNX TensorProto.DataType name ("FLOAT", "INT64", "FLOAT8E4M3FN"...). */
const char *onnx_dtype_name(int32_t dt);
/* ONNX dtype number -> IrDType, or -1 with err naming `what` if hetc has no
 * such dtype (strings, complex, float8, int4, ...). */
int onnx_dtype_to_ir(int32_t dt, const char *what, IrError *err);
/* Map an old-style (opset 1 Cast) dtype string like "FLOAT" to its number;
 * -1 if unknown. */
int onnx_dtype_from_string(const char *s);

/* Shape of a tensor proto; rejects negative dims and rank > IR_MAX_RANK. */
int onnx_tensor_shape(const Onnx__TensorProto *t, IrShape *s, const char *what, IrError *err);
/* Element count of s with overflow checking; -1 with err on overflow. */
int64_t onnx_checked_numel(const IrShape *s, size_t elem, const char *what, IrError *err);
/* Decode the inline data of t (raw_data or the typed field ONNX uses for
 * dt) into a malloc'd little-endian buffer of numel * size bytes.
 * External data is rejected here (the importer handles it). */
int onnx_tensor_inline_data(const Onnx__TensorProto *t, IrDType dt, int64_t numel,
                            void **data, size_t *nbytes, const char *what, IrError *err);
/* Convert element 0 of a decoded buffer of dtype dt to double. */
double onnx_elem_as_double(const void *data, IrDType dt);
/* Round-to-nearest-even conversions for half-precision constants. */
uint16_t onnx_f32_to_f16(float f);
uint16_t onnx_f32_to_bf16(float f);

/* ------------------------------------------------------ onnx_import.c */
/* String -> pointer hash map (open addressing) for ONNX names. */
typedef struct NameMap {
    char **keys;
    void **vals;
    size_t cap, n;
} NameMap;
void *namemap_get(const NameMap *m, const char *key);
void namemap_put(NameMap *m, const char *key, void *val); /* replaces */
void namemap_free(NameMap *m);

typedef struct ImportCtx {
    IrGraph *g;
    const char *file;        /* model file (or "<buffer>") for messages */
    const char *model_dir;   /* directory external data is resolved under; may be NULL */
    int64_t opset;           /* default-domain opset */
    const HetcImportOptions *opt;
    NameMap values;          /* ONNX value name -> IrValue* */
    NameMap used;            /* names read by a node input or a graph output */
    NameMap vinfo;           /* value_info name -> Onnx__ValueInfoProto* */
    int auto_id;             /* counter for helper value / node names */
    int keep_model;          /* 1: the message is imported again (HetcOnnxFile): copy
                              * initializer bytes out of it instead of taking them */
    IrError *err;
} ImportCtx;

/* One ONNX node being lowered. */
typedef struct NodeCtx {
    ImportCtx *c;
    const Onnx__NodeProto *np;
    const char *name;        /* ONNX name, or a generated one when empty */
    IrValue **in;            /* resolved inputs; NULL = omitted optional */
    int nin;
    IrValue **out;           /* outputs created for the node; NULL = omitted */
    int nout;
} NodeCtx;

/* Error about node n: "<file>: node '<name>' (<op>, opset <v>): <msg>". */
int imp_node_err(NodeCtx *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const Onnx__AttributeProto *imp_attr(const NodeCtx *n, const char *name);
/* Attribute type, inferring it for old files that leave `type` unset. */
int imp_attr_type(const Onnx__AttributeProto *a);
/* Copy the node's attributes to an IR node, except those in skip (NULL-
 * terminated).  Errors on attribute types the IR cannot hold. */
int imp_copy_attrs(NodeCtx *n, IrNode *node, const char *const *skip);
/* Create an IR node named after the ONNX node (suffix != NULL: a helper node
 * "<name>/<suffix>"); checks arity against ops.def.  NULL with error set. */
IrNode *imp_emit(NodeCtx *n, IrOp op, const char *suffix, IrValue *const *in, int nin,
                 IrValue *const *out, int nout);
/* Helper values named "<node>/<suffix>". */
IrValue *imp_tmp(NodeCtx *n, const char *suffix);
IrValue *imp_const_i64s(NodeCtx *n, const char *suffix, int cnt, const int64_t *v);
IrValue *imp_const_scalar(NodeCtx *n, const char *suffix, IrDType dt, double v);
/* Rank of v if known from its shape or the graph's value_info, else -1. */
int imp_value_rank(ImportCtx *c, const IrValue *v);
/* Turn v into a CONST/PARAM holding the data of t (inline or external).
 * May take over t's raw_data buffer rather than copy it (t is part of the
 * unpacked model, freed after the import). */
int imp_tensor_to_value(ImportCtx *c, Onnx__TensorProto *t, IrValue *v, const char *what);

/* ---------------------------------------------------------- import_table.c */
typedef struct ImportEntry ImportEntry;
typedef int (*ImportLowerFn)(NodeCtx *n, const ImportEntry *e);
/* Attributes that older opsets carried and the IR takes as inputs. */
typedef enum { MOVE_NONE = 0, MOVE_INTS, MOVE_SCALAR } MoveKind;
typedef struct AttrMove {
    const char *attr;
    int slot;        /* IR input index */
    MoveKind kind;   /* INTS: 1-D i64 const; SCALAR: scalar of the input's dtype */
} AttrMove;
struct ImportEntry {
    const char *op_type;
    int since, until;    /* default-domain opsets this entry covers, inclusive */
    int op;              /* IrOp, or -1 for Constant (no node) */
    ImportLowerFn lower;
    AttrMove moves[3];
    const char *drop[3]; /* attributes without meaning in the IR form */
};
const ImportEntry *import_table_find(const char *op_type, int64_t opset);
/* Opset span over all entries for op_type; 0 if the op is unknown. */
int import_table_span(const char *op_type, int *since, int *until);

/* ---------------------------------------------------------- onnx_external.c */
/* Validate an EXTERNAL tensor and fill v->ext (never reads the bytes). */
int imp_external_ref(ImportCtx *c, const Onnx__TensorProto *t, IrDType dt, int64_t nbytes,
                     IrValue *v, const char *what);

/* ---------------------------------------------------------- onnx_dims.c */
/* Value bound to dim_param `name` by opt (explicit bindings, then the
 * batch / seq aliases); -1 if unbound. */
/* Readers of every value: refs[start[v->id] .. start[v->id + 1]) hold
 * node index * 32 + input slot (slots >= 32 are not listed).  Building it
 * renumbers value ids to their index in g->values. */
typedef struct ImpUses {
    int *start, *refs;
    int nvalues;
} ImpUses;
int imp_uses_build(IrGraph *g, ImpUses *u); /* -1 when out of memory */
void imp_uses_free(ImpUses *u);

/* param_kinds.c: float initializers that are buffers become constants
 * (no gradient reaches them, or the rules there say so) */
void imp_demote_buffers(IrGraph *g);
/* param_untie.c: an initializer the exporter shared between several
 * modules (bit-identical values merged) gets one parameter per reader;
 * *nuntied = copies made. */
int imp_untie_dedups(IrGraph *g, int *nuntied, IrError *err);
/* --trainable / --frozen globs and the parameter-set report */
int imp_param_overrides(IrGraph *g, const Onnx__GraphProto *gp, const HetcImportOptions *o,
                        const char *file, int *ntrainable, int *nfrozen, IrError *err);
void imp_param_report(const IrGraph *g, const Onnx__GraphProto *gp, int nuntied,
                      HetcParamSet *out);

int64_t imp_dim_binding(const HetcImportOptions *opt, const char *name);

#endif
