#!/usr/bin/env bash
# ctest symbols_findable: every function and object the library's archive
# defines, global or file-local, is spelled out somewhere under src/, so
# that a name seen in perf, gdb or a crash report (sdpa_online_softmax_f32,
# sdpa_rows_avx2_exp_sum_f64, ...) is found by grep or ctags although the
# templates paste it together (template.h's NAME(), the row kernels'
# per-ISA names). The template instantiations list what they produce.
#
#   check-findable.sh ARCHIVE SRCDIR
set -euo pipefail

archive=$1 src=$2

# Defined text, data, read-only and bss symbols, local or global; compiler
# clones (foo.cold, foo.isra.0, foo.constprop.0, foo.part.0) and function
# statics (gcc: names.0, clang: func.names) are reported under their source
# name (however many of them are stacked); .L* labels and compiler-made
# tables (names starting with a dot, clang's reltable.*, gcc's switch
# tables CSWTCH.*) are not names anyone wrote.
symbols=$(nm --defined-only "$archive" | awk '
    NF == 3 && $2 ~ /^[TtDdRrBb]$/ && $3 !~ /^(\.|reltable\.|CSWTCH\.)/ { print $3 }' |
    sed -E -e ':clone' \
        -e 's/\.(cold|isra|constprop|part|lto_priv)(\.[0-9]+)*$//' \
        -e 't clone' \
        -e 's/\.[0-9]+$//' -e 's/^[A-Za-z0-9_]+\.//' | sort -u)
[ -n "$symbols" ] || { echo "FAIL: no symbols in $archive" >&2; exit 1; }

sources=$(cat "$src"/src/*.c "$src"/src/*.h)
missing=()
count=0
for name in $symbols; do
    count=$((count + 1))
    if ! grep -qwF -- "$name" <<<"$sources"; then
        missing+=("$name")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL: ${#missing[@]} of $count symbols of $archive appear nowhere" \
        "under src/ (name them where the template is instantiated):" >&2
    printf '  %s\n' "${missing[@]}" >&2
    exit 1
fi
echo "all $count symbols of $(basename "$archive") are spelled out in src/"
