/*
 * Shared by the sdpa tool's source files: the subcommands (one file each,
 * sdpa.c holds main, demo, version and help) and the argument helpers of
 * args.c.
 *
 * Conventions of every subcommand: `--help` (or -h) prints its usage on
 * stdout and exits 0; a bad or unknown argument prints ONE line on stderr
 * that names it and exits 2 (TOOL_EXIT_USAGE); a failure of the library
 * prints its status and message and exits 1.
 */
#ifndef SDPA_TOOL_H
#define SDPA_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { TOOL_EXIT_OK = 0, TOOL_EXIT_FAILURE = 1, TOOL_EXIT_USAGE = 2 };

/* The subcommands: argv[0] is the command's name. */
int tool_cmd_demo(int argc, char **argv);
int tool_cmd_version(int argc, char **argv);
int tool_cmd_help(int argc, char **argv);
int tool_cmd_stats(int argc, char **argv);
int tool_cmd_plan(int argc, char **argv);

/* Their usage texts (printed by `sdpa CMD --help` and `sdpa help CMD`). */
void tool_usage_stats(FILE *f);
void tool_usage_plan(FILE *f);

/* Prints "sdpa CMD: <message>\n" on stderr (one line) and returns
 * TOOL_EXIT_USAGE. Text from the command line goes through tool_escape. */
int tool_bad_arg(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The first len bytes of s (up to its end) as buf, a C string of at most
 * size bytes: backslash and double quote escaped with a backslash, control
 * characters as \xHH, cut with "..." when it does not fit. Returns buf. */
enum { TOOL_ESCAPED = 160 };
const char *tool_escape(const char *s, size_t len, char *buf, size_t size);

/* Walks argv[1..] of a subcommand. Options are `--name value` or
 * `--name=value`; flags are `--name`. */
typedef struct tool_args {
    const char *cmd; /* "stats", "plan": for the messages */
    int argc, next;
    char **argv;
    const char *opt;   /* the option being looked at, e.g. "--dk" */
    const char *value; /* its value after tool_args_value */
    const char *inline_value;
    size_t opt_len; /* length of the name in argv (before any '=') */
} tool_args;

void tool_args_init(tool_args *a, const char *cmd, int argc, char **argv);
/* Advances to the next argument; false at the end. A positional argument
 * is an error, reported here: *status is set to TOOL_EXIT_USAGE. */
bool tool_args_next(tool_args *a, int *status);
/* Is the current option `name` (with or without "=value")? */
bool tool_args_is(const tool_args *a, const char *name);
/* Takes the option's value (inline or the next argument); reports a
 * missing one and returns false. */
bool tool_args_value(tool_args *a, int *status);
/* Reports a flag given a value (`--csv=1`); false then. */
bool tool_args_flag(tool_args *a, int *status);
/* Reports the current option as unknown. */
int tool_args_unknown(const tool_args *a);

/* Value parsers: false (with the one-line report) on a bad value. */
bool tool_parse_int(tool_args *a, int64_t min, int64_t max, int64_t *out,
                    int *status);
/* A comma-separated list of integers in [min, max], at most max_count. */
bool tool_parse_int_list(tool_args *a, int64_t min, int64_t max, int64_t *out,
                         int max_count, int *count, int *status);
/* A comma-separated list of integers in [min, max], each VALUE or
 * COUNTxVALUE (COUNT >= 1 copies of VALUE: "31x1,512" is 31 ones, then
 * 512), at most max_count values in all. */
bool tool_parse_repeat_list(tool_args *a, int64_t min, int64_t max,
                            int64_t *out, int max_count, int *count,
                            int *status);
/* One of the NULL-terminated names; *out receives its index. */
bool tool_parse_choice(tool_args *a, const char *const *names, int *out,
                       int *status);

/* "64 GiB", "644 KiB", "8.00 MiB": three significant digits, binary units. */
void tool_format_bytes(double bytes, char *buf, size_t size);

#endif /* SDPA_TOOL_H */
