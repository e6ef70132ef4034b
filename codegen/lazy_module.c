/* Shared modules opened on first use (lazy_module.h). */
#include "lazy_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

/* RTLD_LOCAL: the module's own symbols (and LLVM's / CUDA's) stay out of
 * the global scope; no handle is cached here: dlopen of an open module
 * only takes another reference, and it is never closed. */
static void *open_beside_exe(const char *rel, char *why, size_t cap) {
    char exe[PATH_MAX], p[PATH_MAX + 256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    snprintf(p, sizeof p, "%s/%s", exe, rel);
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "; %s: %s", p, e ? e : "unknown error");
    }
    return h;
}

void *lazy_module_sym(const char *path, const char *rel, const char *name, IrError *err) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        char first[600], second[700] = "";
        const char *e = dlerror();
        snprintf(first, sizeof first, "%s", e ? e : "unknown error");
        if (!(h = open_beside_exe(rel, second, sizeof second))) {
            ir_errorf(err, "cannot load %s: %s%s", path, first, second);
            return NULL;
        }
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
