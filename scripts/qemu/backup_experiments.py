"""Direct experiments behind docs/benchmarks.md row 21 (the 30 s tail of a backup job begun soon after
the start of a domain with a guest-agent channel): one rig daemon, libvirt-python only.
Run: .venv/bin/python scripts/qemu/backup_experiments.py plain,plain,cp  (or wait40,plain)
(names: plain, cp, sep, wait40, meta, lazy, raw, paused, convert, convert_raw; see the branches below)."""

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/wt/bkspeed")
import libvirt
from tests.qemu.conftest import running_rig


def q(*a):
    return subprocess.run(list(a), check=True, capture_output=True, text=True).stdout


DOM = """<domain type='qemu'><name>bk</name><memory unit='MiB'>192</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='pc'>hvm</type><kernel>{lib}/vmlinuz</kernel><initrd>{lib}/initrd.gz</initrd>
<cmdline>console=ttyS0 panic=-1 quiet</cmdline></os><devices>
<disk type='file' device='disk'><driver name='qemu' type='qcow2' cache='none'/><source file='{disk}'/><target dev='vda' bus='virtio'/></disk>
<serial type='file'><source path='{log}'/></serial><channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel></devices></domain>"""


def job(target, fmt):
    return (
        f"<domainbackup mode='push'><disks><disk name='vda' backup='yes' type='file'>"
        f"<target file='{target}'/><driver type='{fmt}'/></disk></disks></domainbackup>"
    )


CPN = [0]


def run_backup(dom, target, fmt, reuse=True, cp=False):
    t0 = time.monotonic()
    CPN[0] += 1
    cpx = (
        f"<domaincheckpoint><name>cp{CPN[0]}</name><disks><disk name='vda' checkpoint='bitmap'/></disks></domaincheckpoint>"
        if cp
        else None
    )
    dom.backupBegin(job(target, fmt), cpx, libvirt.VIR_DOMAIN_BACKUP_BEGIN_REUSE_EXTERNAL if reuse else 0)
    samples = []
    while True:
        s = dom.jobStats(0)
        if s.get("type", 0) == libvirt.VIR_DOMAIN_JOB_NONE:
            break
        samples.append((time.monotonic() - t0, s.get("disk_processed", 0)))
        time.sleep(0.05)
    took = time.monotonic() - t0
    done = dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    return took, done.get("type"), done.get("disk_processed"), done.get("time_elapsed"), samples


with running_rig() as rig:
    base = rig.base
    shared = base / "shared"
    disk = shared / "disk.qcow2"
    q("qemu-img", "create", "-f", "qcow2", "-o", "compat=1.1", str(disk), "2G")
    q("qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 0 1024M", "-c", "write -P 0x5a 1024M 1024M", str(disk))
    conn = libvirt.open(rig.hosts["a"].uri)
    dom = conn.defineXML(DOM.format(lib=base / "library", disk=disk, log=base / "console" / "bk.log"))
    dom.create()
    for _ in range(600):
        if "GUEST-UP" in rig.console("bk"):
            break
        time.sleep(0.1)
    print("guest up", "GUEST-UP" in rig.console("bk"), flush=True)
    experiments = sys.argv[1].split(",")
    for exp in experiments:
        tgt = shared / f"t-{exp}.img"
        tgt.unlink(missing_ok=True)
        fmt = "qcow2"
        if exp == "convert":
            t0 = time.monotonic()
            q("qemu-img", "convert", "-U", "-f", "qcow2", "-O", "qcow2", str(disk), str(tgt))
            print(exp, f"{time.monotonic() - t0:.2f}", flush=True)
            continue
        if exp == "convert_raw":
            t0 = time.monotonic()
            q("qemu-img", "convert", "-U", "-f", "qcow2", "-O", "raw", str(disk), str(tgt))
            print(exp, f"{time.monotonic() - t0:.2f}", flush=True)
            continue
        if exp == "wait40":
            time.sleep(40)  # an experiment's idle time, not synchronisation
            exp = "plain"
        if exp == "sep":
            t1 = time.monotonic()
            dom.checkpointCreateXML(
                "<domaincheckpoint><name>sep1</name><disks><disk name='vda' checkpoint='bitmap'/></disks></domaincheckpoint>",
                0,
            )
            print("  checkpointCreateXML took", round(time.monotonic() - t1, 2), flush=True)
        if exp in ("plain", "paused", "cp", "sep"):
            q("qemu-img", "create", "-f", "qcow2", "-o", "compat=1.1", str(tgt), "2G")
        elif exp == "meta":
            q("qemu-img", "create", "-f", "qcow2", "-o", "compat=1.1,preallocation=metadata", str(tgt), "2G")
        elif exp == "lazy":
            q("qemu-img", "create", "-f", "qcow2", "-o", "compat=1.1,lazy_refcounts=on", str(tgt), "2G")
        elif exp == "falloc":
            q("qemu-img", "create", "-f", "qcow2", "-o", "compat=1.1,preallocation=falloc", str(tgt), "2G")
        elif exp == "bigcluster":
            q("qemu-img", "create", "-f", "qcow2", "-o", "compat=1.1,cluster_size=2M", str(tgt), "2G")
        elif exp == "raw":
            q("qemu-img", "create", "-f", "raw", str(tgt), "2G")
            fmt = "raw"
        if exp == "paused":
            dom.suspend()
        took, typ, proc, elapsed, samples = run_backup(dom, tgt, fmt, cp=(exp == "cp"))
        full_at = next((round(t, 2) for t, p in samples if p >= 2 << 30), None)
        print(
            "  processed==total at",
            full_at,
            "dirty",
            [
                row
                for row in Path("/proc/meminfo").read_text().splitlines()
                if row.startswith(("Dirty", "Writeback:"))
            ],
        )
        if exp == "paused":
            dom.resume()
        mids = [f"{t:.1f}:{p >> 20}" for t, p in samples[:: max(1, len(samples) // 8)]]
        print(
            exp,
            f"{took:.2f}s type={typ} MiB={(proc or 0) >> 20} elapsed_ms={elapsed} load={os.getloadavg()[0]:.1f}",
            mids,
            flush=True,
        )
        tgt.unlink(missing_ok=True)
    import glob

    for f in glob.glob(str(base / "hosts" / "a" / "**" / "*.log"), recursive=True):
        for line in Path(f).read_text(errors="replace").splitlines():
            if any(w in line.lower() for w in ("timed out", "lock", "agent", "error")):
                print("LOG", f.rsplit("/", 1)[-1], line.strip()[:220])
    dom.destroy()
    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA)
