/* Built-in device catalog (DESIGN §4, issue 5 part 1).
 *
 * Figures are the vendor datasheet's peak *dense* throughput: NVIDIA prints
 * tensor-core figures "with sparsity" (2:4 structured sparsity, twice the
 * dense rate) beside or instead of the dense ones; training dense GEMMs reach
 * at most the dense figure, so that is what the cost model divides by.
 * FP16/BF16 are the tensor-core rates with FP32 accumulation (what mixed
 * precision training uses; GeForce parts run FP16-accumulate at twice that).
 * flops_bf16 == 0 means the part has no BF16 tensor cores (Volta, Turing).
 *
 * Units: FLOP/s, bytes, bytes/s (decimal GB = 1e9 bytes for bandwidth; memory
 * sizes are the marketing GB, which NVIDIA means as GiB for HBM parts:
 * an "A100 40GB" has 40 GiB = 42.9e9 bytes).
 *
 * The H2-Chip-* entries describe the four accelerators of H2 (seed 002,
 * Table 5) which that paper gives only relative to an NVIDIA A100, as ranges
 * (">0.5, <1.0 x A100" FP16); we take the midpoint of each range and say so
 * in the citation.  Their HBM bandwidth is not published at all: we assume
 * the A100-80GB's.
 *
 * HAPT-V100 is what HAPT (seed 004, §6, footnote 4) actually ran: A100s with
 * the core clock throttled to V100 FP16 throughput (Table 2: 125 TFLOP/s) and
 * memory capped at 32 GB, so HBM bandwidth and BF16 support stay the A100's.
 */
#include <strings.h>

#include "planner.h"

#define T 1e12          /* TFLOP/s */
#define GIB 1073741824.0
#define GBS 1e9         /* GB/s */

