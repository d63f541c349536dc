#!/usr/bin/env bash
# Fresh-machine stage: README's quick start on a pristine Debian 12.
#
#   1. debootstrap a Debian 12 (bookworm) minbase root from the mirror this
#      machine's apt uses (the suite bookworm in its sources; the security
#      suite too when configured),
#   2. copy `git archive HEAD` of this repository to /root/libsdpa in it
#      (committed files only: uncommitted changes are not tested here),
#   3. mount /proc and /dev, then in a chroot, as root, with a clean
#      environment: ./build.sh demo, then ./build.sh test
#      (build.sh installs the packages it needs with apt-get, as on a
#      fresh machine),
#   4. unmount (a trap does it on every exit) and delete the root.
#
# The root lives in a directory that this run creates (mktemp -d under
# FRESH_DEBIAN_TMP, default $TMPDIR or /var/tmp) and deletes at the end:
# the two build.sh commands share it, no later run ever reuses it.
# Needs root, debootstrap and git. Environment: FRESH_DEBIAN_MIRROR
# overrides the mirror (e.g. http://deb.debian.org/debian).
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD
suite=bookworm

say() { echo "fresh-debian: $*"; }
die() {
    echo "fresh-debian: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, mount, chroot)"
command -v debootstrap >/dev/null 2>&1 ||
    die "debootstrap not found (apt-get install debootstrap)"
command -v git >/dev/null 2>&1 || die "git not found"

# The mirror: the one this machine's apt sources use for the suite (both
# the one-line and the deb822 formats, through apt itself).
# shellcheck disable=SC2016 # $(SITE) is apt's field syntax, not the shell's
targets=$(apt-get indextargets --format '$(SITE) $(RELEASE)')
site_of() { # $1 = release; prints the first site that serves it
    awk -v r="$1" '$2 == r { print $1; exit }' <<<"$targets"
}
mirror=${FRESH_DEBIAN_MIRROR:-$(site_of "$suite")}
[ -n "$mirror" ] ||
    die "no apt source on this machine serves '$suite'; set FRESH_DEBIAN_MIRROR"
mirror=${mirror%/}
security=$(site_of "$suite-security")
security=${security%/}

work=$(mktemp -d "${FRESH_DEBIAN_TMP:-${TMPDIR:-/var/tmp}}/libsdpa-fresh.XXXXXX")
root=$work/root
probe() { # $1 = repository URL, $2 = suite; fails with why in $why
    why=
    /usr/lib/apt/apt-helper download-file "$1/dists/$2/InRelease" \
        "$work/InRelease-$2" >"$work/probe.log" 2>&1 && return 0
    # apt says why on the indented line after "Err:".
    why=$(sed -n 's/^  *//p' "$work/probe.log" | tail -n 1)
    [ -n "$why" ] || why=$(tail -n 1 "$work/probe.log")
    return 1
}

mounts_under_work() { # mount points under $work, deepest first
    awk -v w="$work/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo |
        sort -r
}

cleanup() {
    local status=$? m left
    trap - EXIT INT TERM
    # Unmount all that is mounted under the root: our /proc and /dev, and
    # whatever a failed debootstrap may have left (its /proc, /sys).
    while IFS= read -r m; do
        umount -R "$m" 2>/dev/null || umount -R -l "$m" ||
            echo "fresh-debian: could not unmount $m" >&2
    done < <(mounts_under_work)
    left=$(mounts_under_work)
    if [ -n "$left" ]; then
        # Never delete through a mount (/dev of the host!): keep the root.
        echo "fresh-debian: still mounted, $work kept:" >&2
        echo "$left" >&2
        [ "$status" -ne 0 ] || status=1
    else
        rm -rf --one-file-system "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "mirror $mirror${security:+, security $security}; root $root"
# Say plainly when the archive cannot be reached, before anything else.
probe "$mirror" "$suite" ||
    die "cannot reach the Debian archive at $mirror ($why, fetching" \
        "$mirror/dists/$suite/InRelease); this stage needs it"
if [ -n "$security" ]; then
    probe "$security" "$suite-security" ||
        die "cannot reach the Debian security archive at $security ($why," \
            "fetching $security/dists/$suite-security/InRelease);" \
            "this stage needs it"
fi

t0=$SECONDS
say "debootstrap --variant=minbase $suite $mirror"
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    die "debootstrap of $suite from $mirror failed (log above)"
}
t_debootstrap=$((SECONDS - t0))

# apt sources of a fresh install: the release, its updates and security.
{
    echo "deb $mirror $suite main"
    echo "deb $mirror $suite-updates main"
    [ -z "$security" ] || echo "deb $security $suite-security main"
} >"$root/etc/apt/sources.list"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# An apt proxy configured here is needed there too.
proxy=$(apt-config dump)
proxy=$(grep -i '^Acquire::[a-z]*::Proxy' <<<"$proxy" || true)
[ -z "$proxy" ] || echo "$proxy" >"$root/etc/apt/apt.conf.d/01proxy"

mkdir "$root/root/libsdpa"
git -C "$repo" archive --format=tar HEAD | tar -x -C "$root/root/libsdpa"

mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"

in_root() { # a login-like root shell: clean environment, in the checkout
    chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c 'cd /root/libsdpa && "$@"' in-root "$@"
}

t0=$SECONDS
say "=== in the fresh root: ./build.sh demo"
in_root ./build.sh demo || die "./build.sh demo failed on a fresh Debian 12"
t_demo=$((SECONDS - t0))

t0=$SECONDS
say "=== in the fresh root: ./build.sh test"
in_root ./build.sh test || die "./build.sh test failed on a fresh Debian 12"
t_test=$((SECONDS - t0))

say "passed; debootstrap ${t_debootstrap}s, demo ${t_demo}s, test ${t_test}s" \
    "(demo and test include their apt-get installs)"
