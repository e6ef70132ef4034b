/* FNV-1a 64 (Fowler/Noll/Vo, the 64-bit FNV-1a of draft-eastlake-fnv and
 * isthe.com/chongo/tech/comp/fnv): h = offset basis; for each byte
 * h = (h ^ byte) * prime, modulo 2^64.  One definition for the compiler
 * (ir_fnv1a: constant hashes in the text IR, name tables) and the runtime
 * (rt_fnv1a64: checkpoint checksums), so any outside FNV-1a 64
 * implementation reproduces both.
 *
 * Header-only (static inline) and free of ir/ and runtime/ headers: common/
 * sits below both (docs DESIGN §2: the runtime knows nothing of the
 * compiler), and a header adds no library to the stage binaries' link line. */
#ifndef HETC_FNV1A_H
#define HETC_FNV1A_H

#include <stddef.h>
#include <stdint.h>

#define HETC_FNV1A64_BASIS 14695981039346656037ull /* 0xcbf29ce484222325 */
#define HETC_FNV1A64_PRIME 1099511628211ull        /* 2^40 + 2^8 + 0xb3 */

/* FNV-1a 64 of n bytes continued from state h: hetc_fnv1a64_from(
 * HETC_FNV1A64_BASIS, ...) is the standard hash; another h only serves
 * formats that were written with another start (checkpoint versions 1-2). */
static inline uint64_t hetc_fnv1a64_from(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= HETC_FNV1A64_PRIME;
    }
    return h;
}

static inline uint64_t hetc_fnv1a64(const void *data, size_t n)
{
    return hetc_fnv1a64_from(HETC_FNV1A64_BASIS, data, n);
}

#endif
