#!/usr/bin/env bash
# A Debian trixie chroot with QGIS 3.40's Python API and its providers (OAPIF,
# the OGC API - Features provider, among them), for scripts/test-qgis.sh
# (`make test-qgis`). Made once with debootstrap, outside the repo, in
# $FEATUREPIPE_QGIS_CHROOT (default /var/cache/featurepipe/qgis-trixie; about
# 1.8 GB); later runs find its marker file and do nothing. Needs root
# (debootstrap, chroot, mounts) and Debian's mirror ($FEATUREPIPE_QGIS_MIRROR).
#
#   scripts/qgis-chroot.sh              prepare the chroot (once); print its path
#   scripts/qgis-chroot.sh --rebuild    remove it and make it anew
#   scripts/qgis-chroot.sh run CMD ...  prepare it if needed, then run CMD inside
#                                       (/proc, /sys, /dev mounted for the run and
#                                       unmounted afterwards, whatever happens;
#                                       QT_QPA_PLATFORM=offscreen)
#
# The chroot shares the machine's network (loopback included), so QGIS inside
# reaches a service listening on 127.0.0.1.
set -euo pipefail
root=${FEATUREPIPE_QGIS_CHROOT:-/var/cache/featurepipe/qgis-trixie}
mirror=${FEATUREPIPE_QGIS_MIRROR:-http://deb.debian.org/debian}
suite=trixie
marker=$root/.featurepipe-qgis-ready
packages="python3-qgis qgis-providers"

if [ "$(id -u)" -ne 0 ]; then
    echo "qgis-chroot: needs root (debootstrap, chroot and mounts)" >&2
    exit 1
fi

# /proc, /sys, /dev, /dev/pts and /dev/shm inside the chroot. Each is a mount
# of its own (no recursive bind), so that unmounting never reaches the host's.
mount_all() {
    mkdir -p "$root/proc" "$root/sys" "$root/dev"
    mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
    mountpoint -q "$root/sys" || mount -t sysfs sysfs "$root/sys"
    mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
    mountpoint -q "$root/dev/pts" || mount --bind /dev/pts "$root/dev/pts"
    mountpoint -q "$root/dev/shm" || mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
}

# Every mount under the chroot, deepest first.
umount_all() {
    local m
    [ -d "$root" ] || return 0
    for m in $(awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
}

# in_chroot CMD ...: CMD inside, with a clean environment.
in_chroot() {
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR=/tmp/runtime-root "$@"
}

prepare() {
    local start
    if [ -f "$marker" ]; then
        return 0
    fi
    start=$(date +%s)
    if ! command -v debootstrap >/dev/null; then
        echo "qgis-chroot: installing debootstrap with apt-get" >&2
        apt-get update -q >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2
    fi
    # A debootstrap that stopped half-way leaves no marker of its own: start again.
    if [ -d "$root" ] && [ ! -f "$root/.featurepipe-debootstrap-done" ]; then
        echo "qgis-chroot: removing an unfinished chroot at $root" >&2
        umount_all
        rm -rf --one-file-system "$root"
    fi
    if [ ! -d "$root" ]; then
        mkdir -p "$(dirname "$root")"
        echo "qgis-chroot: debootstrap $suite into $root (from $mirror)" >&2
        debootstrap --variant=minbase --components=main "$suite" "$root" "$mirror" >&2
        touch "$root/.featurepipe-debootstrap-done"
    fi
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    # No service starts inside the chroot while packages install.
    printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    mount_all
    echo "qgis-chroot: apt-get install $packages" >&2
    in_chroot env DEBIAN_FRONTEND=noninteractive sh -c \
        "apt-get update -q && apt-get install -y -q --no-install-recommends $packages ca-certificates && apt-get clean" >&2

    # QGIS starts headless and knows the OGC API - Features provider.
    cat > "$root/tmp/featurepipe-qgis-check.py" <<'PY'
from qgis.core import Qgis, QgsApplication, QgsProviderRegistry
app = QgsApplication([], False)
app.initQgis()
providers = QgsProviderRegistry.instance().providerList()
print("QGIS", Qgis.version(), "providers:", " ".join(providers))
assert Qgis.version().startswith("3.40."), "not QGIS 3.40"
assert "OAPIF" in providers, "no OAPIF provider"
app.exitQgis()
PY
    in_chroot python3 /tmp/featurepipe-qgis-check.py >&2
    rm -f "$root/tmp/featurepipe-qgis-check.py"
    umount_all
    {
        echo "suite=$suite"
        echo "packages=$packages"
        echo "made=$(date -u +%FT%TZ)"
        echo "seconds=$(($(date +%s) - start))"
        echo "size=$(du -sh --one-file-system "$root" | cut -f1)"
    } > "$marker.tmp"
    mv "$marker.tmp" "$marker"
    echo "qgis-chroot: ready in $(($(date +%s) - start)) s: $(tr '\n' ' ' < "$marker")" >&2
}

# One user of the chroot's mounts at a time (a second run waits).
mkdir -p "$(dirname "$root")"
exec 9> "$root.lock"
flock 9
trap umount_all EXIT
trap 'exit 130' INT TERM

case "${1:-}" in
--rebuild)
    umount_all
    rm -rf --one-file-system "$root"
    prepare
    echo "$root"
    ;;
run)
    shift
    prepare
    mount_all
    in_chroot "$@"
    ;;
"")
    prepare
    echo "$root"
    ;;
*)
    echo "usage: $0 [--rebuild | run CMD ...]" >&2
    exit 2
    ;;
esac
