/*
 * The long-double oracles the tests add to reference.c (the forward's),
 * written from include/sdpa.h, shared by the unit tests and the fuzz
 * targets: the gradients of attention (sdpa_backward's formulas) and the
 * positional encodings' closed forms (problem.h: tp_freq), each with the
 * bound the library must meet, derived from the dtype's epsilon as
 * tests/test_random.c and tests/test_backward.c derive theirs. Like
 * reference.c, it only includes the public header.
 */
#ifndef SDPA_TEST_ORACLE_H
#define SDPA_TEST_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "reference.h"
#include "sdpa.h"

/* ------------------------------------------------------------------------ */
/* Gradients of attention (sdpa_backward's formulas in long double).        */
/* ------------------------------------------------------------------------ */
/* Errors an upstream computation leaves in the inputs the library uses
 * (the layer recomputes q, k, v, out, lse and dout): absolute bounds per
 * element, 0 for sdpa_backward's own inputs. */
typedef struct bwd_extra {
    long double e_s, e_q, e_k, e_v, e_o, e_dout;
} bwd_extra;

typedef struct bwd_ref {
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv;
    int64_t nk, nv;         /* N, or 1 when k / v is broadcast over N */
    int64_t dbias_shape[4]; /* 1 where the bias broadcasts */
    /* Values, bounds (before the check's factor) and supports (0: every
     * term is structurally 0, the library's value must be exactly 0), all
     * contiguous: dq [N, Hq, Tq, Dk], dk [nk, Hkv, Tk, Dk], dv [nv, Hkv, Tk,
     * Dv], dbias [dbias_shape], dsinks [Hq]. */
    long double *dq, *dk, *dv, *dbias, *dsinks;
    long double *tq, *tk, *tv, *tb, *ts;
    unsigned char *sq, *sk, *sv, *sb;
    /* ref_forward of the same problem (allowed keys, logits). */
    ref_result fwd;
} bwd_ref;

/* The gradients of a backward call the library accepts (lse finite where
 * a row has allowed keys), from its own q, k, v, out, lse and dout; eps the
 * arithmetic's epsilon. Returns 0, or -1 when out of memory. */
int ref_backward(const sdpa_backward_args *a, double eps, const bwd_extra *x,
                 bwd_ref *r);
void bwd_ref_free(bwd_ref *r);
/* Offsets into the arrays above. */
size_t bwd_dq_at(const bwd_ref *r, int64_t b, int64_t h, int64_t i);
size_t bwd_dk_at(const bwd_ref *r, int64_t b, int64_t hk, int64_t j);
size_t bwd_dv_at(const bwd_ref *r, int64_t b, int64_t hk, int64_t j);
size_t bwd_db_at(const bwd_ref *r, int64_t b, int64_t h, int64_t i, int64_t j);

/* ------------------------------------------------------------------------ */
/* Positional encodings.                                                     */
/* ------------------------------------------------------------------------ */
/* The library's angle error for position p and pair r of d (double
 * arithmetic: the product, pow, and the exponent's rounding), plus sin,
 * cos and the rotation's roundings: the bound of a value (times the pair's
 * norm for RoPE). */
long double ref_angle_bound(double base, int64_t p, int64_t r, int64_t d);
/* Column col of the sinusoidal table at position pos, dim columns. */
long double ref_sinusoid(double base, int64_t pos, int64_t col, int64_t dim);
/* Rotates one row of d values (rotary_dim rd, SDPA_ROPE_* style) to
 * position pos in place. */
void ref_rope_row(long double *row, int64_t d, int64_t rd, int style,
                  double base, int64_t pos);
/* The partner of element c in its pair, or -1 beyond rd. */
int64_t ref_rope_partner(int64_t c, int64_t rd, int style, int64_t *pair);

#endif
