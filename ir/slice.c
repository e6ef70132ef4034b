/* ONNX Slice index resolution of one axis (ir.h ir_slice_axis): the host
 * executor, its SliceGrad, the CUDA executor and the stage lowering all
 * walk a slice from what this returns, so they agree on every clamp. */
#include "ir.h"

int64_t ir_slice_axis(int64_t dim, int64_t s, int64_t e, int64_t k, int64_t *first) {
    int64_t cnt;
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (k > 0) {
        s = s < 0 ? 0 : s > dim ? dim : s;
        e = e < 0 ? 0 : e > dim ? dim : e;
        cnt = e > s ? (e - s - 1) / k + 1 : 0; /* no k - 1: k may be INT64_MAX */
    } else {
        /* the range is [-1, dim - 1], so a negative step can reach index 0 */
        s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
        e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
        cnt = s > e ? (e - s + 1) / k + 1 : 0; /* no -k: k may be INT64_MIN */
    }
    *first = s;
    return cnt;
}
