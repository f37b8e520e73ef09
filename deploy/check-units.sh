#!/bin/sh
# Checks the systemd units in deploy/systemd with `systemd-analyze verify`, failing on any
# finding (verify's exit status misses some; its output must be empty too).
#
# verify needs each ExecStart binary to exist: the units are checked as copies whose
# /usr/local/bin paths point at the binaries built here (target/release, else target/debug, or
# KQUOTA_BIN_DIR). Build them first: cargo build -p kquotad -p kquota-proxy
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=${KQUOTA_BIN_DIR:-}
if [ -z "$bin_dir" ]; then
    for d in "$root/target/release" "$root/target/debug"; do
        if [ -x "$d/kquotad" ] && [ -x "$d/kquota-proxy" ]; then bin_dir=$d; break; fi
    done
fi
if [ -z "$bin_dir" ] || [ ! -x "$bin_dir/kquotad" ] || [ ! -x "$bin_dir/kquota-proxy" ]; then
    echo "check-units: no kquotad and kquota-proxy binaries (cargo build -p kquotad -p kquota-proxy, or set KQUOTA_BIN_DIR)" >&2
    exit 2
fi
command -v systemd-analyze >/dev/null || { echo "check-units: systemd-analyze not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for unit in "$root"/deploy/systemd/*.service; do
    name=$(basename "$unit")
    sed "s|/usr/local/bin/|$bin_dir/|g" "$unit" > "$tmp/$name"
    # The binaries the unit names, so that a rename in one place and not the other is caught.
    for exe in $(sed -n 's|^ExecStart=\([^ ]*\).*|\1|p' "$tmp/$name"); do
        [ -x "$exe" ] || { echo "check-units: $name: $exe is not a built binary" >&2; status=1; }
    done
    out=$(cd "$tmp" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$tmp/$name" 2>&1) || status=1
    if [ -n "$out" ]; then
        echo "$name:" >&2
        echo "$out" >&2
        status=1
    else
        echo "check-units: $name: no findings"
    fi
done
exit $status
