/* Shared modules hetc loads on first use (docs/TRAINING.md, "Memory of
 * hetc train").
 *
 * Two parts of hetc pull in very large libraries that most commands never
 * call: the LLVM emission of stage programs (libLLVM-14, ~45 MB resident
 * once its static constructors have run) and the CUDA timing of
 * `hetc profile` (cuBLASLt, whose load-time initialisation alone makes a
 * process ~210 MB resident).  Linked into the hetc executable, every
 * command paid for both before main: `hetc train` on a 0.9 M-parameter
 * model peaked at 271 MB of which ~255 MB were these libraries.  They are
 * built as modules (codegen/CMakeLists.txt hetc_llvm, interp/cuda
 * hetc_cudaprof_mod) that the commands needing them open here; the
 * executable exports its own symbols (ENABLE_EXPORTS) so a module's calls
 * into the IR and kernel code bind to hetc's single copy. */
#ifndef HETC_LAZY_MODULE_H
#define HETC_LAZY_MODULE_H

#include "ir.h"

/* The address of `name` in the shared module at `path` (this build tree's
 * absolute path), or failing that at `rel` relative to the directory of
 * the running executable (a build tree copied or moved elsewhere: hetc is
 * at its root), opened on first use (the dynamic loader keeps it open and
 * returns the same handle after that); NULL with err naming the module
 * and dlerror()'s reason. */
void *lazy_module_sym(const char *path, const char *rel, const char *name, IrError *err);

#endif
