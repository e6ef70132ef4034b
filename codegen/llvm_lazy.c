/* hetc's calls into LLVM (llvm_emit.h le_emit_program, fused_llvm.h
 * fk_emit_host, fk_ptx), forwarded to the hetc_llvm module (lazy_module.h): the
 * executable does not link libLLVM, so commands that emit no code
 * (`hetc train`, `run`, `plan`, ...) never load it.  HETC_LLVM_MODULE is
 * the module's path in this build tree (codegen/CMakeLists.txt), as the
 * stage link lists name this tree's runtime libraries; HETC_LLVM_MODULE_REL
 * the same relative to the tree's root, where hetc is. */
#include "fused_llvm.h"
#include "fused_kernel.h"
#include "lazy_module.h"
#include "llvm_emit.h"

#if !defined(HETC_LLVM_MODULE) || !defined(HETC_LLVM_MODULE_REL)
#error "HETC_LLVM_MODULE / _REL (the hetc_llvm module's path) must be defined"
#endif

/* What the module calls back into (resolved against the executable's
 * exports when it is opened): referenced here so the linker keeps them in
 * hetc even if nothing else in the executable calls them. */
__attribute__((used)) static void *const module_needs[] = {
    (void *)le_run_tool, (void *)fk_check,      (void *)fk_is_math,
    (void *)fk_needs_libm, (void *)fk_numel,    (void *)ir_errorf,
    (void *)ir_error_prefix, (void *)ir_error_prefix_stage,
};

int le_emit_program(const LeProgram *prog, const LeOptions *opt, IrError *err) {
    int (*f)(const LeProgram *, const LeOptions *, IrError *) =
        (int (*)(const LeProgram *, const LeOptions *, IrError *))lazy_module_sym(
            HETC_LLVM_MODULE, HETC_LLVM_MODULE_REL, "le_emit_program", err);
    return f ? f(prog, opt, err) : -1;
}

int fk_emit_host(void *mod, const FkKernel *k, IrError *err) {
    int (*f)(void *, const FkKernel *, IrError *) =
        (int (*)(void *, const FkKernel *, IrError *))lazy_module_sym(
            HETC_LLVM_MODULE, HETC_LLVM_MODULE_REL, "fk_emit_host", err);
    return f ? f(mod, k, err) : -1;
}

int fk_ptx(const FkKernel *const *ks, int n, const char *cpu, char **ptx, char **ll,
           IrError *err) {
    int (*f)(const FkKernel *const *, int, const char *, char **, char **, IrError *) =
        (int (*)(const FkKernel *const *, int, const char *, char **, char **,
                 IrError *))lazy_module_sym(HETC_LLVM_MODULE, HETC_LLVM_MODULE_REL, "fk_ptx",
                                            err);
    if (!f) {
        *ptx = NULL;
        if (ll) *ll = NULL;
        return -1;
    }
    return f(ks, n, cpu, ptx, ll, err);
}
