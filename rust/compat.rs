// SPDX-License-Identifier: GPL-2.0

//! Where the kernels the module builds on differ: what 6.12's series
//! gives (patches/6.12, with its own copies of APIs upstream added
//! since) and what upstream gives from 7.3 on, with the series on top
//! (patches/7.3). Kbuild passes `--cfg series_6_12` on 6.12. Every other
//! file is the same source on both; the names here are the upstream
//! ones where upstream has the API.

pub(crate) use imp::*;

/// The 6.12 series' APIs: `Ktime`, `time::delay` in microseconds,
/// `cpu::{online, current}` and its own debugfs.
#[cfg(series_6_12)]
mod imp {
    use core::fmt::Write;
    use kernel::{
        cpu,
        debugfs::{Dir, File, ShowFile},
        kthread,
        module_param::{CpuListParam, CpuSet},
        prelude::*,
        seq_file::SeqFile,
        str::CStr,
        sync::Arc,
        time::{delay, Ktime},
    };

    pub(crate) use kernel::types::ARef;

    /// `module!` with the authors as this kernel spells them (`author`).
    macro_rules! module_with_authors {
        (type: $t:ident, name: $name:tt, authors: $author:tt, $($rest:tt)*) => {
            ::kernel::prelude::module! {
                type: $t,
                name: $name,
                author: $author,
                $($rest)*
            }
        };
    }
    pub(crate) use module_with_authors;

    /// Sets up what the functions below need; before any thread runs.
    pub(crate) fn init() {}

    /// This module (`THIS_MODULE`).
    pub(crate) fn this_module() -> &'static ThisModule {
        &crate::THIS_MODULE
    }

    /// The monotonic clock, in nanoseconds; never 0.
    pub(crate) fn now_ns() -> i64 {
        Ktime::ktime_get().to_ns()
    }

    /// Busy-waits `us` microseconds: any context.
    pub(crate) fn busy_wait_us(us: u32) {
        delay::ndelay(us.saturating_mul(1000));
    }

    /// Sleeps `us` microseconds in the idle state (not in the load
    /// average), even for a few: a sleep, never a busy wait.
    pub(crate) fn sleep_idle_us(us: u32) {
        delay::usleep_idle(us);
    }

    /// How many CPU numbers there may be (`nr_cpu_ids`).
    pub(crate) fn nr_cpu_ids() -> u32 {
        cpu::nr_ids()
    }

    /// Whether CPU `cpu` is online now (a hint).
    pub(crate) fn cpu_online(cpu: u32) -> bool {
        cpu::online(cpu)
    }

    /// The CPU the caller runs on (a hint).
    pub(crate) fn current_cpu() -> u32 {
        cpu::current()
    }

    /// `kthread::run_on`, with a CPU number.
    pub(crate) fn run_on(cpu: Option<u32>) -> Result {
        kthread::run_on(cpu)
    }

    /// The CPUs `set` lists, as numbers.
    pub(crate) fn listed(set: &CpuSet) -> impl Iterator<Item = u32> + Clone + '_ {
        set.iter()
    }

    /// `CpuListParam::online`, with a CPU number.
    pub(crate) fn listed_online(param: &CpuListParam, cpu: u32) -> bool {
        param.online(cpu)
    }

    /// A debugfs file's text.
    pub(crate) trait ShowText: Send + Sync + 'static {
        /// Writes the whole text of the file to `out`.
        fn show(&self, out: &mut dyn Write) -> Result;
    }

    /// The text of a file, written through `seq_file`.
    pub(crate) struct Text<T>(T);

    /// `seq_print!` as a `fmt::Write`.
    struct Seq<'a>(&'a SeqFile);

    impl Write for Seq<'_> {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            self.0.call_printf(format_args!("{s}"));
            Ok(())
        }
    }

    impl<T: ShowText> ShowFile for Text<T> {
        fn show(&self, m: &SeqFile) -> Result {
            self.0.show(&mut Seq(m))
        }
    }

    /// A debugfs directory: nothing without debugfs.
    pub(crate) struct StatsDir(Dir);

    /// A read-only debugfs file of the text `T` shows; removed on drop.
    pub(crate) struct StatsFile<T: ShowText>(#[allow(dead_code)] File<Text<T>>);

    impl StatsDir {
        /// Makes directory `name` at the root of debugfs.
        pub(crate) fn new(name: &CStr) -> Self {
            let dir = Dir::new(name);
            if !dir.exists() {
                // debugfs off, or the name taken: the module works without.
                pr_warn!("no counters: /sys/kernel/debug/{} was not created\n", name);
            }
            Self(dir)
        }

        /// Makes file `name` in the directory, showing `data`.
        pub(crate) fn file<T: ShowText>(&self, name: &CStr, data: T) -> Result<StatsFile<T>> {
            Ok(StatsFile(
                self.0.show_file(name, Arc::new(Text(data), GFP_KERNEL)?),
            ))
        }
    }
}

