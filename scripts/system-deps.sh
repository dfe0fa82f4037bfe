#!/usr/bin/env bash
# Installs the Debian packages the full test suite needs (as root), in one apt run:
# libvirt + QEMU (real-guest tests), PostgreSQL (the multi-replica store), Chromium
# (the dashboard test), Prometheus (promtool and a real server for the alert rules), systemd
# (systemd-analyze for the units in deploy/), OpenSSH's server and openssl (the qemu+ssh and
# qemu+tls tests start their own sshd and make their own certificates; netcat carries qemu+ssh
# to a test daemon's socket), OpenLDAP's slapd and ldap-utils (the LDAP login tests start their
# own slapd on a loopback port and load it with ldapadd). No system service is started or left to run: the tests start
# their own daemons. Then prepares the QEMU guest (scripts/qemu/setup.sh).
# Idempotent and quick when everything is there. Skips what it cannot do (not root,
# no apt) and says so; the tests that need a missing part skip with a reason.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "system-deps: not root or no apt-get: libvirt/QEMU, PostgreSQL, Chromium and Prometheus tests may skip" >&2
  exit 0
fi
pkgs="libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 libvirt-clients qemu-utils
      libvirt-dev pkg-config gcc python3-dev busybox-static cpio
      postgresql chromium prometheus systemd openssh-server openssl netcat-openbsd slapd ldap-utils"
missing=""
for pkg in $pkgs; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  echo "system-deps: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  case " $missing " in
    # Debian's ssh unit and init script do nothing while this file exists: only the tests' sshd runs.
    *" openssh-server "*) mkdir -p /etc/ssh && touch /etc/ssh/sshd_not_to_be_run ;;
  esac
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    # Packages' maintainer scripts start no service during this install (invoke-rc.d's policy).
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
PYTHON="$ROOT/.venv/bin/python" "$ROOT/scripts/qemu/setup.sh"
"$ROOT/scripts/cloudinit/fetch.sh"  # cloud-init's renderers for tests/test_cloudinit_renderers.py
