/* The timeline picture (stages x time) of the plan's timeline.svg
 * (passes/planner/plan_output.c) and of a run's measured trace.svg
 * (runtime/stage/stage_metrics.c): one drawer, so the predicted and the
 * measured iteration look alike and can be laid one above the other on one
 * time axis.  Header-only (common/ is an INTERFACE library: the stage
 * binaries' link line stays as it is). */
#ifndef HETC_TIMELINE_SVG_H
#define HETC_TIMELINE_SVG_H

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One interval.  kind: 'F' forward, 'B' backward (compute boxes); 'S' send
 * of an activation, 'R' send of a gradient, 'A' DP all-reduce, 'W' blocked
 * in a receive (measured only), drawn as bars under the boxes.  mb < 0: no
 * microbatch. */
typedef struct TlSvgEvent {
    int stage;
    char kind;
    int mb;
    double start, end;
} TlSvgEvent;

/* One band of rows: a title (NULL: none) and one labelled row per stage. */
typedef struct TlSvgPanel {
    const char *title;
    const char *const *labels;
    int nrows;
    const TlSvgEvent *ev;
    int nev;
} TlSvgPanel;

static inline void tl_svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

static inline int tl_svg_is_compute(char k) { return k == 'F' || k == 'B'; }

static inline const char *tl_svg_kind_word(char k) {
    switch (k) {
    case 'F': return "F";
    case 'B': return "B";
    case 'S': return "send";  /* forward boundary i -> i+1, on stage i */
    case 'R': return "gsend"; /* backward gradient i+1 -> i, on stage i+1 (the sender) */
    case 'A': return "sync";
    case 'W': return "wait";
    default: return "?";
    }
}

static inline void tl_svg_event_name(const TlSvgEvent *e, char *buf, size_t cap) {
    if (e->kind == 'A' || e->mb < 0) snprintf(buf, cap, "%s", tl_svg_kind_word(e->kind));
    else snprintf(buf, cap, "%s%d", tl_svg_kind_word(e->kind), e->mb);
}

/* A "nice" axis step (1, 2 or 5 x 10^k) giving about `want` ticks. */
static inline double tl_svg_nice_step(double span, int want) {
    double raw = span / want;
    double p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* A time axis in ms at height ay for [t0, t1] drawn at `scale` px/s. */
static inline void tl_svg_axis(FILE *f, double left, double plot_w, double ay, double t0,
                               double t1, double scale) {
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#000\"/>\n", left,
            ay, left + plot_w, ay);
    double span_ms = (t1 - t0) * 1e3;
    double step = tl_svg_nice_step(span_ms, 10);
    for (double t = 0; t <= span_ms + 1e-9 * span_ms; t += step) {
        double x = left + t / 1e3 * scale;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000\"/>"
                   "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                x, ay, x, ay + 5, x, ay + 18, t);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"middle\">time (ms)</text>\n",
            left + plot_w / 2, ay + 36);
}

static inline void tl_svg_extent(const TlSvgPanel *p, double *t0, double *t1) {
    for (int i = 0; i < p->nev; i++) {
        if (p->ev[i].start < *t0) *t0 = p->ev[i].start;
        if (p->ev[i].end > *t1) *t1 = p->ev[i].end;
    }
}

/* The whole picture: `title` on top, the legend, the panels one under the
 * other.  own_scale 0: one time axis at the bottom for all panels (from the
 * earliest start to the latest end); 1: each panel spans the full width
 * with its own axis under it (a measured run next to a prediction for
 * other devices differs by orders of magnitude; the shapes still compare).
 * 0, or -1 on a write error. */
