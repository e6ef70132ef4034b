/* Training metrics: one JSON object per optimizer step in metrics.jsonl and,
 * when the run ends, a loss-curve SVG beside it.  Written by the one process
 * that prints the step lines: hetc train, or the last stage's first rank of a
 * pipeline (which gathers the other stages' timings first: stage_metrics.c).
 * Formats: docs/TRAINING.md "Metrics". */
#ifndef HETC_RT_METRICS_H
#define HETC_RT_METRICS_H

#include <stdint.h>
#include <stdio.h>

/* One stage's share of a step (the mean over its ranks; memory: the max). */
typedef struct RtStageTimes {
    int stage, ranks;
    double compute_s;  /* forward, backward and update kernels */
    double comm_s;     /* sends, send completion, gradient / loss all-reduces */
    double bubble_s;   /* blocked in receives: waiting for the peer stage's result */
    double other_s;    /* the rest of the step (data, bookkeeping) */
    double arena_bytes, peak_rss_bytes;
} RtStageTimes;

typedef struct RtStepMetrics {
    int64_t step;       /* 1-based */
    double loss, grad_norm, lr;
    double step_s;      /* wall time of the step (the printer's) */
    int64_t tokens;     /* tokens the step trained on */
    double flops;       /* FLOPs the step executed, all ranks (0: unknown) */
    double peak_flops;  /* sum of the peak FLOP/s of the devices the ranks stand for */
    int mfu_nominal;    /* 1: the devices are the plan's, not the ones the run used */
    double val_loss;    /* NAN: no validation this step */
    const RtStageTimes *stages;
    int nstages;
} RtStepMetrics;

typedef struct RtMetrics {
    FILE *f;
    char *path;
    char *svg_path;     /* the loss curve, written by rt_metrics_close */
    int64_t n, cap;     /* loss points */
    double *pt;         /* [cap][3]: step, loss, val (NAN) */
} RtMetrics;

/* Open `path` (its folder is created): truncated for a fresh run
 * (resume_step 0); a run resumed from step resume_step > 0 keeps the lines
 * up to that step and appends.  The loss curve goes to `svg_path` (NULL:
 * loss.svg beside path). 0, or -1 with err. */
int rt_metrics_open(RtMetrics *m, const char *path, const char *svg_path, int64_t resume_step,
                    char *err, size_t errlen);
/* Append one step's line (flushed, so a long run can be watched). */
int rt_metrics_step(RtMetrics *m, const RtStepMetrics *s);
/* Write the loss curve and close.  0, or -1 with err (the jsonl is kept). */
int rt_metrics_close(RtMetrics *m, char *err, size_t errlen);
/* The loss-curve SVG alone: n points of (step, loss, val loss or NAN). */
int rt_loss_svg_write(FILE *f, const double *pt, int64_t n, const char *title);
/* mkdir -p of the folder holding `path`.  0, or -1 with err. */
int rt_mkdirs_for(const char *path, char *err, size_t errlen);
/* Peak resident set size of this process since its exec, bytes. */
double rt_peak_rss_bytes(void);

#endif
