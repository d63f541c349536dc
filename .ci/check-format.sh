#!/usr/bin/env bash
# Formatting check: every tracked *.c and *.h file (git ls-files) must be
# formatted as the repository's .clang-format says, by Debian 12's
# clang-format 14 (package clang-format). Lists the files that deviate and
# exits 1 if any do; exits 2 if the check itself cannot run.
#
#   .ci/check-format.sh          check (CI's first stage after the installs)
#   clang-format -i FILE...      fix (with the same clang-format 14)
#
# Environment: CLANG_FORMAT (default: clang-format), the binary to run; it
# must be version 14, since other versions format differently.
set -euo pipefail

cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
style=file:$PWD/.clang-format

if ! command -v "$cf" >/dev/null 2>&1; then
    echo "check-format: $cf not found (Debian 12: apt-get install clang-format)" >&2
    exit 2
fi
version=$("$cf" --version)
if [[ ! $version =~ version\ 14\. ]]; then
    echo "check-format: need clang-format 14 (Debian 12), $cf is: $version" >&2
    exit 2
fi
[ -f .clang-format ] || {
    echo "check-format: no .clang-format in $PWD" >&2
    exit 2
}

files=()
while IFS= read -r -d '' f; do
    # A tracked file deleted in the work tree has nothing to check.
    [ -f "$f" ] && files+=("$f")
done < <(git ls-files -z -- '*.c' '*.h')
if [ ${#files[@]} -eq 0 ]; then
    echo "check-format: git ls-files found no *.c or *.h file" >&2
    exit 2
fi

bad=()
for f in "${files[@]}"; do
    # Captured, not piped: clang-format's status is what counts.
    if out=$("$cf" --style="$style" --dry-run --Werror -- "$f" 2>&1); then
        continue
    fi
    n=$(grep -c -- '-Wclang-format-violations' <<<"$out" || true)
    if [ "$n" -eq 0 ]; then
        # Failed without a formatting diagnostic: the check is broken.
        echo "check-format: $cf failed on $f:" >&2
        echo "$out" >&2
        exit 2
    fi
    bad+=("$f")
    echo "  $f: $n place(s) differ"
done

if [ ${#bad[@]} -ne 0 ]; then
    echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted" \
        "($version, style $style)."
    echo "Show the differences: $cf --dry-run FILE; fix them: $cf -i FILE"
    exit 1
fi
echo "check-format: all ${#files[@]} *.c and *.h files are formatted ($version)"
