// SPDX-License-Identifier: GPL-2.0
/*
 * What the tests of one polled vq, of teardown, of neighbours, of
 * vhost-net's queues and of poll_cpus share: see poll_util.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/membarrier.h>
#include "vhost_poll.h"
#include "vring.h"
#include "poll_util.h"

/* Write @text to the file @path in one write(), made if missing; 0 or -errno. */
int write_text(const char *path, const char *text)
{
	int fd, ret = 0;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* Write @val to tracefs file @name; 0 or -errno. */
int tracefs_write(const char *name, const char *val)
{
	char path[128];

	snprintf(path, sizeof(path), TRACEFS "%s", name);
	return write_text(path, val);
}

/* How many lines of the trace buffer contain both @a and @b. */
int trace_lines(const char *a, const char *b)
{
	FILE *f = fopen(TRACEFS "trace", "re");
	char line[512];
	int n = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, a) && strstr(line, b))
			n++;
	fclose(f);
	return n;
}

/*
 * Start recording vhost's poller trace events afresh: 1, 0 where the
 * kernel has none (no CONFIG_TRACING, no tracefs), or -errno.
 */
int trace_poller_on(void)
{
	int ret;

	if (access(TRACEFS "events", F_OK))
		mount("tracefs", TRACEFS, "tracefs", 0, NULL);
	if (access(TRACEFS "events/vhost_poller", F_OK))
		return 0;
	ret = tracefs_write("trace", "");
	if (!ret)
		ret = tracefs_write("events/vhost_poller/enable", "1");
	return ret ? ret : 1;
}

/*
 * Get @d's vq polled, to leave after @idle jiffies without work: rate
 * RATE_LOW, bursts of kicks that reach it, the buffers used. A burst that
 * the machine spread over more than a jiffy (a descheduled vCPU) does not
 * reach the rate; the next one is tried. It is polled when this process's
 * vqs of its index entered poll mode once more, or have one more polled.
 * 0, or -ETIMEDOUT after STALL_MS.
 */
int poll_with_idle(struct vring_drv *d, unsigned int idle)
{
	unsigned long long t0 = vp_now_ms();
	int before, polled, ms;
	struct vp_vq_row sum;
	__u64 enters;

	if (vp_param_set("poll_stop_idle", idle) ||
	    vp_param_set("poll_start_rate", RATE_LOW))
		return -EINVAL;
	if (vp_vq_sum(getpid(), d->index, &sum, &before) < 0)
		return -ENOENT;
	enters = sum.enters;
	do {
		vring_post_kicked(d, 4 * RATE_LOW);
		if (vring_drain(d, STALL_MS))
			return -ETIMEDOUT;
		for (ms = 0; ms < 20; ms++) {
			if (vp_vq_sum(getpid(), d->index, &sum, &polled) > 0 &&
			    (polled > before || (polled && sum.enters > enters)))
				return 0;
			vp_sleep_ms(1);
		}
	} while (vp_now_ms() - t0 < STALL_MS);
	return -ETIMEDOUT;
}

/* Get @d's vq polled and keep it so for 10 s of idleness. */
int poll_for_long(struct vring_drv *d)
{
	return poll_with_idle(d, 10 * vp_jiffy_hz());
}

/*
 * vring_stream() of @total buffers in batches of @batch, in slices of 1,000
 * with a millisecond's sleep after each: under time travel (inf-cpu) time
 * passes only while every CPU idles, and a polling thread that hands its
 * CPU to the worker beside it keeps the one CPU busy from a stream's
 * first buffer to its last, which then takes no time at all (no jiffy
 * for the policy's rules, no wake-up for a waiter). 0 or -errno.
 */
int stream_in_time(struct vring_drv *d, unsigned int total, unsigned int batch)
{
	unsigned int left = total, n;
	int ret = 0;

	while (left && !ret) {
		n = left < 1000 ? left : 1000;
		ret = vring_stream(d, n, batch, STALL_MS);
		left -= n;
		vp_sleep_ms(1);
	}
	return ret;
}

/* Give vhost a memory table of the ring's arena and of @big. */
int set_mem_with(struct vring_drv *d, void *big, size_t len)
{
	struct {
		struct vhost_memory m;
		struct vhost_memory_region r[2];
	} mem = {
		.m.nregions = 2,
		.r[0].guest_phys_addr = (uintptr_t)d->arena,
		.r[0].memory_size = d->arena_len,
		.r[0].userspace_addr = (uintptr_t)d->arena,
		.r[1].guest_phys_addr = (uintptr_t)big,
		.r[1].memory_size = len,
		.r[1].userspace_addr = (uintptr_t)big,
	};

	return ioctl(d->fd, VHOST_SET_MEM_TABLE, &mem) ? -errno : 0;
}

