#!/bin/bash
# Run one independent libvirtd ("host") for tests, without systemd.
# usage: libvirt-host.sh start BASE NAME HOST_UUID MIGRATION_PORT_MIN
#        libvirt-host.sh stop  BASE NAME
# The daemon lives in its own mount namespace where /etc/libvirt, /run/libvirt,
# /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt are BASE/hosts/NAME/*.
# So /var/lib/libvirt/images is per-host (local storage at the same path on every
# host), while any directory outside those (e.g. BASE/shared) is seen by all
# hosts: shared storage. Prints the connection URI on stdout.
# env VP_NETNS=NAME: the daemon (and so its guests' taps and migration sockets) runs in that
# network namespace (`ip netns add NAME` first); its socket is still reached from outside.
# env VP_TLS_PORT=PORT VP_TLS_DIR=DIR: the daemon also listens for qemu+tls on 127.0.0.1:PORT with
# DIR/servercert.pem, DIR/serverkey.pem and DIR/cacert.pem (clients must show a certificate of that CA).
set -euo pipefail
action=${1:?start|stop}; base=${2:?base dir}; name=${3:?host name}
here=$(cd "$(dirname "$0")" && pwd)
hostdir=$base/hosts/$name
pidfile=$hostdir/libvirtd.pid
sock=$hostdir/sock/libvirt-sock

if [ "$action" = stop ]; then
  if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  fi
  # QEMU outlives libvirtd; its guests are the subreaper's remaining children.
  if [ -f "$hostdir/subreaper.pid" ]; then
    reaper=$(cat "$hostdir/subreaper.pid")
    for child in $(pgrep -P "$reaper" 2>/dev/null || true); do kill -9 "$child" 2>/dev/null || true; done
    for _ in $(seq 100); do kill -0 "$reaper" 2>/dev/null || break; sleep 0.05; done
    rm -f "$hostdir/subreaper.pid"
  fi
  exit 0
fi

host_uuid=${4:?host uuid}; port_min=${5:?migration port min}
mkdir -p "$hostdir"/{etc,run,lib/images,cache,log,sock}
mkdir -p /etc/libvirt /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt
cat >"$hostdir/etc/libvirtd.conf" <<CONF
host_uuid = "$host_uuid"
unix_sock_dir = "$hostdir/sock"
unix_sock_group = "root"
unix_sock_rw_perms = "0770"
auth_unix_rw = "none"
auth_unix_ro = "none"
log_outputs = "3:file:$hostdir/log/libvirtd.log"
CONF
listen=""
if [ -n "${VP_TLS_PORT:-}" ]; then
  listen=--listen
  cat >>"$hostdir/etc/libvirtd.conf" <<CONF
listen_tls = 1
listen_tcp = 0
listen_addr = "127.0.0.1"
tls_port = "$VP_TLS_PORT"
key_file = "${VP_TLS_DIR:?}/serverkey.pem"
cert_file = "$VP_TLS_DIR/servercert.pem"
ca_file = "$VP_TLS_DIR/cacert.pem"
CONF
fi
# Guests run as root with no security driver, and console output goes to files
# directly (stdio_handler=file), so neither virtlogd nor virtlockd is needed.
cat >"$hostdir/etc/qemu.conf" <<CONF
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
stdio_handler = "file"
migration_port_min = $port_min
migration_port_max = $((port_min + 63))
CONF
# Seed QEMU's capability cache from an earlier host: skips an ~8 s probe per daemon.
if [ -d "$base/qemu-caps" ] && [ ! -d "$hostdir/cache/qemu/capabilities" ]; then
  mkdir -p "$hostdir/cache/qemu"
  cp -r "$base/qemu-caps" "$hostdir/cache/qemu/capabilities"
fi
rm -f "$sock"
${VP_NETNS:+ip netns exec "$VP_NETNS"} unshare --mount --propagation private /bin/sh -c "
  mount --bind '$hostdir/etc' /etc/libvirt &&
  mount --bind '$hostdir/run' /run/libvirt &&
  mount --bind '$hostdir/lib' /var/lib/libvirt &&
  mount --bind '$hostdir/cache' /var/cache/libvirt &&
  mount --bind '$hostdir/log' /var/log/libvirt &&
  exec python3 '$here/subreaper.py' /usr/sbin/libvirtd $listen -f '$hostdir/etc/libvirtd.conf' -p '$pidfile'
" </dev/null >"$hostdir/log/stdout.log" 2>&1 &
echo $! >"$hostdir/subreaper.pid"  # ip netns exec, unshare and sh exec, so this is the subreaper
for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { echo "libvirtd $name did not start; see $hostdir/log" >&2; exit 1; }
echo "qemu+unix:///system?socket=$sock"
