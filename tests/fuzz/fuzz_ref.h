/*
 * The fuzz targets' checks against the long-double oracles of tests/common
 * (reference.c, oracle.c; the forward's tolerances in problem.c): the
 * forward's outputs and per-row diagnostics, and one gradient element.
 */
#ifndef SDPA_FUZZ_REF_H
#define SDPA_FUZZ_REF_H

#include <stddef.h>
#include <stdint.h>

#include "oracle.h"
#include "problem.h"
#include "reference.h"
#include "sdpa.h"

/* Forward tolerances: test_tol, tp_forward_tol (tests/common/problem.h). */
/* The outputs of a forward call (NULL: absent or not written) against the
 * reference: out, weights, lse, logits (at stage), max_weight, entropy
 * within the tolerances (check_vals; out also needs check_out), and
 * exactly: forbidden weights 0, forbidden logits -inf, rows without a key
 * (and no sink) 0 / -inf / 0 / 0; and the weights against the call's own
 * lse (each row's weights plus the sink's share sum to 1), max_weight and
 * entropy. */
typedef struct fz_att_views {
    const sdpa_tensor *out, *weights, *lse, *logits, *max_weight, *entropy;
    size_t es; /* element size of the views */
    int stage;
    const double *sinks;
} fz_att_views;
void fz_check_attention(const ref_result *r, const test_tol *t,
                        const fz_att_views *v, int check_vals, int check_out);

/* |got - ref| <= 2 (bound + 2 eps |ref|), and exactly 0 without support. */
void fz_check_close(const char *what, double got, long double ref,
                    long double bound, double eps, int support, int64_t i0,
                    int64_t i1, int64_t i2, int64_t i3);

#endif
