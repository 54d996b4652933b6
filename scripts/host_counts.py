# SPDX-License-Identifier: GPL-2.0
"""What a host's tasks, CPUs and vhost_poll counted between two moments:
the snapshots and deltas behind the count vector of make bench's nested
guests (scripts/bench.py) and of scripts/kvm-bench's guests, and the
readers of the files they come from (/proc, debugfs, sysfs). Python's
standard library only; it imports neither of its users."""
import os
import re
import resource
import time

WORKER = "/sys/kernel/debug/vhost_poll/threads"
VQS = "/sys/kernel/debug/vhost_poll/vqs"
# Thread classes: the guests' vCPU threads, their vhost workers, qemu's
# other threads, vhost-poll's polling threads, and the traffic's host
# side (iperf3, guest_traffic, netperf: child processes).
CLASSES = ("vcpu", "vhost", "qemu", "poller")
TASK_FIELDS = ("cpu_ns", "wakeups", "wakeups_remote", "wakeups_local",
               "voluntary_switches", "involuntary_switches")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def parse_sched(text):
    """/proc/PID/task/TID/sched: {field: number}, each field by its last
    dotted name (6.12 prints nr_wakeups, older kernels
    se.statistics.nr_wakeups); se.sum_exec_runtime (ms) as cpu_ns."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
        key = key.strip().rsplit(".", 1)[-1]
        try:
            out[key] = float(val.strip()) if "." in val else int(val.strip())
        except ValueError:
            continue
    if "sum_exec_runtime" in out:
        out["cpu_ns"] = int(round(out["sum_exec_runtime"] * 1e6))
    return out


def parse_status(text):
    """/proc/PID/task/TID/status: its context-switch counts."""
    out = {}
    for line in (text or "").splitlines():
        key, _, val = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            out[key] = int(val)
    return out


def parse_schedstat(text):
    """/proc/schedstat: {cpu: {goidle, ttwu, ttwu_local, run_delay_ns}}.
    A cpuN line's fields: yld_count, 0 (was sched_switch), sched_count,
    sched_goidle, ttwu_count, ttwu_local, rq_cpu_time, run_delay, pcount."""
    out = {}
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) < 10 or not re.fullmatch(r"cpu\d+", f[0]):
            continue
        out[int(f[0][3:])] = {"goidle": int(f[4]), "ttwu": int(f[5]), "ttwu_local": int(f[6]),
                              "run_delay_ns": int(f[8])}
    return out


# Reschedule and function-call IPIs; posted-interrupt notifications and
# wake-ups (how vhost's call reaches a running or a halted vCPU).
IRQ_ROWS = ("RES", "CAL", "PIN", "PIW")


def parse_interrupts(text, names=IRQ_ROWS):
    """/proc/interrupts: {name: {cpu: count}} for the rows @names, the
    columns numbered by the header's CPUn."""
    lines = (text or "").splitlines()
    if not lines:
        return {}
    cpus = [int(c[3:]) for c in lines[0].split() if re.fullmatch(r"CPU\d+", c)]
    out = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        name = name.strip()
        if name not in names:
            continue
        vals = rest.split()[:len(cpus)]
        out[name] = {c: int(v) for c, v in zip(cpus, vals) if v.isdigit()}
    return out


def parse_proc_stat(text):
    """/proc/stat's cpuN lines: {cpu: (busy, idle)} in clock ticks (guest
    time is already in user time)."""
    out = {}
    for line in (text or "").splitlines():
        f = line.split()
        if not f or not re.fullmatch(r"cpu\d+", f[0]):
            continue
        v = [int(x) for x in f[1:]] + [0] * 8
        user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
        out[int(f[0][3:])] = (user + nice + system + irq + softirq + steal, idle + iowait)
    return out


def parse_vqs(text):
    """vhost_poll's debugfs vqs: {(pid, dev, vq): {column: int}}."""
    lines = (text or "").splitlines()
    if not lines:
        return {}
    names = lines[0].split()
    out = {}
    for line in lines[1:]:
        row = dict(zip(names, line.split()))
        try:
            key = (int(row["pid"]), int(row["dev"]), int(row["vq"]))
        except (KeyError, ValueError):
            continue
        out[key] = {k: int(v) for k, v in row.items()
                    if k not in ("pid", "dev", "vq") and re.fullmatch(r"-?\d+", v)}
    return out


