/* Run-time choice of the row kernels: AVX2+FMA where the CPU (and the OS,
 * which must save the YMM registers) supports it, portable C elsewhere. */
#include "internal.h"
#include "rows.h"

bool sdpa_cpu_has_avx2_fma(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    /* libgcc / compiler-rt also check XGETBV for the OS's AVX state. */
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

#if defined(__x86_64__) || defined(__i386__)
#define AVX2_OR_PORTABLE(SUF) &sdpa_rows_avx2_##SUF
#else
#define AVX2_OR_PORTABLE(SUF) &sdpa_rows_portable_##SUF
#endif

const sdpa_row_kernels_f32 *sdpa_row_kernels_select_f32(int kernel)
{
    return kernel == SDPA_KERNEL_AVX2 ? AVX2_OR_PORTABLE(f32)
                                      : &sdpa_rows_portable_f32;
}

const sdpa_row_kernels_f64 *sdpa_row_kernels_select_f64(int kernel)
{
    return kernel == SDPA_KERNEL_AVX2 ? AVX2_OR_PORTABLE(f64)
                                      : &sdpa_rows_portable_f64;
}
