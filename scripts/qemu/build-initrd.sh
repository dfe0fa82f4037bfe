#!/bin/bash
# Build the busybox initramfs used by the real-guest tests (TCG).
# usage: build-initrd.sh KERNEL_TREE OUT.gz [QGA_TREE]
#   KERNEL_TREE: a linux-image-*-cloud-amd64 package unpacked with `dpkg-deb -x`.
#   QGA_TREE: Debian's qemu-guest-agent package unpacked the same way (its qemu-ga and the
#     host's copies of the libraries ldd names go into the guest); without it, no agent.
# What the guest does, so tests can watch it through the serial log:
#   - prints "GUEST-UP" once booted and "DISK0: <first 16 bytes of /dev/vda>"
#   - prints "TICK n" every 2 s and writes "DISKTICK n" into sector 1 of /dev/vda
#   - prints "DEVICES disks=vda,vdb nics=eth0,eth1" at the first tick and at each tick after the
#     block devices or network interfaces changed (hot-plug)
#   - powers off on the ACPI power button (busybox acpid; needs button+evdev)
#   - kernel argument vp.reboot=N: reboots itself after N ticks (guest reset test)
#   - kernel argument vp.poweroff=N: powers itself off after N ticks (guest shutdown test)
#   - kernel argument vp.dirty=N: keeps rewriting N MiB of RAM (migration that
#     does not converge under a low bandwidth limit)
#   - runs qemu-ga on /dev/virtio-ports/org.qemu.guest_agent.0 when the domain has the channel
#     ("AGENT-UP" on the console); its shutdown runs /sbin/shutdown, which prints
#     "GUEST-AGENT-SHUTDOWN" and powers off; its freeze and thaw print "GUEST-FREEZE"/"GUEST-THAW"
#   - mounts an ext2 filesystem (a loop file in RAM) on /data, so a freeze has something to freeze
#   - kernel argument vp.ignore_acpi=1: no acpid, the power button does nothing
#   - kernel argument vp.no_agent=1: qemu-ga is not started (a guest without an agent)
#   - kernel argument vp.probe=IP:PORT: tries a TCP connection from the guest's first NIC
#     (10.0.2.15/24 via 10.0.2.2, QEMU's user network) and prints "PROBE connected",
#     "PROBE failed" or "PROBE no-nic"
set -euo pipefail
tree=${1:?unpacked kernel package}; out=${2:?output initrd.gz}; qga=${3:-}
kver=$(ls "$tree/lib/modules" | head -1)
moddir=$tree/lib/modules/$kver
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,mods,data,run,var/run,etc/acpi/PWRF}
cp /bin/busybox "$root/bin/busybox"
# Load order matters: virtio core first, then the PCI transport, then block; evdev+button for ACPI.
# scsi+sr+isofs read the seed's CD-ROM (virtio-scsi: the Debian cloud kernel has no AHCI).
modules="virtio virtio_ring virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk failover net_failover virtio_net
 scsi_common scsi_mod virtio_scsi cdrom sr_mod isofs evdev button virtio_console loop"
for mod in $modules; do
  file=$(find "$moddir" -name "$mod.ko*" | head -1)
  [ -n "$file" ] || { echo "module $mod not found in $moddir" >&2; exit 1; }
  case $file in
    *.xz) xz -dc "$file" >"$root/mods/$mod.ko" ;;
    *.zst) zstd -qdc "$file" >"$root/mods/$mod.ko" ;;
    *) cp "$file" "$root/mods/$mod.ko" ;;
  esac
done
echo $modules >"$root/mods/order"

# acpid runs the script named after the event's directory/code: PWRF/00000080 is the power button.
cat >"$root/etc/acpi/PWRF/00000080" <<'SCRIPT'
#!/bin/busybox sh
echo "GUEST-POWEROFF"
sync
/bin/busybox poweroff -f
SCRIPT