def thread_class(comm):
    """The class of a qemu thread by its name: vCPU threads are
    "CPU N/KVM" (or /TCG), vhost workers vhost-PID."""
    if comm.startswith("vhost-"):
        return "vhost"
    if re.match(r"CPU \d+/", comm):
        return "vcpu"
    return "qemu"


# ------------------------------------------------------------- the plan


def worker_counters():
    """The polling threads' counters (debugfs threads file, a row per
    thread) summed into a dict, with "threads" their number; {} when
    vhost_poll is not loaded."""
    try:
        with open(WORKER) as f:
            names = f.readline().split()
            rows = [dict(zip(names, map(int, line.split()))) for line in f if line.strip()]
    except (OSError, ValueError):
        return {}
    out = {"threads": len(rows), "pids": [r["pid"] for r in rows if "pid" in r]}
    for r in rows:
        for k, v in r.items():
            if k not in ("pid", "thread"):
                out[k] = out.get(k, 0) + v
    return out


def tap_packets(i):
    """Packets through nested guest @i's tap, both ways."""
    n = 0
    for d in ("rx", "tx"):
        with open(f"/sys/class/net/vpg{i}/statistics/{d}_packets") as f:
            n += int(f.read())
    return n


def task_counts(path):
    """One task's counters (see TASK_FIELDS), or None when it is gone."""
    s, st = read(path + "/sched"), read(path + "/status")
    if s is None or st is None:
        return None
    p, q = parse_sched(s), parse_status(st)
    return {"cpu_ns": p.get("cpu_ns"), "wakeups": p.get("nr_wakeups"),
            "wakeups_remote": p.get("nr_wakeups_remote"),
            "wakeups_local": p.get("nr_wakeups_local"),
            "voluntary_switches": q.get("voluntary_ctxt_switches"),
            "involuntary_switches": q.get("nonvoluntary_ctxt_switches")}


def snapshot(procs):
    tasks = {}
    for p in procs:
        try:
            tids = os.listdir(f"/proc/{p.pid}/task")
        except OSError:
            continue
        for tid in tids:
            path = f"/proc/{p.pid}/task/{tid}"
            comm = (read(path + "/comm") or "").strip()
            c = task_counts(path)
            if c is not None:
                tasks[(thread_class(comm), int(tid))] = c
    for pid in worker_counters().get("pids", []):
        c = task_counts(f"/proc/{pid}")
        if c is not None:
            tasks[("poller", pid)] = c
    taps = {}
    for i in range(len(procs)):
        try:
            taps[i] = tap_packets(i)
        except (OSError, ValueError):
            taps[i] = None
    return {"tasks": tasks, "schedstat": parse_schedstat(read("/proc/schedstat")),
            "irq": parse_interrupts(read("/proc/interrupts")),
            "stat": parse_proc_stat(read("/proc/stat")),
            "vqs": parse_vqs(read(VQS)) if os.path.exists("/sys/module/vhost_poll") else None,
            "worker": worker_counters(), "taps": taps,
            "children": resource.getrusage(resource.RUSAGE_CHILDREN), "t": time.monotonic()}


