/* Tiny test harness shared by the IR unit tests. */
#ifndef HETC_TEST_IR_H
#define HETC_TEST_IR_H

#include <stdio.h>

#include "ir.h"

/* Failures are counted per test run; the counter lives in test_ir.c. */
extern int test_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

/* Deterministic PRNG (splitmix64) so failures reproduce. */
static inline unsigned long long test_rand(unsigned long long *s) {
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void test_text(const char *golden_dir);
void test_verify(void);
void test_graph(void);

#endif
