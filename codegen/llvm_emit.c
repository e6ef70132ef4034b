/* Stage program -> LLVM module -> object -> executable (DESIGN §5).
 *
 * The program is validated completely before any LLVM object is created,
 * so every input error comes back naming the function, call and argument
 * at fault; LLVM's verifier then guards against mistakes in this file.
 * Everything LLVM allocates lives in one LLVMContext owned by this call
 * and is disposed on every path (the suite runs under LeakSanitizer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "llvm_emit.h"

#include "fused_llvm.h" /* fk_optimize */
#include "stage_abi.h"

/* ------------------------------------------------------------ validation */

static const char *const type_names[] = {"void", "i32", "i64", "f32", "f64", "ptr"};
static const char *const arg_kind_names[] = {"i32", "i64", "f32", "f64", "arena+off",
                                             "slot+off", "null", "i64[]", "bytes", "errbuf"};

/* The parameter type an argument kind can be passed as. */
static LeType arg_type(LeArgKind k) {
    static const LeType t[] = {
        [LE_ARG_I32] = LE_I32,   [LE_ARG_I64] = LE_I64,  [LE_ARG_F32] = LE_F32,
        [LE_ARG_F64] = LE_F64,   [LE_ARG_ARENA] = LE_PTR, [LE_ARG_SLOT] = LE_PTR,
        [LE_ARG_NULL] = LE_PTR,  [LE_ARG_I64S] = LE_PTR,  [LE_ARG_BYTES] = LE_PTR,
        [LE_ARG_ERRBUF] = LE_PTR,
    };
    return t[k];
}

/* C identifiers only: names become symbols (stage_<name>) and strings. */
static int is_ident(const char *s) {
    if (!s || !*s || (*s >= '0' && *s <= '9')) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    return 1;
}

static const LeExtern *find_extern(const LeProgram *p, const char *name) {
    for (int i = 0; i < p->nexterns; i++)
        if (strcmp(p->externs[i].name, name) == 0) return &p->externs[i];
    return NULL;
}

static const LeFunc *find_func(const LeProgram *p, const char *name) {
    for (int i = 0; i < p->nfuncs; i++)
        if (strcmp(p->funcs[i].name, name) == 0) return &p->funcs[i];
    return NULL;
}

/* Symbols the generated module defines itself; externs may not take them. */
static int reserved_symbol(const LeProgram *p, const char *name, const char *entry) {
    if (strcmp(name, "main") == 0 || strncmp(name, "hetc_", 5) == 0) return 1;
    if (strncmp(name, "stage_", 6) == 0 && find_func(p, name + 6)) return 1;
    return entry && strcmp(name, entry) == 0;
}

static int check_arg(const LeProgram *p, const LeFunc *f, int ci, const LeExtern *ex, int ai,
                     IrError *err) {
    const LeArg *a = &f->calls[ci].args[ai];
    const char *fn = f->calls[ci].fn;
    if ((unsigned)a->kind > LE_ARG_ERRBUF)
        return ir_errorf(err, "stage function '%s', call %d (%s), argument %d: bad kind %d",
                         f->name, ci, fn, ai, (int)a->kind);
    if (arg_type(a->kind) != ex->params[ai])
        return ir_errorf(err,
                         "stage function '%s', call %d (%s), argument %d: %s argument for a "
                         "%s parameter",
                         f->name, ci, fn, ai, arg_kind_names[a->kind],
                         type_names[ex->params[ai]]);
    if (a->kind == LE_ARG_ARENA && (a->off < 0 || a->off >= p->arena_bytes))
        return ir_errorf(err,
                         "stage function '%s', call %d (%s), argument %d: arena offset %lld "
                         "outside the arena of %lld bytes",
                         f->name, ci, fn, ai, (long long)a->off, (long long)p->arena_bytes);
    if (a->kind == LE_ARG_SLOT && (a->off < 0 || a->off >= p->slot_bytes))
        return ir_errorf(err,
                         "stage function '%s', call %d (%s), argument %d: slot offset %lld "
                         "outside the activation slot of %lld bytes",
                         f->name, ci, fn, ai, (long long)a->off, (long long)p->slot_bytes);
    if (a->kind == LE_ARG_I64S && (a->n <= 0 || !a->vals))
        return ir_errorf(err,
                         "stage function '%s', call %d (%s), argument %d: empty i64 array",
                         f->name, ci, fn, ai);
    if (a->kind == LE_ARG_BYTES && (a->nbytes <= 0 || a->nbytes >= UINT32_MAX || !a->bytes))
        return ir_errorf(err,
                         "stage function '%s', call %d (%s), argument %d: empty constant bytes",
                         f->name, ci, fn, ai);
    if (a->kind == LE_ARG_I32 && (a->i < INT32_MIN || a->i > INT32_MAX))
        return ir_errorf(err,
                         "stage function '%s', call %d (%s), argument %d: %lld does not fit "
                         "in i32",
                         f->name, ci, fn, ai, (long long)a->i);
    return 0;
}