def delta_counts(before, after, cpus, pids, schedstats):
    """The count vector between two snapshots: sums of deltas, never of
    tasks that were gone at the end (counters only grow per task, so no
    delta is negative); None where this host cannot count it, with the
    reason in "missing"."""
    counts, missing = {}, {}
    for field in TASK_FIELDS:
        by = {c: 0 for c in CLASSES}
        known = True
        for (cls, tid), v in after["tasks"].items():
            if v.get(field) is None:
                known = False
                continue
            b = before["tasks"].get((cls, tid), {}).get(field) or 0
            by[cls] += max(v[field] - b, 0)
        counts[field] = by if known else None
        if not known:
            missing[field] = ("no schedstats (kernel.sched_schedstats, CONFIG_SCHEDSTATS)"
                              if field.startswith("wakeups") else f"no {field} in /proc")
    ch0, ch1 = before["children"], after["children"]
    counts["cpu_ns"] = dict(counts["cpu_ns"] or {}, peer=int(
        ((ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)) * 1e9))
    s0, s1 = before["schedstat"], after["schedstat"]
    if schedstats and s1:
        def ss(key, where):
            return sum(s1[c][key] - s0.get(c, {}).get(key, 0) for c in s1 if c in where)
        counts["idle_entries"] = ss("goidle", cpus)
        counts["idle_entries_all"] = ss("goidle", set(s1))
        counts["wakeups_machine"] = ss("ttwu", cpus)
        counts["wakeups_machine_local"] = ss("ttwu_local", cpus)
        counts["run_delay_ns"] = ss("run_delay_ns", cpus)
    else:
        for k in ("idle_entries", "idle_entries_all", "wakeups_machine",
                  "wakeups_machine_local", "run_delay_ns"):
            counts[k] = None
        missing["idle_entries"] = ("no /proc/schedstat (CONFIG_SCHEDSTATS)" if not s1 else
                                   "schedstats off (kernel.sched_schedstats)")
    for name in IRQ_ROWS:
        i0, i1 = before["irq"].get(name), after["irq"].get(name)
        key = "ipi_" + name.lower()
        if i1 is None:
            counts[key] = None
            missing[key] = f"no {name} row in /proc/interrupts"
        else:
            counts[key] = sum(i1[c] - (i0 or {}).get(c, 0) for c in i1 if c in cpus)
    st0, st1 = before["stat"], after["stat"]
    tick = 1e9 / os.sysconf("SC_CLK_TCK")
    counts["host_busy_ns"] = int(sum(st1[c][0] - st0.get(c, (0, 0))[0] for c in st1
                                     if c in cpus) * tick)
    counts["host_idle_ns"] = int(sum(st1[c][1] - st0.get(c, (0, 0))[1] for c in st1
                                     if c in cpus) * tick)
    t0, t1 = before["taps"], after["taps"]
    counts["packets"] = sum(t1[i] - t0[i] for i in t1 if t1[i] is not None and
                            t0.get(i) is not None)
    v0, v1 = before["vqs"], after["vqs"]
    if v1 is None:
        for k in ("vq_kicks", "vq_poll_entries", "vq_poll_work", "vq_notify_work"):
            counts[k] = None
        missing["vq_kicks"] = "vhost_poll not loaded (its counters are the module's)"
    else:
        mine = [k for k in v1 if k[0] in pids]
        for key, col in (("vq_kicks", "kicks"), ("vq_poll_entries", "enters"),
                         ("vq_poll_work", "poll_work"), ("vq_notify_work", "notify_work")):
            counts[key] = sum(max(v1[k].get(col, 0) - (v0 or {}).get(k, {}).get(col, 0), 0)
                              for k in mine)
        counts["vq_rows"] = len(mine)
    w0, w1 = before["worker"], after["worker"]
    counts["poller_passes"] = (w1.get("passes", 0) - w0.get("passes", 0)) if w1 else None
    return counts, missing


def per_request(c):
    """The count vector per request, in bench_model's letters where one
    applies: E kicks (the guest's), Ev the module's, Hd/Hw/Hp wake-ups of
    the vCPU threads (the guest is the driver), vhost workers, polling
    threads, Sd/Sw/Sp their voluntary switches, R their remote wake-ups,
    Wr remote wake-ups of any task, IPI, I idle entries, X exits, C CPU us
    (every class and the host side), D run-queue wait us."""
    n = c.get("requests") or 0

    def per(x):
        return x / n if x is not None and n else None

    def cls(field, k):
        return per(c[field][k]) if c.get(field) is not None else None
    w = c.get("wakeups_machine")
    wl = c.get("wakeups_machine_local")
    rr = c.get("wakeups_remote")
    cpu = c.get("cpu_ns") or {}
    return {"E": per(c.get("guest_kicks")), "Ev": per(c.get("vq_kicks")),
            "Hd": cls("wakeups", "vcpu"), "Hw": cls("wakeups", "vhost"),
            "Hp": cls("wakeups", "poller"),
            "Sd": cls("voluntary_switches", "vcpu"), "Sw": cls("voluntary_switches", "vhost"),
            "Sp": cls("voluntary_switches", "poller"),
            "R": per(rr["vcpu"] + rr["vhost"] + rr["poller"]) if rr else None,
            "Wr": per(w - wl) if w is not None and wl is not None else None,
            "IPI": per(c["ipi_res"] + c["ipi_cal"])
            if c.get("ipi_res") is not None and c.get("ipi_cal") is not None else None,
            "I": per(c.get("idle_entries")), "X": per(c.get("exits")),
            "C": per(sum(cpu.values()) / 1000) if cpu else None,
            "D": per(c["run_delay_ns"] / 1000) if c.get("run_delay_ns") is not None else None}
