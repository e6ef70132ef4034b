/* metrics.jsonl and the loss-curve SVG (rt_metrics.h). */
#define _POSIX_C_SOURCE 200809L
#include "rt_metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

int rt_mkdirs_for(const char *path, char *err, size_t errlen) {
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash) return 0;
    *slash = 0;
    for (char *p = d + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(d, 0755) && errno != EEXIST) goto fail;
        *p = '/';
    }
    if (d[0] && mkdir(d, 0755) && errno != EEXIST) goto fail;
    return 0;
fail:
    snprintf(err, errlen, "cannot create the folder '%s': %s", d, strerror(errno));
    return -1;
}

/* VmHWM is this address space's high-water mark.  getrusage's ru_maxrss is
 * kept across execve, so a binary started from a large parent (a Python test
 * or bench forks itself first) reported the parent's peak; VmHWM starts anew
 * with the exec.  getrusage stays as the fallback without /proc. */
double rt_peak_rss_bytes(void) {
    /* open + read into the stack: called every step, and the step loop
     * allocates nothing after step 1 (train_noalloc); fopen would. */
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[n > 0 ? n : 0] = 0;
        const char *p = strstr(buf, "\nVmHWM:");
        double kb = p ? strtod(p + 7, NULL) : -1;
        if (kb > 0) return kb * 1024.0;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (double)ru.ru_maxrss * 1024.0; /* Linux: kilobytes */
}

/* JSON has no NaN / infinity: they are written as null. */
static void jnum(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.17g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* A resumed run continues the file from its checkpoint's step: the lines
 * of later steps (the interrupted run went past the checkpoint) are dropped,
 * so every step appears once.  The file is rewritten in place. */
static int keep_until(const char *path, int64_t step, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* nothing yet */
    char *buf = NULL, *line = NULL;
    size_t n = 0, cap = 0, lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        long long k;
        if (sscanf(line, "{\"step\":%lld", &k) == 1 && k > step) continue;
        if (n + (size_t)len + 1 > cap) {
            size_t c2 = 2 * (n + (size_t)len + 1);
            char *b = realloc(buf, c2);
            if (!b) break;
            buf = b, cap = c2;
        }
        memcpy(buf + n, line, (size_t)len);
        n += (size_t)len;
    }
    free(line);
    fclose(f);
    if (!(f = fopen(path, "w")) || (n && fwrite(buf, 1, n, f) != n) || fclose(f)) {
        snprintf(err, errlen, "cannot rewrite '%s': %s", path, strerror(errno));
        free(buf);
        return -1;
    }
    free(buf);
    return 0;
}