static int validate(const LeProgram *p, const char *entry, IrError *err) {
    if (!is_ident(entry)) return ir_errorf(err, "runtime entry point: bad name");
    if (p->arena_bytes < 0 || p->slot_base < 0 || p->slot_bytes < 0 || p->nslots < 0)
        return ir_errorf(err, "stage %d: negative arena or slot size", p->stage);
    /* Checked as (arena - base) / bytes so the product cannot overflow. */
    if (p->slot_bytes > 0 &&
        (p->slot_base > p->arena_bytes ||
         p->nslots > (p->arena_bytes - p->slot_base) / p->slot_bytes))
        return ir_errorf(err,
                         "stage %d: %d activation slots of %lld bytes at offset %lld do not "
                         "fit the arena of %lld bytes",
                         p->stage, p->nslots, (long long)p->slot_bytes,
                         (long long)p->slot_base, (long long)p->arena_bytes);
    const char *texts[3] = {p->ir_train, p->ir_update, p->config};
    static const char *const text_names[3] = {"ir_train", "ir_update", "config"};
    for (int i = 0; i < 3; i++)
        if (texts[i] && strlen(texts[i]) >= UINT32_MAX)
            return ir_errorf(err, "stage %d: %s text of %zu bytes is too long", p->stage,
                             text_names[i], strlen(texts[i]));
    if (p->nexterns < 0 || p->nfuncs <= 0 || p->nsched < 0 ||
        (p->nexterns && !p->externs) || !p->funcs || (p->nsched && !p->sched))
        return ir_errorf(err, "stage %d: no functions (or bad counts)", p->stage);

    for (int i = 0; i < p->nexterns; i++) {
        const LeExtern *e = &p->externs[i];
        if (!is_ident(e->name))
            return ir_errorf(err, "extern %d: '%s' is not a C identifier", i,
                             e->name ? e->name : "(null)");
        if (reserved_symbol(p, e->name, entry))
            return ir_errorf(err, "extern '%s': name is defined by the generated code",
                             e->name);
        if (find_extern(p, e->name) != e)
            return ir_errorf(err, "extern '%s' declared twice", e->name);
        if (e->ret != LE_VOID && e->ret != LE_I32)
            return ir_errorf(err, "extern '%s': result must be void or i32 (a status)",
                             e->name);
        if (e->nparams < 0 || e->nparams > LE_MAX_ARGS)
            return ir_errorf(err, "extern '%s': %d parameters (at most %d)", e->name,
                             e->nparams, LE_MAX_ARGS);
        for (int k = 0; k < e->nparams; k++)
            if (e->params[k] == LE_VOID || (unsigned)e->params[k] > LE_PTR)
                return ir_errorf(err, "extern '%s': parameter %d has no valid type", e->name,
                                 k);
    }

    for (int i = 0; i < p->nfuncs; i++) {
        const LeFunc *f = &p->funcs[i];
        if (!is_ident(f->name))
            return ir_errorf(err, "stage function %d: '%s' is not a C identifier", i,
                             f->name ? f->name : "(null)");
        if (find_func(p, f->name) != f)
            return ir_errorf(err, "stage function '%s' defined twice", f->name);
        if (f->ncalls < 0 || (f->ncalls && !f->calls))
            return ir_errorf(err, "stage function '%s': bad call list", f->name);
        for (int c = 0; c < f->ncalls; c++) {
            const LeCall *call = &f->calls[c];
            const LeExtern *ex = call->fn ? find_extern(p, call->fn) : NULL;
            if (!ex)
                return ir_errorf(err,
                                 "stage function '%s', call %d: unknown function '%s' (not "
                                 "among the program's %d externs)",
                                 f->name, c, call->fn ? call->fn : "(null)", p->nexterns);
            if (call->nargs != ex->nparams)
                return ir_errorf(err,
                                 "stage function '%s', call %d (%s): %d arguments, the "
                                 "function takes %d",
                                 f->name, c, call->fn, call->nargs, ex->nparams);
            for (int a = 0; a < call->nargs; a++)
                if (check_arg(p, f, c, ex, a, err)) return -1;
        }
    }

    for (int i = 0; i < p->nsched; i++) {
        const LeSched *s = &p->sched[i];
        if (s->kind != 'F' && s->kind != 'B')
            return ir_errorf(err, "schedule entry %d: kind must be 'F' or 'B'", i);
        if (s->microbatch < 0)
            return ir_errorf(err, "schedule entry %d: negative microbatch", i);
        const char *need = s->kind == 'F' ? "forward" : "backward";
        if (!find_func(p, need))
            return ir_errorf(err, "schedule entry %d (%c%d) needs a stage function '%s'", i,
                             s->kind, s->microbatch, need);
    }
    return 0;
}

