/* Long-double references of the fuzz targets; see fuzz_ref.h. */
#include "fuzz_ref.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

/* ------------------------------------------------------------------------ */
/* Forward.                                                                  */
/* ------------------------------------------------------------------------ */
/* Key j of a per-key output (weights, logits) against the reference's keys
 * of its row: exactly `forbidden` where the key is not allowed, within
 * tol of the reference elsewhere (check_vals). Returns the value. */
static double check_key(const char *name, const char *stage,
                        const sdpa_tensor *x, size_t es,
                        const long double *ref_keys, int allowed,
                        double forbidden, double tol, int check_vals, int64_t b,
                        int64_t h, int64_t i, int64_t j)
{
    double got = fz_get_raw(x->data, es, fz_off4(x, b, h, i, j));
    double ref = (double)ref_keys[j];
    if (!allowed)
        CHECK(got == forbidden,
              "forbidden %s[%lld,%lld,%lld,%lld] = %g, not %g", name,
              (long long)b, (long long)h, (long long)i, (long long)j, got,
              forbidden);
    else if (check_vals)
        CHECK(fabs(got - ref) <= tol,
              "%ss[%lld,%lld,%lld,%lld] = %.10g%s, reference %.10g, "
              "tolerance %.3g",
              name, (long long)b, (long long)h, (long long)i, (long long)j, got,
              stage, ref, tol);
    return got;
}

