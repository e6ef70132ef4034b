/* The device executor's table, checked without a GPU: every op of the
 * canonical training set (what the example GPT's stage graphs contain:
 * forward, backward, loss and the decomposed AdamW update) has a device
 * kernel, and every IrOp runs somewhere (device kernel or the host
 * executor's fallback), so a stage graph never meets an op it cannot run.
 * The canonical set is the union of the ops in the stage graphs of
 * examples/gpt_tiny.onnx and tests/models/llama_op17.onnx. */
#include <stdio.h>

#include "cudaexec.h"
#include "hostexec.h"

static const IrOp canonical[] = {
    IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_POW, IR_OP_MIN, IR_OP_MAX, IR_OP_SQRT,
    IR_OP_IDENTITY, IR_OP_RESHAPE, IR_OP_TRANSPOSE, IR_OP_SPLIT, IR_OP_CONCAT, IR_OP_CAST,
    IR_OP_LINEAR, IR_OP_LINEAR_GRAD, IR_OP_MATMUL, IR_OP_LAYER_NORM, IR_OP_LAYER_NORM_GRAD,
    IR_OP_RMS_NORM, IR_OP_RMS_NORM_GRAD, IR_OP_GELU, IR_OP_SILU, IR_OP_UNARY_GRAD,
    IR_OP_ATTENTION, IR_OP_ATTENTION_GRAD, IR_OP_EMBEDDING, IR_OP_EMBEDDING_GRAD,
    IR_OP_CROSS_ENTROPY, IR_OP_CROSS_ENTROPY_GRAD, IR_OP_SOFTMAX, IR_OP_LOG_SOFTMAX,
    IR_OP_SOFTMAX_GRAD, IR_OP_SUM_TO_SHAPE, IR_OP_EXP, IR_OP_TANH, IR_OP_NEG, IR_OP_EXPAND,
    IR_OP_UNSQUEEZE, IR_OP_SLICE, IR_OP_SLICE_GRAD,
};

int main(void) {
    int fails = 0, native = 0;
    for (size_t i = 0; i < sizeof canonical / sizeof *canonical; i++)
        if (!cudaexec_op_native(canonical[i])) {
            printf("FAIL: %s has no device kernel\n", ir_op_name(canonical[i]));
            fails++;
        }
    for (int op = 0; op < IR_OP_COUNT; op++) {
        native += cudaexec_op_native((IrOp)op);
        if (!cudaexec_op_native((IrOp)op) && !hexec_op_supported((IrOp)op)) {
            printf("FAIL: %s runs nowhere (no device kernel, no host kernel)\n",
                   ir_op_name((IrOp)op));
            fails++;
        }
    }
    printf("%d of %d ops have device kernels; the rest run on the host fallback:", native,
           IR_OP_COUNT);
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (!cudaexec_op_native((IrOp)op)) printf(" %s", ir_op_name((IrOp)op));
    printf("\n");
    return fails ? 1 : 0;
}
