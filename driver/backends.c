/* The backend table (backends.h).  A backend is a row here, its lowering
 * (codegen/lower_node_<name>.c's LowerBackend), its stage runtime library
 * (runtime/<name>/, implementing runtime/stage/stage_internal.h's
 * stage_be_* calls and its set of runtime/abi/stage_abi.def) and its link
 * list (driver/CMakeLists.txt). */
#include "backends.h"

#include <stdio.h>
#include <string.h>

#include "stage_link.h"

static const HetcBackend backends[] = {
    {"host", &lower_backend_host, hetc_stage_link_args, hetc_stage_link_args_interp, ""},
    /* one list either way: the interpreter's archives (interp/cuda) come
     * first and the linker takes their objects only when a node calls
     * hetrt_node */
    {"cuda", &lower_backend_cuda, hetc_stage_link_args_cuda, hetc_stage_link_args_cuda,
     "CUDA (configure with nvcc and NCCL present, HETC_CUDA=ON)"},
};
enum { NBACKENDS = (int)(sizeof backends / sizeof backends[0]) };

const HetcBackend *hetc_backend_find(const char *name) {
    for (int i = 0; name && i < NBACKENDS; i++)
        if (!strcmp(backends[i].name, name)) return &backends[i];
    return NULL;
}

const HetcBackend *hetc_backend_host(void) { return &backends[0]; }

int hetc_backend_available(const HetcBackend *b) { return b && b->link && b->link[0]; }

void hetc_backend_names(char *buf, size_t n) {
    size_t used = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < NBACKENDS && used < n; i++) {
        const char *sep = i == 0 ? "" : i == NBACKENDS - 1 ? " or " : ", ";
        int w = snprintf(buf + used, n - used, "%s%s", sep, backends[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}

const char *const *hetc_backend_link(const HetcBackend *b, int interprets) {
    if (!b) b = hetc_backend_host();
    return interprets ? b->link_interp : b->link;
}
