"""Independent float64 references for the tests, written from the formulas of
include/sdpa.h and docs/SEMANTICS.md with numpy only: loops over batch items
and heads, nothing shared with the package under test."""

import math

import numpy as np

CAUSAL_NONE, TOP_LEFT, BOTTOM_RIGHT = 0, 1, 2


_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_U32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """Random123's Philox4x32-10 of four counter words (numpy uint64 arrays
    or ints holding 32-bit values) under two key words."""
    c = [np.asarray(x, dtype=np.uint64) for x in counter]
    k0, k1 = (np.uint64(x) for x in key)
    for r in range(10):
        p0 = np.uint64(_M0) * c[0]
        p1 = np.uint64(_M1) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(_U32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(_U32)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + np.uint64(_W0)) & np.uint64(_U32)
        k1 = (k1 + np.uint64(_W1)) & np.uint64(_U32)
    return c


def dropout_scale(n, hq, tq, tk, p, seed, offset=0, compute=np.float32):
    """Z · 1/(1 - p) of docs/SEMANTICS.md's dropout, [N, Hq, Tq, Tk]: element
    (b, h, i, j) kept iff word j mod 4 of Philox4x32-10, key (lo, hi of the
    seed), counter (j / 4, i, lo, hi of offset + b·Hq + h), is at least
    floor(p · 2^32); 1/(1 - p) computed in the call's compute type."""
    threshold = math.floor(p * 2.0**32)
    one = compute(1.0)
    keep = np.float64(one / (one - compute(p)))
    res = np.zeros((n, hq, tq, tk))
    j = np.arange(tk, dtype=np.uint64)
    i = np.arange(tq, dtype=np.uint64)[:, None]
    for b in range(n):
        for h in range(hq):
            stream = (offset + b * hq + h) % 2**64
            words = philox4x32_10(
                (np.broadcast_to(j // np.uint64(4), (tq, tk)), np.broadcast_to(i, (tq, tk)), stream & _U32, stream >> 32),
                (seed & _U32, seed >> 32),
            )
            r = np.choose((j % np.uint64(4)).astype(np.int64), words)
            res[b, h] = np.where(r >= threshold, keep, 0.0)
    return res


def attention(
    q,
    k,
    v,
    *,
    mask=None,
    mask_allows=False,
    bias=None,
    causal=CAUSAL_NONE,
    scale=None,
    softcap=None,
    kv_lens=None,
    window=None,
    alibi=None,
    sinks=None,
    dropout=None,
    empty_rows_zero=False,
):
    """Attention of [N, Hq, Tq, Dk] q over [N|1, Hkv, Tk, D] k and v
    (dropout: dropout_scale's array, applied to the weights that multiply v;
    weights is then the dropped and scaled one, lse and the diagnostics
    those of the undropped softmax).
    Returns a dict: out, weights, lse, max_weight, entropy, and the logits
    at the three stages (scaled, capped, masked); None for a fully masked
    row under the error policy (key "empty" lists such rows)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    n, hq, tq, dk = q.shape
    hkv, tk, dv = k.shape[1], k.shape[2], v.shape[3]
    group = hq // hkv
    c = 1 / math.sqrt(dk) if scale is None else scale
    res = {
        "out": np.zeros((n, hq, tq, dv)),
        "weights": np.zeros((n, hq, tq, tk)),
        "lse": np.zeros((n, hq, tq)),
        "max_weight": np.zeros((n, hq, tq)),
        "entropy": np.zeros((n, hq, tq)),
        "scaled": np.zeros((n, hq, tq, tk)),
        "capped": np.zeros((n, hq, tq, tk)),
        "masked": np.zeros((n, hq, tq, tk)),
        "empty": [],
    }
    maskb = None if mask is None else np.broadcast_to(np.asarray(mask) != 0, (n, hq, tq, tk))
    biasb = None if bias is None else np.broadcast_to(np.asarray(bias, dtype=np.float64), (n, hq, tq, tk))
    for b in range(n):
        length = tk if kv_lens is None else int(kv_lens[b])
        kb = k[b if k.shape[0] > 1 else 0]
        vb = v[b if v.shape[0] > 1 else 0]
        for h in range(hq):
            s = c * (q[b, h] @ kb[h // group].T)
            res["scaled"][b, h] = s
            if softcap:
                s = softcap * np.tanh(s / softcap)
            res["capped"][b, h] = s
            z = s.copy()
            if biasb is not None:
                z = z + biasb[b, h]
            for i in range(tq):
                d = i if causal == TOP_LEFT else i + (length - tq)
                for j in range(tk):
                    allowed = j < length
                    if maskb is not None:
                        allowed &= (not maskb[b, h, i, j]) if not mask_allows else bool(maskb[b, h, i, j])
                    if causal and j > d:
                        allowed = False
                    if window is not None:
                        left, right = window
                        if left != -1 and j - d < -left:
                            allowed = False
                        if right != -1 and j - d > right:
                            allowed = False
                    if alibi is not None:
                        z[i, j] -= alibi[h] * abs(j - d)
                    if not allowed:
                        z[i, j] = -np.inf
            res["masked"][b, h] = z
            for i in range(tq):
                row = z[i]
                sigma = None if sinks is None else sinks[h]
                finite = np.isfinite(row)
                if not finite.any() and sigma is None:
                    res["empty"].append((b, h, i))
                    res["lse"][b, h, i] = -np.inf
                    continue
                m = max(row[finite].max() if finite.any() else -np.inf, -np.inf if sigma is None else sigma)
                p = np.where(finite, np.exp(np.where(finite, row, 0) - m), 0.0)
                denom = p.sum() + (0.0 if sigma is None else math.exp(sigma - m))
                w = p / denom
                lse = m + math.log(denom)
                wd = w if dropout is None else w * dropout[b, h, i]
                res["weights"][b, h, i] = wd
                res["lse"][b, h, i] = lse
                res["out"][b, h, i] = wd @ vb[h // group]
                ps = 0.0 if sigma is None else math.exp(sigma - lse)
                res["max_weight"][b, h, i] = max(w.max(), ps)
                ent = lse - (w[finite] * row[finite]).sum() - (0.0 if sigma is None else ps * sigma)
                res["entropy"][b, h, i] = ent
    if res["empty"] and not empty_rows_zero:
        return None
    return res


def attention_grads(q, k, v, dout, *, bias=None, sinks=None, scale=None, softcap=None, dropout=None, **kw):
    """dq, dk, dv (summed over the N a broadcast k/v covers, kept [N|1]),
    dbias (full [N, Hq, Tq, Tk]) and dsinks of the loss <dout, out>,
    from the softmax's derivative."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    fwd = attention(q, k, v, bias=bias, sinks=sinks, scale=scale, softcap=softcap, dropout=dropout, **kw)
    n, hq, tq, dk = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    c = 1 / math.sqrt(dk) if scale is None else scale
    dq = np.zeros_like(q)
    dkk = np.zeros_like(k)
    dvv = np.zeros_like(v)
    dbias = np.zeros((n, hq, tq, k.shape[2]))
    dsinks = np.zeros(hq)
    for b in range(n):
        kb = b if k.shape[0] > 1 else 0
        vb = b if v.shape[0] > 1 else 0
        for h in range(hq):
            g = h // group
            zc = 1.0 if dropout is None else dropout[b, h]
            pd = fwd["weights"][b, h]  # the weights that multiplied v
            o = fwd["out"][b, h]
            do = dout[b, h]
            dvv[vb, g] += pd.T @ do
            dp = zc * (do @ v[vb, g].T)  # through the dropout, to p
            dsum = (do * o).sum(axis=1, keepdims=True)
            p = pd if dropout is None else np.exp(fwd["masked"][b, h] - fwd["lse"][b, h][:, None])
            dz = p * (dp - dsum)
            dbias[b, h] = dz
            ds = dz
            if softcap:
                u = c * (q[b, h] @ k[kb, g].T)
                ds = dz * (1 - np.tanh(u / softcap) ** 2)
            dq[b, h] = c * ds @ k[kb, g]
            dkk[kb, g] += c * ds.T @ q[b, h]
            if sinks is not None:
                ps = np.exp(sinks[h] - fwd["lse"][b, h])
                dsinks[h] += -(ps * dsum[:, 0]).sum()
    return dict(dq=dq, dk=dkk, dv=dvv, dbias=dbias, dsinks=dsinks, fwd=fwd)


def merge(outs, lses):
    lses = np.stack([np.asarray(s, dtype=np.float64) for s in lses])
    outs = np.stack([np.asarray(o, dtype=np.float64) for o in outs])
    m = lses.max(axis=0)
    lse = m + np.log(np.exp(lses - m).sum(axis=0))
    w = np.exp(lses - lse)
    return (w[..., None] * outs).sum(axis=0), lse


def sinusoidal(tokens, dim, offset=0, base=10000.0):
    t = np.zeros((tokens, dim))
    for row in range(tokens):
        pos = offset + row
        for col in range(dim):
            r = col // 2
            angle = pos / base ** (2 * r / dim)
            t[row, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return t


def rope(x, positions=None, interleaved=False, base=10000.0, rotary_dim=0):
    """RoPE on [N, H, T, D] x: the pairs (r, r + rd/2) or (2r, 2r + 1)."""
    x = np.array(x, dtype=np.float64)
    n, h, t, d = x.shape
    rd = rotary_dim or d
    out = x.copy()
    for b in range(n):
        for tok in range(t):
            pos = tok if positions is None else positions[b * t + tok]
            for r in range(rd // 2):
                theta = pos * base ** (-2 * r / rd)
                i, j = (2 * r, 2 * r + 1) if interleaved else (r, r + rd // 2)
                a, bb = x[b, :, tok, i], x[b, :, tok, j]
                out[b, :, tok, i] = a * math.cos(theta) - bb * math.sin(theta)
                out[b, :, tok, j] = a * math.sin(theta) + bb * math.cos(theta)
    return out


def alibi_slopes(heads, max_bias=8.0):
    n = 2 ** int(math.floor(math.log2(heads)))
    s = [2 ** (-max_bias * (h + 1) / n) for h in range(n)]
    s += [2 ** (-max_bias * (2 * (h - n) + 1) / (2 * n)) for h in range(n, heads)]
    return np.array(s)


def mha(x_q, w, heads, *, x_kv=None, heads_kv=None, positions=None, causal=CAUSAL_NONE, kv_lens=None, dropout=None):
    """The layer on [N, T, d_model] inputs; w holds w_q .. w_o and b_q .. b_o
    (biases may be absent). positions: None, "sinusoidal", "rope"."""
    x_q = np.asarray(x_q, dtype=np.float64)
    self_attn = x_kv is None
    x_kv = x_q if self_attn else np.asarray(x_kv, dtype=np.float64)
    n, tq, dm = x_q.shape
    tk = x_kv.shape[1]
    hkv = heads_kv or heads
    dk = dm // heads
    if positions == "sinusoidal":
        x_q = x_q + sinusoidal(tq, dm)
        x_kv = x_kv + sinusoidal(tk, dm)

    def proj(x, name):
        y = x @ np.asarray(w["w_" + name], dtype=np.float64)
        b = w.get("b_" + name)
        return y if b is None else y + b

    def heads_of(y, h):
        return y.reshape(n, y.shape[1], h, -1).transpose(0, 2, 1, 3)

    q = heads_of(proj(x_q, "q"), heads)
    k = heads_of(proj(x_kv, "k"), hkv)
    v = heads_of(proj(x_kv, "v"), hkv)
    if positions == "rope":
        q, k = rope(q), rope(k)
    fwd = attention(q, k, v, causal=causal, kv_lens=kv_lens, dropout=dropout)
    o = fwd["out"].transpose(0, 2, 1, 3).reshape(n, tq, -1)
    y = o @ np.asarray(w["w_o"], dtype=np.float64)
    if w.get("b_o") is not None:
        y = y + w["b_o"]
    del dk
    return y


def numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar f() over every entry of x (float64,
    changed in place and restored)."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        up = f()
        x[i] = old - eps
        down = f()
        x[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


def to_bfloat16_bits(x):
    """float32 -> bfloat16 bits, rounding to nearest even (NaN kept NaN)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def from_bfloat16_bits(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)
