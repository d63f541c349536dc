"""ctest python_docs: runs the ```python blocks of the pages given, each
page's blocks in order in one namespace, as a reader would paste them. A
block that raises (an assert of the page included) fails the test; a page
without a block fails too, so the check cannot pass by finding nothing.

Usage: run_doc_blocks.py PAGE.md [PAGE.md ...]"""

import re
import sys


def blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def main(pages):
    for page in pages:
        with open(page) as f:
            found = blocks(f.read())
        if not found:
            print("%s: no ```python block" % page, file=sys.stderr)
            return 1
        namespace = {"__name__": "__doc__"}
        for i, code in enumerate(found, 1):
            exec(compile(code, "%s, python block %d" % (page, i), "exec"), namespace)
        print("%s: %d python blocks ran" % (page, len(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
