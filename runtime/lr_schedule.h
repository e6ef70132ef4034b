/* Learning-rate schedules.
 *
 *  constant: lr(step) = max_lr.
 *  cosine:   nanoGPT's get_lr(it) (train.py), with min_lr = max_lr * min_lr_ratio,
 *            step 0-based, W = warmup_steps, D = decay_steps (nanoGPT's
 *            lr_decay_iters, usually the total number of steps):
 *              step < W:   max_lr * (step + 1) / (W + 1)
 *              step > D:   min_lr
 *              otherwise:  r = (step - W) / (D - W)
 *                          min_lr + 0.5 (1 + cos(pi r)) (max_lr - min_lr)
 *            (llm.c's get_learning_rate differs only in warm-up,
 *            (step + 1) / W, and in having no step > D branch.)
 *            D <= W is treated as "no decay": max_lr after warm-up.
 */
#ifndef HETC_RT_LR_SCHEDULE_H
#define HETC_RT_LR_SCHEDULE_H

#include <stdint.h>

typedef enum RtLrKind { RT_LR_CONSTANT, RT_LR_COSINE } RtLrKind;

typedef struct RtLrSchedule {
    RtLrKind kind;
    double max_lr;
    int64_t warmup_steps;
    int64_t decay_steps;
    double min_lr_ratio; /* min_lr = max_lr * min_lr_ratio (nanoGPT uses 0.1) */
} RtLrSchedule;

double rt_lr_at(const RtLrSchedule *s, int64_t step);
/* "constant" | "cosine" -> kind; -1 for anything else. */
int rt_lr_kind_from_name(const char *name, RtLrKind *kind);
const char *rt_lr_kind_name(RtLrKind kind);

#endif