/// Upstream's APIs, and the series on 7.3: `time::{Instant, Delta}`,
/// `cpu::CpuId`, `cpumask::Cpumask`, upstream's debugfs.
#[cfg(not(series_6_12))]
mod imp {
    use core::fmt::Write;
    use kernel::{
        cpu::{self, CpuId},
        cpumask::Cpumask,
        debugfs::{Dir, File, Writer},
        kthread,
        module_param::{CpuListParam, CpuSet},
        prelude::*,
        str::CStr,
        sync::SetOnce,
        time::{delay, Delta, Instant, Monotonic, NSEC_PER_SEC},
    };

    pub(crate) use kernel::sync::aref::ARef;

    /// `module!` with the authors as this kernel spells them (`authors`).
    macro_rules! module_with_authors {
        (type: $t:ident, name: $name:tt, authors: $author:tt, $($rest:tt)*) => {
            ::kernel::prelude::module! {
                type: $t,
                name: $name,
                authors: [$author],
                $($rest)*
            }
        };
    }
    pub(crate) use module_with_authors;

    /// The moment `now_ns` counts from.
    static EPOCH: SetOnce<Instant<Monotonic>> = SetOnce::new();

    /// Sets up what the functions below need; before any thread runs.
    pub(crate) fn init() {
        EPOCH.populate(Instant::now());
    }

    /// This module (`THIS_MODULE`).
    pub(crate) fn this_module() -> &'static ThisModule {
        &<crate::LocalModule as kernel::ModuleMetadata>::THIS_MODULE
    }

    /// The monotonic clock, in nanoseconds; never 0. Upstream's
    /// `Instant` keeps its nanoseconds to itself: they count from the
    /// module's load here, plus a second, so that no reading is 0 (which
    /// callers take for "none").
    pub(crate) fn now_ns() -> i64 {
        let since = EPOCH
            .as_ref()
            .map_or(Delta::ZERO, |epoch| Instant::now() - *epoch);
        since.as_nanos().saturating_add(NSEC_PER_SEC)
    }

    /// Busy-waits `us` microseconds: any context.
    pub(crate) fn busy_wait_us(us: u32) {
        delay::udelay(Delta::from_micros(us.into()));
    }

    /// Sleeps `us` microseconds in the idle state (not in the load
    /// average), even for a few: a sleep, never a busy wait (`fsleep`
    /// busy-waits up to 10 us).
    pub(crate) fn sleep_idle_us(us: u32) {
        delay::usleep_idle(Delta::from_micros(us.into()));
    }

    /// How many CPU numbers there may be (`nr_cpu_ids`).
    pub(crate) fn nr_cpu_ids() -> u32 {
        cpu::nr_cpu_ids()
    }

    /// Whether CPU `cpu` is online now (a hint).
    pub(crate) fn cpu_online(cpu: u32) -> bool {
        CpuId::from_u32(cpu).is_some_and(|cpu| Cpumask::online().test(cpu))
    }

    /// The CPU the caller runs on (a hint).
    pub(crate) fn current_cpu() -> u32 {
        CpuId::current().as_u32()
    }

    /// `kthread::run_on`, with a CPU number.
    pub(crate) fn run_on(cpu: Option<u32>) -> Result {
        match cpu {
            Some(cpu) => kthread::run_on(Some(CpuId::from_u32(cpu).ok_or(EINVAL)?)),
            None => kthread::run_on(None),
        }
    }

    /// The CPUs `set` lists, as numbers.
    pub(crate) fn listed(set: &CpuSet) -> impl Iterator<Item = u32> + Clone + '_ {
        set.iter().map(|cpu| cpu.as_u32())
    }

    /// `CpuListParam::online`, with a CPU number.
    pub(crate) fn listed_online(param: &CpuListParam, cpu: u32) -> bool {
        CpuId::from_u32(cpu).is_some_and(|cpu| param.online(cpu))
    }

    /// A debugfs file's text.
    pub(crate) trait ShowText: Send + Sync + 'static {
        /// Writes the whole text of the file to `out`.
        fn show(&self, out: &mut dyn Write) -> Result;
    }

    /// The text of a file, as upstream's debugfs writes it.
    pub(crate) struct Text<T>(T);

    impl<T: ShowText> Writer for Text<T> {
        fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            self.0.show(f).map_err(|_| core::fmt::Error)
        }
    }

    /// A debugfs directory: nothing without debugfs. Its files are this
    /// module's: an open one keeps the module loaded until it is closed.
    pub(crate) struct StatsDir(Dir<crate::LocalModule>);

    /// A read-only debugfs file of the text `T` shows; removed on drop.
    pub(crate) struct StatsFile<T: ShowText>(#[allow(dead_code)] Pin<KBox<File<Text<T>>>>);

    impl StatsDir {
        /// Makes directory `name` at the root of debugfs.
        pub(crate) fn new(name: &CStr) -> Self {
            Self(Dir::new(name))
        }

        /// Makes file `name` in the directory, showing `data`.
        pub(crate) fn file<T: ShowText>(&self, name: &CStr, data: T) -> Result<StatsFile<T>> {
            Ok(StatsFile(KBox::pin_init(
                self.0.read_only_file(name, Text(data)),
                GFP_KERNEL,
            )?))
        }
    }
}
