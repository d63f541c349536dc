/* The vector row kernels, written once over the macros of an ISA file
 * (rows_avx2.c, rows_avx512.c) and instantiated there per T/SUF: W lanes of
 * type VT, lane masks of type VM (vector lanes on AVX2, mask registers on
 * AVX-512), integer lanes VI; ROW_KERNELS names the kernel set. Tails use
 * the scalar kernels' math. The streaming kernels (dot_rows, acc_rows,
 * widen, narrow) also need VLOAD_PART / VSTORE_PART (the first n < W
 * lanes only), VHSUMW (W vectors' lane sums as one vector), ACC_VECS (the
 * accumulators that fit in registers beside the operands) and, for float
 * only, VLOAD_F16 / VLOAD_BF16 (W halves widened), their _PART forms,
 * VSTORE_F16 / VSTORE_BF16 (W floats narrowed, half.h's bits) and the
 * quantized types' decoders (quant.h's bits): VLOAD_E4M3 / VLOAD_E5M2 (W
 * codes at p; E4M3's values / 2^8, see STREAM_UNIT), VLOAD_BLOCK_D(p,
 * type) (what a block's float16 d becomes in registers for its type: d on
 * every lane, or a set's own form of it) and VLOAD_Q8_0 / VLOAD_Q4_0 (W
 * values of the block at p from its value k, k a multiple of W, with its d
 * so loaded); this file undefines those at its end. */
#include "kernels/rows_scalar_impl.h"

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

/* ---- The streaming kernels (rows.h: dot_rows, acc_rows, widen, narrow) ----
 *
 * Decode reads a block of K (then V) from memory once per token, for 1..64
 * query rows: these kernels are bound by memory bandwidth. Each key / value
 * row is loaded (and widened from a half type) once per block of R query
 * rows, from registers, and the few rows being worked on stay in L1 while
 * the other row blocks pass over them, so each row leaves memory once:
 *   dot_rows: DOT_KEYS keeps R rows × KEYS_AT_ONCE(R) keys of sums in
 *     registers over the dim, for groups of ACC_VECS keys (ACC_VECS, from
 *     the ISA file, is what the registers hold beside the operands), then
 *     reduces W of them at a time into one vector of sums (VHSUMW);
 *   acc_rows: ACC_BLOCK keeps R rows × S vectors of acc in registers over
 *     the keys of a sub-block (about 16 KB of V, in L1 while the row
 *     blocks and slices pass over it); R is as large as lets S cover the
 *     whole value row, so that the pass from memory reads whole rows.
 * The order of the reads matters as much as their number: the hardware
 * prefetchers follow reads that run forward through memory, row after row,
 * and lose interleaved rows. One query row reads one key row at a time,
 * front to back (measured on Zen 5: 81-98 % of a plain read's bandwidth
 * from DRAM, against 50 % with 4 keys interleaved). Several query rows
 * need the interleaved keys for enough independent sums, so they prefetch
 * the rows PREFETCH_BYTES ahead (in the first pass of dot_rows, spread
 * over all passes of acc_rows), which was worth 10 points there and cost
 * as much for one row. The distance is in bytes, not keys, so that it is
 * the same lead on memory whatever the row's type: 8 float32 rows of 128,
 * 16 float16 ones, 57 of Q4_0 blocks.
 * The caller's hint (rows.h, sdpa_row_prefetch: the rows it reads next)
 * is prefetched one row per key by the pass that reads from memory, for
 * any number of rows; acc_rows paces its hint behind its own reads
 * (PACE, rows.h).
 * The blocks take R, the key and vector counts and the type as constants
 * (they are inlined where they are used with constants), so that
 * compilers unroll them and keep their accumulators in registers. The
 * summation order depends on dim, n, rows and the type only, never on
 * addresses. */
#define STREAM_INLINE static inline __attribute__((always_inline))
/* T's own SDPA_FLOAT* type: what the kernels read when `type` is no half
 * type of this T (rows_scalar_impl.h: reads_f16, reads_bf16). */
#define OWN_TYPE (sizeof(T) == sizeof(float) ? SDPA_FLOAT32 : SDPA_FLOAT64)
#define MIN_INT(a, b) ((a) < (b) ? (a) : (b))
/* Keys side by side in DOT_KEYS for R rows: up to 4 (R·4 <= ACC_VECS
 * independent sums), one row too: one key at a time was one chain of
 * dependent multiply-adds, whose latency bound every storage type. */