if [ -n "$qga" ]; then
  cp "$qga/usr/sbin/qemu-ga" "$root/sbin/qemu-ga"
  # the libraries it links, from this machine (Debian 12, as the package's), at the same paths
  for lib in $(ldd "$qga/usr/sbin/qemu-ga" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
fi
# qemu-ga's guest-shutdown runs this (stdio on /dev/null: the console is written directly).
cat >"$root/sbin/shutdown" <<'SCRIPT'
#!/bin/busybox sh
echo "GUEST-AGENT-SHUTDOWN $*" >/dev/console
sync
/bin/busybox poweroff -f
SCRIPT
cat >"$root/etc/fsfreeze-hook" <<'SCRIPT'
#!/bin/busybox sh
[ "$1" = freeze ] && echo "GUEST-FREEZE" >/dev/console
[ "$1" = thaw ] && echo "GUEST-THAW" >/dev/console
exit 0
SCRIPT

cat >"$root/init" <<'SCRIPT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
read_seed() {
  # sr_mod probes the CD-ROM asynchronously: wait for it when a virtio-scsi controller (id 8) is there.
  if grep -qx 0x0008 /sys/bus/virtio/devices/*/device 2>/dev/null; then
    for _ in $(seq 50); do findfs LABEL=cidata >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  seed=$(findfs LABEL=cidata 2>/dev/null) || { echo "cidata: none"; return; }
  mkdir -p /seed && mount -t iso9660 -o ro "$seed" /seed || { echo "cidata: cannot mount $seed"; return; }
  name=$(sed -n 's/.*"local-hostname": *"\([^"]*\)".*/\1/p' /seed/meta-data)
  [ -n "$name" ] && hostname "$name" && echo "cidata: hostname $name"
  # virtplane writes network-config as indented JSON (which is YAML), one key per line:
  # an ethernet is an object at depth 2; print "mac address/prefix gateway" for each (the
  # gateway as gateway4, as virtplane writes it, or as an older seed's default route "via").
  awk '
    function flush() { if (mac != "") print mac, (addr == "" ? "-" : addr), (gw == "" ? "-" : gw); mac = addr = gw = "" }
    /^    "[^"]*": \{/ { flush() }
    /"macaddress":/ { split($0, q, "\""); mac = q[4] }
    /"(via|gateway4)":/ { split($0, q, "\""); gw = q[4] }
    /^ *"[0-9.]+\/[0-9]+",?$/ { if (addr == "") { split($0, q, "\""); addr = q[2] } }
    END { flush() }' /seed/network-config >/tmp/nics
  while read -r mac addr gw; do
    dev=""
    for path in /sys/class/net/*; do [ "$(cat "$path/address")" = "$mac" ] && dev=${path##*/}; done
    [ -n "$dev" ] || { echo "cidata: no NIC with mac $mac"; continue; }
    ip link set "$dev" up
    [ "$addr" != "-" ] && ip addr add "$addr" dev "$dev"
    [ "$gw" != "-" ] && ip route add default via "$gw" dev "$dev"
    echo "cidata: $dev $addr via $gw mac $mac"
  done </tmp/nics
  if head -c 2 /seed/user-data | grep -q '#!'; then
    # copied before the unmount below, and run from the copy
    cp /seed/user-data /tmp/user-data && chmod +x /tmp/user-data && { /tmp/user-data & }
  fi
  # as cloud-init does: a mounted CD-ROM is locked, and its media could not be changed (hot-plug)
  umount /seed
}
# Two passes: a module whose dependency comes later in the list loads on the second one.
for pass in 1 2; do for mod in $(cat /mods/order); do insmod /mods/$mod.ko 2>/dev/null; done; done
# virtio-blk probes asynchronously: give an attached disk (virtio device id 2) a moment to appear.
if grep -qx 0x0002 /sys/bus/virtio/devices/*/device 2>/dev/null; then
  for _ in $(seq 50); do [ -b /dev/vda ] && break; sleep 0.1; done
fi
reboot_after=0
poweroff_after=0
dirty_mib=0
probe=""
ignore_acpi=0
no_agent=0
for arg in $(cat /proc/cmdline); do
  case $arg in
    vp.ignore_acpi=*) ignore_acpi=${arg#vp.ignore_acpi=} ;;
    vp.no_agent=*) no_agent=${arg#vp.no_agent=} ;;
    vp.reboot=*) reboot_after=${arg#vp.reboot=} ;;
    vp.poweroff=*) poweroff_after=${arg#vp.poweroff=} ;;
    vp.dirty=*) dirty_mib=${arg#vp.dirty=} ;;
    vp.probe=*) probe=${arg#vp.probe=} ;;
  esac
done
if [ "$ignore_acpi" = 1 ]; then echo "ACPI ignored"; else acpid -c /etc/acpi -l /tmp/acpid.log; fi
read_seed
# A freezable filesystem: ext2 on a loop file in RAM (the root is an initramfs, which qemu-ga skips).
dd if=/dev/zero of=/tmp/data.img bs=1M count=4 2>/dev/null && losetup /dev/loop0 /tmp/data.img &&
  mke2fs -q /dev/loop0 >/dev/null && mount -t ext2 /dev/loop0 /data || echo "DATA: no filesystem"
ip link set lo up
# No udev: name the virtio serial ports as its rules would, then start the agent on its port.
if [ "$no_agent" = 1 ]; then
  echo "AGENT: none"
elif [ -x /sbin/qemu-ga ] && grep -qx 0x0003 /sys/bus/virtio/devices/*/device 2>/dev/null; then
  for _ in $(seq 50); do ls /sys/class/virtio-ports/ 2>/dev/null | grep -q . && break; sleep 0.1; done
  mkdir -p /dev/virtio-ports
  for port in /sys/class/virtio-ports/*; do
    [ -f "$port/name" ] && ln -sf "/dev/${port##*/}" "/dev/virtio-ports/$(cat "$port/name")"
  done
  if [ -e /dev/virtio-ports/org.qemu.guest_agent.0 ]; then
    qemu-ga -m virtio-serial -p /dev/virtio-ports/org.qemu.guest_agent.0 -t /run -l /tmp/qga.log \
      -F/etc/fsfreeze-hook &
    echo "AGENT-UP"
  fi
