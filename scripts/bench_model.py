# SPDX-License-Identifier: GPL-2.0
"""What a request costs, in events and by a model: the count vector of each
cell of make bench, the cost model checked against the TCG figures of the
same run, and its prediction for KVM on a current x86 host.

Imported by scripts/bench.py; no kernel, no guest: pure arithmetic over
the drivers' "counts" (bench/vhost_bench.c) and the
cost_probe lines (bench/cost_probe.c).

The count vector, per request (per buffer for stream):
  E      kicks (eventfd writes by the driver; a VM exit each in a guest)
  Hd Hw Hp  wake-ups of the driver, of its device's vhost worker and of
         the polling threads (schedstats nr_wakeups)
  Sd Sw Sp  their sleeps (voluntary context switches): the cross-check
         of the wake-ups
  Q      handler runs queued by a polling thread (vhost_poll's counter:
         each one a wake-up of the worker unless it was running)
  R      wake-ups on the request's path sent from another CPU
         (nr_wakeups_remote of the driver, worker and polling threads)
  Rw     of those, the vhost workers' alone: none on an I/O core whose
         polling thread hands its CPU to the worker beside it
  Wr     wake-ups of any task on another CPU, whole machine
         (/proc/schedstat ttwu_count - ttwu_local)
  IPI    reschedule and function-call interrupts (/proc/interrupts)
  I      switches to the idle task, whole machine (/proc/schedstat
         sched_goidle): each one an idle exit later
  M      address-space switches of the polling threads per pass
  V      passes of the polling threads per kick saved
  S      CPU (us) per request beyond notification mode's: what polling
         costs; Ck that over the kicks it saves
  D      time (us) tasks waited on a run queue per request (schedstats
         run_delay): not an event, the contention the model leaves out
"""

# Published costs on a current x86 host, for the KVM prediction: each a
# range (low, high) in microseconds, with where it comes from. See
# Documentation/benchmarks.rst, "The KVM prediction", and shared/FACTS.md.
KVM_COSTS = {
    "exit": (0.8, 1.0, "VM exit and entry, simplest in-kernel exit: 2,500-3,000 cycles at "
                       "3 GHz, Skylake-SP and AMD (KVM fastpath threads, kvm list, 2020); an "
                       "ioeventfd MMIO kick costs about a PIO one (commit 68c3b4d1676d)"),
    "wake_remote": (2.8, 6.0, "wake-up to running on another CPU: 2.8 us bare metal, 6 us in a "
                              "VM (sched-pipe figures of the haltpoll/poll_idle threads)"),
    "wake_local": (2.1, 5.5, "derived: the remote wake-up (2.8-6 us) less sending its IPI "
                             "(1,600-2,000 cycles, 0.5-0.7 us)"),
    "idle_exit": (1.0, 10.0, "leaving C1 (1-2 us) to C1E (2-10 us), intel_idle.c exit "
                             "latencies; C6 adds 133-290 us (Skylake-X to Sapphire Rapids)"),
    "mm_switch": (0.05, 0.2, "an address-space switch with PCID: a CR3 write and the cache "
                             "lines of the other mm, 1-2 line transfers of 50-110 ns "
                             "(core-to-core latency tables)"),
}

# How much slower per-request work (the driver's post, the handler) runs
# under TCG than on a host: an assumption, 10 to 50 times, that the KVM
# run (scripts/kvm-bench) is there to check.
TCG_INFLATION = (10.0, 50.0)

# A thread that sleeps less than this often per request spins.
SPIN_SLEEPS = 0.05

# The model's tolerance against the TCG figures.
TOLERANCE = 0.20

VECTOR = ("E", "Hd", "Hw", "Hp", "Sd", "Sw", "Sp", "Q", "R", "Rw", "Wr", "IPI", "I", "M",
          "V", "S", "Ck", "D")


def _per(x, n):
    return x / n if x is not None and x >= 0 and n else None


