// SPDX-License-Identifier: GPL-2.0

//! The counters, in debugfs: `/sys/kernel/debug/vhost_poll/vqs` (a row per
//! virtqueue) and `/sys/kernel/debug/vhost_poll/threads` (a row per
//! polling thread). Plain text: a header line of column names, then rows.
//!
//! The names the counters had before, kept for one release (see "Is it
//! working?" in Documentation/admin-guide.rst): the `worker` file, the
//! `threads` rows under its old header (`asides`, `aside_us`), and, at
//! the end of each `vqs` row, `held` and `cool` again (now `busy` and
//! `cooldown`).

use crate::compat::{self, ShowText, StatsDir, StatsFile};
use crate::shared::Shared;
use core::{fmt::Write, sync::atomic::Ordering::Relaxed};
use kernel::{c_str, prelude::*, sync::Arc};

struct Vqs(Arc<Shared>);

impl ShowText for Vqs {
    fn show(&self, m: &mut dyn Write) -> Result {
        // Text into seq_file's buffer, which grows as needed: no error.
        let _ = writeln!(
            m,
            "pid dev vq mode kicks poll_work notify_work empty_polls enters exits window refused queued busy cooldown thread stalls retries spin_us crossed handed held cool"
        );
        self.0.for_each_vq(|vq, polled, window, cool, thread| {
            let c = &vq.counters;
            // 0 once vhost detached it (the table is behind by a step).
            let pid = vq.handle.access().map_or(0, |vq| vq.owner());
            let _ = writeln!(
                m,
                "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
                pid,
                vq.dev.load(Relaxed),
                vq.index,
                if polled { "poll" } else { "notify" },
                c.kicks.load(Relaxed),
                c.poll_work.load(Relaxed),
                c.notify_work.load(Relaxed),
                c.empty_polls.load(Relaxed),
                c.enters.load(Relaxed),
                c.exits.load(Relaxed),
                window,
                c.refused.load(Relaxed),
                c.queued.load(Relaxed),
                c.busy.load(Relaxed),
                cool,
                thread,
                c.stalls.load(Relaxed),
                c.retries.load(Relaxed),
                c.spin_ns.load(Relaxed) / 1000,
                c.crossed.load(Relaxed),
                c.handed.load(Relaxed),
                // The old names' columns (`held`, `cool`), for one release.
                c.busy.load(Relaxed),
                cool,
            );
        })
    }
}

/// The `threads` file: a row per polling thread; with `old`,
/// the `worker` file, its old name, whose header has the old names.
struct Threads {
    shared: Arc<Shared>,
    old: bool,
}

impl ShowText for Threads {
    fn show(&self, m: &mut dyn Write) -> Result {
        let yields = if self.old {
            "asides aside_us"
        } else {
            "yields yield_us"
        };
        let _ = writeln!(
            m,
            "pid passes busy_ns idle_ns mm_switches polled_vqs {yields} refused thread empty_visits empty_visit_ns served naps nap_us contended stalled"
        );
        let now = compat::now_ns();
        // A row per thread, in order.
        self.shared.for_each_thread(|thread| {
            let c = &thread.counters;
            // Add the period in progress, so that a busy thread's time
            // moves.
            let current = u64::try_from(now - c.since_ns.load(Relaxed)).unwrap_or(0);
            let (mut busy, mut idle) = (c.busy_ns.load(Relaxed), c.idle_ns.load(Relaxed));
            if c.asleep.load(Relaxed) {
                idle = idle.saturating_add(current);
            } else {
                busy = busy.saturating_add(current);
            }
            let _ = writeln!(
                m,
                "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
                c.pid.load(Relaxed),
                c.passes.load(Relaxed),
                busy,
                idle,
                c.mm_switches.load(Relaxed),
                thread.polled_vqs(),
                c.yields.load(Relaxed),
                c.yield_us.load(Relaxed),
                c.refused.load(Relaxed),
                thread.index,
                c.empty_visits.load(Relaxed),
                c.empty_visit_ns.load(Relaxed),
                c.served.load(Relaxed),
                c.naps.load(Relaxed),
                c.nap_us.load(Relaxed),
                c.contended.load(Relaxed),
                c.stalled.load(Relaxed),
            );
        });
        Ok(())
    }
}

/// The debugfs directory and its files; removed on drop (files first).
pub(crate) struct Stats {
    _vqs: StatsFile<Vqs>,
    _threads: StatsFile<Threads>,
    _old_threads: StatsFile<Threads>,
    _dir: StatsDir,
}

impl Stats {
    pub(crate) fn new(shared: &Arc<Shared>) -> Result<Self> {
        let dir = StatsDir::new(c_str!("vhost_poll"));
        Ok(Self {
            _vqs: dir.file(c_str!("vqs"), Vqs(shared.clone()))?,
            _threads: dir.file(
                c_str!("threads"),
                Threads {
                    shared: shared.clone(),
                    old: false,
                },
            )?,
            // Its old name, for one release.
            _old_threads: dir.file(
                c_str!("worker"),
                Threads {
                    shared: shared.clone(),
                    old: true,
                },
            )?,
            _dir: dir,
        })
    }
}
