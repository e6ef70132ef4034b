/* The node interpreter of stage binaries (libraries hetrt_interp /
 * hetrt_interp_cuda): hetrt_node, and hetrt_interp_open / close, which the
 * stage runtime calls through weak references (runtime/abi/stage_interp.h).
 * Linked only into binaries whose program calls hetrt_node; a program of
 * direct kernel calls needs neither the IR parser nor an executor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp_be.h"
#include "ir.h"
#include "rt.h"
#include "stage_interp.h"

/* The process's one interpreter state, like the runtime's own
 * (hetrt_stage_rt): hetrt_node takes only the generated code's constants. */
static struct {
    int open;
    HetrtInterpEnv env;
    IrGraph *graphs[2]; /* HETC_GRAPH_TRAIN, HETC_GRAPH_UPDATE */
    void *be;
} interp;

/* The embedded graphs are TP rank 0's; the only rank-dependent node
 * attribute is vocab_start (the vocab-parallel Embedding / EmbeddingGrad /
 * loss ops, passes/tp_shard_vocab.c): rank r's vocabulary slice is rank
 * 0's shifted by r x the local extent, as the `tpshard` ranges are (the
 * direct calls' hetrt_tp_* entries apply the same shift,
 * runtime/stage/stage_tp_kernels.c). */
static int tp_rank_graph(IrGraph *g, int tp_rank, char *err, size_t errlen) {
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        const IrAttr *a = ir_node_attr(n, "vocab_start");
        if (!a || !tp_rank) continue;
        const IrValue *x = n->nin > 0 ? n->in[0] : NULL;
        int table = n->op == IR_OP_EMBEDDING || n->op == IR_OP_EMBEDDING_GRAD;
        int64_t local = !x || x->shape.rank < 1 ? 0
                        : table ? x->shape.dims[0] : x->shape.dims[x->shape.rank - 1];
        int64_t start = a->i + (int64_t)tp_rank * local;
        int64_t size = ir_attr_int(n, "vocab_size", -1);
        if (local <= 0 || size < 0 || start + local > size) {
            snprintf(err, errlen, "node '%s' (%s): TP rank %d's vocabulary slice [%lld, +%lld) "
                     "passes vocab_size %lld", n->name, ir_op_name(n->op), tp_rank,
                     (long long)start, (long long)local, (long long)size);
            return -1;
        }
        ir_node_set_int(n, "vocab_start", start);
    }
    return 0;
}

void hetrt_interp_close(void) {
    for (int g = 0; g < 2; g++)
        if (interp.graphs[g]) ir_graph_free(interp.graphs[g]);
    if (interp.open) interp_be_close(interp.be, getenv("HETRT_VERBOSE") != NULL);
    memset(&interp, 0, sizeof interp);
}

int hetrt_interp_open(const HetrtInterpEnv *env, char *err, size_t errlen) {
    static const char *const which[2] = {"train", "update"};
    const char *texts[2] = {env->desc->ir_train, env->desc->ir_update};
    hetrt_interp_close();
    interp.env = *env;
    for (int g = 0; g < 2; g++) {
        IrError e = {{0}};
        if (!texts[g] || !texts[g][0]) continue; /* no hetrt_node call names this graph */
        if (!(interp.graphs[g] = ir_parse(texts[g], which[g], &e))) {
            snprintf(err, errlen, "cannot parse its %s graph: %s", which[g], e.msg);
            hetrt_interp_close();
            return -1;
        }
    }
    if (interp.graphs[HETC_GRAPH_TRAIN] &&
        tp_rank_graph(interp.graphs[HETC_GRAPH_TRAIN], env->tp_rank, err, errlen)) {
        hetrt_interp_close();
        return -1;
    }
    IrError e = {{0}};
    if (interp_be_open(env->kernel_ctx, &interp.be, &e)) {
        snprintf(err, errlen, "node executor: %s", e.msg);
        hetrt_interp_close();
        return -1;
    }
    interp.open = 1;
    return 0;
}

