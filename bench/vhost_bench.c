// SPDX-License-Identifier: GPL-2.0
/*
 * One benchmark driver: drives one vhost-test or vhost-net device with one
 * workload and prints its figures as one JSON line. scripts/bench starts
 * one per device, in its own process, and reads their lines; it is not a
 * test by itself.
 *
 * Workloads:
 *   stream  post BATCH buffers at a time as fast as the device takes them;
 *           wait on the call eventfd only when the ring is full.
 *   rr      one buffer in flight: post it, then block on the call eventfd
 *           until it is used, as a guest waits for its interrupt.
 *   idle    enter poll mode with a burst of kicks, then post nothing.
 *
 * Phases end on SIGALRM, so that the stream loop reads no clock; rr reads
 * the clock once a round trip, since the round trip is what it measures.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/time.h>
#include <time.h>
#include "vhost_poll.h"
#include "vring.h"

enum workload { W_STREAM, W_RR, W_IDLE };

/* A device that takes no buffer for this long has stalled. */
#define STALL_MS 5000

/* Latency histogram: exact below 32 ns, then 16 buckets per power of 2. */
#define LAT_BUCKETS 1024

/* Set by SIGALRM: the phase is over. */
static int phase_over;
static __u64 lat_hist[LAT_BUCKETS];
static __u64 lat_count;

static void on_alarm(int sig)
{
	__atomic_store_n(&phase_over, 1, __ATOMIC_RELAXED);
}

static bool over(void)
{
	return __atomic_load_n(&phase_over, __ATOMIC_RELAXED);
}

static void arm(unsigned int ms)
{
	struct itimerval t = {
		.it_value.tv_sec = ms / 1000,
		.it_value.tv_usec = (ms % 1000) * 1000,
	};

	__atomic_store_n(&phase_over, 0, __ATOMIC_RELAXED);
	setitimer(ITIMER_REAL, &t, NULL);
}

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static unsigned int lat_bucket(__u64 ns)
{
	unsigned int e;

	if (ns < 16)
		return ns;
	e = 63 - __builtin_clzll(ns);
	return (e - 3) * 16 + ((ns >> (e - 4)) & 15);
}

/* The middle of latency bucket @b in microseconds; -1 for none. */
static double lat_mid_us(unsigned int b)
{
	unsigned int e;

	if (b >= LAT_BUCKETS)
		return -1;
	if (b < 16)
		return b / 1000.0;
	e = b / 16 + 3;
	return (((16ULL + b % 16) << (e - 4)) + (1ULL << (e - 4)) / 2.0) / 1000;
}

/* The thread named @comm: first among this process's, then anywhere. */
static int find_task(const char *comm)
{
	int pid = -1;

	if (vp_scan_comm("/proc/self/task", comm, &pid) <= 0)
		vp_scan_comm("/proc", comm, &pid);
	return pid;
}

/* Run time of this driver, its device's worker and vhost-poll's threads. */
struct cpu_snap {
	__u64 t;
	__s64 driver, worker, poller;
};

/*
 * Run time of every polling thread (poll_threads), summed; -1 without
 * vhost_poll. A thread started during the run counts from its start; one
 * stopped during it makes the sum fall, and the figure unknown.
 */
static __s64 pollers_runtime_ns(void)
{
	struct vp_worker w[16];
	int n = vp_workers(w, 16), i;
	__s64 sum = 0, ns;

	if (n <= 0)
		return -1;
	for (i = 0; i < n; i++) {
		ns = vp_task_runtime_ns(w[i].pid);
		if (ns < 0)
			return -1;
		sum += ns;
	}
	return sum;
}

static void cpu_snap(struct cpu_snap *s, int worker)
{
	s->driver = vp_task_runtime_ns(getpid());
	s->worker = worker > 0 ? vp_task_runtime_ns(worker) : -1;
	s->poller = pollers_runtime_ns();
	s->t = now_ns();
}

/*
 * What one request costs in events, not in time (the count vector of
 * scripts/bench): per task, its wake-ups, those sent from another CPU
 * and its sleeps (schedstats, kernel.sched_schedstats=1); for the whole
 * machine, the switches to the idle task, the wake-ups and those of a
 * task on another CPU (/proc/schedstat), the time tasks waited to run,
 * and the reschedule and function-call IPIs (/proc/interrupts); for
 * this device, its vqs' rows of vhost_poll's counters, and the polling
 * threads' passes and address-space switches. -1 where a file is
 * missing (no schedstats, no vhost_poll).
 */
