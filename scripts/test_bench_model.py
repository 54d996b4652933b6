# SPDX-License-Identifier: GPL-2.0
"""Host tests of scripts/bench_model.py: the count vector and the cost
model on drivers' records made here. Run: python3 -m unittest
scripts/test_bench_model.py (scripts/check's host step does)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model as bm  # noqa: E402


def driver(buffers=1000, secs=1.0, kicks=1000, **counts):
    """A vhost_bench record of @buffers over @secs with @counts."""
    base = {"window_ns": int(secs * 1e9), "driver_wakeups": buffers, "driver_remote": 0,
            "driver_sleeps": buffers, "worker_wakeups": buffers, "worker_remote": 0,
            "worker_sleeps": buffers, "poller_wakeups": -1, "poller_remote": -1,
            "poller_sleeps": -1, "idle_entries": 2 * buffers, "wakeups": 2 * buffers,
            "wakeups_local": 2 * buffers, "run_delay_ns": 0, "res_ipis": 0, "cal_ipis": 0,
            "passes": -1, "vq_kicks": -1,
            "poll_work": -1, "notify_work": -1, "queued": -1}
    mm = counts.pop("mm_switches", 0)
    base.update(counts)
    return {"buffers": buffers, "buffers_per_s": buffers / secs, "kicks": kicks,
            "seconds": secs, "mm_switches": mm, "counts": base}


PROBES = [{"probe": "evfd_write", "p10": 900, "p50": 1000, "p90": 1100},
          {"probe": "wake_local", "p10": 9000, "p50": 11000, "p90": 12000},
          {"probe": "wake_local_mm", "p10": 12000, "p50": 13000, "p90": 14000},
          {"probe": "wake_remote_idle", "p10": 50000, "p50": 61000, "p90": 70000},
          {"probe": "wake_remote_busy", "p10": 15000, "p50": 21000, "p90": 30000}]


class CountVector(unittest.TestCase):
    def test_per_request(self):
        v = bm.rep_counts([driver(buffers=2000, secs=2.0, kicks=500, worker_wakeups=1000,
                                  idle_entries=3000, wakeups=5000, wakeups_local=4000)])
        self.assertAlmostEqual(v["E"], 0.25)
        self.assertAlmostEqual(v["Hd"], 1.0)
        self.assertAlmostEqual(v["Hw"], 0.5)
        self.assertAlmostEqual(v["I"], 1.5)
        self.assertAlmostEqual(v["Wr"], 0.5)
        self.assertIsNone(v["Hp"])

    def test_switches_per_pass(self):
        v = bm.rep_counts([driver(passes=500, mm_switches=250)])
        self.assertAlmostEqual(v["M"], 0.5)
        self.assertIsNone(bm.rep_counts([driver()])["M"])

    def test_machine_counts_over_all_drivers(self):
        # Two drivers of 1000 requests a second each: the machine's
        # 4000 idle entries a second are 2 a request, not 4.
        v = bm.rep_counts([driver(idle_entries=4000), driver(idle_entries=4000)])
        self.assertAlmostEqual(v["I"], 2.0)
        self.assertAlmostEqual(v["Hd"], 1.0)

    def test_no_counts(self):
        d = driver()
        del d["counts"]
        self.assertIsNone(bm.rep_counts([d]))
        self.assertEqual(bm.sane(None), ["no counts"])

    def test_unknown_stays_unknown(self):
        v = bm.rep_counts([driver(driver_wakeups=-1)])
        self.assertIsNone(v["Hd"])
        self.assertIn("Hd not counted", bm.sane(v))

    def test_sane_catches_impossible(self):
        self.assertEqual(bm.sane(bm.rep_counts([driver()])), [])
        bad = bm.sane(bm.rep_counts([driver(kicks=3000)]))
        self.assertTrue(any("kicks a buffer" in b for b in bad), bad)
        bad = bm.sane(bm.rep_counts([driver(driver_wakeups=5000, driver_sleeps=5000)]))
        self.assertTrue(any("Hd" in b for b in bad), bad)
        bad = bm.sane(bm.rep_counts([driver(driver_wakeups=10)]))
        self.assertTrue(any("driver's wake-ups" in b for b in bad), bad)
        bad = bm.sane(bm.rep_counts([driver(worker_wakeups=400)]))
        self.assertTrue(any("worker's wake-ups" in b for b in bad), bad)
        bad = bm.sane(bm.rep_counts([driver(poller_wakeups=10, poller_sleeps=900)]))
        self.assertTrue(any("polling threads' wake-ups" in b for b in bad), bad)
        # A wake-up that found its task still on its CPU ends no sleep.
        self.assertEqual(bm.sane(bm.rep_counts([driver(driver_sleeps=400)])), [])

    def test_sane_for_a_nested_guest(self):
        # A guest may kick both queues for a packet, and its vCPU halts
        # and wakes for more than packets; its threads' wake-ups and
        # sleeps still agree.
        v = {"E": 1.6, "Hd": 5.0, "Hw": 1.0, "Sd": 5.1, "Sw": 1.0, "I": 3.0}
        self.assertEqual(bm.sane(v, guest=True), [])
        self.assertTrue(bm.sane(v))
        self.assertTrue(bm.sane(dict(v, E=2.5), guest=True))
        self.assertTrue(bm.sane(dict(v, Hd=1.0), guest=True))
        self.assertTrue(bm.sane(dict(v, I=-0.1), guest=True))

    def test_saved_kicks_and_cost(self):
        notify = {"counts": bm.rep_counts([driver()]), "total_cpu_pct": 100.0,
                  "buffers_per_s": 1000.0}
        poll = {"counts": bm.rep_counts([driver(kicks=0, passes=500, mm_switches=0)]),
                "total_cpu_pct": 200.0, "buffers_per_s": 1000.0}
        poll["counts"]["passes"] = 500.0
        bm.finish_vector(poll, notify)
        self.assertAlmostEqual(poll["counts"]["S"], 1000.0)
        self.assertAlmostEqual(poll["counts"]["Ck"], 1000.0)
        self.assertAlmostEqual(poll["counts"]["V"], 500.0)


class Model(unittest.TestCase):
    def cell(self, mode, p50, cpu, drivers):
        return {"device": "test", "workload": "rr", "regime": "shared", "ndev": 1, "batch": 1,
                "mode": mode, "lat_p50_us": p50, "total_cpu_pct": cpu,
                "buffers_per_s": drivers[0]["buffers_per_s"],
                "counts": bm.rep_counts(drivers)}

    def test_constants(self):
        k = bm.constants(PROBES, 800)
        self.assertAlmostEqual(k["evfd"], 1.0)
        self.assertAlmostEqual(k["wake_local"], 10.0)
        self.assertAlmostEqual(k["wake_remote"], 20.0)
        self.assertAlmostEqual(k["idle_exit"], 40.0)
        self.assertAlmostEqual(k["mm_switch"], 2.0)
        self.assertAlmostEqual(k["visit"], 0.8)
        self.assertIsNone(bm.constants(PROBES[:2]))

    def test_fit_and_predict(self):
        k = bm.constants(PROBES, 0)
        # notify: a kick, two local wake-ups, no idle entry: events 21 us,
        # so 100 us leaves 79 us of work.
        notify = self.cell("notify", 100.0, 10.0, [driver(idle_entries=0)])
        # The same work with no kick and one wake-up fewer: 79 + 10.
        fewer = self.cell("hooked", 89.0, 9.0, [driver(kicks=0, worker_wakeups=0,
                                                       idle_entries=0)])
        # A cell slower than its counts say, by 111 us: 120 us a request
        # on a run queue covers it; in a twin, 60 us does not.
        slow = self.cell("pollall", 200.0, 10.0, [driver(kicks=0, worker_wakeups=0,
                                                         idle_entries=0, run_delay_ns=120_000_000)])
        rows = {r["mode"]: r for r in bm.model([notify, fewer, slow], k)}
        slower = dict(slow, counts=bm.rep_counts([driver(kicks=0, worker_wakeups=0, idle_entries=0,
                                                         run_delay_ns=60_000_000)]))
        short = {r["mode"]: r for r in bm.model([notify, slower], k)}["pollall"]
        self.assertEqual(short["lacks"], ["p50 off by -55%: not explained by the counts"])
        self.assertTrue(rows["notify"]["fitted"])
        self.assertAlmostEqual(rows["notify"]["p50_err"], 0.0)
        self.assertAlmostEqual(rows["notify"]["work_us"], 79.0)
        self.assertAlmostEqual(rows["hooked"]["p50_model_us"], 89.0)
        self.assertEqual(rows["hooked"]["lacks"], [])
        self.assertLess(rows["pollall"]["p50_err"], -0.2)
        self.assertTrue(any("run queue" in w for w in rows["pollall"]["lacks"]),
                        rows["pollall"]["lacks"])
        lo, hi = rows["hooked"]["kvm"]["p50_us"]
        self.assertLess(lo, hi)
        # Fewer events predict less on KVM too.
        self.assertLess(hi, rows["notify"]["kvm"]["p50_us"][1])

    def test_queueing_carried_in_w_is_named(self):
        # Notification mode waited 100 us a request on run queues, all in
        # W; a mode that waits none is faster than modelled by as much.
        k = bm.constants(PROBES, 0)
        notify = self.cell("notify", 200.0, 10.0, [driver(idle_entries=0,
                                                          run_delay_ns=100_000_000)])
        calm = self.cell("poll", 110.0, 10.0, [driver(idle_entries=0)])
        row = {r["mode"]: r for r in bm.model([notify, calm], k)}["poll"]
        self.assertGreater(row["p50_err"], 0.2)
        self.assertTrue(any("W carries" in w for w in row["lacks"]), row["lacks"])

    def test_negative_work_is_named(self):
        # Events that add up to more than notification mode's p50.
        k = bm.constants(PROBES, 0)
        notify = self.cell("notify", 20.0, 10.0, [driver(idle_entries=0)])
        other = self.cell("hooked", 40.0, 10.0, [driver(idle_entries=0)])
        rows = {r["mode"]: r for r in bm.model([notify, other], k)}
        self.assertLess(rows["hooked"]["work_us"], 0)
        self.assertTrue(rows["hooked"]["kvm"]["work_clamped"])
        self.assertTrue(any("overstate" in w for w in rows["hooked"]["lacks"]))

    def test_cpu_at_most_the_cpus(self):
        k = bm.constants(PROBES, 0)
        notify = self.cell("notify", 100.0, 150.0, [driver(idle_entries=0)])
        busy = dict(self.cell("busyloop", 100.0, 200.0, [driver(idle_entries=0, worker_sleeps=0,
                                                                worker_wakeups=0)] * 4), ndev=4)
        notify4 = dict(notify, ndev=4)
        row = {r["mode"]: r for r in bm.model([notify4, busy], k, ncpus=2)}["busyloop"]
        self.assertEqual(row["spinners"], 4)
        self.assertEqual(row["cpu_model_pct"], 200.0)

    def test_two_polling_threads_spin_two_cpus(self):
        c = {"mode": "poll2", "ndev": 4, "worker_threads": 2, "buffers_per_s": 1000.0,
             "counts": {"Sp": 0.0}}
        self.assertAlmostEqual(bm.spin_cpus(c, {"poll": 8000}), 2.0)
        c["worker_threads"] = None
        self.assertAlmostEqual(bm.spin_cpus(c, {"poll": 8000}), 1.0)

    def test_constants_average_runs_and_keep_raw(self):
        later = [dict(p, p50=p["p50"] * 2) for p in PROBES]
        k = bm.constants(PROBES + later, 0)
        self.assertAlmostEqual(k["evfd"], 1.5)
        self.assertAlmostEqual(k["drift"]["wake_local"], 2.0)
        odd = [dict(p, p50=20000) if p["probe"] == "wake_remote_idle" else p for p in PROBES]
        k = bm.constants(odd, 0)
        self.assertEqual(k["idle_exit"], 0)
        self.assertLess(k["raw"]["idle_exit"], 0)

    def test_kvm_counts_queued_runs_as_wakeups(self):
        # A polling thread queued a run for every request, but the worker
        # slept only half the time: on a host, the high end counts all.
        k = bm.constants(PROBES, 0)
        notify = self.cell("notify", 100.0, 10.0, [driver(idle_entries=0)])
        half = self.cell("poll", 80.0, 110.0, [driver(kicks=0, idle_entries=0, queued=1000,
                                                      worker_wakeups=500, worker_sleeps=500,
                                                      poller_sleeps=0, poller_wakeups=0,
                                                      poller_remote=0)])
        half["counts"]["Q"] = 1.0
        rows = {r["mode"]: r for r in bm.model([notify, half], k)}
        kv = rows["poll"]["kvm"]
        self.assertAlmostEqual(kv["queued_unwoken"], 0.5)
        lo, hi = kv["p50_us"]
        self.assertGreater(hi - lo, 0.5 * (bm.KVM_COSTS["wake_remote"][1] +
                                           bm.KVM_COSTS["idle_exit"][1]))

    def test_spinner_takes_a_cpu(self):
        k = bm.constants(PROBES, 0)
        notify = self.cell("notify", 100.0, 10.0, [driver(idle_entries=0)])
        poll = self.cell("poll", 80.0, 110.0, [driver(kicks=0, idle_entries=0, poller_sleeps=0,
                                                      poller_wakeups=0, poller_remote=0)])
        rows = {r["mode"]: r for r in bm.model([notify, poll], k)}
        self.assertEqual(rows["poll"]["spinners"], 1)
        self.assertGreater(rows["poll"]["cpu_model_pct"], 100.0)


TRACE = """\
# tracer: nop
          <idle>-0       [000] d..2.    99.999990: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=vhost_bench next_pid=120 next_prio=120
     vhost_bench-120     [000] d..2.   100.000010: sched_switch: prev_comm=vhost_bench prev_pid=120 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
     vhost_bench-120     [000] d..2.   100.000000: sched_waking: comm=vhost-120 pid=121 prio=120 target_cpu=001
          <idle>-0       [000] d..1.   100.000012: cpu_idle: state=1 cpu_id=0
        vhost-120-121     [001] d..3.   100.000030: sched_waking: comm=vhost_bench pid=120 prio=120 target_cpu=000
        vhost-120-121     [001] d..3.   100.000031: ipi_send_cpu: cpu=0 callsite=ttwu_queue_wakelist callback=0x0
          <idle>-0       [000] d..1.   100.000040: cpu_idle: state=4294967295 cpu_id=0
          <idle>-0       [000] d..2.   100.000041: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=vhost_bench next_pid=120 next_prio=120
