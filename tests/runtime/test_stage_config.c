/* The stage config parser (runtime/stage/stage_config.c): fields of a full
 * config, %XX-escaped names, tolerated unknown records, errors that name
 * the line for malformed known ones; the `tp` / `tpshard` records and the
 * checkpoint slicing of a sharded tensor against index arithmetic. */
#include <stdio.h>
#include <string.h>

#include "stage_internal.h"

static int failures;
#define CHECK(c)                                                        \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                                 \
        }                                                               \
    } while (0)

static const char *GOOD =
    "hetc-stage 1\n"
    "stage 1\nstages 3\ndp 2 1 4\nrows 8\nlocal_rows 8\nseq 16\naccum 4\nlayers 12\n"
    "token_dtype i32\noptimizer sgd\nlr 3e-4\nlr_schedule cosine\nwarmup 5\nsteps 100\n"
    "arena_off lr 0\narena_off step 8\narena_off grad_norm 16\narena_off future 24\n"
    "param h.0.w%20x%25 layer 3 shared 0 numel 64 param 64 acc 320 m 576 v -1 shape 4x2x8\n"
    "param wte layer 1 shared 1 numel 32 param 832 acc 960 m 1088 v -1\n"
    "xfer 4 recv act peer 0 rows 8 row_bytes 256   # comment\n"
    "xfer 5 send grad peer 0 rows 8 row_bytes 256\n"
    "shared wte stages 0 1 2\n"
    "some_new_record a b c\n"
    "end\n"
    "garbage after end is not read\n";

static int parse_err(const char *text, const char *needle) {
    StageConfig c;
    char err[512] = "";
    int rc = stage_config_parse(text, &c, err, sizeof err);
    if (rc == 0) {
        stage_config_free(&c);
        fprintf(stderr, "accepted: %s\n", text);
        return 0;
    }
    if (!strstr(err, needle)) {
        fprintf(stderr, "error '%s' lacks '%s'\n", err, needle);
        return 0;
    }
    return 1;
}