/* ------------------------------------------------------------ module build */

typedef struct Emit {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef i8, i8p, i32, i64, f32, f64, vd;
    LLVMTypeRef stage_fn_ty; /* i32 (i8*, i8*) */
    LLVMTypeRef fn_desc_ty, sched_ty, desc_ty; /* stage_abi.h structs */
    const LeProgram *p;
} Emit;

static LLVMTypeRef llvm_type(Emit *e, LeType t) {
    switch (t) {
    case LE_VOID: return e->vd;
    case LE_I32: return e->i32;
    case LE_I64: return e->i64;
    case LE_F32: return e->f32;
    case LE_F64: return e->f64;
    case LE_PTR: return e->i8p;
    }
    return e->vd;
}

/* Mirrors stage_abi.h; a non-packed struct gets C's x86-64 layout from
 * the target data layout set on the module. */
static void le_abi_types(Emit *e) {
    LLVMTypeRef params[2] = {e->i8p, e->i8p};
    e->stage_fn_ty = LLVMFunctionType(e->i32, params, 2, 0);
    LLVMTypeRef fn_fields[4] = {e->i8p, LLVMPointerType(e->stage_fn_ty, 0), e->i32,
                                LLVMPointerType(e->i8p, 0)};
    e->fn_desc_ty = LLVMStructCreateNamed(e->ctx, "HetcStageFn");
    LLVMStructSetBody(e->fn_desc_ty, fn_fields, 4, 0);
    LLVMTypeRef sched_fields[2] = {e->i32, e->i32};
    e->sched_ty = LLVMStructCreateNamed(e->ctx, "HetcSchedEntry");
    LLVMStructSetBody(e->sched_ty, sched_fields, 2, 0);
    LLVMTypeRef desc_fields[13] = {e->i32, e->i32, e->i64, e->i64, e->i64, e->i32, e->i32,
                                   LLVMPointerType(e->fn_desc_ty, 0), e->i32,
                                   LLVMPointerType(e->sched_ty, 0), e->i8p, e->i8p, e->i8p};
    e->desc_ty = LLVMStructCreateNamed(e->ctx, "HetcStageDesc");
    LLVMStructSetBody(e->desc_ty, desc_fields, 13, 0);
}

/* A private constant global; returns it cast to `as`. */
static LLVMValueRef private_const(Emit *e, LLVMValueRef init, const char *name,
                                  LLVMTypeRef as) {
    LLVMValueRef g = LLVMAddGlobal(e->mod, LLVMTypeOf(init), name);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetUnnamedAddr(g, 1);
    return as ? LLVMConstBitCast(g, as) : g;
}