#define KEYS_AT_ONCE(R) MIN_INT(ACC_VECS / (R), 4)
/* Vectors of one acc row that ACC_BLOCK keeps in registers at most. */
#define ACC_SLICE MIN_INT(ACC_VECS, 8)
/* How far ahead several query rows prefetch, in bytes of the rows read:
 * 4 KB (8 float32 rows of 128: 4 to 32 of them measured on Zen 5, 8
 * best). The build sets it (SDPA_PREFETCH_BYTES in CMakeLists.txt; 0
 * turns it off). PREFETCH_AHEAD: that distance in rows of row_bytes, 2 to
 * 64 of them (0: off). */
#ifndef SDPA_PREFETCH_BYTES
#define SDPA_PREFETCH_BYTES 4096
#endif
#define PREFETCH_AHEAD(row_bytes)                                              \
    (SDPA_PREFETCH_BYTES == 0 ? 0                                              \
     : SDPA_PREFETCH_BYTES / (row_bytes) < 2                                   \
         ? 2                                                                   \
         : MIN_INT(SDPA_PREFETCH_BYTES / (row_bytes), 64))
/* 0, computed from x: added to a prefetch's row index, it makes the
 * prefetch wait for x in hardware (sdpa_prefetch_pace_zero, rows.h). */
#define PACE(x) ((int64_t)VM_ANY(VCMP_UNORD(x, x)) & sdpa_prefetch_pace_zero)
/* Short names for the pieces below (clang-format takes a long
 * KERNEL_NAME(x)(...) statement for a declaration). */
#define LOAD_W KERNEL_NAME(load_w)
#define LOAD_PART KERNEL_NAME(load_part)
#define LOAD_STEP KERNEL_NAME(load_step)
#define PREFETCH_ROWS KERNEL_NAME(prefetch_rows)
#define DOT_STORE KERNEL_NAME(dot_store)
#define DOT_KEYS KERNEL_NAME(dot_keys)
#define DOT_GROUP KERNEL_NAME(dot_group)
#define DOT_TYPED KERNEL_NAME(dot_typed)
#define ACC_BLOCK KERNEL_NAME(acc_block)
#define ACC_ROW_BLOCK KERNEL_NAME(acc_row_block)
#define ACC_TYPED KERNEL_NAME(acc_typed)

/* Bytes of n values of a row of `type` (whole blocks of a block type). */
#define ROW_BYTES(type, n)                                                     \
    ((n) / NAME(elem_values)(type) * (int64_t)NAME(elem_size)(type))

/* What the loads below give of `type`, times STREAM_UNIT(type), is its
 * value: E4M3's codes are read as value / 2^8 (their bits placed in a
 * float16, whose exponent bias is 8 more), which saves a multiplication a
 * vector; the kernels multiply their scalar factors instead (the dot's c,
 * each weight p, widen's output), exactly: a power of two. */
#define STREAM_UNIT(type) ((type) == SDPA_FP8_E4M3 ? (T)256 : (T)1)

/* Elements d .. d + W of the row of `type` at row, widened to T (d a
 * multiple of W); LOAD_PART: the first `count` (< W) of them, the other
 * lanes 0, nothing read past them. A block type's rows are whole blocks
 * (include/sdpa.h), so its loads are never partial. *d_of_block holds the
 * scale d of the block that element d is in, on every lane: taken from
 * the block when `fresh`, else as the caller's previous load of the same
 * block left it (a loop over a row loads it once a block, not once a
 * vector: that conversion cost as much as the values' own). */
