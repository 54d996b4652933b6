/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The helpers every vhost_poll selftest shares (lib/vhost_poll.c): load
 * and unload the module under test, read and write its parameters, read
 * its counters and the tasks it runs, and watch the kernel log.
 */
#ifndef VHOST_POLL_SELFTEST_H
#define VHOST_POLL_SELFTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>

#define VP_MODULE	"vhost_poll"
#define VP_PARAMS	"/sys/module/vhost_poll/parameters/"
#define VP_DEBUGFS	"/sys/kernel/debug/vhost_poll/"

#define VP_KO_MISSING	"no vhost_poll.ko: set VHOST_POLL_KO, put it next to " \
			"this program, or install it for this kernel"
#define VP_TEST_KO_MISSING	"no vhost_test.ko (tools/virtio builds it): set " \
				"VHOST_POLL_TEST_KO, put it next to this program, " \
				"or install it for this kernel"

/*
 * Parameters that keep poll mode as most tests assume it: the idle window
 * fixed at poll_stop_idle (poll_stop_idle_max), a streaming vq kept
 * polled however few kicks that saves (poll_min_gain), and a thread that
 * spins between passes however quiet its rings (poll_max_nap). The
 * window's moves, the hand-back for want of gain and the nap have tests
 * of their own.
 */
#define VP_STEADY " poll_stop_idle_max=2 poll_min_gain=0 poll_max_nap=0"

/* What a test program needs besides vhost_poll.ko, for vp_skip_if_cannot_run(). */
#define VP_NEEDS_DEBUGFS	0x1	/* the counters under VP_DEBUGFS */
#define VP_NEEDS_VHOST_TEST	0x2	/* /dev/vhost-test */
#define VP_NEEDS_DEVICE		0x4	/* /dev/vhost-test, or vhost-net and tun */

/* One row of /sys/kernel/debug/vhost_poll/vqs. */
struct vp_vq_row {
	int pid;
	unsigned int dev, vq;
	bool poll;
	unsigned long long kicks, poll_work, notify_work, empty_polls;
	unsigned long long enters, exits;
	/* The idle window in jiffies (poll_stop_idle_max); 0 if not shown. */
	unsigned long long window;
	/* Starts refused, visits that queued the handler or found it busy,
	 * and the cool-down after a hand-back for want of gain (jiffies).
	 */
	unsigned long long refused, queued, busy, cooldown;
	/* The polling thread that polls it, or did last (0: the first). */
	unsigned int thread;
	/* Hand-backs by vhost's watchdog (no visit in its bound). */
	unsigned long long stalls;
	/* Visits that queued a handler run for a ring they could not read. */
	unsigned long long retries;
	/* Its share of its own worker's polling, in microseconds. */
	unsigned long long spin_us;
	/*
	 * Handler runs a polling thread queued to a worker on another CPU
	 * (a wake-up that crossed CPUs), and to a worker on its own CPU,
	 * which it gave the CPU to.
	 */
	unsigned long long crossed, handed;
};

/* A row of the vqs file: the ten first columns are in every version. */
#define VP_VQ_ROW "%d %u %u %15s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %u %llu %llu %llu %llu %llu"

/* A row of /sys/kernel/debug/vhost_poll/threads: one polling thread. */
struct vp_worker {
	int pid;
	unsigned long long passes, busy_ns, idle_ns, mm_switches;
	unsigned int polled_vqs;
	/* Its number, 0 for the first thread; 0 if not shown. */
	unsigned int thread;
	/* Visits in passes that found no work, and their time (ns). */
	unsigned long long empty_visits, empty_visit_ns;
	/* Times it yielded to others waiting for its CPU, and the
	 * starts it refused (the first thread's).
	 */
	unsigned long long yields, refused;
	/* Entries the first thread looked at to serve start requests. */
	unsigned long long served;
	/* Naps between passes with the rings quiet, and their length (us). */
	unsigned long long naps, nap_us;
	/* Times it handed everything back: others waited for its CPU, and
	 * the watchdog took its rings back again and again (0 if not shown).
	 */
	unsigned long long contended, stalled;
};

/* The program, the module and its parameters. */
void vp_skip_if_cannot_run(int argc, char **argv, unsigned int needs);
const char *vp_ko(void);
/*
 * Whether vhost_poll is built into the running kernel: its parameters are
 * in sysfs, and there is no module to load or unload (no initstate).
 */
bool vp_builtin(void);
const char *vp_cannot_run(void);
const char *vp_setup_modules(bool vhost_test);
bool vp_loaded(void);
bool vp_ko_compressed(const char *path);
int vp_load_file(const char *path, const char *args);
int vp_load(const char *args);
int vp_unload_name(const char *name);
int vp_unload(void);
int vp_param_read(const char *name, char *buf, size_t len);
int vp_param_write(const char *name, const char *val, size_t len);
int vp_param_set(const char *name, unsigned long v);
int vp_poll_in_worker(bool in_worker);
int vp_params_apply(const char *words);
int vp_builtin_reset(void);

/* Each parameter's name and default, as the module declares them. */
#define VP_NPARAMS	10
extern const char *const vp_param_defaults[VP_NPARAMS][2];

/* The kernel log. */
int vp_kmsg_open(void);
bool vp_kmsg_has(int fd, const char *needle1, const char *needle2);

/* The module's counters, and its polling threads. */
int vp_vq_rows(struct vp_vq_row *rows, int max);
int vp_vq_sum(int pid, int vq, struct vp_vq_row *sum, int *polled);
bool vp_wait_polled(int pid, int want, unsigned int ms);
int vp_workers(struct vp_worker *w, int max);
int vp_worker(struct vp_worker *w);
bool vp_workers_asleep(void);
bool vp_worker_settles(unsigned int ms);

/* Tasks and CPUs. */
int vp_ncpus(void);
int vp_read_line(const char *path, char *buf, size_t len);
int vp_task_cpus(int pid, char *buf, size_t len);
int vp_task_cpu(int pid);
int vp_cpu_set_online(int cpu, bool online);
char vp_task_state(int pid);
__s64 vp_task_runtime_ns(int pid);
int vp_scan_comm(const char *dir, const char *comm, int *first);
int vp_count_threads(const char *comm);

/* Time: the kernel's, and this machine's. */
bool vp_simulated_time(void);
int vp_jiffy_hz(void);
unsigned int vp_jiffies_ms(unsigned int j);
unsigned int vp_slow(void);
unsigned long long vp_now_ms(void);
unsigned long long vp_now_us(void);
void vp_sleep_ms(unsigned int ms);
void vp_sleep_us(unsigned int us);

#endif /* VHOST_POLL_SELFTEST_H */
