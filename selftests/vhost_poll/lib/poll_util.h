/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the tests of one polled vq, of teardown, of neighbours, of
 * vhost-net's queues and of poll_cpus share (lib/poll_util.c): getting a
 * vq polled, the device a teardown fixture drives, the polling threads
 * and their CPUs, and vhost's poller trace events.
 */
#ifndef VHOST_POLL_POLL_UTIL_H
#define VHOST_POLL_POLL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <linux/types.h>
#include "vring.h"

#define RING		256
/* How long the device may take nothing before a test calls it stuck. */
#define STALL_MS	5000
/* A rate every streaming driver here reaches. */
#define RATE_LOW	4

#define TRACEFS		"/sys/kernel/tracing/"

/*
 * The device the tests of the teardown fixtures (and of the others whose
 * setup is teardown_open()) drive, set in each test's own process by the
 * setup; td_open() opens one.
 */
extern enum vring_dev td_dev;

enum leave_request { LEAVE_SET_VRING_KICK, LEAVE_SET_MEM_TABLE, LEAVE_RATE_ZERO, LEAVE_N };

/* vhost's poller trace events. */
int write_text(const char *path, const char *text);
int tracefs_write(const char *name, const char *val);
int trace_lines(const char *a, const char *b);
int trace_poller_on(void);

/* A vq polled, streamed through, and taken out of poll mode. */
int poll_with_idle(struct vring_drv *d, unsigned int idle);
int poll_for_long(struct vring_drv *d);
int stream_in_time(struct vring_drv *d, unsigned int total, unsigned int batch);
int set_mem_with(struct vring_drv *d, void *big, size_t len);
int leave_poll_mode(struct vring_drv *d, enum leave_request how, void *big, size_t len);
unsigned int poller_takes(struct vring_drv *d, unsigned int try, __u64 used0);
int td_open(struct vring_drv *d, __u64 max_bufs);
int kicked_driver(struct vring_drv *d, __u64 max_bufs);

/* The module, the polling threads, their CPUs, and the workers' time. */
bool module_unpinned(void);
int polled_by(int pid, unsigned int thread);
bool threads_become(int want, unsigned int ms);
unsigned long long now_us(void);
unsigned long long grace_period_us(void);
int pin_to(int pid, int cpu);
long long own_workers_ticks(void);

/* A SCHED_FIFO task that spins on one CPU, and the pipes that drive it. */
struct spinner {
	pid_t pid;
	/*
	 * go[1]: a byte starts the spin; out[0]: a byte once it spins, then
	 * how long it spun (ms).
	 */
	int go[2], out[2];
};

void close_fds_but(int a, int b);

/* The unbound workqueues on one CPU, and back where they were. */
int wq_unbound_on(int cpu);
void wq_unbound_restore(void);

/* A real-time neighbour: the caller, or a task that spins once. */
int rt_on(int cpu);
int spinner_start(struct spinner *s, int cpu, unsigned int ms);
int spinner_go(struct spinner *s);
unsigned long long spinner_end(struct spinner *s);

#endif /* VHOST_POLL_POLL_UTIL_H */