STREAM_INLINE VT LOAD_W(const char *row, int64_t d, const int type,
                        VT *d_of_block, bool fresh)
{
#ifdef VLOAD_F16
    const unsigned char *u = (const unsigned char *)row;
    if (type == SDPA_FLOAT16)
        return VLOAD_F16((const uint16_t *)(const void *)row + d);
    if (type == SDPA_BFLOAT16)
        return VLOAD_BF16((const uint16_t *)(const void *)row + d);
    if (type == SDPA_FP8_E4M3)
        return VLOAD_E4M3(u + d);
    if (type == SDPA_FP8_E5M2)
        return VLOAD_E5M2(u + d);
    if (type == SDPA_Q8_0 || type == SDPA_Q4_0) {
        /* d >= 0: shifts, not a signed division's five instructions */
        const size_t bytes =
            type == SDPA_Q8_0 ? SDPA_Q8_0_BYTES : SDPA_Q4_0_BYTES;
        const unsigned char *block = u + ((size_t)d >> 5) * bytes;
        const int k = (int)(d & 31);
        if (fresh)
            *d_of_block = VLOAD_BLOCK_D(block, type);
        return type == SDPA_Q8_0 ? VLOAD_Q8_0(block, k, *d_of_block)
                                 : VLOAD_Q4_0(block, k, *d_of_block);
    }
#endif
    (void)type, (void)d_of_block, (void)fresh;
    return VLOAD((const T *)(const void *)row + d);
}

/* Values per step of a row loop that loads whole blocks (one block of a
 * block type, else one vector), and LOAD_STEP: W of them from value k
 * (< STEP_VALUES, a multiple of W) of the step at `at`, the block's d
 * taken when `fresh` (as LOAD_W). Loops over steps keep a pointer per row
 * instead of an address computed per vector. */
#define STEP_VALUES(type) ((type) == SDPA_Q8_0 || (type) == SDPA_Q4_0 ? 32 : W)
STREAM_INLINE VT LOAD_STEP(const char *at, int k, const int type,
                           VT *d_of_block, bool fresh)
{
#ifdef VLOAD_F16
    const unsigned char *u = (const unsigned char *)at;
    if (type == SDPA_Q8_0 || type == SDPA_Q4_0) {
        if (fresh)
            *d_of_block = VLOAD_BLOCK_D(u, type);
        return type == SDPA_Q8_0 ? VLOAD_Q8_0(u, k, *d_of_block)
                                 : VLOAD_Q4_0(u, k, *d_of_block);
    }
#endif
    return LOAD_W(at, k, type, d_of_block, fresh);
}

STREAM_INLINE VT LOAD_PART(const char *row, int64_t d, const int type,
                           int count)
{
#ifdef VLOAD_F16
    if (type == SDPA_FLOAT16)
        return VLOAD_F16_PART((const uint16_t *)(const void *)row + d, count);
    if (type == SDPA_BFLOAT16)
        return VLOAD_BF16_PART((const uint16_t *)(const void *)row + d, count);
    if (type == SDPA_FP8_E4M3 || type == SDPA_FP8_E5M2) {
        unsigned char codes[W] = {0}; /* code 0 is +0 in both */
        memcpy(codes, row + d, (size_t)count);
        VT unused = VZERO();
        return LOAD_W((const char *)codes, 0, type, &unused, true);
    }
    if (type == SDPA_Q8_0 || type == SDPA_Q4_0)
        return VZERO(); /* never: whole blocks */
#endif
    (void)type;
    return VLOAD_PART((const T *)(const void *)row + d, count);
}

/* CALL(type) with the storage type as a constant, so that each type gets
 * its own inlined loop (the double sets read only double). */
#ifdef VLOAD_F16
#define DISPATCH_TYPE(type, CALL)                                              \
    switch (type) {                                                            \
    case SDPA_FLOAT16:                                                         \
        CALL(SDPA_FLOAT16);                                                    \
        break;                                                                 \
    case SDPA_BFLOAT16:                                                        \
        CALL(SDPA_BFLOAT16);                                                   \
        break;                                                                 \
    case SDPA_FP8_E4M3:                                                        \
        CALL(SDPA_FP8_E4M3);                                                   \
        break;                                                                 \
    case SDPA_FP8_E5M2:                                                        \
        CALL(SDPA_FP8_E5M2);                                                   \
        break;                                                                 \
    case SDPA_Q8_0:                                                            \
        CALL(SDPA_Q8_0);                                                       \
        break;                                                                 \
    case SDPA_Q4_0:                                                            \
        CALL(SDPA_Q4_0);                                                       \
        break;                                                                 \
    default:                                                                   \
        CALL(OWN_TYPE);                                                        \
    }
#else
#define DISPATCH_TYPE(type, CALL)                                              \
    do {                                                                       \
        (void)(type);                                                          \
        CALL(OWN_TYPE);                                                        \
    } while (0)
#endif

/* Bytes [lo, hi) of rows [from, to) (row j at at[j]), every cache line
 * they touch (a row need not start a line), into L1. Only rows of the
 * caller's block are named. */
