"""python3 -m sdpa demo: the two-token example of docs/SEMANTICS.md;
python3 -m sdpa version: the package's and the library's versions."""

import sys

import numpy as np

import sdpa

Q = np.array([[1, 0], [0, 1]], dtype=np.float32)
K = np.array([[1, 1], [2, 0]], dtype=np.float32)
V = np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32)


def _row(values):
    return "[" + "  ".join("%.4f" % x for x in values) + "]"


def _pair(weights, out):
    print("    %-20s %s" % ("weights A", "output O"))
    for a, o in zip(weights, out):
        print("    %-21s%s" % (_row(a), _row(o)))


def demo():
    print("libsdpa %s (Python): the two-token example of docs/SEMANTICS.md\n" % sdpa.library_version()[1])
    print("  Q = [[1, 0], [0, 1]]   K = [[1, 1], [2, 0]]   V = [[1, 0, 0], [0, 1, 0]]")
    print("  dk = 2, dv = 3, T = 2, scale = 1/sqrt(dk) = %.4f" % (1 / np.sqrt(2)))
    print("  O = softmax(Q K^T * scale + mask) V\n")
    print("  unmasked (causal=False):")
    out, weights = sdpa.attention(Q, K, V, weights=True)
    _pair(weights, out)
    print("\n  causal (causal=True, i.e. mask M = [[0, 1], [0, 0]]):")
    out, weights = sdpa.attention(Q, K, V, causal=True, weights=True)
    _pair(weights, out)
    print("\n  Every row of A sums to 1; forbidden keys get weight exactly 0.")


def version():
    number, text = sdpa.library_version()
    print("sdpa (Python) %s" % sdpa.__version__)
    print("library %s (%d): %s (%s)" % (text, number, sdpa.library_path, sdpa.library_found_by))


COMMANDS = {"demo": demo, "version": version}


def main(argv):
    if len(argv) != 1 or argv[0] not in COMMANDS:
        print("usage: python3 -m sdpa demo|version", file=sys.stderr)
        return 2
    COMMANDS[argv[0]]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
