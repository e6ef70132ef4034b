/* ONNX frontend: model.onnx -> IrGraph (protobuf-c), and tensor files.
 *
 * The importer is a table with one entry per (ONNX op, opset range)
 * (frontend/import_table.c).  Initializers become IR_VK_PARAM values when
 * they are float tensors of rank >= 1 that are not buffers, IR_VK_CONST
 * otherwise; exporter dedups are untied (frontend/README.md, "Which
 * initializers are parameters").
 * External data is validated at import and mmap'd lazily on first read
 * (ir_value_data): planning never touches parameter bytes.
 */
#ifndef HETC_ONNX_IMPORT_H
#define HETC_ONNX_IMPORT_H

#include <stdio.h>

#include "ir.h"

/* A binding of a symbolic dim name (ONNX dim_param) to an extent. */
typedef struct HetcDimBinding {
    const char *name;
    int64_t value;
} HetcDimBinding;

/* The parameter set the importer decided (frontend/README.md, "Which
 * initializers are parameters"). */
typedef struct HetcParamSet {
    int ntrainable;                 /* IR_VK_PARAM values after the import */
    int64_t trainable_elems, trainable_bytes;
    int nbuffers;                   /* float initializers of rank >= 1 kept constant */
    int64_t buffer_bytes;
    char **buffer_names;            /* nbuffers names (owned) */
    int nuntied;                    /* parameters made by untying exporter dedups */
    int nforced_trainable, nforced_frozen; /* changed by --trainable / --frozen */
} HetcParamSet;
void hetc_param_set_free(HetcParamSet *p);
/* "params: 21 trainable (1234 elements, 4.8 KiB), 1 buffer kept constant
 * (16 B: inv_freq), 4 untied copies" on f, prefixed by `what` */
void hetc_param_set_print(FILE *f, const char *what, const HetcParamSet *p);

typedef struct HetcImportOptions {
    /* --batch / --seq: bind dim_params that name the batch / sequence axis
     * (hetc_batch_dim_names / hetc_seq_dim_names); -1 = not given. */
    int64_t batch, seq;
    const HetcDimBinding *bindings; /* explicit name=value bindings */
    int nbindings;
    /* 1: leave unbound symbolic dims as -1 (with IrValue.sym names) for a
     * later hetc_bind_dims; 0: fail naming the unbound dim and input. */
    int allow_unbound;
    /* --trainable / --frozen: fnmatch globs on initializer names (and the
     * names of untied copies) that override the importer's decision; a
     * value matching both is frozen.  A glob matching nothing is an error. */
    const char *const *trainable;
    int ntrainable;
    const char *const *frozen;
    int nfrozen;
    /* filled when not NULL (free with hetc_param_set_free) */
    HetcParamSet *param_set;
} HetcImportOptions;

void hetc_import_options_default(HetcImportOptions *o);

/* Parse and lower an ONNX model.  NULL with err set on failure: the message
 * names the file and, where relevant, the node name, op type, domain, opset,
 * initializer or dim involved. */
IrGraph *hetc_import_onnx(const char *path, const HetcImportOptions *opt, IrError *err);
/* The same in two steps: read and decode the file once (errors as above),
 * then lower it to IR at any options (dim bindings) as often as needed
 * (each import copies the inline initializers; hetc_import_onnx takes
 * them from the decoded message instead). */
typedef struct HetcOnnxFile HetcOnnxFile;
HetcOnnxFile *hetc_onnx_open(const char *path, IrError *err);
IrGraph *hetc_onnx_import(const HetcOnnxFile *f, const HetcImportOptions *opt, IrError *err);
void hetc_onnx_close(HetcOnnxFile *f);
/* Same, from a buffer (fuzzing); model_dir is used for external data. */
IrGraph *hetc_import_onnx_buffer(const void *buf, size_t len, const char *model_dir,
                                 const HetcImportOptions *opt, IrError *err);

/* The dim_param names --batch and --seq bind (case-insensitive), NULL-
 * terminated: the one list the importer and every --help use. */
const char *const *hetc_batch_dim_names(void);
const char *const *hetc_seq_dim_names(void);

/* Bind remaining symbolic dims of graph inputs (and every value carrying the
 * same dim_param) from the given bindings; fails naming any dim left unbound. */
int hetc_bind_dims(IrGraph *g, const HetcDimBinding *b, int n, IrError *err);

/* Names of the ONNX ops the importer supports at `opset` (for --help and the
 * conformance runner): fills up to max names, returns the count. */
int hetc_import_supported_ops(int64_t opset, const char **names, int max);
int hetc_import_op_supported(const char *domain, const char *op_type, int64_t opset);

/* Tensor files: ONNX TensorProto (.pb) and NumPy (.npy, v1/v2, C order,
 * little endian).  hetc_read_tensor picks the format by extension. */
int hetc_read_tensor_pb(const char *path, IrTensor **out, IrError *err);
int hetc_read_npy(const char *path, IrTensor **out, IrError *err);
int hetc_read_tensor(const char *path, IrTensor **out, IrError *err);
/* Atomic write (temp file + rename). */
int hetc_write_npy(const char *path, const IrTensor *t, IrError *err);

#endif