static inline int tl_svg_write(FILE *f, const char *title, const TlSvgPanel *pn, int npanels,
                               int own_scale) {
    const double left = 230, right = 20, row_h = 44, plot_w = 1100, head_h = 22, axis_h = 50;
    double t0 = 0, t1 = 0, top = 50;
    int rows = 0, titled = 0;
    for (int k = 0; k < npanels; k++) {
        int nst = pn[k].nrows;
        for (int i = 0; i < pn[k].nev; i++) {
            const TlSvgEvent *e = &pn[k].ev[i];
            if (e->stage + 1 > nst) nst = e->stage + 1;
            if (e->start < t0) t0 = e->start;
            if (e->end > t1) t1 = e->end;
        }
        rows += nst;
        titled += pn[k].title != NULL;
    }
    if (!(t1 > t0)) t1 = t0 + 1e-3;
    double scale = plot_w / (t1 - t0); /* px per second */
    double width = left + plot_w + right;
    double height = top + rows * row_h + titled * head_h + (own_scale ? npanels : 1) * axis_h;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            width, height, width, height);
    fputs("<style>.F{fill:#4e79a7}.B{fill:#f28e2b}.S{fill:#59a14f}.R{fill:#76b7b2}.A{fill:#b07aa1}"
          ".W{fill:#bab0ac}.lbl{fill:#fff;font-size:10px;text-anchor:middle}</style>\n", f);
    fprintf(f, "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n",
            width, height);
    fputs("<text x=\"10\" y=\"20\" font-size=\"14\">", f);
    tl_svg_text(f, title);
    fputs("</text>\n", f);
    int any_wait = 0;
    for (int k = 0; k < npanels; k++)
        for (int i = 0; i < pn[k].nev; i++) any_wait |= pn[k].ev[i].kind == 'W';
    static const struct { char k; const char *label; } legend[] = {
        {'F', "forward"}, {'B', "backward"}, {'S', "send activation"}, {'R', "send gradient"},
        {'A', "DP all-reduce"}, {'W', "blocked in a receive"}};
    double lx = left;
    for (size_t i = 0; i < sizeof legend / sizeof legend[0] - !any_wait; i++) {
        fprintf(f, "<rect class=\"legend %c\" x=\"%.0f\" y=\"28\" width=\"14\" height=\"10\"/>"
                   "<text x=\"%.0f\" y=\"37\">%s</text>\n",
                legend[i].k, lx, lx + 18, legend[i].label);
        lx += 18 + 7.5 * strlen(legend[i].label) + 16;
    }
    fprintf(f, "<text x=\"%.0f\" y=\"37\" fill=\"#666\">gaps = bubbles</text>\n", lx);
    double y0 = top;
    for (int k = 0; k < npanels; k++) {
        const TlSvgPanel *p = &pn[k];
        int nst = p->nrows;
        for (int i = 0; i < p->nev; i++)
            if (p->ev[i].stage + 1 > nst) nst = p->ev[i].stage + 1;
        if (p->title) {
            fprintf(f, "<text class=\"panel\" x=\"8\" y=\"%.1f\" font-weight=\"bold\">", y0 + 15);
            tl_svg_text(f, p->title);
            fputs("</text>\n", f);
            y0 += head_h;
        }
        /* Rows: a light band per stage; compute boxes on top, comm bars below. */
        if (own_scale) {
            t0 = 0, t1 = 0;
            tl_svg_extent(p, &t0, &t1);
            if (!(t1 > t0)) t1 = t0 + 1e-3;
            scale = plot_w / (t1 - t0);
        }
        for (int s = 0; s < nst; s++) {
            double y = y0 + s * row_h;
            fprintf(f, "<rect class=\"row\" x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" "
                       "fill=\"%s\"/>\n",
                    left, y + 2, plot_w, row_h - 4, s % 2 ? "#f4f4f4" : "#ececec");
            fprintf(f, "<text x=\"8\" y=\"%.1f\">", y + row_h / 2 + 4);
            if (s < p->nrows && p->labels && p->labels[s]) tl_svg_text(f, p->labels[s]);
            else fprintf(f, "stage %d", s);
            fputs("</text>\n", f);
        }
        for (int i = 0; i < p->nev; i++) {
            const TlSvgEvent *e = &p->ev[i];
            double x = left + (e->start - t0) * scale;
            double w = (e->end - e->start) * scale;
            if (w < 0.5) w = 0.5; /* keep zero-length events visible */
            double y = y0 + e->stage * row_h;
            char name[64];
            tl_svg_event_name(e, name, sizeof name);
            if (tl_svg_is_compute(e->kind)) {
                fprintf(f, "<rect class=\"ev %c\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                           "height=\"%.1f\" stroke=\"#fff\" stroke-width=\"0.5\"><title>%s</title>"
                           "</rect>\n",
                        e->kind, x, y + 5, w, row_h - 20, name);
                if (w >= 14 && e->mb >= 0)
                    fprintf(f, "<text class=\"lbl\" x=\"%.2f\" y=\"%.1f\">%d</text>\n", x + w / 2,
                            y + 5 + (row_h - 20) / 2 + 4, e->mb);
            } else {
                /* Two lanes under the boxes: activations (and the all-reduce,
                 * the receive waits) above, gradients below, as the two
                 * directions of a link run at the same time. */
                char c = e->kind == 'R' || e->kind == 'A' || e->kind == 'W' ? e->kind : 'S';
                fprintf(f, "<rect class=\"ev %c\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                           "height=\"4\"><title>%s</title></rect>\n",
                        c, x, y + row_h - (c == 'R' ? 8 : 13), w, name);
            }
        }
        y0 += nst * row_h;
        if (own_scale) {
            tl_svg_axis(f, left, plot_w, y0 + 6, t0, t1, scale);
            y0 += axis_h;
        }
    }
    if (!own_scale) tl_svg_axis(f, left, plot_w, y0 + 6, t0, t1, scale);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

#endif
