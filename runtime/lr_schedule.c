/* Learning-rate schedules; formulas in lr_schedule.h. */
#include "lr_schedule.h"

#include <math.h>
#include <string.h>

double rt_lr_at(const RtLrSchedule *s, int64_t step)
{
    if (s->kind != RT_LR_COSINE)
        return s->max_lr;
    int64_t W = s->warmup_steps > 0 ? s->warmup_steps : 0, D = s->decay_steps;
    double min_lr = s->max_lr * s->min_lr_ratio;
    if (step < W)
        return s->max_lr * ((double)step + 1.0) / ((double)W + 1.0); /* W may be INT64_MAX */
    if (D <= W)
        return s->max_lr;
    if (step > D)
        return min_lr;
    double r = (double)(step - W) / (double)(D - W);
    return min_lr + 0.5 * (1.0 + cos(M_PI * r)) * (s->max_lr - min_lr);
}

int rt_lr_kind_from_name(const char *name, RtLrKind *kind)
{
    if (strcmp(name, "constant") == 0)
        *kind = RT_LR_CONSTANT;
    else if (strcmp(name, "cosine") == 0)
        *kind = RT_LR_COSINE;
    else
        return -1;
    return 0;
}

const char *rt_lr_kind_name(RtLrKind kind)
{
    return kind == RT_LR_COSINE ? "cosine" : "constant";
}
