#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""kvm-bench: real guests on a real host's vhost-net, in notification
mode, vhost-net's busy loop and vhost-poll, counted.

  kvm_bench.py plan [OPTIONS]        the cells, the expected time and what
                                     this host lacks; boots nothing
  kvm_bench.py run OUT [OPTIONS]     boot the guests, run every cell, write
                                     OUT/results.json and OUT/results.md
  kvm_bench.py check OUT [--smoke]   TAP: the run's results are sane
  kvm_bench.py compare OUT [MODEL]   the counts against make bench's model
                                     (build/bench/results.json, "model")
  kvm_bench.py selftest              TAP: the parsers on fixture text

scripts/kvm-bench drives these; see scripts/kvm-bench --help.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (make bench's guest helpers: one copy of them)
from host_counts import (delta_counts, parse_interrupts, parse_proc_stat,  # noqa: E402
                         parse_sched, parse_schedstat, parse_status, parse_vqs, per_request,
                         read, snapshot, thread_class)

TOP = B.TOP
NESTED = B.NESTED
TRAFFIC = B.TRAFFIC
INITRAMFS = os.path.join(TOP, "build", "nested", "initramfs.cpio")
PARAMS, VQS = B.PARAMS, B.VQS
SCHEDSTATS = B.SCHEDSTATS

MODES = ("notify", "busyloop", "poll")
# shared: the guests, their vhost workers, the polling threads and the
# traffic's host side on every CPU of the set. core, the I/O core at
# equal allocated cores, as make bench's: the guests' qemu (vCPUs and
# its other threads) and the traffic's host side on every CPU of the set
# but the poll core; the polling threads on the poll core (poll_cpus);
# the vhost workers there too when vhost_poll polls, and on every CPU
# of the set, the poll core included, in the other modes. apart: as
# core, but the workers with the guests in every mode (an owner whose
# cpuset excludes the I/O core: every handler a wake-up across CPUs).
REGIMES = ("shared", "core", "apart")
DEDICATED = ("core", "apart")
# tcp-rx: the guest receives (iperf3 to the guest's server); tcp-tx: the
# guest sends (-R); udp-stream: the guest sends 64-byte UDP as fast as it
# can (guest_traffic stream: kick-heavy); udp-rr: one 64-byte request in
# flight (guest_traffic rr); netperf-*: netperf's TCP_RR and UDP_RR
# against netserver in the guest, where netperf is installed (it is not
# in Debian 12 main).
WORKLOADS = ("tcp-rx", "tcp-tx", "udp-stream", "udp-rr", "netperf-tcp-rr", "netperf-udp-rr")
NETPERF = {"netperf-tcp-rr": "TCP_RR", "netperf-udp-rr": "UDP_RR"}
# Seconds a cell costs beyond its run (kick counters, iperf3's start,
# the module's load), and a boot, by accelerator: for the estimate.
CELL_OVERHEAD_S = {"kvm": 3, "tcg": 5}
BOOT_S = {"kvm": (10, 1), "tcg": (40, 30)}  # (fixed, per guest)


def modprobe():
    """The modprobe the kernel itself runs: scripts/vm's guest points it at
    the guest kernel's modules, which the modprobe on PATH does not know."""
    return (read("/proc/sys/kernel/modprobe") or "").strip() or "modprobe"


def can_modprobe(name):
    return subprocess.run([modprobe(), "-n", "-q", name], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def log(msg):
    print(f"kvm-bench: {msg}", file=sys.stderr, flush=True)


def die(msg):
    log(f"error: {msg}")
    sys.exit(1)


# ------------------------------------------------------------------ parsers

def parse_perf_kvm(text):
    """perf kvm stat report's table: ({reason: samples}, total) or
    ({}, None) when it has none."""
    reasons, total = {}, None
    for line in (text or "").splitlines():
        m = re.match(r"\s*([A-Za-z_][\w:-]*)\s+(\d+)\s+[\d.]+%\s+[\d.]+%", line)
        if m and m.group(1) != "VM-EXIT":
            reasons[m.group(1)] = int(m.group(2))
        m = re.search(r"Total Samples:\s*(\d+)", line)
        if m:
            total = int(m.group(1))
    if total is None and reasons:
        total = sum(reasons.values())
    return reasons, total


def parse_netperf(text):
    """netperf's -k output (KEY=VALUE lines): {key: float or str}."""
    out = {}
    for line in (text or "").splitlines():
        k, sep, v = line.strip().partition("=")
        if not sep or not re.fullmatch(r"[A-Z_0-9]+", k):
            continue
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


def cpu_flags(text):
    """The virtualisation flags of /proc/cpuinfo: vmx and/or svm."""
    flags = set()
    for line in (text or "").splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return sorted(flags & {"vmx", "svm"})


def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--smoke", action="store_true")
        p.add_argument("--guests", default=None)
        p.add_argument("--modes", default=None)
        p.add_argument("--regimes", default=None)
        p.add_argument("--workloads", default=None)
        p.add_argument("--secs", type=float, default=None)
        p.add_argument("--reps", type=int, default=None)
        p.add_argument("--cpus", default=None)
        p.add_argument("--poll-core", type=int, default=None)
        p.add_argument("--smp", type=int, default=1)
        p.add_argument("--mem", default="128M")
        p.add_argument("--accel", default="auto", choices=("auto", "kvm", "tcg"))
        p.add_argument("--poll-us", type=int, default=50)
        p.add_argument("--rate", type=int, default=1)
        p.add_argument("--stop-idle", type=int, default=2)
        p.add_argument("--ko", default=os.environ.get("VHOST_POLL_KO") or None)
        p.add_argument("--no-perf", action="store_true")
        p.add_argument("--command", default="scripts/kvm-bench")
    common(sub.add_parser("plan"))
    r = sub.add_parser("run")
    r.add_argument("out")
    common(r)
    r = sub.add_parser("check")
    r.add_argument("out")
    r.add_argument("--smoke", action="store_true")
    r = sub.add_parser("compare")
    r.add_argument("out")
    r.add_argument("model", nargs="?", default=os.path.join(TOP, "build", "bench",
                                                            "results.json"))
    sub.add_parser("selftest")
    a = ap.parse_args(argv)
    if a.cmd in ("plan", "run"):
        settle(ap, a)
    return a


def listarg(ap, text, allowed, what):
    vals = [v for v in text.split(",") if v]
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        ap.error(f"--{what} {text}: a comma-separated list of {', '.join(allowed)}")
    return [v for v in allowed if v in vals]


def settle(ap, a):
    """Defaults (the smoke form's or the full run's) and checks."""
    smoke = a.smoke
    a.guests = a.guests or ("1" if smoke else "1,4,16")
    try:
        a.guests = sorted({int(n) for n in a.guests.split(",")})
    except ValueError:
        ap.error(f"--guests {a.guests}: numbers of guests, comma-separated (1,4,16)")
    if not a.guests or min(a.guests) < 1 or max(a.guests) > 64:
        ap.error("--guests: 1 to 64 guests")
    a.modes = listarg(ap, a.modes or ("notify,poll" if smoke else ",".join(MODES)), MODES,
                      "modes")
    a.regimes = listarg(ap, a.regimes or ("shared" if smoke else "shared,core"),
                        REGIMES, "regimes")
    a.netperf = shutil.which("netperf")
    default_wl = [w for w in WORKLOADS if w not in NETPERF or a.netperf]
    a.workloads = listarg(ap, a.workloads or ",".join(default_wl), WORKLOADS, "workloads")
    a.secs = a.secs or (2 if smoke else 10)
    a.reps = a.reps or (1 if smoke else 3)
    if a.secs < 1 or a.reps < 1:
        ap.error("--secs and --reps: at least 1")
    a.cpuset = (B.parse_cpulist(a.cpus) if a.cpus else set(os.sched_getaffinity(0)))
    if not a.cpuset:
        ap.error(f"--cpus {a.cpus}: no CPU")
    if a.poll_core is None:
        a.poll_core = max(a.cpuset)
    if a.poll_core not in a.cpuset:
        ap.error(f"--poll-core {a.poll_core}: not in the CPU set {B.cpulist(a.cpuset)}")
    if set(a.regimes) & set(DEDICATED) and len(a.cpuset) < 2:
        ap.error("the core and apart regimes need two CPUs at least in --cpus")
    if a.smp < 1:
        ap.error("--smp: 1 vCPU at least")
    a.flags = cpu_flags(read("/proc/cpuinfo"))
    if a.accel == "auto":
        a.accel = "kvm" if a.flags and os.access("/dev/kvm", os.W_OK) else "tcg"
        a.accel_why = ("the CPU has " + "/".join(a.flags) if a.accel == "kvm" else
                       "no vmx/svm in /proc/cpuinfo" if not a.flags else "/dev/kvm not usable")
    else:
        a.accel_why = "asked for"


def boots(a):
    """The boots of a run, in order: (guests, poll_us, [(regime, workload,
    mode)]); busyloop needs a boot of its own (qemu's poll-us)."""
    out = []
    for n in a.guests:
        for busy in (False, True):
            modes = [m for m in a.modes if (m == "busyloop") == busy]
            if modes:
                cells = [(r, w, m) for r in a.regimes for w in a.workloads for m in modes]
                out.append((n, a.poll_us if busy else 0, cells))
    return out


def estimate_s(a):
    cells = sum(len(b[2]) for b in boots(a))
    fixed, per = BOOT_S[a.accel]
    boot = sum(fixed + per * b[0] for b in boots(a))
    return cells * a.reps * (a.secs + CELL_OVERHEAD_S[a.accel]) + boot, cells


def kvm_tracepoints():
    return any(os.path.isdir(d + "/events/kvm/kvm_exit")
               for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"))


def survey(a):
    """What this host has and lacks: [(name, ok, detail, required)]."""
    out = []

    def item(name, ok, detail, required=True):
        out.append((name, bool(ok), detail, required))
    item("root", os.geteuid() == 0, "root (qemu makes taps, the module loads)")
    item("vmx/svm", a.flags or (a.accel == "tcg" and (a.smoke or a.accel_why == "asked for")),
         ("CPU flags: " + " ".join(a.flags)) if a.flags else
         "no vmx/svm in /proc/cpuinfo: TCG stands in" + (
             "" if a.smoke else " only for --smoke or --accel tcg; the KVM run needs a host "
             "with vmx/svm"))
    item("/dev/kvm", a.accel == "tcg" or os.access("/dev/kvm", os.W_OK),
         "usable" if os.access("/dev/kvm", os.W_OK) else "absent or not writable",
         a.accel == "kvm")
    for tool, why in (("qemu-system-x86_64", "boots the guests"),
                      ("iperf3", "the TCP cells' client (Debian's iperf3)")):
        item(tool, shutil.which(tool), shutil.which(tool) or f"not installed: {why}")
    item("/dev/net/tun", os.path.exists("/dev/net/tun"), "CONFIG_TUN")
    item("vhost_net", os.path.exists("/dev/vhost-net") or can_modprobe("vhost_net"),
         "/dev/vhost-net or the vhost_net module")
    ks = read("/proc/kallsyms") or ""
    item("vhost_poller hooks", re.search(r" vhost_poller_register$", ks, re.M),
         "the series' kernel: vhost_poller_register in /proc/kallsyms" if ks else
         "no /proc/kallsyms", "poll" in a.modes)
    if a.ko:
        item("vhost_poll.ko", os.path.isfile(a.ko), a.ko, "poll" in a.modes)
    else:
        item("vhost_poll.ko", can_modprobe("vhost_poll"),
             "modprobe vhost_poll" if can_modprobe("vhost_poll") else
             "neither --ko nor an installed vhost_poll (CONFIG_VHOST_POLL=m)", "poll" in a.modes)
    kdir = os.environ.get("VHOST_POLL_KDIR", "")
    item("guest kernel", os.path.isfile(os.path.join(kdir, "vmlinux")),
         os.path.join(kdir, "vmlinux") + " (scripts/kernel build x86_64)")
    item("guest initramfs", os.path.isfile(INITRAMFS) and os.access(TRAFFIC, os.X_OK),
         f"{INITRAMFS} (scripts/nested-guest build)")
    lst = read(os.path.join(os.path.dirname(INITRAMFS), "initramfs.list")) or ""
    want_np = any(w in NETPERF for w in a.workloads)
    item("netperf", a.netperf and "/bin/netserver" in lst,
         (f"{a.netperf}, netserver in the initramfs" if a.netperf and "/bin/netserver" in lst else
          "netperf on the host but no netserver in the initramfs: scripts/nested-guest build"
          if a.netperf else
          "not installed (not in Debian 12 main, non-free): the netperf cells are left out"),
         want_np)
    perf = shutil.which("perf")
    item("perf kvm stat", perf and a.accel == "kvm" and kvm_tracepoints() and not a.no_perf,
         "off (--no-perf)" if a.no_perf else
         "no perf (linux-perf): no exits by reason" if not perf else
         "no exits to count under TCG" if a.accel != "kvm" else
         "no kvm:kvm_exit tracepoint (tracefs, CONFIG_KVM)" if not kvm_tracepoints() else perf,
         False)
    item("schedstats", os.path.exists(SCHEDSTATS),
         "kernel.sched_schedstats (set to 1 for the run)" if os.path.exists(SCHEDSTATS) else
         "no CONFIG_SCHEDSTATS: no wake-ups, remote wake-ups or idle entries", False)
    item("debugfs", os.path.isdir("/sys/kernel/debug") and
         (os.listdir("/sys/kernel/debug") if os.access("/sys/kernel/debug", os.R_OK) else False),
         "/sys/kernel/debug (mounted for the run if not)", False)
    need = max(a.guests) * a.smp
    room = len(a.cpuset) - (1 if set(a.regimes) & set(DEDICATED) else 0)
    item("CPUs", need <= room, f"{len(a.cpuset)} in the set ({B.cpulist(a.cpuset)}), poll core "
         f"{a.poll_core}; {max(a.guests)} guests x {a.smp} vCPU "
         f"{'fit' if need <= room else 'overcommit them (a finding, not an error)'}", False)
    return out


def plan(a):
    total, ncells = estimate_s(a)
    print(f"kvm-bench plan: accelerator {a.accel} ({a.accel_why})")
    if a.accel == "tcg":
        print("kvm-bench: *** TCG, not KVM: times mean nothing here; the counts are real "
              "(but no VM exits exist to count) ***")
    print(f"  guests {','.join(map(str, a.guests))} x {a.smp} vCPU, modes {','.join(a.modes)}, "
          f"regimes {','.join(a.regimes)}, workloads {','.join(a.workloads)}")
    print(f"  CPU set {B.cpulist(a.cpuset)}, poll core {a.poll_core}; {a.secs:g} s a run, "
          f"{a.reps} repetition(s); busy loop {a.poll_us} us; poll_start_rate {a.rate}")
    for n, pollus, cells in boots(a):
        print(f"  boot: {n} guest(s){f', poll-us={pollus}' if pollus else ''}: "
              f"{len(cells)} cells")
        for regime, wl, mode in cells:
            print(f"    x{n} {regime:6} {wl:14} {mode}")
    print(f"  {ncells} cells x {a.reps} rep(s): expected about {fmt(total / 60, 0)} min "
          f"({total:.0f} s)")
    print("  this host:")
    for name, ok, detail, required in survey(a):
        tag = "ok  " if ok else ("MISSING" if required else "absent (optional)")
        print(f"    {tag:18} {name}: {detail}")
    return 0


# ------------------------------------------------------------- the host

# The module's controls, as make bench drives them.
sh, loaded, set_param = B.sh, B.loaded, B.set_param


def set_mode(a, mode, regime):
    """vhost_poll unloaded (notify, busyloop) or loaded and polling, its
    threads on the poll core in the core and apart regimes."""
    cpus = str(a.poll_core) if regime in DEDICATED else ""
    if mode != "poll":
        if loaded():
            sh("rmmod", "vhost_poll")
        return
    if not loaded():
        params = ["poll_start_rate=0"] + ([f"poll_cpus={cpus}"] if cpus else [])
        if a.ko:
            sh("insmod", a.ko, *params)
        else:
            sh(modprobe(), "vhost_poll", *params)
    if os.path.exists(PARAMS + "poll_cpus"):
        if (read(PARAMS + "poll_cpus") or "").strip() != cpus:
            set_param("poll_cpus", cpus)
    elif cpus:
        raise RuntimeError("the core regime needs vhost_poll's poll_cpus: this module has none")
    set_param("poll_stop_idle", a.stop_idle)
    set_param("poll_start_rate", a.rate)


def place(a, regime, mode):
    """(the polling threads' CPUs, the guests' and the rest's, the vhost
    workers') in @regime and @mode, as make bench's workers_cpus()."""
    if regime not in DEDICATED:
        return set(a.cpuset), set(a.cpuset), set(a.cpuset)
    io, rest = {a.poll_core}, a.cpuset - {a.poll_core}
    if regime == "apart":
        return io, rest, rest
    return io, rest, io if mode == "poll" else set(a.cpuset)


def pin_all(a, regime, mode, procs):
    """This process (and so every traffic process it starts) and the
    guests' qemu with its vCPUs on the regime's CPUs, their vhost workers
    where @mode puts them, and the polling threads, where the kernel lets
    them be moved, on theirs. The workers are placed as an admin would
    (Documentation/admin-guide.rst, "An I/O core"): vhost_poll never
    moves one."""
    pollers, rest, workers = place(a, regime, mode)
    os.sched_setaffinity(0, rest)
    for p in procs:
        own, vhost = B.threads_of(p.pid)
        for tids, cpus in ((own, rest), (vhost, workers)):
            for tid in tids:
                try:
                    os.sched_setaffinity(tid, cpus)
                except OSError:
                    pass
    for pid in B.worker_counters().get("pids", []):
        try:
            os.sched_setaffinity(pid, pollers)
        except OSError:
            pass


def allowed_lists(procs):
    """Where the tasks may run now, by class (Cpus_allowed_list)."""
    out = {}
    tids = []
    for p in procs:
        own, workers = B.threads_of(p.pid)
        tids += [(p.pid, t) for t in own + workers]
    for pid, tid in tids:
        cls = thread_class((read(f"/proc/{pid}/task/{tid}/comm") or "").strip())
        st = read(f"/proc/{pid}/task/{tid}/status") or ""
        m = re.search(r"^Cpus_allowed_list:\s*(\S+)", st, re.M)
        if m:
            out.setdefault(cls, set()).add(m.group(1))
    for pid in B.worker_counters().get("pids", []):
        m = re.search(r"^Cpus_allowed_list:\s*(\S+)", read(f"/proc/{pid}/status") or "", re.M)
        if m:
            out.setdefault("poller", set()).add(m.group(1))
    return {k: sorted(v) for k, v in out.items()}


# ----------------------------------------------------------- the guests

def boot_guests(a, n, pollus, out_dir):
    """Boot @n guests with scripts/nested-guest, as @a asks (accelerator,
    vCPUs, memory) and with halt-polling of @pollus us if not 0, give
    their taps an address, wait for each generator; (qemu processes,
    seconds)."""
    args = ["--accel", a.accel, "--smp", str(a.smp), "--mem", a.mem]
    if pollus:
        args += ["--poll-us", str(pollus)]
    return B.boot_guests(n, out_dir, args)


def warm_up(n, workloads):
    """A first short run of each workload, discarded (under TCG the first
    run of a code path pays for its translation)."""
    for wl in ("stream", "rr"):
        for i in range(n):
            subprocess.run([TRAFFIC, "run", B.guest_addr(i), wl, "200"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if any(w.startswith("tcp") for w in workloads):
        for i in range(n):
            try:
                subprocess.run(["iperf3", "-c", B.guest_addr(i).split("/")[0], "-t", "1",
                                "--connect-timeout", "30000"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            except subprocess.TimeoutExpired:
                log(f"warm-up: iperf3 to guest {i} did not end in 120 s")


def netperf_run(i, test, secs):
    """netperf @test against guest @i's netserver for @secs, in the shape
    of guest_traffic's figures."""
    k0, p0 = B.guest_kicks(i), B.tap_packets(i)
    out = subprocess.run(["netperf", "-H", B.guest_addr(i).split("/")[0], "-t", test,
                          "-l", str(max(1, round(secs))), "-j", "-P", "0", "--",
                          "-k", "THROUGHPUT,ELAPSED_TIME,MEAN_LATENCY,P50_LATENCY,P99_LATENCY"],
                         capture_output=True, text=True, timeout=secs + 60)
    k1, p1 = B.guest_kicks(i), B.tap_packets(i)
    r = parse_netperf(out.stdout)
    if out.returncode or "THROUGHPUT" not in r:
        raise RuntimeError(f"netperf {test} to guest {i}: exit {out.returncode}: "
                           f"{(out.stderr or out.stdout).strip()[-200:]}")
    el = r.get("ELAPSED_TIME") or secs
    return {"workload": test, "answered": int(r["THROUGHPUT"] * el), "sent": p1 - p0,
            "received": p1 - p0, "lost": 0, "seconds": el,
            "p50_ns": r.get("P50_LATENCY", 0) * 1000, "p99_ns": r.get("P99_LATENCY", 0) * 1000,
            "rx_kicks": k1[0] - k0[0], "tx_kicks": k1[1] - k0[1]}


def run_workload(n, wl, secs):
    """@wl on every guest at once: a list of per-guest figures."""
    ms = int(secs * 1000)
    if wl == "udp-stream":
        return B.traffic_run(n, "stream", ms)
    if wl == "udp-rr":
        return B.traffic_run(n, "rr", ms)
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as ex:
        if wl in ("tcp-rx", "tcp-tx"):
            futs = [ex.submit(B.tcp_run, i, wl, 1, ms) for i in range(n)]
        else:
            futs = [ex.submit(netperf_run, i, NETPERF[wl], secs) for i in range(n)]
        return [f.result() for f in futs]


def figures(wl, outs, secs):
    """The cell's own figures and its number of requests: packets through
    the taps for TCP, packets the host received for the UDP stream, round
    trips for request/response."""
    f = {"per_guest": outs}
    kicks = [o.get("rx_kicks", -1) for o in outs] + [o.get("tx_kicks", -1) for o in outs]
    f["guest_kicks"] = None if min(kicks) < 0 else sum(kicks)
    if wl.startswith("tcp"):
        f["mbit_s"] = sum(o["mbit_s"] for o in outs)
        f["retransmits"] = sum(o["retransmits"] for o in outs)
        f["requests"] = sum(o["sent"] for o in outs)
    elif wl == "udp-stream":
        f["requests"] = sum(o["received"] for o in outs)
        f["sent"] = sum(o["sent"] for o in outs)
        f["packets_per_s"] = sum(o["received"] / (o["seconds"] or secs) for o in outs)
        f["loss_pct"] = 100 * (1 - f["requests"] / f["sent"]) if f["sent"] else None
    else:
        f["requests"] = sum(o["answered"] for o in outs)
        f["rr_per_s"] = sum(o["answered"] / (o["seconds"] or secs) for o in outs)
        f["p50_us"] = statistics.median(o["p50_ns"] / 1000 for o in outs)
        f["p99_us"] = max(o["p99_ns"] / 1000 for o in outs)
        f["lost"] = sum(o.get("lost", 0) for o in outs)
    return f


class Perf:
    """perf kvm stat record over one cell, where it can run."""

    def __init__(self, use):
        self.use, self.proc, self.file, self.why = use, None, None, None

    def start(self):
        if not self.use:
            return
        fd, self.file = tempfile.mkstemp(prefix="kvm-bench-perf.")
        os.close(fd)
        self.proc = subprocess.Popen(["perf", "kvm", "stat", "record", "-a", "-q", "-o",
                                      self.file], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)

    def stop(self):
        """({reason: exits}, total) or (None, None) with self.why."""
        if not self.proc:
            return None, None
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        try:
            rep = subprocess.run(["perf", "kvm", "stat", "report", "-i", self.file,
                                  "--event=vmexit"], capture_output=True, text=True, timeout=120)
            reasons, total = parse_perf_kvm(rep.stdout)
            if total is None:
                self.why = (f"perf kvm stat: no table (record: {err.strip()[-120:]}; "
                            f"report: {rep.stderr.strip()[-120:]})")
                return None, None
            return reasons, total
        finally:
            os.unlink(self.file)
            self.proc = None


def run_cell(a, procs, regime, wl, mode, rep, perf, schedstats):
    cpus = a.cpuset
    pids = {p.pid for p in procs}
    rec = {"device": "virtio-net", "workload": wl, "mode": mode, "regime": regime,
           "nguests": len(procs), "rep": rep, "module_loaded": loaded()}
    before = snapshot(procs)
    perf.start()
    t0 = time.monotonic()
    try:
        outs = run_workload(len(procs), wl, a.secs)
    except (RuntimeError, ValueError, OSError, KeyError, subprocess.SubprocessError) as e:
        perf.stop()
        rec["error"] = str(e)
        log(f"error: {e}")
        return rec
    wall = time.monotonic() - t0
    after = snapshot(procs)
    exits, total = perf.stop()
    rec["seconds"] = round(wall, 3)
    rec["figures"] = figures(wl, outs, a.secs)
    counts, missing = delta_counts(before, after, cpus, pids, schedstats)
    counts["requests"] = rec["figures"].pop("requests")
    counts["guest_kicks"] = rec["figures"].pop("guest_kicks")
    if counts["guest_kicks"] is None:
        missing["guest_kicks"] = "the guest's virtio-net has no rx_kicks/tx_kicks statistics"
    counts["exits"], counts["exits_by_reason"] = total, exits
    if total is None:
        missing["exits"] = perf.why or a.perf_why
    rec["counts"], rec["missing"] = counts, missing
    rec["cpus"] = allowed_lists(procs)
    return rec


def run(a):
    out_dir = os.path.abspath(a.out)
    os.makedirs(out_dir, exist_ok=True)
    for name in ("results.json", "results.md"):
        if os.path.exists(os.path.join(out_dir, name)):
            os.unlink(os.path.join(out_dir, name))
    lacking = [(n, d) for n, ok, d, req in survey(a) if req and not ok]
    for n, d in lacking:
        log(f"missing: {n}: {d}")
    if lacking:
        die("this host lacks what the run needs (above); scripts/kvm-bench --dry-run lists it all")
    if a.accel == "tcg":
        log("*" * 70)
        log(f"accelerator TCG ({a.accel_why}): NOT the KVM run. Times mean nothing;")
        log("the counts are real, but there are no VM exits to count")
        log("*" * 70)
    else:
        log(f"accelerator KVM ({a.accel_why})")
    perf_ok = [ok for n, ok, d, r in survey(a) if n == "perf kvm stat"][0]
    a.perf_why = [d for n, ok, d, r in survey(a) if n == "perf kvm stat"][0]
    if not perf_ok:
        log(f"no exits by reason: {a.perf_why}")
    if not os.path.exists("/dev/vhost-net"):
        sh(modprobe(), "vhost_net")
    if not os.listdir("/sys/kernel/debug"):
        sh("mount", "-t", "debugfs", "debugfs", "/sys/kernel/debug")
    old_ss = (read(SCHEDSTATS) or "").strip()
    schedstats = False
    if old_ss:
        try:
            with open(SCHEDSTATS, "w") as f:
                f.write("1\n")
            schedstats = True
        except OSError as e:
            log(f"cannot turn schedstats on ({e}): no wake-ups, no idle entries")
    else:
        log("no schedstats (CONFIG_SCHEDSTATS): no wake-ups, no idle entries")
    if loaded():
        sh("rmmod", "vhost_poll")
    total, ncells = estimate_s(a)
    meta = {"host_cpu": B.host_cpu(), "cpu_flags": a.flags, "kernel": os.uname().release,
            "accel": a.accel, "accel_why": a.accel_why,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": a.command, "smoke": a.smoke, "ncpus": os.cpu_count(),
            "cpus": B.cpulist(a.cpuset), "poll_core": a.poll_core, "guest_vcpus": a.smp,
            "guest_mem": a.mem, "guests": a.guests, "modes": a.modes, "regimes": a.regimes,
            "workloads": a.workloads, "secs": a.secs, "reps": a.reps,
            "busyloop_us": a.poll_us, "poll_start_rate": a.rate, "poll_stop_idle": a.stop_idle,
            # KVM's halt-polling window: it polls in the vCPU thread, and
            # moves the wake-ups and idle entries counted here.
            "halt_poll_ns": (read("/sys/module/kvm/parameters/halt_poll_ns") or "").strip()
            or None,
            "module": a.ko or "modprobe vhost_poll",
            "guest_kernel": os.path.join(os.environ.get("VHOST_POLL_KDIR", ""), "vmlinux"),
            "schedstats": schedstats, "perf": perf_ok, "perf_why": None if perf_ok else a.perf_why,
            "netperf": bool(a.netperf), "expected_s": round(total)}
    log(f"{ncells} cells x {a.reps} rep(s), {a.secs:g} s each, {len(boots(a))} boot(s): "
        f"expected about {total / 60:.0f} min ({total:.0f} s)")
    raws, boot_log = [], []
    t_start = time.monotonic()
    done, todo = 0, ncells * a.reps
    perf = Perf(perf_ok)
    try:
        for n, pollus, cells in boots(a):
            os.sched_setaffinity(0, a.cpuset)
            set_mode(a, "notify", "shared")
            log(f"booting {n} guest(s){f' (poll-us={pollus})' if pollus else ''} "
                f"({time.monotonic() - t_start:.0f} s)")
            try:
                procs, boot_s = boot_guests(a, n, pollus, out_dir)
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                log(f"error: {e}")
                for regime, wl, mode in cells:
                    for rep in range(a.reps):
                        done += 1
                        raws.append({"device": "virtio-net", "workload": wl, "mode": mode,
                                     "regime": regime, "nguests": n, "rep": rep,
                                     "error": f"boot: {e}"})
                continue
            log(f"{n} guest(s) answered after {boot_s:.1f} s")
            boot_log.append({"nguests": n, "poll_us": pollus, "seconds": round(boot_s, 1)})
            try:
                warm_up(n, a.workloads)
                for rep in range(a.reps):
                    for i, (regime, wl, mode) in enumerate(rotate(cells, rep)):
                        done += 1
                        set_mode(a, mode, regime)
                        pin_all(a, regime, mode, procs)
                        log(f"[{done}/{todo}] x{n} {regime:6} {mode:8} {wl:14} rep "
                            f"{rep + 1}/{a.reps} ({time.monotonic() - t_start:.0f} s)")
                        raws.append(run_cell(a, procs, regime, wl, mode, rep, perf, schedstats))
                        save(out_dir, meta, raws, boot_log, final=False)
            finally:
                os.sched_setaffinity(0, a.cpuset)
                set_mode(a, "notify", "shared")
                B.stop_guests(procs)
    finally:
        if loaded():
            subprocess.run(["rmmod", "vhost_poll"])
        if schedstats and old_ss != "1":
            with open(SCHEDSTATS, "w") as f:
                f.write(old_ss + "\n")
    meta["seconds"] = round(time.monotonic() - t_start, 1)
    meta["boots"] = boot_log
    save(out_dir, meta, raws, boot_log, final=True)
    errors = sum("error" in r for r in raws)
    log(f"done after {meta['seconds']:.0f} s (expected {total:.0f} s); {errors} of "
        f"{len(raws)} runs failed; {out_dir}/results.json, results.md")
    return 0


def rotate(cells, rep):
    """The cells of a boot, their modes rotated from one repetition to the
    next (drift in a machine's speed touches every mode alike)."""
    out = []
    groups = {}
    for c in cells:
        groups.setdefault((c[0], c[1]), []).append(c)
    for g in groups.values():
        k = rep % len(g)
        out += g[k:] + g[:k]
    return out


# ------------------------------------------------------------ the results

def add(x, y):
    """Counts summed over repetitions: None if either lacks it."""
    if x is None or y is None:
        return None
    if isinstance(x, dict):
        return {k: add(x.get(k), y.get(k)) for k in set(x) | set(y)}
    return x + y


def summarise(raws):
    """One record per device/workload/mode/regime/nguests: figures the
    median over repetitions, counts the sum (so per-request counts pool
    every repetition)."""
    keys = []
    for r in raws:
        k = (r["device"], r["workload"], r["mode"], r["regime"], r["nguests"])
        if k not in keys:
            keys.append(k)
    cells = []
    for k in keys:
        reps = [r for r in raws if (r["device"], r["workload"], r["mode"], r["regime"],
                                    r["nguests"]) == k]
        good = [r for r in reps if "error" not in r]
        cell = dict(zip(("device", "workload", "mode", "regime", "nguests"), k))
        cell["reps"] = len(good)
        cell["errors"] = [r["error"] for r in reps if "error" in r]
        if good:
            figs = {}
            for f in good[0]["figures"]:
                vals = [r["figures"].get(f) for r in good]
                if all(isinstance(v, (int, float)) for v in vals):
                    figs[f] = statistics.median(vals)
            cell["figures"] = figs
            counts = good[0]["counts"]
            for r in good[1:]:
                counts = add(counts, r["counts"])
            # Exit reasons that one repetition saw and another did not.
            reasons = {}
            for r in good:
                for why, v in (r["counts"].get("exits_by_reason") or {}).items():
                    reasons[why] = reasons.get(why, 0) + v
            counts["exits_by_reason"] = reasons if counts.get("exits") is not None else None
            cell["counts"] = counts
            cell["missing"] = good[0]["missing"]
            cell["per_request"] = per_request(counts)
            cell["module_loaded"] = [r["module_loaded"] for r in good]
            cell["seconds"] = sum(r["seconds"] for r in good)
            cell["cpus"] = good[-1].get("cpus")
            cell["per_guest"] = [r["figures"]["per_guest"] for r in good]
        cells.append(cell)
    return cells


def save(out_dir, meta, raws, boot_log, final):
    path = os.path.join(out_dir, "raw.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"meta": meta, "runs": raws, "boots": boot_log}, f, indent=1, default=str)
    os.replace(path + ".tmp", path)
    if not final:
        return
    cells = summarise(raws)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "cells": cells}, f, indent=1)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(markdown(meta, cells)) + "\n")


def fmt(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}"


def headline(c):
    f = c.get("figures", {})
    if c["workload"].startswith("tcp"):
        return f"{fmt(f.get('mbit_s'), 0)} Mbit/s"
    if c["workload"] == "udp-stream":
        return f"{fmt(f.get('packets_per_s'), 0)} pkt/s"
    return f"{fmt(f.get('rr_per_s'), 0)} rr/s, p50 {fmt(f.get('p50_us'), 1)} us"


def markdown(meta, cells):
    out = [f"# kvm-bench: {meta['host_cpu']}, {meta['accel']}", "",
           f"{meta['date']}; kernel {meta['kernel']}; CPU flags "
           f"{' '.join(meta['cpu_flags']) or 'none (no vmx/svm)'}; CPU set {meta['cpus']}, "
           f"poll core {meta['poll_core']}; {meta['secs']:g} s a run, {meta['reps']} rep(s); "
           f"`{meta['command']}`; {meta.get('seconds', 0):.0f} s.", ""]
    if meta["accel"] != "kvm":
        out += ["**TCG, not KVM: the times mean nothing, and there are no exits.**", ""]
    out += ["Per request: E guest kicks, Ev kicks vhost saw (module), Hd/Hw/Hp wake-ups "
            "of vCPU threads / vhost workers / polling threads, R of those from another "
            "CPU, IPI (RES+CAL), I idle entries, X exits, C CPU us (all).", "",
            "| guests | workload | regime | mode | figure | E | Ev | Hd | Hw | Hp | R | IPI "
            "| I | X | C |", "|" + "---|" * 15]
    order = {m: i for i, m in enumerate(MODES)}
    for c in sorted(cells, key=lambda c: (c["nguests"], c["workload"], c["regime"],
                                          order.get(c["mode"], 9))):
        if not c.get("per_request"):
            out.append(f"| {c['nguests']} | {c['workload']} | {c['regime']} | {c['mode']} | "
                       f"error: {'; '.join(c['errors'])[:80]} |" + " |" * 10)
            continue
        v = c["per_request"]
        out.append(f"| {c['nguests']} | {c['workload']} | {c['regime']} | {c['mode']} | "
                   f"{headline(c)} | " + " | ".join(
                       fmt(v[k], 3 if k in ("E", "Ev", "I", "R") else 2)
                       for k in ("E", "Ev", "Hd", "Hw", "Hp", "R", "IPI", "I", "X", "C")) + " |")
    lines = equal_cores(cells)
    if lines:
        out += ["", "## A dedicated core at equal allocated cores", "",
                "poll on the core regime (its threads alone on the poll core, the guests "
                "on the rest) against the shared regime's modes (the guests on every CPU "
                "of the set, the poll core included):", ""] + lines
    missing = {}
    for c in cells:
        for k, why in (c.get("missing") or {}).items():
            missing.setdefault(k, why)
    if missing:
        out += ["", "Not counted here: " + "; ".join(f"{k}: {w}" for k, w in
                                                      sorted(missing.items())) + "."]
    return out


def equal_cores(cells):
    out = []
    for c in cells:
        if c["mode"] != "poll" or c["regime"] != "core" or not c.get("per_request"):
            continue
        for m in ("notify", "busyloop", "poll"):
            t = next((x for x in cells if x["mode"] == m and x["regime"] == "shared" and
                      x["workload"] == c["workload"] and x["nguests"] == c["nguests"] and
                      x.get("per_request")), None)
            if t:
                out.append(f"- x{c['nguests']} {c['workload']}: poll/core {headline(c)}, "
                           f"C {fmt(c['per_request']['C'])} us; {m}/shared {headline(t)}, "
                           f"C {fmt(t['per_request']['C'])} us")
    return out


# ------------------------------------------------------------ the checks

class Tap:
    def __init__(self):
        self.n, self.passed, self.failed, self.skipped = 0, 0, 0, 0

    def ok(self, cond, what, detail=""):
        self.n += 1
        if cond:
            self.passed += 1
            print(f"ok {self.n} - {what}")
        else:
            self.failed += 1
            print(f"not ok {self.n} - {what}" + (f": {detail}" if detail else ""))

    def skip(self, what, why):
        self.n += 1
        self.skipped += 1
        print(f"ok {self.n} - {what} # SKIP {why}")

    def end(self, name):
        print(f"1..{self.n}")
        print(f"kvm-bench: {name}: {self.passed} passed, {self.failed} failed, "
              f"{self.skipped} skipped")
        return 1 if self.failed else 0


def negatives(x, path=""):
    """Every negative number in @x, by where it is."""
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in negatives(v, f"{path}.{k}" if path else k)]
    if isinstance(x, (int, float)) and not isinstance(x, bool) and x < 0:
        return [f"{path}={x}"]
    return []


COUNT_KEYS = ("requests", "packets", "guest_kicks", "vq_kicks", "wakeups", "wakeups_remote",
              "voluntary_switches", "involuntary_switches", "cpu_ns", "idle_entries",
              "ipi_res", "ipi_cal", "host_busy_ns", "exits")


def check(out_dir, smoke):
    t = Tap()
    try:
        with open(os.path.join(out_dir, "results.json")) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        t.ok(False, "results.json written and readable", str(e))
        return t.end("smoke" if smoke else "check")
    t.ok(True, "results.json written and readable")
    meta, cells = res.get("meta", {}), res.get("cells", [])
    need = ("host_cpu", "cpu_flags", "kernel", "accel", "date", "command")
    t.ok(all(k in meta for k in need), "meta has host CPU, flags, kernel, accel, date, command",
         f"lacks {[k for k in need if k not in meta]}")
    flags = cpu_flags(read("/proc/cpuinfo"))
    usable = "kvm" if flags and os.access("/dev/kvm", os.W_OK) else "tcg"
    t.ok(meta.get("accel") == usable or meta.get("accel_why") == "asked for",
         f"accelerator {meta.get('accel')} ({meta.get('accel_why')}) where the CPU has "
         f"{'/'.join(flags) or 'no vmx/svm'}")
    md = read(os.path.join(out_dir, "results.md")) or ""
    t.ok(md.startswith("# kvm-bench") and md.count("\n| ") >= len(cells),
         "results.md written, a row per cell")
    want = {(r, w, m, n) for n in meta.get("guests", []) for r in meta.get("regimes", [])
            for w in meta.get("workloads", []) for m in meta.get("modes", [])}
    have = {(c["regime"], c["workload"], c["mode"], c["nguests"]) for c in cells}
    t.ok(want and want == have, f"a record for each of the {len(want)} cells planned",
         f"missing {sorted(want - have)}, extra {sorted(have - want)}")
    polled = 0
    for c in cells:
        name = f"x{c['nguests']} {c['regime']} {c['workload']} {c['mode']}"
        k = c.get("counts")
        t.ok(not c.get("errors") and k is not None, f"{name}: ran",
             "; ".join(c.get("errors") or ["no counts"]))
        if k is None:
            continue
        miss = c.get("missing") or {}
        absent = [x for x in COUNT_KEYS if x not in k or (k[x] is None and x not in miss)]
        t.ok(not absent, f"{name}: counts has every entry, or why not", f"lacks {absent}")
        neg = negatives(k) + negatives(c.get("figures", {}))
        t.ok(not neg, f"{name}: nothing negative", ", ".join(neg[:5]))
        t.ok((k.get("packets") or 0) > 0 and (k.get("requests") or 0) > 0,
             f"{name}: packets moved ({k.get('packets')} through the taps, "
             f"{k.get('requests')} requests)")
        if k.get("guest_kicks") is None:
            t.skip(f"{name}: guest kicks at most one a packet", miss.get("guest_kicks", "?"))
        else:
            t.ok(k["guest_kicks"] <= (k.get("packets") or 0) + 64,
                 f"{name}: guest kicks at most one a packet ({k['guest_kicks']} kicks, "
                 f"{k.get('packets')} packets)")
        loaded = c.get("module_loaded") or []
        if c["mode"] == "poll":
            t.ok(all(loaded) and k.get("vq_kicks") is not None and k.get("vq_rows", 0) > 0,
                 f"{name}: vhost_poll loaded and saw this guest's virtqueues "
                 f"({k.get('vq_rows', 0)} rows)")
            polled += k.get("vq_poll_entries") or 0
            if k.get("guest_kicks") is not None and k.get("vq_kicks") is not None:
                t.ok(k["vq_kicks"] <= 1.25 * k["guest_kicks"] + 64,
                     f"{name}: the kicks vhost saw ({k['vq_kicks']}) are the guest's "
                     f"({k['guest_kicks']})")
        else:
            t.ok(loaded and not any(loaded) and k.get("vq_kicks") is None,
                 f"{name}: vhost_poll not loaded in {c['mode']} mode")
        cpu = k.get("cpu_ns") or {}
        t.ok(cpu.get("vcpu", 0) > 0 and cpu.get("vhost", 0) > 0,
             f"{name}: the vCPU threads and the vhost workers ran "
             f"({cpu.get('vcpu', 0) / 1e6:.0f} ms, {cpu.get('vhost', 0) / 1e6:.0f} ms)")
        if k.get("wakeups") is None:
            t.skip(f"{name}: wake-ups counted", miss.get("wakeups", "?"))
        else:
            t.ok(sum(k["wakeups"].values()) > 0 and
                 sum(k["wakeups_remote"].values()) <= sum(k["wakeups"].values()),
                 f"{name}: wake-ups counted ({k['wakeups']}), remote ones among them")
        if k.get("idle_entries") is None:
            t.skip(f"{name}: idle entries counted", miss.get("idle_entries", "?"))
        else:
            t.ok(k["idle_entries"] > 0 or k.get("host_idle_ns", 0) == 0,
                 f"{name}: idle entries counted ({k['idle_entries']}) where CPUs idled")
        if k.get("exits") is None:
            t.skip(f"{name}: VM exits by reason", miss.get("exits", "?"))
        else:
            t.ok(k["exits"] > 0 and (k.get("exits_by_reason") or {}),
                 f"{name}: VM exits by reason ({k['exits']})")
    if any(c["mode"] == "poll" and c.get("counts") for c in cells):
        t.ok(polled > 0, f"vhost_poll polled a virtqueue in the poll cells ({polled} entries)")
    return t.end("smoke" if smoke else "check")


# ------------------------------------------------------- against the model

def compare(out_dir, model_path):
    """The model's rr rows (make bench) against this run's udp-rr cells of
    as many guests, regime and mode: the predicted KVM p50 against the
    measured one, and the events a request the model counted under TCG
    against those counted here."""
    with open(os.path.join(out_dir, "results.json")) as f:
        cells = json.load(f)["cells"]
    try:
        with open(model_path) as f:
            rows = (json.load(f).get("model") or {}).get("rows") or []
    except (OSError, ValueError) as e:
        die(f"no model in {model_path} ({e}): run make bench first")
    if not rows:
        die(f"{model_path} has no model rows")
    print("model row | mode | KVM p50 predicted (us) | measured p50 (us) | "
          "events a request: model kicks/local/remote/idle vs here E/Hd+Hw+Hp-R/R/I")
    for r in rows:
        c = next((c for c in cells if c["workload"] == "udp-rr" and c["mode"] == r["mode"] and
                  c["regime"] == r["regime"] and c["nguests"] == r["ndev"] and
                  c.get("per_request")), None)
        kv = r["kvm"]["p50_us"]
        ev = r["events"]
        if not c:
            print(f"{r['cell']} | {r['mode']} | {kv[0]:.1f}-{kv[1]:.1f} | no udp-rr cell here")
            continue
        v = c["per_request"]
        wakes = sum(v[x] or 0 for x in ("Hd", "Hw", "Hp"))
        print(f"{r['cell']} | {r['mode']} | {kv[0]:.1f}-{kv[1]:.1f} | "
              f"{fmt(c['figures'].get('p50_us'), 1)} | "
              f"{ev['kicks']:.2f}/{ev['local']:.2f}/{ev['remote']:.2f}/{ev['idle']:.2f} vs "
              f"{fmt(v['E'])}/{fmt(wakes - (v['R'] or 0))}/{fmt(v['R'])}/{fmt(v['I'])}")
    return 0


# ----------------------------------------------------- parsers, by fixture

FIX_SCHED = """qemu-system-x86 (4242, #threads: 5)
-------------------------------------------------------------------
se.exec_start                                :        206217.443793
se.sum_exec_runtime                          :          1234.500000
sum_sleep_runtime                            :             0.000000
nr_switches                                  :                  120
nr_voluntary_switches                        :                  100
nr_wakeups                                   :                  101
nr_wakeups_sync                              :                    3
nr_wakeups_local                             :                   61
nr_wakeups_remote                            :                   40
"""
FIX_SCHED_OLD = """se.sum_exec_runtime : 2.000001
se.statistics.nr_wakeups : 7
se.statistics.nr_wakeups_remote : 2
"""
FIX_STATUS = "Name:\tvhost-4242\nvoluntary_ctxt_switches:\t99\nnonvoluntary_ctxt_switches:\t4\n"
FIX_SCHEDSTAT = """version 15
timestamp 4295892456
cpu0 0 0 2000 700 900 300 123456789 555 1800
domain0 00000003 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25
cpu1 1 0 3000 800 1000 400 223456789 666 2800
"""
FIX_INTERRUPTS = """            CPU0       CPU1
   0:         44          0   IO-APIC    2-edge      timer
LOC:      41713      42094   Local timer interrupts
RES:      35888      13517   Rescheduling interrupts
CAL:      83732      30735   Function call interrupts
"""
FIX_STAT = """cpu  10 0 10 100 0 0 0 0 0 0
cpu0 5 1 4 50 2 1 1 0 3 0
cpu1 5 0 6 50 0 0 0 0 0 0
intr 1234
"""
FIX_VQS = """pid dev vq mode kicks poll_work notify_work empty_polls enters exits window
4242 1 0 notify 10 0 10 0 0 0 2
4242 1 1 poll 500 70 30 9 4 3 2
"""
FIX_PERF = """
Analyze events for all VMs, all VCPUs:

             VM-EXIT    Samples  Samples%     Time%    Min Time    Max Time         Avg time

           MSR_WRITE       2042    33.15%     0.17%      0.60us     20.59us      0.98us ( +-   2.40% )
                 HLT       1596    25.91%    99.65%      1.47us  11993.55us    729.14us ( +-   3.46% )
       EPT_MISCONFIG        522     8.47%     0.02%      0.93us     10.39us      1.66us ( +-   3.15% )

Total Samples:4160, Total events handled time:1167964.44us.
"""
FIX_NETPERF = "THROUGHPUT=12345.67\nELAPSED_TIME=10.00\nP50_LATENCY=78\nP99_LATENCY=150\n"


class FakeUsage:
    def __init__(self, t):
        self.ru_utime, self.ru_stime = t, 0.0


def selftest():
    t = Tap()
    s = parse_sched(FIX_SCHED)
    t.ok(s.get("nr_wakeups") == 101 and s.get("nr_wakeups_remote") == 40 and
         s.get("cpu_ns") == 1234500000, "parse_sched: 6.12 names, runtime in ns", str(s))
    s = parse_sched(FIX_SCHED_OLD)
    t.ok(s.get("nr_wakeups") == 7 and s.get("nr_wakeups_remote") == 2 and s["cpu_ns"] == 2000001,
         "parse_sched: se.statistics.* names", str(s))
    st = parse_status(FIX_STATUS)
    t.ok(st == {"voluntary_ctxt_switches": 99, "nonvoluntary_ctxt_switches": 4},
         "parse_status", str(st))
    ss = parse_schedstat(FIX_SCHEDSTAT)
    t.ok(ss == {0: {"goidle": 700, "ttwu": 900, "ttwu_local": 300, "run_delay_ns": 555},
                1: {"goidle": 800, "ttwu": 1000, "ttwu_local": 400, "run_delay_ns": 666}},
         "parse_schedstat: sched_goidle is the 4th field", str(ss))
    irq = parse_interrupts(FIX_INTERRUPTS)
    t.ok(irq == {"RES": {0: 35888, 1: 13517}, "CAL": {0: 83732, 1: 30735}},
         "parse_interrupts: RES and CAL by CPU", str(irq))
    t.ok(parse_proc_stat(FIX_STAT) == {0: (12, 52), 1: (11, 50)}, "parse_proc_stat",
         str(parse_proc_stat(FIX_STAT)))
    vq = parse_vqs(FIX_VQS)
    t.ok(vq.get((4242, 1, 1), {}).get("kicks") == 500 and
         vq[(4242, 1, 1)].get("enters") == 4 and "mode" not in vq[(4242, 1, 1)],
         "parse_vqs: numeric columns by (pid, dev, vq)", str(vq))
    reasons, total = parse_perf_kvm(FIX_PERF)
    t.ok(total == 4160 and reasons == {"MSR_WRITE": 2042, "HLT": 1596, "EPT_MISCONFIG": 522},
         "parse_perf_kvm: exits by reason and the total", f"{reasons} {total}")
    t.ok(parse_perf_kvm("no samples\n") == ({}, None), "parse_perf_kvm: nothing recorded")
    n = parse_netperf(FIX_NETPERF)
    t.ok(n.get("THROUGHPUT") == 12345.67 and n.get("P99_LATENCY") == 150, "parse_netperf",
         str(n))
    t.ok(cpu_flags("flags\t: fpu vme vmx sse\n") == ["vmx"] and
         cpu_flags("flags\t: fpu sse\n") == [], "cpu_flags: vmx/svm or none")
    t.ok([thread_class(x) for x in ("CPU 0/KVM", "CPU 12/TCG", "vhost-4242", "qemu-system-x86",
                                    "worker")] == ["vcpu", "vcpu", "vhost", "qemu", "qemu"],
         "thread_class: vCPU, vhost worker, the rest")

    def snap(tasks, goidle, res, taps, vqs, child):
        return {"tasks": tasks, "schedstat": {0: {"goidle": goidle, "ttwu": 10, "ttwu_local": 4,
                                                  "run_delay_ns": 0}},
                "irq": {"RES": {0: res}, "CAL": {0: 1}}, "stat": {0: (100, 100)},
                "vqs": vqs, "worker": {}, "taps": taps, "children": FakeUsage(child)}
    task = {"cpu_ns": 5, "wakeups": 3, "wakeups_remote": 1, "wakeups_local": 2,
            "voluntary_switches": 3, "involuntary_switches": 0}
    later = {k: v * 2 for k, v in task.items()}
    b = snap({("vcpu", 1): task, ("vhost", 2): task, ("qemu", 3): task}, 10, 5, {0: 100},
             None, 1.0)
    # Task 3 exited, task 4 started: neither makes a delta negative.
    a_ = snap({("vcpu", 1): later, ("vhost", 2): later, ("vhost", 4): task}, 15, 9, {0: 160},
              None, 1.5)
    c, miss = delta_counts(b, a_, {0}, {4242}, True)
    t.ok(c["wakeups"] == {"vcpu": 3, "vhost": 6, "qemu": 0, "poller": 0} and
         c["idle_entries"] == 5 and c["ipi_res"] == 4 and c["ipi_cal"] == 0 and
         c["packets"] == 60 and c["cpu_ns"]["peer"] == 500000000 and c["vq_kicks"] is None and
         "vq_kicks" in miss and not negatives(c),
         "delta_counts: sums by class, tasks that come and go, nothing negative", str(c))
    nost = dict(task, wakeups=None, wakeups_remote=None, wakeups_local=None)
    c, miss = delta_counts(snap({("vcpu", 1): nost}, 0, 0, {0: 0}, None, 0),
                           snap({("vcpu", 1): nost}, 0, 0, {0: 1}, None, 0), {0}, set(), False)
    t.ok(c["wakeups"] is None and c["idle_entries"] is None and "wakeups" in miss and
         "idle_entries" in miss, "delta_counts: without schedstats, None and why", str(miss))
    pr = per_request({"requests": 10, "guest_kicks": 5, "vq_kicks": 4,
                      "wakeups": {"vcpu": 10, "vhost": 20, "qemu": 0, "poller": 0},
                      "wakeups_remote": {"vcpu": 1, "vhost": 2, "qemu": 7, "poller": 0},
                      "ipi_res": 3, "ipi_cal": 2, "idle_entries": 30, "exits": 50,
                      "cpu_ns": {"vcpu": 1000, "peer": 9000}})
    t.ok(pr["E"] == 0.5 and pr["Hw"] == 2 and pr["R"] == 0.3 and pr["IPI"] == 0.5 and
         pr["X"] == 5 and pr["C"] == 1.0, "per_request: the count vector", str(pr))
    args = options(["plan", "--guests", "1,4,16", "--cpus", "0-7", "--accel", "kvm"])
    bs = boots(args)
    total, ncells = estimate_s(args)
    t.ok([(b[0], b[1], len(b[2])) for b in bs] ==
         [(n, p, 4 * len(args.workloads) if p == 0 else 2 * len(args.workloads))
          for n in (1, 4, 16) for p in (0, 50)] and ncells == 3 * 6 * len(args.workloads) and
         args.poll_core == 7, "the plan: a boot per guest count and busy loop, every cell",
         str([(b[0], b[1], len(b[2])) for b in bs]))
    t.ok(rotate([("s", "w", "a"), ("s", "w", "b"), ("s", "x", "a")], 1) ==
         [("s", "w", "b"), ("s", "w", "a"), ("s", "x", "a")], "rotate: modes rotate by rep")
    all8, io, rest = set(range(8)), {7}, set(range(7))
    t.ok(place(args, "core", "poll") == (io, rest, io) and
         place(args, "core", "notify") == (io, rest, all8) and
         place(args, "core", "busyloop") == (io, rest, all8) and
         place(args, "apart", "poll") == (io, rest, rest) and
         place(args, "shared", "poll") == (all8, all8, all8),
         "place: the workers on the I/O core in core's poll mode, on every CPU in its "
         "others, with the guests in apart",
         str([place(args, r, m) for r in REGIMES for m in MODES]))
    return t.end("selftest")


def main():
    a = options()
    if a.cmd == "plan":
        return plan(a)
    if a.cmd == "run":
        return run(a)
    if a.cmd == "check":
        return check(a.out, a.smoke)
    if a.cmd == "compare":
        return compare(a.out, a.model)
    return selftest()


if __name__ == "__main__":
    sys.exit(main())