STREAM_INLINE void PREFETCH_ROWS(const char *const *at, int64_t from,
                                 int64_t to, int64_t lo, int64_t hi)
{
    for (int64_t j = from; j < to; j++) {
        const uintptr_t row = (uintptr_t)at[j];
        for (uintptr_t line = (row + (uintptr_t)lo) & ~(uintptr_t)63;
             line < row + (uintptr_t)hi; line += 64)
            _mm_prefetch((const char *)line, _MM_HINT_T0);
    }
}

/* s[i·ld_s + g] = c · (the lane sum of acc[i·G + g]) for i < R, g < G: W
 * sums at a time as one vector (VHSUMW), scaled, written by row. */
STREAM_INLINE void DOT_STORE(const VT *acc, const int R, const int G, T c, T *s,
                             int64_t ld_s)
{
    const VT zero = VZERO(), vc = VSET1(c);
    for (int f0 = 0; f0 < R * G; f0 += W) {
        VT part[W];
        for (int l = 0; l < W; l++)
            part[l] = f0 + l < R * G ? acc[f0 + l] : zero;
        VT sums = VMUL(VHSUMW(part), vc);
        if (G % W == 0) { /* W keys of one row */
            VSTORE(s + f0 / G * ld_s + f0 % G, sums);
            continue;
        }
        T lanes[W];
        VSTORE(lanes, sums);
        for (int l = 0; l < W && f0 + l < R * G; l++)
            s[(f0 + l) / G * ld_s + (f0 + l) % G] = lanes[l];
    }
}

/* s[i·ld_s + g] = c · Σ_{d<dim} q[i·ld_q + d] · K_g[d] for R rows i and G
 * keys g (key g at kr[g]): KA = KEYS_AT_ONCE(R) neighbouring keys at a
 * time, their R·KA sums in registers over the dim, kept for DOT_STORE.
 * With pf_n > 0 (keys from kr[0] on in the block), the keys
 * PREFETCH_AHEAD of their bytes ahead are prefetched as it goes. */
STREAM_INLINE void DOT_KEYS(const T *q, int64_t ld_q, const char *const *kr,
                            int64_t dim, T c, T *s, int64_t ld_s, int64_t pf_n,
                            const sdpa_row_prefetch *hint, int64_t hj,
                            const int type, const int R, const int G)
{
    const int64_t row_bytes = ROW_BYTES(type, dim);
    const int KA = MIN_INT(G, KEYS_AT_ONCE(R));
    const int64_t ahead = row_bytes > 0 ? PREFETCH_AHEAD(row_bytes) : 0;
    VT acc[4 * ACC_VECS];
    for (int g0 = 0; g0 < G; g0 += KA) {
        if (ahead > 0 && g0 + ahead < pf_n)
            PREFETCH_ROWS(kr, g0 + ahead, MIN_INT(g0 + ahead + KA, pf_n), 0,
                          row_bytes);
        for (int g = 0; hint && g < KA; g++)
            sdpa_prefetch_row(hint, hj + g0 + g);
        VT a[ACC_VECS], kv[ACC_VECS],
            ds[4] = {VZERO(), VZERO(), VZERO(), VZERO()};
        for (int f = 0; f < R * KA; f++)
            a[f] = VZERO();
        int64_t d = 0;
        const int step = STEP_VALUES(type);
        const int64_t step_bytes = ROW_BYTES(type, step);
        const char *at[4];
        for (int g = 0; g < KA; g++)
            at[g] = kr[g0 + g];
        for (; d + step <= dim; d += step) {
            for (int w = 0; w < step; w += W) {
                for (int g = 0; g < KA; g++)
                    kv[g] = LOAD_STEP(at[g], w, type, &ds[g], w == 0);
                for (int i = 0; i < R; i++) {
                    VT qv = VLOAD(q + i * ld_q + d + w);
                    for (int g = 0; g < KA; g++)
                        a[i * KA + g] = VFMA(qv, kv[g], a[i * KA + g]);
                }
            }
            for (int g = 0; g < KA; g++)
                at[g] += step_bytes;
        }
        if (d < dim) { /* the last dim % W elements; the lanes past add 0 */
            const int count = (int)(dim - d);
            for (int g = 0; g < KA; g++)
                kv[g] = LOAD_PART(kr[g0 + g], d, type, count);
            for (int i = 0; i < R; i++) {
                VT qv = VLOAD_PART(q + i * ld_q + d, count);
                for (int g = 0; g < KA; g++)
                    a[i * KA + g] = VFMA(qv, kv[g], a[i * KA + g]);
            }
        }
        for (int i = 0; i < R; i++)
            for (int g = 0; g < KA; g++)
                acc[i * G + g0 + g] = a[i * KA + g];
    }
    DOT_STORE(acc, R, G, c * STREAM_UNIT(type), s, ld_s);
}

