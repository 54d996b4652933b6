// SPDX-License-Identifier: GPL-2.0
/*
 * What one owner, or the polling threads' lot, costs the others: a
 * polling thread starved or napping, real-time and busy neighbours, idle
 * devices, the counters' readers, grace periods, a cgroup's CPU cap,
 * pinned pages, and two polling threads side by side.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "kselftest_harness.h"
#include "vhost_poll.h"
#include "vring.h"
#include "poll_util.h"
#include "poll_fixture.h"

/*
 * The polling thread kept off its CPU: vhost hands a polled ring back
 * once the thread has not looked at it for poll_stall_us (the bound
 * vhost_poller_start() is given, include/linux/vhost_poller.h), from a
 * timer that may fire a quarter of it late. The bound, that quarter and
 * a jiffy for the handler's run, in ms (rounded up); 0 if the parameter
 * cannot be read.
 */
static unsigned long long watchdog_ms(void)
{
	char buf[32];
	unsigned long us;

	if (vp_param_read("poll_stall_us", buf, sizeof(buf)))
		return 0;
	us = strtoul(buf, NULL, 10);
	return (us * 5 / 4 + 999) / 1000 + vp_jiffies_ms(1);
}

/*
 * The neighbour tests' placement: the polling thread on CPU 0, where the
 * spinner goes; the caller, and so the vhost workers it forks, on CPU 1.
 */
static int thread_on_0_owners_on_1(void)
{
	struct vp_worker w;
	int ret = vp_worker(&w);

	if (!ret)
		ret = pin_to(w.pid, 0);
	return ret ? ret : pin_to(0, 1);
}

/*
 * The first polling thread on CPU 1, given to it (poll_cpus=1: a pin of
 * its own would be undone by its placement), once it runs there; 0 or
 * -errno.
 */
static int thread_on_1(int pid)
{
	unsigned long long t0 = vp_now_ms();
	int ret = vp_param_write("poll_cpus", "1", 1);

	while (!ret && vp_task_cpu(pid) != 1) {
		if (vp_now_ms() - t0 > STALL_MS)
			return -ETIMEDOUT;
		vp_sleep_ms(1);
	}
	return ret;
}

/*
 * The neighbour tests' placement for one that reads the polling thread's
 * run time, the thread's row in *@w: NULL, or why the test cannot run
 * here (@one_cpu, its reason to need two CPUs), with *@ret 0; or NULL
 * with a failed step's -errno in *@ret.
 */
static const char *timed_thread_on_0(const char *one_cpu, struct vp_worker *w, int *ret)
{
	*ret = 0;
	if (vp_ncpus() < 2)
		return one_cpu;
	*ret = thread_on_0_owners_on_1();
	if (!*ret)
		*ret = vp_worker(w);
	if (!*ret && vp_task_runtime_ns(w->pid) < 0)
		return "no /proc/PID/sched (CONFIG_SCHED_DEBUG): no thread run time";
	return NULL;
}

/* The time CPU @cpu was busy (user, system, interrupts), in ms, from /proc/stat; -1 if unknown. */
static long long cpu_busy_ms(int cpu)
{
	unsigned long long user, nice, sys, idle, iowait, irq, softirq;
	long hz = sysconf(_SC_CLK_TCK);
	long long ms = -1;
	char line[256];
	int n;
	FILE *f = fopen("/proc/stat", "re");

	if (!f || hz <= 0) {
		if (f)
			fclose(f);
		return -1;
	}
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "cpu", 3) && isdigit((unsigned char)line[3]) &&
		    sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu", &n, &user, &nice,
			   &sys, &idle, &iowait, &irq, &softirq) == 8 && n == cpu) {
			ms = (user + nice + sys + irq + softirq) * 1000 / hz;
			break;
		}
	fclose(f);
	return ms;
}

/* The tests of what one owner, or the polling thread's lot, costs others. */
FIXTURE(neighbour) {
};

FIXTURE_SETUP(neighbour)
{
	wq_unbound_restore();
	teardown_open(_metadata, VRING_TEST);
}

FIXTURE_TEARDOWN(neighbour)
{
	wq_unbound_restore();
	teardown_close(_metadata);
}

/*
 * A polled ring is never left unwatched: a SCHED_FIFO task spins for
 * 300 ms on the polling thread's CPU (another tenant's real-time vCPU,
 * RT throttling off) while this owner streams from the other CPU, where
 * its worker runs too. vhost's watchdog hands the ring back at most
 * poll_stall_us and a quarter after the thread's last visit, and the
 * owner's worker serves it by kicks: the longest wait for a buffer stays
 * within that bound and a jiffy (without the watchdog, the whole 300 ms).
 *
 * starved_round() is one such spin: the longest buffer's wait in ms, or
 * ~0 when a buffer never came back.
 */
static unsigned long long starved_round(struct __test_metadata *_metadata,
					struct vring_drv *d, unsigned int spin_ms)
{
	unsigned long long t0, t, ms, worst = 0, spun;
	struct spinner spinner;
	bool spinning = false;

	if (spinner_start(&spinner, 0, spin_ms))
		return ~0ULL;
	/* Polled again: the last round's watchdog handed the ring back. */
	EXPECT_EQ(0, vring_stream(d, 100, 1, STALL_MS));
	EXPECT_TRUE(vp_wait_polled(getpid(), 1, 1000));
	/* One buffer at a time, from 50 ms before the spin to 50 ms after. */
	t0 = vp_now_ms();
	while ((ms = vp_now_ms() - t0) < spin_ms + 100) {
		if (ms >= 50 && !spinning) {
			EXPECT_EQ(0, spinner_go(&spinner));
			spinning = true;
		}
		t = vp_now_ms();
		if (vring_post(d, 1) != 1 || vring_drain(d, STALL_MS)) {
			worst = ~0ULL;
			break;
		}
		if (vp_now_ms() - t > worst)
			worst = vp_now_ms() - t;
	}
	spun = spinner_end(&spinner);
	EXPECT_LE(spin_ms, spun);
	TH_LOG("polling thread off its CPU for %llu ms: the longest buffer took %llu ms",
	       spun, worst);
	return worst;
}

TEST_F(neighbour, starved_thread_hands_back_within_bound)
{
	const unsigned int spin_ms = 300;
	unsigned long long worst, bound, stalls0;
	struct vp_vq_row sum;
	struct vring_drv d;
	int round;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the spinner on one, the owner on the other");
	bound = watchdog_ms();
	ASSERT_LT(0, bound);
	ASSERT_EQ(0, thread_on_0_owners_on_1());
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	/*
	 * Up to three rounds: under TCG one buffer in a make check took
	 * 28 ms against a bound of 24. Without the watchdog every round's
	 * longest buffer is the whole spin, 300 ms, and every round misses.
	 */
	for (round = 0; round < 3; round++) {
		ASSERT_EQ(0, vp_vq_sum(getpid(), d.index, &sum, NULL) < 0);
		stalls0 = sum.stalls;
		worst = starved_round(_metadata, &d, spin_ms);
		ASSERT_NE(~0ULL, worst);
		ASSERT_EQ(0, vp_vq_sum(getpid(), d.index, &sum, NULL) < 0);
		TH_LOG("round %d: bound %llu ms, %llu exits, %llu by the watchdog",
		       round + 1, bound, sum.exits, sum.stalls - stalls0);
		EXPECT_LE(1, sum.stalls - stalls0);
		if (worst <= bound)
			break;
	}
	EXPECT_GE(bound, worst);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * poll_start_rate=0 takes effect within the watchdog's bound whether or
 * not the polling thread runs: written once a SCHED_FIFO task holds the
 * thread's CPU (only a context that does not need the thread can act on
 * it then), the vq is back in notification mode within the bound and a
 * jiffy, and stays there once the thread runs again.
 */
TEST_F(neighbour, rate_zero_while_the_thread_is_starved)
{
	const unsigned int spin_ms = 300;
	/* The bound and a jiffy, and 5 ms for the sampling of the counters. */
	unsigned long long t0, ms, spun, bound = watchdog_ms() + 5;
	struct spinner spinner;
	struct vp_vq_row sum;
	struct vring_drv d;
	int polled, round;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the spinner on one, the owner on the other");
	ASSERT_EQ(0, thread_on_0_owners_on_1());
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	/*
	 * Up to three rounds: under TCG one took 36 ms against a bound of
	 * 29 in a check run. Without the watchdog every round takes the
	 * whole spin, and every round misses.
	 */
	for (round = 0; round < 3; round++) {
		ASSERT_EQ(0, poll_for_long(&d));
		ASSERT_EQ(0, spinner_start(&spinner, 0, spin_ms));
		t0 = vp_now_ms();
		ASSERT_EQ(0, spinner_go(&spinner));
		ASSERT_EQ(0, vp_param_set("poll_start_rate", 0));
		ASSERT_TRUE(vp_wait_polled(getpid(), 0, STALL_MS));
		ms = vp_now_ms() - t0;
		spun = spinner_end(&spinner);
		EXPECT_LE(spin_ms, spun);
		/* The thread runs again, and polls nothing: the rate is 0. */
		ASSERT_EQ(0, vring_stream(&d, 1000, 1, STALL_MS));
		ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
		EXPECT_EQ(0, polled);
		TH_LOG("round %d: poll_start_rate=0, the thread off its CPU for %llu ms:",
		       round + 1, spun);
		TH_LOG("notification mode after %llu ms (bound %llu ms)", ms, bound);
		if (ms <= bound)
			break;
	}
	EXPECT_GE(bound, ms);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/* Kill @pid, a task cpu0_task_start() forked, and reap it. */
static void cpu0_task_stop(pid_t pid)
{
	int status;

	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
}

/*
 * Fork a task that runs @body on CPU 0, pinned there before this returns,
 * and dies with the test whatever path the test ends by: its pid, or
 * -errno.
 */
static pid_t cpu0_task_start(void (*body)(void))
{
	pid_t parent = getpid(), pid = fork();

	if (pid < 0)
		return -errno;
	if (!pid) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(2);
		body();
		_exit(0);
	}
	if (pin_to(pid, 0)) {
		cpu0_task_stop(pid);
		return -EINVAL;
	}
	return pid;
}

/*
 * A task on CPU 0 that wants it now and then: every 2 ms it needs
 * 200 us. It waits at few of the polling thread's passes (when it wakes,
 * until the thread's pass ends and it yields), too few for the contention
 * rule (half of a window's passes), yet it waits.
 */
static void nibble(void)
{
	for (;;) {
		unsigned long long t;

		vp_sleep_us(2000);
		t = vp_now_us();
		while (vp_now_us() - t < 200)
			;
	}
}

/* KickCost::JIFFIES: the window of poll_max_kick_cost's rule. */
#define KICK_COST_JIFFIES	16

/*
 * poll_max_kick_cost: a polling thread whose CPU per kick it saves
 * exceeds the limit while others want its CPU hands its vqs back, where
 * the contention rule, which counts passes, sees nothing. An idle polled
 * vq saves no kick; next to a task that wants the thread's CPU a tenth of
 * the time it stays polled with no limit (0, the default) for four
 * windows, and with a limit of 1000 us goes back within four windows,
 * not by the watchdog.
 */
