/* hetc compile (the default `hetc MODEL.onnx CLUSTER.yaml -o DIR`): plan,
 * then one executable per pipeline stage and the launcher. */
#ifndef HETC_CMD_COMPILE_H
#define HETC_CMD_COMPILE_H

int cmd_compile(int argc, char **argv);

#endif
