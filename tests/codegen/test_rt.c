/* A stand-in runtime for the codegen tests: implements the stage_abi.h
 * entry point the generated main calls, with no MPI.  The real hetrt
 * (runtime/) provides the same symbol.
 *
 *   stage IN_ARENA OUT_ARENA
 * loads the whole arena image from IN_ARENA (exactly arena_bytes), runs
 * the stage function "init" if there is one, then the schedule table in
 * order - F m runs "forward", B m runs "backward", both on microbatch
 * m's activation slot (m % nslots) - and writes the arena to OUT_ARENA.
 * It prints the schedule it ran ("F0 F1 B0 B1") so the test can compare
 * it with the table it asked the codegen for, and on stderr the ABI
 * texts' lengths ("abi V ir_train N ir_update N config N": the emitter
 * stores NULL as "", so every pointer must be non-NULL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_abi.h"

static const HetcStageFn *find_fn(const HetcStageDesc *d, const char *name) {
    for (int i = 0; i < d->nfuncs; i++)
        if (strcmp(d->funcs[i].name, name) == 0) return &d->funcs[i];
    return NULL;
}

/* the generated module's kernel error buffer (stage_abi.h), if it has one */
extern char hetc_kernel_err[HETC_KERNEL_ERRLEN] __attribute__((weak));

static int run_fn(const HetcStageFn *f, char *arena, char *slot) {
    int32_t rc = f->fn(arena, slot);
    if (rc == 0) return 0;
    if (rc < 0 || rc > f->ncalls) {
        fprintf(stderr, "stage function %s: bad status %d\n", f->name, rc);
        return -1;
    }
    fprintf(stderr, "stage function %s: call %d (%s) failed: %.*s\n", f->name, rc - 1,
            f->calls[rc - 1], HETC_KERNEL_ERRLEN, hetc_kernel_err ? hetc_kernel_err : "");
    return -1;
}

int hetrt_stage_main(int argc, char **argv, const HetcStageDesc *d) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN_ARENA OUT_ARENA\n", argv[0]);
        return 2;
    }
    if (d->abi_version != HETC_STAGE_ABI_VERSION) {
        fprintf(stderr, "stage ABI version %d, runtime %d\n", d->abi_version,
                HETC_STAGE_ABI_VERSION);
        return 2;
    }
    if (!d->ir_train || !d->ir_update || !d->config) {
        fprintf(stderr, "stage ABI 2: NULL text in the descriptor\n");
        return 2;
    }
    fprintf(stderr, "abi %d ir_train %zu ir_update %zu config %zu\n", d->abi_version,
            strlen(d->ir_train), strlen(d->ir_update), strlen(d->config));
    char *arena = calloc(1, (size_t)d->arena_bytes + 1);
    if (!arena) return 2;
    int rc = 1;
    FILE *f = fopen(argv[1], "rb");
    if (!f || fread(arena, 1, (size_t)d->arena_bytes + 1, f) != (size_t)d->arena_bytes) {
        fprintf(stderr, "%s: cannot read an arena image of %lld bytes\n", argv[1],
                (long long)d->arena_bytes);
        if (f) fclose(f);
        goto out;
    }
    fclose(f);
    const HetcStageFn *init = find_fn(d, "init");
    if (init && run_fn(init, arena, NULL)) goto out;
    for (int i = 0; i < d->nsched; i++) {
        const HetcSchedEntry *s = &d->sched[i];
        const HetcStageFn *fn = find_fn(d, s->kind == HETC_SCHED_F ? "forward" : "backward");
        char *slot = arena + d->slot_base + (int64_t)(s->microbatch % d->nslots) * d->slot_bytes;
        printf("%s%c%d", i ? " " : "", (char)s->kind, s->microbatch);
        if (!fn || run_fn(fn, arena, slot)) goto out;
    }
    printf("\n");
    f = fopen(argv[2], "wb");
    if (!f || fwrite(arena, 1, (size_t)d->arena_bytes, f) != (size_t)d->arena_bytes) {
        fprintf(stderr, "%s: cannot write the arena\n", argv[2]);
        if (f) fclose(f);
        goto out;
    }
    rc = fclose(f) == 0 ? 0 : 1;
out:
    free(arena);
    return rc;
}
