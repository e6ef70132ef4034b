/* First-fit placement of buffers by live range: the one offset planner of
 * stage binaries' scratch (memplan.c) and of the host executor's persistent
 * run (hostexec_run.c). */
#ifndef HETC_FIRSTFIT_H
#define HETC_FIRSTFIT_H

#include <stdint.h>

typedef struct FfBuf {
    int first, last; /* live over positions [first, last] of some call order */
    int64_t size;    /* bytes (the caller rounds up to its alignment) */
    int64_t off;     /* out: the offset */
} FfBuf;

/* Offsets for n buffers such that two whose live ranges share a position
 * never share a byte; buffers are placed in order of first use (ties: array
 * order), each at the lowest offset free over its range among those placed
 * and still live.  Returns the bytes spanned. */
int64_t firstfit_place(FfBuf *b, int n);

#endif