static LLVMValueRef const_string(Emit *e, const char *s) {
    LLVMValueRef str = LLVMConstStringInContext(e->ctx, s, (unsigned)strlen(s), 0);
    return private_const(e, str, ".str", e->i8p);
}

/* A NUL-terminated text (IR, config) as a private constant; NULL -> "". */
static LLVMValueRef text_global(Emit *e, const char *s, const char *name) {
    if (!s) s = "";
    LLVMValueRef str = LLVMConstStringInContext(e->ctx, s, (unsigned)strlen(s), 0);
    return private_const(e, str, name, e->i8p);
}

static LLVMValueRef i32c(Emit *e, int64_t v) {
    return LLVMConstInt(e->i32, (unsigned long long)v, 1);
}
static LLVMValueRef i64c(Emit *e, int64_t v) {
    return LLVMConstInt(e->i64, (unsigned long long)v, 1);
}

static LLVMValueRef declare_extern(Emit *e, const LeExtern *x, LLVMTypeRef *fty) {
    LLVMTypeRef params[LE_MAX_ARGS];
    for (int i = 0; i < x->nparams; i++) params[i] = llvm_type(e, x->params[i]);
    *fty = LLVMFunctionType(llvm_type(e, x->ret), params, (unsigned)x->nparams, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(e->mod, x->name);
    if (!fn) fn = LLVMAddFunction(e->mod, x->name, *fty);
    return fn;
}

static LLVMValueRef build_arg(Emit *e, const LeArg *a, LLVMValueRef arena, LLVMValueRef slot) {
    switch (a->kind) {
    case LE_ARG_I32: return i32c(e, a->i);
    case LE_ARG_I64: return i64c(e, a->i);
    case LE_ARG_F32: return LLVMConstReal(e->f32, a->f);
    case LE_ARG_F64: return LLVMConstReal(e->f64, a->f);
    case LE_ARG_NULL: return LLVMConstNull(e->i8p);
    case LE_ARG_ARENA:
    case LE_ARG_SLOT: {
        LLVMValueRef idx = i64c(e, a->off);
        return LLVMBuildInBoundsGEP2(e->b, e->i8, a->kind == LE_ARG_ARENA ? arena : slot,
                                     &idx, 1, "");
    }
    case LE_ARG_I64S: {
        LLVMValueRef *vals = malloc(sizeof *vals * (size_t)a->n);
        if (!vals) return NULL;
        for (int i = 0; i < a->n; i++) vals[i] = i64c(e, a->vals[i]);
        LLVMValueRef arr = LLVMConstArray(e->i64, vals, (unsigned)a->n);
        free(vals);
        return private_const(e, arr, ".dims", e->i8p);
    }
    case LE_ARG_ERRBUF: { /* one writable buffer per module, read by the runtime */
        LLVMValueRef g = LLVMGetNamedGlobal(e->mod, "hetc_kernel_err");
        if (!g) {
            LLVMTypeRef t = LLVMArrayType(e->i8, HETC_KERNEL_ERRLEN);
            g = LLVMAddGlobal(e->mod, t, "hetc_kernel_err");
            LLVMSetInitializer(g, LLVMConstNull(t));
        }
        return LLVMConstBitCast(g, e->i8p);
    }
    case LE_ARG_BYTES: { /* a constant tensor: aligned for any element type */
        LLVMValueRef str = LLVMConstStringInContext(e->ctx, a->bytes, (unsigned)a->nbytes, 1);
        LLVMValueRef g = private_const(e, str, ".cdata", NULL);
        LLVMSetAlignment(g, 64);
        return LLVMConstBitCast(g, e->i8p);
    }
    }
    return NULL;
}

/* i32 stage_<name>(i8* arena, i8* slot): the calls in order; a status
 * result that is nonzero returns the call's 1-based index. */
static int build_stage_fn(Emit *e, const LeFunc *f, LLVMValueRef *out, IrError *err) {
    char sym[256];
    snprintf(sym, sizeof sym, "stage_%s", f->name);
    LLVMValueRef fn = LLVMAddFunction(e->mod, sym, e->stage_fn_ty);
    LLVMValueRef arena = LLVMGetParam(fn, 0), slot = LLVMGetParam(fn, 1);
    LLVMSetValueName2(arena, "arena", 5);
    LLVMSetValueName2(slot, "slot", 4);
    LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(e->ctx, fn, "entry");
    LLVMPositionBuilderAtEnd(e->b, bb);
    for (int c = 0; c < f->ncalls; c++) {
        const LeCall *call = &f->calls[c];
        const LeExtern *x = find_extern(e->p, call->fn);
        LLVMTypeRef fty;
        LLVMValueRef callee = declare_extern(e, x, &fty);
        LLVMValueRef args[LE_MAX_ARGS];
        for (int a = 0; a < call->nargs; a++) {
            args[a] = build_arg(e, &call->args[a], arena, slot);
            if (!args[a])
                return ir_errorf(err, "stage function '%s', call %d: out of memory", f->name,
                                 c);
        }
        LLVMValueRef r = LLVMBuildCall2(e->b, fty, callee, args, (unsigned)call->nargs,
                                        x->ret == LE_VOID ? "" : "st");
        if (x->ret == LE_I32) {
            LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(e->ctx, fn, "fail");
            LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(e->ctx, fn, "ok");
            LLVMValueRef bad = LLVMBuildICmp(e->b, LLVMIntNE, r, i32c(e, 0), "bad");
            LLVMBuildCondBr(e->b, bad, fail, next);
            LLVMPositionBuilderAtEnd(e->b, fail);
            LLVMBuildRet(e->b, i32c(e, c + 1));
            LLVMPositionBuilderAtEnd(e->b, next);
        }
    }
    LLVMBuildRet(e->b, i32c(e, 0));
    *out = fn;
    return 0;
}

/* The HetcStageDesc global (stage_abi.h) with its function and schedule
 * tables; returns the descriptor. */
static LLVMValueRef build_tables(Emit *e, LLVMValueRef *fns) {
    const LeProgram *p = e->p;
    LLVMValueRef *fdesc = malloc(sizeof *fdesc * (size_t)p->nfuncs);
    if (!fdesc) return NULL;
    for (int i = 0; i < p->nfuncs; i++) {
        const LeFunc *f = &p->funcs[i];
        LLVMValueRef names = LLVMConstNull(LLVMPointerType(e->i8p, 0));
        if (f->ncalls > 0) {
            LLVMValueRef *nv = malloc(sizeof *nv * (size_t)f->ncalls);
            if (!nv) {
                free(fdesc);
                return NULL;
            }
            for (int c = 0; c < f->ncalls; c++) nv[c] = const_string(e, f->calls[c].fn);
            names = private_const(e, LLVMConstArray(e->i8p, nv, (unsigned)f->ncalls),
                                  ".calls", LLVMPointerType(e->i8p, 0));
            free(nv);
        }
        LLVMValueRef fields[4] = {const_string(e, f->name), fns[i], i32c(e, f->ncalls), names};
        fdesc[i] = LLVMConstNamedStruct(e->fn_desc_ty, fields, 4);
    }
    LLVMValueRef ftab = LLVMConstArray(e->fn_desc_ty, fdesc, (unsigned)p->nfuncs);
    free(fdesc);
    ftab = private_const(e, ftab, "hetc_stage_funcs", LLVMPointerType(e->fn_desc_ty, 0));

    LLVMValueRef stab = LLVMConstNull(LLVMPointerType(e->sched_ty, 0));
    if (p->nsched > 0) {
        LLVMValueRef *sv = malloc(sizeof *sv * (size_t)p->nsched);
        if (!sv) return NULL;
        for (int i = 0; i < p->nsched; i++) {
            LLVMValueRef fields[2] = {i32c(e, p->sched[i].kind), i32c(e, p->sched[i].microbatch)};
            sv[i] = LLVMConstNamedStruct(e->sched_ty, fields, 2);
        }
        stab = LLVMConstArray(e->sched_ty, sv, (unsigned)p->nsched);
        free(sv);
        stab = private_const(e, stab, "hetc_schedule", LLVMPointerType(e->sched_ty, 0));
    }

    /* ABI 2 strings: NULL is stored as "" so the runtime never sees NULL. */
    LLVMValueRef fields[13] = {i32c(e, HETC_STAGE_ABI_VERSION), i32c(e, p->stage),
                               i64c(e, p->arena_bytes), i64c(e, p->slot_base),
                               i64c(e, p->slot_bytes), i32c(e, p->nslots),
                               i32c(e, p->nfuncs), ftab, i32c(e, p->nsched), stab,
                               text_global(e, p->ir_train, "hetc_ir_train"),
                               text_global(e, p->ir_update, "hetc_ir_update"),
                               text_global(e, p->config, "hetc_config")};
    LLVMValueRef desc = LLVMAddGlobal(e->mod, e->desc_ty, "hetc_stage");
    LLVMSetInitializer(desc, LLVMConstNamedStruct(e->desc_ty, fields, 13));
    LLVMSetGlobalConstant(desc, 1);
    return desc;
}

/* int main(int argc, char **argv) { return entry(argc, argv, &hetc_stage); } */
static void build_main(Emit *e, const char *entry, LLVMValueRef desc) {
    LLVMTypeRef argvt = LLVMPointerType(e->i8p, 0);
    LLVMTypeRef mparams[2] = {e->i32, argvt};
    LLVMValueRef mainfn = LLVMAddFunction(e->mod, "main", LLVMFunctionType(e->i32, mparams, 2, 0));
    LLVMTypeRef eparams[3] = {e->i32, argvt, LLVMPointerType(e->desc_ty, 0)};
    LLVMTypeRef ety = LLVMFunctionType(e->i32, eparams, 3, 0);
    LLVMValueRef efn = LLVMAddFunction(e->mod, entry, ety);
    LLVMPositionBuilderAtEnd(e->b, LLVMAppendBasicBlockInContext(e->ctx, mainfn, "entry"));
    LLVMValueRef args[3] = {LLVMGetParam(mainfn, 0), LLVMGetParam(mainfn, 1), desc};
    LLVMBuildRet(e->b, LLVMBuildCall2(e->b, ety, efn, args, 3, "rc"));
}

/* Target machine for the host triple.  CPU "generic": a stage binary may
 * run on another node of the cluster than the one that compiled it. */
static LLVMTargetMachineRef host_machine(int opt_level, IrError *err) {
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
        ir_errorf(err, "LLVM: no native target in this LLVM build");
        return NULL;
    }
    char *triple = LLVMGetDefaultTargetTriple();
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        ir_errorf(err, "LLVM: target %s: %s", triple, msg ? msg : "unknown");
        LLVMDisposeMessage(msg);
        LLVMDisposeMessage(triple);
        return NULL;
    }
    static const LLVMCodeGenOptLevel levels[] = {LLVMCodeGenLevelNone, LLVMCodeGenLevelLess,
                                                 LLVMCodeGenLevelDefault,
                                                 LLVMCodeGenLevelAggressive};
    int lv = opt_level < 0 ? 0 : opt_level > 3 ? 3 : opt_level;
    /* PIC: Debian's cc links position-independent executables by default. */
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, "generic", "", levels[lv],
                                                      LLVMRelocPIC, LLVMCodeModelDefault);
    if (!tm) ir_errorf(err, "LLVM: cannot create a target machine for %s", triple);
    LLVMDisposeMessage(triple);
    return tm;
}