/* Resolve one buffer reference of a hetrt_node call. */
static void *resolve(IrValue *v, int64_t ref, void *arena, void *slot, int is_out, IrError *err) {
    int region = (int)((uint64_t)ref >> 56);
    int64_t off = ref & ((INT64_C(1) << 56) - 1);
    size_t nb = ir_value_bytes(v);
    switch (region) {
    case HETC_BUF_NONE:
        return NULL;
    case HETC_BUF_ARENA:
        if ((size_t)off + nb > interp.env.arena_bytes || arena != interp.env.arena) {
            ir_errorf(err, "value '%s': arena range [%lld, +%zu) outside the %zu-byte arena",
                      v->name, (long long)off, nb, interp.env.arena_bytes);
            return NULL;
        }
        return (unsigned char *)arena + off;
    case HETC_BUF_SLOT:
        if (!slot) {
            ir_errorf(err, "value '%s' is in the activation slot, but no microbatch is running",
                      v->name);
            return NULL;
        }
        if (off + (int64_t)nb > interp.env.desc->slot_bytes) {
            ir_errorf(err, "value '%s': slot range [%lld, +%zu) outside the %lld-byte slot",
                      v->name, (long long)off, nb, (long long)interp.env.desc->slot_bytes);
            return NULL;
        }
        return (unsigned char *)slot + off;
    case HETC_BUF_CONST:
        if (is_out) {
            ir_errorf(err, "output '%s' is given a constant buffer", v->name);
            return NULL;
        }
        return (void *)interp_be_const(interp.be, v, err);
    default:
        ir_errorf(err, "value '%s': unknown buffer region %d", v->name, region);
        return NULL;
    }
}

/* Output buffer o is one of the node's input buffers: the memory plan put
 * an in-place output there (memplan.h MpParam.inplace, the fused AdamW);
 * zeroing it would destroy the input the kernel is about to read. */
static int aliases_input(const IrNode *n, const void *const *in, const void *o) {
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] && in[j] == o) return 1;
    return 0;
}

int32_t hetrt_node(int32_t graph, int32_t node, void *arena, void *slot, const int64_t *bufs) {
    if (!interp.open) {
        rt_log_error("hetrt_node called before the interpreter was opened (outside "
                     "hetrt_stage_main)");
        return 1;
    }
    if (graph < 0 || graph > 1 || !interp.graphs[graph]) {
        rt_log_error("hetrt_node: no graph %d in this binary", graph);
        return 1;
    }
    IrGraph *g = interp.graphs[graph];
    const char *gname = graph == HETC_GRAPH_TRAIN ? "train" : "update";
    if (node < 0 || node >= g->nnodes) {
        rt_log_error("hetrt_node: node %d is outside the %s graph's %d nodes", node, gname,
                     g->nnodes);
        return 1;
    }
    IrNode *n = g->nodes[node];
    IrError err = {{0}};
    const void *in[64];
    void *out[64];
    int rc = 0;
    if (n->nin > 64 || n->nout > 64) {
        rt_log_error("hetrt_node: %s node %d '%s' (%s) has too many operands", gname, node,
                     n->name, ir_op_name(n->op));
        return 1;
    }
    for (int i = 0; i < n->nin && !rc; i++) {
        in[i] = NULL;
        if (!n->in[i]) continue;
        if (!(in[i] = resolve(n->in[i], bufs[i], arena, slot, 0, &err)) &&
            (bufs[i] >> 56) != HETC_BUF_NONE)
            rc = 1;
        else if (!in[i] && ir_value_bytes(n->in[i]))
            rc = ir_errorf(&err, "input %d ('%s') has no buffer", i, n->in[i]->name) != 0;
    }
    /* unused outputs (the kernel still writes them) share the backend's
     * spare room, each at a 256-byte aligned offset */
    size_t spare = 0;
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] && (bufs[n->nin + i] >> 56) == HETC_BUF_NONE)
            spare += (ir_value_bytes(n->out[i]) + 255) & ~(size_t)255;
    char *room = spare && !rc ? interp_be_spare(interp.be, spare) : NULL;
    if (spare && !rc && !room)
        rc = ir_errorf(&err, "no memory for %zu bytes of unused outputs", spare) != 0;
    unsigned ow = interp_be_overwrites(interp.be, n);
    for (int i = 0; i < n->nout && !rc; i++) {
        out[i] = NULL;
        if (!n->out[i]) continue;
        int64_t ref = bufs[n->nin + i];
        size_t nb = ir_value_bytes(n->out[i]);
        if ((ref >> 56) == HETC_BUF_NONE) {
            out[i] = room;
            room += (nb + 255) & ~(size_t)255;
        } else if (!(out[i] = resolve(n->out[i], ref, arena, slot, 1, &err))) {
            rc = 1;
            break;
        }
        if (!(i < 32 && (ow >> i & 1u)) && !aliases_input(n, in, out[i]) &&
            interp_be_zero(interp.be, out[i], nb))
            rc = ir_errorf(&err, "cannot zero output '%s'", n->out[i]->name) != 0;
    }
    if (!rc) rc = interp_be_node(interp.be, n, in, out, &err) != 0;
    if (rc)
        rt_log_error("stage %d, %s graph node %d '%s' (%s): %s", interp.env.stage, gname, node,
                     n->name, ir_op_name(n->op), err.msg);
    return rc;
}
