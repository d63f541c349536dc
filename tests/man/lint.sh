#!/usr/bin/env bash
# ctest man_pages_lint / mpi_man_pages_lint: every page renders without a
# single warning under groff -man -ww -z (all warnings on, output thrown
# away). Pages are rendered from a directory where man3/ and man1/ lead to
# MANDIR, so an alias's ".so man3/<page>.3" resolves as man(1) resolves it
# in an installed tree.
#
#   lint.sh GROFF MANDIR PAGE...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/man-lib.sh
. "$here/man-lib.sh"

[ $# -ge 3 ] || die "usage: $0 GROFF MANDIR PAGE..."
groff=$1 mandir=$(cd "$2" && pwd)
shift 2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
ln -s "$mandir" "$root/man1"
ln -s "$mandir" "$root/man3"

bad=0
for page in "$@"; do
    name=$(basename "$page")
    case $name in *.1) sec=man1 ;; *) sec=man3 ;; esac
    warnings=$(cd "$root" && "$groff" -man -Tutf8 -ww -z "$sec/$name" 2>&1) || {
        echo "FAIL $name: groff failed"
        bad=1
    }
    if [ -n "$warnings" ]; then
        echo "FAIL $name:"
        printf '%s\n' "$warnings" | sed 's/^/    /'
        bad=1
    else
        echo "ok   $name"
    fi
done
[ $bad -eq 0 ] || die "pages with groff warnings (see above)"
echo "$# pages, no warnings"
