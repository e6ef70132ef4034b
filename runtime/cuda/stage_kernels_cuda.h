/* The bodies of the CUDA backend's direct-call entries (stage_abi.h
 * hetrt_cu_*), on an explicit kernel context: the entries call them with
 * the stage's HkcCtx; tests/cuda/test_cuda_direct.c calls them on its own
 * and compares each with its host twin (kernels/host).  0, or nonzero with
 * the reason in err (HKC_ERRLEN). */
#ifndef HETRT_STAGE_KERNELS_CUDA_H
#define HETRT_STAGE_KERNELS_CUDA_H

#include <stdint.h>

#include "hkc.h"

int cu_direct_binary(HkcCtx *k, int op, int rank, const int64_t *dims, const float *a,
                     const int64_t *sa, const float *b, const int64_t *sb, float *y, char *err);
int cu_direct_linear(HkcCtx *k, const float *x, const float *w, const float *b, int64_t M,
                     int64_t K, int64_t N, float *y, char *err);
int cu_direct_linear_grad(HkcCtx *k, const float *x, const float *w, const float *dy, int64_t M,
                          int64_t K, int64_t N, float *dx, float *dw, float *db, char *err);
/* the fused AdamW step, in place allowed; lr, step and clip_scale (NULL:
 * none) are device scalars (the arena's, written by the runtime) */
int cu_direct_adamw(HkcCtx *k, const float *p, const float *m, const float *v, const float *g,
                    int64_t n, const float *lr, const int64_t *step, const float *clip_scale,
                    double beta1, double beta2, double eps, double weight_decay, float *p_out,
                    float *m_out, float *v_out, char *err);
/* LayerNorm (rms 0, bias may be NULL) / RMSNorm (rms 1) over rows of n */
int cu_direct_norm(HkcCtx *k, int rms, const float *x, const float *scale, const float *bias,
                   int64_t rows, int64_t n, double eps, float *y, char *err);
/* their backward; stats: 2*rows + 1 floats of device scratch; dx, dscale,
 * dbias may be NULL */
int cu_direct_norm_grad(HkcCtx *k, int rms, const float *x, const float *scale, const float *dy,
                        int64_t rows, int64_t n, double eps, float *stats, float *dx,
                        float *dscale, float *dbias, char *err);

#endif
