#!/bin/bash
# Prepare this machine for the real-guest tests (tests/qemu): libvirt + QEMU from
# Debian packages, libvirt-python in the project's venv, and a tiny TCG guest
# (Debian cloud kernel + busybox initramfs) cached under $VIRTPLANE_QEMU_DIR.
# Idempotent: a second run only checks stamps and returns in about a second.
#
# usage: scripts/qemu/setup.sh            (as root)
# env:   VIRTPLANE_QEMU_DIR  cache dir (default: <repo>/.work/qemu)
#        PYTHON              interpreter whose environment gets libvirt-python
#                            (default: <repo>/.venv/bin/python, else python3)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${VIRTPLANE_QEMU_DIR:-$repo/.work/qemu}
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then python=$repo/.venv/bin/python; else python=python3; fi
fi
mkdir -p "$cache/guest"

# --- system packages (not libvirt-daemon-system: it pulls in systemd, dbus, polkit)
runtime_pkgs="libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 libvirt-clients qemu-utils"
build_pkgs="libvirt-dev pkg-config gcc python3-dev"
guest_pkgs="busybox-static cpio"
missing=""
for pkg in $runtime_pkgs $build_pkgs $guest_pkgs; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# libvirt insists on this account existing even when qemu.conf runs guests as root.
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent passwd libvirt-qemu >/dev/null ||
  useradd -r -g libvirt-qemu -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu

# --- libvirt-python, pinned to the system libvirt's version
if ! "$python" -c 'import libvirt' 2>/dev/null; then
  echo "setup: pip install libvirt-python into $("$python" -c 'import sys; print(sys.prefix)')"
  "$python" -m pip install -q "libvirt-python==$(pkg-config --modversion libvirt)"
fi

# --- guest kernel: the Debian cloud kernel package, downloaded and unpacked (not installed)
if [ ! -f "$cache/guest/vmlinuz" ] || [ ! -d "$cache/kernel/lib/modules" ]; then
  kernel_pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image/{print $2; exit}')
  if [ -z "$kernel_pkg" ]; then
    apt-get update -qq
    kernel_pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image/{print $2; exit}')
  fi
  echo "setup: fetching $kernel_pkg"
  rm -rf "$cache/kernel" "$cache/download"
  mkdir -p "$cache/download" "$cache/kernel"
  (cd "$cache/download" && apt-get download -qq -o APT::Sandbox::User=root "$kernel_pkg")
  dpkg-deb -x "$cache"/download/*.deb "$cache/kernel"
  cp "$(ls "$cache"/kernel/boot/vmlinuz-* | head -1)" "$cache/guest/vmlinuz"
  rm -rf "$cache/download"
fi

# --- the guest agent: Debian's qemu-guest-agent package, downloaded and unpacked (not installed)
if [ ! -x "$cache/qga/usr/sbin/qemu-ga" ]; then
  echo "setup: fetching qemu-guest-agent"
  rm -rf "$cache/qga" "$cache/download"
  mkdir -p "$cache/download" "$cache/qga"
  (cd "$cache/download" && apt-get download -qq -o APT::Sandbox::User=root qemu-guest-agent) || {
    apt-get update -qq
    (cd "$cache/download" && apt-get download -qq -o APT::Sandbox::User=root qemu-guest-agent)
  }
  dpkg-deb -x "$cache"/download/qemu-guest-agent_*.deb "$cache/qga"
  rm -rf "$cache/download"
fi

# --- guest initramfs (rebuilt when its script or the cache key changes)
# Key 2: the guest reads its NoCloud seed (scsi, sr_mod, isofs modules; the seed reader in init).
# Key 3: the guest runs qemu-ga (from $cache/qga) and has a freezable /data.
cache_key=3
initrd_script=$repo/scripts/qemu/build-initrd.sh
stamp="$cache_key-$(sha256sum "$initrd_script" | cut -c1-16)"
if [ ! -f "$cache/guest/initrd.gz" ] || [ "$(cat "$cache/guest/initrd.stamp" 2>/dev/null)" != "$stamp" ]; then
  # Built aside and moved in: a test copying the guest never reads half an initramfs.
  bash "$initrd_script" "$cache/kernel" "$cache/guest/initrd.gz.new" "$cache/qga"
  mv "$cache/guest/initrd.gz.new" "$cache/guest/initrd.gz"
  echo "$stamp" >"$cache/guest/initrd.stamp"
fi

echo "setup: ready (cache $cache)"