/* KG keys (at kr[0..KG), pf_n keys left in the block) against every row:
 * 4, then 2, then 1 rows at a time. The KG rows stay in L1 while the row
 * blocks go over them; the first block, the one that reads them from
 * memory, prefetches when there are several rows. */
STREAM_INLINE void DOT_GROUP(const T *q, int64_t ld_q, int64_t rows,
                             const char *const *kr, int64_t dim, T c, T *s,
                             int64_t ld_s, int64_t pf_n,
                             const sdpa_row_prefetch *hint, int64_t hj,
                             const int type, const int KG)
{
    if (rows == 1)
        pf_n = 0;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4, pf_n = 0, hint = NULL)
        DOT_KEYS(q + r * ld_q, ld_q, kr, dim, c, s + r * ld_s, ld_s, pf_n, hint,
                 hj, type, 4, KG);
    if (r + 2 <= rows) {
        DOT_KEYS(q + r * ld_q, ld_q, kr, dim, c, s + r * ld_s, ld_s, pf_n, hint,
                 hj, type, 2, KG);
        r += 2, pf_n = 0, hint = NULL;
    }
    if (r < rows)
        DOT_KEYS(q + r * ld_q, ld_q, kr, dim, c, s + r * ld_s, ld_s, pf_n, hint,
                 hj, type, 1, KG);
}

/* Groups of ACC_VECS keys, then of 4, then single keys. */
STREAM_INLINE void DOT_TYPED(const T *q, int64_t ld_q, int64_t rows,
                             const char *const *k, const int type, int64_t n,
                             int64_t dim, T c, T *s, int64_t ld_s,
                             const sdpa_row_prefetch *hint)
{
    int64_t j = 0;
    for (; j + ACC_VECS <= n; j += ACC_VECS)
        DOT_GROUP(q, ld_q, rows, k + j, dim, c, s + j, ld_s, n - j, hint, j,
                  type, ACC_VECS);
    if (j + 4 <= n) {
        DOT_GROUP(q, ld_q, rows, k + j, dim, c, s + j, ld_s, n - j, hint, j,
                  type, 4);
        j += 4;
    }
    for (; j < n; j++)
        DOT_GROUP(q, ld_q, rows, k + j, dim, c, s + j, ld_s, n - j, hint, j,
                  type, 1);
}

static void KERNEL_NAME(dot_rows)(const T *q, int64_t ld_q, int64_t rows,
                                  const char *const *k, int type, int64_t n,
                                  int64_t dim, T c, T *s, int64_t ld_s,
                                  const sdpa_row_prefetch *pf)
{
#define DOT_CALL(TYPE) DOT_TYPED(q, ld_q, rows, k, TYPE, n, dim, c, s, ld_s, pf)
    DISPATCH_TYPE(type, DOT_CALL);
#undef DOT_CALL
}

/* Where ACC_BLOCK prefetches: from row at[0] (the sub-block's first), rows
 * up to n of the block, bytes [lo, hi) of each, `ahead` rows ahead; at
 * NULL or ahead 0: nowhere. And the caller's hint, from its row hj on
 * (NULL: none). */
typedef struct NAME(acc_prefetch) {
    const char *const *at;
    int64_t n, lo, hi, ahead;
    const sdpa_row_prefetch *hint;
    int64_t hj;
} NAME(acc_prefetch);

/* acc[i·ld_a + l] += Σ_{j<n} p[i·ld_p + j] · V_j[d0 + l] for R rows i and
 * the S·W elements l of a slice (only the first `count` < W when part,
 * S = 1), row V_j at vr[j]. The slice of acc stays in registers over the
 * keys; each V vector is loaded (and widened) once for R rows. */