int rt_metrics_open(RtMetrics *m, const char *path, const char *svg_path, int64_t resume_step,
                    char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (rt_mkdirs_for(path, err, errlen)) return -1;
    if (resume_step > 0 && keep_until(path, resume_step, err, errlen)) return -1;
    if (!(m->f = fopen(path, resume_step > 0 ? "a" : "w"))) {
        snprintf(err, errlen, "cannot open '%s' for writing: %s", path, strerror(errno));
        return -1;
    }
    m->path = strdup(path);
    if (svg_path) {
        m->svg_path = strdup(svg_path);
    } else {
        const char *slash = strrchr(path, '/');
        size_t n = slash ? (size_t)(slash - path + 1) : 0;
        m->svg_path = malloc(n + 16);
        if (m->svg_path) {
            memcpy(m->svg_path, path, n);
            strcpy(m->svg_path + n, "loss.svg");
        }
    }
    if (!m->path || !m->svg_path) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int rt_metrics_step(RtMetrics *m, const RtStepMetrics *s) {
    if (!m->f) return 0;
    if (m->n == m->cap) {
        int64_t cap = m->cap ? 2 * m->cap : 256;
        double *p = realloc(m->pt, (size_t)cap * 3 * sizeof *p);
        if (!p) return -1;
        m->pt = p, m->cap = cap;
    }
    m->pt[3 * m->n] = (double)s->step;
    m->pt[3 * m->n + 1] = s->loss;
    m->pt[3 * m->n + 2] = s->val_loss;
    m->n++;
    FILE *f = m->f;
    double tps = s->step_s > 0 ? (double)s->tokens / s->step_s : NAN;
    double mfu = s->flops > 0 && s->peak_flops > 0 && s->step_s > 0
                     ? s->flops / s->step_s / s->peak_flops : NAN;
    fprintf(f, "{\"step\":%lld", (long long)s->step);
    jnum(f, "loss", s->loss);
    jnum(f, "grad_norm", s->grad_norm);
    jnum(f, "lr", s->lr);
    fprintf(f, ",\"tokens\":%lld", (long long)s->tokens);
    jnum(f, "step_s", s->step_s);
    jnum(f, "tokens_per_s", tps);
    jnum(f, "flops", s->flops > 0 ? s->flops : NAN);
    jnum(f, "peak_flops", s->peak_flops > 0 ? s->peak_flops : NAN);
    jnum(f, "mfu", mfu);
    fprintf(f, ",\"mfu_nominal\":%s", s->mfu_nominal ? "true" : "false");
    if (!isnan(s->val_loss)) jnum(f, "val_loss", s->val_loss);
    fputs(",\"stages\":[", f);
    for (int i = 0; i < s->nstages; i++) {
        const RtStageTimes *t = &s->stages[i];
        fprintf(f, "%s{\"stage\":%d,\"ranks\":%d", i ? "," : "", t->stage, t->ranks);
        jnum(f, "compute_s", t->compute_s);
        jnum(f, "comm_s", t->comm_s);
        jnum(f, "bubble_s", t->bubble_s);
        jnum(f, "other_s", t->other_s);
        fprintf(f, ",\"arena_bytes\":%.0f,\"peak_rss_bytes\":%.0f}", t->arena_bytes,
                t->peak_rss_bytes);
    }
    fputs("]}\n", f);
    fflush(f);
    return ferror(f) ? -1 : 0;
}

/* A "nice" axis step (1, 2 or 5 x 10^k) giving about `want` ticks. */
static double nice_step(double span, int want) {
    double raw = span / want, p = pow(10, floor(log10(raw))), r = raw / p;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * p;
}

int rt_loss_svg_write(FILE *f, const double *pt, int64_t n, const char *title) {
    const double L = 70, R = 20, T = 40, B = 50, W = 800, H = 400;
    double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (pt[3 * i] > x1) x1 = pt[3 * i];
        for (int k = 1; k < 3; k++) {
            double v = pt[3 * i + k];
            if (!isfinite(v)) continue;
            if (v < y0) y0 = v;
            if (v > y1) y1 = v;
        }
    }
    if (!(y1 >= y0)) y0 = 0, y1 = 1;
    if (y1 - y0 < 1e-9) y0 -= 0.5, y1 += 0.5;
    double ys = nice_step(y1 - y0, 6);
    y0 = floor(y0 / ys) * ys, y1 = ceil(y1 / ys) * ys;
    double sx = W / (x1 - x0), sy = H / (y1 - y0);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
               "<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n",
            L + W + R, T + H + B, L, title);
    for (double y = y0; y <= y1 + ys * 1e-6; y += ys) {
        double py = T + H - (y - y0) * sy;
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, py, L + W, py, L - 6, py + 4, y);
    }
    double xs = nice_step(x1 - x0, 10);
    for (double x = x0; x <= x1 + xs * 1e-6; x += xs) {
        double px = L + (x - x0) * sx;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#000\"/>"
                   "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n",
                px, T + H, px, T + H + 5, px, T + H + 18, x);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n", L + W / 2,
            T + H + 38);
    static const char *color[3] = {NULL, "#4e79a7", "#e15759"};
    static const char *name[3] = {NULL, "train loss", "val loss"};
    for (int k = 1; k < 3; k++) {
        int any = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = pt[3 * i + k];
            if (!isfinite(v)) continue;
            fprintf(f, "%s%.2f,%.2f", any ? " " : "<polyline fill=\"none\" stroke-width=\"1.5\" points=\"",
                    L + (pt[3 * i] - x0) * sx, T + H - (v - y0) * sy);
            any = 1;
        }
        if (any)
            fprintf(f, "\" stroke=\"%s\"/>\n", color[k]);
        if (any && k == 2) /* sparse points: mark them */
            for (int64_t i = 0; i < n; i++)
                if (isfinite(pt[3 * i + 2]))
                    fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n",
                            L + (pt[3 * i] - x0) * sx, T + H - (pt[3 * i + 2] - y0) * sy, color[2]);
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"4\" fill=\"%s\"/>"
                   "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                L + W - 200 + (k - 1) * 100, T - 10, color[k], L + W - 182 + (k - 1) * 100,
                T - 5, name[k]);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

int rt_metrics_close(RtMetrics *m, char *err, size_t errlen) {
    int rc = 0;
    if (m->f && fclose(m->f)) {
        snprintf(err, errlen, "writing '%s': %s", m->path, strerror(errno));
        rc = -1;
    }
    m->f = NULL;
    if (!rc && m->svg_path && m->n > 0) {
        FILE *f = fopen(m->svg_path, "w");
        if (!f || rt_loss_svg_write(f, m->pt, m->n, "hetc: loss per step") || fclose(f)) {
            snprintf(err, errlen, "cannot write the loss curve '%s': %s", m->svg_path,
                     strerror(errno));
            rc = -1;
        }
    }
    free(m->path);
    free(m->svg_path);
    free(m->pt);
    memset(m, 0, sizeof *m);
    return rc;
}
