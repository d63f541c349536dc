"""What several test files share: random problems and the two-token example."""

import numpy as np


def random_qkv(rng, n=2, hq=4, hkv=2, tq=5, tk=7, dk=8, dv=6, dtype=np.float64):
    q = rng.standard_normal((n, hq, tq, dk)).astype(dtype)
    k = rng.standard_normal((n, hkv, tk, dk)).astype(dtype)
    v = rng.standard_normal((n, hkv, tk, dv)).astype(dtype)
    return q, k, v


# The two-token example of docs/SEMANTICS.md ("Reference values").
Q2 = np.array([[1.0, 0.0], [0.0, 1.0]])
K2 = np.array([[1.0, 1.0], [2.0, 0.0]])
V2 = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


class NumpyAllocator:
    """A caller's allocator for sdpa.Context(allocator=...): numpy buffers,
    counted; with refuse set, every request fails (returns 0)."""

    def __init__(self):
        self.live = {}
        self.calls = 0
        self.refuse = False

    def alloc(self, size, alignment):
        self.calls += 1
        if self.refuse:
            return 0
        buf = np.empty(size + alignment, dtype=np.uint8)
        address = buf.ctypes.data + (-buf.ctypes.data) % alignment
        self.live[address] = buf
        return address

    def free(self, address, size):
        del self.live[address]
