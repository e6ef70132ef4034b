/* Plain-C entry points for compiled stage code (codegen/lower_node.c): thin
 * wrappers where a kernel of hk.h / hk_train.h cannot be called directly
 * with compile-time constants (an int array where the compiler has int64
 * constants, a scalar operand that lives in memory, pointer arrays).  Like
 * hk.h they know nothing of the IR.  Status results: 0 or -1. */
#ifndef HETC_HK_ENTRY_H
#define HETC_HK_ENTRY_H

#include <stddef.h>
#include <stdint.h>

/* hk_reduce with the reduced axes as int64 flags (reduce[i] != 0). */
int hk_entry_reduce(int op, int dt, const void *x, int rank, const int64_t *dims,
                    const int64_t *reduce, void *y, char *err);
/* One input of a Concat: x (rank, xdims) copied into y at offset `at` along
 * `axis`, y's extent there being ydim (y's other dims are x's). */
void hk_entry_concat_part(size_t esize, const void *x, int rank, const int64_t *xdims, int axis,
                          int64_t at, int64_t ydim, void *y);
/* SliceGrad: dx (rank, xdims) = 0, then dx[start + i * step] += dy[i] over
 * dy's dims ydims (the Slice resolved at compile time). */
void hk_entry_slice_grad_f32(const float *dy, int rank, const int64_t *xdims,
                             const int64_t *start, const int64_t *step, const int64_t *ydims,
                             float *dx);
/* hk_cross_entropy_bwd_f32 with dloss read from memory (a scalar tensor). */
int hk_entry_ce_bwd_f32(const float *logits, int tdt, const void *targets, int64_t N, int64_t V,
                        int use_ignore, int64_t ignore_index, const float *dloss,
                        float *dlogits, char *err);
/* hk_adamw_fused_f32 with lr and step read from memory (the arena's
 * scalars, written by the runtime each step); clip_scale may be NULL. */
int hk_entry_adamw_f32(const float *p, const float *m, const float *v, const float *g, int64_t n,
                       const float *lr, const int64_t *step, const float *clip_scale,
                       double beta1, double beta2, double eps, double weight_decay,
                       float *p_out, float *m_out, float *v_out, char *err);
/* n bytes of y set to the byte value v (a bool mask of ones, ...). */
void hk_entry_memset(void *y, int v, int64_t n);

#endif
