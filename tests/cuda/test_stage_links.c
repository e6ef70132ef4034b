/* The `link PEER direct|cpu` config records (runtime/cuda/stage_links.c,
 * docs/STAGE_ABI.md): parsed into one transport per peer; malformed records
 * are errors naming the line.  No CUDA needed: runs in every build. */
#include <stdio.h>
#include <string.h>

#include "stage_links.h"

static int fails;

#define CHECK(c, ...)                                            \
    do {                                                         \
        if (!(c)) {                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fputc('\n', stderr);                                 \
            fails++;                                             \
        }                                                        \
    } while (0)

static void bad(const char *cfg, const char *want) {
    unsigned char t[4];
    char err[256] = "";
    int rc = stage_links_parse(cfg, 1, 4, t, err, sizeof err);
    CHECK(rc == -1, "accepted: %s", cfg);
    CHECK(strstr(err, want) != NULL, "'%s': message '%s' lacks '%s'", cfg, err, want);
}

int main(void) {
    unsigned char t[4];
    char err[256] = "";
    const char *cfg = "hetc-stage 1\nstage 1\nstages 4\nxfer 0 recv act peer 0 rows 4 row_bytes 8\n"
                      "link 0 cpu\nlink 3 direct\nlinker 2 direct\nend\n";
    CHECK(stage_links_parse(cfg, 1, 4, t, err, sizeof err) == 0, "%s", err);
    CHECK(t[0] == STAGE_LINK_CPU && t[1] == STAGE_LINK_NONE && t[2] == STAGE_LINK_NONE &&
              t[3] == STAGE_LINK_DIRECT,
          "transports %d %d %d %d", t[0], t[1], t[2], t[3]);
    /* no records (a plan without cluster links, or an older compiler) */
    memset(t, 9, sizeof t);
    CHECK(stage_links_parse("hetc-stage 1\nstage 1\nend\n", 1, 4, t, err, sizeof err) == 0, "%s",
          err);
    CHECK(t[0] == 0 && t[1] == 0 && t[2] == 0 && t[3] == 0, "no records: not all NONE");
    /* last line without a newline */
    CHECK(stage_links_parse("stage 1\nlink 2 direct", 1, 4, t, err, sizeof err) == 0 &&
              t[2] == STAGE_LINK_DIRECT,
          "record on the last line");
    bad("stage 1\nlink 2 nvlink\n", "line 2: expected 'link PEER direct|cpu'");
    bad("link 2\n", "line 1: expected");
    bad("link 2 cpu extra\n", "line 1: expected");
    bad("link x cpu\n", "line 1: expected");
    bad("link 4 cpu\n", "peer 4 is not another stage of 0..3");
    bad("link -1 cpu\n", "peer -1 is not another stage");
    bad("link 1 cpu\n", "peer 1 is not another stage");
    bad("link 0 cpu\nlink 0 direct\n", "line 2: a second link record for stage 0");
    if (fails) {
        fprintf(stderr, "%d failure(s)\n", fails);
        return 1;
    }
    printf("ok\n");
    return 0;
}
