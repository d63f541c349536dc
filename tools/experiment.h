/*
 * sdpa experiment (experiment.c): the subcommand and its usage text, with
 * the conventions of tool.h's subcommands.
 */
#ifndef SDPA_TOOL_EXPERIMENT_H
#define SDPA_TOOL_EXPERIMENT_H

#include <stdio.h>

int tool_cmd_experiment(int argc, char **argv);
void tool_usage_experiment(FILE *f);

#endif /* SDPA_TOOL_EXPERIMENT_H */