STREAM_INLINE void ACC_BLOCK(const T *p, int64_t ld_p, const char *const *vr,
                             int64_t d0, int64_t n, T *acc, int64_t ld_a,
                             NAME(acc_prefetch) pf, const int type, const int R,
                             const int S, const bool part, int count)
{
    VT a[ACC_VECS];
    for (int i = 0; i < R; i++)
        for (int v = 0; v < S; v++)
            a[i * S + v] = part ? VLOAD_PART(acc + i * ld_a, count)
                                : VLOAD(acc + i * ld_a + v * W);
    for (int64_t j = 0; j < n; j++) {
        const char *vj = vr[j];
        if (pf.ahead > 0 && pf.at && j + pf.ahead < pf.n)
            PREFETCH_ROWS(pf.at, j + pf.ahead, j + pf.ahead + 1, pf.lo, pf.hi);
        VT vv[ACC_VECS], ds = VZERO();
        for (int v = 0; v < S; v++)
            vv[v] = part ? LOAD_PART(vj, d0, type, count)
                         : LOAD_W(vj, d0 + v * W, type, &ds,
                                  v == 0 || ((d0 + v * W) & 31) == 0);
        for (int i = 0; i < R; i++) {
            VT pj = VSET1(p[i * ld_p + j] * STREAM_UNIT(type));
            for (int v = 0; v < S; v++)
                a[i * S + v] = VFMA(pj, vv[v], a[i * S + v]);
        }
        if (pf.hint) /* paced: after key j's row is in (rows.h) */
            sdpa_prefetch_row(pf.hint, pf.hj + j + PACE(a[R * S - 1]));
    }
    for (int i = 0; i < R; i++)
        for (int v = 0; v < S; v++) {
            if (part)
                VSTORE_PART(acc + i * ld_a, a[i * S + v], count);
            else
                VSTORE(acc + i * ld_a + v * W, a[i * S + v]);
        }
}

/* R rows of acc over n keys, the whole dim: slices of the most vectors
 * that R rows' accumulators allow (at most ACC_SLICE), then 4, 2, 1
 * vectors and the partial one, each a pass over the keys; the first
 * prefetches (pf). */
STREAM_INLINE void ACC_ROW_BLOCK(const T *p, int64_t ld_p,
                                 const char *const *vr, int64_t n, int64_t dim,
                                 T *acc, int64_t ld_a, NAME(acc_prefetch) pf,
                                 const int type, const int R)
{
    const int most = MIN_INT(ACC_VECS / R, ACC_SLICE);
    int64_t d = 0;
    for (; d + most * W <= dim; d += most * W, pf.at = NULL, pf.hint = NULL)
        ACC_BLOCK(p, ld_p, vr, d, n, acc + d, ld_a, pf, type, R, most, false,
                  W);
    if (most > 4 && d + 4 * W <= dim) {
        ACC_BLOCK(p, ld_p, vr, d, n, acc + d, ld_a, pf, type, R, 4, false, W);
        d += 4 * W, pf.at = NULL, pf.hint = NULL;
    }
    if (most > 2 && d + 2 * W <= dim) {
        ACC_BLOCK(p, ld_p, vr, d, n, acc + d, ld_a, pf, type, R, 2, false, W);
        d += 2 * W, pf.at = NULL, pf.hint = NULL;
    }
    if (most > 1 && d + W <= dim) {
        ACC_BLOCK(p, ld_p, vr, d, n, acc + d, ld_a, pf, type, R, 1, false, W);
        d += W, pf.at = NULL, pf.hint = NULL;
    }
    if (d < dim)
        ACC_BLOCK(p, ld_p, vr, d, n, acc + d, ld_a, pf, type, R, 1, true,
                  (int)(dim - d));
}

/* Keys a sub-block at a time, about 16 KB of V, which stays in L1 while
 * the row blocks and slices pass over it; rows 4 at a time if 4 rows'
 * slices cover a value row, else 2 (or 1 if even those do not fit the
 * registers), so that the first pass over the sub-block, the one from
 * memory, reads whole rows where it can. With several rows, each row
 * block's first pass prefetches its share of the rows PREFETCH_AHEAD
 * ahead, so that the prefetches go on while the later passes work from
 * L1. acc is loaded and stored once per sub-block and slice; the sums'
 * order (sequential in j) is the same as without sub-blocks. */