struct task_counts {
	__s64 wakeups, remote, sleeps;
};

struct counts {
	struct task_counts driver, worker, pollers;
	__s64 goidle, ttwu, ttwu_local, run_delay_ns, res_ipis, cal_ipis;
	__s64 passes;
	struct vp_vq_row vq;
	int vq_rows;
};

/* The value of key @key in the "key : value" lines of @path; -1 if none.
 * A key matches with any prefix ending in '.' (se.statistics.nr_wakeups
 * on older kernels).
 */
static __s64 proc_field(const char *path, const char *key)
{
	size_t klen = strlen(key);
	char line[256], *colon, *end;
	__s64 v = -1;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while (v < 0 && fgets(line, sizeof(line), f)) {
		colon = strchr(line, ':');
		if (!colon)
			continue;
		end = colon;
		while (end > line && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if (end - line < (long)klen || memcmp(end - klen, key, klen) ||
		    (end - line > (long)klen && end[-klen - 1] != '.'))
			continue;
		v = strtoll(colon + 1, NULL, 10);
	}
	fclose(f);
	return v;
}

static void task_counts(int tid, struct task_counts *c)
{
	char path[64];

	c->wakeups = -1;
	c->remote = -1;
	c->sleeps = -1;
	if (tid <= 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/sched", tid);
	c->wakeups = proc_field(path, "nr_wakeups");
	c->remote = proc_field(path, "nr_wakeups_remote");
	snprintf(path, sizeof(path), "/proc/%d/status", tid);
	c->sleeps = proc_field(path, "voluntary_ctxt_switches");
}

static void add_task_counts(struct task_counts *sum, const struct task_counts *c)
{
	sum->wakeups = sum->wakeups < 0 || c->wakeups < 0 ? -1 : sum->wakeups + c->wakeups;
	sum->remote = sum->remote < 0 || c->remote < 0 ? -1 : sum->remote + c->remote;
	sum->sleeps = sum->sleeps < 0 || c->sleeps < 0 ? -1 : sum->sleeps + c->sleeps;
}

/* The cpuN lines of /proc/schedstat, summed: fields 4 (sched_goidle),
 * 5 (ttwu_count), 6 (ttwu_local) and 8 (run_delay, ns).
 */
static void read_schedstat(struct counts *c)
{
	unsigned long long f[9];
	char line[512];
	FILE *fp = fopen("/proc/schedstat", "re");
	__s64 init = fp ? 0 : -1;

	c->goidle = init;
	c->ttwu = init;
	c->ttwu_local = init;
	c->run_delay_ns = init;
	if (!fp)
		return;
	while (fgets(line, sizeof(line), fp)) {
		if (strncmp(line, "cpu", 3) ||
		    sscanf(line, "%*s %llu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1],
			   &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8]) != 9)
			continue;
		c->goidle += f[3];
		c->ttwu += f[4];
		c->ttwu_local += f[5];
		c->run_delay_ns += f[7];
	}
	fclose(fp);
}

/* The line of /proc/interrupts named @name ("RES:"), summed over CPUs. */
static __s64 irq_count(const char *name)
{
	size_t len = strlen(name), cap = 0;
	char *line = NULL, *p, *end;
	__s64 sum = -1;
	FILE *f = fopen("/proc/interrupts", "re");

	if (!f)
		return -1;
	/* A line has a column a CPU: as long as it takes. */
	while (sum < 0 && getline(&line, &cap, f) > 0) {
		for (p = line; *p == ' '; p++)
			;
		if (strncmp(p, name, len))
			continue;
		sum = 0;
		for (p += len;; p = end) {
			unsigned long long v = strtoull(p, &end, 10);

			if (end == p)
				break;
			sum += v;
		}
	}
	free(line);
	fclose(f);
	return sum;
}

static void counts_snap(struct counts *c, int worker)
{
	struct vp_worker w[16];
	struct task_counts t;
	int n = vp_workers(w, 16), i;

	task_counts(getpid(), &c->driver);
	task_counts(worker, &c->worker);
	c->pollers = (struct task_counts){ 0, 0, 0 };
	c->passes = n < 0 ? -1 : 0;
	for (i = 0; i < n; i++) {
		task_counts(w[i].pid, &t);
		add_task_counts(&c->pollers, &t);
		c->passes += w[i].passes;
	}
	if (n <= 0)
		c->pollers = (struct task_counts){ -1, -1, -1 };
	read_schedstat(c);
	c->res_ipis = irq_count("RES:");
	c->cal_ipis = irq_count("CAL:");
	c->vq_rows = vp_vq_sum(getpid(), -1, &c->vq, NULL);
}

/* Prints "name": y - x, or -1 where either is unknown or it went back. */
static void print_delta(const char *name, __s64 x, __s64 y)
{
	printf(", \"%s\": %lld", name, x < 0 || y < x ? -1LL : (long long)(y - x));
}

static void print_counts(const struct counts *a, const struct counts *b, __u64 ns)
{
	bool vq = a->vq_rows > 0 && b->vq_rows > 0;

	printf(", \"counts\": {\"window_ns\": %llu", (unsigned long long)ns);
	print_delta("driver_wakeups", a->driver.wakeups, b->driver.wakeups);
	print_delta("driver_remote", a->driver.remote, b->driver.remote);
	print_delta("driver_sleeps", a->driver.sleeps, b->driver.sleeps);
	print_delta("worker_wakeups", a->worker.wakeups, b->worker.wakeups);
	print_delta("worker_remote", a->worker.remote, b->worker.remote);
	print_delta("worker_sleeps", a->worker.sleeps, b->worker.sleeps);
	print_delta("poller_wakeups", a->pollers.wakeups, b->pollers.wakeups);
	print_delta("poller_remote", a->pollers.remote, b->pollers.remote);
	print_delta("poller_sleeps", a->pollers.sleeps, b->pollers.sleeps);
	print_delta("idle_entries", a->goidle, b->goidle);
	print_delta("wakeups", a->ttwu, b->ttwu);
	print_delta("wakeups_local", a->ttwu_local, b->ttwu_local);
	print_delta("run_delay_ns", a->run_delay_ns, b->run_delay_ns);
	print_delta("res_ipis", a->res_ipis, b->res_ipis);
	print_delta("cal_ipis", a->cal_ipis, b->cal_ipis);
	print_delta("passes", a->passes, b->passes);
	print_delta("vq_kicks", vq ? (__s64)a->vq.kicks : -1, (__s64)b->vq.kicks);
	print_delta("poll_work", vq ? (__s64)a->vq.poll_work : -1, (__s64)b->vq.poll_work);
	print_delta("notify_work", vq ? (__s64)a->vq.notify_work : -1, (__s64)b->vq.notify_work);
	print_delta("queued", vq ? (__s64)a->vq.queued : -1, (__s64)b->vq.queued);
	printf("}");
}

/* Percent of one CPU that run time @x to @y took over @ns; -1 if unknown. */
static double cpu_pct(__s64 x, __s64 y, __u64 ns)
{
	if (x < 0 || y < x || !ns)
		return -1;
	return 100.0 * (y - x) / ns;
}

/*
 * One step of stream: post a whole batch if that many descriptors are
 * free; if not, ask for a call once enough are back and wait for it.
 */
static int stream_step(struct vring_drv *d, unsigned int batch)
{
	unsigned int need;

	vring_reap(d);
	if (d->nfree >= batch)
		return vring_post(d, batch) ? 0 : -ENOSPC;
	need = batch - d->nfree;
	__atomic_store_n(&vring_used_event(&d->vr), (__u16)(d->last_used + need - 1),
			 __ATOMIC_RELEASE);
	vr_mb();
	if ((__u16)(__atomic_load_n(&d->vr.used->idx, __ATOMIC_ACQUIRE) - d->last_used) >= need)
		return 0;
	if (vring_wait(d, STALL_MS) && !vring_reap(d) && !over())
		return -ETIMEDOUT;
	return 0;
}

/*
 * One round trip of rr: post one buffer, block until it is used, and
 * record the time since the previous round trip ended at *@prev. A round
 * trip cut short by the end of the phase is left in flight, unrecorded.
 */
static int rr_step(struct vring_drv *d, __u64 *prev)
{
	unsigned int got;
	__u64 t;

	if (!vring_post(d, 1))
		return -ENOSPC;
	got = vring_reap(d);
	while (!got && !over()) {
		int r = vring_wait(d, STALL_MS);

		got = vring_reap(d);
		if (r && !got && !over())
			return -ETIMEDOUT;
	}
	if (!got)
		return 0;
	t = now_ns();
	lat_hist[lat_bucket(t - *prev)]++;
	lat_count++;
	*prev = t;
	return 0;
}

/* Wait for SIGALRM without missing one that comes before the wait. */
static void idle_until_over(void)
{
	sigset_t alrm, old;

	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	sigprocmask(SIG_BLOCK, &alrm, &old);
	while (!over())
		sigsuspend(&old);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

/* Run the workload until the phase ends; -errno if the device stalls. */
static int run_phase(struct vring_drv *d, enum workload w, unsigned int batch)
{
	__u64 prev = now_ns();
	int ret = 0;

	if (w == W_IDLE)
		idle_until_over();
	while (!ret && !over())
		ret = w == W_STREAM ? stream_step(d, batch) : rr_step(d, &prev);
	return ret;
}

/* Kick @kicks buffers in a row into @d and wait for them: 0 or -ETIMEDOUT. */
static int kick_in(struct vring_drv *d, unsigned int kicks)
{
	return vring_post_kicked(d, kicks) == kicks && !vring_drain(d, STALL_MS) ? 0 : -ETIMEDOUT;
}

/*
 * The polling threads' empty visits, their time (ns) and their switches
 * between address spaces, all rows summed.
 */
static void empty_visits(__u64 *visits, __u64 *ns, __u64 *switches)
{
	struct vp_worker w[16];
	int n = vp_workers(w, 16), i;

	*visits = 0;
	*ns = 0;
	*switches = 0;
	for (i = 0; i < n; i++) {
		*visits += w[i].empty_visits;
		*ns += w[i].empty_visit_ns;
		*switches += w[i].mm_switches;
	}
}

/*
 * After the load: the time until every polling thread is asleep with no
 * vq polled, and their CPU over @secs seconds from the end of the load.
 */
static void idle_probe(unsigned int secs, double *sleep_ms, double *idle_cpu, int *polled)
{
	__u64 t0 = now_ns(), t_end = t0 + secs * 1000000000ULL, t;
	struct vp_worker w[16];
	int n = vp_workers(w, 16), i;
	__s64 c0, c1;

	*sleep_ms = -1;
	*idle_cpu = -1;
	*polled = -1;
	if (n <= 0)
		return;
	/* Whether the load ended in poll mode: else there is nothing to see. */
	for (*polled = 0, i = 0; i < n; i++)
		*polled += w[i].polled_vqs;
	c0 = pollers_runtime_ns();
	while ((t = now_ns()) < t_end) {
		if (*sleep_ms < 0 && vp_workers_asleep())
			*sleep_ms = (t - t0) / 1e6;
		if (*sleep_ms < 0)
			vp_sleep_us(100);
		else
			vp_sleep_ms((t_end - t) / 1000000 + 1);
	}
	c1 = pollers_runtime_ns();
	*idle_cpu = cpu_pct(c0, c1, now_ns() - t0);
}

static void usage(const char *prog)
{
	printf("Usage: %s [OPTIONS]\n"
	       "Drives one vhost device with one workload and prints one JSON line.\n\n"
	       "  -d DEV        test (/dev/vhost-test, default) or net (/dev/vhost-net, tap)\n"
	       "  -w WORKLOAD   stream (default), rr or idle\n"
	       "  -b BATCH      buffers per post in stream (default 1)\n"
	       "  -r RING       ring entries, a power of 2 (default 256)\n"
	       "  -W MS         warm-up before measuring (default 300)\n"
	       "  -D MS         measured time (default 1000)\n"
	       "  -B US         vhost-net busy-loop timeout (VHOST_SET_VRING_BUSYLOOP_TIMEOUT)\n"
	       "  -k KICKS      kick this many buffers in a row first (enters poll mode)\n"
	       "  -I SECS       after the load: time until vhost-poll sleeps, its CPU over SECS\n"
	       "  -n N          with -w idle: N more idle devices of this process, kicked\n"
	       "                into poll mode as the first one is (-k)\n"
	       "  -s            print \"ready\" when set up, start on a line from stdin\n"
	       "                (\"go T\": at CLOCK_MONOTONIC T ns), and after the figures\n"
	       "                hold the device until stdin closes\n"
	       "Exits 0 when every buffer was used exactly once.\n", prog);
}

static int parse_uint(const char *s, unsigned int *v)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(s, &end, 0);
	if (errno || end == s || *end || x > 0xffffffffUL)
		return -1;
	*v = x;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned int batch = 1, ring = 256, warm = 300, dur = 1000, busy = 0;
	unsigned int kicks = 0, probe = 0, more = 0, i;
	struct vring_drv *extra = NULL;
	__u64 ev0, evns0, sw0, ev1, evns1, sw1;
	enum vring_dev dev = VRING_TEST;
	enum workload w = W_STREAM;
	struct sigaction sa = { .sa_handler = on_alarm };
	__u64 used0, kicks0, posted0, n, p50 = 0, p99 = 0, seen = 0;
	unsigned long long start;
	struct cpu_snap c0, c1;
	struct counts k0, k1;
	struct vp_vq_row sum;
	int worker, idle_polled = -1, polled;
	double sleep_ms = -1, idle_cpu = -1, secs;
	bool sync = false, first = true;
	struct vring_drv d;
	char line[32];
	int c, ret;

	while ((c = getopt(argc, argv, "d:w:b:r:W:D:B:k:I:n:sh")) != -1) {
		int bad = 0;

		switch (c) {
		case 'd':
			bad = strcmp(optarg, "test") && strcmp(optarg, "net");
			dev = strcmp(optarg, "net") ? VRING_TEST : VRING_NET;
			break;
		case 'w':
			w = !strcmp(optarg, "rr") ? W_RR :
			    !strcmp(optarg, "idle") ? W_IDLE : W_STREAM;
			bad = w == W_STREAM && strcmp(optarg, "stream");
			break;
		case 'b':
			bad = parse_uint(optarg, &batch) || !batch;
			break;
		case 'r':
			bad = parse_uint(optarg, &ring) || !ring || ring > 32768 ||
				(ring & (ring - 1));
			break;
		case 'W':
			bad = parse_uint(optarg, &warm);
			break;
		case 'D':
			bad = parse_uint(optarg, &dur) || !dur;
			break;
		case 'B':
			bad = parse_uint(optarg, &busy);
			break;
		case 'k':
			bad = parse_uint(optarg, &kicks);
			break;
		case 'I':
			bad = parse_uint(optarg, &probe);
			break;
		case 'n':
			bad = parse_uint(optarg, &more) || more > 4096;
			break;
		case 's':
			sync = true;
			break;
		case 'h':
			usage(argv[0]);
			return 0;
		default:
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "vhost_bench: bad -%c %s\n", c, optarg ? optarg : "");
			usage(argv[0]);
			return 2;
		}
	}

	if (batch > ring) {
		fprintf(stderr, "vhost_bench: -b %u is larger than the ring (-r %u)\n",
			batch, ring);
		return 2;
	}
	if (more && w != W_IDLE) {
		fprintf(stderr, "vhost_bench: -n is for -w idle only\n");
		return 2;
	}
	/* Enough sequence numbers for any run this program makes. */
	ret = vring_open_dev(&d, dev, ring, true, w == W_IDLE ? 1ULL << 16 : 1ULL << 26);
	if (ret) {
		fprintf(stderr, "vhost_bench: cannot set up %s: %s\n",
			dev == VRING_NET ? "/dev/vhost-net" : "/dev/vhost-test", strerror(-ret));
		return 1;
	}
	for (i = 0; busy && i < 2; i++) {
		struct vhost_vring_state s = { .index = i, .num = busy };

		if (ioctl(d.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &s)) {
			fprintf(stderr, "vhost_bench: VHOST_SET_VRING_BUSYLOOP_TIMEOUT: %s\n",
				strerror(errno));
			return 1;
		}
	}
	snprintf(line, sizeof(line), "vhost-%d", getpid());
	worker = find_task(line);
	sigaction(SIGALRM, &sa, NULL);
	if (kicks && kick_in(&d, kicks)) {
		fprintf(stderr, "vhost_bench: the first %u buffers were not used\n", kicks);
		return 1;
	}
	extra = more ? calloc(more, sizeof(*extra)) : NULL;
	if (more && !extra)
		return 1;
	for (i = 0; i < more; i++) {
		ret = vring_open_dev(&extra[i], dev, ring, true, 1ULL << 16);
		if (!ret && kicks)
			ret = kick_in(&extra[i], kicks);
		if (ret) {
			fprintf(stderr, "vhost_bench: extra device %u: %s\n", i, strerror(-ret));
			return 1;
		}
	}
	if (sync) {
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		/* "go T": start at CLOCK_MONOTONIC T (ns), with the others. */
		if (sscanf(line, "go %llu", &start) == 1) {
			struct timespec ts = { .tv_sec = start / 1000000000ULL,
					       .tv_nsec = start % 1000000000ULL };

			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
	}

	arm(warm);
	ret = warm ? run_phase(&d, w, batch) : 0;
	/*
	 * Idle devices whose vqs left poll mode while hundreds of drivers
	 * started (the watchdog hands back what a busy host's thread could
	 * not look at in time) are kicked into it again, once.
	 */
	if (!ret && w == W_IDLE && kicks && vp_vq_sum(getpid(), -1, &sum, &polled) >= 0 &&
	    polled < (int)(1 + more)) {
		for (i = 0; !ret && i <= more; i++)
			ret = kick_in(i ? &extra[i - 1] : &d, kicks);
	}
	/* rr measures from one buffer in flight: none left from warm-up. */
	if (!ret && w == W_RR)
		ret = vring_drain(&d, STALL_MS);
	memset(lat_hist, 0, sizeof(lat_hist));
	lat_count = 0;
	used0 = d.used;
	kicks0 = d.kicks;
	posted0 = d.posted;
	counts_snap(&k0, worker);
	cpu_snap(&c0, worker);
	empty_visits(&ev0, &evns0, &sw0);
	arm(dur);
	if (!ret)
		ret = run_phase(&d, w, batch);
	cpu_snap(&c1, worker);
	empty_visits(&ev1, &evns1, &sw1);
	counts_snap(&k1, worker);
	n = d.used - used0;
	kicks0 = d.kicks - kicks0;
	posted0 = d.posted - posted0;
	if (!ret)
		ret = vring_drain(&d, STALL_MS);
	if (ret)
		fprintf(stderr, "vhost_bench: the device stalled after %llu buffers: %s\n",
			(unsigned long long)d.used, strerror(-ret));
	if (!ret && probe)
		idle_probe(probe, &sleep_ms, &idle_cpu, &idle_polled);

	p50 = LAT_BUCKETS;
	p99 = LAT_BUCKETS;
	for (i = 0; i < LAT_BUCKETS && lat_count; i++) {
		seen += lat_hist[i];
		if (p50 == LAT_BUCKETS && seen * 2 >= lat_count)
			p50 = i;
		if (p99 == LAT_BUCKETS && seen * 100 >= lat_count * 99)
			p99 = i;
	}
	secs = (c1.t - c0.t) / 1e9;
	printf("{\"pid\": %d, \"buffers\": %llu, \"seconds\": %.6f, ", getpid(),
	       (unsigned long long)n, secs);
	printf("\"buffers_per_s\": %.1f, \"posted\": %llu, \"kicks\": %llu, ", n / secs,
	       (unsigned long long)posted0, (unsigned long long)kicks0);
	printf("\"rtts\": %llu, \"lat_p50_us\": %.3f, \"lat_p99_us\": %.3f, \"lat_hist\": [",
	       (unsigned long long)lat_count, lat_mid_us(p50), lat_mid_us(p99));
	for (i = 0; i < LAT_BUCKETS; i++) {
		if (!lat_hist[i])
			continue;
		printf("%s[%u, %llu]", first ? "" : ", ", i, (unsigned long long)lat_hist[i]);
		first = false;
	}
	printf("], \"driver_cpu_pct\": %.3f, \"worker_cpu_pct\": %.3f, \"poller_cpu_pct\": %.3f",
	       cpu_pct(c0.driver, c1.driver, c1.t - c0.t),
	       cpu_pct(c0.worker, c1.worker, c1.t - c0.t),
	       cpu_pct(c0.poller, c1.poller, c1.t - c0.t));
	printf(", \"idle_polled_at_start\": %d, \"idle_sleep_ms\": %.3f, \"idle_cpu_pct\": %.6f",
	       idle_polled, sleep_ms, idle_cpu);
	printf(", \"stalls\": %llu", vp_vq_sum(getpid(), -1, &sum, NULL) > 0 ? sum.stalls : 0ULL);
	printf(", \"empty_visits\": %llu, \"empty_visit_ns\": %llu, \"mm_switches\": %llu",
	       (unsigned long long)(ev1 - ev0), (unsigned long long)(evns1 - evns0),
	       (unsigned long long)(sw1 - sw0));
	print_counts(&k0, &k1, c1.t - c0.t);
	printf(", \"all_used_once\": %s}\n", !ret && vring_all_used_once(&d) ? "true" : "false");
	fflush(stdout);
	ret = ret || !vring_all_used_once(&d);
	/* Hold the device open until told, so that its vqs stay attached. */
	while (sync && fgets(line, sizeof(line), stdin))
		;
	for (i = 0; i < more; i++)
		vring_close(&extra[i]);
	free(extra);
	vring_close(&d);
	return ret;
}
