/* hetc plan (and the default `hetc MODEL.onnx CLUSTER.yaml`). */
#ifndef HETC_CMD_PLAN_H
#define HETC_CMD_PLAN_H

int cmd_plan(int argc, char **argv);

#endif