TEST_F(neighbour, kick_cost_limit_hands_back_what_costs_others)
{
	unsigned long long t0, ms = 0, window = vp_jiffies_ms(4 * KICK_COST_JIFFIES);
	struct vp_worker w0, w1;
	struct vp_vq_row sum;
	struct vring_drv d;
	__u64 exits, stalls;
	int polled = 1, round;
	pid_t nib;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the thread and a task on one, the owner on the other");
	ASSERT_EQ(0, thread_on_0_owners_on_1());
	/* The default: what does not pay goes back (0 keeps everything). */
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 16));
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	nib = cpu0_task_start(nibble);
	ASSERT_LT(0, nib);

	/*
	 * No limit: polled on, idle, whoever wants the CPU now and then. An
	 * idle ring the watchdog took back (this vCPU off its host's CPU for
	 * poll_stall_us: seen once in make check under TCG) stays in
	 * notification mode, as nothing kicks it; that is not the rule's
	 * doing, and the window is run again, three times at most. An exit
	 * for any other reason fails at once.
	 */
	for (round = 1;; round++) {
		if (round > 1)
			ASSERT_EQ(0, poll_for_long(&d));
		ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
		ASSERT_EQ(0, vp_worker(&w0));
		exits = sum.exits;
		stalls = sum.stalls;
		vp_sleep_ms(window);
		ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
		ASSERT_EQ(0, vp_worker(&w1));
		TH_LOG("round %d, no limit: polled %d after %llu ms, %llu exits",
		       round, polled, window, sum.exits - exits);
		TH_LOG("(%llu by the watchdog);", sum.stalls - stalls);
		TH_LOG("the thread yielded %llu times", w1.yields - w0.yields);
		if (round == 3 || sum.exits == exits || sum.exits - exits != sum.stalls - stalls)
			break;
	}
	EXPECT_EQ(1, polled);
	EXPECT_EQ(exits, sum.exits);
	/* The task did wait for the thread's CPU, or the rule has no case. */
	EXPECT_LT(0, w1.yields - w0.yields);

	/* A limit: handed back, by the rule and not the watchdog. */
	stalls = sum.stalls;
	ASSERT_EQ(0, vp_param_set("poll_max_kick_cost", 1000));
	t0 = vp_now_ms();
	while (polled && (ms = vp_now_ms() - t0) < STALL_MS) {
		vp_sleep_ms(1);
		ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	}
	TH_LOG("poll_max_kick_cost=1000: handed back after %llu ms (bound %llu ms)", ms, window);
	EXPECT_EQ(0, polled);
	EXPECT_GE(window, ms);
	EXPECT_LT(exits, sum.exits);
	EXPECT_EQ(stalls, sum.stalls);
	cpu0_task_stop(nib);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

static int cmp_ull(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a;
	unsigned long long y = *(const unsigned long long *)b;

	return x < y ? -1 : x > y;
}

#define TRICKLE_N	150

#define TRICKLE_GAP_MS	5

/* A phase of the trickle test: what it cost the thread, what it did. */
struct trickle {
	/* The thread's share of one CPU, in per cent; the round trips (us). */
	unsigned long long cpu_pct, p50_us, max_us;
	/* Naps, and exits from poll mode other than the watchdog's. */
	unsigned long long naps, exits, stalls;
};

/*
 * TRICKLE_N buffers, one every TRICKLE_GAP_MS, each waited for, on @d's
 * polled vq, whose thread is @poller; 0 or -errno.
 */
static int trickle_run(struct vring_drv *d, int poller, struct trickle *t)
{
	unsigned long long lat[TRICKLE_N], t0, t1;
	struct vp_worker w0, w1;
	struct vp_vq_row a, b;
	long long ran0, ran1;
	int i, ret;

	if (vp_worker(&w0) || vp_vq_sum(getpid(), d->index, &a, NULL) != 1)
		return -ENOENT;
	ran0 = vp_task_runtime_ns(poller);
	t0 = vp_now_us();
	for (i = 0; i < TRICKLE_N; i++) {
		unsigned long long s;

		vp_sleep_ms(TRICKLE_GAP_MS);
		s = vp_now_us();
		if (vring_post_kicked(d, 1) != 1)
			return -ENOSPC;
		ret = vring_drain(d, STALL_MS);
		if (ret)
			return ret;
		lat[i] = vp_now_us() - s;
	}
	t1 = vp_now_us();
	ran1 = vp_task_runtime_ns(poller);
	if (vp_worker(&w1) || vp_vq_sum(getpid(), d->index, &b, NULL) != 1 || ran0 < 0 || ran1 < 0)
		return -ENOENT;
	qsort(lat, TRICKLE_N, sizeof(lat[0]), cmp_ull);
	t->cpu_pct = (ran1 - ran0) / 10 / (t1 - t0 ? t1 - t0 : 1);
	t->p50_us = lat[TRICKLE_N / 2];
	t->max_us = lat[TRICKLE_N - 1];
	t->naps = w1.naps - w0.naps;
	t->stalls = b.stalls - a.stalls;
	t->exits = b.exits - a.exits - t->stalls;
	return 0;
}

/*
 * A real-time neighbour on CPU @cpu that comes back: @on_ms of spinning,
 * @off_ms asleep, for @total_ms, in a child; its pid, or -errno.
 */
static pid_t burster_start(int cpu, unsigned int on_ms, unsigned int off_ms,
			   unsigned int total_ms)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (!pid) {
		unsigned long long t0, t;

		if (rt_on(cpu))
			_exit(2);
		t0 = vp_now_ms();
		while (vp_now_ms() - t0 < total_ms) {
			for (t = vp_now_ms(); vp_now_ms() - t < on_ms;)
				;
			vp_sleep_ms(off_ms);
		}
		_exit(0);
	}
	return pid;
}

/* Wait for burster_start()'s @pid: whether it ran as it should. */
static bool burster_end(pid_t pid)
{
	int status;

	return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status);
}

#define BURST_ON_MS	10

#define BURST_OFF_MS	10

#define BURST_THINK_US	500

#define BURST_MAX	8192

/*
 * Request/response on @d for @ms while a burster runs: each round trip's
 * time (us) in @us, and when it ended (ms from the start) in @at; how
 * many, or -errno.
 */
static int burst_rr(struct vring_drv *d, unsigned int ms, unsigned long long *us,
		    unsigned long long *at)
{
	unsigned long long t0 = vp_now_ms(), t;
	int n = 0;

	while (n < BURST_MAX && vp_now_ms() - t0 < ms) {
		t = vp_now_us();
		if (vring_post(d, 1) != 1)
			return -ENOSPC;
		if (vring_drain(d, STALL_MS))
			return -ETIMEDOUT;
		us[n] = vp_now_us() - t;
		at[n++] = vp_now_ms() - t0;
		vp_sleep_us(BURST_THINK_US);
	}
	return n;
}

/* The 99th percentile of the @n times in @us from @at[i] >= @from_ms. */
static unsigned long long burst_p99(unsigned long long *us, unsigned long long *at, int n,
				    unsigned long long from_ms)
{
	static unsigned long long v[BURST_MAX];
	int i, m = 0;

	for (i = 0; i < n; i++)
		if (at[i] >= from_ms)
			v[m++] = us[i];
	if (!m)
		return 0;
	qsort(v, m, sizeof(v[0]), cmp_ull);
	return v[m - 1 - m / 100];
}

/*
 * A real-time neighbour that keeps coming back to the polling thread's
 * CPU, 10 ms on and 10 ms off, each burst shorter than the watchdog's
 * bound once was (4 jiffies: 16 ms at HZ=250): every polled request that
 * came during a burst waited for its end, 50 times a second, and no rule
 * saw it (the thread, whenever it ran, found nobody waiting for its CPU).
 * With the bound in microseconds (poll_stall_us, 5 ms by default) each
 * burst stalls the ring, which cools down; and a thread stalled again and
 * again is held and takes no ring. So the owner's p99 over the last of 3
 * seconds of bursts is back within notification mode's with the same
 * neighbour, and a jiffy. (Before: p99 about a burst, 10 ms.)
 */
TEST_F(neighbour, returning_rt_neighbour_is_a_stall_not_a_latency)
{
	static unsigned long long us[BURST_MAX], at[BURST_MAX];
	unsigned long long notify_p99, poll_p99, bound;
	struct vp_vq_row sum0, sum1;
	struct vring_drv d;
	pid_t burster;
	int n;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the neighbour on one, the owner on the other");
	ASSERT_EQ(0, thread_on_0_owners_on_1());
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	/* The module's default bound (the suite loads it with 4 jiffies). */
	ASSERT_EQ(0, vp_param_set("poll_stall_us", 5000));

	/* Notification mode, with the neighbour: what the owner gets. */
	ASSERT_EQ(0, vp_param_set("poll_start_rate", 0));
	burster = burster_start(0, BURST_ON_MS, BURST_OFF_MS, 1000);
	ASSERT_LT(0, burster);
	n = burst_rr(&d, 1000, us, at);
	ASSERT_TRUE(burster_end(burster));
	ASSERT_LT(100, n);
	notify_p99 = burst_p99(us, at, n, 0);

	/* Polled, and then the neighbour for 3 s. */
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum0, NULL));
	burster = burster_start(0, BURST_ON_MS, BURST_OFF_MS, 3000);
	ASSERT_LT(0, burster);
	n = burst_rr(&d, 3000, us, at);
	ASSERT_TRUE(burster_end(burster));
	ASSERT_LT(300, n);
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum1, NULL));
	poll_p99 = burst_p99(us, at, n, 2000);
	bound = notify_p99 + vp_jiffies_ms(1) * 1000ULL;
	TH_LOG("p99 with the neighbour: notification mode %llu us; polled, the last second %llu us",
	       notify_p99, poll_p99);
	TH_LOG("(bound %llu us, the first second %llu us); %llu stalls, %llu enters in 3 s",
	       bound, burst_p99(us, at, n, 0), sum1.stalls - sum0.stalls,
	       sum1.enters - sum0.enters);
	EXPECT_GE(bound, poll_p99);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * One stretch off its CPU is one episode of stalls, however many passes
 * find the rings it stalled. With 16 rings polled and their driver
 * kicking, every kick on a ring the watchdog took back asks for a start
 * and wakes the thread, which cuts its pass short: after one 30 ms
 * SCHED_FIFO spin on the thread's CPU, the passes find the stalled rings
 * a few at a time. Counted by passes, that one spin made the verdict
 * meant for a neighbour that takes the CPU again and again (every ring
 * handed back, none taken for 256 jiffies). Counted by episodes, the
 * thread is not held (its stalled column stays), and the rings are
 * polled again once cooled down.
 */
#define STRETCH_RINGS 16

TEST_F(neighbour, one_stretch_off_the_cpu_holds_no_thread)
{
	static struct vring_drv d[STRETCH_RINGS];
	unsigned long long t0, ms, spun;
	struct vp_vq_row sum0, sum1;
	struct vp_worker w0, w1;
	struct spinner spinner;
	bool spinning = false;
	int i, polled;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the spin on one, the driver on the other");
	ASSERT_EQ(0, thread_on_0_owners_on_1());
	ASSERT_EQ(0, vp_param_set("poll_stall_us", 5000));
	for (i = 0; i < STRETCH_RINGS; i++)
		ASSERT_EQ(0, vring_open(&d[i], RING, true, 1 << 20));
	for (i = 0; i < STRETCH_RINGS; i++)
		ASSERT_EQ(0, poll_for_long(&d[i]));
	ASSERT_TRUE(vp_wait_polled(getpid(), STRETCH_RINGS, 2000));
	ASSERT_EQ(0, vp_worker(&w0));
	ASSERT_EQ(STRETCH_RINGS, vp_vq_sum(getpid(), 0, &sum0, NULL));
	ASSERT_EQ(0, spinner_start(&spinner, 0, 30));
	/* A buffer on every ring, then their answers, for a second. */
	t0 = vp_now_ms();
	while ((ms = vp_now_ms() - t0) < 1000) {
		if (ms >= 50 && !spinning) {
			ASSERT_EQ(0, spinner_go(&spinner));
			spinning = true;
		}
		for (i = 0; i < STRETCH_RINGS; i++)
			ASSERT_EQ(1, vring_post(&d[i], 1));
		for (i = 0; i < STRETCH_RINGS; i++)
			ASSERT_EQ(0, vring_drain(&d[i], STALL_MS));
	}
	spun = spinner_end(&spinner);
	ASSERT_EQ(0, vp_worker(&w1));
	ASSERT_EQ(STRETCH_RINGS, vp_vq_sum(getpid(), 0, &sum1, &polled));
	TH_LOG("spun %llu ms: %llu rings stalled, %d of %d polled after;",
	       spun, sum1.stalls - sum0.stalls, polled, STRETCH_RINGS);
	TH_LOG("the thread handed all back %llu times for stalls, %llu for contention",
	       w1.stalled - w0.stalled, w1.contended - w0.contended);
	EXPECT_LE(30, spun);
	if (sum1.stalls - sum0.stalls < 2)
		SKIP(goto out, "the spin stalled %llu rings: no episode to count",
		     sum1.stalls - sum0.stalls);
	EXPECT_EQ(w0.stalled, w1.stalled);
	EXPECT_TRUE(vp_wait_polled(getpid(), STRETCH_RINGS, 2000));
out:
	for (i = 0; i < STRETCH_RINGS; i++) {
		EXPECT_TRUE(vring_all_used_once(&d[i]));
		vring_close(&d[i]);
	}
}

