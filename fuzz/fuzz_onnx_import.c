/* libFuzzer target: hetc_import_onnx_buffer on arbitrary bytes.
 *
 * External-data references resolve under a scratch model directory made once
 * per process (LLVMFuzzerInitialize) holding a small weight file, a
 * subdirectory and a symlink that points outside, so the fuzzer can reach the
 * validation paths.  Whatever the importer accepts must also map: every
 * external reference it validated is read back with ir_value_data.
 */
#include "onnx_import.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The fuzzer API gives no context pointer: the scratch dir is process state. */
static char model_dir[4096];

/* the scratch dir's four entries, at exit (libFuzzer ends with exit()) */
static void remove_model_dir(void) {
    static const char *const names[] = {"w.bin", "out.bin"};
    char p[4200];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", model_dir, names[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/sub", model_dir);
    rmdir(p);
    rmdir(model_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* under TMPDIR (scripts/test gives the suite its own), else /tmp */
    const char *t = getenv("TMPDIR");
    if (!t || !*t || strlen(t) > 4000) t = "/tmp";
    snprintf(model_dir, sizeof model_dir, "%s/hetc_fuzz_onnx_XXXXXX", t);
    if (!mkdtemp(model_dir)) abort();
    atexit(remove_model_dir);
    char p[4200];
    snprintf(p, sizeof p, "%s/w.bin", model_dir);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    for (int i = 0; i < 4096; i++) fputc(i & 255, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/sub", model_dir);
    if (access(p, F_OK) != 0 && mkdir(p, 0755) != 0) abort();
    snprintf(p, sizeof p, "%s/out.bin", model_dir);
    if (symlink("/etc/passwd", p) != 0) { /* best effort */ }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    HetcImportOptions opt;
    hetc_import_options_default(&opt);
    /* bind the common names sometimes, so both binding paths run */
    if (size && (data[0] & 1)) opt.batch = 2, opt.seq = 3;
    if (size && (data[0] & 2)) opt.allow_unbound = 1;
    IrError err;
    err.msg[0] = 0;
    IrGraph *g = hetc_import_onnx_buffer(data, size, model_dir, &opt, &err);
    if (!g) {
        if (!err.msg[0]) abort(); /* failures must say why */
        return 0;
    }
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        if (v->has_ext && !ir_value_data(v, &err)) {
            fprintf(stderr, "validated external data does not map: %s\n", err.msg);
            abort();
        }
    }
    ir_graph_free(g);
    return 0;
}
