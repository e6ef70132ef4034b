/* hetc compile's output directory, replaced as a whole: the build is
 * written into a fresh sibling DIR.building-PID and swapped in at the end
 * (renameat2 RENAME_EXCHANGE), so a compile killed or failing half-way
 * leaves the old build intact (or no DIR), never new stage binaries beside
 * old ones.  Entries of the old DIR that are not hetc outputs (a user's
 * files) move into the new one.  Issue 16 item 7; docs/STAGES.md. */
#ifndef HETC_BUILD_DIR_H
#define HETC_BUILD_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

/* Create final's parents and a fresh final.building-PID in tmp (removing
 * the leftovers of killed compiles: siblings final.building-P whose process
 * P is gone).  final naming the current directory (or /) cannot be swapped:
 * tmp is then final itself, with a warning. */
int build_dir_begin(const char *final, char *tmp, size_t tmplen, IrError *err);
/* fsync every file of tmp and tmp itself, swap tmp in as final, carry the
 * old final's foreign entries over, remove the old build. */
int build_dir_commit(const char *final, const char *tmp, IrError *err);
/* Remove tmp (a failed compile; nothing when the build went in place). */
void build_dir_abandon(const char *final, const char *tmp);
/* final as an absolute path (its parent resolved; final itself need not
 * exist). */
void build_dir_abs(const char *final, char *out, size_t n);
/* Remove path and everything under it (symbolic links are not followed). */
void build_dir_rm_tree(const char *path);
/* A fresh build id: 64 random bits, never 0. */
uint64_t build_dir_new_id(void);

#endif