static int emit_files(Emit *e, const LeOptions *opt, IrError *err) {
    char *msg = NULL;
    if (LLVMVerifyModule(e->mod, LLVMReturnStatusAction, &msg)) {
        ir_errorf(err, "LLVM verifier rejected the stage module: %s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return -1;
    }
    LLVMDisposeMessage(msg);
    msg = NULL;
    if (opt->ll_path && LLVMPrintModuleToFile(e->mod, opt->ll_path, &msg)) {
        ir_errorf(err, "cannot write %s: %s", opt->ll_path, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return -1;
    }
    return 0;
}

static int build_module(Emit *e, const char *entry, IrError *err) {
    const LeProgram *p = e->p;
    le_abi_types(e);
    LLVMValueRef *fns = calloc((size_t)p->nfuncs, sizeof *fns);
    if (!fns) return ir_errorf(err, "out of memory");
    for (int i = 0; i < p->nfuncs; i++)
        if (build_stage_fn(e, &p->funcs[i], &fns[i], err)) {
            free(fns);
            return -1;
        }
    LLVMValueRef desc = build_tables(e, fns);
    free(fns);
    if (!desc) return ir_errorf(err, "out of memory");
    build_main(e, entry, desc);
    if (p->define && p->define(p->define_ctx, e->mod, err)) return -1;
    return 0;
}

int le_emit_program(const LeProgram *prog, const LeOptions *opt, IrError *err) {
    if (!prog || !opt || !opt->obj_path) return ir_errorf(err, "le_emit_program: no program or output path");
    const char *entry = prog->entry ? prog->entry : "hetrt_stage_main";
    if (validate(prog, entry, err)) return ir_error_prefix_stage(err, "codegen", prog->stage);

    LLVMTargetMachineRef tm = host_machine(opt->opt_level, err);
    if (!tm) return -1;
    Emit e = {0};
    e.p = prog;
    e.ctx = LLVMContextCreate();
    char modname[64];
    snprintf(modname, sizeof modname, "stage_%d", prog->stage);
    e.mod = LLVMModuleCreateWithNameInContext(modname, e.ctx);
    e.b = LLVMCreateBuilderInContext(e.ctx);
    e.i8 = LLVMInt8TypeInContext(e.ctx);
    e.i8p = LLVMPointerType(e.i8, 0);
    e.i32 = LLVMInt32TypeInContext(e.ctx);
    e.i64 = LLVMInt64TypeInContext(e.ctx);
    e.f32 = LLVMFloatTypeInContext(e.ctx);
    e.f64 = LLVMDoubleTypeInContext(e.ctx);
    e.vd = LLVMVoidTypeInContext(e.ctx);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(e.mod, triple);
    LLVMDisposeMessage(triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(e.mod, dl);
    LLVMDisposeTargetData(dl);

    int rc = build_module(&e, entry, err);
    /* generated loop nests: vectorize them (the loop vectorizer is an IR pass) */
    if (rc == 0 && prog->define && opt->opt_level > 0) {
        char *msg = NULL;
        if (LLVMVerifyModule(e.mod, LLVMReturnStatusAction, &msg))
            rc = ir_errorf(err, "LLVM verifier rejected the stage module: %s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        if (rc == 0) rc = fk_optimize(e.mod, tm, 3, err);
    }
    if (rc == 0) rc = emit_files(&e, opt, err);
    if (rc == 0) {
        char *msg = NULL;
        if (LLVMTargetMachineEmitToFile(tm, e.mod, (char *)opt->obj_path, LLVMObjectFile, &msg)) {
            rc = ir_errorf(err, "LLVM: cannot write object %s: %s", opt->obj_path,
                           msg ? msg : "");
            unlink(opt->obj_path);
        }
        LLVMDisposeMessage(msg);
    }
    LLVMDisposeBuilder(e.b);
    LLVMDisposeModule(e.mod);
    LLVMContextDispose(e.ctx);
    LLVMDisposeTargetMachine(tm);
    if (rc || !opt->exe_path) return rc ? ir_error_prefix_stage(err, "codegen", prog->stage) : 0;

    /* cc OBJ LINK_ARGS... -o EXE */
    int n = 0;
    const char **argv = malloc(sizeof *argv * (size_t)(opt->nlink_args + 5));
    if (!argv) return ir_errorf(err, "out of memory");
    argv[n++] = opt->cc ? opt->cc : "cc";
    argv[n++] = opt->obj_path;
    for (int i = 0; i < opt->nlink_args; i++) argv[n++] = opt->link_args[i];
    argv[n++] = "-o";
    argv[n++] = opt->exe_path;
    argv[n] = NULL;
    rc = le_run_tool(argv, err);
    free(argv);
    if (rc) return ir_error_prefix(err, "codegen stage %d: linking %s", prog->stage,
                                   opt->exe_path);
    return 0;
}