int leave_poll_mode(struct vring_drv *d, enum leave_request how, void *big, size_t len)
{
	struct vhost_vring_file f = { .index = d->index, .fd = d->kick };

	switch (how) {
	case LEAVE_SET_VRING_KICK:
		return ioctl(d->fd, VHOST_SET_VRING_KICK, &f) ? -errno : 0;
	case LEAVE_SET_MEM_TABLE:
		return set_mem_with(d, big, len);
	default:
		return vp_param_set("poll_start_rate", 0);
	}
}

/*
 * Give the poller nothing, or 20 us to 2.5 ms, by @try, to take some of
 * what @d made available since it had used @used0; returns how many it
 * took.
 */
unsigned int poller_takes(struct vring_drv *d, unsigned int try, __u64 used0)
{
	if (try % 9)
		vp_sleep_us(20 << (try % 9 - 1));
	vring_reap(d);
	return d->used - used0;
}

enum vring_dev td_dev = VRING_TEST;

/* Open a td_dev driver with a ring of RING entries; 0 or -errno. */
int td_open(struct vring_drv *d, __u64 max_bufs)
{
	return vring_open_dev(d, td_dev, RING, true, max_bufs);
}

/* The module is not pinned by anyone: its reference count is 0. */
bool module_unpinned(void)
{
	char buf[32] = "";
	FILE *f = fopen("/sys/module/vhost_poll/refcnt", "re");

	if (!f)
		return false;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	return !strcmp(buf, "0\n");
}

/* How many of process @pid's polled vqs thread @thread polls. */
int polled_by(int pid, unsigned int thread)
{
	struct vp_vq_row rows[256];
	int n = vp_vq_rows(rows, 256), i, found = 0;

	for (i = 0; i < n; i++)
		if (rows[i].pid == pid && rows[i].poll && rows[i].thread == thread)
			found++;
	return found;
}

/* Wait up to @ms until exactly @want polling threads run. */
bool threads_become(int want, unsigned int ms)
{
	int second = want > 1 ? 1 : 0;
	struct vp_worker w[16];

	for (; ms; ms--) {
		if (vp_workers(w, 16) == want &&
		    vp_count_threads("vhost-poll/1") == second)
			return true;
		vp_sleep_ms(1);
	}
	return false;
}

/* Open a vhost-test driver and kick it past RATE_LOW; 0 or -errno. */
int kicked_driver(struct vring_drv *d, __u64 max_bufs)
{
	int ret = td_open(d, max_bufs);

	if (!ret)
		vring_post_kicked(d, 4 * RATE_LOW);
	return ret;
}

unsigned long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
}

/*
 * What one RCU grace period takes here, in us: membarrier(GLOBAL) is a
 * synchronize_rcu(), or nothing on one CPU, where a grace period is
 * free. ~0 if it cannot tell (nohz_full refuses it).
 */
unsigned long long grace_period_us(void)
{
	unsigned long long t0 = now_us();

	if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0))
		return ~0ULL;
	return now_us() - t0;
}

/* Pin task @pid (0: the caller) to CPU @cpu; 0 or -errno. */
int pin_to(int pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(pid, sizeof(set), &set) ? -errno : 0;
}

/* The CPU time, in clock ticks, of this process's vhost workers (its
 * threads named vhost-PID), or -1.
 */
long long own_workers_ticks(void)
{
	char path[300], buf[512], *p;
	unsigned long long ut, st;
	long long sum = 0;
	struct dirent *e;
	DIR *dir;
	FILE *f;

	dir = opendir("/proc/self/task");
	if (!dir)
		return -1;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if (vp_read_line(path, buf, sizeof(buf)) || strncmp(buf, "vhost-", 6))
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		p = fgets(buf, sizeof(buf), f);
		fclose(f);
		p = p ? strrchr(buf, ')') : NULL;
		/* After the name: state, then 10 fields, then utime, stime. */
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&ut, &st) == 2)
			sum += ut + st;
	}
	closedir(dir);
	return sum;
}

/*
 * In a forked child: close every file descriptor above stderr but @a
 * and @b. A child that kept its parent's vhost devices open would keep
 * them from being released when the parent closes them.
 */
void close_fds_but(int a, int b)
{
	long fd, max = sysconf(_SC_OPEN_MAX);

	if (max < 0 || max > 65536)
		max = 65536;
	for (fd = 3; fd < max; fd++)
		if (fd != a && fd != b)
			close(fd);
}

/*
 * The caller pinned to CPU @cpu as a SCHED_FIFO task (priority 50): a
 * real-time neighbour, which no task of a lower class preempts. 0, or
 * -errno.
 */
int rt_on(int cpu)
{
	struct sched_param sp = { .sched_priority = 50 };
	int ret = pin_to(0, cpu);

	if (!ret && sched_setscheduler(0, SCHED_FIFO, &sp))
		ret = -errno;
	return ret;
}

