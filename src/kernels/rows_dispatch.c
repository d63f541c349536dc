/* Run-time choice of the row kernels: the widest vector set the CPU (and
 * the OS, which must save the wider registers) supports, portable C where
 * there is none. */
#include "kernels/cpu.h"
#include "sdpa.h"
#include "kernels/rows.h"

#include <stdlib.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>

/* F16C (CPUID leaf 1, ECX bit 29), read directly: clang before 15 does not
 * know "f16c" in __builtin_cpu_supports. It works on the YMM state that
 * the avx2 check below has found the OS saving. */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

bool sdpa_kernel_supported(int kernel)
{
    switch (kernel) {
    case SDPA_KERNEL_PORTABLE:
        return true;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    /* libgcc / compiler-rt also check XGETBV for the OS's YMM / ZMM and
     * mask-register state before they report these features. F16C
     * converts the half types in both sets: AVX2 CPUs have it, but it is
     * a CPUID bit of its own, which a hypervisor may hide. */
    case SDPA_KERNEL_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && cpu_has_f16c();
    case SDPA_KERNEL_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && cpu_has_f16c() &&
               __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
#endif
    default:
        return false;
    }
}

int sdpa_kernel_best(void)
{
    if (sdpa_kernel_supported(SDPA_KERNEL_AVX512))
        return SDPA_KERNEL_AVX512;
    if (sdpa_kernel_supported(SDPA_KERNEL_AVX2))
        return SDPA_KERNEL_AVX2;
    return SDPA_KERNEL_PORTABLE;
}

/* The kernel names SDPA_KERNEL accepts, by SDPA_KERNEL_* value. */
static const char *const kernel_names[] = {
    [SDPA_KERNEL_AUTO] = "auto",
    [SDPA_KERNEL_PORTABLE] = "portable",
    [SDPA_KERNEL_AVX2] = "avx2",
    [SDPA_KERNEL_AVX512] = "avx512",
};

const char *sdpa_kernel_name(int kernel)
{
    if (kernel >= 0 &&
        kernel < (int)(sizeof kernel_names / sizeof kernel_names[0]))
        return kernel_names[kernel];
    return "unknown";
}

static bool same_name(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char ca = *a >= 'A' && *a <= 'Z' ? (char)(*a - 'A' + 'a') : *a;
        if (ca != *b)
            return false;
    }
    return *a == *b;
}

int sdpa_kernel_from_environment(int *kernel)
{
    *kernel = sdpa_kernel_best();
    const char *value = getenv("SDPA_KERNEL");
    if (!value || !*value)
        return SDPA_OK;
    for (int k = 0; k < (int)(sizeof kernel_names / sizeof kernel_names[0]);
         k++)
        if (same_name(value, kernel_names[k])) {
            if (k == SDPA_KERNEL_AUTO)
                return SDPA_OK;
            if (!sdpa_kernel_supported(k))
                return SDPA_ERR_UNSUPPORTED;
            *kernel = k;
            return SDPA_OK;
        }
    return SDPA_ERR_BAD_OPTION_VALUE;
}

/* Off x86 only the portable set exists; a context never resolves to the
 * others there (sdpa_kernel_supported says no), so these never run. */
#if defined(__x86_64__) || defined(__i386__)
#define VECTOR_SET(isa, SUF) &sdpa_rows_##isa##_##SUF
#else
#define VECTOR_SET(isa, SUF) &sdpa_rows_portable_##SUF
#endif

#define SDPA_DEFINE_KERNEL_SELECT(SUF)                                         \
    const sdpa_row_kernels_##SUF *sdpa_row_kernels_select_##SUF(int kernel)    \
    {                                                                          \
        switch (kernel) {                                                      \
        case SDPA_KERNEL_AVX512:                                               \
            return VECTOR_SET(avx512, SUF);                                    \
        case SDPA_KERNEL_AVX2:                                                 \
            return VECTOR_SET(avx2, SUF);                                      \
        default:                                                               \
            return &sdpa_rows_portable_##SUF;                                  \
        }                                                                      \
    }

/* sdpa_row_kernels_select_f32, sdpa_row_kernels_select_f64 */
SDPA_DEFINE_KERNEL_SELECT(f32)
SDPA_DEFINE_KERNEL_SELECT(f64)

/* rows.h: the prefetch pacing's zero; never written. */
int64_t sdpa_prefetch_pace_zero = 0;
