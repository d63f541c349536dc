/* Status descriptions and the run-time version: fixed strings only. */
#include "sdpa.h"

const char *sdpa_status_string(int status)
{
    /* Indexed by the frozen status values of sdpa.h. */
    static const char *const names[] = {
        [SDPA_OK] = "success",
        [SDPA_ERR_NULL_POINTER] = "a required pointer is NULL",
        [SDPA_ERR_STRUCT_SIZE] = "struct_size is smaller than version 1",
        [SDPA_ERR_STRUCT_TAIL] = "struct_size too large, unknown tail not 0",
        [SDPA_ERR_BAD_DTYPE] = "unknown dtype",
        [SDPA_ERR_BAD_DIM] = "a dimension is zero or negative",
        [SDPA_ERR_SHAPE_MISMATCH] = "tensor dimensions disagree",
        [SDPA_ERR_BAD_STRIDE] = "invalid stride",
        [SDPA_ERR_OVERLAP] = "an output overlaps another output or an input",
        [SDPA_ERR_OVERFLOW] = "a size overflows size_t or the BLAS int",
        [SDPA_ERR_BAD_SCALE] = "scale is negative or not finite",
        [SDPA_ERR_BAD_SOFTCAP] = "soft-cap is negative or not finite",
        [SDPA_ERR_HEAD_GROUPING] = "query heads are not a multiple of KV heads",
        [SDPA_ERR_BAD_KV_LEN] = "a key length is outside [0, Tk]",
        [SDPA_ERR_BAD_CAUSAL] = "unknown causal mode",
        [SDPA_ERR_BAD_FLAGS] = "unknown flag bits",
        [SDPA_ERR_UNKNOWN_OPTION] = "unknown option",
        [SDPA_ERR_BAD_OPTION_VALUE] = "option value out of range",
        [SDPA_ERR_FULLY_MASKED_ROW] = "a query row has no allowed key",
        [SDPA_ERR_NONFINITE] = "a logit is NaN or infinite",
        [SDPA_ERR_OUT_OF_MEMORY] = "out of memory",
        [SDPA_ERR_UNSUPPORTED] = "not supported on this CPU or for this call",
        [SDPA_ERR_BAD_WINDOW] = "bad sliding window",
        [SDPA_ERR_BAD_ALIBI] = "bad ALiBi slope",
        [SDPA_ERR_BAD_SINK] = "bad sink logit",
        [SDPA_ERR_BAD_LOGITS_STAGE] = "bad logits stage",
        [SDPA_ERR_BAD_PAGE] = "bad paged K/V block table",
        [SDPA_ERR_PARALLEL_FOR] =
            "the caller's parallel-for broke its contract",
        [SDPA_ERR_BAD_RAGGED] = "bad ragged batch",
        [SDPA_ERR_OFFSETS_START] = "sequence offsets do not start at 0",
        [SDPA_ERR_OFFSETS_ORDER] = "sequence offsets decrease",
        [SDPA_ERR_OFFSETS_END] =
            "the last sequence offset is not the packed extent",
        [SDPA_ERR_BUSY] = "the context is inside a call",
        [SDPA_ERR_BAD_DROPOUT] = "bad dropout probability",
        [SDPA_ERR_BAD_KV_SCALE] = "bad FP8 K/V scale",
    };
    if (status < 0 || (size_t)status >= sizeof names / sizeof names[0])
        return "unknown status";
    return names[status];
}

unsigned sdpa_version_number(void)
{
    return SDPA_VERSION_NUMBER;
}

const char *sdpa_version_string(void)
{
    return SDPA_VERSION_STRING;
}
