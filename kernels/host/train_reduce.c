/* Gradient of numpy broadcasting: sum a gradient down to an input's shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_train.h"
#include "hk_ws.h"

int hk_reduce_sum_to_shape_f32(const float *g, int grank, const int64_t *gdims, int rank,
                               const int64_t *dims, float *out, char *err)
{
    if (grank < 0 || grank > HK_MAX_RANK || rank < 0 || rank > grank) {
        if (err)
            snprintf(err, HK_ERRLEN, "reduce-sum-to-shape: rank %d does not broadcast to rank %d",
                     rank, grank);
        return -1;
    }
    /* Right-align the input's dims under g's; an input axis of extent 1
     * (or a missing leading axis) gets output stride 0, i.e. is summed. */
    int64_t ostride[HK_MAX_RANK], acc = 1;
    for (int i = grank - 1; i >= 0; i--) {
        int j = i - (grank - rank);
        int64_t d = j >= 0 ? dims[j] : 1;
        if (d != gdims[i] && d != 1) {
            if (err)
                snprintf(err, HK_ERRLEN,
                         "reduce-sum-to-shape: input axis %d of extent %lld does not broadcast "
                         "to %lld",
                         j, (long long)d, (long long)gdims[i]);
            return -1;
        }
        ostride[i] = (d == 1) ? 0 : acc;
        acc *= d;
    }
    int64_t on = acc, gn = 1;
    for (int i = 0; i < grank; i++)
        gn *= gdims[i];
    double *s = hk_ws_zero(HK_WS_SUM_TO, sizeof(double) * (size_t)(on > 0 ? on : 1));
    if (!s) {
        if (err)
            snprintf(err, HK_ERRLEN, "reduce-sum-to-shape: out of memory");
        return -1;
    }
    /* the common shapes (bias gradients: sum over leading axes; sums over
     * trailing or middle axes) in parallel over outputs, same order */
    int red[HK_MAX_RANK];
    for (int i = 0; i < grank; i++)
        red[i] = ostride[i] == 0;
    int64_t bo, br, bi;
    if (gn > 0 && hk_mid_block(grank, gdims, red, &bo, &br, &bi)) {
        hk_sum_mid_f32(g, bo, br, bi, s);
        gn = 0; /* done */
    }
    int64_t idx[HK_MAX_RANK] = {0}, o = 0;
    for (int64_t k = 0; k < gn; k++) {
        s[o] += g[k];
        /* odometer increment of idx over gdims, tracking the output offset */
        for (int i = grank - 1; i >= 0; i--) {
            idx[i]++;
            o += ostride[i];
            if (idx[i] < gdims[i])
                break;
            o -= ostride[i] * idx[i];
            idx[i] = 0;
        }
    }
    for (int64_t k = 0; k < on; k++)
        out[k] = (float)s[k];
    return 0;
}
