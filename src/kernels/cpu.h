/* CPU detection and the kernel-set names (rows_dispatch.c). */
#ifndef SDPA_KERNELS_CPU_H
#define SDPA_KERNELS_CPU_H

#include <stdbool.h>

/* CPU detection: can this CPU (and OS) run the row kernels of kernel
 * (an SDPA_KERNEL_* other than AUTO)? And the widest set it can run, what
 * SDPA_KERNEL_AUTO resolves to. */
bool sdpa_kernel_supported(int kernel);
int sdpa_kernel_best(void);
/* Lower-case name of an SDPA_KERNEL_* value ("auto", "portable", "avx2",
 * "avx512"), as the SDPA_KERNEL environment variable spells it. */
const char *sdpa_kernel_name(int kernel);
/* The kernel a new context starts with: the SDPA_KERNEL environment
 * variable's (any case; unset, empty or "auto": the widest the CPU runs).
 * SDPA_ERR_BAD_OPTION_VALUE for a name it does not know,
 * SDPA_ERR_UNSUPPORTED for a kernel this CPU lacks. */
int sdpa_kernel_from_environment(int *kernel);

#endif /* SDPA_KERNELS_CPU_H */
