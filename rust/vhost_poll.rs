// SPDX-License-Identifier: GPL-2.0

//! vhost-poll: per-virtqueue adaptive polling for vhost.
//!
//! A virtqueue whose guest kicks at least `poll_start_rate` times in one
//! jiffy is switched from notifications to polling by one shared kernel
//! thread, and back after `poll_stop_idle` jiffies without new work.
//! See Documentation/admin-guide.rst.

use kernel::prelude::*;

module! {
    type: VhostPoll,
    name: "vhost_poll",
    author: "The vhost-poll developers",
    description: "Per-virtqueue adaptive polling for vhost",
    license: "GPL",
    params: {
        poll_start_rate: u32 {
            default: 0,
            permissions: 0o644,
            description: "Start polling a virtqueue at this many kicks in one jiffy (0 = never poll)",
        },
        poll_stop_idle: u32 {
            default: 2,
            permissions: 0o644,
            description: "Stop polling a virtqueue after this many jiffies without new work",
        },
    },
}

struct VhostPoll;

impl kernel::Module for VhostPoll {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!(
            "loaded: poll_start_rate={} poll_stop_idle={}\n",
            module_parameters::poll_start_rate.get(),
            module_parameters::poll_stop_idle.get()
        );
        Ok(VhostPoll)
    }
}

impl Drop for VhostPoll {
    fn drop(&mut self) {
        pr_info!("unloaded\n");
    }
}