fi
echo "GUEST-UP uptime=$(cut -d' ' -f1 /proc/uptime) disks=$(ls /sys/block | tr '\n' ',')"
if [ -b /dev/vda ]; then
  echo "DISK0: $(dd if=/dev/vda bs=16 count=1 2>/dev/null | tr -c 'A-Za-z0-9=_-' '.')"
fi
if [ "$dirty_mib" -gt 0 ]; then
  mkdir -p /dirty
  mount -t tmpfs -o size=$((dirty_mib + 8))m tmpfs /dirty
  (while :; do dd if=/dev/urandom of=/dirty/pages bs=1M count="$dirty_mib" conv=notrunc 2>/dev/null; done) &
fi
if [ -n "$probe" ]; then
  if [ -e /sys/class/net/eth0 ]; then
    ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
    if echo "probe from the guest" | nc -w 5 "${probe%:*}" "${probe##*:}"; then
      echo "PROBE connected"
    else
      echo "PROBE failed"
    fi
  else
    echo "PROBE no-nic"
  fi
fi
tick=0
devices=""
while :; do
  tick=$((tick + 1))
  echo "TICK $tick"
  now="disks=$(ls /sys/block | grep '^vd' | tr '\n' ',' | sed 's/,$//') nics=$(ls /sys/class/net | grep -vx lo | tr '\n' ',' | sed 's/,$//')"
  if [ "$now" != "$devices" ]; then
    echo "DEVICES $now"
    devices=$now
  fi
  if [ -b /dev/vda ]; then
    echo "DISKTICK $tick" | dd of=/dev/vda bs=512 seek=1 conv=sync,fsync 2>/dev/null
  fi
  if [ "$reboot_after" -gt 0 ] && [ "$tick" -ge "$reboot_after" ]; then
    echo "GUEST-REBOOT"
    sync
    reboot -f
  fi
  if [ "$poweroff_after" -gt 0 ] && [ "$tick" -ge "$poweroff_after" ]; then
    echo "GUEST-POWEROFF"
    sync
    poweroff -f
  fi
  sleep 2
done
SCRIPT
chmod +x "$root/init" "$root/etc/acpi/PWRF/00000080" "$root/sbin/shutdown" "$root/etc/fsfreeze-hook"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$out")
echo "built $out ($(stat -c %s "$out") bytes)"
