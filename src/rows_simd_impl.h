/* The vector row kernels, written once over the macros of an ISA file
 * (rows_avx2.c, rows_avx512.c) and instantiated there per T/SUF: W lanes of
 * type VT, lane masks of type VM (vector lanes on AVX2, mask registers on
 * AVX-512), integer lanes VI; ROW_KERNELS names the kernel set. Tails use
 * the scalar kernels' math. */
#include "rows_scalar_impl.h"

/* KERNEL_NAME(mask_max) → sdpa_rows_avx2_mask_max_f32 and the like: each
 * ISA's functions have their own names in perf and gdb (the ISA files list
 * them). */
#define KERNEL_NAME(base) NAME(SDPA_CAT(ROW_KERNELS, base))

/* exp(x) for x <= 0, the method of vexp.h on the U vectors x[0..U) at once,
 * in place. Each step is applied to all U before the next: one exp alone is
 * a chain of dependent FMAs (the Horner steps) that leaves the FMA units
 * idle, and compilers keep the order the source gives. U is a constant at
 * every call, so the loops below unroll into straight-line code. */
static inline void KERNEL_NAME(vexp_neg)(VT *x, int u)
{
    const VT lowest = VSET1(EXPC(LOWEST)), magic = VSET1(EXPC(MAGIC));
    VM keep[4];
    VT t[4], r[4], p[4];
    for (int i = 0; i < u; i++) {
        keep[i] = VCMP_GE(x[i], lowest); /* false below range, -inf, NaN */
        x[i] = VMAX(x[i], lowest);
        t[i] = VFMA(x[i], VSET1(EXPC(LOG2E)), magic);
    }
    for (int i = 0; i < u; i++) {
        VT n = VSUB(t[i], magic);
        r[i] = VFNMA(n, VSET1(EXPC(LN2HI)), x[i]);
        r[i] = VFNMA(n, VSET1(EXPC(LN2LO)), r[i]);
        p[i] = VSET1((T)sdpa_inv_factorial[EXPC(DEGREE)]);
    }
    for (int k = EXPC(DEGREE) - 1; k >= 0; k--)
        for (int i = 0; i < u; i++)
            p[i] = VFMA(p[i], r[i], VSET1((T)sdpa_inv_factorial[k]));
    for (int i = 0; i < u; i++) {
        VI bits = VADDI(VCASTI(t[i]), VSET1I(EXPC(BIAS)));
        VT two_n = VCASTF(VSLLI(bits, EXPC(MANT)));
        x[i] = VKEEP(VMUL(p[i], two_n), keep[i]);
    }
}

static T KERNEL_NAME(mask_max)(T *x, int64_t n, const T *bias,
                               const uint8_t *mask, bool mask_nonzero_allows)
{
    const VT minus_inf = VSET1((T)-INFINITY);
    VT vmax = minus_inf;
    VM vnan = VM_NONE();
    int64_t j = 0;
    if (!bias && !mask) /* nothing to apply: a read-only max */
        for (; j + 2 * W <= n; j += 2 * W) {
            VT v0 = VLOAD(x + j), v1 = VLOAD(x + j + W);
            vmax = VMAX(vmax, VMAX(v0, v1));
            vnan = VM_OR(vnan, VCMP_UNORD(v0, v1));
        }
    for (; j + W <= n; j += W) {
        VT v = VLOAD(x + j);
        if (bias) {
            /* a -inf bias forbids the key whatever its logit (NaN too) */
            VT b = VLOAD(bias + j);
            v = VBLENDV(VADD(v, b), minus_inf, VCMP_GE(minus_inf, b));
        }
        if (mask) {
            VM forbidden = MASK_FORBIDS(mask + j, mask_nonzero_allows);
            v = VBLENDV(v, minus_inf, forbidden);
        }
        VSTORE(x + j, v);
        vmax = VMAX(vmax, v);
        vnan = VM_OR(vnan, VCMP_UNORD(v, v));
    }
    T lanes[W], m = (T)-INFINITY;
    bool nan = VM_ANY(vnan);
    VSTORE(lanes, vmax);
    for (int l = 0; l < W; l++)
        m = lanes[l] > m ? lanes[l] : m;
    m = NAME(scalar_mask_max)(x, j, n, bias, mask, mask_nonzero_allows, m,
                              &nan);
    return nan ? (T)NAN : m;
}

