/* Token-file data loader; layout and batching rules in data_loader.h. */
#include "data_loader.h"
#include "input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, const char *path, const char *what)
{
    if (err)
        snprintf(err, RT_ERRLEN, "%s: %s", path, what);
    return -1;
}

const char *rt_token_format_name(RtTokenFormat f)
{
    return f == RT_TOKENS_LLMC ? "llm.c" : "raw-u16";
}

static int32_t le_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* Decide the format and locate the tokens from the first bytes (bytes,
 * nbytes of them: the whole header when the file is that long) and the
 * file's length. */
static int parse_layout(RtDataLoader *dl, const unsigned char *bytes, size_t nbytes,
                        RtTokenFormat want, const char *path, char *err)
{
    size_t len = dl->file_len;
    size_t hdr = RT_LLMC_HEADER_INTS * sizeof(int32_t);
    char msg[RT_ERRLEN];
    int magic = nbytes >= 4 && le_i32(bytes) == RT_LLMC_MAGIC;
    if (want == RT_TOKENS_LLMC && !magic) {
        if (nbytes >= 4)
            snprintf(msg, sizeof msg,
                     "no llm.c header: the first int32 is %d, not the magic %d (a headerless "
                     "uint16 token file needs --data-format raw-u16)",
                     (int)le_i32(bytes), RT_LLMC_MAGIC);
        else
            snprintf(msg, sizeof msg,
                     "%zu bytes, too short for an llm.c header (a headerless uint16 token file "
                     "needs --data-format raw-u16)", len);
        return fail(err, path, msg);
    }
    if (want == RT_TOKENS_NANOGPT && magic) {
        snprintf(msg, sizeof msg,
                 "starts with the llm.c magic %d: an llm.c token file, not raw uint16 tokens "
                 "(drop --data-format raw-u16)", RT_LLMC_MAGIC);
        return fail(err, path, msg);
    }
    if (magic) {
        if (len < hdr) {
            snprintf(msg, sizeof msg,
                     "llm.c magic %d but only %zu bytes, shorter than the %zu-byte header",
                     RT_LLMC_MAGIC, len, hdr);
            return fail(err, path, msg);
        }
        int32_t version = le_i32(bytes + 4), ntok = le_i32(bytes + 8);
        if (version != RT_LLMC_VERSION) {
            snprintf(msg, sizeof msg, "llm.c token file has version %d, expected %d", version,
                     RT_LLMC_VERSION);
            return fail(err, path, msg);
        }
        if (ntok <= 0) {
            snprintf(msg, sizeof msg, "llm.c header token count %d is not positive", ntok);
            return fail(err, path, msg);
        }
        size_t want = hdr + (size_t)ntok * sizeof(uint16_t);
        if (want != len) {
            snprintf(msg, sizeof msg,
                     "llm.c header says %d tokens (%zu bytes with header) but the file has %zu "
                     "bytes (%s)",
                     ntok, want, len, want > len ? "token count beyond file size"
                                                 : "trailing bytes after the tokens");
            return fail(err, path, msg);
        }
        dl->format = RT_TOKENS_LLMC;
        dl->tok_off = hdr;
        dl->ntok = ntok;
        return 0;
    }
    if (len % 2) {
        snprintf(msg, sizeof msg,
                 "raw uint16 tokens need an even byte length, the file has %zu bytes", len);
        return fail(err, path, msg);
    }
    dl->format = RT_TOKENS_NANOGPT;
    dl->tok_off = 0;
    dl->ntok = (int64_t)(len / 2);
    return 0;
}

int rt_token_format_parse(const char *name, RtTokenFormat *out)
{
    if (!name)
        return -1;
    if (!strcmp(name, "llmc"))
        *out = RT_TOKENS_LLMC;
    else if (!strcmp(name, "raw-u16") || !strcmp(name, "nanogpt"))
        *out = RT_TOKENS_NANOGPT;
    else
        return -1;
    return 0;
}

int rt_data_open(RtDataLoader *dl, const char *path, int64_t B, int64_t T, int dp_rank,
                 int dp_size, char *err)
{
    return rt_data_open_format(dl, path, RT_TOKENS_LLMC, B, T, dp_rank, dp_size, err);
}

