/* hetrt arena: one aligned allocation per rank; memplan's offsets index it. */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

int rt_arena_init(RtArena *a, size_t bytes, size_t align) {
    a->base = NULL;
    a->size = 0;
    if (align == 0) align = 64;
    if ((align & (align - 1)) != 0 || align < sizeof(void *)) {
        rt_log_error("rt_arena_init: alignment %zu is not a power of two >= %zu", align,
                     sizeof(void *));
        return 1;
    }
    if (bytes > SIZE_MAX - align) {
        rt_log_error("rt_arena_init: %zu bytes is too large", bytes);
        return 1;
    }
    /* aligned_alloc wants a multiple of the alignment (and > 0). */
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    if (rounded == 0) rounded = align;
    void *p = aligned_alloc(align, rounded);
    if (!p) {
        rt_log_error("rt_arena_init: cannot allocate %zu bytes (aligned to %zu)", rounded, align);
        return 1;
    }
    memset(p, 0, rounded);
    a->base = p;
    a->size = bytes;
    return 0;
}

void rt_arena_free(RtArena *a) {
    free(a->base);
    a->base = NULL;
    a->size = 0;
}

void *rt_arena_at_checked(const RtArena *a, size_t offset, size_t bytes, const char *file,
                          int line) {
    if (!a->base || offset > a->size || bytes > a->size - offset)
        rt_die(file, line, "arena access [%zu, %zu + %zu) is outside the %zu-byte arena", offset,
               offset, bytes, a->size);
    return a->base + offset;
}