STREAM_INLINE void ACC_TYPED(const T *p, int64_t ld_p, int64_t rows,
                             const char *const *v, const int type, int64_t n,
                             int64_t dim, T *acc, int64_t ld_a,
                             const sdpa_row_prefetch *hint)
{
    const int64_t row_bytes =
        ROW_BYTES(type, dim) > 0 ? ROW_BYTES(type, dim) : 1;
    const int64_t sub = 16384 / row_bytes < 8 ? 8 : 16384 / row_bytes;
    const int64_t most4 = MIN_INT(ACC_VECS / 4, ACC_SLICE) * W;
    const int rmax = dim <= most4 ? 4 : ACC_VECS / ACC_SLICE >= 2 ? 2 : 1;
    /* row blocks: rows / rmax of rmax, then one of 2 and / or one of 1 */
    const int64_t rest = rows % rmax;
    const int64_t blocks = rows / rmax + (rest >= 2) + (rest % 2);
    /* several passes over a sub-block: several rows, or rows longer than
     * one pass takes */
    const bool several = rows > 1 || dim > ACC_SLICE * W;
    for (int64_t j0 = 0; j0 < n; j0 += sub) {
        const int64_t nb = MIN_INT(sub, n - j0);
        const char *const *vr = v + j0;
        /* the first row block's first pass prefetches (pf.hint is
         * cleared after it) */
        NAME(acc_prefetch)
        pf = {several ? vr : NULL,       n - j0, 0, 0,
              PREFETCH_AHEAD(row_bytes), hint,   j0};
        int64_t r = 0, b = 0;
        /* block b prefetches the lines [b, b + 1)·row_bytes / blocks */
#define SHARE(b) ((b) == blocks ? row_bytes : (b)*row_bytes / blocks / 64 * 64)
        for (; r + rmax <= rows && rmax == 4; r += 4, b++) {
            pf.lo = SHARE(b), pf.hi = SHARE(b + 1);
            ACC_ROW_BLOCK(p + r * ld_p + j0, ld_p, vr, nb, dim, acc + r * ld_a,
                          ld_a, pf, type, 4);
            pf.hint = NULL;
        }
        for (; r + 2 <= rows && rmax >= 2; r += 2, b++) {
            pf.lo = SHARE(b), pf.hi = SHARE(b + 1);
            ACC_ROW_BLOCK(p + r * ld_p + j0, ld_p, vr, nb, dim, acc + r * ld_a,
                          ld_a, pf, type, 2);
            pf.hint = NULL;
        }
        for (; r < rows; r++, b++) {
            pf.lo = SHARE(b), pf.hi = SHARE(b + 1);
            ACC_ROW_BLOCK(p + r * ld_p + j0, ld_p, vr, nb, dim, acc + r * ld_a,
                          ld_a, pf, type, 1);
            pf.hint = NULL;
        }
#undef SHARE
    }
}

static void KERNEL_NAME(acc_rows)(const T *p, int64_t ld_p, int64_t rows,
                                  const char *const *v, int type, int64_t n,
                                  int64_t dim, T *acc, int64_t ld_a,
                                  const sdpa_row_prefetch *pf)
{
#define ACC_CALL(TYPE) ACC_TYPED(p, ld_p, rows, v, TYPE, n, dim, acc, ld_a, pf)
    DISPATCH_TYPE(type, ACC_CALL);
#undef ACC_CALL
}

/* Widening and narrowing: W at a time, the tail (and T's own type, a
 * copy) by the scalar code, whose bits the vector code gives. */
static void KERNEL_NAME(widen)(const void *src, int type, T *dst, int64_t n)
{
    int64_t i = 0;
#ifdef VLOAD_F16
    /* T's own type is a copy: the scalar code's memcpy */
#define WIDEN_CALL(TYPE)                                                       \
    for (VT ds = VZERO(); TYPE != OWN_TYPE && i + W <= n; i += W) {            \
        VT x = LOAD_W((const char *)src, i, TYPE, &ds, (i & 31) == 0);         \
        /* (not times 1: a bfloat16 signalling NaN keeps its bits) */          \
        VSTORE(dst + i,                                                        \
               TYPE == SDPA_FP8_E4M3 ? VMUL(x, VSET1(STREAM_UNIT(TYPE))) : x); \
    }
    DISPATCH_TYPE(type, WIDEN_CALL);
#undef WIDEN_CALL
#endif
    NAME(scalar_widen)(src, type, dst, i, n);
}

