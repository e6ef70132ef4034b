/* The ZeRO model-state formula (zero_memory.h has the equations). */
#include "zero_memory.h"

double zero_state_bytes_per_param(double dtype_bytes, int zero, int dp)
{
    if (zero < 0)
        zero = 0;
    if (zero > 3)
        zero = 3;
    double n = dp > 1 ? dp : 1;
    double w = dtype_bytes, g = dtype_bytes;
    /* the fp32 master copy: mixed precision, or the fp32 slice the ZeRO
     * update keeps (zero_memory.h) */
    double master = dtype_bytes < 4 || zero >= 1 ? 4.0 : 0.0, adam = 8.0;
    if (zero >= 1) { /* P_os: optimizer states, master included */
        master /= n;
        adam /= n;
    }
    if (zero >= 2) /* P_os+g */
        g /= n;
    if (zero >= 3) /* P_os+g+p */
        w /= n;
    return w + g + master + adam;
}
