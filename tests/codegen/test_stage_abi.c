/* The stage ABI table (runtime/abi/stage_abi.def) against both of its
 * users: every row is defined by the stage runtime this binary links (the
 * host's hetrt_stage + hetrt_interp, or with HETC_TEST_CUDA the CUDA
 * backend's hetrt_stage_cuda + hetrt_interp_cuda): taking each entry's
 * address fails at link time when a row has no definition; and the
 * compiler's extern lists (lower_hetrt_externs, _tp, lower_node_externs'
 * hetrt rows, each backend row's own externs) hold exactly the rows of
 * their sets, so a call codegen may emit always has a runtime definition
 * and every runtime entry is callable. */
#include <stdio.h>
#include <string.h>

#include "llvm_emit.h"
#include "lower_node.h"
#include "lower_stage.h"
#include "stage_abi.h"

enum { S_CORE, S_TP, S_TP_KERNEL, S_CUDA, S_COUNT };
static const char *const set_names[S_COUNT] = {"CORE", "TP", "TP_KERNEL", "CUDA"};

typedef struct Row {
    const char *name;
    int set;
    const void *addr; /* the runtime's definition (a link error if there is none) */
} Row;

#define ROW(set, name) {#name, set, (const void *)&name},
#define ROW_CORE(name) ROW(S_CORE, name)
#define ROW_TP(name) ROW(S_TP, name)
#define ROW_TP_KERNEL(name) ROW(S_TP_KERNEL, name)
#ifdef HETC_TEST_CUDA
#define ROW_CUDA(name) ROW(S_CUDA, name)
#else /* the host runtime does not define the CUDA backend's entries */
#define ROW_CUDA(name) {#name, S_CUDA, NULL},
#endif
#define HETC_ABI_ENTRY(set, ret, name, params) ROW_##set(name)
static const Row rows[] = {
#include "stage_abi.def"
};
enum { NROWS = (int)(sizeof rows / sizeof rows[0]) };

static int fails;
#define CHECK(c, ...)                                                                  \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
            fails++;                                                                   \
        }                                                                              \
    } while (0)

static const Row *row_of(const char *name) {
    for (int i = 0; i < NROWS; i++)
        if (!strcmp(rows[i].name, name)) return &rows[i];
    return NULL;
}

/* list (only its hetrt_* entries when hetrt_only) == the rows of the sets in mask */
static void same_rows(const char *what, const LeExtern *list, int n, unsigned mask,
                      int hetrt_only) {
    int listed = 0;
    for (int i = 0; i < n; i++) {
        if (hetrt_only && strncmp(list[i].name, "hetrt_", 6)) continue;
        listed++;
        const Row *r = row_of(list[i].name);
        CHECK(r, "%s: %s is no row of stage_abi.def", what, list[i].name);
        if (r)
            CHECK(mask >> r->set & 1, "%s: %s is a %s row", what, list[i].name,
                  set_names[r->set]);
    }
    int want = 0;
    for (int i = 0; i < NROWS; i++) {
        if (!(mask >> rows[i].set & 1)) continue;
        want++;
        int found = 0;
        for (int j = 0; j < n; j++) found |= !strcmp(list[j].name, rows[i].name);
        CHECK(found, "%s: the %s row %s is missing", what, set_names[rows[i].set],
              rows[i].name);
    }
    CHECK(listed == want, "%s: %d hetrt entries, the .def has %d", what, listed, want);
}

int main(void) {
    int defined = 0;
    for (int i = 0; i < NROWS; i++) defined += rows[i].addr != NULL;
    same_rows("lower_hetrt_externs", lower_hetrt_externs, lower_hetrt_nexterns, 1u << S_CORE, 0);
    same_rows("lower_hetrt_externs_tp", lower_hetrt_externs_tp, lower_hetrt_nexterns_tp,
              1u << S_CORE | 1u << S_TP, 0);
    same_rows("lower_node_externs", lower_node_externs, lower_node_nexterns, 1u << S_TP_KERNEL,
              1);
    same_rows("lower_backend_cuda", lower_backend_cuda.externs, lower_backend_cuda.nexterns,
              1u << S_CUDA, 0);
    CHECK(lower_backend_host.nexterns == 0, "the host backend has %d entries of its own",
          lower_backend_host.nexterns);
    /* the compiler's types of a row agree with the row's C parameter count */
    for (int i = 0; i < lower_hetrt_nexterns_tp; i++)
        CHECK(lower_hetrt_externs_tp[i].ret == LE_I32 && lower_hetrt_externs_tp[i].nparams > 0,
              "%s: result or parameters", lower_hetrt_externs_tp[i].name);
    printf("stage_abi.def: %d rows, %d defined by this runtime; %s\n", NROWS, defined,
           fails ? "FAILED" : "ok");
    return fails != 0;
}
