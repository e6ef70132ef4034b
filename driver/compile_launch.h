/* The launcher files hetc writes beside the stage binaries: launch.sh (one
 * MPMD mpirun of every stage, or srun with --slurm), srun.conf (Slurm
 * --multi-prog), job.sbatch (the Slurm job in one file) and a hostfile
 * template from cluster.yaml. */
#ifndef HETC_COMPILE_LAUNCH_H
#define HETC_COMPILE_LAUNCH_H

#include <stdint.h>

#include "compile_plan.h"
#include "ir.h"

/* Write DIR/launch.sh, DIR/srun.conf and DIR/hostfile (each atomically:
 * temp file + rename).  Stage s runs as DIR/stage_s on plan->stages[s].dp
 * ranks. */
/* launch.sh, srun.conf, hostfile and job.sbatch into dir; srun.conf and
 * job.sbatch name the files under final_dir (where dir is swapped in); launch.sh checks every stage
 * binary's build id against build_id before it starts the job. */
int compile_write_launchers(const char *dir, const char *final_dir, const CompPlan *plan,
                            uint64_t build_id, IrError *err);

/* Write `text` to `path` atomically (common/atomic_file.h: a temp file
 * beside it, fsync, rename); mode is applied before the rename. */
int compile_write_file(const char *path, const char *text, int mode, IrError *err);

#endif
