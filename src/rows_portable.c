/* The portable C row kernels: built everywhere, the reference the vector
 * kernels (AVX2, AVX-512) are tested against. */
#include "rows.h"
#include "vexp.h"

#include <math.h>

/* Defines the kernel tables sdpa_rows_portable_f32, sdpa_rows_portable_f64
 * over the static portable_mask_max_f32, portable_mask_max_f64,
 * portable_exp_sum_f32, portable_exp_sum_f64, portable_scale_f32,
 * portable_scale_f64, portable_softcap_f32, portable_softcap_f64, which run
 * rows_scalar_impl.h's scalar_mask_max_f32, scalar_mask_max_f64,
 * scalar_exp_sum_f32, scalar_exp_sum_f64, scalar_scale_f32,
 * scalar_scale_f64, scalar_softcap_f32, scalar_softcap_f64 (with
 * softcap_small_f32, softcap_small_f64, softcap_large_f32,
 * softcap_large_f64) over whole rows; and portable_dot_rows_f32,
 * portable_dot_rows_f64, portable_acc_rows_f32, portable_acc_rows_f64,
 * portable_widen_f32, portable_widen_f64, portable_narrow_f32,
 * portable_narrow_f64, the streaming decode kernels and the half
 * conversions (rows.h), in C over half.h. */
#define SDPA_TEMPLATE "rows_portable_impl.h"
#include "instantiate.h"
