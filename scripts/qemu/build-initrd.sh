#!/bin/bash
# Build the busybox initramfs used by the real-guest tests (TCG).
# usage: build-initrd.sh KERNEL_TREE OUT.gz
#   KERNEL_TREE: a linux-image-*-cloud-amd64 package unpacked with `dpkg-deb -x`.
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
#   - kernel argument vp.probe=IP:PORT: tries a TCP connection from the guest's first NIC
#     (10.0.2.15/24 via 10.0.2.2, QEMU's user network) and prints "PROBE connected",
#     "PROBE failed" or "PROBE no-nic"
set -euo pipefail
tree=${1:?unpacked kernel package}; out=${2:?output initrd.gz}
kver=$(ls "$tree/lib/modules" | head -1)
moddir=$tree/lib/modules/$kver
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,proc,sys,dev,tmp,mods,etc/acpi/PWRF}
cp /bin/busybox "$root/bin/busybox"
# Load order matters: virtio core first, then the PCI transport, then block; evdev+button for ACPI.
# scsi+sr+isofs read the seed's CD-ROM (virtio-scsi: the Debian cloud kernel has no AHCI).
modules="virtio virtio_ring virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk failover net_failover virtio_net
 scsi_common scsi_mod virtio_scsi cdrom sr_mod isofs evdev button"
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
acpid -c /etc/acpi -l /tmp/acpid.log
read_seed
reboot_after=0
poweroff_after=0
dirty_mib=0
probe=""
for arg in $(cat /proc/cmdline); do
  case $arg in
    vp.reboot=*) reboot_after=${arg#vp.reboot=} ;;
    vp.poweroff=*) poweroff_after=${arg#vp.poweroff=} ;;
    vp.dirty=*) dirty_mib=${arg#vp.dirty=} ;;
    vp.probe=*) probe=${arg#vp.probe=} ;;
  esac
done
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
chmod +x "$root/init" "$root/etc/acpi/PWRF/00000080"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$out")
echo "built $out ($(stat -c %s "$out") bytes)"
