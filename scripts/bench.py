#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""vhost-poll benchmark: the part that runs in the guest, and the report.

  bench.py run OUT [--quick] [--reps N] [--stop-idle J] [--cells L] [--regimes R]
        in the guest: every cell and the probes; raw figures to OUT/raw.json
  bench.py report OUT [--command CMD]
        on the host: OUT/results.json, results.md, results.rst, chart.png,
        the table and the targets
  bench.py check OUT
        TAP: every run finished with sane figures (never a timing)

scripts/bench drives these; see scripts/bench --help.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model  # noqa: E402
import host_counts  # noqa: E402
from host_counts import tap_packets, worker_counters  # noqa: E402,F401

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(TOP, "bench", "vhost_bench")
NAP_COST = os.path.join(TOP, "bench", "nap_cost")
COST_PROBE = os.path.join(TOP, "bench", "cost_probe")
SCHEDSTATS = "/proc/sys/kernel/sched_schedstats"
# The naps the nap probe times (ns): what a hybrid poller would sleep
# through a gap of a few to a few tens of microseconds.
NAPS_NS = (1000, 5000, 20000)
PARAMS = "/sys/module/vhost_poll/parameters/"
WORKER = host_counts.WORKER
# --poll-in-worker: 0 gives every vCPU to the polling threads in the
# shared regime (poll_cpus), so that the thread polls on shared CPUs, for
# an A/B; 1 or None: the owner's worker polls there (no CPU given).
POLL_IN_WORKER = None
VQS = host_counts.VQS
NESTED = os.path.join(TOP, "scripts", "nested-guest")
TRAFFIC = os.path.join(TOP, "build", "nested", "guest_traffic")
GUEST_MODES = ("notify", "hooked", "poll")
# The nested guest's TCP cells (iperf3, Debian's; its server in the
# nested guest): tcp-rx the guest receiving, tcp-tx the guest sending.
# Their BATCH is the number of streams.
TCP_WORKLOADS = ("tcp-rx", "tcp-tx")
TCP_FIELDS = ("mbit_s", "retransmits", "empty_intervals")
# Tries of an iperf3 run whose server is still busy with the last one.
IPERF_TRIES = 5
# The nested boot takes 30 to 50 s under TCG within TCG.
BOOT_LIMIT_S = 600

MODES = ("notify", "hooked", "poll", "poll2", "pollall", "busyloop")
# Poll mode with two polling threads (poll_threads=2), on the cells with
# more than one device.
POLL_MODES = ("poll", "poll2")
# pollall: poll mode that keeps every queue it polls (poll_min_gain 0),
# on the rr cells: the latency polling can give, whatever it costs.
POLLING = POLL_MODES + ("pollall",)
# The modes with vhost_poll loaded.
LOADED = ("hooked",) + POLLING
# poll_min_gain's default, which every mode but pollall runs with.
MIN_GAIN = 16
# Where the cells run. shared: everything on every vCPU. core: the I/O
# core, at equal allocated cores: the drivers and the nested guests on
# all but the last vCPU in every mode; the polling threads on the last
# (poll_cpus) with the vhost workers of what they poll in the polling
# modes, and the workers free to use every vCPU in the others (the I/O
# CPU is paid for whether polling uses it or not). apart: as core, but
# the workers kept off the last vCPU in every mode (an owner whose
# cpuset excludes the I/O CPU; the core regime before the I/O core's).
# io: the workers on the last vCPU in every mode.
REGIMES = ("shared", "core", "apart", "io")
# What runs by default: io is on request (--regimes).
DEFAULT_REGIMES = ("shared", "core")
# The probes between repetitions (--probes): the thread going to sleep
# after the load, one busy device among idle polled ones, an empty
# visit's cost, one and two polling threads side by side, one polled rr device
# with and without OWNERLESS idle ownerless devices open, and the hook's
# cost.
PROBES = ("idle", "crowd", "visit", "threads", "ownerless", "hook", "nap", "cost", "trace")
# Only on request: 256 idle owners with nothing polled (poll_start_rate
# 0), the visit probe's 256-owner cell without polling, to tell whether
# the guest's RCU stalls after it come from polling
# (Documentation/results/2026-12-02-unpolled.rst).
EXTRA_PROBES = ("unpolled",)
# The visit probe's largest cell: idle polled vqs of one owner, then of
# as many owners. Under TCG that many owner processes leave the guest in
# RCU stalls after they exit, with polling off as well (the unpolled
# probe, Documentation/results/2026-12-02-unpolled.rst); there the
# many-owner cell has TCG_OWNERS.
MANY_VQS = 256
TCG_OWNERS = 64
# Idle devices the ownerless probe holds open with no owner (anyone who
# may open /dev/vhost-test can), and the threads that close them: each
# close waits for a grace period, and closes at once share them.
OWNERLESS = 1024
OWNERLESS_CLOSERS = 32
OWNERLESS_PAIRS = 3
# Idle polled vqs the threads probe shares between its threads.
THREADS_VQS = 32
# The regimes that give the polling threads the last vCPU (poll_cpus):
# core alone; io with the vhost workers, the I/O core of the seed's
# proposal ("the vhost thread serves multiple vms" there).
DEDICATED = ("core", "apart", "io")
# The cells the core regime runs when --cells does not say: every
# stream and rr cell and the nested guests' stream and rr; their TCP
# runs only in the shared regime unless --cells names them (about 10
# minutes more a regime under TCG).
CORE_CELLS = ("test:stream:*:*", "test:rr:*:*", "net:stream:*:*", "net:rr:*:*",
              "guest:stream:*:*", "guest:rr:*:*")
# The rate that polls under every workload here: one kick in a jiffy. A
# stream that the device keeps up with kicks rarely (event index), and
# a higher rate left such queues in notification mode.
POLL_RATE = 1
BUSYLOOP_US = 50
LAT_SUB = 16


def visit_cells(quick, accel):
    """The visit probe's cells, (idle polled vqs, owners), in order."""
    if quick:
        return [(1, 1), (4, 1), (4, 4)]
    many = MANY_VQS if accel == "kvm" else TCG_OWNERS
    cells = [(1, 1), (16, 1), (16, 16), (MANY_VQS, 1)]
    if many != MANY_VQS:
        cells.append((many, 1))
    return cells + [(many, many)]


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- guest side

def sh(*cmd):
    subprocess.run(cmd, check=True)


def loaded():
    return os.path.exists("/sys/module/vhost_poll")


def set_param(name, value):
    with open(PARAMS + name, "w") as f:
        f.write(f"{value}\n")


def cpulist(cpus):
    """A set of CPUs in the kernel's cpulist syntax: {0, 1, 2, 5} is "0-2,5"."""
    runs = []
    for c in sorted(cpus):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_cpulist(text):
    """The set of CPUs of a cpulist ("0-2,5"); empty for ""."""
    cpus = set()
    for part in filter(None, text.strip().split(",")):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def regime_cpus(regime, ncpus=None):
    """(the polling threads' CPUs, everything else's) in @regime, of @ncpus
    (this machine's by default): the last and the others in core, every one
    for both in shared."""
    cpus = set(range(ncpus or os.cpu_count()))
    last = {max(cpus)}
    return (last, cpus - last) if regime in DEDICATED else (cpus, cpus)


def poll_cpus(regime):
    """poll_cpus in @regime: the last vCPU in core; in shared, empty (the
    owners' workers poll), or every vCPU with --poll-in-worker 0."""
    if regime in DEDICATED:
        return cpulist(regime_cpus(regime)[0])
    return cpulist(range(os.cpu_count())) if POLL_IN_WORKER == 0 else ""


def enter_regime(regime, mode=None):
    """Start what follows (drivers, nested guests, generators) on @regime's
    CPUs for all but the polling threads, and return where the drivers and
    their vhost workers go in @mode, (drivers', workers'): workers_cpus().
    A child starts with the affinity of the thread that starts it, so this
    thread's is set (not a preexec_fn: that is not safe beside the run
    limit's timer)."""
    rest = regime_cpus(regime)[1]
    os.sched_setaffinity(0, rest)
    return rest, workers_cpus(regime, mode)


def workers_cpus(regime, mode, ncpus=None):
    """Where the vhost workers run in @regime and @mode: with the polling
    threads on the I/O CPU in io, and in core when @mode polls; on every
    vCPU in core otherwise (equal allocated cores); with the drivers in
    shared and apart."""
    io, rest = regime_cpus(regime, ncpus)
    if regime == "io" or (regime == "core" and mode in POLLING):
        return io
    return io | rest if regime == "core" else rest


def set_poll_cpus(regime):
    """Place the polling threads for @regime (poll_cpus; an empty list lets
    them run anywhere again). A module without poll_cpus (an older one,
    with --rev) runs the shared regime only."""
    want = poll_cpus(regime)
    try:
        with open(PARAMS + "poll_cpus") as f:
            had = f.read().strip()
    except FileNotFoundError:
        if want:
            raise SystemExit("the core regime needs vhost_poll's poll_cpus, which this "
                             "module has not: --regimes shared")
        return
    if had != want:
        set_param("poll_cpus", want)


def set_mode(mode, stop_idle, regime="shared"):
    """Load or unload vhost_poll for @mode, its threads placed for @regime."""
    want = mode in LOADED
    if not want and loaded():
        sh("rmmod", "vhost_poll")
    if want and not loaded():
        # Placed from the start in the core regime.
        cpus = [f"poll_cpus={poll_cpus(regime)}"] if poll_cpus(regime) else []
        sh("insmod", os.environ["VHOST_POLL_KO"], "poll_start_rate=0", *cpus)
    if want:
        set_poll_cpus(regime)
        set_param("poll_stop_idle", stop_idle)
        set_param("poll_threads", 2 if mode == "poll2" else 1)
        set_param("poll_min_gain", 0 if mode == "pollall" else MIN_GAIN)
        set_param("poll_start_rate", POLL_RATE if mode in POLLING else 0)


# ------------------------------------------------------- tasks and their CPUs