static void KERNEL_NAME(narrow)(const T *src, int type, void *dst, int64_t n)
{
    int64_t i = 0;
#ifdef VLOAD_F16
    uint16_t *h = dst;
    if (type == SDPA_FLOAT16)
        for (; i + W <= n; i += W)
            VSTORE_F16(h + i, VLOAD(src + i));
    else if (type == SDPA_BFLOAT16)
        for (; i + W <= n; i += W)
            VSTORE_BF16(h + i, VLOAD(src + i));
#endif
    NAME(scalar_narrow)(src, type, dst, i, n);
}

/* rows.h: dropout. Stretches of up to DROPOUT_STRETCH keys (a multiple of
 * PHILOX_LANES blocks of 4): their Philox
 * words in key order from PHILOX_WORDS (the ISA file's rounds on
 * PHILOX_LANES counters at once), then the mask and the products W lanes
 * at a time, the stretch's tail by the scalar code (the same operations,
 * so the same bits). */
#define DROPOUT_STRETCH 256
static void KERNEL_NAME(dropout)(T *x, int64_t n, const sdpa_dropout_row *row,
                                 int64_t key, T c, T *g, T d)
{
    uint32_t words[DROPOUT_STRETCH + 4 * PHILOX_LANES];
    const VT vc = VSET1(c), vd = VSET1(d);
    for (int64_t j0 = 0, m; j0 < n; j0 += m) {
        /* whole blocks from the first one on: every stretch after the
         * first starts a block, and none draws a block it does not use
         * beyond the last group's */
        const int64_t first = key + j0, off = first % 4;
        m = n - j0 < DROPOUT_STRETCH - off ? n - j0 : DROPOUT_STRETCH - off;
        PHILOX_WORDS(words, row, (uint32_t)(first / 4), (off + m + 3) / 4);
        const uint32_t *w = words + off;
        T *xs = x + j0, *gs = g ? g + j0 : NULL;
        int64_t j = 0;
        for (; j + W <= m; j += W) {
            const VM keep = KEEP_MASK(w + j, row->threshold);
            const VT v = VLOAD(xs + j);
            if (gs) {
                const VT kept = VKEEP(VMUL(vc, VLOAD(gs + j)), keep);
                VSTORE(gs + j, VMUL(v, VSUB(kept, vd)));
            }
            VSTORE(xs + j, VKEEP(VMUL(v, vc), keep));
        }
        for (; j < m; j++)
            NAME(scalar_dropout_key)(xs, gs, j, w[j] >= row->threshold, c, d);
    }
}
#undef DROPOUT_STRETCH

const NAME(sdpa_row_kernels) NAME(ROW_KERNELS) = {
    KERNEL_NAME(mask_max), KERNEL_NAME(exp_sum),  KERNEL_NAME(scale),
    KERNEL_NAME(softcap),  KERNEL_NAME(dot_rows), KERNEL_NAME(acc_rows),
    KERNEL_NAME(widen),    KERNEL_NAME(narrow),   KERNEL_NAME(dropout),
};

#undef KERNEL_NAME
#undef STREAM_INLINE
#undef OWN_TYPE
#undef MIN_INT
#undef KEYS_AT_ONCE
#undef ACC_SLICE
#undef PREFETCH_AHEAD
#undef LOAD_W
#undef LOAD_PART
#undef LOAD_STEP
#undef PREFETCH_ROWS
#undef DOT_STORE
#undef DOT_KEYS
#undef DOT_GROUP
#undef DOT_TYPED
#undef ACC_BLOCK
#undef ACC_ROW_BLOCK
#undef ACC_TYPED
#undef ROW_BYTES
#undef STEP_VALUES
#undef STREAM_UNIT
#undef DISPATCH_TYPE
/* The streaming kernels' ISA macros end here too (rows_simd_undef.h lists
 * the older ones). */
#undef ACC_VECS
#undef VLOAD_PART
#undef VSTORE_PART
#undef VHSUMW
#undef VLOAD_F16
#undef VLOAD_F16_PART
#undef VLOAD_BF16
#undef VLOAD_BF16_PART
#undef VSTORE_F16
#undef VSTORE_BF16
#undef VLOAD_E4M3
#undef VLOAD_E5M2
#undef VLOAD_Q8_0
#undef VLOAD_Q4_0
#undef VLOAD_BLOCK_D