/*
 * A polled vq whose driver trickles a buffer every 5 ms keeps its
 * thread spinning between buffers: nearly a CPU for a round trip nobody
 * waits on. Once the rings have been quiet for a millisecond the thread
 * naps between passes (a quarter of the quiet time, poll_max_nap at
 * most): with poll_max_nap=1000 it uses less than half the CPU it
 * spins with (0, the default), the vq stays polled (its kicks stay
 * saved), and a buffer's round trip grows by a nap at most. On one CPU
 * (UML) an empty pass already sleeps, so the case is not there.
 */
TEST_F(neighbour, quiet_rings_let_the_thread_nap)
{
	struct trickle spin, nap;
	struct vp_worker w;
	struct vring_drv d;
	const char *why;
	int ret;

	why = timed_thread_on_0("needs 2 CPUs: on one (UML) an empty pass already sleeps",
				&w, &ret);
	ASSERT_EQ(0, ret);
	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(0, vp_param_set("poll_max_nap", 0));
	ASSERT_EQ(0, trickle_run(&d, w.pid, &spin));
	ASSERT_EQ(0, vp_param_set("poll_max_nap", 1000));
	ASSERT_EQ(0, trickle_run(&d, w.pid, &nap));
	TH_LOG("a buffer every %d ms: spinning, the thread %llu%% of a CPU,",
	       TRICKLE_GAP_MS, spin.cpu_pct);
	TH_LOG("round trip p50 %llu us, max %llu us", spin.p50_us, spin.max_us);
	TH_LOG("napping: %llu%% of a CPU, p50 %llu us, max %llu us, %llu naps",
	       nap.cpu_pct, nap.p50_us, nap.max_us, nap.naps);
	/* A guest paused by its host (TCG) can trip the watchdog: not this rule. */
	TH_LOG("watchdog stalls: %llu spinning, %llu napping", spin.stalls, nap.stalls);
	/* Spinning took the CPU, or the case is not there. */
	EXPECT_LE(50, spin.cpu_pct);
	EXPECT_EQ(0, spin.naps);
	EXPECT_GE(spin.cpu_pct / 2, nap.cpu_pct);
	EXPECT_LT(0, nap.naps);
	/* Still polled: the rule naps, it does not hand back. */
	EXPECT_EQ(0, spin.exits + nap.exits);
	/* A nap's length at most, and a scheduler's wake-up, later. */
	EXPECT_GE(spin.p50_us + 1000 + 500 * vp_slow(), nap.p50_us);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/* A task that wants its CPU all the time, at the normal priority. */
static void hog(void)
{
	for (;;)
		;
}

/*
 * A napping thread still gives way to a task that wants its CPU all the
 * time. The passes after which it naps leave the CPU to that task, and
 * the contention rule does not count them as passes the task waited for
 * (ThreadPolicy::after_pass, whose host test fails on the rule before);
 * the passes that found a buffer, and those that yielded right after,
 * it still counts, and at a buffer every 5 ms they are half of some
 * window's passes: the thread naps, and hands the vq back (trace reason
 * contended, where the kernel traces; not the watchdog). The vq then
 * stays in notification mode, its kicks below the rate, and the owner's
 * worker, on the other CPU, serves it. This guards the other half of
 * the rule: a napping thread is not exempt from contention. It needs
 * poll_min_gain (the default).
 */
TEST_F(neighbour, napping_thread_gives_way_to_a_busy_task)
{
	struct vp_worker w, w0, w1;
	struct trickle nap;
	struct vring_drv d;
	char owner[32];
	int traced, ret;
	const char *why;
	pid_t busy;

	why = timed_thread_on_0("needs 2 CPUs: on one (UML) an empty pass already sleeps",
				&w, &ret);
	ASSERT_EQ(0, ret);
	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 16));
	ASSERT_EQ(0, vp_param_set("poll_max_nap", 1000));
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	traced = trace_poller_on();
	ASSERT_LE(0, traced);
	busy = cpu0_task_start(hog);
	ASSERT_LT(0, busy);
	ASSERT_EQ(0, vp_worker(&w0));
	ASSERT_EQ(0, trickle_run(&d, w.pid, &nap));
	ASSERT_EQ(0, vp_worker(&w1));
	cpu0_task_stop(busy);
	if (traced)
		ASSERT_EQ(0, tracefs_write("events/vhost_poller/enable", "0"));
	snprintf(owner, sizeof(owner), "owner=%d ", getpid());
	TH_LOG("a buffer every %d ms next to a busy task: %llu exits (%d contended), %llu stalls,",
	       TRICKLE_GAP_MS, nap.exits, traced ? trace_lines(owner, "reason=contended") : -1,
	       nap.stalls);
	TH_LOG("the thread %llu%% of a CPU, %llu passes, %llu yields, %llu naps",
	       nap.cpu_pct, w1.passes - w0.passes, w1.yields - w0.yields, nap.naps);
	EXPECT_LT(0, nap.naps);
	EXPECT_LT(0, nap.exits);
	if (traced)
		EXPECT_LE(1, trace_lines(owner, "reason=contended"));
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * A lower poll_threads takes effect within the watchdog's bound whether
 * or not the thread it retires runs: with two threads, on CPUs 0 and 1,
 * a SCHED_FIFO task takes CPU 1 and poll_threads goes to 1; the vq of
 * vhost-poll/1 is back in notification mode within the bound and a
 * jiffy, counted as the watchdog's, and once the task stops that thread
 * is stopped and polls nothing again.
 *
 * Nor does the first thread wait for the starved one: a vq that asks
 * to be polled meanwhile is polled while the task still spins (the first
 * thread once sat in kthread_stop() until the other ran, its requests
 * unserved and its own vq then handed back by the watchdog).
 */
TEST_F(neighbour, fewer_threads_while_a_thread_is_starved)
{
	const unsigned int spin_ms = 300, idle = 10 * vp_jiffy_hz();
	/* The bound and a jiffy, and 5 ms for the sampling of the counters. */
	unsigned long long t0, ms, spun, bound = watchdog_ms() + 5;
	unsigned long long go, asked_ms;
	struct spinner spinner;
	struct vp_vq_row sum;
	struct vring_drv d[3];
	int i, first;
	__u64 stalls;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: a thread on each, the spinner on the second");
	ASSERT_EQ(0, pin_to(0, 0));
	ASSERT_EQ(0, vp_param_set("poll_threads", 2));
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-1\n", 4));
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(0, vring_open(&d[i], RING, true, 1 << 20));
		ASSERT_EQ(0, poll_with_idle(&d[i], idle));
	}
	ASSERT_EQ(1, polled_by(getpid(), 0));
	ASSERT_EQ(1, polled_by(getpid(), 1));
	ASSERT_EQ(0, vp_vq_sum(getpid(), -1, &sum, NULL) < 0);
	stalls = sum.stalls;
	ASSERT_EQ(0, vring_open(&d[2], RING, true, 1 << 20));
	ASSERT_EQ(0, spinner_start(&spinner, 1, spin_ms));
	go = vp_now_ms();
	ASSERT_EQ(0, spinner_go(&spinner));
	t0 = vp_now_ms();
	ASSERT_EQ(0, vp_param_set("poll_threads", 1));
	while (polled_by(getpid(), 1) && vp_now_ms() - t0 < STALL_MS)
		vp_sleep_ms(1);
	ms = vp_now_ms() - t0;
	/* A start request while the task spins: the first thread serves it. */
	ASSERT_EQ(0, poll_with_idle(&d[2], idle));
	asked_ms = vp_now_ms() - go;
	first = polled_by(getpid(), 0);
	spun = spinner_end(&spinner);
	/* The thread runs again: it is stopped, and polls nothing. */
	EXPECT_TRUE(threads_become(1, STALL_MS));
	EXPECT_EQ(0, polled_by(getpid(), 1));
	ASSERT_EQ(0, vp_vq_sum(getpid(), -1, &sum, NULL) < 0);
	TH_LOG("poll_threads=1, vhost-poll/1 off its CPU for %llu ms:", spun);
	TH_LOG("its vq in notification mode after %llu ms (bound %llu ms), %llu by the watchdog;",
	       ms, bound, sum.stalls - stalls);
	TH_LOG("a third vq polled %llu ms into the spin; the first thread polled %d then",
	       asked_ms, first);
	EXPECT_LE(spin_ms, spun);
	EXPECT_GE(bound, ms);
	EXPECT_LE(stalls + 1, sum.stalls);
	/*
	 * Served while the task still held the other CPU. (The first
	 * thread's own vq stays polled too, unless its CPU is taken from it
	 * as well: under TCG the host may, and the watchdog hands it back.)
	 */
	EXPECT_GT(spin_ms, asked_ms);
	for (i = 0; i < 3; i++) {
		EXPECT_EQ(0, vring_stream(&d[i], 1000, 1, STALL_MS));
		EXPECT_TRUE(vring_all_used_once(&d[i]));
		vring_close(&d[i]);
	}
	ASSERT_EQ(0, vp_param_write("poll_cpus", "\n", 1));
}

#define TENANT_MB	256

/* Devices a polled owner may open (the cost test's, of one owner). */
#define OWNER_VQS_MAX	16

/*
 * A forked owner: opens @n devices (up to OWNER_VQS_MAX) of @max_bufs
 * buffers each, gets their vqs polled, says so on @out and waits to be
 * killed; its exit status says what failed (2, a device; 3, the pipe).
 */
static int polled_owner(unsigned int n, unsigned int max_bufs, int out)
{
	struct vring_drv d[OWNER_VQS_MAX];
	unsigned int i;

	if (n > OWNER_VQS_MAX)
		return 2;
	for (i = 0; i < n; i++)
		if (vring_open(&d[i], RING, true, max_bufs) || poll_for_long(&d[i]))
			return 2;
	if (write(out, "p", 1) != 1)
		return 3;
	for (;;)
		pause();
}

/*
 * Owner A of the teardown test: maps and touches TENANT_MB MiB, then is
 * a polled owner of one device.
 */
static int big_tenant(int out)
{
	size_t len = (size_t)TENANT_MB << 20;
	char *mem;

	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return 1;
	memset(mem, 0x5a, len);
	return polled_owner(1, 1 << 20, out);
}

/*
 * No tenant's teardown runs in the shared thread. Owner A (TENANT_MB MiB,
 * a polled vq) is killed while the polling thread, in A's address space,
 * is kept off its CPU by a SCHED_FIFO task; A's release completes
 * meanwhile, so the thread holds the last reference to A's address space.
 * When the spinner stops, the thread must be free again at once: it puts
 * the reference with mmput_async(), and A's memory is freed by a
 * worker, not by the thread that serves every owner's rings (with a
 * plain mmput() the thread tore down A's whole address space before it
 * could serve anyone).
 *
 * The thread's own run time after the spin is the measure: on its CPU
 * it may wait meanwhile for other work, which is not the thread's
 * doing.
 *
 * Nor does anyone else wait for A's teardown: an open() of another device
 * right after the spin (attach takes the table's lock, which the thread
 * held while it tore A down before it put references outside it) stays
 * within the bound, and so does each burst of owner B, this process,
 * whose device streams from then on, in kicked bursts that get it polled.
 *
 * Nor does the teardown run on the thread's CPU when the unbound
 * workqueues are kept off it, as on a dedicated core: the thread puts
 * its reference with mmput_async(), which patch 0005 queues on an unbound
 * worker. The thread's CPU is busy, beside the thread itself, for 30 ms at
 * most in the half second after the spin (with the teardown on the CPU's
 * own system_wq worker, A was torn down there: 80 and 130 ms in two runs
 * of three). The window opens as
 * the spinner ends, so a teardown that began before it was counted only
 * in part: the bound holds on what is left of it.
 */
