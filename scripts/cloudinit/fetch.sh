#!/usr/bin/env bash
# cloud-init's own network renderers, for tests/test_cloudinit_renderers.py: Debian's
# cloud-init package unpacked (not installed: no services) under .work/cloud-init.
# Without it those tests skip, unless VIRTPLANE_CLOUDINIT_REQUIRED=1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST="${VIRTPLANE_CLOUDINIT_DIR:-$ROOT/.work/cloud-init}"
if [ -d "$DEST/usr/lib/python3/dist-packages/cloudinit" ]; then
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # apt's download user must be able to write there
(cd "$tmp" && apt-get download cloud-init >/dev/null)
mkdir -p "$DEST"
dpkg -x "$tmp"/cloud-init_*.deb "$DEST"
echo "cloud-init $(dpkg-deb -f "$tmp"/cloud-init_*.deb Version) unpacked in $DEST"