int rt_data_open_format(RtDataLoader *dl, const char *path, RtTokenFormat format, int64_t B,
                        int64_t T, int dp_rank, int dp_size, char *err)
{
    memset(dl, 0, sizeof *dl);
    char msg[RT_ERRLEN];
    if (B < 1 || T < 1)
        return fail(err, path, "batch rows and sequence length must be >= 1");
    if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
        snprintf(msg, sizeof msg, "data-parallel rank %d of %d is out of range", dp_rank, dp_size);
        return fail(err, path, msg);
    }
    if (B < dp_size) {
        snprintf(msg, sizeof msg, "batch of %lld rows leaves some of %d data-parallel ranks "
                 "without a row", (long long)B, dp_size);
        return fail(err, path, msg);
    }
    int fd = input_open(path, err, err ? RT_ERRLEN : 0); /* a FIFO would block in open() */
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fail(err, path, strerror(e));
    }
    if (st.st_size == 0) {
        close(fd);
        return fail(err, path, "empty token file");
    }
    dl->path = strdup(path);
    if (!dl->path) {
        close(fd);
        return fail(err, path, "out of memory");
    }
    dl->fd = fd; /* owned from here: rt_data_close closes it (path set) */
    dl->file_len = (size_t)st.st_size;
    unsigned char head[RT_LLMC_HEADER_INTS * sizeof(int32_t)];
    size_t want = dl->file_len < sizeof head ? dl->file_len : sizeof head;
    ssize_t got = pread(fd, head, want, 0);
    if (got != (ssize_t)want) {
        snprintf(msg, sizeof msg, "cannot read the header: %s",
                 got < 0 ? strerror(errno) : "short read");
        rt_data_close(dl);
        return fail(err, path, msg);
    }
    if (parse_layout(dl, head, want, format, path, err)) {
        rt_data_close(dl);
        return -1;
    }
    dl->B = B;
    dl->T = T;
    dl->dp_rank = dp_rank;
    dl->dp_size = dp_size;
    /* rank r's rows as every other split of a batch's rows (rt_row_split):
     * uneven when dp_size does not divide B (heterogeneous DP, docs/STAGES.md) */
    int64_t base = B / dp_size, rem = B % dp_size;
    dl->row0 = (int64_t)dp_rank * base + (dp_rank < rem ? dp_rank : rem);
    dl->rows = base + (dp_rank < rem ? 1 : 0);
    /* llm.c: shard_num_samples = (ntok - 1) / (B*T) across all processes */
    if (B > (INT64_MAX - 1) / T || dl->ntok < B * T + 1) {
        snprintf(msg, sizeof msg,
                 "%lld tokens (%s format) are too few for one batch of %lld x %lld (+1) tokens",
                 (long long)dl->ntok, rt_token_format_name(dl->format), (long long)B,
                 (long long)T);
        rt_data_close(dl);
        return fail(err, path, msg);
    }
    dl->nbatches = (dl->ntok - 1) / (B * T);
    dl->buf = malloc(((size_t)dl->rows * (size_t)T + 1) * sizeof *dl->buf);
    if (!dl->buf) {
        rt_data_close(dl);
        return fail(err, path, "out of memory for one batch of tokens");
    }
    return 0;
}

int rt_data_set_shard(RtDataLoader *dl, int64_t row0, int64_t rows, char *err)
{
    char msg[RT_ERRLEN];
    if (row0 < 0 || rows < 1 || row0 + rows > dl->B) {
        snprintf(msg, sizeof msg, "rows [%lld, %lld) are not inside a batch of %lld rows",
                 (long long)row0, (long long)(row0 + rows), (long long)dl->B);
        return fail(err, dl->path, msg);
    }
    uint16_t *b = realloc(dl->buf, ((size_t)rows * (size_t)dl->T + 1) * sizeof *b);
    if (!b)
        return fail(err, dl->path, "out of memory for one batch of tokens");
    dl->buf = b;
    dl->row0 = row0;
    dl->rows = rows;
    return 0;
}

static int bad_step(int64_t step, char *err)
{
    if (step >= 0)
        return 0;
    if (err)
        snprintf(err, RT_ERRLEN, "data loader: step %lld is negative", (long long)step);
    return -1;
}

/* Read this rank's rows of step's batch (rows*T + 1 tokens) into dl->buf,
 * little-endian as stored.  A short read means the file shrank since open. */
