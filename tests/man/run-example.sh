#!/usr/bin/env bash
# ctest man_example_<page> / mpi_man_example_<page>: the program of a
# page's EXAMPLE section (its first .EX/.EE block) is extracted, compiled
# against the built library and run; it must exit with 0, and when the
# section has a second .EX/.EE block (after "It prints:"), the program's
# standard output must be exactly that block.
#
#   run-example.sh PAGE WORKDIR
# Environment: CC, CFLAGS (the project's warning flags), CPPFLAGS (-I of
# the headers), LIBS (the libraries, with their rpath), and for MPI pages
# RUN (the launcher and its flags, e.g. "mpiexec --oversubscribe -n 2").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/man-lib.sh
. "$here/man-lib.sh"

[ $# -eq 2 ] || die "usage: $0 PAGE WORKDIR"
page=$1 work=$2
name=$(basename "$page")
name=${name%.*}
mkdir -p "$work"
src=$work/$name.c exe=$work/$name want=$work/$name.expected got=$work/$name.out

page_example "$page" 1 >"$src"
[ -s "$src" ] || die "$page: no .EX/.EE program in its EXAMPLE section"
grep -q 'int main(' "$src" || die "$page: the EXAMPLE program has no main"
page_example "$page" 2 >"$want"

echo "== $src"
# shellcheck disable=SC2086 # the flag lists are word lists
${CC:-cc} ${CFLAGS:-} ${CPPFLAGS:-} "$src" -o "$exe" ${LIBS:-} ||
    die "$page: the EXAMPLE program does not compile"
status=0
# shellcheck disable=SC2086
${RUN:-} "$exe" >"$got" || status=$?
cat "$got"
[ $status -eq 0 ] || die "$page: the EXAMPLE program exited with $status"
if [ -s "$want" ]; then
    if ! diff -u "$want" "$got"; then
        die "$page: the EXAMPLE program's output is not what the page shows"
    fi
    echo "output as the page shows it"
fi
echo "ok: $name"
