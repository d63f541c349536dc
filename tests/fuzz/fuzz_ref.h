/*
 * Long-double references the fuzz targets add to tests/reference.c (the
 * forward's), written from include/sdpa.h: the tolerances of a forward
 * call, its per-row diagnostics, the gradients of attention, and the
 * positional encodings' closed forms. Each comes with the bound the library
 * must meet, derived from the dtype's epsilon as tests/test_random.c and
 * tests/test_backward.c derive theirs.
 */
#ifndef SDPA_FUZZ_REF_H
#define SDPA_FUZZ_REF_H

#include <stddef.h>
#include <stdint.h>

#include "reference.h"
#include "sdpa.h"

/* ------------------------------------------------------------------------ */
/* Forward tolerances (tests/test_random.c's derivation, safety factor 2).   */
/* ------------------------------------------------------------------------ */
typedef struct fz_tol {
    double e_s, e_p; /* a logit's error, a weight's relative */
    double w, logit, out, lse_abs, lse_rel, entropy;
} fz_tol;

/* eps of the arithmetic, the reference's bounds L, A, S and Vmax, and what
 * an upstream computation adds: e_s_extra to every logit (the layer's
 * projections), v_err to every V value. */
fz_tol fz_forward_tol(double eps, const ref_result *r, int64_t tk, int64_t dk,
                      double softcap, int sinks, double e_s_extra,
                      double v_err);

/* The row's largest weight and entropy from the reference's weights and
 * lse; with sinks the sink's share exp(sigma_h - lse) is one more outcome.
 * A row with no allowed key and no sink reports 0 and 0. */
void fz_ref_diagnostics(const ref_result *r, const double *sinks, int64_t h,
                        size_t row, long double *top, long double *entropy);

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
void fz_check_attention(const ref_result *r, const fz_tol *t,
                        const fz_att_views *v, int check_vals, int check_out);

/* ------------------------------------------------------------------------ */
/* Gradients of attention (sdpa_backward's formulas in long double).        */
/* ------------------------------------------------------------------------ */
/* Errors an upstream computation leaves in the inputs the library uses
 * (the layer recomputes q, k, v, out, lse and dout): absolute bounds per
 * element, 0 for sdpa_backward's own inputs. */
typedef struct fz_bwd_extra {
    long double e_s, e_q, e_k, e_v, e_o, e_dout;
} fz_bwd_extra;

typedef struct fz_bwd_ref {
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
} fz_bwd_ref;

/* The gradients of a backward call the library accepts (lse finite where
 * a row has allowed keys), from its own q, k, v, out, lse and dout; eps the
 * arithmetic's epsilon. Returns 0, or -1 when out of memory. */
int fz_ref_backward(const sdpa_backward_args *a, double eps,
                    const fz_bwd_extra *x, fz_bwd_ref *r);
void fz_bwd_ref_free(fz_bwd_ref *r);
/* Offsets into the arrays above. */
size_t fz_bwd_dq_at(const fz_bwd_ref *r, int64_t b, int64_t h, int64_t i);
size_t fz_bwd_dk_at(const fz_bwd_ref *r, int64_t b, int64_t hk, int64_t j);
size_t fz_bwd_dv_at(const fz_bwd_ref *r, int64_t b, int64_t hk, int64_t j);
size_t fz_bwd_db_at(const fz_bwd_ref *r, int64_t b, int64_t h, int64_t i,
                    int64_t j);

/* |got - ref| <= 2 (bound + 2 eps |ref|), and exactly 0 without support. */
void fz_check_close(const char *what, double got, long double ref,
                    long double bound, double eps, int support, int64_t i0,
                    int64_t i1, int64_t i2, int64_t i3);

/* ------------------------------------------------------------------------ */
/* Positional encodings.                                                     */
/* ------------------------------------------------------------------------ */
/* base^(-2r/d) (base 0 = 10000). */
long double fz_freq(double base, int64_t r, int64_t d);
/* The library's angle error for position p and pair r of d (double
 * arithmetic: the product, pow, and the exponent's rounding), plus sin,
 * cos and the rotation's roundings: the bound of a value (times the pair's
 * norm for RoPE). */
long double fz_angle_bound(double base, int64_t p, int64_t r, int64_t d);
/* Column col of the sinusoidal table at position pos, dim columns. */
long double fz_sinusoid(double base, int64_t pos, int64_t col, int64_t dim);
/* Rotates one row of d values (rotary_dim rd, SDPA_ROPE_* style) to
 * position pos in place. */
void fz_rope_row(long double *row, int64_t d, int64_t rd, int style,
                 double base, int64_t pos);
/* The partner of element c in its pair, or -1 beyond rd. */
int64_t fz_rope_partner(int64_t c, int64_t rd, int style, int64_t *pair);

#endif
