#!/usr/bin/env bash
# The documentation check (ctest docs_check, label docs):
#
#   1. README.md has at most 300 lines: it is the short introduction, the
#      manual is docs/ (docs/README.md indexes it).
#   2. Every relative markdown link in README.md, CHANGELOG.md, HACKING.md,
#      docs/*.md, tests/fuzz/README.md, mpi/**/*.md and src/**/*.md points
#      to a file that exists,
#      and a #anchor to a heading of that markdown file (GitHub's rule:
#      lower case, punctuation dropped, spaces to hyphens, -1, -2 ... for
#      repeats). Links inside code blocks and code spans are not links.
#   3. Every repository path that shipped text names exists: in README.md,
#      HACKING.md, src/**/*.md, docs/, include/, tools/, tests/, bench/,
#      examples/ and mpi/ (sources, comments, CMake and shell files, pages;
#      the comments of src/ are not scanned), a token that starts with a
#      top-level folder (src/ include/ docs/ tests/ tools/ bench/ examples/
#      mpi/ cmake/ pkgconfig/ .ci/) and ends with a file extension or a
#      slash, e.g. src/forward/plan.c, docs/ABI.md, tests/abi/, found from the top
#      or from the naming file's folder or one of its parents. Tokens that
#      follow another path component or a shell variable
#      (build/bench/sdpa-bench, ../tests/x.c, $src/cmake/libsdpa.map) are
#      not repository paths and are left alone (links: the link check).
#
# Usage: check-docs.sh [SOURCE_DIR] (default: the repository this script is
# in). Needs only bash, coreutils, find, grep and a POSIX awk (mawk or gawk),
# so that it runs on a minimal Debian. Prints every problem, exits 1 if any.
set -euo pipefail
export LC_ALL=C

root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
status=0
problem() {
    echo "check-docs: $*" >&2
    status=1
}

# --- 1. README.md's length ------------------------------------------------
max_readme=300
lines=$(wc -l <README.md)
if [ "$lines" -gt "$max_readme" ]; then
    problem "README.md has $lines lines, more than $max_readme: move the" \
        "details into the manual (docs/)"
fi

# --- 2. Markdown links ----------------------------------------------------
# Prints "line<TAB>target" for each inline link [text](target) outside
# fenced code blocks and code spans. A code span may run over a line break
# within a paragraph; a blank line ends it.
md_links() {
    awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    /^[ \t]*$/ { code = 0; next }
    {
        s = $0; out = ""
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (c == "`") { code = !code; out = out " "; continue }
            out = out (code ? " " : c)
        }
        while ((p = index(out, "](")) > 0) {
            rest = substr(out, p + 2)
            q = index(rest, ")")
            if (q == 0) break
            t = substr(rest, 1, q - 1)
            sub(/^[ \t]*</, "", t); sub(/>[ \t]*$/, "", t)
            sub(/[ \t]+".*"$/, "", t)
            print NR "\t" t
            out = substr(rest, q + 1)
        }
    }' "$1"
}

# Prints the anchors of a markdown file's headings, one a line, as GitHub
# makes them (ASCII letters, digits, "-" and "_" kept; every other byte,
# non-ASCII ones included, dropped), and of <a name="..."> / id="..." tags.
md_anchors() {
    awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    /^#+[ \t]/ {
        h = $0
        sub(/^#+[ \t]+/, "", h); sub(/[ \t]+#+[ \t]*$/, "", h)
        sub(/[ \t]+$/, "", h)
        h = tolower(h)
        a = ""
        for (i = 1; i <= length(h); i++) {
            c = substr(h, i, 1)
            if (c ~ /[a-z0-9_-]/) a = a c
            else if (c == " ") a = a "-"
        }
        if (a in seen) { n = ++seen[a]; print a "-" n }
        else { seen[a] = 0; print a }
    }
    {
        s = $0
        while (match(s, /(name|id)="[^"]*"/)) {
            t = substr(s, RSTART, RLENGTH)
            sub(/^[a-z]*="/, "", t); sub(/"$/, "", t)
            print t
            s = substr(s, RSTART + RLENGTH)
        }
    }' "$1"
}

md_files=(README.md CHANGELOG.md)
[ -f HACKING.md ] && md_files+=(HACKING.md)
md_files+=(docs/*.md tests/fuzz/README.md)
while IFS= read -r f; do
    md_files+=("$f")
done < <(find mpi src -name '*.md' -type f | sort)

for f in "${md_files[@]}"; do
    [ -f "$f" ] || continue
    dir=$(dirname "$f")
    while IFS=$'\t' read -r line target; do
        case $target in
        "" | [a-zA-Z]*:*) continue ;; # empty, or a URL (https:, mailto:)
        esac
        path=${target%%#*}
        anchor=
        [ "$path" != "$target" ] && anchor=${target#*#}
        if [ -z "$path" ]; then
            dest=$f
        else
            dest=$dir/$path
            if [ ! -e "$dest" ]; then
                problem "$f:$line: link to $target: no file $path"
                continue
            fi
        fi
        [ -n "$anchor" ] || continue
        case $dest in
        *.md) ;;
        *) continue ;;
        esac
        if [ -d "$dest" ]; then
            problem "$f:$line: link to $target: an anchor in a directory"
        elif ! md_anchors "$dest" | grep -qxF -- "$anchor"; then
            problem "$f:$line: link to $target: no heading #$anchor in $dest"
        fi
    done < <(md_links "$f")
done

# --- 3. Repository paths named in shipped text ----------------------------
top='src|include|docs|tests|tools|bench|examples|mpi|cmake|pkgconfig|\.ci'
shipped=()
while IFS= read -r f; do
    shipped+=("$f")
done < <(
    {
        echo README.md
        [ -f HACKING.md ] && echo HACKING.md
        find src -name '*.md' -type f
        find docs include tools tests bench examples mpi -type f \
            \( -name '*.c' -o -name '*.h' -o -name '*.md' -o -name '*.1' \
            -o -name '*.txt' -o -name '*.cmake' -o -name '*.sh' \
            -o -name '*.in' -o -name '*.map' \) \
            -not -path 'tests/fuzz/corpus/*'
    } | sort
)

while IFS= read -r hit; do
    f=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    tok=${rest#*:}
    case $tok in # drop the boundary byte before the folder's name, if any
    [A-Za-z.]*) ;;
    *) tok=${tok:1} ;;
    esac
    while [ "${tok%.}" != "$tok" ]; do tok=${tok%.}; done # sentence's end
    case $tok in
    */) ;;
    *.[A-Za-z0-9]*)
        ext=${tok##*.}
        case $ext in
        */* | *[!A-Za-z0-9]*) continue ;;
        esac
        ;;
    *) continue ;;
    esac
    # From the top, or from the file's folder or one of its parents (the
    # sources of mpi/ name mpi/src/... as src/... in mpi/CMakeLists.txt).
    d=$(dirname "$f")
    found=0
    while :; do
        if [ -e "$d/$tok" ]; then
            found=1
            break
        fi
        [ "$d" = . ] && break
        d=$(dirname "$d")
    done
    [ "$found" -eq 1 ] || problem "$f:$line: names $tok, which does not exist"
done < <(grep -noE "(^|[^A-Za-z0-9_./+\$-])($top)/[A-Za-z0-9_./+-]*" \
    "${shipped[@]}" || true)

if [ "$status" -eq 0 ]; then
    echo "check-docs: README.md $lines lines; ${#md_files[@]} markdown files'" \
        "links and ${#shipped[@]} files' paths are fine"
fi
exit "$status"
