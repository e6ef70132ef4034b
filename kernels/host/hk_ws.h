/* Kernel scratch that is allocated once, not per call (kernels/host/hk_ws.c).
 *
 * hk_ws(slot, bytes) returns this thread's buffer for `slot`, at least
 * `bytes` long and zero-filled only where the caller asks (hk_ws_zero), or
 * NULL when out of memory.  A buffer grows to the largest size asked and is
 * then reused, so a training step that repeats the same shapes allocates
 * nothing after its first step (issue 15 item 3; tests/train train_noalloc
 * counts).  Each kernel that needs scratch owns a slot, so a kernel and
 * one it calls never share a buffer; the buffer stays valid until the same
 * thread asks for the same slot again.  A kernel asks on the thread that
 * called it, before its parallel loop (chunks run on whichever pool thread
 * is free, so a chunk asking would make the first allocation of a worker's
 * buffer fall in whatever step that worker first ran such a chunk); chunks
 * that need scratch of their own use the part hk_parallel_worker() names.
 *
 * Why per thread and not per runtime context: the kernels are called from
 * places that carry no context (the host executor's adapters, the stage
 * binaries' direct calls) and from the pool's worker threads (one buffer
 * per concurrent chunk).  The buffers hold no results between calls, so
 * they change no output; a thread's buffers are freed when it exits. */
#ifndef HETC_HK_WS_H
#define HETC_HK_WS_H

#include <stddef.h>

enum {
    HK_WS_ATTN,      /* attention forward: a head's score rows per pool thread */
    HK_WS_ATTN_BWD,  /* attention backward: a head's P and dP per pool thread */
    HK_WS_REDUCE,    /* hk_reduce: the double / int64 accumulators */
    HK_WS_NORM,      /* norm backward: parameter sums and row stats */
    HK_WS_SUM_TO,    /* reduce-sum-to-shape accumulators */
    HK_WS_CE,        /* cross-entropy forward: row log-sum-exps */
    HK_WS_ADAPTER,   /* the host executor's adapters (codegen/hostexec*) */
    HK_WS_ADAPTER2,
    HK_WS_BF16,      /* bf16 GEMMs (hk_bf16.c): the operands widened to f32 */
    HK_WS_COUNT
};

void *hk_ws(int slot, size_t bytes);
/* hk_ws, then the first `bytes` set to zero */
void *hk_ws_zero(int slot, size_t bytes);

#endif
