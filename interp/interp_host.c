/* The host backend of the node interpreter (library hetrt_interp): the
 * arena is host memory, nodes run on the host executor (codegen/hostexec). */
#include <stdlib.h>
#include <string.h>

#include "hostexec.h"
#include "interp_be.h"

/* The host backend's state: the spare room for unused outputs. */
typedef struct HostBe {
    void *spare;
    size_t spare_bytes;
} HostBe;

int interp_be_open(void *kernel_ctx, void **be, IrError *err) {
    if (!(*be = calloc(1, sizeof(HostBe)))) return ir_errorf(err, "out of memory");
    return 0;
}
void interp_be_close(void *be, int verbose) {
    HostBe *h = be;
    if (!h) return;
    free(h->spare);
    free(h);
}
int interp_be_zero(void *be, void *dst, size_t n) {
    if (n) memset(dst, 0, n);
    return 0;
}
/* The host executor's kernels are not all overwriting (HxOpEntry.overwrite
 * is the executor's own business): zero every output. */
unsigned interp_be_overwrites(void *be, const IrNode *n) { return 0; }
void *interp_be_spare(void *be, size_t n) {
    HostBe *h = be;
    if (n <= h->spare_bytes && h->spare) return h->spare;
    void *p = realloc(h->spare, n ? n : 1);
    if (!p) return NULL;
    h->spare = p;
    h->spare_bytes = n;
    return p;
}
const void *interp_be_const(void *be, IrValue *v, IrError *err) {
    return ir_value_data(v, err);
}
int interp_be_node(void *be, IrNode *n, const void **in, void **out, IrError *err) {
    return hexec_call_node_into(n, in, out, err);
}
