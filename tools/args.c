/*
 * Argument helpers of the sdpa tool: one-line reports of bad arguments
 * (which echo the user's text escaped, so that a control character cannot
 * break the line or reach the terminal), the option walker and the value
 * parsers (tool.h).
 */
#include "tool.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *tool_escape(const char *s, size_t len, char *buf, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    size_t used = 0;
    for (size_t i = 0; i < len && s[i] != '\0'; i++) {
        const unsigned char c = (unsigned char)s[i];
        char piece[5] = {(char)c, '\0'};
        if (c == '\\' || c == '"') {
            piece[0] = '\\';
            piece[1] = (char)c;
            piece[2] = '\0';
        } else if (c < 0x20 || c == 0x7f) {
            piece[0] = '\\';
            piece[1] = 'x';
            piece[2] = hex[c >> 4];
            piece[3] = hex[c & 15];
            piece[4] = '\0';
        }
        const size_t n = strlen(piece);
        if (used + n + 4 > size) { /* room for "..." and the terminator */
            memcpy(buf + used, "...", 4);
            return buf;
        }
        memcpy(buf + used, piece, n);
        used += n;
    }
    buf[used] = '\0';
    return buf;
}

int tool_bad_arg(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sdpa %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return TOOL_EXIT_USAGE;
}

void tool_args_init(tool_args *a, const char *cmd, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    a->next = 1;
}

bool tool_args_next(tool_args *a, int *status)
{
    if (a->next >= a->argc)
        return false;
    const char *arg = a->argv[a->next++];
    if (strncmp(arg, "--", 2) != 0 && strcmp(arg, "-h") != 0) {
        char shown[TOOL_ESCAPED];
        *status = tool_bad_arg(a->cmd,
                               "unexpected argument \"%s\" (options start "
                               "with --; see sdpa %s --help)",
                               tool_escape(arg, SIZE_MAX, shown, sizeof shown),
                               a->cmd);
        return false;
    }
    const char *eq = strchr(arg, '=');
    a->opt = arg;
    a->opt_len = eq ? (size_t)(eq - arg) : strlen(arg);
    a->inline_value = eq ? eq + 1 : NULL;
    a->value = NULL;
    return true;
}

bool tool_args_is(const tool_args *a, const char *name)
{
    return strlen(name) == a->opt_len && strncmp(a->opt, name, a->opt_len) == 0;
}

bool tool_args_value(tool_args *a, int *status)
{
    if (a->inline_value) {
        a->value = a->inline_value;
        return true;
    }
    if (a->next >= a->argc) {
        char opt[TOOL_ESCAPED];
        *status =
            tool_bad_arg(a->cmd, "%s: needs a value",
                         tool_escape(a->opt, a->opt_len, opt, sizeof opt));
        return false;
    }
    a->value = a->argv[a->next++];
    return true;
}

bool tool_args_flag(tool_args *a, int *status)
{
    if (!a->inline_value)
        return true;
    char opt[TOOL_ESCAPED], value[TOOL_ESCAPED];
    *status = tool_bad_arg(
        a->cmd, "%s: takes no value (got \"%s\")",
        tool_escape(a->opt, a->opt_len, opt, sizeof opt),
        tool_escape(a->inline_value, SIZE_MAX, value, sizeof value));
    return false;
}

int tool_args_unknown(const tool_args *a)
{
    char opt[TOOL_ESCAPED];
    return tool_bad_arg(a->cmd, "unknown option \"%s\" (see sdpa %s --help)",
                        tool_escape(a->opt, a->opt_len, opt, sizeof opt),
                        a->cmd);
}

/* The option's name and value, escaped, for a report. */
typedef struct shown_arg {
    char opt[TOOL_ESCAPED], value[TOOL_ESCAPED];
} shown_arg;

static shown_arg *show_arg(const tool_args *a, shown_arg *shown)
{
    tool_escape(a->opt, a->opt_len, shown->opt, sizeof shown->opt);
    tool_escape(a->value, SIZE_MAX, shown->value, sizeof shown->value);
    return shown;
}

/* Parses one decimal integer from s up to `end_char` (',' or '\0'); *end
 * receives where it stopped. */
static bool parse_one(const char *s, int64_t *out, const char **end)
{
    if (*s < '0' || *s > '9') /* no sign, no blank */
        return false;
    errno = 0;
    char *stop;
    long long v = strtoll(s, &stop, 10);
    if (errno != 0 || stop == s)
        return false;
    *out = (int64_t)v;
    *end = stop;
    return true;
}