TEST_F(neighbour, dead_tenant_is_not_torn_down_in_the_thread)
{
	const unsigned int spin_ms = 300;
	unsigned long long t0, t, spun, free_ms, bound_ms = 30 * vp_slow();
	unsigned long long open_ms, worst = 0, polled_ms = 0;
	long long ran0, ran_ms, busy0, others_ms;
	struct spinner spinner;
	struct vp_vq_row sum;
	int ready[2], status, fd, polled, poller, ret;
	struct vp_worker w;
	struct vring_drv b;
	const char *why;
	pid_t tenant;
	char c;

	why = timed_thread_on_0("needs 2 CPUs: the spinner on one, the owners on the other",
				&w, &ret);
	ASSERT_EQ(0, ret);
	if (why)
		SKIP(return, "%s", why);
	poller = w.pid;
	ASSERT_LE(0, cpu_busy_ms(0));
	ASSERT_EQ(0, wq_unbound_on(1));
	ASSERT_EQ(0, pipe(ready));
	tenant = fork();
	ASSERT_LE(0, tenant);
	if (!tenant)
		_exit(big_tenant(ready[1]));
	ASSERT_EQ(1, read(ready[0], &c, 1));
	/* Polled, and the thread in its address space: it polls nothing else. */
	ASSERT_TRUE(vp_wait_polled(tenant, 1, STALL_MS));
	/* B's device, in notification mode: its kicks start nothing yet. */
	ASSERT_EQ(0, vring_open(&b, RING, true, 1 << 20));
	ASSERT_EQ(0, spinner_start(&spinner, 0, spin_ms));
	ASSERT_EQ(0, spinner_go(&spinner));
	/* The spinner has the thread's CPU; kill A and wait out its release. */
	vp_sleep_ms(20);
	ASSERT_EQ(0, kill(tenant, SIGKILL));
	ASSERT_EQ(tenant, waitpid(tenant, &status, 0));
	/* The thread has not run since the spin began. */
	ran0 = vp_task_runtime_ns(poller);
	/* The spin is over once it says how long it was. */
	spun = spinner_end(&spinner);
	busy0 = cpu_busy_ms(0);
	t0 = vp_now_ms();
	fd = open("/dev/vhost-test", O_RDWR | O_CLOEXEC);
	open_ms = vp_now_ms() - t0;
	ASSERT_LE(0, fd);
	close(fd);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
	free_ms = vp_now_ms() - t0;
	/* Half a second for A's teardown, wherever it runs. */
	vp_sleep_ms(500 - (free_ms < 500 ? free_ms : 500));
	ran_ms = (vp_task_runtime_ns(poller) - ran0) / 1000000;
	others_ms = cpu_busy_ms(0);
	ASSERT_LE(0, busy0);
	ASSERT_LE(0, others_ms);
	others_ms -= busy0 + ran_ms;
	wq_unbound_restore();
	/* B streams until it is polled, and 50 ms more. */
	while ((t = vp_now_ms()) - t0 < 50 + (polled_ms ? polled_ms : STALL_MS)) {
		ASSERT_LT(0, vring_post_kicked(&b, 4 * RATE_LOW));
		ASSERT_EQ(0, vring_drain(&b, STALL_MS));
		if (vp_now_ms() - t > worst)
			worst = vp_now_ms() - t;
		if (!polled_ms && vp_vq_sum(getpid(), b.index, &sum, &polled) == 1 && polled)
			polled_ms = vp_now_ms() - t0;
	}
	EXPECT_LE(spin_ms, spun);
	TH_LOG("a %d MiB tenant killed while the thread was off its CPU for %llu ms:",
	       TENANT_MB, spun);
	TH_LOG("the thread ran %lld ms until it slept, %llu ms after (bound %llu ms);",
	       ran_ms, free_ms, bound_ms);
	TH_LOG("an open() took %llu ms, B's longest burst of %d buffers %llu ms,",
	       open_ms, 4 * RATE_LOW, worst);
	TH_LOG("B polled after %llu ms; others busy on the thread's CPU %lld ms in 500",
	       polled_ms, others_ms);
	EXPECT_LE(0, ran0);
	EXPECT_GE((long long)bound_ms, ran_ms);
	/* CPU time, which a slow machine does not stretch: not scaled. */
	EXPECT_GE(30, others_ms);
	EXPECT_GE(bound_ms, open_ms);
	EXPECT_GE(bound_ms, worst);
	EXPECT_LT(0, polled_ms);
	EXPECT_TRUE(vring_all_used_once(&b));
	vring_close(&b);
	close(ready[0]);
	close(ready[1]);
}

#define RR_N	1000

#define RR_THINK_US	100

/*
 * Request/response on polled @d: @RR_N buffers, one at a time, each
 * waited for by spinning on the used ring (on one CPU, by waiting for
 * the call), @RR_THINK_US apart. The median round trip (us)
 * in *@p50, the 99th percentile in *@p99, and the polling thread's passes
 * a second meanwhile in *@passes; 0, or -ETIMEDOUT.
 */
static int rr_run(struct vring_drv *d, unsigned long long *p50, unsigned long long *p99,
		  unsigned long long *passes)
{
	static unsigned long long us[RR_N];
	bool spin = vp_ncpus() > 1;
	unsigned long long t0, t, start_us;
	struct vp_worker w0, w1;
	int i;

	if (vp_worker(&w0))
		return -EPROTO;
	start_us = vp_now_us();
	for (i = 0; i < RR_N; i++) {
		t0 = vp_now_us();
		if (vring_post(d, 1) != 1)
			return -ENOSPC;
		/* On one CPU (UML) a spinning driver would hold the worker. */
		if (!spin && vring_drain(d, STALL_MS))
			return -ETIMEDOUT;
		while (spin && !vring_reap(d)) {
			if (vp_now_us() - t0 > STALL_MS * 1000ULL)
				return -ETIMEDOUT;
		}
		us[i] = vp_now_us() - t0;
		/* Think time: the handler ends, and the next request is the
		 * poller's to notice. On one CPU, asleep: a spin would hold
		 * it, and under simulated time its clock would not move.
		 */
		if (!spin)
			vp_sleep_us(RR_THINK_US);
		for (t = vp_now_us(); spin && vp_now_us() - t < RR_THINK_US;)
			;
	}
	t = vp_now_us() - start_us;
	if (vp_worker(&w1))
		return -EPROTO;
	qsort(us, RR_N, sizeof(us[0]), cmp_ull);
	*p50 = us[RR_N / 2];
	*p99 = us[RR_N - RR_N / 100];
	*passes = (w1.passes - w0.passes) * 1000000ULL / (t ? t : 1);
	return 0;
}

#define IDLE_FDS	1024

#define IDLE_CLOSERS	32

struct fds_part {
	int *fds, n;
};

/* Closes a part of some open files, from a thread of its own. */
static void *fds_closer(void *arg)
{
	struct fds_part *p = arg;
	int i;

	for (i = 0; i < p->n; i++)
		close(p->fds[i]);
	return NULL;
}

/*
 * Open @n idle /dev/vhost-test devices (no owner, no ring) into @fds: 0, or
 * -errno of the first open that failed (those before it stay open, for
 * close_fds()).
 */
static int open_idle(int *fds, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		fds[i] = open("/dev/vhost-test", O_RDWR | O_CLOEXEC);
		if (fds[i] < 0)
			return -errno;
	}
	return 0;
}

/*
 * Closes the @n files of @fds (-1 for none) from IDLE_CLOSERS threads:
 * each close of a vhost device waits for a grace period, and closes at
 * once share it. 0, or -errno if a thread could not be made (the files
 * of the threads made are closed).
 */
static int close_fds(int *fds, int n)
{
	struct fds_part part[IDLE_CLOSERS];
	pthread_t closers[IDLE_CLOSERS];
	int i, made, ret = 0;

	for (made = 0; made < IDLE_CLOSERS; made++) {
		part[made].fds = fds + made * n / IDLE_CLOSERS;
		part[made].n = (made + 1) * n / IDLE_CLOSERS - made * n / IDLE_CLOSERS;
		ret = -pthread_create(&closers[made], NULL, fds_closer, &part[made]);
		if (ret)
			break;
	}
	for (i = 0; i < made; i++)
		pthread_join(closers[i], NULL);
	return ret;
}

/*
 * Whether @phase's round trip and passes are within the bound of the
 * first's: 2x and 20 us, and half the passes. On one CPU (UML) the
 * driver sleeps for each response, and its round trip is the host's
 * wake-up latency (a p50 of 55, 46 and 131 us in one CI run): there
 * the passes tell.
 */
static bool rr_within(const unsigned long long *p50, const unsigned long long *passes,
		      int phase)
{
	if (vp_ncpus() > 1 && p50[phase] > 2 * p50[0] + 20)
		return false;
	return passes[0] <= 2 * passes[phase];
}

/*
 * A pass costs the polled virtqueues only: 1,024 ownerless vhost-test
 * devices open (anyone who may open /dev/vhost-test can open them) add
 * nothing to a polled request/response queue's round trip, nor take
 * passes from its polling thread. Before, every pass walked (and locked
 * and unlocked for) every attached virtqueue: the round trip grew about
 * fivefold and the passes fell thirtyfold, and stayed so once they were
 * closed (their slots were still walked). Measured alone, with the idle
 * devices, and after; the bound is loose (2x and 20 us, and half the
 * passes) against a machine's noise, the failure it catches is not. On
 * one CPU only the passes are bound.
 */
TEST_F_TIMEOUT(neighbour, idle_devices_cost_a_pass_nothing, 120)
{
	static const char *const phase_name[] = {
		"alone", "with 1024 idle devices", "after",
	};
	unsigned long long p50[3], p99[3], passes[3], t0, open_ms = 0, close_ms = 0;
	struct rlimit rl = { IDLE_FDS + 64, IDLE_FDS + 64 };
	static int fds[IDLE_FDS];
	struct vp_vq_row sum;
	struct vring_drv d;
	int i, phase, retry;

	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	for (phase = 0; phase < 3; phase++) {
		if (phase == 1) {
			t0 = vp_now_ms();
			ASSERT_EQ(0, open_idle(fds, IDLE_FDS));
			open_ms = vp_now_ms() - t0;
		}
		ASSERT_EQ(0, rr_run(&d, &p50[phase], &p99[phase], &passes[phase]));
		/*
		 * Up to two more runs, the best kept, while a phase is out of
		 * bound: a cost of the idle devices' slots stays, but the
		 * work their closes leave behind (RCU callbacks, a guest
		 * descheduled by its host under TCG) passes; one CI run
		 * measured 83 us right after the closes, against 14 alone.
		 */
		for (retry = 0; phase && retry < 2 && !rr_within(p50, passes, phase); retry++) {
			unsigned long long o50 = p50[phase], o99 = p99[phase];
			unsigned long long opasses = passes[phase];

			vp_sleep_ms(100);
			ASSERT_EQ(0, rr_run(&d, &p50[phase], &p99[phase], &passes[phase]));
			TH_LOG("%s: p50 %llu us, %llu passes a second; again: %llu us, %llu",
			       phase_name[phase], o50, opasses, p50[phase], passes[phase]);
			/* Whole runs: the new one, unless out of bound and slower. */
			if (!rr_within(p50, passes, phase) && o50 < p50[phase]) {
				p50[phase] = o50;
				p99[phase] = o99;
				passes[phase] = opasses;
			}
		}
		if (phase == 1) {
			t0 = vp_now_ms();
			ASSERT_EQ(0, close_fds(fds, IDLE_FDS));
			close_ms = vp_now_ms() - t0;
		}
	}
	TH_LOG("%d opens took %llu ms, their closes %llu ms", IDLE_FDS, open_ms, close_ms);
	EXPECT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &i));
	EXPECT_EQ(1, i);
	for (phase = 0; phase < 3; phase++)
		TH_LOG("%s: round trip p50 %llu us, p99 %llu us, %llu passes a second",
		       phase_name[phase], p50[phase], p99[phase], passes[phase]);
	for (phase = 1; phase < 3; phase++)
		EXPECT_TRUE(rr_within(p50, passes, phase));
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

#define OPENS		1000

