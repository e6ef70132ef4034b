/* Token-file data loader: llm.c's .bin layout and nanoGPT's headerless
 * uint16 .bin, batched the way llm.c's DataLoader batches (no shuffling),
 * so loss curves are comparable with llm.c and nanoGPT runs.
 *
 * Formats (chosen by the caller: hetc train / the stage binaries'
 * --data-format llmc|raw-u16, default llmc):
 *  - llmc: a 256 x int32 little-endian header {20240520 (magic), 1
 *    (version), ntok, 0...} followed by ntok uint16 tokens; the file size
 *    must be exactly 1024 + 2 ntok bytes (llm.c's "file size is not as
 *    expected" check).  The magic is required: a file without it is
 *    refused (it used to be read as headerless, so an llm.c-sized header
 *    with a damaged magic trained as 512 tokens).
 *  - raw-u16: nanoGPT's raw uint16 tokens (np.memmap(..., dtype=np.uint16)),
 *    no header; the byte length must be even.  A file that starts with the
 *    llm.c magic is refused in this format (its header would train as
 *    tokens 54264, 308, 1, 0, ...).
 *
 * Batching (llm.c dataloader_load_batch with one shard, no shuffle):
 *  with B rows of T tokens per global batch, the file holds
 *  nbatches = (ntok - 1) / (B*T) batches (the -1: each batch reads one token
 *  past its end); step k uses batch idx = k mod nbatches, i.e. it wraps to
 *  the start after the last whole batch, like llm.c's reset at the end of
 *  its last shard (the tail that does not fill a batch is never read).
 *  Batch idx reads tokens [idx*B*T, idx*B*T + B*T + 1): inputs are the first
 *  B*T, targets the last B*T (inputs shifted by one).
 *  Data parallel: B is the GLOBAL batch; rank r of P reads rows
 *  [r*B/P, (r+1)*B/P), i.e. B/P*T+1 tokens at idx*B*T + r*(B/P)*T, which
 *  is llm.c's local_batch_offset_bytes with its B set to B/P.  When P does
 *  not divide B the split is rt_row_split's (the first B mod P ranks read
 *  one row more; heterogeneous DP).  The rows of all ranks concatenated are
 *  the single-process batch.
 */
#ifndef HETC_RT_DATA_LOADER_H
#define HETC_RT_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#define RT_ERRLEN 256
#define RT_LLMC_MAGIC 20240520
#define RT_LLMC_VERSION 1
#define RT_LLMC_HEADER_INTS 256

typedef enum RtTokenFormat { RT_TOKENS_LLMC, RT_TOKENS_NANOGPT } RtTokenFormat;

typedef struct RtDataLoader {
    /* Rows are read with pread, not mmap: a file truncated under a running
     * job then gives a short read and an error naming the file, where a
     * mapping gave SIGBUS. */
    int fd;                 /* open read-only for the loader's lifetime */
    char *path;             /* for messages; NULL: not open (fd then means nothing) */
    size_t file_len;        /* bytes at open */
    size_t tok_off;         /* byte offset of the first token (1024 for llm.c) */
    uint16_t *buf;          /* rows * T + 1 tokens: one read per batch */
    int64_t ntok;
    RtTokenFormat format;
    int64_t B, T;           /* global batch rows, sequence length */
    int dp_rank, dp_size;
    int64_t rows;           /* rows this rank reads: rt_row_split(B, dp_size, dp_rank) */
    int64_t row0;           /* its first row in the batch */
    int64_t nbatches;       /* whole global batches in the file */
    int64_t vocab;          /* > 0: every token read must be below it (set by the caller
                               after opening: the model's vocabulary size) */
} RtDataLoader;

/* Open and validate `path` for global batches of B x T split over dp_size
 * ranks (use 0, 1 for a single process).  Errors (open/mmap failures, bad
 * magic-but-short header, bad version, token count not matching the file
 * size, odd byte length, empty file, fewer than B*T+1 tokens, B not
 * divisible by dp_size) return -1 with a message naming the file. */
int rt_data_open(RtDataLoader *dl, const char *path, int64_t B, int64_t T, int dp_rank,
                 int dp_size, char *err);
/* rt_data_open for a given format (rt_data_open reads RT_TOKENS_LLMC). */
int rt_data_open_format(RtDataLoader *dl, const char *path, RtTokenFormat format, int64_t B,
                        int64_t T, int dp_rank, int dp_size, char *err);
/* Read rows [row0, row0 + rows) of each batch instead (a stage's row
 * table, heterogeneous DP: docs/STAGES.md).  -1 with err when the range is
 * not inside the batch or memory runs out. */
int rt_data_set_shard(RtDataLoader *dl, int64_t row0, int64_t rows, char *err);
/* "llmc" / "raw-u16" (also "nanogpt") -> format; -1 if unknown. */
int rt_token_format_parse(const char *name, RtTokenFormat *out);
/* This rank's rows of step k's batch: rows*T inputs and rows*T targets.
 * The 32-bit variant exists for callers whose id input is int32.  The
 * caller owns the arrays.  -1 on a negative step, or when the file no
 * longer holds the rows (truncated or unreadable since rt_data_open), with
 * a message naming the file, the batch and the sizes. */
int rt_data_batch(const RtDataLoader *dl, int64_t step, int64_t *inputs, int64_t *targets,
                  char *err);
int rt_data_batch_i32(const RtDataLoader *dl, int64_t step, int32_t *inputs, int32_t *targets,
                      char *err);
/* Every token of the file below vocab (a whole-file scan at start-up: a bad
 * id fails before training, not when its batch comes).  0, or -1 with a
 * message naming the file, the token's position and the id. */
int rt_data_check_vocab(const RtDataLoader *dl, int64_t vocab, char *err);
void rt_data_close(RtDataLoader *dl);
const char *rt_token_format_name(RtTokenFormat f);

#endif
