/* llvm_emit's error paths: each bad program or link must come back as a
 * message naming what is wrong, leave no object behind when validation
 * fails, and not crash or leak (run under ASan/LSan in the sanitizer
 * build).  usage: test_llvm_emit_errors WORKDIR CC */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llvm_emit.h"

static int failures;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
            failures++;                                                         \
        }                                                                       \
    } while (0)

static const LeExtern ext[] = {
    {"ext_fn", LE_I32, 3, {LE_PTR, LE_I64, LE_F64}},
};

typedef struct Case {
    const char *name;
    LeProgram prog;
    const char *want[3]; /* substrings the message must contain */
} Case;

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void expect_error(const char *dir, const Case *c) {
    char obj[4096];
    snprintf(obj, sizeof obj, "%s/%s.o", dir, c->name);
    unlink(obj);
    LeOptions opt = {.obj_path = obj};
    IrError err = {{0}};
    int rc = le_emit_program(&c->prog, &opt, &err);
    CHECK(rc == -1, "%s: expected an error, got %d", c->name, rc);
    for (int i = 0; i < 3 && c->want[i]; i++)
        CHECK(strstr(err.msg, c->want[i]), "%s: message lacks '%s': %s", c->name, c->want[i],
              err.msg);
    CHECK(!file_exists(obj), "%s: object written despite the error", c->name);
}

#define ARENA(o) {.kind = LE_ARG_ARENA, .off = (o)}
#define I64(v) {.kind = LE_ARG_I64, .i = (v)}
#define F64(v) {.kind = LE_ARG_F64, .f = (v)}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s WORKDIR CC\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *cc = argv[2];
    mkdir(dir, 0777);

    const LeCall ok_call[] = {{"ext_fn", 3, {ARENA(8), I64(4), F64(1.5)}}};
    const LeCall unknown[] = {{"ext_fn", 3, {ARENA(8), I64(4), F64(1.5)}},
                              {"hk_nope", 0, {{0}}}};
    const LeCall nargs[] = {{"ext_fn", 2, {ARENA(8), I64(4)}}};
    const LeCall kind[] = {{"ext_fn", 3, {F64(2.0), I64(4), F64(1.5)}}};
    const LeCall range[] = {{"ext_fn", 3, {ARENA(64), I64(4), F64(1.5)}}};
    const LeCall slotr[] = {{"ext_fn", 3, {{.kind = LE_ARG_SLOT, .off = 16}, I64(4), F64(1)}}};
    const LeFunc f_ok[] = {{"forward", 1, ok_call}};
    const LeSched sched_b[] = {{'B', 0}};
    const LeExtern reserved[] = {{"main", LE_VOID, 0, {0}}};

#define PROG(...) {.arena_bytes = 64, .nexterns = 1, .externs = ext, .nfuncs = 1, __VA_ARGS__}
    const Case cases[] = {
        {"unknown_callee", PROG(.funcs = (const LeFunc[]){{"forward", 2, unknown}}),
         {"stage function 'forward', call 1", "unknown function 'hk_nope'"}},
        {"arg_count", PROG(.funcs = (const LeFunc[]){{"forward", 1, nargs}}),
         {"call 0 (ext_fn)", "2 arguments, the function takes 3"}},
        {"arg_kind", PROG(.funcs = (const LeFunc[]){{"forward", 1, kind}}),
         {"argument 0", "f64 argument for a ptr parameter"}},
        {"arena_range", PROG(.funcs = (const LeFunc[]){{"forward", 1, range}}),
         {"arena offset 64 outside the arena of 64 bytes"}},
        {"slot_range", PROG(.funcs = (const LeFunc[]){{"forward", 1, slotr}}),
         {"slot offset 16 outside the activation slot of 0 bytes"}},
        {"slots_fit", PROG(.funcs = f_ok, .slot_base = 32, .slot_bytes = 16, .nslots = 3),
         {"3 activation slots of 16 bytes at offset 32 do not fit"}},
        {"sched_needs_fn", PROG(.funcs = f_ok, .nsched = 1, .sched = sched_b),
         {"schedule entry 0 (B0)", "'backward'"}},
        {"reserved_name", {.arena_bytes = 64, .nexterns = 1, .externs = reserved, .nfuncs = 1,
                           .funcs = f_ok},
         {"extern 'main'", "defined by the generated code"}},
        {"dup_fn", {.arena_bytes = 64, .nexterns = 1, .externs = ext, .nfuncs = 2,
                    .funcs = (const LeFunc[]){{"forward", 1, ok_call}, {"forward", 1, ok_call}}},
         {"stage function 'forward' defined twice"}},
        {"bad_fn_name", PROG(.funcs = (const LeFunc[]){{"for ward", 1, ok_call}}),
         {"not a C identifier"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_error(dir, &cases[i]);

    /* Valid program, object only: an ELF object appears. */
    LeProgram good = PROG(.funcs = f_ok);
    char obj[4096], exe[4096];
    snprintf(obj, sizeof obj, "%s/good.o", dir);
    snprintf(exe, sizeof exe, "%s/good", dir);
    IrError err = {{0}};
    LeOptions opt = {.obj_path = obj};
    CHECK(le_emit_program(&good, &opt, &err) == 0, "good: %s", err.msg);
    FILE *f = fopen(obj, "rb");
    unsigned char magic[4] = {0};
    CHECK(f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "\x7f" "ELF", 4) == 0,
          "good.o is not an ELF object");
    if (f) fclose(f);

    /* Linking without a runtime: the linker's own complaint comes back. */
    opt.exe_path = exe;
    opt.cc = cc;
    err.msg[0] = 0;
    CHECK(le_emit_program(&good, &opt, &err) == -1, "link without runtime succeeded");
    CHECK(strstr(err.msg, "linking") && strstr(err.msg, "hetrt_stage_main"),
          "undefined runtime entry not reported: %s", err.msg);
    CHECK(strstr(err.msg, "ext_fn"), "undefined extern not reported: %s", err.msg);

    /* A library that does not exist. */
    const char *libs[] = {"-lhetc_no_such_library"};
    opt.nlink_args = 1;
    opt.link_args = libs;
    err.msg[0] = 0;
    CHECK(le_emit_program(&good, &opt, &err) == -1, "link with missing library succeeded");
    CHECK(strstr(err.msg, "hetc_no_such_library"), "missing library not named: %s", err.msg);

    /* No such compiler driver. */
    opt.cc = "hetc-no-such-cc";
    opt.nlink_args = 0;
    err.msg[0] = 0;
    CHECK(le_emit_program(&good, &opt, &err) == -1, "missing cc succeeded");
    CHECK(strstr(err.msg, "cannot run hetc-no-such-cc"), "missing cc not named: %s", err.msg);

    /* le_run_tool passes arguments verbatim (no shell): a ';' stays a byte. */
    const char *echo[] = {"sh", "-c", "test \"$0\" = 'a; exit 3'", "a; exit 3", NULL};
    CHECK(le_run_tool(echo, &err) == 0, "argument with shell metacharacters mangled: %s",
          err.msg);
    const char *fail[] = {"sh", "-c", "echo boom >&2; exit 4", NULL};
    err.msg[0] = 0;
    CHECK(le_run_tool(fail, &err) == -1 && strstr(err.msg, "exit status 4") &&
              strstr(err.msg, "boom"),
          "tool failure not reported with stderr: %s", err.msg);

    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
