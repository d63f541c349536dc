"""The C ABI of libsdpa as ctypes declarations: include/sdpa.h, mirrored.

Every structure, field and constant here has the name and order it has in
the header (without the sdpa_ / SDPA_ prefix where Python has a module for
it). The test python/tests/test_abi.py compiles a C program against the header
that prints sizeof, offsetof and the constants' values, and compares them
with these declarations: a field appended to the header without its
counterpart here, or a renamed one, fails it.
"""

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_double,
    c_int,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

# The release this package was written for: SDPA_VERSION_NUMBER of
# include/sdpa.h (python/tests/test_abi.py checks that they agree). An older
# library lacks fields and functions used here and is refused.
HEADER_VERSION_NUMBER = 10100

# Status codes, in the header's order (values frozen forever).
STATUS_NAMES = {
    0: "SDPA_OK",
    1: "SDPA_ERR_NULL_POINTER",
    2: "SDPA_ERR_STRUCT_SIZE",
    3: "SDPA_ERR_STRUCT_TAIL",
    4: "SDPA_ERR_BAD_DTYPE",
    5: "SDPA_ERR_BAD_DIM",
    6: "SDPA_ERR_SHAPE_MISMATCH",
    7: "SDPA_ERR_BAD_STRIDE",
    8: "SDPA_ERR_OVERLAP",
    9: "SDPA_ERR_OVERFLOW",
    10: "SDPA_ERR_BAD_SCALE",
    11: "SDPA_ERR_BAD_SOFTCAP",
    12: "SDPA_ERR_HEAD_GROUPING",
    13: "SDPA_ERR_BAD_KV_LEN",
    14: "SDPA_ERR_BAD_CAUSAL",
    15: "SDPA_ERR_BAD_FLAGS",
    16: "SDPA_ERR_UNKNOWN_OPTION",
    17: "SDPA_ERR_BAD_OPTION_VALUE",
    18: "SDPA_ERR_FULLY_MASKED_ROW",
    19: "SDPA_ERR_NONFINITE",
    20: "SDPA_ERR_OUT_OF_MEMORY",
    21: "SDPA_ERR_UNSUPPORTED",
    22: "SDPA_ERR_BAD_WINDOW",
    23: "SDPA_ERR_BAD_ALIBI",
    24: "SDPA_ERR_BAD_SINK",
    25: "SDPA_ERR_BAD_LOGITS_STAGE",
    26: "SDPA_ERR_BAD_PAGE",
    27: "SDPA_ERR_PARALLEL_FOR",
    28: "SDPA_ERR_BAD_RAGGED",
    29: "SDPA_ERR_OFFSETS_START",
    30: "SDPA_ERR_OFFSETS_ORDER",
    31: "SDPA_ERR_OFFSETS_END",
    32: "SDPA_ERR_BUSY",
    33: "SDPA_ERR_BAD_DROPOUT",
    34: "SDPA_ERR_BAD_KV_SCALE",
}
globals().update({name: code for code, name in STATUS_NAMES.items()})

# Every other enumerator of the header that this package passes on.
CONSTANTS = {
    "SDPA_OPT_EMPTY_ROWS": 1,
    "SDPA_OPT_NUM_THREADS": 2,
    "SDPA_OPT_KERNEL": 3,
    "SDPA_OPT_PATH": 4,
    "SDPA_OPT_SCRATCH_LIMIT": 5,
    "SDPA_OPT_BLOCK_Q": 6,
    "SDPA_OPT_BLOCK_K": 7,
    "SDPA_EMPTY_ROWS_ERROR": 0,
    "SDPA_EMPTY_ROWS_ZERO": 1,
    "SDPA_KERNEL_AUTO": 0,
    "SDPA_KERNEL_PORTABLE": 1,
    "SDPA_KERNEL_AVX2": 2,
    "SDPA_KERNEL_AVX512": 3,
    "SDPA_PATH_AUTO": 0,
    "SDPA_PATH_MATERIALISED": 1,
    "SDPA_PATH_TILED": 2,
    "SDPA_PATH_DECODE": 3,
    "SDPA_PATH_DECODE_BLAS": 4,
    "SDPA_NUM_THREADS_ALL": -1,
    "SDPA_FLOAT32": 1,
    "SDPA_FLOAT64": 2,
    "SDPA_FLOAT16": 3,
    "SDPA_BFLOAT16": 4,
    "SDPA_FP8_E4M3": 5,
    "SDPA_FP8_E5M2": 6,
    "SDPA_Q8_0": 7,
    "SDPA_Q4_0": 8,
    "SDPA_CAUSAL_NONE": 0,
    "SDPA_CAUSAL_TOP_LEFT": 1,
    "SDPA_CAUSAL_BOTTOM_RIGHT": 2,
    "SDPA_FLAG_MASK_NONZERO_ALLOWS": 1,
    "SDPA_FLAG_WINDOW": 2,
    "SDPA_LOGITS_SCALED": 1,
    "SDPA_LOGITS_CAPPED": 2,
    "SDPA_LOGITS_MASKED": 3,
    "SDPA_ROPE_HALF": 1,
    "SDPA_ROPE_INTERLEAVED": 2,
    "SDPA_POS_NONE": 0,
    "SDPA_POS_SINUSOIDAL": 1,
    "SDPA_POS_ROPE_HALF": 2,
    "SDPA_POS_ROPE_INTERLEAVED": 3,
}
globals().update(CONSTANTS)


