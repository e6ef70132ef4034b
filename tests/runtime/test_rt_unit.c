/* hetrt single-process tests: row split and overlaps (also a stage's row
 * table's, with and without TP) against a brute-force per-row assignment, arena bounds, and checkpoint files (round trip,
 * truncation, flipped byte, missing MANIFEST, newest complete checkpoint). */
#define _POSIX_C_SOURCE 200809L
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
#define EXPECT(c)                                                               \
    do {                                                                        \
        if (!(c)) {                                                             \
            fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                                         \
        }                                                                       \
    } while (0)

/* Oracle for the split: rank of row i when rows are dealt so that the first
 * B % dp ranks get ceil(B/dp) rows and the rest floor(B/dp). */
static int owner_of(int64_t i, int64_t B, int dp) {
    int64_t base = B / dp, rem = B % dp;
    int64_t acc = 0;
    for (int r = 0; r < dp; r++) {
        acc += base + (r < rem);
        if (i < acc) return r;
    }
    return -1;
}

static void test_split(void) {
    for (int64_t B = 0; B <= 13; B++)
        for (int dp = 1; dp <= 5; dp++) {
            int64_t next = 0;
            for (int r = 0; r < dp; r++) {
                int64_t s, c;
                rt_row_split(B, dp, r, &s, &c);
                EXPECT(s == next); /* contiguous, in rank order */
                for (int64_t i = s; i < s + c; i++) EXPECT(owner_of(i, B, dp) == r);
                next = s + c;
            }
            EXPECT(next == B);
            if (B % dp == 0) /* data_loader's split when dp divides B */
                for (int r = 0; r < dp; r++) {
                    int64_t s, c;
                    rt_row_split(B, dp, r, &s, &c);
                    EXPECT(s == r * B / dp && c == B / dp);
                }
            for (int dq = 1; dq <= 5; dq++) {
                RtOverlap ov[16];
                int n = rt_row_overlaps(B, dp, dq, ov);
                EXPECT(n <= dp + dq - 1);
                /* Every row appears in exactly one overlap, with the right
                 * source and destination owners. */
                int64_t covered = 0, prev_end = 0;
                for (int k = 0; k < n; k++) {
                    EXPECT(ov[k].count > 0 && ov[k].start == prev_end);
                    for (int64_t i = ov[k].start; i < ov[k].start + ov[k].count; i++) {
                        EXPECT(owner_of(i, B, dp) == ov[k].src);
                        EXPECT(owner_of(i, B, dq) == ov[k].dst);
                    }
                    covered += ov[k].count;
                    prev_end = ov[k].start + ov[k].count;
                }
                EXPECT(covered == B);
            }
        }
}

/* Row tables (heterogeneous DP): a brute-force per-row owner list from the
 * table, each row's piece under TP (the shard's rows dealt to TP ranks as
 * rt_row_split does), against rt_stage_row_split / _piece / _overlaps. */
static int table_owner(int64_t i, const int64_t *t, int dp, int tp, int with_tp) {
    int64_t acc = 0;
    for (int r = 0; r < dp; r++) {
        if (i < acc + t[r])
            return with_tp ? r * tp + owner_of(i - acc, t[r], tp) : r;
        acc += t[r];
    }
    return -1;
}

static void test_row_tables(void) {
    static const int64_t ta[] = {1, 3}, tb[] = {1, 2, 1}, tc[] = {2, 1, 1, 4}, td[] = {4, 1};
    const int64_t *tabs[] = {ta, tb, tc, td, NULL};
    int dps[] = {2, 3, 4, 2, 3};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            for (int ta_ = 1; ta_ <= 2; ta_++)
                for (int tb_ = 1; tb_ <= 3; tb_ += 2)
                    for (int with_tp = 0; with_tp <= 1; with_tp++) {
                        RtContext c;
                        memset(&c, 0, sizeof c);
                        c.nstages = 2;
                        c.stage_dp[0] = dps[a], c.stage_dp[1] = dps[b];
                        c.stage_tp[0] = ta_, c.stage_tp[1] = tb_;
                        c.stage_rows[0] = tabs[a], c.stage_rows[1] = tabs[b];
                        int64_t sa = 0, sb = 0;
                        for (int r = 0; tabs[a] && r < dps[a]; r++) sa += tabs[a][r];
                        for (int r = 0; tabs[b] && r < dps[b]; r++) sb += tabs[b][r];
                        /* a table holds only for its own sum; others: rt_row_split */
                        int64_t B = tabs[a] ? sa : tabs[b] ? sb : 7;
                        int64_t fa[16], fb[16];
                        for (int r = 0; r < dps[a]; r++) fa[r] = B / dps[a] + (r < B % dps[a]);
                        for (int r = 0; r < dps[b]; r++) fb[r] = B / dps[b] + (r < B % dps[b]);
                        const int64_t *oa = tabs[a] && sa == B ? tabs[a] : fa;
                        const int64_t *ob = tabs[b] && sb == B ? tabs[b] : fb;
                        int64_t next = 0;
                        for (int r = 0; r < dps[a]; r++) {
                            int64_t s, n;
                            rt_stage_row_split(&c, 0, B, r, &s, &n);
                            EXPECT(s == next && n == oa[r]);
                            next = s + n;
                        }
                        RtOverlap ov[32];
                        int n = rt_stage_row_overlaps(&c, 0, 1, B, with_tp, ov);
                        int64_t covered = 0, prev = 0;
                        for (int k = 0; k < n; k++) {
                            EXPECT(ov[k].count > 0 && ov[k].start == prev);
                            for (int64_t i = ov[k].start; i < ov[k].start + ov[k].count; i++) {
                                EXPECT(table_owner(i, oa, dps[a], ta_, with_tp) == ov[k].src);
                                EXPECT(table_owner(i, ob, dps[b], tb_, with_tp) == ov[k].dst);
                            }
                            covered += ov[k].count;
                            prev = ov[k].start + ov[k].count;
                        }
                        EXPECT(covered == B);
                    }
}

