// SPDX-License-Identifier: GPL-2.0

//! The polling policy, with no kernel types: every decision of the
//! module, as two state machines that the kernel side feeds with events
//! and whose decisions it carries out.
//!
//! - [`Kicks`] (a virtqueue, lock-free, any context): a kick in
//!   notification mode asks for a start or not.
//! - [`VqPolicy`] (a virtqueue; under the table's lock while in
//!   notification mode, under its thread's ring lock while polled): a start
//!   request goes on a thread or is refused until a jiffy; a visit stays or
//!   exits, and why; an exit sets what the next start may do.
//! - [`ThreadPolicy`] (a polling thread, its own): after a pass, go on,
//!   pause or yield, and whether to hand every virtqueue back.
//! - [`Budget`] (all polling workers, under the table's lock): whether
//!   one more worker may poll, or which gives its place up.
//!
//! Parameters come in as a [`Params`] snapshot, read once per event.
//! Time is in jiffies, as [`Jiffy`]: a counter that wraps, compared only
//! the way `time_after()` compares. Documentation/design.rst has the table
//! of events and decisions.
//!
//! The module includes this folder as `mod policy`; `rust/Cargo.toml`
//! builds it as a host crate too, so `cargo test` checks it in
//! milliseconds, scenarios included (`scenarios.rs`).

mod budget;
mod cpu;
mod gain;
mod params;
mod pass;
mod rate;
mod threads;
mod time;
mod vq;
mod window;

#[cfg(test)]
mod scenarios;

pub use budget::{Admit, Budget, Spinner};
pub use cpu::{Contention, Pause};
pub use params::Params;
pub use pass::{AfterPass, PassSeen, ThreadPolicy};
pub use rate::Kicks;
pub use threads::{cpus_online, thread_cpu, ThreadLoad, THREADS_MAX};
pub use time::Jiffy;
pub use vq::{Exit, Seen, Start, Tally, Visited, VqPolicy};
pub use window::Bounds;