class sdpa_tensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("shape", c_int64 * 4),
        ("stride", c_int64 * 4),
    ]


alloc_fn = CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_size_t)
free_fn = CFUNCTYPE(None, c_void_p, c_void_p, c_size_t)


class sdpa_allocator(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("alloc", alloc_fn),
        ("free", free_fn),
        ("opaque", c_void_p),
    ]


task_fn = CFUNCTYPE(None, c_void_p, c_int64, c_int)
parallel_for_fn = CFUNCTYPE(None, c_void_p, c_int64, task_fn, c_void_p)


class sdpa_forward_args(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int),
        ("causal", c_int),
        ("flags", c_uint32),
        ("scale", c_double),
        ("softcap", c_double),
        ("kv_lens", c_void_p),
        ("q", sdpa_tensor),
        ("k", sdpa_tensor),
        ("v", sdpa_tensor),
        ("mask", sdpa_tensor),
        ("bias", sdpa_tensor),
        ("out", sdpa_tensor),
        ("weights", sdpa_tensor),
        ("lse", sdpa_tensor),
        # 1.1
        ("window_left", c_int64),
        ("window_right", c_int64),
        ("alibi_slopes", c_void_p),
        ("sinks", c_void_p),
        ("logits", sdpa_tensor),
        ("logits_stage", c_int),
        ("max_weight", sdpa_tensor),
        ("entropy", sdpa_tensor),
        ("kv_dtype", c_int),
        ("bias_dtype", c_int),
        ("block_table", c_void_p),
        ("pages_per_seq", c_int64),
        ("block_table_stride", c_int64),
        # 1.2
        ("seqs", c_int64),
        ("q_offsets", c_void_p),
        ("kv_offsets", c_void_p),
        ("dropout_p", c_double),
        ("dropout_seed", c_uint64),
        ("dropout_offset", c_uint64),
        ("k_scale", c_void_p),
        ("v_scale", c_void_p),
    ]


class sdpa_backward_args(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int),
        ("causal", c_int),
        ("flags", c_uint32),
        ("scale", c_double),
        ("softcap", c_double),
        ("kv_lens", c_void_p),
        ("q", sdpa_tensor),
        ("k", sdpa_tensor),
        ("v", sdpa_tensor),
        ("mask", sdpa_tensor),
        ("bias", sdpa_tensor),
        ("out", sdpa_tensor),
        ("dout", sdpa_tensor),
        ("lse", sdpa_tensor),
        ("dq", sdpa_tensor),
        ("dk", sdpa_tensor),
        ("dv", sdpa_tensor),
        ("dbias", sdpa_tensor),
        ("window_left", c_int64),
        ("window_right", c_int64),
        ("alibi_slopes", c_void_p),
        ("sinks", c_void_p),
        ("dsinks", c_void_p),
        # 1.2
        ("seqs", c_int64),
        ("q_offsets", c_void_p),
        ("kv_offsets", c_void_p),
        ("kv_dtype", c_int),
        ("bias_dtype", c_int),
        ("grad_dtype", c_int),
        ("dropout_p", c_double),
        ("dropout_seed", c_uint64),
        ("dropout_offset", c_uint64),
    ]


class sdpa_merge_args(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int),
        ("parts", c_int64),
        ("outs", POINTER(sdpa_tensor)),
        ("lses", POINTER(sdpa_tensor)),
        ("out", sdpa_tensor),
        ("lse", sdpa_tensor),
    ]


