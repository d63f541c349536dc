/*
 * The fields the inputs of fuzz_forward and fuzz_backward both start with,
 * in this order (each target decodes them into its problem: the mode, the
 * dtype, N, Hkv and the group Hq / Hkv, the extents, the layout bits), and
 * the extents as the targets' seeds set them.
 */
#ifndef SDPA_FUZZ_PROBLEM_H
#define SDPA_FUZZ_PROBLEM_H

enum fz_problem_field {
    F_MODE, /* % 8 == 7: the huge mode */
    F_DTYPE,
    F_DTYPE_RAW, /* fz_decode_dtype */
    F_N,
    F_HKV,
    F_GROUP,
    F_TQ,
    F_TK,
    F_DK,
    F_DV,
    F_LAYOUT,
    FZ_PROBLEM_FIELDS /* the targets' own fields follow */
};

/* A seed's extents Tq, Tk, Dk, Dv (field values, as the target decodes
 * them). */
/* (clang-format would break the last pair up as a block.) */
/* clang-format off */
#define FZ_DIMS(tq, tk, dk, dv) {F_TQ, tq}, {F_TK, tk}, {F_DK, dk}, {F_DV, dv}
/* clang-format on */

#endif
