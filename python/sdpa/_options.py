"""The options of an attention call, shared by the forward, the workspace
query, the backward and the layer: the keywords of sdpa.attention turned
into the fields of sdpa_forward_args / sdpa_backward_args."""

import numpy as np

from . import _abi
from . import _arrays
from ._errors import Error

_CAUSAL = {
    None: _abi.SDPA_CAUSAL_NONE,
    False: _abi.SDPA_CAUSAL_NONE,
    "none": _abi.SDPA_CAUSAL_NONE,
    True: _abi.SDPA_CAUSAL_TOP_LEFT,
    "top_left": _abi.SDPA_CAUSAL_TOP_LEFT,
    "bottom_right": _abi.SDPA_CAUSAL_BOTTOM_RIGHT,
}


def causal_code(causal):
    if isinstance(causal, (bool, str)) or causal is None:
        if causal not in _CAUSAL:
            raise Error(
                _abi.SDPA_ERR_BAD_CAUSAL,
                "causal: %r is none of False, True, 'top_left', 'bottom_right'" % (causal,),
            )
        return _CAUSAL[causal]
    return int(causal)  # an SDPA_CAUSAL_* number, checked by the library


def _float_or_zero(x):
    return 0.0 if x is None else float(x)


def _uint64(x, who, name):
    value = int(x)
    if not 0 <= value < 1 << 64:
        raise Error(
            _abi.SDPA_ERR_BAD_DROPOUT,
            "%s: %s: %d is outside [0, 2**64)" % (who, name, value),
        )
    return value


class Options:
    """The attention options of one call (see sdpa.attention for each)."""

    def __init__(
        self,
        who,
        *,
        mask=None,
        mask_allows=False,
        bias=None,
        causal=False,
        scale=None,
        softcap=None,
        kv_lens=None,
        window=None,
        alibi=None,
        sinks=None,
        q_offsets=None,
        kv_offsets=None,
        flags=0,
        dropout_p=0.0,
        dropout_seed=0,
        dropout_offset=0,
        storage=None,
    ):
        self.who = who
        self.causal = causal_code(causal)
        self.flags = int(flags)
        if mask_allows:
            self.flags |= _abi.SDPA_FLAG_MASK_NONZERO_ALLOWS
        self.scale = _float_or_zero(scale)
        self.softcap = _float_or_zero(softcap)
        self.mask = None if mask is None else _arrays.byte_mask(mask, who, "mask")
        self.bias = None if bias is None else _arrays.take(bias, who, "bias", storage=storage)
        self.kv_lens_in = kv_lens
        self.window = window
        self.alibi_in = alibi
        self.sinks_in = sinks
        self.q_offsets_in = q_offsets
        self.kv_offsets_in = kv_offsets
        self.dropout_p = float(dropout_p)
        # The library draws from the 64-bit unsigned seed and offset; ctypes
        # would wrap a negative or larger int silently.
        self.dropout_seed = _uint64(dropout_seed, who, "dropout_seed")
        self.dropout_offset = _uint64(dropout_offset, who, "dropout_offset")
        self.keep = []  # the index arrays the C call reads

    def seqs(self):
        return 0 if self.q_offsets_in is None else int(np.size(self.q_offsets_in)) - 1

    def _index(self, x, name, dtype, count):
        a = _arrays.index_array(x, self.who, name, dtype, count)
        self.keep.append(a)
        return _arrays.pointer(a)

    def fill(self, args, batch, heads_q):
        """Write the options into args (forward or backward arguments);
        batch is N (the sequence count in a ragged call), heads_q is Hq,
        the lengths of the arrays the library reads through pointers."""
        who = self.who
        args.causal = self.causal
        args.flags = self.flags
        args.scale = self.scale
        args.softcap = self.softcap
        args.dropout_p = self.dropout_p
        args.dropout_seed = self.dropout_seed
        args.dropout_offset = self.dropout_offset
        seqs = self.seqs()
        if self.q_offsets_in is not None:
            args.seqs = seqs
            args.q_offsets = self._index(self.q_offsets_in, "q_offsets", np.int64, None)
            batch = seqs
        if self.kv_offsets_in is not None:
            # Without q_offsets the library refuses it (SDPA_ERR_BAD_RAGGED)
            # and reads nothing: no length to check then.
            count = seqs + 1 if self.q_offsets_in is not None and seqs >= 0 else None
            args.kv_offsets = self._index(self.kv_offsets_in, "kv_offsets", np.int64, count)
        if self.kv_lens_in is not None:
            args.kv_lens = self._index(self.kv_lens_in, "kv_lens", np.int64, batch)
        if self.window is not None:
            left, right = self.window
            args.flags |= _abi.SDPA_FLAG_WINDOW
            args.window_left = -1 if left is None else int(left)
            args.window_right = -1 if right is None else int(right)
        if self.alibi_in is not None and self.alibi_in is not False:
            if self.alibi_in is True:
                from ._positions import alibi_slopes

                slopes = alibi_slopes(heads_q)
            else:
                slopes = self.alibi_in
            args.alibi_slopes = self._index(slopes, "alibi", np.float64, heads_q)
        if self.sinks_in is not None:
            args.sinks = self._index(self.sinks_in, "sinks", np.float64, heads_q)
        if self.mask is not None:
            args.mask = _arrays.tensor(self.mask.a, who, "mask")
        if self.bias is not None:
            args.bias = _arrays.tensor(self.bias.a, who, "bias")