void fz_check_attention(const ref_result *r, const test_tol *t,
                        const fz_att_views *v, int check_vals, int check_out)
{
    const sdpa_tensor *O = v->out, *W = v->weights, *S = v->lse;
    const sdpa_tensor *LG = v->logits, *MW = v->max_weight, *EN = v->entropy;
    const size_t es = v->es;
    const double *sinks = v->sinks;
    const int64_t Tk = r->tk, Dv = r->dv;
    char stage[32];
    snprintf(stage, sizeof stage, " (stage %d)", v->stage);
    for (int64_t b = 0; b < r->n; b++)
        for (int64_t h = 0; h < r->hq; h++)
            for (int64_t i = 0; i < r->tq; i++) {
                size_t row = (size_t)((b * r->hq + h) * r->tq + i);
                const unsigned char *ok = r->allowed + row * (size_t)Tk;
                int empty = 1;
                for (int64_t j = 0; j < Tk; j++)
                    empty &= !ok[j];
                for (int64_t d = 0; O && d < Dv; d++) {
                    double got =
                        fz_get_raw(O->data, es, fz_off4(O, b, h, i, d));
                    double ref = (double)r->out[row * (size_t)Dv + (size_t)d];
                    if (empty)
                        CHECK(got == 0.0,
                              "empty row out[%lld,%lld,%lld,%lld] = %g, not 0",
                              (long long)b, (long long)h, (long long)i,
                              (long long)d, got);
                    else if (check_vals && check_out)
                        CHECK(fabs(got - ref) <= t->out,
                              "out[%lld,%lld,%lld,%lld] = %.10g, reference "
                              "%.10g, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i,
                              (long long)d, got, ref, t->out);
                }
                double wsum = 0, wmax = 0, went = 0;
                for (int64_t j = 0; W && j < Tk; j++) {
                    double got = check_key("weight", "", W, es,
                                           r->weights + row * (size_t)Tk, ok[j],
                                           0.0, t->w, check_vals, b, h, i, j);
                    wsum += got;
                    wmax = got > wmax ? got : wmax;
                    if (got > 0)
                        went -= got * log(got);
                }
                for (int64_t j = 0; LG && j < Tk; j++)
                    check_key("logit", stage, LG, es,
                              r->logits + row * (size_t)Tk, ok[j], -INFINITY,
                              t->logit, check_vals, b, h, i, j);
                double lse = 0;
                if (S) {
                    lse = fz_get_raw(S->data, es, fz_off4(S, b, h, i, 0));
                    double ref = (double)r->lse[row];
                    if (empty && !sinks)
                        CHECK(lse == -INFINITY, "empty row lse = %g", lse);
                    else if (check_vals)
                        CHECK(fabs(lse - ref) <=
                                  t->lse_abs + t->lse_rel * fabs(ref),
                              "lse[%lld,%lld,%lld] = %.10g, reference %.10g",
                              (long long)b, (long long)h, (long long)i, lse,
                              ref);
                }
                long double top, ent;
                ref_diagnostics(r, sinks, h, row, &top, &ent);
                double tol_h = t->entropy + 2 * t->e_p * (double)ent;
                double mw = 0, en = 0;
                if (MW) {
                    mw = fz_get_raw(MW->data, es, fz_off4(MW, b, h, i, 0));
                    if (empty && !sinks)
                        CHECK(mw == 0.0, "empty row max_weight = %g", mw);
                    else if (check_vals)
                        CHECK(fabs(mw - (double)top) <= t->w,
                              "max_weight[%lld,%lld,%lld] = %.10g, reference "
                              "%.10Lg, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i, mw, top,
                              t->w);
                }
                if (EN) {
                    en = fz_get_raw(EN->data, es, fz_off4(EN, b, h, i, 0));
                    if (empty && !sinks)
                        CHECK(en == 0.0, "empty row entropy = %g", en);
                    else if (check_vals)
                        CHECK(fabs(en - (double)ent) <= tol_h,
                              "entropy[%lld,%lld,%lld] = %.10g, reference "
                              "%.10Lg, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i, en, ent,
                              tol_h);
                }
                /* with dropout (r->probs) the weights are the dropped ones:
                 * they sum to no 1 and meet neither diagnostic */
                if (!check_vals || !W || (empty && !sinks) || r->probs)
                    continue;
                /* the weights output against the library's own lse,
                 * max_weight and entropy: the sink's share from its lse */
                if (sinks && !S)
                    continue;
                double ps = sinks ? exp(sinks[h] - lse) : 0;
                double tol_ps =
                    sinks ? 2 * (t->lse_abs + t->lse_rel * fabs(lse)) + t->w
                          : 0;
                CHECK(fabs(wsum + ps - 1) <= ((double)Tk + 2) * t->w + tol_ps,
                      "row (%lld,%lld,%lld): weights sum to %.10g, the sink's "
                      "share is %.10g: not 1",
                      (long long)b, (long long)h, (long long)i, wsum, ps);
                if (ps > 0)
                    went -= ps * log(ps);
                if (MW)
                    CHECK(fabs(mw - fmax(wmax, ps)) <= 2 * t->w + tol_ps,
                          "row (%lld,%lld,%lld): max_weight %.10g but the "
                          "largest weight is %.10g",
                          (long long)b, (long long)h, (long long)i, mw,
                          fmax(wmax, ps));
                if (EN)
                    CHECK(fabs(en - went) <=
                              2 * tol_h + 2 * t->e_p * ((double)Tk + 2) +
                                  tol_ps * (1 + fabs(log(ps + 1e-300))),
                          "row (%lld,%lld,%lld): entropy %.10g but the "
                          "weights' is %.10g",
                          (long long)b, (long long)h, (long long)i, en, went);
            }
}

void fz_check_close(const char *what, double got, long double ref,
                    long double bound, double eps, int support, int64_t i0,
                    int64_t i1, int64_t i2, int64_t i3)
{
    if (!support) {
        CHECK(got == 0.0,
              "%s[%lld,%lld,%lld,%lld] = %.17g, must be exactly 0 (no term "
              "reaches it)",
              what, (long long)i0, (long long)i1, (long long)i2, (long long)i3,
              got);
        return;
    }
    long double tol = 2 * (bound + 2 * (long double)eps * fabsl(ref));
    CHECK(fabsl((long double)got - ref) <= tol,
          "%s[%lld,%lld,%lld,%lld] = %.17g, reference %.17Lg, tolerance %.3Lg",
          what, (long long)i0, (long long)i1, (long long)i2, (long long)i3, got,
          ref, tol);
}
