/* Vocabulary-parallel embedding and LM head + loss (issue 9 part 1):
 * matched on the canonical IR after tp_shard's Linear-anchored patterns.
 * Not implemented yet: nothing is matched, both stay replicated. */
#include "tp_shard_int.h"

int tps_vocab(Ts *t, IrError *err) {
    (void)t;
    (void)err;
    return 0;
}