/* Read the vqs file whole, @n times; how long one read took, in us, the median. */
static unsigned long long vqs_read_us(unsigned int n)
{
	unsigned long long us[9], t;
	static char buf[1 << 16];
	unsigned int i;
	int fd;

	if (n > 9)
		n = 9;
	for (i = 0; i < n; i++) {
		t = vp_now_us();
		fd = open(VP_DEBUGFS "vqs", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return 0;
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		close(fd);
		us[i] = vp_now_us() - t;
	}
	qsort(us, n, sizeof(us[0]), cmp_ull);
	return us[n / 2];
}

/* What vqs_reader() does, in memory shared with it. */
struct vqs_reading {
	/* Reads done, and whether its loop has begun. */
	unsigned long long reads;
	int reading;
};

static struct vqs_reading *vqs_reading;

/* A monitoring script's loop: the vqs file read whole, again and again. */
static void vqs_reader(void)
{
	__atomic_store_n(&vqs_reading->reading, 1, __ATOMIC_RELAXED);
	for (;;)
		if (vqs_read_us(1))
			__atomic_add_fetch(&vqs_reading->reads, 1, __ATOMIC_RELAXED);
}

/* vqs_reader() started on CPU 0, its counters shared: its pid, or -errno. */
static pid_t vqs_reader_start(void)
{
	vqs_reading = mmap(NULL, sizeof(*vqs_reading), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (vqs_reading == MAP_FAILED) {
		vqs_reading = NULL;
		return -ENOMEM;
	}
	return cpu0_task_start(vqs_reader);
}

/* Stop vqs_reader_start()'s @pid, and let its counters go. */
static void vqs_reader_stop(pid_t pid)
{
	cpu0_task_stop(pid);
	if (vqs_reading)
		munmap(vqs_reading, sizeof(*vqs_reading));
	vqs_reading = NULL;
}

/*
 * How long OPENS opens of /dev/vhost-test into @fds took, in us, 0 if one
 * failed; @during counts those begun while vqs_reader() was reading.
 */
static unsigned long long opens_us(int *fds, unsigned int *during)
{
	unsigned long long t = vp_now_us();
	int i;

	*during = 0;
	for (i = 0; i < OPENS; i++) {
		if (vqs_reading && __atomic_load_n(&vqs_reading->reading, __ATOMIC_RELAXED))
			++*during;
		fds[i] = open("/dev/vhost-test", O_RDWR | O_CLOEXEC);
		if (fds[i] < 0)
			return 0;
	}
	return vp_now_us() - t;
}

/*
 * A reader of the counters holds up nobody. The vqs file is formatted
 * from a snapshot of the table, copied under its lock, which attach,
 * detach, start requests and hand-backs take; before, it was formatted
 * under the lock every visit took (a polled request/response vq went
 * from a p50 of 415 us to 20.6 ms with 1,024 idle devices open and such
 * a reader). Here, with 1,024 idle devices open (a file of as many rows,
 * which seq_file formats several times a read as its buffer grows) and a
 * task reading it in a loop on CPU 0, a thousand opens of a device (each
 * an attach) on CPU 1 take no longer than without the reader: within
 * twice their time alone and 5 ms (a host's hiccup under TCG). Were the
 * file formatted under the lock, they would wait for most of each read.
 */
TEST_F_TIMEOUT(neighbour, counters_reader_holds_up_no_attach, 120)
{
	static int fds[IDLE_FDS + 2 * OPENS];
	int *alone = fds + IDLE_FDS, *read_on = alone + OPENS;
	struct rlimit rl = { IDLE_FDS + 2 * OPENS + 64, IDLE_FDS + 2 * OPENS + 64 };
	unsigned long long read_us, open_alone, open_read, reads;
	unsigned int during;
	pid_t reader;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the reader on one, the opens on the other");
	/* No descriptor yet: -1 each, which a close ignores. */
	memset(fds, 0xff, sizeof(fds));
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	ASSERT_EQ(0, pin_to(0, 1));
	ASSERT_EQ(0, open_idle(fds, IDLE_FDS));
	read_us = vqs_read_us(5);
	ASSERT_LT(0, read_us);
	open_alone = opens_us(alone, &during);
	reader = vqs_reader_start();
	ASSERT_LT(0, reader);
	/* Let it begin its loop. */
	vp_sleep_ms(20);
	reads = __atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED);
	open_read = opens_us(read_on, &during);
	reads = __atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED) - reads;
	vqs_reader_stop(reader);
	TH_LOG("one read of the vqs file with %d idle devices open: %llu us", IDLE_FDS,
	       read_us);
	TH_LOG("%d opens: %llu us alone, %llu us while a task read the file (%llu reads done)",
	       OPENS, open_alone, open_read, reads);
	ASSERT_EQ(0, close_fds(fds, IDLE_FDS + 2 * OPENS));
	EXPECT_LT(0, open_alone);
	EXPECT_LT(0, open_read);
	/* The reader was at it: the bound is not met by its absence. */
	EXPECT_EQ(OPENS, during);
	EXPECT_GE(2 * open_alone + 5000, open_read);
}

#define READER_IDLE	8192

/* The first polling thread's passes a second, over @ms; 0 if unknown. */
static unsigned long long passes_per_s(unsigned int ms)
{
	struct vp_worker w0, w1;
	unsigned long long t0, t;

	if (vp_worker(&w0))
		return 0;
	t0 = vp_now_us();
	vp_sleep_ms(ms);
	if (vp_worker(&w1))
		return 0;
	t = vp_now_us() - t0;
	return (w1.passes - w0.passes) * 1000000ULL / (t ? t : 1);
}

/*
 * Nor does a reader of the counters hold up a pass. Every pass of every
 * polling thread took the table's lock, which the vqs file's snapshot
 * holds while it copies a row per attached virtqueue (and again each time
 * seq_file grows its buffer); now a thread takes it only to serve start
 * requests. With 8,192 idle devices open and a task reading the file in
 * a loop on CPU 0, the polling thread alone on CPU 1, polling one idle
 * ring, makes at least 9/10 of the passes a second it makes without the
 * reader. Measured over a second once the reader has read the file
 * whole, and the read under way then must end: a read of 8,192 rows
 * takes about a second under TCG. The ring stays polled through a minute
 * of idleness, which the opens may take. Opening and closing the 8,192
 * devices take most of the test's time: 8 s in the x86_64 guest; in its
 * KCSAN build from 14 s to over 200 s, where 1,024 devices are opened
 * (the run is for data races there, not for the pass rate).
 */
TEST_F_TIMEOUT(neighbour, counters_reader_holds_up_no_pass, 280)
{
	static int fds[READER_IDLE];
	struct rlimit rl = { READER_IDLE + 64, READER_IDLE + 64 };
	const int idle = access("/sys/kernel/debug/kcsan", F_OK) ? READER_IDLE : 1024;
	unsigned long long alone, read_on, reads;
	struct vring_drv d;
	struct vp_worker w;
	pid_t reader;
	int i, round;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the reader on one, the polling thread on the other");
	memset(fds, 0xff, sizeof(fds));
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	ASSERT_EQ(0, vp_worker(&w));
	ASSERT_EQ(0, thread_on_1(w.pid));
	ASSERT_EQ(0, pin_to(0, 0));
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_with_idle(&d, 60 * vp_jiffy_hz()));
	ASSERT_EQ(0, open_idle(fds, idle));
	/*
	 * Up to three rounds, each measured back to back: under TCG a round
	 * missed once at x0.897 in make check, where reruns gave x0.98 to
	 * x1.00.
	 */
	for (round = 0; round < 3; round++) {
		alone = passes_per_s(1000);
		reader = vqs_reader_start();
		ASSERT_LT(0, reader);
		for (i = 0; i < 1000 && !__atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED);
		     i++)
			vp_sleep_ms(10);
		reads = __atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED);
		read_on = passes_per_s(1000);
		/* The reader reads back to back: the read under way ends. */
		for (i = 0; i < 1000 &&
		     __atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED) == reads; i++)
			vp_sleep_ms(10);
		reads = __atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED) - reads;
		vqs_reader_stop(reader);
		TH_LOG("polling thread passes a second with %d idle devices open: %llu alone,",
		       idle, alone);
		TH_LOG("%llu while a task read the vqs file (%llu reads ended since)",
		       read_on, reads);
		if (!alone || !reads || read_on * 10 >= alone * 9)
			break;
	}
	EXPECT_TRUE(vp_wait_polled(getpid(), 1, 100));
	vring_close(&d);
	ASSERT_EQ(0, close_fds(fds, READER_IDLE));
	EXPECT_LT(0, alone);
	EXPECT_LT(0, reads);
	EXPECT_GE(read_on * 10, alone * 9);
}

#define ATTACH_IDLE	4096

#define ATTACH_ROUNDS	5

#define ATTACH_OPENS	200

/*
 * ATTACH_ROUNDS rounds of ATTACH_OPENS opens, each round's devices
 * closed before the next (untimed): how long a round's opens took, in
 * us, the median, or 0 if an open or the closes failed. A round after
 * the first reuses the memory the one before freed, whatever earlier
 * tests left: a guest page taken fresh under TCG costs several times a
 * reused one (a thousand opens right after another test's closes: 9 us
 * each until its freed memory ran out, 80 us after).
 */
static unsigned long long attach_round_us(void)
{
	unsigned long long us[ATTACH_ROUNDS], t;
	int fds[ATTACH_OPENS], r, i;

	for (r = 0; r < ATTACH_ROUNDS; r++) {
		memset(fds, 0xff, sizeof(fds));
		t = vp_now_us();
		for (i = 0; i < ATTACH_OPENS; i++) {
			fds[i] = open("/dev/vhost-test", O_RDWR | O_CLOEXEC);
			if (fds[i] < 0)
				break;
		}
		us[r] = vp_now_us() - t;
		if (close_fds(fds, ATTACH_OPENS) || i < ATTACH_OPENS)
			return 0;
	}
	qsort(us, ATTACH_ROUNDS, sizeof(us[0]), cmp_ull);
	return us[ATTACH_ROUNDS / 2];
}

/*
 * Attach walks no table: opening a device (an attach of its virtqueue)
 * costs the same with ATTACH_IDLE ownerless devices open as without.
 * Before, attach looked for another virtqueue of the same device (for
 * its number in the counters) through every attached one, under the
 * table's lock that the threads take between passes: N opens cost O(N^2),
 * and every open paid for everybody's idle devices. Now the number comes
 * from the last attach (vhost attaches a device's virtqueues one after
 * the other) and the slot from a free list. Rounds of 200 opens, the
 * median round, alone and then with 4,096 devices open: within twice and
 * 5 ms, as the reader's test above.
 */
TEST_F_TIMEOUT(neighbour, attach_walks_no_table, 120)
{
	struct rlimit rl = { ATTACH_IDLE + ATTACH_OPENS + 64, ATTACH_IDLE + ATTACH_OPENS + 64 };
	unsigned long long open_alone, open_crowded = 0;
	static int idle[ATTACH_IDLE];
	int i;

	if (vp_simulated_time())
		SKIP(return, "simulated time: an open takes none, and cannot be timed");
	/* No descriptor yet: -1 each, which a close ignores. */
	memset(idle, 0xff, sizeof(idle));
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	open_alone = attach_round_us();
	for (i = 0; open_alone && i < ATTACH_IDLE; i++) {
		idle[i] = open("/dev/vhost-test", O_RDWR | O_CLOEXEC);
		if (idle[i] < 0)
			break;
	}
	if (i == ATTACH_IDLE)
		open_crowded = attach_round_us();
	TH_LOG("%d opens a round: %llu us alone, %llu us with %d devices open",
	       ATTACH_OPENS, open_alone, open_crowded, ATTACH_IDLE);
	ASSERT_EQ(0, close_fds(idle, ATTACH_IDLE));
	ASSERT_LT(0, open_alone);
	ASSERT_LT(0, open_crowded);
	EXPECT_GE(2 * open_alone + 5000, open_crowded);
}

#define ASKS		16

/*
 * A start request costs its own vq, not the table: with 1,024 ownerless
 * vhost-test devices open, a device that asks for a start ASKS times
 * (opened, kicked past the rate, drained, closed) has the first thread
 * look at about one entry a request (served, in the threads file). Before,
 * every wake of the first thread by a request walked every attached vq:
 * 1,024 entries and more each time. The bound is one walk of the table
 * for all the requests together; a request that finds the queue full
 * costs one walk, and ASKS requests cannot fill it.
 */
