/* test_ir: IR unit tests.  Usage: test_ir GOLDEN_DIR */
#include <stdio.h>

#include "test_ir.h"

int test_failures = 0;

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
        return 2;
    }
    test_text(argv[1]);
    test_verify();
    test_graph();
    if (test_failures) {
        fprintf(stderr, "test_ir: %d check(s) failed\n", test_failures);
        return 1;
    }
    printf("test_ir: all checks passed\n");
    return 0;
}
