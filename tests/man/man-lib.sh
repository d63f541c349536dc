# shellcheck shell=bash
# Shared helpers of the tests/man scripts (sourced, not run).
#
#   page_resolve DIR NAME   the file NAME's page resolves to: DIR/NAME.3, or
#                           the page its ".so man3/X.3" line names
#   page_section FILE SEC   the lines of section SEC (between ".SH SEC" and
#                           the next .SH), as written
#   page_text               stdin to plain text: request lines reduced to
#                           their arguments (B/I joined with spaces, the
#                           alternating BI, BR, RB, IR, RI, IB without),
#                           font and other escapes removed
#   page_example FILE N     the N-th .EX/.EE block of the EXAMPLE section,
#                           unescaped back to the C (or output) it shows

die() {
    echo "$0: $*" >&2
    exit 1
}

page_resolve() {
    local dir=$1 name=$2 file first
    file=$dir/$name.3
    [ -f "$file" ] || return 1
    first=$(sed -n '1p' "$file")
    case $first in
    ".so man3/"*)
        file=$dir/${first#.so man3/}
        [ -f "$file" ] || return 1
        # an alias names a page, never another alias
        case $(sed -n '1p' "$file") in ".so "*) return 1 ;; esac
        ;;
    esac
    printf '%s\n' "$file"
}

page_section() {
    awk -v sec="$2" '
        /^\.SH / {
            name = substr($0, 5)
            gsub(/"/, "", name)
            on = (name == sec)
            next
        }
        on { print }
    ' "$1"
}

page_text() {
    awk '
        # split the arguments of a request line, honouring "quoted" ones
        function args(s, out,    n, c, i, cur, q, started) {
            n = 0; cur = ""; q = 0; started = 0
            for (i = 1; i <= length(s); i++) {
                c = substr(s, i, 1)
                if (q) {
                    if (c == "\"") { q = 0 } else { cur = cur c }
                } else if (c == "\"") {
                    q = 1; started = 1
                } else if (c == " " || c == "\t") {
                    if (started || cur != "") { out[++n] = cur; cur = ""; started = 0 }
                } else {
                    cur = cur c; started = 1
                }
            }
            if (started || cur != "") out[++n] = cur
            return n
        }
        /^\.\\"/ { next }
        /^\.[A-Za-z]+/ {
            mac = $1; rest = substr($0, length($1) + 2)
            n = args(rest, a)
            if (mac == ".B" || mac == ".I" || mac == ".SM" || mac == ".SB") {
                line = ""
                for (i = 1; i <= n; i++) line = line (i > 1 ? " " : "") a[i]
                print line
            } else if (mac ~ /^\.(BI|IB|BR|RB|IR|RI)$/) {
                line = ""
                for (i = 1; i <= n; i++) line = line a[i]
                print line
            } else if (mac == ".TP" || mac == ".PP" || mac == ".SS" ||
                       mac == ".IP" || mac == ".br" || mac == ".sp") {
                if (mac == ".SS" || mac == ".IP") {
                    line = ""
                    for (i = 1; i <= n; i++) line = line (i > 1 ? " " : "") a[i]
                    print line
                } else print ""
            }
            next
        }
        { print }
    ' | sed -e 's/\\f[BIRP]//g' -e 's/\\f(CW//g' -e 's/\\-/-/g' \
        -e 's/\\&//g' -e 's/\\c$//' -e 's/\\(aq/'"'"'/g' -e 's/\\(dq/"/g' \
        -e 's/\\e/\\/g'
}

page_example() {
    page_section "$1" EXAMPLE | awk -v want="$2" '
        /^\.EX/ { n++; on = (n == want); next }
        /^\.EE/ { on = 0; next }
        on { print }
    ' | sed -e 's/\\-/-/g' -e 's/\\&//g' -e 's/\\(aq/'"'"'/g' \
        -e 's/\\(dq/"/g' -e 's/\\e/\\/g'
}

# The prototype of function NAME as HEADER declares it, on one line with
# single spaces, without the export macro.
header_prototype() {
    awk -v name="$2" '
        /^(SDPA_API|SDPA_MPI_API) / { decl = ""; on = 1 }
        on {
            decl = decl " " $0
            if ($0 ~ /;/) {
                on = 0
                if (decl ~ ("[ *]" name "\\(")) { print decl; exit }
            }
        }
    ' "$1" | normalise
}

# One line, single spaces, no space inside parentheses or before , ; )
normalise() {
    tr '\n\t' '  ' | sed -e 's/SDPA_MPI_API //; s/SDPA_API //' \
        -e 's/  */ /g' -e 's/^ //; s/ $//' -e 's/( /(/g; s/ )/)/g' \
        -e 's/ ,/,/g; s/ ;/;/g'
}
