/*
 * A naive reference for sdpa_forward, in long double.
 *
 * It shares no code with the library: it only uses the public header for the
 * argument struct, and is written straight from the semantics stated in
 * include/sdpa.h (logit, softcap, bias, the five "forbidden" rules,
 * broadcasting, GQA, kv_lens, the empty-row policy) and, from 1.1, the
 * sliding window, ALiBi, attention sinks and the logits output. It reads
 * the 1.1 fields of sdpa_forward_args directly, whatever struct_size says
 * (a caller imitating a 1.0 struct zeroes them in the copy it hands here).
 * It does NOT validate its arguments: call it only with arguments the
 * library accepts.
 */
#ifndef SDPA_TEST_REFERENCE_H
#define SDPA_TEST_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

typedef struct ref_result {
    int64_t n, hq, tq, tk, dv;
    /* Contiguous [N, Hq, Tq, Dv], [N, Hq, Tq, Tk], [N, Hq, Tq]. */
    long double *out;
    long double *weights;
    long double *lse;
    /* [N, Hq, Tq, Tk]: the scores at stage a->logits_stage (SDPA_LOGITS_*;
     * 0 gives the MASKED stage) for allowed keys, -inf at forbidden ones. */
    long double *logits;
    /* [N, Hq, Tq, Tk]: 1 when key j is allowed for the row, 0 when forbidden.
     */
    unsigned char *allowed;
    /* With dropout (1.2) only, else NULL: the undropped weights p_ij, of
     * which lse, max_weight and entropy speak ([N, Hq, Tq, Tk]). */
    long double *probs;
    /* Largest |logit| bound over allowed entries: scale * sum_r |q_r k_r|
     * (before softcap) plus |bias|; used to derive rounding tolerances. */
    long double logit_absmax;
    /* Largest |slope_h * (j - d_i)| over allowed entries (0 without ALiBi)
     * and largest |sigma_h| (0 without sinks): the terms ALiBi and the sinks
     * add to the logits, for the tolerances. */
    long double alibi_absmax;
    long double sink_absmax;
    /* Largest |v| over the V rows that are read. */
    long double v_absmax;
    /* Whether some row had no allowed key, and the first such row. */
    int any_empty;
    int64_t empty_b, empty_h, empty_i;
} ref_result;

/* Compute the reference for `a`. Rows without an allowed key are filled as
 * the ZERO policy defines them (out 0, weights 0, lse -inf) and reported in
 * any_empty / empty_*: under the default ERROR policy the library must fail
 * with SDPA_ERR_FULLY_MASKED_ROW instead. With sinks no row is empty: a row
 * without an allowed key has out 0, weights 0 and lse sigma_h. Returns 0 on
 * success, -1 on allocation failure. */
int ref_forward(const sdpa_forward_args *a, ref_result *r);

void ref_free(ref_result *r);

/* Philox4x32-10 (Random123's definition, written here from the paper and
 * independent of the library's), and the dropout mask include/sdpa.h
 * defines with it: 1 when element (b, h, i, j) of a's call is kept (always
 * without dropout). ref_dropout_scale: the factor c = 1/(1 - p) of the
 * kept weights as the header says the library rounds it for dtype. */
void ref_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                       uint32_t out[4]);
int ref_dropout_keep(const sdpa_forward_args *a, int64_t b, int64_t h,
                     int64_t i, int64_t j);
long double ref_dropout_scale(int dtype, double p);

/* The largest weight and the entropy of `row` (of head h) from r's
 * undropped weights (probs with dropout, else weights) and lse: max_j p_j and
 * -Σ_j p_j log p_j; with sinks the sink's share exp(sigma_h - lse) is one more
 * outcome. A row with no allowed key and no sink reports 0 and 0. */
void ref_diagnostics(const ref_result *r, const double *sinks, int64_t h,
                     size_t row, long double *top, long double *entropy);

/* Whether the causal anchor (SDPA_CAUSAL_*) lets query row i of tq see key
 * j of a row with len keys: top-left j <= i, bottom-right j <= i + (len -
 * tq), none every key. */
int ref_causal_allows(int causal, int64_t i, int64_t j, int64_t len,
                      int64_t tq);

/* Read element (i0, i1, i2, i3) of a strided float/double tensor as long
 * double. Broadcast dims (extent 1) must be mapped by the caller. */
long double ref_get(const sdpa_tensor *t, int dtype, int64_t i0, int64_t i1,
                    int64_t i2, int64_t i3);

#endif
