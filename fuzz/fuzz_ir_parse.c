/* libFuzzer target for the text IR parser.
 *
 * Any bytes: ir_parse must return a graph or a located error, never crash.
 * When it returns a graph, the printer/parser contract must hold on it:
 * print -> parse succeeds and prints the same text again.  A violation
 * aborts, which libFuzzer reports as a crash: that is a real bug.
 *
 * Built with -DFUZZ_REPLAY_MAIN it gets a plain main() that runs the same
 * check over files named on the command line (a corpus replay without
 * libFuzzer; tests/ir registers it over the golden and regression files). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static void fail(const char *what, const char *detail, const char *text) {
    fprintf(stderr, "fuzz_ir_parse: %s\n%s\n--- text ---\n%s\n", what, detail ? detail : "",
            text ? text : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    IrError err;
    err.msg[0] = 0;
    IrGraph *g = ir_parse(text, "fuzz.ir", &err);
    if (!g) {
        if (strncmp(err.msg, "fuzz.ir:", 8) != 0)
            fail("error without file:line:col", err.msg, text);
        free(text);
        return 0;
    }
    char *t1 = ir_print_to_string(g, NULL);
    if (!t1) fail("ir_print_to_string failed", NULL, text);
    IrGraph *g2 = ir_parse(t1, "printed.ir", &err);
    if (!g2) fail("printed text does not parse", err.msg, t1);
    char *t2 = ir_print_to_string(g2, NULL);
    if (!t2 || strcmp(t1, t2) != 0) fail("print(parse(print(g))) != print(g)", t2, t1);

    /* The verifier and graph edits must cope with whatever parses. */
    (void)ir_verify(g, 0, &err);
    (void)ir_verify(g, 1, &err);
    if (ir_graph_toposort(g2, &err) == 0) {
        ir_graph_compact(g2);
        char *t3 = ir_print_to_string(g2, NULL);
        free(t3);
    }
    free(t1);
    free(t2);
    ir_graph_free(g);
    ir_graph_free(g2);
    free(text);
    return 0;
}

#ifdef FUZZ_REPLAY_MAIN
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "fuzz_ir_parse: cannot open %s\n", argv[i]);
            return 2;
        }
        size_t cap = 1 << 16, len = 0, r;
        uint8_t *buf = malloc(cap);
        while (buf && (r = fread(buf + len, 1, cap - len, f)) > 0) {
            len += r;
            if (len == cap) buf = realloc(buf, cap *= 2);
        }
        fclose(f);
        if (!buf) return 2;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
    }
    printf("fuzz_ir_parse: %d input(s) replayed\n", argc - 1);
    return 0;
}
#endif
