/* `hetc profile`'s device timing (interp/cuda/cudaprof.h), forwarded to
 * the hetc_cudaprof_mod module (codegen/lazy_module.h): hetc does not link
 * cuBLASLt / cudart, so only a profile on a device loads them. */
#ifdef HETC_PROFILE_CUDA
#include "cudaprof.h"
#include "lazy_module.h"

int cudaprof_probe(int ordinal, char *name, size_t cap, IrError *err) {
    int (*f)(int, char *, size_t, IrError *) = (int (*)(int, char *, size_t, IrError *))
        lazy_module_sym(HETC_CUDAPROF_MODULE, HETC_CUDAPROF_MODULE_REL, "cudaprof_probe", err);
    return f ? f(ordinal, name, cap, err) : 0; /* 0 devices: the caller says why */
}

int cudaprof_layer(IrGraph *g, int ordinal, int warmup, int reps, CudaProfResult *out,
                   IrError *err) {
    int (*f)(IrGraph *, int, int, int, CudaProfResult *, IrError *) =
        (int (*)(IrGraph *, int, int, int, CudaProfResult *, IrError *))lazy_module_sym(
            HETC_CUDAPROF_MODULE, HETC_CUDAPROF_MODULE_REL, "cudaprof_layer", err);
    return f ? f(g, ordinal, warmup, reps, out, err) : -1;
}
#else
typedef int hetc_cudaprof_lazy_unused; /* ISO C: no empty translation unit */
#endif
