/* The stage backends hetc compile can target (--backend=NAME): one row per
 * backend in backends.c, naming its code generation (codegen/lower_node.h's
 * LowerBackend: direct-call table, its own runtime entries, whether
 * generated host kernels may run) and how its stage binaries link (the
 * lists driver/CMakeLists.txt generates into stage_link.h).
 * docs/CODEGEN.md "Adding a backend" lists what a new one touches. */
#ifndef HETC_BACKENDS_H
#define HETC_BACKENDS_H

#include <stddef.h>

#include "lower_node.h"

typedef struct HetcBackend {
    const char *name;          /* --backend=NAME; also LowerBackend.name */
    const LowerBackend *lower; /* codegen hooks (codegen/lower_node.h) */
    /* link arguments after the stage object: a program of direct calls
     * only, and one that still calls hetrt_node (the node interpreter in
     * front).  An empty list: this hetc was built without the backend. */
    const char *const *link;
    const char *const *link_interp;
    const char *missing; /* what a build without it lacks, for the error */
} HetcBackend;

/* The row named name; NULL if there is none. */
const HetcBackend *hetc_backend_find(const char *name);
/* The host backend (the default; NULL in CompileArgs means it). */
const HetcBackend *hetc_backend_host(void);
/* 1 if this hetc can link the backend's stage binaries. */
int hetc_backend_available(const HetcBackend *b);
/* The backend names for an error message: "host or cuda". */
void hetc_backend_names(char *buf, size_t n);
/* The link arguments of a lowered program (interprets: some call is
 * hetrt_node, lower_stage_interprets), NULL-terminated. */
const char *const *hetc_backend_link(const HetcBackend *b, int interprets);

#endif