static void test_arena(void) {
    RtArena a;
    EXPECT(rt_arena_init(&a, 1000, 256) == 0);
    EXPECT(((uintptr_t)a.base % 256) == 0);
    EXPECT(a.size == 1000);
    unsigned char *p = rt_arena_at_checked(&a, 992, 8, __FILE__, __LINE__);
    EXPECT(p == a.base + 992 && p[7] == 0);
    EXPECT(rt_arena_init(&(RtArena){0}, 16, 3) != 0); /* bad alignment refused */
    /* An access past the end dies (exit 1 without MPI) instead of
     * touching memory outside the arena. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        rt_arena_at_checked(&a, 996, 8, __FILE__, __LINE__);
        _exit(0);
    }
    int status = 0;
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    rt_arena_free(&a);
    EXPECT(a.base == NULL);
}

static char tmpdir[256];

static void make_tensors(RtCkptTensor *t, float *w0, float *b0, int64_t *ids, float *w1) {
    for (int i = 0; i < 12; i++) w0[i] = 0.25f * (float)i - 1.0f;
    for (int i = 0; i < 4; i++) b0[i] = (float)i * 3.5f;
    for (int i = 0; i < 5; i++) ids[i] = (int64_t)i * 1000000007LL;
    for (int i = 0; i < 6; i++) w1[i] = -(float)i;
    t[0] = (RtCkptTensor){.layer = 0, .name = "attn.w", .dtype = RT_F32, .ndim = 2,
                          .shape = {3, 4}, .data = w0};
    t[1] = (RtCkptTensor){.layer = 1, .name = "mlp.w", .dtype = RT_F32, .ndim = 2,
                          .shape = {2, 3}, .data = w1};
    t[2] = (RtCkptTensor){.layer = 0, .name = "attn.b", .dtype = RT_F32, .ndim = 1,
                          .shape = {4}, .data = b0};
    t[3] = (RtCkptTensor){.layer = 0, .name = "ids", .dtype = RT_I64, .ndim = 1,
                          .shape = {5}, .data = ids};
    t[4] = (RtCkptTensor){.layer = 0, .name = "scalar", .dtype = RT_F32, .ndim = 0,
                          .data = b0};
}

static void corrupt(const char *path, long at, int truncate_to) {
    if (truncate_to >= 0) {
        EXPECT(truncate(path, truncate_to) == 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    EXPECT(f != NULL);
    if (!f) return;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void test_checkpoint(void) {
    char err[1024], path[512], ck[512];
    RtCkptTensor t[5];
    float w0[12], b0[4], w1[6];
    int64_t ids[5];
    make_tensors(t, w0, b0, ids, w1);
    int64_t step = -1;

    /* Empty / missing directory: no checkpoint. */
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 1);

    /* Step 10 complete. */
    EXPECT(rt_ckpt_write_layer(tmpdir, 10, 0, t, 5, err, sizeof err) == 0);
    EXPECT(rt_ckpt_write_layer(tmpdir, 10, 1, t, 5, err, sizeof err) == 0);
    /* Layer files alone are not a checkpoint. */
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 1);
    /* A manifest for more layers than exist is refused. */
    EXPECT(rt_ckpt_write_manifest(tmpdir, 10, 3, err, sizeof err) != 0);
    EXPECT(strstr(err, "layer_00002.bin") != NULL);
    EXPECT(rt_ckpt_write_manifest(tmpdir, 10, 2, err, sizeof err) == 0);
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 0);
    EXPECT(step == 10);

    /* Round trip: every tensor back bit for bit. */
    RtCkptLayer l;
    EXPECT(rt_ckpt_read_layer(ck, 0, &l, err, sizeof err) == 0);
    EXPECT(l.ntensors == 4 && l.layer == 0 && l.step == 10);
    const RtCkptLoaded *x = rt_ckpt_find(&l, "attn.w");
    EXPECT(x && x->dtype == RT_F32 && x->ndim == 2 && x->shape[0] == 3 && x->shape[1] == 4 &&
           x->nbytes == sizeof w0 && memcmp(x->data, w0, sizeof w0) == 0);
    x = rt_ckpt_find(&l, "scalar");
    EXPECT(x && x->ndim == 0 && x->nbytes == 4 && memcmp(x->data, b0, 4) == 0);
    int64_t ids2[5] = {0};
    EXPECT(rt_ckpt_load_tensor(&l, "ids", RT_I64, 1, (int64_t[]){5}, ids2, err, sizeof err) ==
           0);
    EXPECT(memcmp(ids, ids2, sizeof ids) == 0);
    /* Shape mismatch and unknown names are errors. */
    EXPECT(rt_ckpt_load_tensor(&l, "ids", RT_I64, 1, (int64_t[]){4}, ids2, err, sizeof err) != 0);
    EXPECT(rt_ckpt_load_tensor(&l, "nope", RT_F32, 0, NULL, ids2, err, sizeof err) != 0);
    EXPECT(strstr(err, "nope") != NULL);
    EXPECT(rt_ckpt_find(&l, "mlp.w") == NULL); /* layer 1's tensor is not in layer 0 */
    rt_ckpt_layer_free(&l);
    EXPECT(rt_ckpt_read_layer(ck, 1, &l, err, sizeof err) == 0);
    x = rt_ckpt_find(&l, "mlp.w");
    EXPECT(l.ntensors == 1 && x && memcmp(x->data, w1, sizeof w1) == 0);
    rt_ckpt_layer_free(&l);

    /* Step 20 written but its manifest never: step 10 stays the newest. */
    EXPECT(rt_ckpt_write_layer(tmpdir, 20, 0, t, 5, err, sizeof err) == 0);
    EXPECT(rt_ckpt_write_layer(tmpdir, 20, 1, t, 5, err, sizeof err) == 0);
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 0);
    EXPECT(step == 10);
    EXPECT(rt_ckpt_write_manifest(tmpdir, 20, 2, err, sizeof err) == 0);
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 0);
    EXPECT(step == 20);

    /* Flipped byte in a tensor's data: checksum mismatch naming the tensor. */
    snprintf(path, sizeof path, "%s/step_00000020/layer_00000.bin", tmpdir);
    long sz = file_size(path);
    corrupt(path, sz - 1, -1); /* last byte belongs to the last tensor, "scalar" */
    EXPECT(rt_ckpt_read_layer(ck, 0, &l, err, sizeof err) != 0);
    EXPECT(strstr(err, "checksum mismatch") != NULL && strstr(err, "scalar") != NULL);
    corrupt(path, sz - 1, -1); /* flip back: readable again */
    EXPECT(rt_ckpt_read_layer(ck, 0, &l, err, sizeof err) == 0);
    rt_ckpt_layer_free(&l);
    /* Flipped byte in the header. */
    corrupt(path, 20, -1);
    EXPECT(rt_ckpt_read_layer(ck, 0, &l, err, sizeof err) != 0);
    EXPECT(strstr(err, "layer_00000.bin") != NULL);
    corrupt(path, 20, -1);

    /* Truncated layer file: detected on read, and the checkpoint is no
     * longer complete (size differs from the manifest), so latest falls back
     * to step 10. */
    corrupt(path, 0, (int)(sz - 3));
    EXPECT(rt_ckpt_read_layer(ck, 0, &l, err, sizeof err) != 0);
    EXPECT(strstr(err, "truncated") != NULL);
    corrupt(path, 0, 16);
    EXPECT(rt_ckpt_read_layer(ck, 0, &l, err, sizeof err) != 0);
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 0);
    EXPECT(step == 10);

    /* Removing step 10's MANIFEST leaves no complete checkpoint. */
    snprintf(path, sizeof path, "%s/step_00000010/MANIFEST", tmpdir);
    EXPECT(remove(path) == 0);
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 1);

    /* A flipped byte in a MANIFEST also makes it incomplete. */
    EXPECT(rt_ckpt_write_manifest(tmpdir, 10, 2, err, sizeof err) == 0);
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 0);
    corrupt(path, 25, -1);
    EXPECT(rt_checkpoint_latest(tmpdir, ck, sizeof ck, &step, err, sizeof err) == 1);

    /* Bad input to the writer is an error, not a crash. */
    RtCkptTensor bad = {.layer = 3, .name = "", .dtype = RT_F32, .ndim = 1, .shape = {2},
                        .data = w0};
    EXPECT(rt_ckpt_write_layer(tmpdir, 30, 3, &bad, 1, err, sizeof err) != 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s/ckpt_unit_%ld", argv[1], (long)getpid());
    test_split();
    test_row_tables();
    test_arena();
    test_checkpoint();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
