/* The host backend of the node interpreter (library hetrt_interp): the
 * arena is host memory, nodes run on the host executor (codegen/hostexec). */
#include <stdlib.h>
#include <string.h>

#include "hostexec.h"
#include "interp_be.h"

int interp_be_open(void *kernel_ctx, void **be, IrError *err) {
    *be = NULL;
    return 0;
}
void interp_be_close(void *be, int verbose) {}
int interp_be_zero(void *be, void *dst, size_t n) {
    if (n) memset(dst, 0, n);
    return 0;
}
void *interp_be_alloc(void *be, size_t n) { return calloc(n ? n : 1, 1); }
void interp_be_free(void *be, void *p) { free(p); }
const void *interp_be_const(void *be, IrValue *v, IrError *err) {
    return ir_value_data(v, err);
}
int interp_be_node(void *be, IrNode *n, const void **in, void **out, IrError *err) {
    return hexec_call_node_into(n, in, out, err);
}