static int read_rows(const RtDataLoader *dl, int64_t step, char *err)
{
    if (bad_step(step, err))
        return -1;
    int64_t idx = step % dl->nbatches;
    int64_t first = idx * dl->B * dl->T + dl->row0 * dl->T;
    size_t n = ((size_t)dl->rows * (size_t)dl->T + 1) * sizeof(uint16_t);
    size_t off = dl->tok_off + (size_t)first * sizeof(uint16_t), done = 0;
    while (done < n) {
        ssize_t r = pread(dl->fd, (char *)dl->buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            struct stat st;
            long long now = fstat(dl->fd, &st) == 0 ? (long long)st.st_size : -1;
            if (err)
                snprintf(err, RT_ERRLEN,
                         "%s: token file changed under the run: batch %lld needs bytes "
                         "[%zu, %zu) but %s (it had %zu bytes at start, now %lld)",
                         dl->path, (long long)idx, off, off + n,
                         r < 0 ? strerror(errno) : "the file ends before them", dl->file_len,
                         now);
            return -1;
        }
        done += (size_t)r;
    }
    /* Token ids must index the model's vocabulary: an id past it would read
     * outside the embedding (or the loss's logits row).  The file, the
     * batch, the token's position in the file and the id are named. */
    for (int64_t i = 0; dl->vocab > 0 && i < dl->rows * dl->T + 1; i++) {
        const unsigned char *b = (const unsigned char *)(dl->buf + i); /* little-endian */
        unsigned t = (unsigned)(b[0] | b[1] << 8);
        if (t < dl->vocab)
            continue;
        if (err)
            snprintf(err, RT_ERRLEN,
                     "%s: token id %u at token %lld (batch %lld) is not below the model's "
                     "vocabulary size %lld: the file was tokenized for another vocabulary "
                     "(tools/prepare_data.py --vocab-size, or a model with a larger vocabulary)",
                     dl->path, (unsigned)t, (long long)(first + i), (long long)idx,
                     (long long)dl->vocab);
        return -1;
    }
    return 0;
}

static uint16_t tok_at(const RtDataLoader *dl, int64_t i)
{
    const unsigned char *b = (const unsigned char *)(dl->buf + i);
    return (uint16_t)(b[0] | b[1] << 8);
}

int rt_data_batch(const RtDataLoader *dl, int64_t step, int64_t *inputs, int64_t *targets,
                  char *err)
{
    if (read_rows(dl, step, err))
        return -1;
    int64_t n = dl->rows * dl->T;
    for (int64_t i = 0; i < n; i++) {
        inputs[i] = tok_at(dl, i);
        targets[i] = tok_at(dl, i + 1);
    }
    return 0;
}

int rt_data_batch_i32(const RtDataLoader *dl, int64_t step, int32_t *inputs, int32_t *targets,
                      char *err)
{
    if (read_rows(dl, step, err))
        return -1;
    int64_t n = dl->rows * dl->T;
    for (int64_t i = 0; i < n; i++) {
        inputs[i] = tok_at(dl, i);
        targets[i] = tok_at(dl, i + 1);
    }
    return 0;
}

int rt_data_check_vocab(const RtDataLoader *dl, int64_t vocab, char *err)
{
    enum { CHUNK = 1 << 16 };
    unsigned char *b = malloc(2 * CHUNK);
    if (!b) {
        snprintf(err, RT_ERRLEN, "%s: out of memory", dl->path);
        return -1;
    }
    int rc = 0;
    for (int64_t at = 0; at < dl->ntok && !rc;) {
        size_t want = (size_t)(dl->ntok - at < CHUNK ? dl->ntok - at : CHUNK) * 2;
        ssize_t r = pread(dl->fd, b, want, (off_t)(dl->tok_off + (size_t)at * 2));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || r % 2) {
            snprintf(err, RT_ERRLEN, "%s: cannot read token %lld: %s", dl->path, (long long)at,
                     r < 0 ? strerror(errno) : "the file ends early");
            rc = -1;
            break;
        }
        for (ssize_t i = 0; i < r / 2; i++) {
            unsigned t = (unsigned)(b[2 * i] | b[2 * i + 1] << 8);
            if (t < vocab)
                continue;
            snprintf(err, RT_ERRLEN,
                     "%s: token id %u at token %lld is not below the model's vocabulary size "
                     "%lld: the file was tokenized for another vocabulary "
                     "(tools/prepare_data.py --vocab-size, or a model with a larger vocabulary)",
                     dl->path, t, (long long)(at + i), (long long)vocab);
            rc = -1;
            break;
        }
        at += r / 2;
    }
    free(b);
    return rc;
}

void rt_data_close(RtDataLoader *dl)
{
    if (dl->path) /* a zeroed, never-opened loader owns no fd (not even 0) */
        close(dl->fd);
    free(dl->path);
    free(dl->buf);
    memset(dl, 0, sizeof *dl);
}
