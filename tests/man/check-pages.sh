#!/usr/bin/env bash
# ctest man_pages_exports / mpi_man_pages_exports: every symbol of an
# export list has a section-3 page, docs/man/<symbol>.3, either a page of
# its own or a one-line alias ".so man3/<page>.3" (as libpng, zstd and
# Debian's packages do), and the page it resolves to names the symbol in
# its NAME line and shows its prototype, exactly as the header declares
# it, in its SYNOPSIS; that page has the sections of a section-3 page
# (NAME, LIBRARY, SYNOPSIS, DESCRIPTION, RETURN VALUE, ERRORS, NOTES,
# EXAMPLE, SEE ALSO) in that order, others (ENVIRONMENT) where
# man-pages(7) puts them. With OVERVIEW (libsdpa.3, libsdpa_mpi.3), that
# page's SYNOPSIS must show every prototype too.
#
#   check-pages.sh EXPORTS HEADER MANDIR [OVERVIEW]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/man-lib.sh
. "$here/man-lib.sh"

[ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: $0 EXPORTS HEADER MANDIR [OVERVIEW]"
exports=$1 header=$2 mandir=$3 overview=${4:-}
[ -f "$exports" ] || die "no $exports"
[ -f "$header" ] || die "no $header"

sections="NAME,LIBRARY,SYNOPSIS,DESCRIPTION,RETURN VALUE,ERRORS,NOTES,EXAMPLE,SEE ALSO,"
bad=0
count=0
while read -r sym; do
    case $sym in '' | '#'*) continue ;; esac
    count=$((count + 1))
    if [ ! -f "$mandir/$sym.3" ]; then
        echo "FAIL $sym: no page $mandir/$sym.3 (a page, or a .so alias)"
        bad=1
        continue
    fi
    first=$(sed -n '1p' "$mandir/$sym.3")
    if [[ $first == ".so "* ]]; then
        [ "$(wc -l <"$mandir/$sym.3")" -eq 1 ] ||
            { echo "FAIL $sym: an alias page is the one line .so man3/<page>.3"; bad=1; }
        [[ $first =~ ^\.so\ man3/[a-z_]+\.3$ ]] ||
            { echo "FAIL $sym: alias line '$first' is not .so man3/<page>.3"; bad=1; }
    fi
    if ! page=$(page_resolve "$mandir" "$sym"); then
        echo "FAIL $sym: $mandir/$sym.3 names a page that does not exist (or an alias)"
        bad=1
        continue
    fi
    got=$(sed -n 's/^\.SH //p' "$page" | tr -d '"' |
        grep -xE 'NAME|LIBRARY|SYNOPSIS|DESCRIPTION|RETURN VALUE|ERRORS|NOTES|EXAMPLE|SEE ALSO' |
        tr '\n' ',')
    if [ "$got" != "$sections" ]; then
        echo "FAIL $sym: $(basename "$page") has the sections '$got', not '$sections'"
        bad=1
    fi
    names=$(page_section "$page" NAME | page_text | normalise)
    names=${names%% - *}
    if ! printf '%s\n' "$names" | tr ',' '\n' | sed 's/^ *//; s/ *$//' |
        grep -qx -- "$sym"; then
        echo "FAIL $sym: not in the NAME line of $(basename "$page") ($names)"
        bad=1
    fi
    proto=$(header_prototype "$header" "$sym")
    if [ -z "$proto" ]; then
        echo "FAIL $sym: no declaration in $header"
        bad=1
        continue
    fi
    synopsis=$(page_section "$page" SYNOPSIS | page_text | normalise)
    if [[ $synopsis != *"$proto"* ]]; then
        echo "FAIL $sym: the SYNOPSIS of $(basename "$page") lacks the prototype"
        echo "     header:   $proto"
        echo "     synopsis: $synopsis"
        bad=1
        continue
    fi
    if [ -n "$overview" ]; then
        over=$(page_section "$mandir/$overview" SYNOPSIS | page_text | normalise)
        if [[ $over != *"$proto"* ]]; then
            echo "FAIL $sym: the SYNOPSIS of $overview lacks the prototype"
            bad=1
            continue
        fi
    fi
    echo "ok   $sym: $(basename "$page")"
done <"$exports"
[ "$count" -gt 0 ] || die "no symbol in $exports"
[ $bad -eq 0 ] || die "pages missing or incomplete (docs/man/, see above)"
echo "all $count exported functions have a page"
