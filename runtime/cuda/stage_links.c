/* `link` records of a stage config (stage_links.h). */
#include "stage_links.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stage_links_parse(const char *config, int stage, int nstages, unsigned char *out, char *err,
                      size_t errlen) {
    memset(out, STAGE_LINK_NONE, (size_t)nstages);
    int ln = 0;
    for (const char *p = config; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        ln++;
        if (len > 5 && !strncmp(p, "link ", 5)) {
            char line[128], tr[16], extra[2];
            int peer = -1;
            if (len >= sizeof line) {
                snprintf(err, errlen, "config line %d: link record too long", ln);
                return -1;
            }
            memcpy(line, p, len);
            line[len] = 0;
            if (sscanf(line, "link %d %15s %1s", &peer, tr, extra) != 2 ||
                (strcmp(tr, "direct") && strcmp(tr, "cpu"))) {
                snprintf(err, errlen, "config line %d: expected 'link PEER direct|cpu', got '%s'",
                         ln, line);
                return -1;
            }
            if (peer < 0 || peer >= nstages || peer == stage) {
                snprintf(err, errlen, "config line %d: link peer %d is not another stage of "
                         "0..%d", ln, peer, nstages - 1);
                return -1;
            }
            if (out[peer] != STAGE_LINK_NONE) {
                snprintf(err, errlen, "config line %d: a second link record for stage %d", ln,
                         peer);
                return -1;
            }
            out[peer] = strcmp(tr, "direct") ? STAGE_LINK_CPU : STAGE_LINK_DIRECT;
        }
        p = e ? e + 1 : NULL;
    }
    return 0;
}