static T KERNEL_NAME(exp_sum)(T *x, int64_t n, T m)
{
    const VT vm = VSET1(m);
    VT acc0 = VZERO(), acc1 = VZERO(), acc2 = VZERO(), acc3 = VZERO();
    int64_t j = 0;
    /* Four independent exps in flight (see vexp_neg). */
    for (; j + 4 * W <= n; j += 4 * W) {
        VT e[4];
        for (int i = 0; i < 4; i++)
            e[i] = VSUB(VLOAD(x + j + i * W), vm);
        KERNEL_NAME(vexp_neg)(e, 4);
        for (int i = 0; i < 4; i++)
            VSTORE(x + j + i * W, e[i]);
        acc0 = VADD(acc0, e[0]);
        acc1 = VADD(acc1, e[1]);
        acc2 = VADD(acc2, e[2]);
        acc3 = VADD(acc3, e[3]);
    }
    for (; j + W <= n; j += W) {
        VT e = VSUB(VLOAD(x + j), vm);
        KERNEL_NAME(vexp_neg)(&e, 1);
        VSTORE(x + j, e);
        acc0 = VADD(acc0, e);
    }
    T lanes[W], sum = 0;
    VSTORE(lanes, VADD(VADD(acc0, acc1), VADD(acc2, acc3)));
    for (int l = 0; l < W; l++)
        sum += lanes[l];
    return NAME(scalar_exp_sum)(x, j, n, m, sum);
}

static void KERNEL_NAME(scale)(T *x, int64_t n, T c)
{
    const VT vc = VSET1(c);
    int64_t j = 0;
    for (; j + W <= n; j += W)
        VSTORE(x + j, VMUL(VLOAD(x + j), vc));
    NAME(scalar_scale)(x, j, n, c);
}

/* The soft-cap by the scalar kernels' method (rows_scalar_impl.h): both
 * branches, blended by lane, each computed only when some lane needs it
 * (logits often all sit below the threshold). A lane's result depends on
 * its own value only, never on its neighbours. */
static void KERNEL_NAME(softcap)(T *x, int64_t n, T c)
{
    const VT vc = VSET1(c), inv_c = VSET1(1 / c), one = VSET1((T)1);
    const VT sign_bit = VSET1((T)-0.0), small = VSET1(EXPC(TANH_SMALL));
    int64_t j = 0;
    for (; j + W <= n; j += W) {
        VT v = VLOAD(x + j);
        VT sign = VAND(v, sign_bit);
        VT a = VANDNOT(sign_bit, v); /* |s| */
        VT y = VMUL(a, inv_c);
        VM large = VCMP_GE(y, small); /* NaN lanes in neither branch */
        VT r = VZERO();
        if (VM_ANY(VCMP_GE(small, y))) {
            /* a·(1 + z·Q(z)), z = y² */
            VT z = VMUL(y, y);
            VT p = VSET1((T)sdpa_tanh_taylor[EXPC(TANH_TERMS)]);
            for (int k = EXPC(TANH_TERMS) - 1; k >= 1; k--)
                p = VFMA(p, z, VSET1((T)sdpa_tanh_taylor[k]));
            r = VFMA(a, VMUL(z, p), a);
        }
        if (VM_ANY(large)) {
            /* c·(1 − e)/(1 + e), e = exp(−2y) */
            VT e = VMUL(y, VSET1((T)-2));
            KERNEL_NAME(vexp_neg)(&e, 1);
            VT t = VDIV(VSUB(one, e), VADD(one, e));
            r = VBLENDV(r, VMUL(vc, t), large);
        }
        VT capped = VOR(r, sign);
        VSTORE(x + j, VBLENDV(capped, v, VCMP_UNORD(v, v)));
    }
    NAME(scalar_softcap)(x, j, n, c);
}

const NAME(sdpa_row_kernels) NAME(ROW_KERNELS) = {
    KERNEL_NAME(mask_max),
    KERNEL_NAME(exp_sum),
    KERNEL_NAME(scale),
    KERNEL_NAME(softcap),
};

#undef KERNEL_NAME
