#!/usr/bin/env bash
# ctest symbols_findable: every function and object the library's archive
# defines, global or file-local, can be traced to the line of src/ that
# makes it, so that a name seen in perf, gdb or a crash report
# (sdpa_online_softmax_f32, sdpa_rows_avx2_exp_sum_f64, ...) is found with
# grep although the templates paste names together. HACKING.md states the
# rule this script applies; a symbol is findable when
#
#   1. it is spelled out under src/ as a word, or
#   2. it is STEM_f32 or STEM_f64 and a template writes NAME(STEM) (or a
#      declaration macro STEM_##SUF), or
#   3. it is PREFIX_BASE_f32 or _f64 (or PREFIX_f32, _f64: the kernel
#      table, NAME(ROW_KERNELS)), an ISA file says
#      `#define ROW_KERNELS PREFIX` and rows_simd_impl.h writes
#      KERNEL_NAME(BASE).
#
# So no list of generated names is kept by hand: a template that pastes a
# name some other way fails here until the rule (and HACKING.md) covers it.
#
#   check-findable.sh ARCHIVE SRCDIR
set -euo pipefail

archive=$1 src=$2

# Defined text, data, read-only and bss symbols, local or global; compiler
# clones (foo.cold, foo.isra.0, foo.constprop.0, foo.part.0) and function
# statics (gcc: names.0, clang: func.names) are reported under their source
# name (however many of them are stacked); .L* labels and compiler-made
# tables (names starting with a dot, clang's reltable.*, gcc's switch
# tables CSWTCH.*) and Arm's ELF mapping symbols ($x, $d: where code and
# data start, on aarch64) are not names anyone wrote; names starting with
# two underscores are reserved for the implementation (C11 7.1.3), so they
# come from system headers (<cpuid.h>'s static __get_cpuid_max, out of
# line in Debug builds).
symbols=$(nm --defined-only "$archive" | awk '
    NF == 3 && $2 ~ /^[TtDdRrBb]$/ && $3 !~ /^(\.|\$|reltable\.|CSWTCH\.|__)/ { print $3 }' |
    sed -E -e ':clone' \
        -e 's/\.(cold|isra|constprop|part|lto_priv)(\.[0-9]+)*$//' \
        -e 't clone' \
        -e 's/\.[0-9]+$//' -e 's/^[A-Za-z0-9_]+\.//' | sort -u)
[ -n "$symbols" ] || { echo "FAIL: no symbols in $archive" >&2; exit 1; }

sources=$(find "$src/src" -name '*.[ch]' -exec cat {} +)
# Rule 3's prefixes: the values of ROW_KERNELS.
prefixes=$(sed -nE 's/^#define ROW_KERNELS ([A-Za-z0-9_]+).*/\1/p' <<<"$sources" |
    sort -u)

spelled() { grep -qwF -- "$1" <<<"$sources"; }
pasted() { # STEM: NAME(STEM), KERNEL_NAME(STEM) or STEM_##SUF in a template
    grep -qE -- "(\bNAME|KERNEL_NAME)\( *$1 *\)|\b$1_##SUF\b" <<<"$sources"
}

missing=()
count=0
for name in $symbols; do
    count=$((count + 1))
    spelled "$name" && continue
    if [[ $name =~ ^(.+)_f(32|64)$ ]]; then
        stem=${BASH_REMATCH[1]}
        pasted "$stem" && continue
        found=false
        for prefix in $prefixes; do
            if { [[ $stem == "$prefix" ]] && pasted ROW_KERNELS; } ||
                { [[ $stem == "${prefix}"_* ]] && pasted "${stem#"${prefix}"_}"; }; then
                found=true
                break
            fi
        done
        $found && continue
    fi
    missing+=("$name")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL: ${#missing[@]} of $count symbols of $archive cannot be traced" \
        "to src/ by HACKING.md's naming rule (spell them, or paste them with" \
        "NAME()/KERNEL_NAME()):" >&2
    printf '  %s\n' "${missing[@]}" >&2
    exit 1
fi
echo "all $count symbols of $(basename "$archive") trace to src/" \
    "(spelled, NAME(), or ROW_KERNELS + KERNEL_NAME())"