int main(void) {
    StageConfig c;
    char err[512] = "";
    CHECK(stage_config_parse(GOOD, &c, err, sizeof err) == 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    CHECK(c.stage == 1 && c.nstages == 3 && c.dp[0] == 2 && c.dp[1] == 1 && c.dp[2] == 4);
    CHECK(c.rows == 8 && c.local_rows == 8 && c.seq == 16 && c.accum == 4 && c.layers == 12);
    CHECK(c.token_i32 && c.sgd && c.lr == 3e-4 && c.lr_kind == RT_LR_COSINE);
    CHECK(c.warmup == 5 && c.steps == 100);
    CHECK(c.off_lr == 0 && c.off_step == 8 && c.off_grad_norm == 16);
    CHECK(c.nparams == 2 && !strcmp(c.params[0].name, "h.0.w x%"));
    CHECK(c.params[0].layer == 3 && c.params[0].numel == 64 && c.params[0].off_acc == 320);
    /* ABI 3's shape field; a record without one (an older compiler's): rank -1 */
    CHECK(c.params[0].rank == 3 && c.params[0].shape[0] == 4 && c.params[0].shape[1] == 2 &&
          c.params[0].shape[2] == 8);
    CHECK(c.params[1].rank == -1);
    CHECK(c.params[0].off_v == -1 && c.params[0].shared_index == -1);
    CHECK(c.params[1].shared && c.params[1].shared_index == 0);
    CHECK(c.nxfers == 2 && c.xfers[0].id == 4 && !c.xfers[0].send && !c.xfers[0].grad);
    CHECK(c.xfers[1].send && c.xfers[1].grad && c.xfers[1].row_bytes == 256);
    CHECK(c.nshared == 1 && c.shared[0].nstages == 3 && c.shared[0].stages[2] == 2);
    stage_config_free(&c);

    /* issue 19's metrics records: vocab, flops, peak_flops, ptl */
    {
        static const char *HEAD = "hetc-stage 1\nstage 0\nstages 1\ndp 1\nrows 2\nlocal_rows 2\n"
                                  "seq 4\naccum 1\nlayers 1\n";
        char text[1024];
        snprintf(text, sizeof text, "%svocab 512\nflops 1.5e9\npeak_flops 3.12e14\n"
                 "ptl 0 F 1 0 0.5\nptl 0 A -1 1 2.25\nend\n", HEAD);
        CHECK(stage_config_parse(text, &c, err, sizeof err) == 0);
        CHECK(c.vocab == 512 && c.flops_mb == 1.5e9 && c.peak_flops == 3.12e14);
        CHECK(!c.grad_reduce_bf16);
        CHECK(c.nptl == 2 && c.ptl[0].kind == 'F' && c.ptl[0].mb == 1 && c.ptl[0].end == 0.5);
        CHECK(c.ptl[1].kind == 'A' && c.ptl[1].mb == -1 && c.ptl[1].start == 1 &&
              c.ptl[1].end == 2.25);
        stage_config_free(&c);
        static const struct { const char *line, *needle; } bad[] = {
            {"vocab 0", "line 10: expected 'vocab N'"},
            {"vocab 70000", "uint16"},
            {"flops -1", "expected 'flops X'"},
            {"peak_flops nan", "expected 'peak_flops X'"},
            {"ptl 0 F 1 2 1", "expected 'ptl STAGE KIND MB START END'"},
            {"ptl 0 FB 1 0 1", "ptl STAGE"},
            {"ptl 0 F 1 0", "ptl STAGE"},
            {"grad_reduce fp16", "line 10: expected 'grad_reduce fp32|bf16'"},
            {"grad_reduce", "expected 'grad_reduce fp32|bf16'"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            snprintf(text, sizeof text, "%s%s\nend\n", HEAD, bad[i].line);
            CHECK(parse_err(text, bad[i].needle));
        }
    }

    /* issue 17: the gradient wire's dtype */
    {
        static const char *T = "hetc-stage 1\nstage 0\nstages 1\ndp 1\nrows 2\nlocal_rows 2\n"
                               "seq 4\naccum 1\nlayers 1\ngrad_reduce bf16\nend\n";
        CHECK(stage_config_parse(T, &c, err, sizeof err) == 0 && c.grad_reduce_bf16 == 1);
        stage_config_free(&c);
    }

    /* tensor parallelism: `tp` and `tpshard` (ranges for rank 0) */
    static const char *TP =
        "hetc-stage 1\nstage 1\nstages 2\ndp 1 2\nrows 4\nlocal_rows 2\nseq 2\naccum 1\n"
        "param w layer 1 shared 0 numel 24 param 0 acc 128 m 256 v 384\n"
        "param b layer 1 shared 0 numel 6 param 512 acc 576 m 640 v 704\n"
        "param ln layer 1 shared 0 numel 4 param 768 acc 832 m 896 v 960\n"
        "tp 1 2\n"
        "tpshard w axis 1 full 12 ranges 0 2 4 2 8 2\n"
        "tpshard b axis 0 full 12 ranges 0 2 4 2 8 2\nend\n";
    CHECK(stage_config_parse(TP, &c, err, sizeof err) == 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    CHECK(c.tp && c.tp[0] == 1 && c.tp[1] == 2 && stage_tp_degree(&c) == 2);
    CHECK(c.ntpshards == 2 && c.params[0].tpshard == 0 && c.params[1].tpshard == 1 &&
          c.params[2].tpshard == -1);
    if (c.ntpshards == 2) {
        const StageTpShard *t = &c.tpshards[0];
        CHECK(t->axis == 1 && t->full == 12 && t->nranges == 3 && t->start[2] == 8 &&
              t->len[2] == 2);
        /* [4, 12] full, rank 1 of 2 keeps columns 2-3, 6-7, 10-11: [4, 6] */
        float full[48], loc[24], back[48];
        for (int i = 0; i < 48; i++) full[i] = (float)i, back[i] = -1.0f;
        int64_t shape[2] = {4, 6}, outer, inner, ldim;
        CHECK(stage_tp_geometry(t, shape, 2, &outer, &inner, &ldim) == 0 && outer == 4 &&
              inner == 1 && ldim == 6);
        stage_tp_slice(t, 1, full, loc, outer, inner);
        int ok = 1;
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 6; j++) {
                int col = (j / 2) * 4 + 2 + j % 2;
                ok &= loc[r * 6 + j] == full[r * 12 + col];
            }
        CHECK(ok);
        stage_tp_place(t, 1, loc, back, outer, inner);
        for (int i = 0; i < 48; i++) ok &= back[i] == ((i % 4) >= 2 ? full[i] : -1.0f);
        CHECK(ok);
    }
    stage_config_free(&c);
    /* row tables (heterogeneous DP): one count per DP rank, each >= 1,
     * summing to the microbatch's rows */
    CHECK(stage_config_parse("hetc-stage 1\nstage 0\nstages 2\ndp 2 3\nrows 4\nlocal_rows 1\n"
                             "seq 2\naccum 1\nrowtable 0 1 3\nrowtable 1 1 2 1\nend\n", &c, err,
                             sizeof err) == 0);
    CHECK(c.rowtab && c.rowtab[0][0] == 1 && c.rowtab[0][1] == 3 && c.rowtab[1][1] == 2);
    stage_config_free(&c);
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 2 1\nrows 4\nlocal_rows 1\nseq 2\naccum 1\n"
                    "rowtable 0 1 2\n", "rowtable 0: the row counts sum to 3, not the 4 rows"));
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 2 1\nrows 4\nlocal_rows 1\nseq 2\naccum 1\n"
                    "rowtable 0 0 4\n", "bad row count '0'"));
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 2 1\nrows 4\nlocal_rows 1\nseq 2\naccum 1\n"
                    "rowtable 0 1 1 2\n", "line 8"));
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 1 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "tp 2\n", "line 8"));
    /* several pipelines (issue 18 item 3): each one's first stage; the
     * pipeline of every stage and its last stage follow from them */
    CHECK(stage_config_parse("hetc-stage 1\nstage 3\nstages 5\ndp 1 1 2 1 1\nrows 2\n"
                             "local_rows 2\nseq 2\naccum 1\npipes 0 2\n"
                             "xfer 0 send act peer 4 rows 2 row_bytes 8\nend\n",
                             &c, err, sizeof err) == 0);
    CHECK(c.npipes == 2 && stage_pipe_of(&c, 0) == 0 && stage_pipe_of(&c, 1) == 0 &&
          stage_pipe_of(&c, 2) == 1 && stage_pipe_of(&c, 4) == 1);
    CHECK(!stage_pipe_last(&c, 0) && stage_pipe_last(&c, 1) && !stage_pipe_last(&c, 3) &&
          stage_pipe_last(&c, 4));
    stage_config_free(&c);
    CHECK(stage_config_parse("hetc-stage 1\nstage 0\nstages 2\ndp 1 1\nrows 2\n"
                             "local_rows 2\nseq 2\naccum 1\nend\n", &c, err, sizeof err) == 0);
    CHECK(stage_pipe_of(&c, 1) == 0 && !stage_pipe_last(&c, 0) && stage_pipe_last(&c, 1));
    stage_config_free(&c);
    CHECK(parse_err("hetc-stage 1\nstages 4\ndp 1 1 1 1\nrows 2\nlocal_rows 2\nseq 2\n"
                    "accum 1\npipes 1 2\n", "pipes: first stage '1' of pipeline 1"));
    CHECK(parse_err("hetc-stage 1\nstages 4\ndp 1 1 1 1\nrows 2\nlocal_rows 2\nseq 2\n"
                    "accum 1\npipes 0 4\n", "pipeline 2 is not after"));
    CHECK(parse_err("hetc-stage 1\nstages 4\ndp 1 1 1 1\nrows 2\nlocal_rows 2\nseq 2\n"
                    "accum 1\npipes 0\n", "two or more pipelines"));
    CHECK(parse_err("hetc-stage 1\nstage 1\nstages 4\ndp 1 1 1 1\nrows 2\nlocal_rows 2\n"
                    "seq 2\naccum 1\npipes 0 2\nxfer 0 send act peer 2 rows 2 row_bytes 8\n",
                    "pipelines exchange no boundary tensors"));
    CHECK(parse_err("hetc-stage 1\nstages 1\ndp 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "tp 2\ntpshard nope axis 0 full 4 ranges 0 2\n", "names no param"));
    CHECK(parse_err("hetc-stage 1\nstages 1\ndp 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "param w layer 1 shared 0 numel 2 param 0 acc 64 m 128 v 192\n"
                    "tpshard w axis 0 full 4 ranges 0 2\n", "TP degree 1"));
    CHECK(parse_err("hetc-stage 1\nstages 1\ndp 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "param w layer 1 shared 0 numel 2 param 0 acc 64 m 128 v 192\n"
                    "tp 2\ntpshard w axis 0 full 3 ranges 0 2\n", "full extent"));

    CHECK(parse_err("hetc-stage 1\nstages 1\ndp 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "param w layer 1 shared 0 numel 6 param 0 acc 64 m 128 v 192 shape 2x4\n",
                    "shape 2x4 has 8 elements, numel is 6"));
    CHECK(parse_err("hetc-stage 1\nstages 1\ndp 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "param w layer 1 shared 0 numel 6 param 0 acc 64 m 128 v 192 shape 2xq\n",
                    "bad dim 'q'"));
    CHECK(parse_err("hetc-stage 1\nstages 1\ndp 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "param w layer 1 shared 0 numel 6 param 0 acc 64 m 128 v 192 shape 2x\n",
                    "bad shape '2x'"));
    {
        StageConfig s1;
        CHECK(stage_config_parse("hetc-stage 1\nstage 0\nstages 1\ndp 1\nrows 4\n"
                                 "local_rows 4\nseq 2\naccum 1\nparam w layer 1 shared 0 numel 1 "
                                 "param 0 acc 64 m 128 v 192 shape -\nend\n",
                                 &s1, err, sizeof err) == 0);
        CHECK(s1.nparams == 1 && s1.params[0].rank == 0);
        stage_config_free(&s1);
    }
    CHECK(parse_err("", "hetc-stage 1"));
    CHECK(parse_err("hetc-stage 2\n", "line 1"));
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 1\n", "line 3"));
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 1 1\nrows x\n", "line 4"));
    CHECK(parse_err("hetc-stage 1\nstages 1\ndp 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "param p layer 1 shared 0 numel 4 param 0 acc 16\n",
                    "'m'"));
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 1 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "param p layer 1 shared 1 numel 4 param 0 acc 16 m 32 v 48\n",
                    "no 'shared' line"));
    CHECK(parse_err("hetc-stage 1\nstages 2\ndp 1 1\nrows 4\nlocal_rows 4\nseq 2\naccum 1\n"
                    "xfer 0 send act peer 0 rows 4 row_bytes 8\n",
                    "peer stage 0"));
    CHECK(parse_err("hetc-stage 1\nstage 2\nstages 2\ndp 1 1\nrows 4\nlocal_rows 4\nseq 2\n"
                    "accum 1\n", "stage 2"));
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
