/* hetc train: single-process training on the host backend (docs/TRAINING.md). */
#ifndef HETC_CMD_TRAIN_H
#define HETC_CMD_TRAIN_H

int cmd_train(int argc, char **argv);

#endif
