/*
 * The row kernel sets a test drives directly (static library only): the
 * portable one first, then the vector sets, and whether this CPU runs one.
 * The vector sets are built on x86 only: elsewhere (aarch64) their entries
 * have no tables, and runnable() skips them with a message, as it skips a
 * set the CPU lacks. Include after cmocka.h, sdpa.h and kernels/cpu.h.
 */
#ifndef SDPA_TEST_KERNEL_SETS_H
#define SDPA_TEST_KERNEL_SETS_H

typedef struct kernel_set {
    const char *name;
    int id; /* SDPA_KERNEL_* */
    const sdpa_row_kernels_f32 *f32;
    const sdpa_row_kernels_f64 *f64; /* both NULL: not built here */
} kernel_set;

static const kernel_set kernel_sets[] = {
    {"portable", SDPA_KERNEL_PORTABLE, &sdpa_rows_portable_f32,
     &sdpa_rows_portable_f64},
#if defined(__x86_64__) || defined(__i386__)
    {"avx2", SDPA_KERNEL_AVX2, &sdpa_rows_avx2_f32, &sdpa_rows_avx2_f64},
    {"avx512", SDPA_KERNEL_AVX512, &sdpa_rows_avx512_f32,
     &sdpa_rows_avx512_f64},
#else
    {"avx2", SDPA_KERNEL_AVX2, NULL, NULL},
    {"avx512", SDPA_KERNEL_AVX512, NULL, NULL},
#endif
};
enum { KERNEL_SETS = sizeof kernel_sets / sizeof kernel_sets[0] };

/* Is set k runnable here? Says so once when it is not. */
static inline bool runnable(int k)
{
    static bool told[KERNEL_SETS];
    bool built = kernel_sets[k].f32 != NULL;
    if (built && sdpa_kernel_supported(kernel_sets[k].id))
        return true;
    if (!told[k])
        print_message("kernel set %s: %s, not tested\n", kernel_sets[k].name,
                      built ? "not supported by this CPU"
                            : "x86 only, not built for this architecture");
    told[k] = true;
    return false;
}

#endif