static const DeviceSpec CATALOG[] = {
    /* name            fp32      fp16       bf16       memory      hbm_bw */
    {"V100-16GB", 15.7 * T, 125 * T, 0, 16 * GIB, 900 * GBS,
     "NVIDIA Tesla V100 GPU datasheet (V100 SXM2 16GB): 15.7 TF FP32, 125 TF FP16 tensor, "
     "900 GB/s HBM2; Volta has no BF16"},
    {"V100-32GB", 15.7 * T, 125 * T, 0, 32 * GIB, 900 * GBS,
     "NVIDIA Tesla V100 GPU datasheet (V100 SXM2 32GB): 15.7 TF FP32, 125 TF FP16 tensor, "
     "900 GB/s HBM2; Volta has no BF16"},
    {"A100-40GB", 19.5 * T, 312 * T, 312 * T, 40 * GIB, 1555 * GBS,
     "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM): 19.5 TF FP32, 312 TF FP16/BF16 "
     "tensor dense (624 TF with sparsity), 1555 GB/s HBM2"},
    {"A100-80GB", 19.5 * T, 312 * T, 312 * T, 80 * GIB, 2039 * GBS,
     "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): 19.5 TF FP32, 312 TF FP16/BF16 "
     "tensor dense (624 TF with sparsity), 2039 GB/s HBM2e"},
    {"H100-SXM", 67 * T, 989 * T, 989 * T, 80 * GIB, 3350 * GBS,
     "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM5 80GB): 67 TF FP32, 989 TF FP16/BF16 "
     "tensor dense (1979 TF with sparsity), 3.35 TB/s HBM3"},
    {"H100-PCIe", 51 * T, 756 * T, 756 * T, 80 * GIB, 2000 * GBS,
     "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe 80GB): 51 TF FP32, 756 TF FP16/BF16 "
     "tensor dense (1513 TF with sparsity), 2.0 TB/s HBM2e"},
    {"H200", 67 * T, 989 * T, 989 * T, 141 * GIB, 4800 * GBS,
     "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM 141GB): 67 TF FP32, 989 TF FP16/BF16 "
     "tensor dense (1979 TF with sparsity), 4.8 TB/s HBM3e"},
    {"L4", 30.3 * T, 121 * T, 121 * T, 24 * GIB, 300 * GBS,
     "NVIDIA L4 Tensor Core GPU datasheet: 30.3 TF FP32, 242 TF FP16/BF16 tensor with sparsity "
     "= 121 TF dense, 24 GB GDDR6, 300 GB/s"},
    {"A10", 31.2 * T, 125 * T, 125 * T, 24 * GIB, 600 * GBS,
     "NVIDIA A10 Tensor Core GPU datasheet: 31.2 TF FP32, 125 TF FP16/BF16 tensor dense "
     "(250 TF with sparsity), 24 GB GDDR6, 600 GB/s"},
    {"T4", 8.1 * T, 65 * T, 0, 16 * GIB, 320 * GBS,
     "NVIDIA T4 Tensor Core GPU datasheet: 8.1 TF FP32, 65 TF FP16 mixed-precision tensor, "
     "16 GB GDDR6, 320 GB/s; Turing has no BF16"},
    {"RTX3090", 35.6 * T, 71 * T, 71 * T, 24 * GIB, 936 * GBS,
     "NVIDIA Ampere GA102 GPU Architecture whitepaper (GeForce RTX 3090): 35.6 TF FP32, "
     "71 TF FP16/BF16 tensor with FP32 accumulate dense (142 TF with sparsity), "
     "24 GB GDDR6X, 936 GB/s"},
    {"RTX4090", 82.6 * T, 165.2 * T, 165.2 * T, 24 * GIB, 1008 * GBS,
     "NVIDIA Ada Lovelace GPU Architecture whitepaper (GeForce RTX 4090): 82.6 TF FP32, "
     "165.2 TF FP16/BF16 tensor with FP32 accumulate dense (330.3 TF with sparsity), "
     "24 GB GDDR6X, 1008 GB/s"},
    {"HAPT-V100", 19.5 * T * 125.0 / 312.0, 125 * T, 125 * T, 32 * GIB, 1555 * GBS,
     "HAPT (seed 004) Table 2 and footnote 4: an A100-40GB throttled to 125 TF FP16 and "
     "capped at 32 GB; FP32 scaled by the same clock ratio, HBM bandwidth and BF16 kept "
     "from the A100 (not a datasheet V100)"},
    /* H2 (seed 002) Table 5: FP16 "relative to the A100"; midpoints of the
     * stated ranges; FP32 and BF16 scaled by the same factor; HBM assumed. */
    {"H2-Chip-A", 19.5 * T * 0.75, 312 * T * 0.75, 312 * T * 0.75, 96 * GIB, 2039 * GBS,
     "H2 (seed 002) Table 5, relative to an A100 only: FP16 '>0.5, <1.0 x A100' taken as "
     "0.75 x 312 TF (FP32/BF16 scaled alike), 96 GB, 16 chips/node; HBM bandwidth not "
     "published, assumed A100-80GB's 2039 GB/s"},
    {"H2-Chip-B", 19.5 * T * 0.75, 312 * T * 0.75, 312 * T * 0.75, 64 * GIB, 2039 * GBS,
     "H2 (seed 002) Table 5, relative to an A100 only: FP16 '>0.5, <1.0 x A100' taken as "
     "0.75 x 312 TF (FP32/BF16 scaled alike), 64 GB, 8 chips/node; HBM bandwidth not "
     "published, assumed A100-80GB's 2039 GB/s"},
    {"H2-Chip-C", 19.5 * T * 0.25, 312 * T * 0.25, 312 * T * 0.25, 32 * GIB, 2039 * GBS,
     "H2 (seed 002) Table 5, relative to an A100 only: FP16 '>0.0, <0.5 x A100' taken as "
     "0.25 x 312 TF (FP32/BF16 scaled alike), 32 GB, 16 chips/node; HBM bandwidth not "
     "published, assumed A100-80GB's 2039 GB/s"},
    {"H2-Chip-D", 19.5 * T * 1.75, 312 * T * 1.75, 312 * T * 1.75, 32 * GIB, 2039 * GBS,
     "H2 (seed 002) Table 5, relative to an A100 only: FP16 '>1.5, <2.0 x A100' taken as "
     "1.75 x 312 TF (FP32/BF16 scaled alike), 32 GB, 8 chips/node; HBM bandwidth not "
     "published, assumed A100-80GB's 2039 GB/s"},
};

int catalog_count(void)
{
    return (int)(sizeof CATALOG / sizeof CATALOG[0]);
}

const DeviceSpec *catalog_at(int i)
{
    if (i < 0 || i >= catalog_count())
        return NULL;
    return &CATALOG[i];
}

const DeviceSpec *catalog_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < catalog_count(); i++)
        if (strcasecmp(CATALOG[i].name, name) == 0)
            return &CATALOG[i];
    return NULL;
}