def rep_counts(drivers):
    """One repetition's count vector from its drivers' "counts" (None where
    the drivers printed none: a nested guest, an old driver). Per-task
    counts are each driver's own, summed; whole-machine counts are the
    first driver's, over its window, scaled to all drivers' requests."""
    ks = [d.get("counts") for d in drivers]
    if not ks or any(k is None for k in ks):
        return None
    n = sum(d["buffers"] for d in drivers)
    if not n:
        return None

    def own(key):
        vals = [k.get(key, -1) for k in ks]
        return None if min(vals) < 0 else sum(vals)

    # Whole machine, and the polling threads: every driver saw the same
    # ones, over windows that overlap. The first driver's window, as a
    # rate, over the requests a second of all drivers.
    k0 = ks[0]
    rate = sum(d["buffers_per_s"] for d in drivers)
    secs = k0.get("window_ns", 0) / 1e9

    def machine(key):
        v = k0.get(key, -1)
        return v / secs / rate if v >= 0 and secs > 0 and rate > 0 else None

    def diff(a, b):
        return a - b if a is not None and b is not None else None
    remote = [own("driver_remote"), own("worker_remote"), machine("poller_remote")]
    vec = {
        "E": _per(sum(d["kicks"] for d in drivers), n),
        "Hd": _per(own("driver_wakeups"), n),
        "Hw": _per(own("worker_wakeups"), n),
        "Hp": machine("poller_wakeups"),
        "Sd": _per(own("driver_sleeps"), n),
        "Sw": _per(own("worker_sleeps"), n),
        "Sp": machine("poller_sleeps"),
        "Q": _per(own("queued"), n),
        "R": (None if None in remote[:2] else
              (remote[0] + remote[1]) / n + (remote[2] or 0)),
        # The vhost workers' wake-ups from another CPU alone: what the
        # I/O core removes from a request's path.
        "Rw": None if remote[1] is None else remote[1] / n,
        "Wr": diff(machine("wakeups"), machine("wakeups_local")),
        "IPI": (machine("res_ipis") + machine("cal_ipis")
                if machine("res_ipis") is not None and machine("cal_ipis") is not None
                else None),
        "I": machine("idle_entries"),
        # The polling threads' switches, as the first driver printed them
        # (its "mm_switches", over the same window).
        "M": (drivers[0]["mm_switches"] / k0["passes"]
              if k0.get("passes", -1) > 0 and drivers[0].get("mm_switches", -1) >= 0
              else None),
        "passes": machine("passes"),
        "poll_work": _per(own("poll_work"), n),
        "D": (machine("run_delay_ns") / 1000 if machine("run_delay_ns") is not None else None),
    }
    return vec


