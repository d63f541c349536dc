/*
 * sdpa_convert: the library's own conversions between float32 and the
 * half types, and the decoding of the quantized K/V types, exported for
 * engines that hold such caches (they need the
 * bits libsdpa computes with, not a compiler extension's). The row
 * kernels' widen and narrow of the best kernel set this CPU runs (F16C or
 * AVX-512 where present): the same bits in every set (rows.h).
 */
#include "core/checked.h"
#include "kernels/cpu.h"
#include "kernels/half.h"
#include "kernels/quant.h"
#include "kernels/rows.h"
#include "sdpa.h"

#include <stdbool.h>

static bool is_half(int type)
{
    return type == SDPA_FLOAT16 || type == SDPA_BFLOAT16;
}

int sdpa_convert(int dst_type, void *dst, int src_type, const void *src,
                 int64_t count)
{
    if (count < 0)
        return SDPA_ERR_BAD_DIM;
    bool narrowing = src_type == SDPA_FLOAT32 &&
                     (is_half(dst_type) || dst_type == SDPA_FLOAT32);
    bool widening = dst_type == SDPA_FLOAT32 &&
                    (is_half(src_type) || sdpa_is_quant_type(src_type));
    if (!narrowing && !widening)
        return SDPA_ERR_BAD_DTYPE;
    if (count % sdpa_dtype_values(src_type) != 0)
        return SDPA_ERR_BAD_DIM; /* a block type's values are whole blocks */
    if (count == 0)
        return SDPA_OK;
    if (!dst || !src)
        return SDPA_ERR_NULL_POINTER;
    size_t dst_bytes, src_bytes;
    const size_t src_units = (size_t)(count / sdpa_dtype_values(src_type));
    if (!sdpa_mul_size((size_t)count, sdpa_dtype_size(dst_type), &dst_bytes) ||
        !sdpa_mul_size(src_units, sdpa_dtype_size(src_type), &src_bytes) ||
        (uintptr_t)dst > UINTPTR_MAX - dst_bytes ||
        (uintptr_t)src > UINTPTR_MAX - src_bytes)
        return SDPA_ERR_OVERFLOW;
    const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d < s + src_bytes && s < d + dst_bytes)
        return SDPA_ERR_OVERLAP;
    const sdpa_row_kernels_f32 *rk =
        sdpa_row_kernels_select_f32(sdpa_kernel_best());
    if (narrowing)
        rk->narrow(src, dst_type, dst, count);
    else
        rk->widen(src, src_type, dst, count);
    return SDPA_OK;
}