def comm(path):
    """The name of the task at @path (/proc/PID or /proc/PID/task/TID), or
    None when it is gone."""
    try:
        with open(path + "/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def threads_of(pid):
    """The threads of process @pid, as (its own, its vhost workers): tids;
    the workers are those named vhost-TID (vhost_task, TID its owner's
    thread). Empty when it is gone."""
    own, workers = [], []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return own, workers
    for tid in tids:
        name = comm(f"/proc/{pid}/task/{tid}")
        if name is not None:
            (workers if name.startswith("vhost-") else own).append(int(tid))
    return own, workers


def owned_tasks(pids):
    """The tasks that run for processes @pids, as (their threads, their vhost
    workers): the workers are their threads named vhost-PID, and any kernel
    thread of that name."""
    own, workers = [], []
    for pid in pids:
        o, w = threads_of(pid)
        own += o
        workers += w
    names = {f"vhost-{pid}" for pid in pids}
    workers += [int(p) for p in os.listdir("/proc") if p.isdigit() and comm(f"/proc/{p}") in names]
    return own, workers


def pin(tids, cpus):
    """Let tasks @tids run on @cpus only. A task gone, or one the kernel
    keeps where it is, is left: cpus_seen() records where each may run."""
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass


def pin_owned(pids, place):
    """pin() every task that runs for processes @pids (owned_tasks()): their
    own threads on @place[0], their vhost workers on @place[1]."""
    own, workers = owned_tasks(pids)
    pin(own, place[0])
    pin(workers, place[1])


def allowed(tid):
    """Where task @tid may run: Cpus_allowed_list of /proc/TID/status, or
    None when it is gone."""
    try:
        with open(f"/proc/{tid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def last_cpu(tid):
    """The CPU task @tid ran on last (field 39 of /proc/TID/stat), or None."""
    try:
        with open(f"/proc/{tid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def cpus_seen(pids):
    """Where the tasks of a run may run: the distinct Cpus_allowed_list of
    the threads of processes @pids ("drivers"), of their vhost workers
    ("workers") and of the polling threads ("pollers"; none without
    vhost_poll), and the CPUs the polling threads ran on last."""
    own, workers = owned_tasks(pids)
    pollers = worker_counters().get("pids", [])

    def lists(tids):
        return sorted({a for a in map(allowed, tids) if a is not None})
    return {"drivers": lists(own), "workers": lists(workers), "pollers": lists(pollers),
            "pollers_ran": sorted({c for c in map(last_cpu, pollers) if c is not None})}


def merge_cpus(seen):
    """cpus_seen() of a cell's runs in one: everything any of them saw."""
    out = {}
    for s in seen:
        for k, v in s.items():
            out.setdefault(k, set()).update(v)
    return {k: sorted(v) for k, v in out.items()}


def polled_vqs():
    """The vqs polled now, by every polling thread; -1 without the module."""
    c = worker_counters()
    return c.get("polled_vqs", -1)


def run_drivers(specs, limit_s, want_polled=0, cpus=None):
    """Start one driver per spec (a list of arguments), all set up before
    any starts, and start them together; returns their JSON figures, in
    order, how many vqs were polled at the start (waiting up to 2 s
    for @want_polled of them), and with @cpus where the tasks could run
    (cpus_seen(), after the measured second). With @cpus, every task of
    the drivers, their vhost workers too, is pinned there once they are set
    up (they start there already: enter_regime()). Raises RuntimeError
    when a driver fails; a driver still running after @limit_s seconds is
    killed."""
    procs = []
    timer = threading.Timer(limit_s, lambda: [p.kill() for p in procs])
    timer.start()
    try:
        for args in specs:
            procs.append(subprocess.Popen([DRIVER, "-s"] + args, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True))
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{' '.join(p.args)}: did not get ready")
        if cpus:
            pin_owned([p.pid for p in procs], cpus)
        # A driver is ready once its own kicks are served; the thread
        # may start polling its queue a moment later (with hundreds of
        # drivers, seconds later under TCG).
        deadline = time.monotonic() + 2 + want_polled / 32
        while (polled := polled_vqs()) < want_polled and time.monotonic() < deadline:
            time.sleep(0.01)
        # Everyone starts at the same CLOCK_MONOTONIC instant, so that the
        # measured seconds overlap.
        start = time.monotonic_ns() + 100_000_000 + 10_000_000 * len(procs)
        for p in procs:
            p.stdin.write(f"go {start}\n")
            p.stdin.flush()
        out = []
        for p in procs:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{' '.join(p.args)}: printed no figures")
            out.append(json.loads(line))
        # The drivers hold their devices until stdin closes: all are there.
        seen = cpus_seen([p.pid for p in procs]) if cpus else None
        return out, polled, seen
    finally:
        timer.cancel()
        for p in procs:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
        for p in procs:
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
            if rc:
                log(f"{' '.join(p.args)}: exit {rc}")


TRACED = (("net", "notify"), ("net", "poll"), ("net", "busyloop"), ("test", "notify"),
          ("test", "poll"))
TRACE_EVENTS = ("sched/sched_waking", "sched/sched_switch", "ipi", "power/cpu_idle",
                "vhost_poller")


def tracefs():
    """Where tracefs is, mounting it if it is not: None without it."""
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.exists(d + "/trace"):
            return d
    if subprocess.run(["mount", "-t", "tracefs", "tracefs", "/sys/kernel/tracing"],
                      capture_output=True).returncode == 0:
        return "/sys/kernel/tracing"
    return None


def cost_probe(when):
    """cost_probe's lines, each tagged @when; an error line if it fails."""
    try:
        out = subprocess.run([COST_PROBE, "-n", "2000"], capture_output=True, text=True,
                             timeout=300, check=True)
        return [dict(json.loads(line), when=when) for line in out.stdout.splitlines()]
    except (subprocess.SubprocessError, OSError, ValueError) as e:
        return [{"error": f"cost_probe ({when}): {e}", "when": when}]


def trace_run(dev, mode):
    """A 250 ms request/response run of @dev in @mode, traced; its middle
    request's events (bench_model.trace_request())."""
    rec = {"device": dev, "mode": mode}
    t = tracefs()
    if not t:
        rec["error"] = "no tracefs"
        return rec

    def put(name, value):
        with open(f"{t}/{name}", "w") as f:
            f.write(value)
    events = [e for e in TRACE_EVENTS if os.path.exists(f"{t}/events/{e}/enable")]
    try:
        put("tracing_on", "0")
        put("buffer_size_kb", "4096")
        put("trace", "")
        for e in events:
            put(f"events/{e}/enable", "1")
        put("tracing_on", "1")
        out, _, _ = run_drivers([cell_args(dev, "rr", 1, mode, 50, 200)], 60)
        put("tracing_on", "0")
        with open(f"{t}/trace") as f:
            text = f.read()
    except (OSError, RuntimeError, ValueError) as e:
        rec["error"] = str(e)
        return rec
    finally:
        # Off again, whatever happened: the cells after must not pay.
        try:
            put("tracing_on", "0")
            for e in events:
                put(f"events/{e}/enable", "0")
            put("trace", "")
        except OSError as e:
            log(f"trace: cannot turn tracing off: {e}")
    req = bench_model.trace_request(text, out[0]["pid"], unkicked=mode != "notify")
    if req is None:
        rec["error"] = "the trace holds no whole request of the driver"
    else:
        rec.update(req)
    return rec


# The polling threads' counters a cell keeps, as they moved during it.
THREAD_DELTAS = ("yields", "yield_us", "refused", "passes", "naps", "nap_us",
                 "contended", "stalled")


def thread_deltas(before, after):
    """What THREAD_DELTAS moved between two worker_counters() reads (those
    the module shows)."""
    return {k: after[k] - before.get(k, 0) for k in THREAD_DELTAS if k in after}


def run_cell(raw, key, rec, specs, limit_s, want_polled=0, cpus=None):
    """run_drivers() for one record of raw[@key]; a failure is recorded
    with its reason, and the run goes on. The thread's counters that
    moved during the run (yields, refused starts, entries)
    are kept with it, and with @cpus where its tasks could run."""
    before = worker_counters()
    try:
        rec["drivers"], rec["polled_vqs_at_start"], seen = run_drivers(
            specs, limit_s, want_polled, cpus)
        if seen:
            rec["cpus"] = seen
    except (RuntimeError, ValueError, OSError) as e:
        log(f"error: {e}")
        rec["error"] = str(e)
    after = worker_counters()
    rec["worker"] = thread_deltas(before, after)
    if "threads" in after:
        rec["worker"]["threads"] = after["threads"]
    raw[key].append(rec)
    return rec


def open_ownerless(n):
    """@n file descriptors of /dev/vhost-test, opened and left without an
    owner (no VHOST_SET_OWNER): vhost-poll knows each device from its
    open()."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (want, hard if hard == resource.RLIM_INFINITY else max(hard, want)))
    fds = []
    try:
        for _ in range(n):
            fds.append(os.open("/dev/vhost-test", os.O_RDWR | os.O_CLOEXEC))
    except OSError:
        close_all(fds)
        raise
    return fds


def close_all(fds):
    """Close @fds, OWNERLESS_CLOSERS at a time: each close of a vhost
    device waits for a grace period, and closes at once share them."""
    def close_part(part):
        for fd in part:
            try:
                os.close(fd)
            except OSError as e:
                log(f"error: closing an idle device: {e}")

    parts = [fds[i::OWNERLESS_CLOSERS] for i in range(OWNERLESS_CLOSERS)]
    threads = [threading.Thread(target=close_part, args=(p,)) for p in parts if p]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def rotated(modes, gi, rep):
    """The modes of cell group @gi in repetition @rep: back to back, in an
    order that rotates from group to group and from repetition to
    repetition, so that drift in a shared machine's speed touches every
    mode alike."""
    k = (gi + rep) % len(modes)
    return modes[k:] + modes[:k]


def cell_args(dev, workload, batch, mode, warm, dur):
    args = ["-d", dev, "-w", workload, "-b", str(batch), "-W", str(warm), "-D", str(dur)]
    if mode == "busyloop":
        args += ["-B", str(BUSYLOOP_US)]
    return args


def cell_wanted(cells, dev, workload, batch, ndev):
    """Whether a cell matches one of @cells, "DEV:WORKLOAD:BATCH:NDEV"
    patterns whose fields may be "*" (all cells if @cells is empty)."""
    if not cells:
        return True
    have = (dev, workload, str(batch), str(ndev))
    return any(all(w in ("*", h) for w, h in zip(pat.split(":"), have))
               for pat in cells)


def regime_modes(regime, modes):
    """The modes of a cell in @regime: in core no hooked (the hook's cost
    is the hook-cost probe's, and nothing polls) and no poll2 (the polling
    threads have one core)."""
    return modes if regime == "shared" else tuple(m for m in modes
                                                  if m not in ("hooked", "poll2"))


def regime_groups(groups, regimes, core_cells):
    """Each cell group (DEV, WORKLOAD, BATCH, NDEV, modes) in each of
    @regimes, the regime put first: in core only the cells @core_cells
    matches that have notification mode to compare with."""
    out = []
    for g in groups:
        for regime in regimes:
            modes = regime_modes(regime, g[4])
            if regime == "shared" or ("notify" in modes and cell_wanted(core_cells, *g[:4])):
                out.append((regime,) + g[:4] + (modes,))
    return out


def rotations(groups):
    """Each group's index among its regime's groups: what rotated() turns
    its modes by, in the shared regime as before there were regimes."""
    seen, out = {}, []
    for g in groups:
        seen[g[0]] = seen.get(g[0], -1) + 1
        out.append(seen[g[0]])
    return out


def guest_run(out_dir, quick, reps, stop_idle, cells=(), regimes=DEFAULT_REGIMES,
              probes=PROBES, nested=True):
    if quick:
        warm, dur, idle_s, crowd = 100, 300, 1, 4
        reps = reps or 1
        groups = [("test", "stream", 16, 1, ("notify", "hooked", "poll")),
                  ("net", "rr", 1, 1, ("notify", "poll", "pollall", "busyloop")),
                  ("test", "stream", 1, 4, POLL_MODES),
                  ("guest", "stream", 1, 1, GUEST_MODES),
                  ("guest", "rr", 1, 1, GUEST_MODES),
                  ("guest", "tcp-rx", 4, 1, GUEST_MODES)]
        guest_ms = 500
    else:
        warm, dur, idle_s, crowd = 300, 1000, 10, 16
        reps = reps or 5
        groups = []
        for dev in ("test", "net"):
            for workload, batch in (("stream", 1), ("stream", 16), ("stream", 64), ("rr", 1)):
                for ndev in (1, 4, 16):
                    # Two polling threads where there is more than one
                    # device; always-poll for rr; vhost-net's busy loop
                    # for vhost-net.
                    modes = (("notify", "hooked", "poll") + (("poll2",) if ndev > 1 else ()) +
                             (("pollall",) if workload == "rr" else ()) +
                             (("busyloop",) if dev == "net" else ()))
                    if cell_wanted(cells, dev, workload, batch, ndev):
                        groups.append((dev, workload, batch, ndev, modes))
        # The nested guests: one boot per number of guests, every mode
        # and workload run underneath it.
        for workload in ("stream", "rr"):
            for ndev in (1, 2):
                if cell_wanted(cells, "guest", workload, 1, ndev):
                    groups.append(("guest", workload, 1, ndev, GUEST_MODES))
        # TCP both ways, one and four streams, one guest.
        for workload in TCP_WORKLOADS:
            for streams in (1, 4):
                if cell_wanted(cells, "guest", workload, streams, 1):
                    groups.append(("guest", workload, streams, 1, GUEST_MODES))
        guest_ms = 5000
        if not groups:
            raise SystemExit(f"--cells {','.join(cells)}: no cell matches")
    if not nested:
        groups = [g for g in groups if g[0] != "guest"]
    # The cells --cells names run in every regime; without it, the core
    # regime runs CORE_CELLS (every quick cell with --quick).
    groups = regime_groups(groups, regimes, () if quick else cells or CORE_CELLS)
    # vhost is a module in the x86_64 guest: vhost_test.ko needs it first.
    for mod in ("vhost", "vhost_net"):
        if not os.path.exists("/sys/module/" + mod):
            sh("modprobe", mod)
    sh("insmod", os.environ["VHOST_POLL_TEST_KO"])
    # The count vector's wake-ups and idle entries: schedstats, on for
    # every mode alike (CONFIG_SCHEDSTATS, off by default).
    try:
        with open(SCHEDSTATS, "w") as f:
            f.write("1")
    except OSError as e:
        log(f"no schedstats ({SCHEDSTATS}: {e}): the count vector lacks wake-ups")
    hz = 0
    with open(os.path.join(os.environ["VHOST_POLL_KDIR"], ".config")) as f:
        for line in f:
            if line.startswith("CONFIG_HZ="):
                hz = int(line.split("=")[1])
    raw = {"meta": {"env": os.environ.get("VHOST_POLL_ENV", "unknown"),
                    "accel": os.environ.get("VHOST_POLL_VM_ACCEL", "unknown"),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "kernel": os.uname().release, "ncpus": os.cpu_count(), "hz": hz,
                    "reps": reps, "warm_ms": warm, "duration_ms": dur,
                    "poll_start_rate": POLL_RATE, "poll_stop_idle": stop_idle,
                    "busyloop_us": BUSYLOOP_US, "quick": quick, "nested_guests": nested,
                    "idle_window_s": idle_s,
                    "regimes": list(regimes), "core_poll_cpus": poll_cpus("core"),
                    "probes": list(probes)},
           "cells": [], "idle": [], "crowd": [], "warmup": [], "hook": [], "visit": [],
           "nap": [], "cost": [], "trace": [],
           "threads": [], "ownerless": [], "unpolled": []}
    limit = (warm + dur) / 1000 + 60
    t_start = time.monotonic()
    # What each event costs, before the cells (and again after them:
    # TCG's speed drifts over a run; the model takes the mean).
    if "cost" in probes:
        set_mode("notify", stop_idle)
        log("event costs, before the cells")
        raw["cost"] = cost_probe("before")
    # Warm up first, discarded: under TCG the first run of each code path
    # pays for its translation.
    warm_modes = (("test", ("notify", "hooked", "poll", "poll2")),
                  ("net", ("notify", "hooked", "poll", "poll2", "busyloop")))
    for dev, modes in (() if quick else warm_modes):
        for mode in modes:
            set_mode(mode, stop_idle)
            log(f"warm-up {mode} {dev}")
            run_cell(raw, "warmup", {"device": dev, "mode": mode},
                     [cell_args(dev, wl, 16, mode, 0, 200) for wl in ("stream", "rr")], 60)
    # The modes of a cell run back to back, in an order that rotates, so
    # that drift in a shared machine's speed touches every mode alike.
    guest_groups = [g for g in groups if g[1] == "guest"]
    groups = [g for g in groups if g[1] != "guest"]
    ncells = sum(len(g[5]) for g in groups)
    for rep in range(reps):
        done = 0
        for gi, (regime, dev, workload, batch, ndev, modes) in zip(rotations(groups), groups):
            for mode in rotated(modes, gi, rep):
                done += 1
                cpus = enter_regime(regime, mode)
                set_mode(mode, stop_idle, regime)
                log(f"rep {rep + 1}/{reps} {mode:8} {dev:4} {workload:6} batch {batch:2} "
                    f"x{ndev:<2} {regime:6} ({done}/{ncells}, "
                    f"{time.monotonic() - t_start:.0f} s)")
                run_cell(raw, "cells", {"regime": regime, "device": dev, "workload": workload,
                                        "batch": batch, "mode": mode, "ndev": ndev, "rep": rep},
                         [cell_args(dev, workload, batch, mode, warm, dur)] * ndev, limit,
                         cpus=cpus)
        # The probes run in the shared regime.
        enter_regime("shared")
        # Idle probe: stream in poll mode, stop, watch the thread go to sleep.
        # The stream is kept polled (poll_min_gain 0): the probe measures
        # how the thread leaves poll mode once the load stops.
        # A run whose queue left poll mode before the probe began (the
        # driver was descheduled past poll_stop_idle while it drained) has
        # nothing to show: it is kept as left out, and the probe tried
        # again, three times at most.
        set_mode("poll", stop_idle)
        with open(PARAMS + "poll_min_gain") as f:
            min_gain = f.read().strip()
        set_param("poll_min_gain", 0)
        for attempt in range(3 if "idle" in probes else 0):
            log(f"rep {rep + 1}/{reps} idle probe ({idle_s} s, try {attempt + 1})")
            run_cell(raw, "idle", {"rep": rep, "try": attempt},
                     [cell_args("test", "stream", 16, "poll", warm, dur) +
                      ["-k", "64", "-I", str(idle_s)]],
                     limit + idle_s)
            if any(d.get("idle_polled_at_start", 0) > 0
                   for d in raw["idle"][-1].get("drivers", [])):
                break
        # One busy device among many polled ones, against it alone. The
        # idle ones enter poll mode with a burst and stay there: a long
        # poll_stop_idle keeps them polled, and poll_min_gain 0 keeps
        # them from being handed back (they save nothing: they are idle).
        # The probe measures what visiting polled queues costs.
        set_param("poll_stop_idle", 60 * hz)
        # Every device's worker may poll (the budget of polling workers
        # is one per CPU by default): a module without the budget has no
        # such parameter.
        budget = os.path.exists(PARAMS + "poll_max_workers")
        if budget:
            with open(PARAMS + "poll_max_workers") as f:
                max_workers = f.read().strip()
            set_param("poll_max_workers", crowd)
        busy = cell_args("test", "stream", 16, "poll", warm, dur) + ["-k", "64"]
        idle = ["-d", "test", "-w", "idle", "-W", str(warm), "-D", str(dur), "-k", "64"]
        for n in ((1, crowd) if "crowd" in probes else ()):
            log(f"rep {rep + 1}/{reps} one busy among {n} polled")
            run_cell(raw, "crowd", {"ndev": n, "rep": rep}, [busy] + [idle] * (n - 1), limit, n)
        if budget:
            set_param("poll_max_workers", max_workers)
        # What an empty visit costs: n idle polled vqs of one owner, then
        # of n owners (each visit entering another address space), as the
        # threads count it over the first driver's measured second.
        # Under TCG the many-owner cell has TCG_OWNERS, and one owner's
        # pass of as many vqs runs too, so that the two passes compare.
        for n, owners in visit_cells(quick, raw["meta"]["accel"]) if "visit" in probes else ():
            if n == TCG_OWNERS and owners > 1:
                log(f"rep {rep + 1}/{reps} visit cost: {TCG_OWNERS} owners, not "
                    f"{MANY_VQS}: under TCG {MANY_VQS} owners stall the guest's RCU "
                    f"with nothing polled (the unpolled probe)")
            log(f"rep {rep + 1}/{reps} visit cost: {n} idle vqs, {owners} owner(s)")
            specs = ([idle + ["-n", str(n - 1)]] if owners == 1 else [idle] * n)
            run_cell(raw, "visit", {"nvq": n, "owners": owners, "rep": rep}, specs,
                     limit + n / 4, n)
        # Polling threads side by side: THREADS_VQS idle polled vqs of one owner,
        # visited by one polling thread, then by two (poll_threads=2),
        # as the threads count their empty visits over the driver's
        # measured second. Two threads that wait for nothing of each other
        # make about twice the visits of one, where each has a vCPU.
        for threads in ((1, 2) if "threads" in probes else ()):
            log(f"rep {rep + 1}/{reps} threads: {THREADS_VQS} idle vqs, {threads} thread(s)")
            set_param("poll_threads", threads)
            run_cell(raw, "threads", {"threads": threads, "rep": rep},
                     [idle + ["-n", str(THREADS_VQS - 1)]], limit + THREADS_VQS / 4, THREADS_VQS)
        set_param("poll_threads", 1)
        # A pass costs the polled vqs only (issue 19, point 4): one polled
        # request/response device alone, and with OWNERLESS idle devices
        # open that nobody owns, in an order that alternates from one
        # repetition to the next.
        # Pairs of runs back to back, each pair a ratio: this machine's
        # speed drifts between runs further than the bound.
        for pair in range(OWNERLESS_PAIRS if "ownerless" in probes else 0):
            log(f"rep {rep + 1}/{reps} ownerless: rr x1 without and with {OWNERLESS} "
                f"idle devices open, pair {pair + 1}/{OWNERLESS_PAIRS}")
            for with_idle in (False, True) if (rep + pair) % 2 == 0 else (True, False):
                rec = {"idle_devs": OWNERLESS if with_idle else 0, "rep": rep, "pair": pair}
                try:
                    fds = open_ownerless(OWNERLESS) if with_idle else []
                except (OSError, ValueError) as e:
                    log(f"error: ownerless: {e}")
                    raw["ownerless"].append({**rec, "error": f"opening the idle devices: {e}"})
                    continue
                try:
                    run_cell(raw, "ownerless", rec,
                             [cell_args("test", "rr", 1, "poll", warm, dur)], limit, 1)
                finally:
                    close_all(fds)
        if "unpolled" in probes:
            log(f"rep {rep + 1}/{reps} unpolled: 256 idle owners, poll_start_rate 0")
            with open(PARAMS + "poll_start_rate") as f:
                rate = f.read().strip()
            set_param("poll_start_rate", 0)
            t0 = time.monotonic()
            rec = run_cell(raw, "unpolled", {"nvq": 256, "rep": rep}, [idle] * 256,
                           limit + 64)
            rec["seconds"] = time.monotonic() - t0
            set_param("poll_start_rate", rate)
        set_param("poll_stop_idle", stop_idle)
        set_param("poll_min_gain", min_gain)
        save(raw, out_dir)
    # The hook's cost: many short runs of the most kick-heavy cell
    # (vhost-test stream, batch 1, one device) without the module and with
    # it loaded at rate 0, a pair at a time, the order alternating; each
    # pair's ratio is one sample, so that drift in a shared machine's speed
    # cancels within a pair and shows as spread across pairs.
    npairs = (6 if quick else 40) if "hook" in probes else 0
    for i in range(npairs):
        order = ("notify", "hooked") if i % 2 == 0 else ("hooked", "notify")
        if i % 10 == 0:
            log(f"hook cost: pair {i + 1}/{npairs}")
        for mode in order:
            set_mode(mode, stop_idle)
            run_cell(raw, "hook", {"pair": i, "mode": mode},
                     [cell_args("test", "stream", 1, mode, 50, 250)], limit)
    # What a nap costs here: a poller that sleeps through part of a
    # request's gap (io_uring's hybrid poll) pays only if a nap of a few
    # microseconds ends a few microseconds late. Module loaded, nothing
    # polled, nothing else running.
    if "nap" in probes:
        set_mode("notify", stop_idle)
        log(f"nap cost: {', '.join(str(n) for n in NAPS_NS)} ns")
        try:
            out = subprocess.run([NAP_COST, "-n", "2000"] + [str(n) for n in NAPS_NS],
                                 capture_output=True, text=True, timeout=120, check=True)
            raw["nap"] = [json.loads(line) for line in out.stdout.splitlines()]
        except (subprocess.SubprocessError, OSError, ValueError) as e:
            raw["nap"] = [{"error": f"nap_cost: {e}"}]
    # What each event on a request's path costs here, for the cost
    # model: module loaded, nothing polled, nothing else running.
    if "cost" in probes:
        set_mode("notify", stop_idle)
        log("event costs: eventfd write, local, cross-mm and remote wake-ups")
        raw["cost"] += cost_probe("after")
    # One request's path, traced: a short rr run per mode with the
    # scheduler's, the IPIs' and idle's events on.
    for dev, mode in TRACED if "trace" in probes else ():
        set_mode(mode, stop_idle)
        log(f"trace: {dev} rr x1 {mode}")
        raw["trace"].append(trace_run(dev, mode))
    save(raw, out_dir)
    if guest_groups:
        raw["meta"]["guest_ms"] = guest_ms
        raw["guest_boots"] = []
        t_guest = time.monotonic()
        guest_cells(raw, out_dir, guest_groups, reps, stop_idle, guest_ms, t_start)
        raw["meta"]["guest_seconds"] = round(time.monotonic() - t_guest, 1)
        save(raw, out_dir)
    set_mode("notify", stop_idle)
    raw["meta"]["seconds"] = round(time.monotonic() - t_start, 1)
    raw["meta"]["complete"] = True
    save(raw, out_dir)
    errors = sum("error" in c for k in ("cells", "idle", "crowd", "visit", "threads", "ownerless")
                 for c in raw.get(k, []))
    log(f"raw figures in {out_dir}/raw.json after {raw['meta']['seconds']} s; "
        f"{errors} runs failed")


# ------------------------------------------------------- the nested guests

def sched_ns(path):
    """se.sum_exec_runtime of a task (its /proc/.../sched file), in ns, or
    None when it is gone."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("se.sum_exec_runtime"):
                    return int(float(line.split(":")[1]) * 1e6)
    except (OSError, ValueError):
        pass
    return None


def qemu_threads_ns(pid):
    """CPU time of a qemu process: (its vhost workers', the rest's), ns."""
    own, workers = threads_of(pid)
    if not own:
        return None, None

    def ns(tids):
        return sum(sched_ns(f"/proc/{pid}/task/{tid}/sched") or 0 for tid in tids)
    return ns(workers), ns(own)


def vq_rows():
    """The module's per-vq counters (debugfs vqs) by (pid, dev, vq), or
    None when it is not loaded."""
    try:
        with open(VQS) as f:
            names = f.readline().split()
            rows = [dict(zip(names, line.split())) for line in f]
    except OSError:
        return None
    out = {}
    for r in rows:
        try:
            out[(int(r["pid"]), int(r["dev"]), int(r["vq"]))] = {
                k: int(r[k]) for k in ("kicks", "enters") if k in r}
        except (KeyError, ValueError):
            continue
    return out


def guest_addr(i):
    return f"10.77.{i}.2/24"


def boot_guests(n, out_dir, boot_args=()):
    """Boot @n nested guests (scripts/nested-guest boot, with @boot_args),
    give their taps an address and wait until each generator answers.
    Returns the qemu processes and the seconds the boot took; raises
    RuntimeError."""
    procs = []
    t0 = time.monotonic()
    for i in range(n):
        console = os.path.join(out_dir, f"guest{i}.console")
        procs.append(subprocess.Popen([NESTED, "boot", "--index", str(i), *boot_args,
                                       "--console", console],
                                      stdin=subprocess.DEVNULL))
    try:
        for i in range(n):
            while not os.path.exists(f"/sys/class/net/vpg{i}"):
                if procs[i].poll() is not None:
                    raise RuntimeError(f"nested guest {i}: qemu exited ({procs[i].returncode})")
                if time.monotonic() - t0 > 120:
                    raise RuntimeError(f"nested guest {i}: no tap vpg{i} after 120 s")
                time.sleep(0.1)
            sh(TRAFFIC, "ifup", f"vpg{i}", f"10.77.{i}.1/24")
        for i in range(n):
            log(f"waiting for nested guest {i} to boot (30 to 50 s under TCG)")
            # Asked for 5 s at a time, so that a qemu that died is seen.
            while subprocess.run([TRAFFIC, "wait", guest_addr(i), "5000"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
                if procs[i].poll() is not None:
                    raise RuntimeError(f"nested guest {i}: qemu exited ({procs[i].returncode}) "
                                       f"before the generator answered; see guest{i}.console")
                if time.monotonic() - t0 > BOOT_LIMIT_S:
                    raise RuntimeError(f"nested guest {i}: no answer after {BOOT_LIMIT_S} s; "
                                       f"see guest{i}.console")
    except BaseException:
        stop_guests(procs)
        raise
    return procs, time.monotonic() - t0


def stop_guests(procs):
    for i, p in enumerate(procs):
        if p.poll() is None:
            subprocess.run([TRAFFIC, "off", guest_addr(i)], stdout=subprocess.DEVNULL)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def guest_figures(r, mode, before, after, wall_ns, vqs0, vqs1, pid):
    """One guest's run, in the shape of a vhost_bench driver's figures
    (see rep_figures) plus its own: packets for buffers."""
    secs = r["seconds"] or 1e-9
    rr = r["workload"] == "rr"
    # Packets the guest's virtio-net carried, both ways.
    posted = r["sent"] + (r["answered"] if rr else 0)
    done = 2 * r["answered"] if rr else r["received"]
    if rr:
        whole = r["lost"] == 0 and r["answered"] == r["sent"]
    else:
        whole = r["received"] == r["sent"]
    def pct(a, b):
        return 100 * (b - a) / wall_ns if a is not None and b is not None else -1
    d = {"posted": posted, "buffers_per_s": done / secs, "seconds": secs, "lat_hist": [],
         "kicks": max(r["rx_kicks"], 0) + max(r["tx_kicks"], 0),
         "p50_us": r["p50_ns"] / 1000 if rr and r["answered"] else None,
         "p99_us": r["p99_ns"] / 1000 if rr and r["answered"] else None,
         "poller_cpu_pct": pct(before["poller"], after["poller"]),
         "worker_cpu_pct": pct(before["workers"][pid], after["workers"][pid]),
         "driver_cpu_pct": pct(before["guest"][pid], after["guest"][pid]),
         "all_used_once": whole and r["send_errors"] == 0 and r["bad"] == 0,
         "guest": r}
    for k in TCP_FIELDS:
        if k in r:
            d[k] = r[k]
    if vqs0 is not None and vqs1 is not None:
        mine = [k for k in vqs1 if k[0] == pid]
        if not mine and mode != "notify":
            raise RuntimeError(f"qemu {pid}: no vhost virtqueue in {VQS}: vhost not in use?")
        delta = {k: {c: vqs1[k][c] - vqs0.get(k, {}).get(c, 0) for c in vqs1[k]} for k in mine}
        d["vq_kicks"] = sum(v["kicks"] for v in delta.values())
        d["vq_entries_per_s"] = [v["enters"] / secs for v in delta.values()]
    return d


def cpu_snapshot(procs):
    poller = None
    w = worker_counters()
    if w.get("pids"):
        ns = [sched_ns(f"/proc/{pid}/sched") for pid in w["pids"]]
        poller = None if None in ns else sum(ns)
    snap = {"poller": poller, "workers": {}, "guest": {}}
    for p in procs:
        snap["workers"][p.pid], snap["guest"][p.pid] = qemu_threads_ns(p.pid)
    return snap


def traffic_run(n, workload, ms):
    """guest_traffic's @workload on nested guests 0 to @n - 1 at once, for
    @ms: their JSON figures."""
    runs = [subprocess.Popen([TRAFFIC, "run", guest_addr(i), workload, str(ms)],
                             stdout=subprocess.PIPE, text=True) for i in range(n)]
    outs = []
    for i, r in enumerate(runs):
        out, _ = r.communicate(timeout=ms / 1000 + 60)
        if r.returncode or not out.strip():
            raise RuntimeError(f"guest_traffic run on guest {i}: exit {r.returncode}")
        outs.append(json.loads(out))
    return outs


def guest_kicks(i):
    """Nested guest @i's virtio-net kick counters: (rx, tx)."""
    out = subprocess.run([TRAFFIC, "kicks", guest_addr(i)], capture_output=True, text=True,
                         timeout=30)
    if out.returncode or not out.stdout.strip():
        raise RuntimeError(f"guest_traffic kicks on guest {i}: exit {out.returncode}")
    k = json.loads(out.stdout)
    return k["rx_kicks"], k["tx_kicks"]


def tcp_run(i, workload, streams, ms):
    """iperf3 against nested guest @i's server: @streams TCP streams for
    @ms, the guest receiving (tcp-rx) or sending (tcp-tx, -R), intervals
    of 0.5 s as the receiver measured them. Its figures in the shape of
    guest_traffic run's JSON (packets through the tap for buffers, the
    guest's kicks), with Mbit/s, the sender's retransmits and the
    receiver's intervals that carried nothing."""
    # Two seconds at least: a quick run's single second with four streams
    # under TCG within TCG once carried nothing the receiver counted in
    # poll mode (0.00 Mbit/s, its one interval empty, 311 packets through
    # the tap), and the check that iperf3 ran failed; a second is mostly
    # the streams' start.
    secs = max(2, round(ms / 1000))
    cmd = ["iperf3", "-c", guest_addr(i).split("/")[0], "-t", str(secs), "-P", str(streams),
           "-i", "0.5", "-J", "--get-server-output", "--connect-timeout", "10000"]
    # The server takes one test at a time, and under TCG within TCG it
    # may still be ending the last one (its socket refused, or reset):
    # that is tried again, a few times, before it counts as an error.
    for attempt in range(IPERF_TRIES):
        k0, p0 = guest_kicks(i), tap_packets(i)
        out = subprocess.run(cmd + (["-R"] if workload == "tcp-tx" else []),
                             capture_output=True, text=True, timeout=secs + 60)
        try:
            j = json.loads(out.stdout)
        except ValueError:
            raise RuntimeError(f"iperf3 to guest {i}: exit {out.returncode}, no JSON") from None
        busy = any(w in j.get("error", "") for w in ("unable to connect", "control message"))
        if not busy or attempt == IPERF_TRIES - 1:
            break
        time.sleep(2)
    if "error" in j:
        raise RuntimeError(f"iperf3 to guest {i}: {j['error']} ({attempt + 1} tries)")
    k1, p1 = guest_kicks(i), tap_packets(i)
    # The receiver's view: the client's with -R, the server's without.
    recv = j if workload == "tcp-tx" else j.get("server_output_json")
    if recv is None:
        raise RuntimeError(f"iperf3 to guest {i}: no server_output_json (server without -J?)")
    intervals = [iv["sum"]["bytes"] for iv in recv.get("intervals", [])]
    if not intervals:
        raise RuntimeError(f"iperf3 to guest {i}: no receiver intervals")
    packets = p1 - p0
    return {"workload": workload, "sent": packets, "received": packets, "answered": 0,
            "lost": 0, "seconds": j["end"]["sum_received"]["seconds"], "p50_ns": 0,
            "p99_ns": 0, "rx_kicks": k1[0] - k0[0], "tx_kicks": k1[1] - k0[1],
            "send_errors": 0, "bad": 0,
            "mbit_s": j["end"]["sum_received"]["bits_per_second"] / 1e6,
            "retransmits": j["end"]["sum_sent"].get("retransmits", 0),
            "empty_intervals": sum(1 for b in intervals if b == 0)}


def run_guest_cell(raw, rec, procs, workload, ms):
    """One workload on every nested guest at once; its figures, or the
    error, recorded in raw["cells"]."""
    w0 = worker_counters()
    vqs0 = vq_rows()
    before = cpu_snapshot(procs)
    counts0 = host_counts.snapshot(procs)
    t0 = time.monotonic_ns()
    try:
        if workload in TCP_WORKLOADS:
            outs = [tcp_run(i, workload, rec["batch"], ms) for i in range(len(procs))]
        else:
            outs = traffic_run(len(procs), workload, ms)
        wall = time.monotonic_ns() - t0
        after = cpu_snapshot(procs)
        counts1 = host_counts.snapshot(procs)
        vqs1 = vq_rows()
        rec["drivers"] = [guest_figures(o, rec["mode"], before, after, wall, vqs0, vqs1, p.pid)
                          for o, p in zip(outs, procs)]
        rec["counts"] = guest_counts(counts0, counts1, procs, rec["drivers"])
        rec["polled_vqs_at_start"] = 0
        rec["cpus"] = cpus_seen([p.pid for p in procs])
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        log(f"error: {e}")
        rec["error"] = str(e)
    w1 = worker_counters()
    rec["worker"] = thread_deltas(w0, w1)
    raw["cells"].append(rec)


def guest_counts(before, after, procs, drivers):
    """A guest cell's count vector per packet, counted as scripts/kvm-bench
    counts a host's: the nested guests' vCPU threads stand for the driver
    (Hd, Sd), their vhost workers (Hw, Sw), the polling threads (Hp, Sp);
    E the guests' kicks."""
    with open(SCHEDSTATS) as f:
        on = f.read().strip() == "1"
    counts, _ = host_counts.delta_counts(before, after, set(range(os.cpu_count())),
                                       {p.pid for p in procs}, on)
    counts["requests"] = sum(d["buffers_per_s"] * d["seconds"] for d in drivers)
    counts["guest_kicks"] = sum(d["kicks"] for d in drivers)
    counts["exits"] = None
    return host_counts.per_request(counts)


def guest_cells(raw, out_dir, groups, reps, stop_idle, ms, t_start):
    """The guest device: for each number of guests, one boot, and under it
    every workload in every mode (the module loaded, reloaded or its rate
    changed between runs: vhost shows it the devices already open), in
    every regime (every thread of the guests' qemu pinned anew)."""
    for n in sorted({g[4] for g in groups}):
        mine = [g for g in groups if g[4] == n]
        enter_regime("shared")
        set_mode("notify", stop_idle)
        log(f"booting {n} nested guest(s)")
        try:
            procs, boot_s = boot_guests(n, out_dir)
        except RuntimeError as e:
            log(f"error: {e}")
            for regime, _, workload, batch, _, modes in mine:
                for mode in modes:
                    raw["cells"].append({"regime": regime, "device": "guest",
                                         "workload": workload, "batch": batch, "mode": mode,
                                         "ndev": n, "rep": 0, "error": str(e)})
            continue
        log(f"{n} nested guest(s) answered after {boot_s:.1f} s")
        raw["guest_boots"].append({"ndev": n, "seconds": round(boot_s, 1)})
        # A first run of each workload, discarded: in a guest just booted
        # under TCG within TCG the first run of a code path is slow to
        # translate (a first command once went unanswered for 30 s).
        for workload in ("stream", "rr"):
            for i in range(n):
                subprocess.run([TRAFFIC, "run", guest_addr(i), workload, "200"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if any(g[2] in TCP_WORKLOADS for g in mine):
            subprocess.run(["iperf3", "-c", guest_addr(0).split("/")[0], "-t", "1",
                            "--connect-timeout", "30000"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        try:
            ncells = sum(len(g[5]) for g in mine) * reps
            done = 0
            for rep in range(reps):
                for gi, (regime, dev, workload, batch, _, modes) in zip(rotations(mine), mine):
                    for mode in rotated(modes, gi, rep):
                        pin_owned([p.pid for p in procs], enter_regime(regime, mode))
                        done += 1
                        set_mode(mode, stop_idle, regime)
                        log(f"rep {rep + 1}/{reps} {mode:8} guest {workload:6} x{n} {regime:6} "
                            f"({done}/{ncells}, {time.monotonic() - t_start:.0f} s)")
                        run_guest_cell(raw, {"regime": regime, "device": dev,
                                             "workload": workload, "batch": batch,
                                             "mode": mode, "ndev": n, "rep": rep},
                                       procs, workload, ms)
                save(raw, out_dir)
        finally:
            enter_regime("shared")
            set_mode("notify", stop_idle)
            stop_guests(procs)


def save(raw, out_dir):
    """Write what was measured so far: a failure late in a long run keeps
    the rest."""
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "raw.json.tmp")
    with open(tmp, "w") as f:
        json.dump(raw, f)
    os.replace(tmp, os.path.join(out_dir, "raw.json"))


# ----------------------------------------------------------------- host side

def bucket_mid_us(b):
    """The middle of latency bucket @b (see vhost_bench.c), in microseconds."""
    if b < LAT_SUB:
        return b / 1000
    e, m = b // LAT_SUB + 3, b % LAT_SUB
    low = (LAT_SUB + m) << (e - 4)
    return (low + (1 << (e - 4)) / 2) / 1000


def percentile_us(hist, q):
    total = sum(c for _, c in hist)
    if not total:
        return None
    seen = 0
    for b, c in sorted(hist):
        seen += c
        if seen * 100 >= total * q:
            return bucket_mid_us(b)
    return None


def jain(xs):
    s, s2 = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * s2) if s2 else None


def total_cpu(drivers, poller, loaded):
    """The CPU (% of one) of everything that ran for @drivers: themselves,
    their vhost workers and the polling threads (@poller; they count only
    where vhost_poll is @loaded, and must be known there). None when a
    part is not known."""
    own = [d[k] for d in drivers for k in ("driver_cpu_pct", "worker_cpu_pct")]
    if min(own) < 0 or (loaded and poller is None):
        return None
    return sum(own) + (poller or 0)


def rep_figures(drivers, loaded=False):
    """One repetition of one cell: the devices' figures combined (vhost_poll
    @loaded or not)."""
    posted = sum(d["posted"] for d in drivers)
    secs = statistics.mean(d["seconds"] for d in drivers)
    hist = {}
    for d in drivers:
        for b, c in d["lat_hist"]:
            hist[b] = hist.get(b, 0) + c
    hist = list(hist.items())

    def cpu(key, agg):
        v = [d[key] for d in drivers if d[key] >= 0]
        return agg(v) if v else None
    # A nested guest's generator gives its own percentiles: the guests'
    # are averaged (p50) and the worst taken (p99).
    p50 = [d["p50_us"] for d in drivers if d.get("p50_us") is not None]
    p99 = [d["p99_us"] for d in drivers if d.get("p99_us") is not None]
    vq_kicks = [d["vq_kicks"] for d in drivers if "vq_kicks" in d]
    entries = [e for d in drivers for e in d.get("vq_entries_per_s", [])]
    # vhost-poll's thread is one: each driver saw it over its window.
    poller = cpu("poller_cpu_pct", statistics.mean)
    buffers = sum(d["buffers_per_s"] for d in drivers)
    total = total_cpu(drivers, poller, loaded)
    return {
        "buffers_per_s": buffers,
        # Kicks go with posts: a buffer posted and kicked at the end of
        # the second may be used after it.
        "kicks_per_1000": 1000 * sum(d["kicks"] for d in drivers) / posted if posted else None,
        "lat_p50_us": percentile_us(hist, 50) if hist else statistics.mean(p50) if p50 else None,
        "lat_p99_us": percentile_us(hist, 99) if hist else max(p99) if p99 else None,
        # The guest device: kicks as vhost_poll's counters saw them, and
        # poll-mode entries a second of its busiest virtqueue.
        "vq_kicks_per_1000": (1000 * sum(vq_kicks) / posted
                              if vq_kicks and len(vq_kicks) == len(drivers) and posted else None),
        "entries_per_s_vq": max(entries) if entries else None,
        "poller_cpu_pct": poller,
        "workers_cpu_pct": cpu("worker_cpu_pct", sum),
        "driver_cpu_pct": cpu("driver_cpu_pct", sum),
        # All of it, and the work it did: buffers (packets, for the
        # nested guests) per CPU-second.
        "total_cpu_pct": total,
        "work_per_cpu": 100 * buffers / total if total else None,
        "jain": jain([d["buffers_per_s"] for d in drivers]) if len(drivers) > 1 else None,
        "all_used_once": all(d["all_used_once"] for d in drivers),
        # Hand-backs by vhost's watchdog (the polling thread off its CPU).
        "stalls": sum(d.get("stalls", 0) for d in drivers),
        "seconds": secs,
        # What a request costs in events (bench_model.py).
        "counts": bench_model.rep_counts(drivers),
        # The TCP cells: the guests' together.
        **{k: sum(d[k] for d in drivers) for k in TCP_FIELDS
           if all(k in d for d in drivers)},
    }


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


FIELDS = ("buffers_per_s", "kicks_per_1000", "lat_p50_us", "lat_p99_us",
          "poller_cpu_pct", "workers_cpu_pct", "driver_cpu_pct", "jain",
          "vq_kicks_per_1000", "entries_per_s_vq", "stalls", "total_cpu_pct", "work_per_cpu")


def summarise(raw, env, accel):
    groups, errors = {}, {}
    for c in raw["cells"]:
        # Raw figures of older runs have no regime: all were shared.
        key = (c.get("regime", "shared"), c["device"], c["workload"], c["batch"], c["mode"],
               c["ndev"])
        groups.setdefault(key, [])
        if "error" in c:
            errors.setdefault(key, []).append(c["error"])
        else:
            fig = rep_figures(c["drivers"], c["mode"] in LOADED)
            # A nested guest's vector is the cell's, not its drivers'.
            if c.get("counts") is not None:
                fig["counts"] = c["counts"]
            groups[key].append(dict(fig, cpus=c.get("cpus", {}), **{
                "worker_" + k: v for k, v in c.get("worker", {}).items()}))
    cells = []
    for key, reps in groups.items():
        regime, dev, wl, batch, mode, ndev = key
        rec = {"env": env, "accel": accel, "regime": regime, "device": dev, "workload": wl,
               "mode": mode, "ndev": ndev, "batch": batch}
        for k in FIELDS:
            v = median(r[k] for r in reps)
            rec[k] = round(v, 4) if v is not None else None
        for k in ("worker_refused", "worker_yields", "worker_yield_us"):
            if any(k in r for r in reps):
                rec[k] = median(r.get(k, 0) for r in reps)
        # The polling threads running at the end of the cell's runs.
        if any("worker_threads" in r for r in reps):
            rec["worker_threads"] = max(r.get("worker_threads", 0) for r in reps)
        # TCP: the median, and Mbit/s over the runs (run-to-run spread).
        for k in TCP_FIELDS:
            if reps and all(k in r for r in reps):
                rec[k] = round(median(r[k] for r in reps), 2)
        if "mbit_s" in rec:
            rec["mbit_s_range"] = [round(min(r["mbit_s"] for r in reps), 2),
                                   round(max(r["mbit_s"] for r in reps), 2)]
        rec["counts"] = bench_model.median_vectors(r.get("counts") for r in reps)
        rec["reps"] = len(reps)
        # Where its tasks could run, every run's together.
        rec["cpus"] = merge_cpus(r["cpus"] for r in reps)
        rec["all_used_once"] = all(r["all_used_once"] for r in reps)
        rec["errors"] = errors.get(key, [])
        cells.append(rec)
    for c in cells:
        if c["counts"]:
            bench_model.finish_vector(c, twin(cells, c, "notify"))
    idle = [d["drivers"][0] for d in raw["idle"] if "error" not in d]
    # A run whose load did not end in poll mode shows nothing.
    unpolled = sum(d["idle_polled_at_start"] < 1 for d in idle)
    idle = [d for d in idle if d["idle_polled_at_start"] >= 1]
    hz = raw["meta"]["hz"]
    probes = {
        "idle": {
            "cpu_pct": median(d["idle_cpu_pct"] if d["idle_cpu_pct"] >= 0 else None for d in idle),
            "sleep_ms": median(d["idle_sleep_ms"] if d["idle_sleep_ms"] >= 0 else None
                               for d in idle),
            "sleep_ms_max": max((d["idle_sleep_ms"] for d in idle), default=None),
            # Repetitions where the thread was never seen asleep.
            "never_asleep": sum(d["idle_sleep_ms"] < 0 for d in idle),
            "not_polled_at_end": unpolled,
            "bound_ms": (raw["meta"]["poll_stop_idle"] + 1) * 1000 / hz if hz else None,
            "window_s": raw["meta"]["idle_window_s"],
            "reps": len(idle),
            "errors": [d["error"] for d in raw["idle"] if "error" in d],
        },
    }
    ok = [c for c in raw["crowd"] if "error" not in c]
    alone = [c["drivers"][0]["buffers_per_s"] for c in ok if c["ndev"] == 1]
    crowd = [c for c in ok if c["ndev"] > 1]
    if alone and crowd:
        busy = median(c["drivers"][0]["buffers_per_s"] for c in crowd)
        probes["one_busy"] = {
            "ndev": crowd[0]["ndev"],
            "alone_buffers_per_s": median(alone),
            "crowd_buffers_per_s": busy,
            "ratio": busy / median(alone) if median(alone) else None,
            "polled_vqs_at_start": min(c["polled_vqs_at_start"] for c in crowd),
            # Hand-backs by vhost's watchdog over the crowd's runs: a
            # device it handed back before the start may be cooling down.
            "stalls": max(sum(d.get("stalls", 0) for d in c["drivers"]) for c in crowd),
            "errors": [c["error"] for c in raw["crowd"] if "error" in c],
        }
    vc = {}
    for c in raw.get("visit", []):
        d = (c.get("drivers") or [{}])[0]
        if "error" in c or not d.get("empty_visits"):
            continue
        vc.setdefault((c["nvq"], c["owners"]), []).append(
            (d["empty_visit_ns"] / d["empty_visits"], c["polled_vqs_at_start"],
             d.get("mm_switches", 0) / d["empty_visits"]))
    if raw.get("visit"):
        probes["visit_cost"] = [{
            "nvq": k[0], "owners": k[1], "ns": median(x[0] for x in v),
            "polled_vqs_at_start": min(x[1] for x in v), "reps": len(v),
            "switches_per_visit": median(x[2] for x in v),
        } for k, v in sorted(vc.items())]
        # A run that measured no empty visit: an error of its own, or
        # vqs not polled (or never idle) in its window.
        probes["visit_cost_errors"] = [
            c.get("error", f"{c['nvq']} vqs of {c['owners']} owner(s): no empty visit measured "
                           f"({c.get('polled_vqs_at_start')} polled at the start)")
            for c in raw["visit"]
            if "error" in c or not (c.get("drivers") or [{}])[0].get("empty_visits")]
    by_threads = {}
    for c in raw.get("threads", []):
        d = (c.get("drivers") or [{}])[0]
        if "error" in c or not d.get("empty_visits") or not d.get("seconds"):
            continue
        by_threads.setdefault(c["threads"], []).append(
            (d["empty_visits"] / d["seconds"], c["polled_vqs_at_start"],
             (c.get("worker") or {}).get("threads")))
    if raw.get("threads"):
        per = {t: {"visits_per_s": median(x[0] for x in v),
                   "polled_vqs_at_start": min(x[1] for x in v),
                   "threads_seen": min((x[2] for x in v if x[2] is not None), default=None),
                   "reps": len(v)} for t, v in sorted(by_threads.items())}
        one, two = per.get(1), per.get(2)
        probes["threads"] = {
            "nvq": THREADS_VQS, "per_threads": per,
            "ratio": (two["visits_per_s"] / one["visits_per_s"]
                      if one and two and one["visits_per_s"] else None),
            "errors": [c.get("error", f"{c['threads']} thread(s): no empty visit measured")
                       for c in raw["threads"]
                       if "error" in c or not (c.get("drivers") or [{}])[0].get("empty_visits")],
        }
    if raw.get("ownerless"):
        # Per pair, the rr p50 with the idle devices over the one without,
        # and each run's kicks per buffer: a polled queue's driver kicks
        # only until it is polled, one in notification mode kicks for
        # every request.
        by_pair = {}
        for c in raw["ownerless"]:
            d = (c.get("drivers") or [{}])[0]
            # A run without round trips prints a p50 of -1.
            if "error" in c or not (d.get("lat_p50_us") or 0) > 0 or not d.get("all_used_once"):
                continue
            by_pair.setdefault((c["rep"], c.get("pair", 0)), {})[c["idle_devs"] > 0] = (
                d["lat_p50_us"], d.get("kicks", 0) / d["buffers"] if d.get("buffers") else 1)
        pairs = [v for v in by_pair.values() if True in v and False in v]
        probes["ownerless"] = {
            "idle_devs": OWNERLESS,
            "alone_p50_us": median(v[False][0] for v in pairs) if pairs else None,
            "with_p50_us": median(v[True][0] for v in pairs) if pairs else None,
            "ratios": [v[True][0] / v[False][0] for v in pairs],
            "ratio": median(v[True][0] / v[False][0] for v in pairs) if pairs else None,
            "max_kicks_per_buffer": max((max(v[True][1], v[False][1]) for v in pairs),
                                        default=None),
            "reps": len(pairs),
            "pairs_wanted": raw["meta"]["reps"] * OWNERLESS_PAIRS,
            "errors": [c["error"] for c in raw["ownerless"] if "error" in c],
        }
    if raw.get("unpolled"):
        probes["unpolled"] = [{"rep": c["rep"], "seconds": c.get("seconds", 0),
                               "error": c.get("error")} for c in raw["unpolled"]]
    pc = [c for c in cells if c["mode"] in POLL_MODES and "worker_refused" in c]
    if pc:
        probes["poller"] = [{
            "cell": f"{c['device']} {c['workload']} batch {c['batch']} x{c['ndev']} {c['mode']}"
                    + regime_tag(c),
            "refused": c["worker_refused"], "yields": c["worker_yields"],
            "yield_ms": c["worker_yield_us"] / 1000} for c in sorted(pc, key=sort_key)]
    if raw.get("guest_boots"):
        probes["guest_boot"] = raw["guest_boots"]
        probes["guest_seconds"] = raw["meta"].get("guest_seconds")
    pairs = {}
    for c in raw.get("hook", []):
        if "error" not in c:
            pairs.setdefault(c["pair"], {})[c["mode"]] = c["drivers"][0]["buffers_per_s"]
    hr = sorted(p["hooked"] / p["notify"] for p in pairs.values()
                if p.get("notify") and p.get("hooked"))
    if hr:
        q = statistics.quantiles(hr, n=4) if len(hr) > 1 else [hr[0]] * 3
        probes["hook"] = {
            "pairs": len(hr), "median": statistics.median(hr),
            "q1": q[0], "q3": q[2], "min": hr[0], "max": hr[-1],
            "errors": [c["error"] for c in raw.get("hook", []) if "error" in c],
        }
    if raw.get("nap"):
        probes["nap"] = {
            "naps": [n for n in raw["nap"] if "error" not in n],
            "errors": [n["error"] for n in raw["nap"] if "error" in n],
        }
    if raw.get("trace"):
        probes["trace"] = raw["trace"]
    if raw.get("cost"):
        one = [v for v in probes.get("visit_cost", []) if v["nvq"] == 1 and v["owners"] == 1]
        probes["cost"] = {
            "probes": [c for c in raw["cost"] if "error" not in c],
            "errors": [c["error"] for c in raw["cost"] if "error" in c],
            "constants": bench_model.constants(raw["cost"], one[0]["ns"] if one else None),
        }
    return cells, probes


def find(cells, **kw):
    for c in cells:
        if all(c[k] == v for k, v in kw.items()):
            return c
    return None


def twin(cells, c, mode):
    """Cell @c in @mode: the same devices and workload, in the same regime."""
    return find(cells, regime=c["regime"], device=c["device"], workload=c["workload"],
                batch=c["batch"], ndev=c["ndev"], mode=mode)


def regime_tag(c):
    """What tells a cell of the core regime in a sentence: " (core)"."""
    return "" if c["regime"] == "shared" else f" ({c['regime']})"


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def targets(cells, probes, model=None):
    """Each target of the issue: (name, figure, met); met None when not
    measured, or when its cells were not run (--cells, --regimes). The
    targets are the shared regime's but for those named "core:"."""
    out = []
    everything = cells
    cells = [c for c in everything if c["regime"] == "shared"]
    core = [c for c in everything if c["regime"] == "core"]
    io = [c for c in everything if c["regime"] == "io"]

    def add(name, vals, ok, ran=True):
        vals = [v for v in vals if v is not None]
        if not ran:
            out.append((name, "not run", None))
        elif not vals:
            out.append((name, "not measured", None))
        else:
            out.append((name, *ok(vals)))

    def picked(pool, mode, num_of):
        return [c for c in pool if c["mode"] == mode and num_of(c)]

    def vs(c, base, key):
        """Cell @c's @key over that of the same cell in mode @base."""
        b = twin(everything, c, base)
        return ratio(c[key], b[key]) if b else None

    def spread(vals):
        """Ratios in a few words: x0.90, or x0.90 to x1.10."""
        lo, hi = f"x{min(vals):.2f}", f"x{max(vals):.2f}"
        return lo if lo == hi else f"{lo} to {hi}"

    def ratios(name, mode, num_of, base, key, le, bound, pool=None):
        """A target on a ratio of @mode to @base (in the shared regime's
        cells, or @pool's), met when every cell meets it; the figure says
        in how many it does, and their spread."""
        mine = picked(cells if pool is None else pool, mode, num_of)
        vals = [v for v in (vs(c, base, key) for c in mine) if v is not None]
        if not vals:
            out.append((name, "not measured" if mine else "not run", None))
            return
        k = sum(v <= bound if le else v >= bound for v in vals)
        geo = math.exp(statistics.mean(math.log(v) for v in vals)) if min(vals) > 0 else 0
        out.append((name, f"met in {k} of {len(vals)} cells; geometric mean {geo:.2f}, "
                          f"range {min(vals):.2f} to {max(vals):.2f}", k == len(vals)))

    def jointly(name, mode, num_of, conds, info=None):
        """A target on several ratios of @mode to other modes in each cell
        @num_of picks (shared regime): @conds, (what, key, base, bound) each,
        a ratio of at most @bound; met in a cell when all are, and met when
        every cell is. The figure gives each ratio's spread, and the same
        for the regime @info's cells (for information)."""
        def rows(pool):
            rs = [[vs(c, base, key) for _, key, base, _ in conds]
                  for c in picked(pool, mode, num_of)]
            return [r for r in rs if None not in r]

        def text(rs):
            return ", ".join(f"{what} {spread([r[i] for r in rs])} of {base}'s"
                             for i, (what, _, base, _) in enumerate(conds))
        rs = rows(cells)
        if not rs:
            out.append((name, "not measured" if picked(cells, mode, num_of) else "not run",
                        None))
            return
        k = sum(all(v <= cond[3] for v, cond in zip(r, conds)) for r in rs)
        fig = f"met in {k} of {len(rs)} cells: {text(rs)}"
        irs = rows([c for c in everything if c["regime"] == info]) if info else []
        if irs:
            fig += f"; {info} regime: {text(irs)}"
        out.append((name, fig, k == len(rs)))

    # Issue 11's targets: poll mode never a loss with the default
    # settings, its gains kept where they are.
    # These are the vhost-test and vhost-net drivers' cells; the nested
    # guests have targets of their own, below.
    is_stream = lambda c: c["workload"] == "stream" and c["device"] != "guest"  # noqa: E731
    is_rr = lambda c: c["workload"] == "rr" and c["device"] != "guest"  # noqa: E731
    ratios("stream buffers/s poll/notify >= 1.0", "poll", is_stream, "notify",
           "buffers_per_s", False, 1.0)
    ratios("rr p50 poll/notify <= 0.70, one device", "poll",
           lambda c: is_rr(c) and c["ndev"] == 1, "notify", "lat_p50_us", True, 0.70)
    ratios("rr p50 poll/notify <= 1.0, 4 and 16 devices", "poll",
           lambda c: is_rr(c) and c["ndev"] > 1, "notify", "lat_p50_us", True, 1.0)
    # Two polling threads (poll_threads=2), on the 4- and 16-device cells.
    ratios("two threads: stream buffers/s poll2/notify >= 1.0", "poll2", is_stream, "notify",
           "buffers_per_s", False, 1.0)
    ratios("two threads: rr p50 poll2/notify <= 1.0", "poll2", is_rr,
           "notify", "lat_p50_us", True, 1.0)
    p = find(cells, device="net", workload="rr", ndev=4, mode="poll")
    b = find(cells, device="net", workload="rr", ndev=4, mode="busyloop")
    if p and b:
        add("net rr x4: poll p50 <= busyloop p50", [ratio(p["lat_p50_us"], b["lat_p50_us"])],
            lambda v: (f"{p['lat_p50_us']:.1f} vs {b['lat_p50_us']:.1f} us (x{v[0]:.2f})",
                       v[0] <= 1))
        pc = (p["poller_cpu_pct"] + p["workers_cpu_pct"]
              if p["poller_cpu_pct"] is not None and p["workers_cpu_pct"] is not None else None)
        add("net rr x4: poll+workers CPU <= busyloop workers CPU",
            [ratio(pc, b["workers_cpu_pct"])],
            lambda v: (f"{pc:.1f}% vs {b['workers_cpu_pct']:.1f}% (x{v[0]:.2f})", v[0] <= 1))
    else:
        out.append(("net rr x4: poll vs busyloop", "not run", None))
    # Latency against CPU: the default rules' latency near always-poll's
    # at a CPU near notification mode's, and the busy loop's latency
    # beaten at half its CPU. CPU is everything that ran for the devices.
    for n in (1, 4, 16):
        jointly(f"rr x{n}: poll p50 <= 1.15x pollall's, total CPU <= 1.25x notify's", "poll",
                lambda c, n=n: is_rr(c) and c["ndev"] == n,
                (("p50", "lat_p50_us", "pollall", 1.15),
                 ("CPU", "total_cpu_pct", "notify", 1.25)), info="core")
    jointly("net rr x16: poll p50 <= busyloop's, total CPU <= 1/2 of busyloop's", "poll",
            lambda c: c["device"] == "net" and c["workload"] == "rr" and c["ndev"] == 16,
            (("p50", "lat_p50_us", "busyloop", 1.0), ("CPU", "total_cpu_pct", "busyloop", 0.5)))
    # Work per CPU-second: polling pays for its CPU, and more than pays
    # where it saves kicks (notify's driver kicks once per 10 buffers).
    def kicky(c):
        n = twin(everything, c, "notify")
        return n is not None and (n["kicks_per_1000"] or 0) >= 100
    for tag, pool in (("", cells), ("core: ", core)) + ((("io: ", io),) if io else ()):
        ratios(f"{tag}work/CPU poll/notify >= 1.0, every cell", "poll", lambda c: True,
               "notify", "work_per_cpu", False, 1.0, pool)
        ratios(f"{tag}work/CPU poll/notify >= 1.25 where notify kicks >= 1 per 10 buffers",
               "poll", kicky, "notify", "work_per_cpu", False, 1.25, pool)
    h = probes.get("hook")
    if h:
        add("hook cost: median hooked/notify >= 0.98 (alternating pairs)", [h["median"]],
            lambda v: (f"x{v[0]:.3f} over {h['pairs']} pairs, quartiles x{h['q1']:.3f} to "
                       f"x{h['q3']:.3f}", v[0] >= 0.98))
    i = probes["idle"]
    add("idle: vhost-poll CPU < 0.1% over the window", [i["cpu_pct"]],
        lambda v: (f"{v[0]:.4f}% over {i['window_s']} s", v[0] < 0.1))
    if i["never_asleep"]:
        out.append(("idle: asleep within poll_stop_idle + 1 jiffies",
                     f"never seen asleep in {i['never_asleep']} of {i['reps']} runs", False))
    else:
        add("idle: asleep within poll_stop_idle + 1 jiffies", [i["sleep_ms_max"]],
            lambda v: (f"max {v[0]:.1f} ms, median {i['sleep_ms']:.1f} ms, bound "
                       f"{i['bound_ms']:.0f} ms", v[0] <= i["bound_ms"]))
    j = [c["jain"] for c in cells if c["mode"] in POLL_MODES and c["ndev"] == 16]
    add("16 devices polled: Jain's index >= 0.95", j,
        lambda v: (f"min {min(v):.3f}", min(v) >= 0.95), ran=bool(j))
    ob = probes.get("one_busy")
    add(f"one busy among {ob['ndev'] if ob else 16} polled >= 0.8 of alone",
        [ob["ratio"] if ob else None], lambda v: (f"{v[0]:.2f}", v[0] >= 0.8))
    ow = probes.get("ownerless")
    add(f"rr x1 with {OWNERLESS} idle ownerless devices: p50 <= 1.1x alone",
        [ow["ratio"] if ow else None],
        lambda v: (f"x{v[0]:.2f} (median of {ow['reps']} pairs, from "
                   f"{min(ow['ratios']):.2f} to {max(ow['ratios']):.2f})", v[0] <= 1.1),
        ran=bool(ow))
    # The nested guests (issue 11, point 6): kicks as the guest's
    # virtio-net counts them, the same counter in every mode.
    is_guest = lambda c: c["device"] == "guest"  # noqa: E731
    ratios("guest: kicks/1k poll <= 1/10 of notify", "poll", is_guest, "notify",
           "kicks_per_1000", True, 0.1)
    e = [c["entries_per_s_vq"] for c in cells
         if is_guest(c) and c["mode"] == "poll" and c["workload"] == "stream"]
    add("guest stream: poll entries/s per queue < 5", e,
        lambda v: (f"max {max(v):.2f} a second (busiest queue)", max(v) < 5), ran=bool(e))
    ratios("guest stream packets/s poll/notify >= 1.33 (proposal: +33%)", "poll",
           lambda c: is_guest(c) and c["workload"] == "stream", "notify",
           "buffers_per_s", False, 1.33)
    ratios("guest rr p50 poll/notify <= 0.70 (proposal: -30%)", "poll",
           lambda c: is_guest(c) and c["workload"] == "rr", "notify", "lat_p50_us", True, 0.70)
    # TCP in the nested guest (issue 19, point 6): poll mode stalls no
    # flow where notification mode did not, and its throughput is within
    # notification mode's own run-to-run spread of it, or above.
    tcp = [c for c in cells if c["workload"] in TCP_WORKLOADS and c["mode"] == "poll"]
    stalls, slower = [], []
    for c in tcp:
        n = twin(everything, c, "notify")
        if n is None or c.get("mbit_s") is None or n.get("mbit_s") is None:
            continue
        stalls.append((c["empty_intervals"] > 0 and n["empty_intervals"] == 0, c))
        lo, hi = n["mbit_s_range"]
        slower.append((c["mbit_s"] < n["mbit_s"] - (hi - lo), c["mbit_s"] / n["mbit_s"]))
    add("guest tcp: poll empties no interval notification mode filled",
        [len(stalls)] if stalls else [],
        lambda v: (f"{sum(s for s, _ in stalls)} of {v[0]} cells with an empty interval "
                   "only in poll mode", not any(s for s, _ in stalls)), ran=bool(tcp))
    add("guest tcp: poll Mbit/s >= notify's less notify's spread",
        [len(slower)] if slower else [],
        lambda v: (f"{sum(s for s, _ in slower)} of {v[0]} cells below; poll/notify "
                   + ", ".join(f"x{r:.2f}" for _, r in slower), not any(s for s, _ in slower)),
        ran=bool(tcp))
    # The core regime: the I/O core at equal allocated cores (the vhost
    # workers with the polling threads in poll mode, on every vCPU in
    # notification mode and the busy loop); the io regime, the workers on
    # the I/O CPU in every mode, is held to the same.
    for tag, pool in (("core", core),) + ((("io", io),) if io else ()):
        ratios(f"{tag}: rr p50 poll/notify <= 0.77, 1, 4 and 16 devices", "poll", is_rr,
               "notify", "lat_p50_us", True, 0.77, pool)
        ratios(f"{tag}: rr p50 poll/busyloop <= 1.0", "poll", is_rr,
               "busyloop", "lat_p50_us", True, 1.0, pool)
        ratios(f"{tag}: stream buffers/s poll/notify >= 1.0", "poll", is_stream, "notify",
               "buffers_per_s", False, 1.0, pool)
        ratios(f"{tag}: guest kicks/1k poll <= 1/10 of notify", "poll", is_guest, "notify",
               "kicks_per_1000", True, 0.1, pool)
        ratios(f"{tag}: guest packets/s poll/notify >= 1.0", "poll", is_guest, "notify",
               "buffers_per_s", False, 1.0, pool)
    count_targets(add, everything, model)
    return out


def is_count_target(name):
    """Whether target @name is in counts or the model, not a TCG time."""
    return name.startswith(("counts:", "model:", "equal cores:"))


def count_targets(add, cells, model):
    """The targets in counts and in the model's predictions (issue 38):
    what does not depend on the host. Named "counts:", "model:" and
    "equal cores:"; the others are TCG observations."""
    rr = [c for c in cells if c["workload"] == "rr" and c.get("counts") and
          c["regime"] == "shared" and c["device"] in ("test", "net")]

    def pairs(mode):
        out = []
        for c in rr:
            n = twin(cells, c, "notify")
            if c["mode"] == mode and n and n.get("counts"):
                out.append((c, n))
        return out

    def path(v):
        return sum(v.get(k) or 0 for k in ("Hd", "Hw", "Hp"))
    pp = pairs("poll")
    add("counts: rr poll kicks a request <= 1/10 of notify's", [len(pp)] if pp else [],
        lambda v: (", ".join(f"{c['device']} x{c['ndev']} {c['counts']['E']:.3f}/"
                             f"{n['counts']['E']:.3f}" for c, n in pp),
                   all(c["counts"]["E"] <= 0.1 * n["counts"]["E"] for c, n in pp)),
        ran=bool(pp))
    add("counts: rr poll host wake-ups on a request's path < notify's (Hd+Hw+Hp)",
        [len(pp)] if pp else [],
        lambda v: (", ".join(f"{c['device']} x{c['ndev']} {path(c['counts']):.2f}/"
                             f"{path(n['counts']):.2f}" for c, n in pp),
                   all(path(c["counts"]) < path(n["counts"]) - 0.5 for c, n in pp)),
        ran=bool(pp))
    core_rr = [c for c in cells if c["workload"] == "rr" and c.get("counts") and
               c["regime"] == "core" and c["mode"] == "poll" and c["device"] in ("test", "net")]
    add("counts: core rr poll worker wake-ups crossing CPUs a request <= 0.05 (Rw)",
        [len(core_rr)] if core_rr else [],
        lambda v: (", ".join(f"{c['device']} x{c['ndev']} {c['counts'].get('Rw') or 0:.3f}"
                             for c in core_rr),
                   all(c["counts"].get("Rw") is not None and c["counts"]["Rw"] <= 0.05
                       for c in core_rr)),
        ran=bool(core_rr))
    rows = [r for r in model or [] if not r["fitted"]]
    add("model: every rr cell's TCG p50 and CPU within 20%, or what it lacks named",
        [len(rows)] if rows else [],
        lambda v: (f"{sum(abs(r['p50_err']) <= bench_model.TOLERANCE for r in rows)} of {v[0]} "
                   f"p50s and {sum(abs(r['cpu_err']) <= bench_model.TOLERANCE for r in rows)} "
                   f"CPUs within 20%; {sum(bool(r['lacks']) for r in rows)} named",
                   all(not any("not explained" in w for w in r["lacks"]) for r in rows)),
        ran=bool(model))
    kv = []
    for r in rows:
        if r["mode"] != "poll" or r["regime"] != "shared":
            continue
        n = next((x for x in model if x["fitted"] and x["device"] == r["device"] and
                  x["regime"] == r["regime"] and x["ndev"] == r["ndev"]), None)
        if n:
            kv.append((r, n))
    add("model: KVM-predicted rr p50, poll below notify (whole range)",
        [len(kv)] if kv else [],
        lambda v: (", ".join(f"{r['cell']} {r['kvm']['p50_us'][0]:.1f}-"
                             f"{r['kvm']['p50_us'][1]:.1f} against "
                             f"{n['kvm']['p50_us'][0]:.1f}-{n['kvm']['p50_us'][1]:.1f} us"
                             for r, n in kv),
                   all(r["kvm"]["p50_us"][1] < n["kvm"]["p50_us"][0] for r, n in kv)),
        ran=bool(model))
    # A core given to polling is paid for, busy or idle: poll on its core
    # against notification mode whose workers may use every CPU (the core
    # regime's notify cells).
    eq = []
    for c in cells:
        if c["regime"] != "core" or c["mode"] != "poll" or c["workload"] != "rr":
            continue
        n = find(cells, regime="core", device=c["device"], workload="rr", batch=c["batch"],
                 ndev=c["ndev"], mode="notify")
        if n and c.get("counts") and n.get("counts"):
            eq.append((c, n))
    add("equal cores: rr poll on its core, host wake-ups a request < notify's on all CPUs",
        [len(eq)] if eq else [],
        lambda v: (", ".join(f"{c['device']} x{c['ndev']} {path(c['counts']):.2f}/"
                             f"{path(n['counts']):.2f}, remote {c['counts']['R'] or 0:.2f}/"
                             f"{n['counts']['R'] or 0:.2f}" for c, n in eq),
                   all(path(c["counts"]) < path(n["counts"]) - 0.5 for c, n in eq)),
        ran=bool(eq))


COLS = (("regime", "regime"), ("device", "device"), ("workload", "workload"),
        ("batch", "batch"), ("mode", "mode"), ("ndev", "devs"), ("buffers_per_s", "buffers/s"),
        ("kicks_per_1000", "kicks/1k"), ("lat_p50_us", "p50 us"), ("lat_p99_us", "p99 us"),
        ("poller_cpu_pct", "poller %"), ("workers_cpu_pct", "workers %"),
        ("driver_cpu_pct", "drivers %"), ("total_cpu_pct", "total %"),
        ("work_per_cpu", "buffers/CPU-s"), ("jain", "Jain"),
        ("vq_kicks_per_1000", "vq kicks/1k"), ("entries_per_s_vq", "entries/s/vq"))
TEXT_COLS = ("regime", "device", "workload", "mode")


def sort_key(c):
    return (REGIMES.index(c["regime"]), c["device"], c["workload"] != "stream", c["batch"],
            c["ndev"], MODES.index(c["mode"]))


def table_rows(cells):
    return [[fmt(c[k]) if k not in TEXT_COLS else c[k] for k, _ in COLS]
            for c in sorted(cells, key=sort_key)]


def lat_cpu_lines(cells):
    """The latency/CPU pair of each rr cell, a sentence each: every mode's
    p50 and p99, and the CPU of everything that ran for the devices."""
    groups = {}
    for c in sorted(cells, key=sort_key):
        if c["workload"] == "rr":
            groups.setdefault((c["regime"], c["device"], c["ndev"]), []).append(c)
    return [f"{dev} rr x{n}, {regime}, p50/p99 at total CPU: " + "; ".join(
                f"{c['mode']} {fmt(c['lat_p50_us'], 1)}/{fmt(c['lat_p99_us'], 1)} us at "
                f"{fmt(c['total_cpu_pct'], 1)}%" for c in runs)
            for (regime, dev, n), runs in groups.items()]


def tcp_lines(cells):
    """The TCP cells, a sentence each: every mode's Mbit/s (median, and the
    runs' range), the sender's retransmits, the receiver's empty 0.5 s
    intervals, kicks per 1,000 packets and the CPU of everything."""
    groups = {}
    for c in sorted(cells, key=sort_key):
        if c["workload"] in TCP_WORKLOADS:
            groups.setdefault((c["regime"], c["workload"], c["batch"], c["ndev"]), []).append(c)
    return [f"guest {wl} x{n}, {streams} stream(s), {regime}: " + "; ".join(
                f"{c['mode']} {fmt(c.get('mbit_s'), 2)} Mbit/s "
                f"({'-'.join(fmt(v, 2) for v in c.get('mbit_s_range', []))}), "
                f"{fmt(c.get('retransmits'), 0)} retransmits, "
                f"{fmt(c.get('empty_intervals'), 0)} empty intervals, "
                f"{fmt(c['kicks_per_1000'], 1)} kicks/1k, {fmt(c['total_cpu_pct'], 1)}% CPU"
                for c in runs)
            for (regime, wl, streams, n), runs in groups.items()]


def chart(cells, meta, path):
    """The chart: stream throughput and rr latency by mode, a row of the
    two for each regime run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"notify": "#888888", "hooked": "#c9a227", "poll": "#1f77b4", "poll2": "#17becf",
               "pollall": "#9467bd", "busyloop": "#d62728"}
    regimes = [r for r in REGIMES if any(c["regime"] == r for c in cells)] or ["shared"]
    fig, axes = plt.subplots(len(regimes), 2, figsize=(13, 5 * len(regimes)), squeeze=False)
    for row, regime in zip(axes, regimes):
        chart_row(row, [c for c in cells if c["regime"] == regime], regime, colours)
    fig.suptitle(f"vhost-poll benchmark: {meta['env']} ({meta['accel']}), "
                 f"{meta['ncpus']} vCPUs, kernel {meta['kernel']}, median of {meta['reps']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def chart_row(axes, cells, regime, colours):
    """One regime's row of the chart: stream throughput, rr latency."""
    for ax, wl in zip(axes, ("stream", "rr")):
        batch = 16 if wl == "stream" else 1
        groups = sorted({(c["device"], c["ndev"]) for c in cells
                         if c["workload"] == wl and c["batch"] == batch})
        modes = [m for m in MODES if any(c["mode"] == m and c["workload"] == wl for c in cells)]
        width = 0.8 / max(len(modes), 1)
        for i, m in enumerate(modes):
            xs, ys, errs = [], [], []
            for g, (dev, n) in enumerate(groups):
                c = find(cells, device=dev, ndev=n, workload=wl, batch=batch, mode=m)
                if not c:
                    continue
                xs.append(g + (i - (len(modes) - 1) / 2) * width)
                if wl == "stream":
                    ys.append((c["buffers_per_s"] or 0) / 1000)
                else:
                    ys.append(c["lat_p50_us"] or 0)
                    errs.append(max((c["lat_p99_us"] or 0) - (c["lat_p50_us"] or 0), 0))
            if wl == "stream":
                ax.bar(xs, ys, width, label=m, color=colours[m])
            else:
                ax.bar(xs, ys, width, label=m, color=colours[m],
                       yerr=[[0] * len(errs), errs], capsize=2, ecolor="#333333")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"vhost-{d}\n{n} dev" if d != "guest" else f"nested\n{n} guest"
                            for d, n in groups])
        if wl == "stream":
            ax.set_title(f"{regime} regime: stream, batch 16: throughput (higher is better)")
            ax.set_ylabel("thousand buffers/s, all devices")
        else:
            ax.set_title(f"{regime} regime: rr: latency p50, whisker to p99 (lower is better)")
            ax.set_ylabel("round trip, us (log scale)")
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
        ax.legend()


def verdict(met):
    """A target's outcome in a word: met, missed, or - (not measured)."""
    return "-" if met is None else "met" if met else "missed"


def kick_cost_line(cells):
    """What a kick saved cost the polling thread, in each poll cell: its CPU
    (us a second) over the kicks a second poll mode saved against notify
    mode's kicks per 1,000 buffers, at poll mode's rate. Cheapest first;
    cells that saved none last. The figure a rule weighing what polling
    costs against what it saves would read."""
    rows, none = [], []
    for c in cells:
        n = twin(cells, c, "notify") if c["mode"] == "poll" else None
        if not n or c.get("poller_cpu_pct") is None or None in (
                c.get("kicks_per_1000"), n.get("kicks_per_1000"), c.get("buffers_per_s")):
            continue
        name = (f"{c['device']} {c['workload']} batch {c['batch']} x{c['ndev']}"
                f"{regime_tag(c)}")
        saved = (n["kicks_per_1000"] - c["kicks_per_1000"]) / 1000 * c["buffers_per_s"]
        if saved <= 0:
            none.append(name)
            continue
        rows.append((c["poller_cpu_pct"] * 1e4 / saved, name, saved, c["poller_cpu_pct"]))
    if not rows and not none:
        return None
    rows.sort()
    return ("what a saved kick cost the polling thread (its CPU over the kicks a second "
            "saved against notify mode): " + "; ".join(
                f"{name}: {fmt(us, 0)} us ({fmt(saved, 0)} kicks/s saved, "
                f"{fmt(pct, 1)}% CPU)" for us, name, saved, pct in rows)
            + (f"; none saved: {', '.join(none)}" if none else ""))


def probe_lines(probes, cells=()):
    """The probes' figures, a sentence each."""
    i = probes["idle"]
    out = [f"idle: vhost-poll CPU {fmt(i['cpu_pct'], 4)}% over {i['window_s']} s after the "
           f"load; asleep after {fmt(i['sleep_ms'], 1)} ms (max {fmt(i['sleep_ms_max'], 1)}, "
           f"bound poll_stop_idle + 1 jiffies = {fmt(i['bound_ms'], 0)} ms; {i['reps']} runs, "
           f"{i['not_polled_at_end']} left out: not polled when the load stopped)"]
    if probes.get("poller"):
        out.append("the thread in poll cells (median per run): " + "; ".join(
            f"{p['cell']}: {p['refused']:.0f} refused, {p['yields']:.0f} yields "
            f"({p['yield_ms']:.0f} ms)" for p in probes["poller"]))
    kc = kick_cost_line(cells)
    if kc:
        out.append(kc)
    nap = probes.get("nap")
    if nap:
        rr = find(cells, device="test", workload="rr", ndev=1, regime="shared", mode="poll")
        rt = (rr or {}).get("lat_p50_us")
        out.append("a nap (clock_nanosleep, no timer slack) took, p50 (p10 to p90): " + "; ".join(
            f"{fmt(n['ns'] / 1000)} us asked, {fmt(n['p50'] / 1000)} us "
            f"({fmt(n['p10'] / 1000)} to {fmt(n['p90'] / 1000)})" for n in nap["naps"])
            + (f"; poll mode's whole round trip, vhost-test rr x1: {fmt(rt)} us" if rt else ""))
        for e in nap["errors"]:
            out.append(f"nap cost not measured: {e}")
    h = probes.get("hook")
    if h:
        out.append(f"hook cost (vhost-test stream batch 1, one device; loaded at rate 0 "
                   f"against not loaded, {h['pairs']} alternating pairs): median "
                   f"x{h['median']:.3f}, quartiles x{h['q1']:.3f} to x{h['q3']:.3f}, "
                   f"range x{h['min']:.3f} to x{h['max']:.3f}")
    for b in probes.get("guest_boot", []):
        out.append(f"nested guests: {b['ndev']} booted and answering after {b['seconds']:.1f} s "
                   f"(qemu started to the generator's first answer)")
    if probes.get("guest_seconds"):
        out.append(f"the guest device took {probes['guest_seconds']:.0f} s in all "
                   f"(boots, runs, mode switches)")
    vcs = {(v["nvq"], v["owners"]): v for v in probes.get("visit_cost", [])}
    for (n, owners), v in sorted(vcs.items()):
        # Against one owner's with as many vqs (visit_cells() runs one
        # for every many-owner cell), or the nearest in number in a run
        # made before it did.
        ones = sorted((abs(k[0] - n), k[0]) for k in vcs if k[1] == 1)
        one = vcs.get((ones[0][1], 1)) if ones else None
        rel = ""
        if owners > 1 and one:
            rel = (f" (x{fmt(v['ns'] / one['ns'])} of one owner's"
                   + (f" with {one['nvq']} vqs" if one["nvq"] != n else "") + ")")
        out.append(f"an empty visit, {n} idle polled vqs of {owners} owner(s): "
                   f"{fmt(v['ns'])} ns{rel}, {fmt(v['switches_per_visit'])} address-space "
                   f"switches a visit; {v['polled_vqs_at_start']} polled at the start")
    for e in probes.get("visit_cost_errors", []):
        out.append(f"visit cost not measured: {e}")
    ln = probes.get("threads")
    if ln:
        per = ln["per_threads"]
        out.append(f"threads: {ln['nvq']} idle polled vqs of one owner, empty visits a second: "
                   + "; ".join(f"{t} thread(s) {fmt(v['visits_per_s'])} ({v['polled_vqs_at_start']} "
                               f"polled at the start, {v['threads_seen']} threads ran)"
                               for t, v in sorted(per.items(), key=lambda kv: int(kv[0])))
                   + (f"; two over one x{fmt(ln['ratio'])}" if ln["ratio"] else ""))
        for e in ln["errors"]:
            out.append(f"threads not measured: {e}")
    ow = probes.get("ownerless")
    if ow:
        out.append(f"ownerless: one polled rr device, p50 {fmt(ow['alone_p50_us'])} us alone, "
                   f"{fmt(ow['with_p50_us'])} us with {ow['idle_devs']} idle ownerless devices "
                   f"open (x{fmt(ow['ratio'])}, the median of {ow['reps']} pairs' ratios); "
                   f"{fmt(ow['max_kicks_per_buffer'])} kicks a request at most"
                   + "".join(f"; {e}" for e in ow["errors"]))
    for c in probes.get("unpolled", []):
        out.append(f"unpolled: 256 idle owners, nothing polled, rep {c['rep'] + 1}: "
                   f"{c['seconds']:.1f} s" + (f" ({c['error']})" if c.get("error") else ""))
    ob = probes.get("one_busy")
    if ob:
        out.append(f"one busy among {ob['ndev']} polled: {fmt(ob['crowd_buffers_per_s'])} "
                   f"buffers/s, alone {fmt(ob['alone_buffers_per_s'])} (x{fmt(ob['ratio'])}); "
                   f"{ob['polled_vqs_at_start']} vqs polled at the start, "
                   f"{ob.get('stalls', 0)} handed back by the watchdog")
    return out


def report(out_dir, command):
    with open(os.path.join(out_dir, "raw.json")) as f:
        raw = json.load(f)
    env, accel = raw["meta"]["env"], raw["meta"]["accel"]
    cells, probes = summarise(raw, env, accel)
    # The date of the run; raw figures of older runs lack it.
    meta = dict(raw["meta"], env=env, accel=accel, command=command, host_cpu=host_cpu())
    meta.setdefault("date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    consts = (probes.get("cost") or {}).get("constants")
    hz = raw["meta"].get("hz") or 250
    model = bench_model.model(sorted(cells, key=sort_key), consts,
                              {"busyloop": raw["meta"].get("busyloop_us", BUSYLOOP_US),
                               "poll": raw["meta"].get("poll_stop_idle", 2) * 1e6 / hz},
                              raw["meta"].get("ncpus"),
                              (raw["meta"].get("warm_ms", 0) + raw["meta"].get("duration_ms", 1000))
                              / 1000)
    tgt = targets(cells, probes, model)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "cells": sorted(cells, key=sort_key), "probes": probes,
                   "model": {"constants_tcg_us": consts, "rows": model,
                             "kvm_costs_us": bench_model.KVM_COSTS,
                             "tcg_inflation": bench_model.TCG_INFLATION,
                             "tolerance": bench_model.TOLERANCE,
                             "kick_cost_kvm_us": bench_model.kick_cost_default()},
                   "targets": [{"target": t, "figure": v, "met": m} for t, v, m in tgt]},
                  f, indent=1)
    head = [h for _, h in COLS]
    rows = table_rows(cells)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda r: "  ".join(v.rjust(w) for v, w in zip(r, widths))  # noqa: E731
    print(f"\nvhost-poll benchmark: {env} ({accel}), {meta['ncpus']} vCPUs, HZ={meta['hz']}, "
          f"kernel {meta['kernel']}, median of {meta['reps']}, {meta['duration_ms']} ms a run"
          + (f" ({meta['guest_ms']} ms for the nested guests)" if meta.get("guest_ms") else ""))
    print(f"regimes: {regime_text(meta)}")
    print(line(head))
    for r in rows:
        print(line(r))
    probe_text = probe_lines(probes, cells)
    lat_text = lat_cpu_lines(cells) + tcp_lines(cells)
    count_text = (bench_model.vector_lines(sorted(cells, key=sort_key)) + [""] +
                  bench_model.trace_lines(probes.get("trace")))
    model_text = bench_model.model_lines(model, consts)
    print()
    for t in probe_text + lat_text + [""] + count_text + [""] + model_text:
        print(t)
    for head_line, group in (("targets (counts and the model: host-independent):", True),
                             ("TCG observations (timings under TCG, not targets for a "
                              "real host):", False)):
        print("\n" + head_line)
        for t, v, m in tgt:
            if is_count_target(t) == group:
                print(f"  {verdict(m).upper() if m is False else verdict(m):6} {t}: {v}")

    md = [f"# vhost-poll benchmark results\n",
          f"- environment: `{env}`, accelerator **{accel}**, {meta['ncpus']} vCPUs, "
          f"HZ={meta['hz']}, kernel {meta['kernel']}",
          f"- host CPU: {meta['host_cpu']}",
          f"- command: `{command}`, {meta['date']}, {meta['seconds']} s in the guest",
          f"- each figure: the median of {meta['reps']} runs of {meta['duration_ms']} ms "
          f"(after {meta['warm_ms']} ms of warm-up); `poll` is poll_start_rate="
          f"{meta['poll_start_rate']}, poll_stop_idle={meta['poll_stop_idle']}; `busyloop` is "
          f"VHOST_SET_VRING_BUSYLOOP_TIMEOUT {meta['busyloop_us']} us; `pollall` is `poll` "
          "with poll_min_gain=0 (every polled queue kept)",
          f"- regimes: {regime_text(meta)}",
          "- CPU: % of one CPU, summed over the devices' workers and the drivers; "
          "from se.sum_exec_runtime in /proc/PID/sched; total % adds the polling threads, "
          "and buffers/CPU-s is buffers/s over that total",
          "- guest: nested guests on vhost-net (Documentation/benchmarks.rst, the guest "
          f"device), runs of {meta.get('guest_ms', '-')} ms; buffers/s is packets a second; "
          "drivers % is the nested guests' qemu, workers % their vhost threads\n",
          "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    md += ["", "## Probes", ""] + [f"- {t}" for t in probe_text]
    md += ["", "## Latency and CPU (rr)", ""] + [f"- {t}" for t in lat_text]
    md += ["", "## What a request costs: the count vector", "", "```"] + count_text + ["```"]
    md += ["", "## The cost model (TCG observations, KVM predictions)", "", "```"]
    md += model_text + ["```"]
    for title, group in (("Targets (counts and the model)", True),
                         ("TCG observations (timings, not targets for a real host)", False)):
        md += ["", f"## {title}", "", "| target | figure | |", "|---|---|---|"]
        md += [f"| {t} | {v} | {verdict(m)} |" for t, v, m in tgt if is_count_target(t) == group]
    md += ["", "![throughput and latency by mode](chart.png)", ""]
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(md))
    # The same, as reStructuredText for a file of Documentation/results/.
    rst = [".. csv-table:: Each figure the median of %d runs" % meta["reps"],
           "   :header: " + ", ".join(f'"{h}"' for h in head), ""]
    rst += ["   " + ", ".join(f'"{v}"' for v in r) for r in rows]
    rst += ["", ".. csv-table:: Targets", '   :header: "target", "figure", ""', ""]
    rst += [f'   "{t}", "{v}", "{verdict(m)}"' for t, v, m in tgt]
    with open(os.path.join(out_dir, "results.rst"), "w") as f:
        f.write("\n".join(rst) + "\n")
    chart(cells, meta, os.path.join(out_dir, "chart.png"))
    print(f"\nwrote {out_dir}/results.json, results.md, results.rst, chart.png")


def regime_text(meta):
    """The regimes of a run, in a sentence."""
    n = meta["ncpus"]
    last, rest = regime_cpus("core", n)
    text = {"shared": "shared (everything on every vCPU)",
            "core": f"core (the I/O core at equal allocated cores: the drivers and the "
                    f"nested guests on {cpulist(rest)}; the polling threads on vCPU "
                    f"{cpulist(last)}, poll_cpus, with the vhost workers in the polling "
                    f"modes; the workers on every vCPU in the others)",
            "apart": f"apart (the polling threads alone on vCPU {cpulist(last)}, poll_cpus; "
                     f"the drivers, their vhost workers and the nested guests on "
                     f"{cpulist(rest)}, in every mode)",
            "io": f"io (the polling threads and the vhost workers on vCPU {cpulist(last)}; "
                  f"the drivers and the nested guests on {cpulist(rest)}, in every mode)"}
    return "; ".join(text[r] for r in meta.get("regimes", ["shared"]))


def host_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


# ------------------------------------------------------------ sanity (TAP)

def check(out_dir):
    """TAP: a run produced sane figures. Never a timing."""
    results = []

    def ok(cond, what):
        results.append((bool(cond), what))
    path = os.path.join(out_dir, "results.json")
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        res = None
        ok(False, f"results.json readable ({e})")
    if res:
        ok(res["cells"], "results.json has cells")
        last, rest = regime_cpus("core", res["meta"]["ncpus"])
        for r in res["meta"].get("regimes", ["shared"]):
            ok(any(c.get("regime") == r for c in res["cells"]), f"the {r} regime has cells")
        for c in res["cells"]:
            name = (f"{c['device']} {c['workload']} batch {c['batch']} {c['mode']} x{c['ndev']}"
                    + regime_tag(c))
            fig = [c.get(k) for k in FIELDS if k != "jain"]
            finite = all(v is None or (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)
                         for v in fig)
            # A nested guest may kick both queues for one packet (send
            # it, refill the receive ring): 2,000 at most.
            kick_bound = 2000 if c["device"] == "guest" else 1000
            sane = (finite and c["buffers_per_s"] and c["buffers_per_s"] > 0 and
                    c["kicks_per_1000"] is not None and c["kicks_per_1000"] <= kick_bound and
                    c["driver_cpu_pct"] is not None and c["workers_cpu_pct"] is not None and
                    (c["poller_cpu_pct"] is not None) == (c["mode"] in LOADED))
            if c["workload"] == "rr":
                sane = sane and c["lat_p50_us"] and c["lat_p50_us"] <= c["lat_p99_us"]
            ok(sane and not c["errors"] and c["reps"] > 0,
               f"{name}: every run finished, figures present and in range"
               + (f" ({c['errors'][0]})" if c["errors"] else ""))
            # The CPU of everything that ran for the cell, and the work a
            # CPU-second did (latency against CPU, for rr: p50 above).
            ok(finite and c["total_cpu_pct"] and c["total_cpu_pct"] > 0 and
               c["work_per_cpu"] and c["work_per_cpu"] > 0,
               f"{name}: total CPU and work per CPU-second measured")
            if c["regime"] in DEDICATED:
                check_core_cpus(ok, name, c, last, rest)
            if c["workload"] in TCP_WORKLOADS:
                ok(c.get("mbit_s") and c["mbit_s"] > 0 and c.get("retransmits") is not None
                   and c.get("empty_intervals") is not None,
                   f"{name}: iperf3 ran: Mbit/s, retransmits and empty intervals measured")
            if c["device"] == "guest":
                ok(c["all_used_once"], f"{name}: no packet lost, every request answered")
                bad = bench_model.sane(c.get("counts"), guest=True)
                ok(not bad, f"{name}: count vector present and possible"
                   + (f" ({'; '.join(bad)})" if bad else ""))
                ok((c["vq_kicks_per_1000"] is not None) == (c["mode"] != "notify") and
                   (c["entries_per_s_vq"] is not None) == (c["mode"] != "notify"),
                   f"{name}: vhost_poll's per-vq counters read where it is loaded")
                continue
            ok(c["all_used_once"], f"{name}: every buffer used exactly once")
            bad = bench_model.sane(c.get("counts"))
            ok(not bad, f"{name}: count vector present and possible"
               + (f" ({'; '.join(bad)})" if bad else ""))
            if c["mode"] == "poll2":
                ok(c.get("worker_threads") == 2,
                   f"{name}: two polling threads ran (poll_threads=2): "
                   f"{c.get('worker_threads')}")
        ran = res["meta"].get("probes", PROBES)
        i = res["probes"]["idle"]
        ok("idle" not in ran or i["cpu_pct"] is not None and 0 <= i["cpu_pct"] <= 100 and i["sleep_ms"] is not None
           and not i["errors"], "idle probe: CPU and time to sleep measured")
        ob = res["probes"].get("one_busy")
        ok("crowd" not in ran or ob and ob["ratio"] and ob["ratio"] > 0 and not ob["errors"] and
           (ob["polled_vqs_at_start"] >= ob["ndev"] or ob.get("stalls", 0) > 0),
           "one-busy probe: every device polled at the start (or some handed back "
           "by the watchdog, counted), a ratio measured")
        vcs = res["probes"].get("visit_cost", [])
        ok("visit" not in ran or vcs and all(v["ns"] > 0 for v in vcs) and
           not res["probes"].get("visit_cost_errors"),
           "visit-cost probe: every run measured a cost of an empty visit")
        if "visit" in ran:
            # Every cell, of one owner and of many, with its switches: the
            # many-owner pass against one owner's of as many vqs.
            got = {(v["nvq"], v["owners"]): v for v in vcs}
            want = visit_cells(res["meta"].get("quick"), res["meta"]["accel"])
            ok(all(got.get(k) and got[k]["ns"] > 0 and
                   math.isfinite(got[k]["switches_per_visit"]) and
                   got[k]["switches_per_visit"] >= 0 for k in want),
               "visit-cost probe: every cell measured, with its address-space switches: "
               + ", ".join(f"{n} vqs of {o}" for n, o in want))
        if "threads" in ran:
            ln = res["probes"].get("threads")
            per = (ln or {}).get("per_threads", {})
            ok(ln and ln["ratio"] and ln["ratio"] > 0 and not ln["errors"] and
               (per.get("2") or per.get(2) or {}).get("threads_seen") == 2,
               "threads probe: one and two polling threads each measured empty visits, "
               "two threads ran")
        ow = res["probes"].get("ownerless")
        ok("ownerless" not in ran or ow and ow["reps"] > 0 and ow["ratio"] and ow["ratio"] > 0
           and ow["max_kicks_per_buffer"] is not None and ow["max_kicks_per_buffer"] < 0.5
           and not ow["errors"]
           and ow["reps"] == ow.get("pairs_wanted", ow["reps"]),
           "ownerless probe: every pair measured, the rr device polled in each run "
           "(fewer than one kick in two requests)")
        nap = res["probes"].get("nap")
        ok("nap" not in ran or nap and not nap["errors"] and
           len(nap["naps"]) == len(NAPS_NS) and
           all(n["ns"] <= n["p10"] <= n["p50"] <= n["p90"] for n in nap["naps"]),
           "nap probe: every nap timed, none shorter than asked")
        cost = res["probes"].get("cost") or {}
        k = cost.get("constants")
        ok("cost" not in ran or k and not cost["errors"] and
           len([p for p in cost["probes"] if "p50" in p]) == 10 and
           all(p["p10"] <= p["p50"] <= p["p90"] for p in cost["probes"] if "p50" in p) and
           k["raw"]["evfd"] > 0 and k["raw"]["wake_local"] > 0 and k["raw"]["wake_remote"] > 0,
           "cost probe: every event timed before and after the cells; a write, a wake-up "
           "and a remote wake-up each cost time")
        rr = [c for c in res["cells"] if c["workload"] == "rr" and c["device"] != "guest"]
        rows = res.get("model", {}).get("rows", [])
        modelled = {(r["device"], r["regime"], r["ndev"], r["mode"]) for r in rows}
        # A run whose cells hold no vhost-test or vhost-net rr cell (the
        # nested guests alone: --cells) has nothing to model.
        ok("cost" not in ran or (not rr and not rows) or rr and all(
            (c["device"], c["regime"], c["ndev"], c["mode"]) in modelled for c in rr) and
           all(math.isfinite(r["p50_model_us"]) and math.isfinite(r["cpu_model_pct"]) and
               math.isfinite(r["kvm"]["p50_us"][1]) for r in rows),
           "cost model: every rr cell modelled (TCG p50 and CPU), a KVM range predicted")
        tr = res["probes"].get("trace") or []
        ok("trace" not in ran or len(tr) == len(TRACED) and
           all("error" not in x and x["counts"]["driver_woken"] >= 1 for x in tr),
           "trace probe: one request traced in each mode, the driver's wake-up in it")
        h = res["probes"].get("hook")
        ok("hook" not in ran or h and h["pairs"] > 0 and all(math.isfinite(h[k]) and h[k] > 0
                                        for k in ("median", "q1", "q3")) and not h["errors"],
           "hook-cost probe: every pair ran, a median ratio measured")
        if any(c["device"] == "guest" for c in res["cells"]):
            gb = res["probes"].get("guest_boot", [])
            ok(gb and all(b["seconds"] > 0 for b in gb), "guest: the nested boot timed")
        ok(len(res["targets"]) >= 9 and all(t["met"] is not None for t in res["targets"]
                                            if t["figure"] not in ("not run", "not measured")),
           "targets evaluated")
    for name in ("results.md", "chart.png"):
        p = os.path.join(out_dir, name)
        head = b""
        if os.path.exists(p):
            with open(p, "rb") as f:
                head = f.read(8)
        ok(head.startswith(b"\x89PNG") if name.endswith(".png") else head.startswith(b"#"),
           f"{name} written")
    print("TAP version 13")
    print(f"1..{len(results)}")
    for n, (good, what) in enumerate(results, 1):
        print(f"{'ok' if good else 'not ok'} {n} bench: {what}")
    passed = sum(g for g, _ in results)
    print(f"vhost-poll: bench: {passed} passed, {len(results) - passed} failed, 0 skipped")
    return 0 if passed == len(results) else 1


def check_core_cpus(ok, name, c, last, rest):
    """TAP for a cell of a regime with a CPU for polling: its drivers (the
    nested guests' qemu threads) could run on @rest only, their vhost
    workers where workers_cpus() puts them, and the polling threads,
    where loaded, on @last only, and ran there."""
    seen = c.get("cpus", {})
    wcpus = workers_cpus(c["regime"], c["mode"], len(last | rest))

    def only(lists, cpus):
        return bool(lists) and all(parse_cpulist(x) == cpus for x in lists)
    ok(only(seen.get("drivers"), rest) and only(seen.get("workers"), wcpus),
       f"{name}: drivers on CPUs {cpulist(rest)} only, vhost workers on {cpulist(wcpus)} "
       f"(drivers {seen.get('drivers')}, workers {seen.get('workers')})")
    if c["mode"] in LOADED:
        ran = set(seen.get("pollers_ran", []))
        ok(only(seen.get("pollers"), last) and ran and ran <= last,
           f"{name}: the polling threads on CPU {cpulist(last)} only (poll_cpus; allowed "
           f"{seen.get('pollers')}, ran on {cpulist(ran) or 'none'})")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="in the guest: run the cells and probes")
    r.add_argument("out")
    r.add_argument("--quick", action="store_true")
    r.add_argument("--reps", type=int, default=0, help="repetitions (default 5; quick 1)")
    r.add_argument("--stop-idle", type=int, default=2, help="poll_stop_idle in poll mode")
    r.add_argument("--cells", default="",
                   help="only these cells: DEV:WORKLOAD:BATCH:NDEV,... (* for any)")
    r.add_argument("--regimes", default=",".join(DEFAULT_REGIMES),
                   help="where the cells run: shared, core, apart, io (default shared,core)")
    r.add_argument("--probes", default=",".join(PROBES),
                   help=f"the probes that run: {', '.join(PROBES + EXTRA_PROBES)} "
                        f"(default {', '.join(PROBES)})")
    r.add_argument("--no-guest", action="store_true",
                   help="no nested guest: vhost-test's and vhost-net's cells and the probes")
    r.add_argument("--poll-in-worker", type=int, choices=(0, 1), default=None,
                   help="0: every vCPU given to the polling threads in the shared "
                        "regime (the thread polls there); 1 (default): the workers")
    r = sub.add_parser("report", help="on the host: results, table, chart, targets")
    r.add_argument("out")
    r.add_argument("--command", default="make bench")
    r = sub.add_parser("check", help="TAP: the figures of a run are sane")
    r.add_argument("out")
    a = ap.parse_args()
    if a.cmd == "run":
        global POLL_IN_WORKER
        POLL_IN_WORKER = a.poll_in_worker
        regimes = [r for r in REGIMES if r in a.regimes.split(",")]
        if not regimes or set(a.regimes.split(",")) - set(REGIMES):
            ap.error(f"--regimes {a.regimes}: a comma-separated list of {', '.join(REGIMES)}")
        probes = [p for p in PROBES + EXTRA_PROBES if p in a.probes.split(",")]
        if set(p for p in a.probes.split(",") if p) - set(PROBES + EXTRA_PROBES):
            ap.error(f"--probes {a.probes}: a comma-separated list of "
                     f"{', '.join(PROBES + EXTRA_PROBES)}")
        guest_run(a.out, a.quick, a.reps, a.stop_idle,
                  [c for c in a.cells.split(",") if c], regimes, probes, not a.no_guest)
    elif a.cmd == "report":
        report(a.out, a.command)
    else:
        return check(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