def median_vectors(vecs):
    """The median of each entry over repetitions."""
    vecs = [v for v in vecs if v]
    if not vecs:
        return None
    out = {}
    for k in vecs[0]:
        vals = sorted(v[k] for v in vecs if v.get(k) is not None)
        out[k] = vals[len(vals) // 2] if vals else None
    return out


def cpu_us(cell):
    """All CPU (us) one request of @cell took: drivers, workers, polling."""
    if cell.get("total_cpu_pct") is None or not cell.get("buffers_per_s"):
        return None
    return cell["total_cpu_pct"] / 100 * 1e6 / cell["buffers_per_s"]


def finish_vector(cell, notify):
    """The entries that compare @cell with its notification-mode twin
    @notify: S (CPU per request beyond notification mode's), V (passes
    per kick saved) and Ck (S per kick saved)."""
    v = cell.get("counts")
    if not v:
        return
    nv = (notify or {}).get("counts") or {}
    saved = (nv["E"] - v["E"]) if nv.get("E") is not None and v.get("E") is not None else None
    mine, theirs = cpu_us(cell), cpu_us(notify) if notify else None
    v["S"] = mine - theirs if mine is not None and theirs is not None else None
    v["saved"] = saved
    good = saved is not None and saved > 0.01
    v["V"] = v["passes"] / saved if good and v.get("passes") is not None else None
    v["Ck"] = v["S"] / saved if good and v["S"] is not None else None


COSTS = ("evfd", "wake_local", "wake_remote", "idle_exit", "mm_switch")


def constants(cost_lines, visit_ns=None):
    """The model's TCG constants (us) from cost_probe's lines (and the
    visit probe's empty visit, ns): each probe's p50, averaged where it
    ran more than once (before and after the cells: TCG's speed drifts),
    and the differences that make each constant. The model uses a
    negative difference (noise) as 0; "raw" keeps it. None when a probe
    is missing."""
    runs = {}
    for c in cost_lines:
        if "p50" in c:
            runs.setdefault(c["probe"], []).append(c["p50"] / 1000)
    p = {n: sum(v) / len(v) for n, v in runs.items()}
    need = ("evfd_write", "wake_local", "wake_local_mm", "wake_remote_idle", "wake_remote_busy")
    if any(k not in p for k in need):
        return None
    raw = {
        "evfd": p["evfd_write"],
        "wake_local": p["wake_local"] - p["evfd_write"],
        "wake_remote": p["wake_remote_busy"] - p["evfd_write"],
        "idle_exit": p["wake_remote_idle"] - p["wake_remote_busy"],
        "mm_switch": p["wake_local_mm"] - p["wake_local"],
    }
    k = {n: max(v, 0) for n, v in raw.items()}
    k["visit"] = (visit_ns or 0) / 1000
    k["raw"] = raw
    k["probes"] = p
    # How far the probes moved between their runs: the last over the
    # first, per probe.
    k["drift"] = {n: v[-1] / v[0] for n, v in runs.items() if len(v) > 1 and v[0] > 0}
    return k


def path_events(v):
    """The events on one request's path, from its count vector: (kicks,
    local wake-ups, remote wake-ups, idle entries, address-space
    switches, polled finds). None where a count is missing."""
    need = ("E", "Hd", "Hw", "R", "I")
    if not v or any(v.get(x) is None for x in need):
        return None
    wakes = v["Hd"] + v["Hw"] + (v.get("Hp") or 0)
    remote = min(v["R"], wakes)
    mm = (v.get("M") or 0) * (v.get("passes") or 0)
    return {"kicks": v["E"], "local": wakes - remote, "remote": remote, "idle": v["I"],
            "mm": mm, "found": v.get("poll_work") or 0}


def event_time(ev, k):
    """The time (us) @ev's events take with costs @k (TCG constants)."""
    return (ev["kicks"] * k["evfd"] + ev["local"] * k["wake_local"] +
            ev["remote"] * k["wake_remote"] + ev["idle"] * k["idle_exit"] +
            ev["mm"] * k["mm_switch"] + ev["found"] * k["visit"] / 2)


def spinners(cell):
    """Threads that spin through @cell's requests: a polling thread, or a
    vhost worker in vhost-net's busy loop, that sleeps less than once in
    twenty requests."""
    v = cell["counts"]
    n = 0
    if cell["mode"] in ("poll", "poll2", "pollall") and v.get("Sp") is not None:
        n += v["Sp"] < SPIN_SLEEPS
    if cell["mode"] == "busyloop" and v.get("Sw") is not None:
        n += cell["ndev"] * (v["Sw"] < SPIN_SLEEPS)
    return n


def spin_cpus(cell, spin_us):
    """The CPUs (1.0 each) @cell's polling spends spinning, from its sleeps:
    a thread that sleeps s times a request it serves spun through the gap
    between its requests (1 - s) of the time, and the s others through
    its spin before a sleep (@spin_us: vhost-net's busy-loop timeout, the
    polling thread's idle window) or the gap, if shorter. A polling
    thread serves every device's requests; a busy-looping worker its
    own device's."""
    v = cell["counts"]
    rate = cell.get("buffers_per_s") or 0
    if cell["mode"] in ("poll", "poll2", "pollall"):
        sleeps, spin = v.get("Sp"), spin_us.get("poll", 0)
        threads = cell.get("worker_threads") or 1
    elif cell["mode"] == "busyloop":
        sleeps, spin, threads = v.get("Sw"), spin_us.get("busyloop", 0), cell["ndev"]
    else:
        return 0.0
    if sleeps is None or not rate:
        return 0.0
    gap = 1e6 / rate * threads
    s = min(sleeps, 1.0)
    return threads * ((1 - s) + s * min(spin, gap) / gap)


def model(cells, k, spin_us=None, ncpus=None, run_s=1.0):
    """The model for every request/response cell with counts: its free
    per-request work W (latency) and Wc (CPU) fitted on the notification
    mode twin of the same device, regime and device count, the other
    modes predicted from their counts; @spin_us the spin before a sleep
    ({"busyloop": us, "poll": us}); the CPU predicted is at most @ncpus
    CPUs; @run_s is the length of a run (the counters' yields are a
    run's). Returns rows."""
    spin_us = spin_us or {}
    rows = []
    if not k:
        return rows
    rr = [c for c in cells if c["workload"] == "rr" and c.get("counts") and
          c["device"] in ("test", "net")]
    for c in rr:
        base = next((b for b in rr if b["mode"] == "notify" and b["device"] == c["device"] and
                     b["regime"] == c["regime"] and b["ndev"] == c["ndev"]), None)
        ev, bev = path_events(c["counts"]), path_events(base["counts"]) if base else None
        if not ev or not bev or not base.get("lat_p50_us") or cpu_us(base) is None:
            continue
        work = base["lat_p50_us"] - event_time(bev, k)
        # CPU: each event costs its time in CPU once; the spinners take a
        # whole CPU each.
        work_cpu = cpu_us(base) - event_time(bev, k)
        p50 = work + event_time(ev, k)
        rate = c["buffers_per_s"] or 0
        spin = spin_cpus(c, spin_us)
        cpu = rate * (work_cpu + event_time(ev, k)) / 1e4 + 100 * spin
        if ncpus:
            cpu = min(cpu, 100.0 * ncpus)
        row = {"cell": f"{c['device']} rr x{c['ndev']} {c['regime']}", "mode": c["mode"],
               "device": c["device"], "regime": c["regime"], "ndev": c["ndev"],
               "fitted": c is base, "events": ev, "work_us": work, "work_cpu_us": work_cpu,
               "visit_us": k["visit"],
               # The work a host runs faster: W less notification mode's
               # run-queue wait, which is queueing, not work.
               "kvm_work_us": max(work - (base["counts"].get("D") or 0), 0),
               "base_d_us": base["counts"].get("D"),
               "spinners": spinners(c), "spin_cpus": spin,
               "p50_us": c["lat_p50_us"], "p50_model_us": p50,
               "cpu_pct": c["total_cpu_pct"], "cpu_model_pct": cpu}
        row["p50_err"] = p50 / c["lat_p50_us"] - 1 if c["lat_p50_us"] else None
        row["cpu_err"] = (cpu / c["total_cpu_pct"] - 1) if c.get("total_cpu_pct") else None
        row["lacks"] = lacks(row, c, run_s)
        row["kvm"] = kvm_prediction(row, c)
        rows.append(row)
    return rows


def lacks(row, c, run_s=1.0):
    """What the model leaves out, where it misses a cell by more than the
    tolerance: each cause the figures show large enough to cover the
    miss, or "not explained by the counts" where none is."""
    out = []
    v = c["counts"]
    d = v.get("D")
    rate = c.get("buffers_per_s") or 0
    for name, err, got, want in (("p50", row["p50_err"], row["p50_us"], row["p50_model_us"]),
                                 ("CPU", row["cpu_err"], row["cpu_pct"], row["cpu_model_pct"])):
        if err is None or abs(err) <= TOLERANCE:
            continue
        why = []
        if row["work_us"] < 0:
            why.append(f"the counted events alone exceed notification mode's p50 "
                       f"(W = {row['work_us']:.1f} us): this boot's probe constants "
                       "overstate its events' cost")
        # Time on a run queue is a wait no event carries: it explains a
        # request slower than modelled by as much as itself.
        if name == "p50" and err < 0 and d is not None and d >= got - want:
            why.append(f"tasks waited {d:.1f} us a request on a run queue (a spinner "
                       "shares the vCPUs), not an event the model counts")
        # W, fitted on notification mode, carries its run-queue wait: a
        # mode that waits less is faster than modelled by the difference.
        base_d = row.get("base_d_us")
        if (name == "p50" and err > 0 and d is not None and base_d is not None and
                base_d - d >= want - got):
            why.append(f"notification mode's run-queue wait, which W carries, is "
                       f"{base_d - d:.0f} us a request longer than this mode's")
        # A spinner that waits to run, or steps aside, spins less than its
        # sleeps say: by the CPU of that wait.
        if name == "CPU" and err > 0 and row["spin_cpus"]:
            waited = d * rate / 1e4 if d is not None else 0
            aside = (c.get("worker_yield_us") or 0) / (run_s * 1e4)
            if waited >= want - got:
                why.append(f"tasks waited {waited:.0f}% of a CPU on run queues: a spinner "
                           "that waits to run spins less than its sleeps say")
            elif aside >= want - got:
                why.append(f"the polling thread stepped aside {aside:.0f}% of a CPU "
                           "for others: it did not spin a whole CPU")
        out.append(f"{name} off by {err * 100:+.0f}%: " +
                   ("; ".join(why) or "not explained by the counts"))
    return out


def kvm_prediction(row, c):
    """The same counts at a current x86 host's published costs: p50 as a
    range (low, high), the per-request work and a polled find's half
    visit taken as TCG's over TCG_INFLATION. The high end also counts as a wake-up
    across CPUs, with an idle exit, every handler run a polling thread
    queued that found its worker not yet asleep (Q - Hw): here the worker
    may share a vCPU with its driver; on a host it has a CPU of its own."""
    v = c["counts"]
    extra = max((v.get("Q") or 0) - (v.get("Hw") or 0), 0)
    lo_hi = []
    for i in (0, 1):
        cost = {n: KVM_COSTS[n][i] for n in KVM_COSTS}
        ev = dict(row["events"])
        if i:
            ev["remote"] += extra
            ev["idle"] += extra
        t = (ev["kicks"] * cost["exit"] + ev["local"] * cost["wake_local"] +
             ev["remote"] * cost["wake_remote"] + ev["idle"] * cost["idle_exit"] +
             ev["mm"] * cost["mm_switch"] +
             ev["found"] * row.get("visit_us", 0) / 2 / TCG_INFLATION[1 - i])
        work = row["kvm_work_us"] / TCG_INFLATION[1 - i]
        lo_hi.append(work + t)
    kick = kick_cost_default()
    return {"p50_us": lo_hi, "events_us": [lo_hi[0] - row["kvm_work_us"] / TCG_INFLATION[1],
                                           lo_hi[1] - row["kvm_work_us"] / TCG_INFLATION[0]],
            "spinning_cpus": row["spinners"], "kick_us": list(kick),
            "queued_unwoken": extra, "work_clamped": row["work_us"] < 0}


def kick_cost_default():
    """What a saved kick is worth on a current x86 host (us): the guest's
    exit and the host's wake-up of the worker on another CPU, and its
    idle exit at C1/C1E; the low and high of the published ranges."""
    return (KVM_COSTS["exit"][0] + KVM_COSTS["wake_remote"][0] + KVM_COSTS["idle_exit"][0],
            KVM_COSTS["exit"][1] + KVM_COSTS["wake_remote"][1] + KVM_COSTS["idle_exit"][1])


def sane(v, guest=False):
    """Whether count vector @v can be right: nothing negative,
    kicks at most one a buffer (two a packet for a nested @guest, which
    may kick both queues for one), each thread's wake-ups at most what
    its requests allow (not for a guest: its vCPUs halt and wake for
    timers too), every thread's wake-ups and sleeps in agreement.
    Returns a list of what is wrong."""
    bad = []
    if not v:
        return ["no counts"]
    for key in ("E", "Hd", "Hw", "Hp", "Sd", "Sw", "Sp", "Q", "R", "Rw", "Wr", "IPI", "I", "D"):
        if v.get(key) is not None and v[key] < 0:
            bad.append(f"{key} {v[key]:.3f} < 0")
    for key in ("E", "Hd", "Hw", "Sd", "Sw", "I"):
        if v.get(key) is None:
            bad.append(f"{key} not counted")
    if v.get("E") is not None and v["E"] > (2.05 if guest else 1.05):
        bad.append(f"E {v['E']:.3f} kicks a buffer > {2 if guest else 1}")
    # rr: one buffer in flight, the driver sleeps at most once a request
    # (on the call eventfd), the worker wakes at most once a kick or a
    # queued run, plus its other queue. Stream: at most once a buffer.
    for key in () if guest else ("Hd", "Hw"):
        if v.get(key) is not None and v[key] > 2.05:
            bad.append(f"{key} {v[key]:.3f} wake-ups a request > 2")
    if v.get("Q") is not None and v["Q"] > 2.05:
        bad.append(f"Q {v['Q']:.3f} queued runs a request > 2")
    # Every sleep ends in a wake-up, but for the edges of the window. Not
    # every wake-up ends a sleep: one that comes while its task, about to
    # sleep, is still on its CPU is counted (ttwu_runnable()) and no switch
    # follows, as when a worker that polls answers within microseconds.
    for whose, h, sl in (("driver's", "Hd", "Sd"), ("worker's", "Hw", "Sw"),
                         ("polling threads'", "Hp", "Sp")):
        if (v.get(h) is not None and v.get(sl) is not None and
                v[sl] - v[h] > 0.05 + 0.1 * max(v[h], v[sl])):
            bad.append(f"the {whose} wake-ups ({v[h]:.3f}) and sleeps ({v[sl]:.3f}) disagree")
    return bad


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def vector_lines(cells):
    """The count vector of every process-driven cell, a line each."""
    out = ["count vector per request (E kicks; Hd/Hw/Hp wake-ups of driver, worker, "
           "polling thread; Q queued runs; R remote path wake-ups; IPI; I idle entries; "
           "M mm switches/pass; V passes/saved kick; S CPU us beyond notify; "
           "Ck us/saved kick; D run-queue wait us):"]
    for c in cells:
        v = c.get("counts")
        if not v:
            continue
        tag = "" if c["regime"] == "shared" else f" [{c['regime']}]"
        out.append(f"  {c['device']} {c['workload']} b{c['batch']} x{c['ndev']} "
                   f"{c['mode']}{tag}: " +
                   " ".join(f"{x}={fmt(v.get(x), 3 if x in ('E', 'I', 'R') else 2)}"
                            for x in VECTOR))
    return out


def model_lines(rows, k):
    """The model table as text lines."""
    if not k:
        return ["cost model: no cost_probe figures (the cost probe did not run)"]
    out = ["cost model constants (TCG, this boot, us): " +
           ", ".join(f"{n} {k[n]:.2f}" for n in ("evfd", "wake_local", "wake_remote",
                                                   "idle_exit", "mm_switch", "visit")),
           "cost probe drift, after the cells over before: " +
           (", ".join(f"{n} x{r:.2f}" for n, r in sorted(k.get("drift", {}).items())) or "-"),
           "cost model, rr cells (W fitted on each notify cell; the others predicted):",
           "  cell | mode | p50 measured / model / error | CPU % measured / model / error | "
           "KVM p50 predicted (us)"]
    for r in rows:
        kv = r["kvm"]["p50_us"]
        if r["fitted"]:
            out.append(f"  {r['cell']}: W {r['work_us']:.1f} us a request"
                       + (" (negative: the events alone exceed the p50)"
                          if r["work_us"] < 0 else ""))
        out.append(f"  {r['cell']} | {r['mode']}{' (fit)' if r['fitted'] else ''} | "
                   f"{fmt(r['p50_us'], 1)} / {fmt(r['p50_model_us'], 1)} / "
                   f"{fmt(r['p50_err'] * 100 if r['p50_err'] is not None else None, 0)}% | "
                   f"{fmt(r['cpu_pct'], 0)} / {fmt(r['cpu_model_pct'], 0)} / "
                   f"{fmt(r['cpu_err'] * 100 if r['cpu_err'] is not None else None, 0)}% | "
                   f"{kv[0]:.1f}-{kv[1]:.1f}")
        for why in r["lacks"]:
            out.append(f"      lacks: {why}")
    lo, hi = kick_cost_default()
    out.append(f"a saved kick on a current x86 host: {lo:.1f}-{hi:.1f} us (exit, remote "
               "wake-up, C1/C1E exit): the limit poll_max_kick_cost is set against")
    return out


# ------------------------------------------------ one request, as traced

_TRACE_LINE = None


def _parse_trace(text):
    """The events of an ftrace text buffer: (ts_us, cpu, task, pid, event,
    fields), in time order."""
    import re
    global _TRACE_LINE
    if _TRACE_LINE is None:
        _TRACE_LINE = re.compile(r"^\s*(.+?)-(\d+)\s+(?:\(\s*[\d-]+\)\s+)?\[(\d+)\]\s+\S+\s+"
                                 r"([\d.]+):\s+(\w+):\s*(.*)$")
    out = []
    for line in text.splitlines():
        m = _TRACE_LINE.match(line)
        if not m:
            continue
        task, pid, cpu, ts, event, rest = m.groups()
        fields = dict(f.split("=", 1) for f in rest.split() if "=" in f)
        out.append((float(ts) * 1e6, int(cpu), task, int(pid), event, fields, rest))
    out.sort(key=lambda e: e[0])
    return out


def trace_request(text, pid, max_lines=40, unkicked=False):
    """One request of driver @pid, from an ftrace buffer of a request/
    response run: from the driver running (it has its answer, posts the
    next request and kicks) through its sleep to its running again with
    the next answer, every event on every CPU, and their counts
    (wake-ups, those to another CPU, switches, IPIs, idle entries). The
    request in the middle of the trace (with @unkicked, of those where the
    driver woke nobody, if any: a polled request, not one before the
    queue was polled); None if the trace holds none."""
    ev = _parse_trace(text)

    def runs(e):
        return e[4] == "sched_switch" and e[5].get("next_pid") == str(pid)
    sleeps = [i for i, e in enumerate(ev) if e[4] == "sched_switch" and
              e[5].get("prev_pid") == str(pid) and e[5].get("prev_state", "R")[:1] != "R"]
    spans = []
    for i in sleeps:
        h = next((h for h in range(i - 1, -1, -1) if runs(ev[h])), None)
        j = next((j for j in range(i + 1, len(ev)) if runs(ev[j])), None)
        if h is not None and j is not None:
            spans.append((h, j))
    if not spans:
        return None
    quiet = [(h, j) for h, j in spans
             if not any(e[4] == "sched_waking" and e[3] == pid for e in ev[h:j + 1])]
    if unkicked and quiet:
        spans = quiet
    i, j = spans[len(spans) // 2]
    span = ev[i:j + 1]
    t0 = span[0][0]
    counts = {"wakeups": 0, "wakeups_remote": 0, "switches": 0, "ipis": 0, "idle_entries": 0,
              "driver_woken": 0}
    lines = []
    for ts, cpu, task, tpid, event, f, rest in span:
        if event == "sched_waking":
            counts["wakeups"] += 1
            counts["driver_woken"] += f.get("pid") == str(pid)
            counts["wakeups_remote"] += int(f.get("target_cpu", cpu)) != cpu
        elif event == "sched_switch":
            counts["switches"] += 1
        elif event.startswith("ipi_"):
            counts["ipis"] += 1
        elif event == "cpu_idle" and f.get("state") != "4294967295":
            counts["idle_entries"] += 1
        if event == "sched_switch":
            rest = (f"{f.get('prev_comm')}/{f.get('prev_pid')} "
                    f"[{f.get('prev_state')}] => {f.get('next_comm')}/{f.get('next_pid')}")
        elif event == "sched_waking":
            rest = f"{f.get('comm')}/{f.get('pid')} on CPU {int(f.get('target_cpu', -1))}"
        lines.append(f"{ts - t0:9.1f} us  cpu{cpu}  {task}-{tpid}  {event}: {rest[:70]}")
    if len(lines) > max_lines:
        lines = lines[:max_lines // 2] + [f"   ... {len(lines) - max_lines} more ..."] + \
            lines[-max_lines // 2:]
    counts["us"] = span[-1][0] - t0
    counts["requests_traced"] = len(spans)
    return {"counts": counts, "lines": lines}


def trace_lines(traces):
    """The traced requests, a summary line each and then their events."""
    out = []
    for t in traces or []:
        if "error" in t:
            out.append(f"traced request, {t['device']} rr x1 {t['mode']}: {t['error']}")
            continue
        c = t["counts"]
        out.append(f"traced request, {t['device']} rr x1 {t['mode']}: {c['us']:.1f} us from "
                   f"the driver's sleep to its run; {c['wakeups']} wake-ups "
                   f"({c['wakeups_remote']} to another CPU), {c['switches']} switches, "
                   f"{c['ipis']} IPIs, {c['idle_entries']} idle entries")
        out += ["    " + x for x in t["lines"]]
    return out
