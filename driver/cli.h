/* Small helpers shared by the hetc subcommands. */
#ifndef HETC_CLI_H
#define HETC_CLI_H

#include <stdint.h>

#include "ir.h"

/* Parse a non-negative integer option value; prints an error naming the
 * option and returns -1 on junk. */
int cli_parse_i64(const char *opt, const char *s, int64_t *out);
/* "--name=value" or "--name value": if argv[*i] is the option, store its value
 * (consuming the next arg when needed) and return 1; 0 if not this option;
 * -1 if the value is missing. */
int cli_opt(int argc, char **argv, int *i, const char *name, const char **val);
/* A non-option argument or an unknown option of subcommand `cmd`: an
 * unknown option is reported; a positional fills *model, once.  Returns 0
 * when the argument was taken, -1 (after printing why) otherwise. */
int cli_take_model(const char *cmd, const char *arg, const char **model);
/* `--eps` meant AdamW's epsilon in hetc train and the planner's ε in hetc
 * plan / compile; each meaning has its own name now (--adam-eps,
 * --plan-eps) in every command.  1 (after saying which name to use) when
 * arg is the old spelling, 0 otherwise. */
int cli_old_eps(const char *cmd, const char *arg);
/* mkdir -p */
int cli_mkdirs(const char *path, IrError *err);

int cmd_import(int argc, char **argv);
int cmd_run(int argc, char **argv);

#endif