TEST_F_TIMEOUT(neighbour, start_requests_walk_no_table, 120)
{
	struct rlimit rl = { IDLE_FDS + 64, IDLE_FDS + 64 };
	unsigned long long looked;
	static int fds[IDLE_FDS];
	struct vp_worker w0, w1;
	struct vring_drv k;
	int i;

	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	ASSERT_EQ(0, open_idle(fds, IDLE_FDS));
	ASSERT_EQ(0, vp_worker(&w0));
	for (i = 0; i < ASKS; i++) {
		ASSERT_EQ(0, vring_open(&k, RING, true, 1 << 16));
		vring_post_kicked(&k, 4 * RATE_LOW);
		ASSERT_EQ(0, vring_drain(&k, STALL_MS));
		vring_close(&k);
	}
	ASSERT_EQ(0, vp_worker(&w1));
	looked = w1.served - w0.served;
	TH_LOG("%d start requests with %d idle devices open: %llu entries looked at, %llu refused",
	       ASKS, IDLE_FDS, looked, w1.refused - w0.refused);
	/* Some request was served, or the bound below proves nothing. */
	EXPECT_LT(0, looked);
	EXPECT_GT(IDLE_FDS, looked);
	ASSERT_EQ(0, close_fds(fds, IDLE_FDS));
}

#define COST_VQS	16

#define COST_MS		300

#define COST_TRIES	3

/* The polled vqs of the processes @pids, or -errno. */
static int polled_of(const pid_t *pids, unsigned int n)
{
	struct vp_vq_row sum;
	unsigned int i;
	int polled, all = 0;

	for (i = 0; i < n; i++) {
		if (vp_vq_sum(pids[i], -1, &sum, &polled) < 0)
			return -ENOENT;
		all += polled;
	}
	return all;
}

/*
 * Wait @ms; with @wake, a device of this process's opened, kicked in a
 * burst that reaches the rate, and closed, again and again meanwhile:
 * each burst asks for a start, which wakes the first thread wherever its
 * pass is, as any owner's kicks would.
 */
static int cost_window(unsigned int ms, bool wake)
{
	unsigned long long end = vp_now_ms() + ms;
	struct vring_drv k;
	int ret;

	if (!wake) {
		vp_sleep_ms(ms);
		return 0;
	}
	while (vp_now_ms() < end) {
		ret = vring_open(&k, RING, true, 1 << 16);
		if (ret)
			return ret;
		vring_post_kicked(&k, 4 * RATE_LOW);
		ret = vring_drain(&k, STALL_MS);
		vring_close(&k);
		if (ret)
			return ret;
		vp_sleep_ms(1);
	}
	return 0;
}

/* The polling threads' empty visits and their cost, summed over every
 * thread, and how many threads poll at least one vq.
 */
struct idle_counts {
	unsigned long long visits, ns, switches;
	int polling;
};

/* Read @c from the threads file: 0 or -errno. */
static int idle_counts(struct idle_counts *c)
{
	struct vp_worker w[8];
	int n = vp_workers(w, 8), i;

	if (n < 0)
		return n;
	memset(c, 0, sizeof(*c));
	for (i = 0; i < n; i++) {
		c->visits += w[i].empty_visits;
		c->ns += w[i].empty_visit_ns;
		c->switches += w[i].mm_switches;
		c->polling += w[i].polled_vqs > 0;
	}
	return 0;
}

/*
 * @vqs idle polled vqs in @owners processes (@vqs a multiple of @owners):
 * the threads' empty visits and their cost over COST_MS in *@d (@wake as
 * for cost_window()), and the wall time between the two readings of the
 * counters in *@window_ms. 0; -EAGAIN if a vq left poll mode meanwhile
 * (the watchdog hands back a ring whose thread was kept off its CPU for
 * a few jiffies, as a noisy host's TCG may) or if fewer polling threads
 * than @threads polled a vq; or -errno.
 */
static int idle_window(unsigned int owners, unsigned int vqs, int threads, bool wake,
		       struct idle_counts *d, unsigned long long *window_ms)
{
	unsigned long long t0 = 0, t1 = 0;
	struct idle_counts a, b;
	pid_t pids[COST_VQS];
	int ready[2], ret = 0, status;
	unsigned int i, made = 0;
	char c;

	if (owners > COST_VQS || vqs % owners || vqs / owners > OWNER_VQS_MAX)
		return -EINVAL;
	if (pipe(ready))
		return -errno;
	for (i = 0; i < owners && !ret; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			ret = -errno;
			break;
		}
		if (!pids[i])
			_exit(polled_owner(vqs / owners, 1 << 16, ready[1]));
		made++;
		if (read(ready[0], &c, 1) != 1)
			ret = -EIO;
	}
	if (!ret && polled_of(pids, made) != (int)vqs)
		ret = -EAGAIN;
	t0 = vp_now_ms();
	if (!ret)
		ret = idle_counts(&a);
	if (!ret && a.polling < threads)
		ret = -EAGAIN;
	if (!ret)
		ret = cost_window(COST_MS, wake);
	if (!ret)
		ret = idle_counts(&b);
	t1 = vp_now_ms();
	if (!ret && polled_of(pids, made) != (int)vqs)
		ret = -EAGAIN;
	for (i = 0; i < made; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], &status, 0);
	}
	close(ready[0]);
	close(ready[1]);
	if (ret)
		return ret;
	d->visits = b.visits - a.visits;
	d->ns = b.ns - a.ns;
	d->switches = b.switches - a.switches;
	*window_ms = t1 - t0;
	return 0;
}

/*
 * COST_VQS idle polled vqs in @owners processes (1, or COST_VQS), one
 * polling thread: its empty visits over COST_MS in *@visits, their cost
 * in ns in *@ns, the window in *@window_ms; idle_window() says the rest.
 */
static int idle_cost(unsigned int owners, bool wake, unsigned long long *visits,
		     unsigned long long *ns, unsigned long long *window_ms)
{
	struct idle_counts d;
	int ret = idle_window(owners, COST_VQS, 1, wake, &d, window_ms);

	if (!ret) {
		*visits = d.visits;
		*ns = d.ns;
	}
	return ret;
}

/*
 * What a visit that finds nothing costs, as the thread counts it
 * (empty_visits, empty_visit_ns in its worker row): COST_VQS idle polled
 * vqs of one owner, then of as many owners, each visit of which enters
 * another address space. The figures are printed; the test asks only
 * that the counters move and give a cost of a visit between 1 ns and a
 * millisecond (not on simulated time, where work takes none). A try in
 * which a vq left poll mode is made again.
 */
