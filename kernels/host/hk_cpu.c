/* hk_vector_isa: hk_cpu.h. */
#include "hk_cpu.h"

#include <stdlib.h>

int hk_vector_isa(void) {
    int isa = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) isa = 2;
    else if (__builtin_cpu_supports("avx2")) isa = 1;
#endif
    const char *cap = getenv("HETC_VECTOR_ISA");
    if (cap && cap[0] >= '0' && cap[0] <= '2' && !cap[1] && cap[0] - '0' < isa) isa = cap[0] - '0';
    return isa;
}