static void report_range(tool_args *a, int64_t min, int64_t max, int *status,
                         bool list)
{
    char bound[64] = "";
    if (min != 1)
        snprintf(bound, sizeof bound, " in [%lld, %lld]", (long long)min,
                 (long long)max);
    else if (max != INT64_MAX)
        snprintf(bound, sizeof bound, " (%s %lld)",
                 list ? "each at most" : "at most", (long long)max);
    const char *what =
        list ? (min == 1 ? "a list of positive integers" : "a list of integers")
             : (min == 1 ? "a positive integer" : "an integer");
    shown_arg shown;
    show_arg(a, &shown);
    *status = tool_bad_arg(a->cmd, "%s: \"%s\" is not %s%s", shown.opt,
                           shown.value, what, bound);
}

bool tool_parse_int(tool_args *a, int64_t min, int64_t max, int64_t *out,
                    int *status)
{
    const char *end;
    int64_t v;
    if (!parse_one(a->value, &v, &end) || *end != '\0' || v < min || v > max) {
        report_range(a, min, max, status, false);
        return false;
    }
    *out = v;
    return true;
}

bool tool_parse_int_list(tool_args *a, int64_t min, int64_t max, int64_t *out,
                         int max_count, int *count, int *status)
{
    const char *s = a->value;
    int n = 0;
    for (;;) {
        const char *end;
        int64_t v;
        if (!parse_one(s, &v, &end) || (*end != ',' && *end != '\0') ||
            v < min || v > max) {
            report_range(a, min, max, status, true);
            return false;
        }
        if (n == max_count) {
            shown_arg shown;
            show_arg(a, &shown);
            *status = tool_bad_arg(a->cmd, "%s: \"%s\" has more than %d values",
                                   shown.opt, shown.value, max_count);
            return false;
        }
        out[n++] = v;
        if (*end == '\0')
            break;
        s = end + 1;
    }
    *count = n;
    return true;
}

bool tool_parse_repeat_list(tool_args *a, int64_t min, int64_t max,
                            int64_t *out, int max_count, int *count,
                            int *status)
{
    const char *s = a->value;
    int n = 0;
    for (;;) {
        const char *end;
        int64_t v, times = 1;
        bool ok = parse_one(s, &v, &end);
        if (ok && *end == 'x') { /* COUNTxVALUE */
            times = v;
            ok = times >= 1 && parse_one(end + 1, &v, &end);
        }
        if (!ok || (*end != ',' && *end != '\0') || v < min || v > max) {
            shown_arg shown;
            show_arg(a, &shown);
            *status = tool_bad_arg(
                a->cmd,
                "%s: \"%s\" is not a list of integers in [%lld, %lld] (each "
                "VALUE or COUNTxVALUE, comma-separated)",
                shown.opt, shown.value, (long long)min, (long long)max);
            return false;
        }
        if (times > max_count - n) {
            shown_arg shown;
            show_arg(a, &shown);
            *status = tool_bad_arg(a->cmd, "%s: \"%s\" has more than %d values",
                                   shown.opt, shown.value, max_count);
            return false;
        }
        for (int64_t t = 0; t < times; t++)
            out[n++] = v;
        if (*end == '\0')
            break;
        s = end + 1;
    }
    *count = n;
    return true;
}

bool tool_parse_choice(tool_args *a, const char *const *names, int *out,
                       int *status)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(a->value, names[i]) == 0) {
            *out = i;
            return true;
        }
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; names[i] && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                 i ? ", " : "", names[i]);
    shown_arg shown;
    show_arg(a, &shown);
    *status = tool_bad_arg(a->cmd, "%s: \"%s\" is not one of %s", shown.opt,
                           shown.value, list);
    return false;
}

void tool_format_bytes(double bytes, char *buf, size_t size)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB",
                                        "TiB",   "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6) {
        bytes /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%.0f bytes", bytes);
    else if (bytes >= 100 || bytes == (double)(int64_t)bytes)
        snprintf(buf, size, "%.0f %s", bytes, units[u]);
    else if (bytes >= 10)
        snprintf(buf, size, "%.1f %s", bytes, units[u]);
    else
        snprintf(buf, size, "%.2f %s", bytes, units[u]);
}
