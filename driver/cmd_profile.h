/* hetc profile: measure each distinct layer on the local GPU and write the
 * planner's profile database (docs/PROFILE_DB.md, docs/CUDA.md). */
#ifndef HETC_CMD_PROFILE_H
#define HETC_CMD_PROFILE_H

int cmd_profile(int argc, char **argv);

#endif