/*
 * The spinner's side: spin for @ms once a byte comes on @go, saying on
 * @out that it has begun (it runs: its CPU is its own) and then how long.
 */
static int spinner_run(int cpu, unsigned int ms, int go, int out)
{
	unsigned long long t0, spun;
	char c;

	if (rt_on(cpu))
		return 2;
	if (read(go, &c, 1) != 1)
		return 3;
	if (write(out, &c, 1) != 1)
		return 4;
	t0 = vp_now_ms();
	while (vp_now_ms() - t0 < ms)
		;
	spun = vp_now_ms() - t0;
	return write(out, &spun, sizeof(spun)) == sizeof(spun) ? 0 : 5;
}

/*
 * Fork @s, a SCHED_FIFO task pinned to CPU @cpu that spins for @ms once
 * spinner_go() is called; 0 or -errno.
 */
int spinner_start(struct spinner *s, int cpu, unsigned int ms)
{
	int ret = 0;

	s->pid = -1;
	if (pipe(s->go))
		return -errno;
	if (pipe(s->out)) {
		ret = -errno;
		close(s->go[0]);
		close(s->go[1]);
		return ret;
	}
	s->pid = fork();
	if (!s->pid) {
		close_fds_but(s->go[0], s->out[1]);
		_exit(spinner_run(cpu, ms, s->go[0], s->out[1]));
	}
	if (s->pid < 0)
		ret = -errno;
	/* The parent keeps the ends it writes go on and reads out from. */
	close(s->go[0]);
	close(s->out[1]);
	if (ret) {
		close(s->go[1]);
		close(s->out[0]);
	}
	return ret;
}

/*
 * Start @s's spin, and return once it has begun: from then on no task of a
 * lower class runs on its CPU until it ends. 0, or -EIO if it did not begin.
 */
int spinner_go(struct spinner *s)
{
	char c;

	if (write(s->go[1], "x", 1) != 1)
		return -EIO;
	return read(s->out[0], &c, 1) == 1 ? 0 : -EIO;
}

/*
 * Wait for @s to end and close its pipes: how long it spun, in ms, or 0
 * if it did not spin (it could not take its CPU or its class, or was
 * never started: the closed pipe ends it).
 */
unsigned long long spinner_end(struct spinner *s)
{
	unsigned long long spun = 0;
	int status;

	close(s->go[1]);
	if (read(s->out[0], &spun, sizeof(spun)) != sizeof(spun))
		spun = 0;
	close(s->out[0]);
	if (waitpid(s->pid, &status, 0) != s->pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		spun = 0;
	return spun;
}

#define WQ_CPUMASK	"/sys/devices/virtual/workqueue/cpumask"

/*
 * The mask wq_unbound_on() replaced, kept until it is put back: a test
 * the harness kills for its timeout runs no teardown, and the next
 * test's setup that calls wq_unbound_restore() puts the mask back then.
 */
#define WQ_CPUMASK_SAVED	"/tmp/vhost_poll_test.wq_cpumask"

/* The unbound workqueues' cpumask before wq_unbound_on(), or "". */
static char wq_mask_saved[4096];

/*
 * Keep the unbound workqueues' workers on CPU @cpu, as an administrator
 * keeps them off a dedicated core; wq_unbound_restore() puts the mask
 * back. 0 or -errno.
 */
int wq_unbound_on(int cpu)
{
	char mask[32];
	ssize_t n;
	int fd;

	fd = open(WQ_CPUMASK, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, wq_mask_saved, sizeof(wq_mask_saved) - 1);
	wq_mask_saved[n > 0 ? n : 0] = '\0';
	snprintf(mask, sizeof(mask), "%x\n", 1u << cpu);
	if (n > 0 && write_text(WQ_CPUMASK_SAVED, wq_mask_saved))
		n = -1;
	if (n <= 0 || pwrite(fd, mask, strlen(mask), 0) < 0) {
		n = -errno;
		wq_mask_saved[0] = '\0';
		close(fd);
		return n ? n : -EIO;
	}
	close(fd);
	return 0;
}

void wq_unbound_restore(void)
{
	int ret;

	if (!wq_mask_saved[0]) {
		/* Left by a test killed before its teardown? */
		FILE *f = fopen(WQ_CPUMASK_SAVED, "re");

		if (!f)
			return;
		if (!fgets(wq_mask_saved, sizeof(wq_mask_saved), f))
			wq_mask_saved[0] = '\0';
		fclose(f);
		if (!wq_mask_saved[0])
			return;
	}
	ret = write_text(WQ_CPUMASK, wq_mask_saved);
	if (ret)
		fprintf(stderr, "%s: %s\n", WQ_CPUMASK, strerror(-ret));
	else
		unlink(WQ_CPUMASK_SAVED);
	wq_mask_saved[0] = '\0';
}