class sdpa_mha_args(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("dtype", c_int),
        ("positions", c_int),
        ("heads_q", c_int64),
        ("heads_kv", c_int64),
        ("dim_k", c_int64),
        ("dim_v", c_int64),
        ("pos_base", c_double),
        ("pos_offset", c_int64),
        ("pos_q", c_void_p),
        ("pos_kv", c_void_p),
        ("x_q", sdpa_tensor),
        ("x_kv", sdpa_tensor),
        ("y", sdpa_tensor),
        ("w_q", c_void_p),
        ("w_k", c_void_p),
        ("w_v", c_void_p),
        ("w_o", c_void_p),
        ("b_q", c_void_p),
        ("b_k", c_void_p),
        ("b_v", c_void_p),
        ("b_o", c_void_p),
        ("attn", POINTER(sdpa_forward_args)),
    ]


class sdpa_mha_backward_args(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("forward", POINTER(sdpa_mha_args)),
        ("dy", sdpa_tensor),
        ("dx_q", sdpa_tensor),
        ("dx_kv", sdpa_tensor),
        ("dw_q", c_void_p),
        ("dw_k", c_void_p),
        ("dw_v", c_void_p),
        ("dw_o", c_void_p),
        ("db_q", c_void_p),
        ("db_k", c_void_p),
        ("db_v", c_void_p),
        ("db_o", c_void_p),
        ("grad_dtype", c_int),
    ]


# The structures that carry their own size, each with it set.
SIZED_STRUCTS = (
    sdpa_allocator,
    sdpa_forward_args,
    sdpa_backward_args,
    sdpa_merge_args,
    sdpa_mha_args,
    sdpa_mha_backward_args,
)
ALL_STRUCTS = (sdpa_tensor,) + SIZED_STRUCTS


def new(struct):
    """A zero-filled struct with its struct_size set (SDPA_*_ARGS_INIT)."""
    s = struct()
    s.struct_size = ctypes.sizeof(struct)
    return s


# The prototypes of the exported functions: name -> (restype, argtypes).
# sdpa_convert is the one 1.2 addition (node LIBSDPA_1.2).
PROTOTYPES = {
    "sdpa_status_string": (ctypes.c_char_p, [c_int]),
    "sdpa_version_number": (ctypes.c_uint, []),
    "sdpa_version_string": (ctypes.c_char_p, []),
    "sdpa_ctx_create": (c_int, [POINTER(c_void_p)]),
    "sdpa_ctx_create_with_allocator": (
        c_int,
        [POINTER(c_void_p), POINTER(sdpa_allocator)],
    ),
    "sdpa_ctx_destroy": (None, [c_void_p]),
    "sdpa_ctx_last_error": (ctypes.c_char_p, [c_void_p]),
    "sdpa_ctx_set_int": (c_int, [c_void_p, c_int, c_int64]),
    "sdpa_ctx_get_int": (c_int, [c_void_p, c_int, POINTER(c_int64)]),
    "sdpa_ctx_set_parallel_for": (
        c_int,
        [c_void_p, parallel_for_fn, c_void_p, c_int],
    ),
    "sdpa_convert": (c_int, [c_int, c_void_p, c_int, c_void_p, c_int64]),
    "sdpa_forward": (c_int, [c_void_p, POINTER(sdpa_forward_args)]),
    "sdpa_forward_workspace": (
        c_int,
        [c_void_p, POINTER(sdpa_forward_args), POINTER(c_size_t)],
    ),
    "sdpa_alibi_slopes": (c_int, [c_int64, c_double, c_void_p]),
    "sdpa_sinusoidal_table": (
        c_int,
        [c_int, c_int64, c_int64, c_int64, c_double, c_void_p],
    ),
    "sdpa_rope_apply": (
        c_int,
        [c_int, sdpa_tensor, c_void_p, c_int, c_double, c_int64],
    ),
    "sdpa_mha_forward": (c_int, [c_void_p, POINTER(sdpa_mha_args)]),
    "sdpa_backward": (c_int, [c_void_p, POINTER(sdpa_backward_args)]),
    "sdpa_merge": (c_int, [c_void_p, POINTER(sdpa_merge_args)]),
    "sdpa_mha_backward": (c_int, [c_void_p, POINTER(sdpa_mha_backward_args)]),
}
