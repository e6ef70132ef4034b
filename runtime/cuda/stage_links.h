/* The `link PEER direct|cpu` records of a stage config (docs/STAGE_ABI.md):
 * the transport of each stage boundary, from the cluster's per-link
 * `transport:`.  The shared config parser ignores them (the host backend
 * has one transport); the CUDA backend reads them with this parser.  Plain
 * C, no CUDA: tests/cuda tests it in every build. */
#ifndef HETRT_STAGE_LINKS_H
#define HETRT_STAGE_LINKS_H

#include <stddef.h>

enum { STAGE_LINK_NONE = 0, STAGE_LINK_CPU = 1, STAGE_LINK_DIRECT = 2 };

/* Fill out[0..nstages-1] with STAGE_LINK_* for every `link` record of the
 * config text (peers without one: STAGE_LINK_NONE, i.e. CPU-mediated).
 * 0, or -1 with err naming the line: a malformed record, a peer out of
 * range or equal to `stage`, a transport other than direct|cpu, a peer
 * given twice. */
int stage_links_parse(const char *config, int stage, int nstages, unsigned char *out, char *err,
                      size_t errlen);

#endif
