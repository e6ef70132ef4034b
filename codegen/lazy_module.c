/* Shared modules opened on first use (lazy_module.h). */
#include "lazy_module.h"

#include <dlfcn.h>

void *lazy_module_sym(const char *path, const char *name, IrError *err) {
    /* RTLD_LOCAL: the module's own symbols (and LLVM's / CUDA's) stay out of
     * the global scope; no handle is cached here: dlopen of an open module
     * only takes another reference, and it is never closed. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        ir_errorf(err, "cannot load %s: %s", path, why ? why : "unknown error");
        return NULL;
    }
    dlerror();
    void *f = dlsym(h, name);
    if (!f) {
        const char *why = dlerror();
        ir_errorf(err, "%s has no '%s': %s", path, name, why ? why : "null symbol");
        return NULL;
    }
    return f;
}
