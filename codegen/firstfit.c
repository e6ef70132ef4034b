#include "firstfit.h"

#include <stdlib.h>

#include "ir.h" /* ir_xcalloc */

typedef struct Placed {
    int64_t off, size;
    int last;
} Placed;

static int cmp_off(const void *a, const void *b) {
    const Placed *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* order of placement: first use, then array position (qsort is not stable) */
typedef struct Order {
    int first, idx;
} Order;

static int cmp_first(const void *a, const void *b) {
    const Order *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int64_t firstfit_place(FfBuf *b, int n) {
    Order *order = ir_xcalloc((size_t)n + 1, sizeof *order);
    Placed *act = ir_xcalloc((size_t)n + 1, sizeof *act); /* placed, still live, by offset */
    for (int i = 0; i < n; i++) order[i] = (Order){b[i].first, i};
    qsort(order, (size_t)n, sizeof *order, cmp_first);
    int na = 0;
    int64_t top = 0;
    for (int q = 0; q < n; q++) {
        FfBuf *x = &b[order[q].idx];
        int keep = 0;
        for (int k = 0; k < na; k++)
            if (act[k].last >= x->first) act[keep++] = act[k];
        na = keep;
        int64_t off = 0;
        for (int k = 0; k < na; k++) {
            if (act[k].off - off >= x->size) break;
            if (act[k].off + act[k].size > off) off = act[k].off + act[k].size;
        }
        x->off = off;
        if (off + x->size > top) top = off + x->size;
        act[na++] = (Placed){off, x->size, x->last};
        qsort(act, (size_t)na, sizeof *act, cmp_off);
    }
    free(act);
    free(order);
    return top;
}
