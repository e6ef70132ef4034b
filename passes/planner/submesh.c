/* Submesh shapes of HAPT §5.2 (after Alpa): powers of two inside one node,
 * then whole nodes.  See hapt_dp.h. */
#include "hapt_dp.h"

int submesh_enumerate(int N, int M, Submesh *out, int cap)
{
    if (N <= 0 || M <= 0)
        return 0;
    int n = 0;
#define PUT(a, b)                                                                                  \
    do {                                                                                           \
        if (out && n < cap)                                                                        \
            out[n] = (Submesh){(a), (b)};                                                          \
        n++;                                                                                       \
    } while (0)
    int m = 1;
    for (; m < M; m *= 2)
        PUT(1, m);
    /* m == M when M is a power of two; otherwise (1,M) is added on top of
     * the powers of two below it (§5.2 assumes 2^p = M). */
    PUT(1, M);
    for (int k = 2; k <= N; k++)
        PUT(k, M);
#undef PUT
    return n;
}