"""


class Trace(unittest.TestCase):
    def test_one_request(self):
        r = bm.trace_request(TRACE, 120)
        # The kick's wake-up of the worker, on CPU 1 from CPU 0, and the
        # worker's of the driver, on CPU 0 from CPU 1.
        self.assertEqual(r["counts"]["wakeups"], 2)
        self.assertEqual(r["counts"]["wakeups_remote"], 2)
        self.assertEqual(r["counts"]["ipis"], 1)
        self.assertEqual(r["counts"]["idle_entries"], 1)
        self.assertEqual(r["counts"]["switches"], 3)
        self.assertAlmostEqual(r["counts"]["us"], 51.0, places=3)
        self.assertIn("vhost_bench/120", r["lines"][-1])

    def test_unkicked_prefers_a_polled_request(self):
        # The first request kicks (the driver wakes the worker); the
        # second, polled, does not.
        polled = TRACE.replace("100.0000", "100.0010").replace(
            "vhost_bench-120     [000] d..2.   100.001000: sched_waking",
            "vhost-poll-99      [000] d..2.   100.001000: sched_waking")
        both = TRACE + polled
        self.assertEqual(bm.trace_request(both, 120)["counts"]["us"] > 0, True)
        r = bm.trace_request(both, 120, unkicked=True)
        self.assertTrue(any("vhost-poll-99" in x for x in r["lines"]), r["lines"])
        self.assertFalse(any("vhost_bench-120  sched_waking" in x for x in r["lines"]))

    def test_no_request(self):
        self.assertIsNone(bm.trace_request(TRACE, 999))


if __name__ == "__main__":
    unittest.main()
