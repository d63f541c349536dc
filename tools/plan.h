/*
 * sdpa plan's shared pieces: the options, the counts and the workspace
 * queries that plan.c (one rectangular call) and plan_ragged.c (a ragged
 * call, --q-lens) both use.
 */
#ifndef SDPA_TOOL_PLAN_H
#define SDPA_TOOL_PLAN_H

#include <sdpa.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PLAN_MAX_EXTENT INT64_C(2147483647) /* the BLAS int */
#define PLAN_DECODE_MAX_ROWS 16 /* src/forward/plan.c, docs/CONTEXTS.md */
#define PLAN_MAX_SEQS 4096      /* sequences of a ragged call */

/* Where a ragged call's sequences find their keys (--keys). */
enum { PLAN_KEYS_PACKED, PLAN_KEYS_PAGED, PLAN_KEYS_BATCHED };

typedef struct plan_opts {
    int64_t n, hq, hkv, tq, tk, dk, dv, threads;
    int dtype; /* 0 f32, 1 f64 */
    int causal;
    bool weights;
    /* a ragged call: seqs > 0 */
    int seqs;
    int keys;     /* PLAN_KEYS_* */
    int64_t page; /* paged keys: tokens per page */
    int64_t q_lens[PLAN_MAX_SEQS], kv_lens[PLAN_MAX_SEQS];
} plan_opts;

extern const char *const plan_causal_names[];
extern const char *const plan_path_names[];
extern const char *const plan_keys_names[];

/* The allowed (query row, key) pairs of one (batch item, head) with tq
 * rows and tk keys under the causal mode (bottom-right anchors at tk). */
uint64_t plan_allowed_scores(int64_t tq, int64_t tk, int causal);

/* "4.40 Tflop": three significant digits, decimal prefixes. */
void plan_format_count(double x, const char *unit, char *buf, size_t size);

bool plan_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
bool plan_add_u64(uint64_t a, uint64_t b, uint64_t *out);

/* Fake addresses for the tensors of a workspace query: disjoint,
 * 4096-aligned ranges from *at up, never dereferenced. place_rows: rows ·
 * cols elements of `elem` bytes. */
bool plan_place(uintptr_t *at, uint64_t bytes, void **data);
bool plan_place_rows(uintptr_t *at, int64_t rows, int64_t cols, uint64_t elem,
                     void **data);

/* sdpa_forward_workspace of args on a fresh context with `threads`
 * workers, under each SDPA_OPT_PATH (AUTO, then each path forced); ok[p]
 * false and the library's message in why[p] where it refuses. false when
 * no context could be made (reported on stderr). */
bool plan_workspaces(int64_t threads, const sdpa_forward_args *args,
                     size_t bytes[4], bool ok[4], char why[4][256]);

/* AUTO's path: the forced one whose workspace is AUTO's, `rule` (the
 * library's rule, docs/CONTEXTS.md) among several; 0 when none is.
 * *matches receives how many matched. */
int plan_auto_path(const size_t bytes[4], const bool ok[4], int rule,
                   int *matches);

/* sdpa plan for a ragged call (o->seqs > 0): plan_ragged.c. */
int plan_ragged(const plan_opts *o);

#endif /* SDPA_TOOL_PLAN_H */
