// SPDX-License-Identifier: GPL-2.0

//! How a polling thread gets what needs its task (the thread's waker has
//! it), and so is made after the thread.

use core::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Release},
};
use kernel::{alloc::flags::GFP_KERNEL, kthread, new_mutex, prelude::*, sync::Arc, sync::Mutex};

/// A value given to a thread once, after it started.
#[pin_data]
pub(crate) struct Handoff<T> {
    #[pin]
    value: Mutex<Option<T>>,
    given: AtomicBool,
}

impl<T: Send + Unpin> Handoff<T> {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                value <- new_mutex!(None, "vhost_poll::handoff"),
                given: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )
    }

    /// Gives the thread `value`; the caller then wakes it.
    pub(crate) fn give(&self, value: T) {
        *self.value.lock() = Some(value);
        // Release: the store above before the flag the thread checks.
        self.given.store(true, Release);
    }

    /// Waits for the value; `None` if the thread is stopped before.
    pub(crate) fn wait(&self) -> Option<T> {
        loop {
            // Acquire: pairs with `give`'s `Release` store.
            if self.given.load(Acquire) {
                if let Some(value) = self.value.lock().take() {
                    return Some(value);
                }
            }
            if kthread::should_stop() {
                return None;
            }
            kthread::sleep_unless(|| self.given.load(Acquire));
        }
    }
}