TEST_F_TIMEOUT(neighbour, empty_visit_cost_is_counted, 120)
{
	unsigned long long v[2], ns[2], per[2], ms;
	int i, ret, tries;

	/* Idle vqs save no kick: kept polled all the same. */
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	for (i = 0; i < 2; i++) {
		tries = 0;
		do
			ret = idle_cost(i ? COST_VQS : 1, false, &v[i], &ns[i], &ms);
		while (ret == -EAGAIN && ++tries < COST_TRIES);
		ASSERT_EQ(0, ret) {
			TH_LOG("%s: %s", i ? "as many owners" : "one owner",
			       ret == -EAGAIN ? "a vq left poll mode in every try" :
			       strerror(-ret));
		}
		ASSERT_LT(0, v[i]);
		per[i] = ns[i] / v[i];
		TH_LOG("%d idle vqs of %s: %llu empty visits in %d ms, %llu ns each (try %d)",
		       COST_VQS, i ? "as many owners" : "one owner", v[i], COST_MS, per[i],
		       tries + 1);
		/* Work takes no simulated time: there only the counts tell. */
		if (vp_simulated_time())
			continue;
		EXPECT_LE(1, per[i]);
		EXPECT_GE(1000000, per[i]);
	}
	TH_LOG("a visit across owners costs %.1fx one in one address space",
	       (double)per[1] / (per[0] ? per[0] : 1));
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * A pass cut short by a wake-up while its next visit waited for an
 * address space is not counted from time zero: one thread's passes do
 * not overlap, so its empty visits, with its first thread woken again and
 * again across COST_VQS owners, cost no more than the wall time between
 * the two readings of its counters, and a pass begun before the first
 * (100 ms at most here). On simulated time too: a cost from time zero
 * is the clock's whole reading.
 */
TEST_F_TIMEOUT(neighbour, wake_ups_leave_the_visit_cost_true, 120)
{
	unsigned long long v, ns, ms;
	int ret, tries = 0;

	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	do
		ret = idle_cost(COST_VQS, true, &v, &ns, &ms);
	while (ret == -EAGAIN && ++tries < COST_TRIES);
	ASSERT_EQ(0, ret) {
		TH_LOG("%s", ret == -EAGAIN ? "a vq left poll mode in every try" : strerror(-ret));
	}
	TH_LOG("%d idle vqs of as many owners, the thread woken again and again:", COST_VQS);
	TH_LOG("%llu empty visits in %llu ms, %llu ns in all (try %d)", v, ms, ns, tries + 1);
	ASSERT_LT(0, v);
	EXPECT_GE((ms + 100) * 1000000ULL, ns);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * An idle pass over many owners enters none of their address spaces: the
 * thread reads each avail index through the page vhost pinned for it
 * (vhost_poller_peek()), and goes through the owner's address space only
 * when the index moved, or every 100 ms to check that the page is still
 * the ring's. COST_VQS idle polled vqs of as many owners: at most one
 * address-space switch in PEEK_SWITCHES empty visits. Before the pin,
 * every such visit was one switch.
 */
#define PEEK_SWITCHES	8

TEST_F_TIMEOUT(neighbour, idle_owners_are_peeked_not_entered, 120)
{
	unsigned long long ms;
	struct idle_counts d;
	int ret, tries = 0;

	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	do
		ret = idle_window(COST_VQS, COST_VQS, 1, false, &d, &ms);
	while (ret == -EAGAIN && ++tries < COST_TRIES);
	ASSERT_EQ(0, ret) {
		TH_LOG("%s", ret == -EAGAIN ? "a vq left poll mode in every try" : strerror(-ret));
	}
	TH_LOG("%d idle vqs of as many owners, %llu ms: %llu empty visits,",
	       COST_VQS, ms, d.visits);
	TH_LOG("%llu address-space switches", d.switches);
	ASSERT_LT(0, d.visits);
	EXPECT_GE(d.visits, d.switches * PEEK_SWITCHES);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/* This process's pinned memory (VmPin, kB), or -1. */
static long long vm_pin_kb(void)
{
	char line[128];
	long long kb = -1;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Wait until VmPin reads @kb: the last reading. */
static long long vm_pin_becomes(long long kb)
{
	long long now = vm_pin_kb();
	int ms;

	for (ms = 0; ms < STALL_MS && now != kb; ms++) {
		vp_sleep_ms(1);
		now = vm_pin_kb();
	}
	return now;
}

/*
 * The pin is poll mode's, and goes with it: a polled vq's worker pins one
 * page (the avail index's), counted in its owner's VmPin, and unpins it
 * when the vq is back in notification mode, before its device is closed.
 */
TEST_F(neighbour, polled_vq_pins_one_page_and_lets_it_go)
{
	long long page_kb = sysconf(_SC_PAGESIZE) / 1024, kb;
	struct vp_vq_row sum;
	struct vring_drv d;
	int polled, ms;

	kb = vm_pin_kb();
	if (kb < 0)
		SKIP(return, "no VmPin in /proc/self/status");
	ASSERT_EQ(0, kb);
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 16));
	ASSERT_EQ(0, poll_for_long(&d));
	/* The pin is its worker's, soon after the start. */
	kb = vm_pin_becomes(page_kb);
	TH_LOG("polled: VmPin %lld kB", kb);
	EXPECT_EQ(page_kb, kb);
	ASSERT_EQ(0, vp_param_set("poll_start_rate", 0));
	for (ms = 0; ms < STALL_MS; ms++) {
		ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
		if (!polled)
			break;
		vp_sleep_ms(1);
	}
	EXPECT_EQ(0, polled);
	kb = vm_pin_becomes(0);
	TH_LOG("back in notification mode: VmPin %lld kB", kb);
	EXPECT_EQ(0, kb);
	vring_close(&d);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/* An owner for the tests of a worker's spin, and the pipes that drive it. */
struct idle_owner {
	pid_t pid;
	/* to: a byte has one more buffer used; from: a byte once it is. */
	int to, from;
};

/*
 * The owner's side: in the cgroup whose cgroup.procs is @procs (NULL:
 * where it is), open a vhost-test device on CPU @worker_cpu, where its
 * worker then stays, and drive it from CPU @cpu: a busy-loop timeout of
 * @busyloop_us on its vq, the vq polled with a long idle window, then one
 * buffer used for each byte on @to, a byte on @from once it is.
 */
static int idle_owner_run(int worker_cpu, int cpu, unsigned int busyloop_us,
			  const char *procs, int to, int from)
{
	struct vhost_vring_state s;
	struct vring_drv d;
	char me[32], c = 'p';
	int n, fd;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || pin_to(0, worker_cpu))
		return 2;
	if (procs) {
		n = snprintf(me, sizeof(me), "%d\n", getpid());
		fd = open(procs, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, me, n) != n)
			return 3;
		close(fd);
	}
	if (vring_open(&d, RING, true, 1 << 20) || pin_to(0, cpu))
		return 4;
	s.index = d.index;
	s.num = busyloop_us;
	if (ioctl(d.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &s) || poll_for_long(&d))
		return 5;
	do {
		vring_post_kicked(&d, 1);
		if (vring_drain(&d, STALL_MS))
			return 6;
		if (write(from, &c, 1) != 1)
			return 7;
	} while (read(to, &c, 1) == 1);
	return 0;
}

/*
 * Fork @o, an owner as idle_owner_run() says, and return once its vq is
 * polled and a last buffer used: its worker then spins on the idle ring,
 * without the driver's wake-ups on its CPU where @cpu is another. 0, or
 * -errno, or -1000 less the owner's exit code.
 */
static int idle_owner_start(struct idle_owner *o, int worker_cpu, int cpu,
			    unsigned int busyloop_us, const char *procs)
{
	int to[2], from[2], status;
	char c;

	if (pipe(to))
		return -errno;
	if (pipe(from)) {
		close(to[0]);
		close(to[1]);
		return -EMFILE;
	}
	o->pid = fork();
	if (!o->pid) {
		close(to[1]);
		close(from[0]);
		_exit(idle_owner_run(worker_cpu, cpu, busyloop_us, procs, to[0], from[1]));
	}
	close(to[0]);
	close(from[1]);
	o->to = to[1];
	o->from = from[0];
	if (o->pid > 0 && read(o->from, &c, 1) == 1)
		return 0;
	close(o->to);
	close(o->from);
	if (o->pid < 0)
		return -EAGAIN;
	waitpid(o->pid, &status, 0);
	return WIFEXITED(status) ? -1000 - WEXITSTATUS(status) : -EIO;
}

/* One more buffer of @o used: its worker's spin starts again. 0 or -EIO. */
static int idle_owner_kick(struct idle_owner *o)
{
	char c = 'k';

	if (write(o->to, &c, 1) != 1 || read(o->from, &c, 1) != 1)
		return -EIO;
	return 0;
}

/* End idle_owner_start()'s @o. */
static void idle_owner_end(struct idle_owner *o)
{
	int status;

	close(o->to);
	close(o->from);
	kill(o->pid, SIGKILL);
	waitpid(o->pid, &status, 0);
}

/* How long @pid's worker spun on its vq @vq in the next @ms, in µs, or -1. */
static long long spin_in_us(pid_t pid, unsigned int vq, unsigned int ms)
{
	struct vp_vq_row a, b;

	if (vp_vq_sum(pid, vq, &a, NULL) != 1)
		return -1;
	vp_sleep_ms(ms);
	if (vp_vq_sum(pid, vq, &b, NULL) != 1)
		return -1;
	return b.spin_us - a.spin_us;
}

#define SPIN_TRIES	5

/*
 * The longest spin of @o's worker in @ms after one more buffer, of
 * SPIN_TRIES: a spin that some other task on the worker's CPU cut short
 * (a per-CPU work item of the teardown of an earlier test's devices) is
 * not started again until the next buffer. In µs, or -1.
 */
static long long longest_spin_us(struct idle_owner *o, unsigned int ms)
{
	long long most = -1, us;
	int i;

	for (i = 0; i < SPIN_TRIES; i++) {
		if (i && idle_owner_kick(o))
			return -1;
		us = spin_in_us(o->pid, 0, ms);
		if (us < 0)
			return -1;
		most = us > most ? us : most;
	}
	return most;
}

/*
 * A worker's CPU its own: CPU 1 for the owners' workers, CPU 0 for the
 * polling thread, the unbound workqueues, this test and the owners'
 * driving (idle_owner_start()); workers poll. 0 or -errno.
 */
static int worker_cpu_its_own(void)
{
	int ret = vp_poll_in_worker(true);

	if (!ret)
		ret = thread_on_0_owners_on_1();
	if (!ret)
		ret = pin_to(0, 0);
	return ret ? ret : wq_unbound_on(0);
}

/*
 * The owner's busy-loop timeout is its worker's ceiling. With the
 * worker's CPU its own (the polling thread, the unbound workqueues, this
 * test and the owner's driving on CPU 0, the worker on CPU 1), a worker
 * whose polled vq has gone idle spins on (here for most of the 300 ms
 * measured, in the longest of SPIN_TRIES; the idle window is 10 s); with
 * a busy-loop timeout of 2 ms on that vq it spins at most that after its
 * last work, then sleeps with notifications on. A timeout of 0,
 * upstream's default, sets no ceiling.
 */
TEST_F(neighbour, busyloop_timeout_is_the_worker_ceiling)
{
	const unsigned int ceiling_us = 2000, ms = 300;
	long long free_us, capped_us, bound_us;
	struct idle_owner o;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: a worker's spin ends at another task on its CPU");
	ASSERT_EQ(0, worker_cpu_its_own());
	ASSERT_EQ(0, idle_owner_start(&o, 1, 0, 0, NULL));
	free_us = longest_spin_us(&o, ms);
	idle_owner_end(&o);
	ASSERT_EQ(0, idle_owner_start(&o, 1, 0, ceiling_us, NULL));
	capped_us = longest_spin_us(&o, ms);
	idle_owner_end(&o);

	/* The ceiling, the counts' jiffy of lag, and a round's look. */
	bound_us = ceiling_us + vp_jiffies_ms(1) * 1000 + 1000;
	TH_LOG("idle worker's spin in %u ms: %lld us without a ceiling, %lld us with %u us",
	       ms, free_us, capped_us, ceiling_us);
	ASSERT_LE(0, free_us);
	ASSERT_LE(0, capped_us);
	if (free_us < 4 * bound_us)
		SKIP(return, "without a ceiling the worker spun %lld us: its CPU was not its own",
		     free_us);
	EXPECT_GE(bound_us, capped_us);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

#define GP_RUNS	9

/*
 * GP_RUNS grace periods (membarrier(GLOBAL)) 5 ms apart, each after one
 * more buffer of @o if not NULL (its worker then spins again), sorted in
 * @gp. False if membarrier is refused here, or @o failed.
 */
static bool grace_periods(unsigned long long *gp, struct idle_owner *o)
{
	int i;

	for (i = 0; i < GP_RUNS; i++) {
		if (o && idle_owner_kick(o))
			return false;
		vp_sleep_ms(5);
		gp[i] = grace_period_us();
		if (gp[i] == ~0ULL)
			return false;
	}
	qsort(gp, GP_RUNS, sizeof(*gp), cmp_ull);
	return true;
}

/*
 * A poller's spin holds up no RCU grace period. synchronize_rcu() waits
 * for every CPU to pass a quiescent state, and a task that spins in the
 * kernel of a kernel without preemption passes none unless it says so:
 * RCU then has to force one (resched_cpu()) after jiffies_to_sched_qs,
 * 100 ms here. The median of GP_RUNS grace periods while it spins on an
 * idle polled vq, its CPU its own, is within twice the median with
 * nothing polled, and 5 ms.
 */
static void grace_period_held(struct __test_metadata *_metadata, const char *who,
			      const unsigned long long *none, const unsigned long long *polled,
			      unsigned long long spun_us)
{
	unsigned long long bound = 2 * none[GP_RUNS / 2] + 5000;

	TH_LOG("grace period, median of %d: %llu us with nothing polled, %llu us with the %s",
	       GP_RUNS, none[GP_RUNS / 2], polled[GP_RUNS / 2], who);
	TH_LOG("spinning (bound %llu us; longest %llu us; it spun %llu us)", bound,
	       polled[GP_RUNS - 1], spun_us);
	/* It must have spun through the sleeps for this to mean anything. */
	if (spun_us < GP_RUNS * 5000 / 2)
		SKIP(return, "the %s spun only %llu us: its CPU was not its own", who, spun_us);
	EXPECT_GE(bound, polled[GP_RUNS / 2]);
}

/* The worker's spin (poll_cpus empty), after each of GP_RUNS buffers. */
TEST_F(neighbour, spinning_worker_holds_up_no_grace_period)
{
	unsigned long long none[GP_RUNS], polled[GP_RUNS];
	struct vp_vq_row a, b;
	struct idle_owner o;
	bool measured;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: on one, a grace period is free (membarrier)");
	ASSERT_EQ(0, worker_cpu_its_own());
	if (!grace_periods(none, NULL))
		SKIP(return, "membarrier(MEMBARRIER_CMD_GLOBAL) refused here");
	ASSERT_EQ(0, idle_owner_start(&o, 1, 0, 0, NULL));
	ASSERT_EQ(1, vp_vq_sum(o.pid, 0, &a, NULL));
	measured = grace_periods(polled, &o);
	vp_sleep_ms(vp_jiffies_ms(2));
	ASSERT_EQ(1, vp_vq_sum(o.pid, 0, &b, NULL));
	idle_owner_end(&o);
	ASSERT_TRUE(measured);
	grace_period_held(_metadata, "worker", none, polled, b.spin_us - a.spin_us);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * The polling thread's spin (poll_cpus=1, poll_max_nap=0), on CPU 1,
 * the owner and its worker on CPU 0.
 */
TEST_F(neighbour, spinning_thread_holds_up_no_grace_period)
{
	unsigned long long none[GP_RUNS], polled[GP_RUNS];
	struct vp_worker w;
	struct vring_drv d;
	__s64 ran_ns;
	bool measured;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: on one, a grace period is free (membarrier)");
	ASSERT_EQ(0, vp_worker(&w));
	ASSERT_EQ(0, thread_on_1(w.pid));
	ASSERT_EQ(0, pin_to(0, 0));
	ASSERT_EQ(0, wq_unbound_on(0));
	if (!grace_periods(none, NULL))
		SKIP(return, "membarrier(MEMBARRIER_CMD_GLOBAL) refused here");
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	ran_ns = vp_task_runtime_ns(w.pid);
	if (ran_ns < 0) {
		vring_close(&d);
		SKIP(return, "no /proc/PID/sched (CONFIG_SCHED_DEBUG): no thread run time");
	}
	measured = grace_periods(polled, NULL);
	/* Its time while it polled the one vq. */
	ran_ns = vp_task_runtime_ns(w.pid) - ran_ns;
	vring_close(&d);
	ASSERT_TRUE(measured);
	grace_period_held(_metadata, "polling thread", none, polled, ran_ns / 1000);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/* A cgroup v2 group for the tests, and where its hierarchy is mounted. */
struct cg {
	char root[128], dir[192];
	bool mounted;
};

#define CG_MNT	"/tmp/vhost_poll_test.cgroup"

#define CG_NAME	"vhost_poll_test"

/* Write @s to file @name of directory @dir (write_text()); 0 or -errno. */
static int cg_write(const char *dir, const char *name, const char *s)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return write_text(path, s);
}

/* Key @key of @cg's cpu.stat, or -1. */
static long long cg_stat(const struct cg *cg, const char *key)
{
	char path[256], k[64];
	long long v, ret = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cpu.stat", cg->dir);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fscanf(f, "%63s %lld", k, &v) == 2)
		if (!strcmp(k, key))
			ret = v;
	fclose(f);
	return ret;
}

/* Take @cg's group away, and the mount cg_make() made. */
static void cg_remove(struct cg *cg)
{
	int ms;

	/* A killed task leaves its group a moment after it is reaped. */
	for (ms = 0; *cg->dir && rmdir(cg->dir) && errno == EBUSY && ms < STALL_MS; ms++)
		vp_sleep_ms(1);
	if (cg->mounted) {
		umount2(cg->root, MNT_DETACH);
		rmdir(cg->root);
	}
	cg->mounted = false;
	*cg->dir = 0;
}

/*
 * Make @cg: a group with the cpu controller in the cgroup v2 hierarchy,
 * mounted at CG_MNT if it is nowhere yet. NULL, or why the test cannot run
 * here, with *@ret 0; or NULL with a failed step's -errno in *@ret.
 */
static const char *cg_make(struct cg *cg, int *ret)
{
	char line[512], dev[64], dir[128], type[64], ctl[256] = "";
	FILE *f;

	memset(cg, 0, sizeof(*cg));
	*ret = 0;
	f = fopen("/proc/self/mounts", "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %127s %63s", dev, dir, type) == 3 &&
		    !strcmp(type, "cgroup2")) {
			snprintf(cg->root, sizeof(cg->root), "%s", dir);
			break;
		}
	if (f)
		fclose(f);
	if (!*cg->root) {
		snprintf(cg->root, sizeof(cg->root), "%s", CG_MNT);
		if (mkdir(CG_MNT, 0755) && errno != EEXIST)
			return *ret = -errno, NULL;
		if (mount("none", CG_MNT, "cgroup2", 0, NULL)) {
			rmdir(CG_MNT);
			return "no cgroup v2 here (CONFIG_CGROUPS)";
		}
		cg->mounted = true;
	}
	snprintf(line, sizeof(line), "%s/cgroup.controllers", cg->root);
	if (vp_read_line(line, ctl, sizeof(ctl)) < 0 || !strstr(ctl, "cpu")) {
		cg_remove(cg);
		return "no cpu controller (CONFIG_CGROUP_SCHED)";
	}
	*ret = cg_write(cg->root, "cgroup.subtree_control", "+cpu");
	snprintf(cg->dir, sizeof(cg->dir), "%s/" CG_NAME, cg->root);
	if (!*ret && mkdir(cg->dir, 0755) && errno != EEXIST)
		*ret = -errno;
	snprintf(line, sizeof(line), "%s/cpu.max", cg->dir);
	if (!*ret && access(line, W_OK)) {
		cg_remove(cg);
		return "no cpu.max (CONFIG_CFS_BANDWIDTH)";
	}
	if (*ret)
		cg_remove(cg);
	return NULL;
}

/*
 * @ms with one more buffer of @o every 20 ms: a spin of its worker that
 * another task on its CPU cut short starts again. 0 or -EIO.
 */
static int kicked_for(struct idle_owner *o, unsigned int ms)
{
	unsigned long long t0 = vp_now_ms();

	while (vp_now_ms() - t0 < ms) {
		if (idle_owner_kick(o))
			return -EIO;
		vp_sleep_ms(20);
	}
	return 0;
}

/*
 * A worker's polling is its owner's CPU, in its owner's cgroup: an owner
 * in a group, its polled vq idle but for a buffer every 20 ms, the
 * group's CPU time over 300 ms uncapped, then with cpu.max at 1 ms in
 * 100 ms. Capped, the group (its worker and its driving) runs no more
 * than the quota and a jiffy of each period measured and one more, and
 * is throttled; uncapped it ran more than that.
 */
TEST_F(neighbour, capped_cgroup_throttles_its_worker_polling)
{
	const unsigned int ms = 300, quota_us = 1000, period_us = 100000;
	long long u0, u1, u2, t1, t2, bound_us;
	char procs[256], max[64];
	struct idle_owner o;
	const char *why;
	struct cg cg;
	int ret;

	why = cg_make(&cg, &ret);
	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, vp_poll_in_worker(true));
	if (vp_ncpus() > 1)
		ASSERT_EQ(0, worker_cpu_its_own());
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg.dir);
	ret = idle_owner_start(&o, vp_ncpus() - 1, 0, 0, procs);
	EXPECT_EQ(0, ret);
	if (ret) {
		cg_remove(&cg);
		return;
	}
	vp_sleep_ms(vp_jiffies_ms(2));
	u0 = cg_stat(&cg, "usage_usec");
	ret = kicked_for(&o, ms);
	u1 = cg_stat(&cg, "usage_usec");
	t1 = cg_stat(&cg, "nr_throttled");
	snprintf(max, sizeof(max), "%u %u", quota_us, period_us);
	if (!ret)
		ret = cg_write(cg.dir, "cpu.max", max);
	if (!ret)
		ret = kicked_for(&o, ms);
	u2 = cg_stat(&cg, "usage_usec");
	t2 = cg_stat(&cg, "nr_throttled");
	idle_owner_end(&o);
	cg_remove(&cg);

	ASSERT_EQ(0, ret);
	ASSERT_LE(0, u0);
	ASSERT_LE(0, t1);
	/*
	 * The quota of each period the window touches; and a jiffy more in
	 * each, as a task that spins is charged, and throttled, at the tick.
	 */
	bound_us = ((long long)quota_us + vp_jiffies_ms(1) * 1000) * (ms * 1000 / period_us + 2);
	TH_LOG("owner's group in %u ms, idle vq polled: %lld us uncapped, %lld us with cpu.max %s",
	       ms, u1 - u0, u2 - u1, max);
	TH_LOG("(bound %lld us), throttled %lld times", bound_us, t2 - t1);
	if (u1 - u0 < 4 * bound_us)
		SKIP(return, "uncapped, the worker ran %lld us: nothing for the cap to throttle",
		     u1 - u0);
	EXPECT_GE(bound_us, u2 - u1);
	EXPECT_LE(1, t2 - t1);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * The owner's side of memlock_zero_pins_nothing: with RLIMIT_MEMLOCK 0,
 * a device polled by the polling thread, and 2,000 buffers through it,
 * with VmPin read all along. Exit code 0, or which step failed: 10 a pin
 * seen (VmPin above 0), others a step before.
 */
static int memlock_zero_owner(void)
{
	struct rlimit none = { 0, 0 };
	long long kb, most = 0;
	struct vp_vq_row sum;
	struct vring_drv d;
	int i;

	if (setrlimit(RLIMIT_MEMLOCK, &none) || vm_pin_kb() != 0)
		return 2;
	if (vring_open(&d, RING, true, 1 << 16) || poll_for_long(&d))
		return 3;
	for (i = 0; i < 20; i++) {
		if (vring_stream(&d, 100, 4, STALL_MS))
			return 4;
		kb = vm_pin_kb();
		most = kb > most ? kb : most;
		vp_sleep_ms(2);
	}
	if (!vring_all_used_once(&d) || vp_vq_sum(getpid(), d.index, &sum, NULL) != 1 ||
	    !sum.enters)
		return 5;
	vring_close(&d);
	return most ? 10 : 0;
}

/*
 * The pin is held to the owner's RLIMIT_MEMLOCK, as vhost-vdpa holds its
 * maps: an owner whose limit is 0 gets its vq polled, and served, with
 * nothing pinned (its looks go through its address space).
 */
TEST_F(neighbour, memlock_zero_pins_nothing)
{
	int status;
	pid_t pid;

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		_exit(memlock_zero_owner());
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	TH_LOG("owner with RLIMIT_MEMLOCK 0: %s", !WEXITSTATUS(status) ? "nothing pinned" :
	       WEXITSTATUS(status) == 10 ? "a page pinned" : "a step failed");
	EXPECT_EQ(0, WEXITSTATUS(status));
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * A pinned page that is no longer the ring's goes: the owner maps a copy
 * of its avail page over it behind vhost's back (MAP_FIXED), and its
 * driver's writes go to the copy. The next look through the owner's
 * address space reads an index the pinned page cannot show and drops the
 * pin (VmPin back to 0), where the stale page was kept, and read, until
 * the next start; the buffers meanwhile are all used, once.
 */
TEST_F(neighbour, remapped_ring_page_drops_the_pin)
{
	long long page_kb = sysconf(_SC_PAGESIZE) / 1024, kb;
	size_t page = sysconf(_SC_PAGESIZE);
	struct vring_drv d;
	char *at, *copy;

	if (vm_pin_kb() < 0)
		SKIP(return, "no VmPin in /proc/self/status");
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 16));
	ASSERT_EQ(0, poll_for_long(&d));
	kb = vm_pin_becomes(page_kb);
	ASSERT_EQ(page_kb, kb);
	at = (char *)((uintptr_t)&d.vr.avail->idx & ~(uintptr_t)(page - 1));
	copy = malloc(page);
	ASSERT_NE(NULL, copy);
	memcpy(copy, at, page);
	ASSERT_EQ(at, mmap(at, page, PROT_READ | PROT_WRITE,
			   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	memcpy(at, copy, page);
	free(copy);
	ASSERT_EQ(0, vring_stream(&d, 50, 1, STALL_MS));
	kb = vm_pin_becomes(0);
	TH_LOG("avail page remapped: VmPin %lld kB after 50 buffers", kb);
	EXPECT_EQ(0, kb);
	ASSERT_EQ(0, vring_stream(&d, 50, 1, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/* Ratios the threads test measures, at most twice as many tries, and the
 * median they must reach.
 */
#define THREADS_RUNS	5

#define THREADS_GAIN	1.25

/*
 * One owner's OWNER_VQS_MAX idle polled vqs, started with @threads
 * polling threads (poll_threads): the threads' empty visits a
 * millisecond, summed, over COST_MS, in *@per_ms. As idle_window().
 */
static int threads_rate(int threads, double *per_ms)
{
	unsigned long long ms;
	struct idle_counts d;
	int ret;

	if (vp_param_set("poll_threads", threads))
		return -EINVAL;
	ret = idle_window(1, OWNER_VQS_MAX, threads, false, &d, &ms);
	if (!ret)
		*per_ms = (double)d.visits / (ms ? ms : 1);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Two polling threads do not take turns (poll_threads=2): each thread
 * visits the vqs it polls holding its own lock, so over the same idle
 * vqs two threads, each on a CPU, make well over the visits one makes.
 * When every visit took the table's one lock, two made 0.75 to 1.11
 * times one's in seven tries of eight (1.62 in the other), now 1.95 and
 * 2.06 (x86_64 guest, TCG). The median of THREADS_RUNS ratios, each
 * measured back to back, must reach THREADS_GAIN, in one of three rounds.
 */
TEST_F_TIMEOUT(neighbour, two_threads_do_not_wait_on_each_other, 120)
{
	double one, two, r[THREADS_RUNS], median = 0;
	int ret, tries, n, round;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: on one, two threads take turns whatever they lock");
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	/*
	 * A CPU each (one thread a CPU, in order): what is measured is the
	 * locks, not where the scheduler put the threads. Since the peek made
	 * an empty visit cheaper, ratios spread more (x0.88 to x2.54, TCG),
	 * and one median of THREADS_RUNS in four or five missed: another
	 * round is measured when one misses, three rounds at most. Two
	 * rounds missed once (x1.24, x1.08) in make check, which boots a
	 * UML guest beside this one on a two-core host: two threads gain only
	 * while both vCPUs run at once; alone, the same test gave x1.64.
	 * With one lock for both threads no ratio reached the gain but one of
	 * eight (1.62).
	 */
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-1\n", 4));
	for (round = 0; round < 3 && median < THREADS_GAIN; round++) {
		for (tries = 0, n = 0; tries < 2 * THREADS_RUNS && n < THREADS_RUNS; tries++) {
			ret = threads_rate(1, &one);
			if (!ret)
				ret = threads_rate(2, &two);
			if (ret == -EAGAIN)
				continue;
			ASSERT_EQ(0, ret) TH_LOG("%s", strerror(-ret));
			ASSERT_LT(0, one);
			r[n++] = two / one;
			TH_LOG("%d idle vqs of one owner, empty visits a ms:", OWNER_VQS_MAX);
			TH_LOG("%.0f with one thread, %.0f with two (x%.2f)", one, two, two / one);
		}
		ASSERT_EQ(THREADS_RUNS, n)
			TH_LOG("a vq left poll mode, or one thread polled all, too often");
		qsort(r, n, sizeof(r[0]), cmp_double);
		median = r[n / 2];
		TH_LOG("round %d: median x%.2f", round + 1, median);
	}
	ASSERT_EQ(0, vp_param_set("poll_threads", 1));
	ASSERT_EQ(0, vp_param_write("poll_cpus", "\n", 1));
	EXPECT_LE(THREADS_GAIN, median);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

int main(int argc, char **argv)
{
	vp_skip_if_cannot_run(argc, argv, VP_NEEDS_DEBUGFS | VP_NEEDS_DEVICE);
	return test_harness_run(argc, argv);
}
