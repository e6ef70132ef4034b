/* PartStages for the codegen tests, built without passes/partition.c:
 *  - fixture_one_stage: a model's whole training graph as the one stage
 *    of a 1-stage pipeline (forward pipeline, tie-weights, loss, autodiff:
 *    what hetc train runs), update graph built like driver/train_state.c;
 *  - fixture_two_stage: a hand-built two-stage split (Embedding+LayerNorm
 *    | Linear+loss) with the boundary activation sent forward and its
 *    gradient sent back, backward from autodiff_seeded: what partition
 *    produces for two stages. */
#ifndef HETC_STAGE_FIXTURE_H
#define HETC_STAGE_FIXTURE_H

#include "partition.h"

int fixture_one_stage(PartStage *st, const char *onnx, int64_t batch, int64_t seq, int sgd,
                      IrError *err);
int fixture_two_stage(PartStage st[2], int64_t batch, int64_t seq, int sgd, IrError *err);
void fixture_free(PartStage *st);

#endif
