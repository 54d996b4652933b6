// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_poll in action: a user-space virtio driver (vring.h) streams
 * tagged buffers through vhost-test, or packets through vhost-net into a
 * tap device, while the module switches the virtqueue between
 * notification and poll mode. Every test checks that every buffer was
 * used exactly once.
 */
#include <ctype.h>
#include <dirent.h>
#include <linux/membarrier.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <linux/if_tun.h>
#include "vhost_poll.h"
#include "vring.h"
#include "kselftest_harness.h"

#define RING		256
/* How long the device may take nothing before a test calls it stuck. */
#define STALL_MS	5000
/* A rate every streaming driver here reaches, and one none does. */
#define RATE_LOW	4
#define RATE_NEVER	1000000

#define TRACEFS		"/sys/kernel/tracing/"

/* Write @text to the file @path in one write(), made if missing; 0 or -errno. */
static int write_text(const char *path, const char *text)
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
static int tracefs_write(const char *name, const char *val)
{
	char path[128];

	snprintf(path, sizeof(path), TRACEFS "%s", name);
	return write_text(path, val);
}

/* How many lines of the trace buffer contain both @a and @b. */
static int trace_lines(const char *a, const char *b)
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
static int trace_poller_on(void)
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

/* Print the recorded trace lines that contain @a: what a failure saw. */
static void trace_print(struct __test_metadata *_metadata, const char *a)
{
	FILE *f = fopen(TRACEFS "trace", "re");
	char line[512];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, a))
			TH_LOG("%s", strtok(line, "\n"));
	fclose(f);
}

/*
 * Get @d's vq polled, to leave after @idle jiffies without work: rate
 * RATE_LOW, bursts of kicks that reach it, the buffers used. A burst that
 * the machine spread over more than a jiffy (a descheduled vCPU) does not
 * reach the rate; the next one is tried. It is polled when this process's
 * vqs of its index entered poll mode once more, or have one more polled.
 * 0, or -ETIMEDOUT after STALL_MS.
 */
static int poll_with_idle(struct vring_drv *d, unsigned int idle)
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
static int poll_for_long(struct vring_drv *d)
{
	return poll_with_idle(d, 10 * vp_jiffy_hz());
}

FIXTURE(poll) {
	struct vring_drv d;
};

FIXTURE_VARIANT(poll) {
	enum vring_dev dev;
	bool event_idx;
};

FIXTURE_VARIANT_ADD(poll, test_event_idx) {
	.dev = VRING_TEST,
	.event_idx = true,
};

FIXTURE_VARIANT_ADD(poll, test_no_event_idx) {
	.dev = VRING_TEST,
	.event_idx = false,
};

FIXTURE_VARIANT_ADD(poll, net_event_idx) {
	.dev = VRING_NET,
	.event_idx = true,
};

/*
 * The setup of the fixtures of one driver: a fresh vhost_poll (and
 * vhost-test, for @dev VRING_TEST), and @d open on @dev.
 */
static void poll_open(struct __test_metadata *_metadata, struct vring_drv *d,
		      enum vring_dev dev, bool event_idx)
{
	const char *why = vp_setup_modules(dev == VRING_TEST);

	if (why)
		SKIP(return, "%s", why);
	ASSERT_TRUE(vp_loaded());
	if (dev == VRING_NET && access("/dev/vhost-net", F_OK))
		SKIP(return, "no /dev/vhost-net (CONFIG_VHOST_NET)");
	if (dev == VRING_NET && access("/dev/net/tun", F_OK))
		SKIP(return, "no /dev/net/tun (CONFIG_TUN)");
	ASSERT_EQ(0, vring_open_dev(d, dev, RING, event_idx, 1 << 21));
}

static void poll_close(struct __test_metadata *_metadata, struct vring_drv *d)
{
	vring_close(d);
	if (vp_loaded())
		EXPECT_EQ(0, vp_unload());
}

FIXTURE_SETUP(poll)
{
	poll_open(_metadata, &self->d, variant->dev, variant->event_idx);
}

FIXTURE_TEARDOWN(poll)
{
	poll_close(_metadata, &self->d);
}

/* a. Below the rate no vq is polled, and every kick reaches vhost. */
TEST_F(poll, below_rate_never_polls)
{
	struct vp_vq_row sum;
	int polled;

	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_NEVER));
	ASSERT_EQ(0, vring_stream(&self->d, 20000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	EXPECT_EQ(0, sum.enters);
	EXPECT_EQ(0, polled);
	EXPECT_EQ(self->d.kicks, sum.kicks);
	EXPECT_EQ(sum.kicks, sum.notify_work);
	EXPECT_LT(0, self->d.kicks);
	EXPECT_TRUE(vring_all_used_once(&self->d));
	TH_LOG("%llu buffers, %llu kicks, none polled",
	       (unsigned long long)self->d.used, (unsigned long long)self->d.kicks);
}

/* b. Above the rate the vq is polled: at most 1 kick per 1000 buffers. */
TEST_F_TIMEOUT(poll, above_rate_polls_and_silences_kicks, 90)
{
	__u64 kicks0, bufs0, exits0;
	struct vp_vq_row sum;
	int polled, tries;

	/* A long idle time: the driver's pauses are not what is measured. */
	ASSERT_EQ(0, poll_with_idle(&self->d, vp_jiffy_hz() / 2));
	/*
	 * Until the vq's worker has run the handler the start queued, the
	 * driver is still asked for kicks (up to a ring's worth): stream a
	 * while before measuring.
	 */
	ASSERT_EQ(0, vring_stream(&self->d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	ASSERT_LE(1, sum.enters);

	/*
	 * A window in which the vq stayed polled throughout: one that saw it
	 * leave poll mode (a ring page that could not be read without a
	 * fault, seen once in qemu: 3 entries, 512 kicks; the watchdog's
	 * hand-back of a thread kept off UML's one CPU) measures something
	 * else, and is measured again, twice at most, once the vq is polled
	 * again: a vhost-net ring streamed in notification mode kicks about
	 * twice in 100,000 buffers, never again at the rate.
	 */
	for (tries = 0; tries < 3; tries++) {
		if (tries && !polled) {
			ASSERT_EQ(0, poll_with_idle(&self->d, vp_jiffy_hz() / 2));
			ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
		}
		exits0 = sum.exits;
		kicks0 = self->d.kicks;
		bufs0 = self->d.used;
		ASSERT_EQ(0, vring_stream(&self->d, 100000, 1, STALL_MS));
		ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
		TH_LOG("steady: %llu buffers, %llu kicks; poll_work %llu, empty %llu,",
		       (unsigned long long)(self->d.used - bufs0),
		       (unsigned long long)(self->d.kicks - kicks0), sum.poll_work,
		       sum.empty_polls);
		TH_LOG("exits %llu, stalls %llu", sum.exits, sum.stalls);
		if (sum.exits == exits0 && polled == 1)
			break;
	}
	EXPECT_EQ(exits0, sum.exits);
	EXPECT_LE((self->d.kicks - kicks0) * 1000, self->d.used - bufs0);
	EXPECT_LT(0, sum.poll_work);
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/* What the idle exit took, in ms from the moment the idle limit applied. */
struct idle_exit {
	unsigned long long left_ms;	/* the vq was in notification mode */
	unsigned long long asleep_ms;	/* the shared thread slept */
	unsigned long long kick_ms;	/* the ring asked for kicks again */
	unsigned int limit_ms;		/* the bound: idle + 1 jiffies, and slack */
};

/*
 * Stream polled, stop, and time the way back to notification mode; each
 * step waits up to STALL_MS. The figures' bound is for the callers.
 */
static void idle_exit_run(struct __test_metadata *_metadata, struct vring_drv *d,
			  struct idle_exit *r)
{
	const unsigned int idle = 2;
	/*
	 * The bound is idle + 1 jiffies. This test observes it from user
	 * space, which lags: under UML it shares the one CPU with the polling
	 * thread, under qemu TCG everything is emulated. It allows its own
	 * observation two more jiffies or 20 ms, whichever is longer.
	 */
	const unsigned int slack_ms = (vp_jiffies_ms(2) > 20 ? vp_jiffies_ms(2) : 20) * vp_slow();
	struct vp_vq_row sum;
	struct vp_worker w;
	unsigned long long t0;
	__u64 kicks, exits;
	bool was_polled;
	int polled;

	r->limit_ms = vp_jiffies_ms(idle + 1) + slack_ms;
	/*
	 * Stream with a long idle limit, so that the vq does not leave poll
	 * mode while the driver is descheduled; then set the limit under
	 * test. The last work came before the drain returned, so the vq must
	 * leave within the limit of the moment the new limit is in force.
	 */
	ASSERT_EQ(0, poll_with_idle(d, vp_jiffy_hz()));
	ASSERT_EQ(0, vring_stream(d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d->index, &sum, &polled));
	ASSERT_LE(1, sum.enters);
	exits = sum.exits;
	was_polled = polled;
	/* The last work was before this write: the bound runs from here. */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", idle));
	t0 = vp_now_ms();

	while (polled && vp_now_ms() - t0 < STALL_MS) {
		vp_sleep_us(200);
		ASSERT_EQ(1, vp_vq_sum(getpid(), d->index, &sum, &polled));
	}
	r->left_ms = vp_now_ms() - t0;
	ASSERT_EQ(0, polled) TH_LOG("still polled %llu ms after the last buffer", r->left_ms);
	ASSERT_EQ(0, vp_worker(&w));
	while (vp_task_state(w.pid) != 'S' && vp_now_ms() - t0 < STALL_MS)
		vp_sleep_us(200);
	r->asleep_ms = vp_now_ms() - t0;
	EXPECT_EQ('S', vp_task_state(w.pid));
	EXPECT_EQ(0, w.polled_vqs);
	/*
	 * vhost turns notifications back on in the vq's own worker, after
	 * the module let go: only then does the ring ask for a kick.
	 */
	while (!vring_wants_kick(d) && vp_now_ms() - t0 < STALL_MS)
		vp_sleep_us(200);
	r->kick_ms = vp_now_ms() - t0;
	EXPECT_TRUE(vring_wants_kick(d));
	TH_LOG("notification mode after %llu ms, worker asleep after %llu,",
	       r->left_ms, r->asleep_ms);
	TH_LOG("kicks asked for after %llu", r->kick_ms);
	TH_LOG("(bound %u ms, HZ %d)", r->limit_ms, vp_jiffy_hz());

	/* It did leave poll mode: now, or already while draining. */
	ASSERT_EQ(1, vp_vq_sum(getpid(), d->index, &sum, &polled));
	EXPECT_LE(1, sum.exits);
	EXPECT_LT(exits, sum.exits + !was_polled);
	kicks = d->kicks;
	ASSERT_EQ(1, vring_post(d, 1));
	EXPECT_EQ(kicks + 1, d->kicks);
	ASSERT_EQ(0, vring_drain(d, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(d));
}

/* c. When the load stops the vq leaves poll mode, the worker sleeps, and
 * the next buffer comes with a kick. (How soon: idle_exit_within_bound.)
 */
TEST_F(poll, idle_returns_to_notification)
{
	struct idle_exit r;

	idle_exit_run(_metadata, &self->d, &r);
}

/* c'. ...within poll_stop_idle + 1 jiffies: a wall-clock bound, in a test
 * of its own so that a CI can set it aside on a machine too noisy for it.
 */
TEST_F(poll, idle_exit_within_bound)
{
	struct idle_exit r;

	idle_exit_run(_metadata, &self->d, &r);
	EXPECT_GE(r.limit_ms, r.left_ms);
	EXPECT_GE(r.limit_ms, r.asleep_ms);
	EXPECT_GE(r.limit_ms, r.kick_ms);
}

/* Wait until @d's vq has left poll mode after @exits exits; 0 or -ETIMEDOUT. */
static int wait_exit(struct vring_drv *d, unsigned long long exits)
{
	unsigned long long t0 = vp_now_ms();
	struct vp_vq_row sum;
	int polled;

	while (vp_now_ms() - t0 < STALL_MS) {
		if (vp_vq_sum(getpid(), d->index, &sum, &polled) == 1 &&
		    !polled && sum.exits > exits)
			return 0;
		vp_sleep_ms(1);
	}
	return -ETIMEDOUT;
}

/*
 * One quick return of idle_window_grows_and_shrinks: @d polled with a
 * window of @idle jiffies, a stream taken in poll mode, its exit waited
 * for; the largest window seen while polled into *@grown, and @d's row
 * after the exit into @sum. 0, or the first step's error.
 */
static int window_round(struct vring_drv *d, unsigned int idle,
			unsigned long long *grown, struct vp_vq_row *sum)
{
	unsigned long long exits;
	int polled, ret;

	ret = poll_with_idle(d, idle);
	if (ret)
		return ret;
	if (vp_vq_sum(getpid(), d->index, sum, &polled) != 1)
		return -ENOENT;
	if (sum->window > *grown)
		*grown = sum->window;
	/*
	 * Left again already (a slow machine): that exit counts, and the
	 * stream below runs in notification mode.
	 */
	exits = polled ? sum->exits : sum->exits - 1;
	/* Buffers taken in poll mode: the period paid. */
	ret = vring_stream(d, 64, 1, STALL_MS);
	if (!ret)
		ret = wait_exit(d, exits);
	if (!ret && vp_vq_sum(getpid(), d->index, sum, &polled) != 1)
		ret = -ENOENT;
	return ret;
}

/* c''. The idle window moves within [poll_stop_idle, poll_stop_idle_max]:
 * a vq that comes back to poll mode soon after an idle exit gets a longer
 * window next time; a lower maximum bounds it at once; one that comes
 * back later than the maximum gets a shorter one.
 */
TEST_F(poll, idle_window_grows_and_shrinks)
{
	unsigned long long grown = 0, enters;
	struct vp_vq_row sum;
	int polled, i;
	bool idle_exit;

	/*
	 * A first window of 4 jiffies: room for the stream below to run in
	 * poll mode even on a slow machine (a period that took nothing would
	 * shrink the window instead).
	 */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle_max", 32));
	for (i = 0; i < 4; i++)
		ASSERT_EQ(0, window_round(&self->d, 4, &grown, &sum));
	/* Four quick returns: it doubled at least once, and stays bounded. */
	EXPECT_LT(4, grown);
	EXPECT_GE(32, grown);
	/*
	 * Only an exit for want of work, after a period that paid, makes the
	 * next entry a quick or a late return. A hand-back (vhost's watchdog,
	 * or contention, on a busy machine) leaves the window as it is, and
	 * starts a cool-down, which the row shows (cool > 0; an idle exit
	 * that paid sets it back to 0). Then round again, a few times.
	 */
	for (i = 0; i < 4 && sum.cool; i++) {
		TH_LOG("the last exit was a hand-back (%llu stalls, cool-down %llu): round again",
		       sum.stalls, sum.cool);
		ASSERT_EQ(0, window_round(&self->d, 4, &grown, &sum));
	}
	idle_exit = !sum.cool;

	/* Lower bounds apply at once. */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", 1));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle_max", 2));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	EXPECT_EQ(2, sum.window);

	/*
	 * Back after ten jiffies, more than the maximum: it halves. With a
	 * window of one jiffy it may leave again before poll_with_idle()
	 * sees it polled, and come back at once: a quick return, which
	 * doubles it again (to the maximum, 2), or, after a period that
	 * took nothing, leaves it. Only the first entry is a late return.
	 */
	vp_sleep_ms(10 * 1000 / vp_jiffy_hz() + 1);
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	enters = sum.enters;
	ASSERT_EQ(0, poll_with_idle(&self->d, 1));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	/*
	 * One entry: halved to 1 (the minimum). More: 1 or 2. After four
	 * hand-backs in a row (no idle exit to return from): 2, untouched.
	 */
	EXPECT_GE(idle_exit && sum.enters == enters + 1 ? 1 : 2, sum.window);
	ASSERT_EQ(0, vring_stream(&self->d, 64, 1, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&self->d));
	TH_LOG("window grew to %llu jiffies (from 4, maximum 32), then %llu after a late return",
	       grown, sum.window);
	TH_LOG("%llu entries since the late return%s", (unsigned long long)(sum.enters - enters),
	       idle_exit ? "" : " (which followed a hand-back)");
}

/*
 * vring_stream() of @total buffers in batches of @batch, in slices of 1,000
 * with a millisecond's sleep after each: under time travel (inf-cpu) time
 * passes only while every CPU idles, and a polling thread that hands its
 * CPU to the worker beside it keeps the one CPU busy from a stream's
 * first buffer to its last, which then takes no time at all (no jiffy
 * for the policy's rules, no wake-up for a waiter). 0 or -errno.
 */
static int stream_in_time(struct vring_drv *d, unsigned int total, unsigned int batch)
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

/* c4. A polled vq whose visits save fewer than poll_min_gain kicks per
 * thousand buffers goes back to notification mode and cools down before it
 * may be polled again; with poll_min_gain 0 it stays. Batches of 16 let a
 * visit queue the handler at most once per batch, some 62 times per
 * thousand buffers: under 500, whatever the machine.
 */
TEST_F(poll, little_gain_goes_back_and_cools_down)
{
	struct vp_vq_row sum;
	__u64 exits, stalls;
	int polled, traced, ret;
	char owner[32];

	ASSERT_EQ(0, poll_with_idle(&self->d, 10 * vp_jiffy_hz()));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	exits = sum.exits;
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 500));
	ASSERT_EQ(0, stream_in_time(&self->d, 20000, 16));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	/* Left poll mode (no idle exit: the window is 10 s), and cools down. */
	EXPECT_LT(exits, sum.exits);
	EXPECT_LE(16, sum.cool);
	TH_LOG("after the stream: %llu entries, %llu exits, polled %d",
	       sum.enters, sum.exits, polled);

	/*
	 * Kept polled when nothing is asked of polling. The stream may have
	 * outlasted the cool-down and left the vq polled again: then it needs
	 * no new entry (and would get none, with a 10 s window).
	 */
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	if (!polled)
		ASSERT_EQ(0, poll_with_idle(&self->d, 10 * vp_jiffy_hz())) {
			/* What kept it from poll mode: the books say. */
			if (vp_vq_sum(getpid(), self->d.index, &sum, &polled) > 0) {
				TH_LOG("not polled again (%d): cool-down %llu jiffies,",
				       polled, sum.cool);
				TH_LOG("%llu refused,", sum.refused);
				TH_LOG("%llu entries, %llu exits, %llu stalls",
				       sum.enters, sum.exits, sum.stalls);
			}
		}
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	exits = sum.exits;
	stalls = sum.stalls;
	/* Each exit's reason, for a failure to name. */
	traced = trace_poller_on() > 0;
	snprintf(owner, sizeof(owner), "owner=%d ", getpid());
	ret = vring_stream(&self->d, 20000, 16, STALL_MS);
	if (traced)
		tracefs_write("events/vhost_poller/enable", "0");
	ASSERT_EQ(0, ret) {
		trace_print(_metadata, owner);
	}
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	/*
	 * No exit but the watchdog's, which a polling thread kept off its CPU
	 * (a vCPU the host did not run: a loaded CI machine) may cause; the
	 * vq may then be cooling down.
	 */
	EXPECT_EQ(exits, sum.exits - (sum.stalls - stalls)) {
		TH_LOG("the exits during the stream%s:",
		       traced ? "" : " (no trace events here)");
		trace_print(_metadata, owner);
	}
	EXPECT_TRUE(polled == 1 || sum.stalls > stalls);
	EXPECT_TRUE(vring_all_used_once(&self->d));
	TH_LOG("handed back, cool-down %llu jiffies; %llu queued, %llu held, %llu refused,",
	       sum.cool, sum.queued, sum.held, sum.refused);
	TH_LOG("%llu stalls", sum.stalls - stalls);
}

/* d. poll_start_rate=0 mid-stream returns the vq to notifications at once;
 * a rate again brings polling back; nothing is lost on the way.
 */
TEST_F(poll, rate_zero_mid_stream)
{
	struct vp_vq_row sum;
	__u64 enters;
	int polled, i;

	ASSERT_EQ(0, poll_with_idle(&self->d, vp_jiffy_hz()));
	ASSERT_EQ(0, vring_stream(&self->d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	ASSERT_LE(1, sum.enters);

	/* Buffers in flight while the rate goes to 0. */
	vring_post(&self->d, RING / 2);
	ASSERT_EQ(0, vp_param_set("poll_start_rate", 0));
	for (i = 0; i < 2000; i++) {
		ASSERT_EQ(0, vring_stream(&self->d, 8, 1, STALL_MS));
		ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
		if (!polled)
			break;
	}
	EXPECT_EQ(0, polled);
	ASSERT_EQ(0, vring_stream(&self->d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	EXPECT_EQ(0, polled);
	EXPECT_LE(1, sum.exits);
	enters = sum.enters;

	ASSERT_EQ(0, poll_with_idle(&self->d, vp_jiffy_hz()));
	ASSERT_EQ(0, vring_stream(&self->d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	EXPECT_LT(enters, sum.enters);
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/*
 * g. Bursts timed to land as the vq leaves poll mode: none is lost. The
 * bursts go on until the race was run EXITS_MIN times (the vq left poll
 * mode), at least BURSTS_MIN bursts and at most BURSTS_MAX: with event
 * index a burst kicks about once, and a start needs two kicks in a
 * jiffy, so how many bursts start polling depends on the timing. In UML
 * (HZ 100) vhost-net's 1,000 bursts started it 94 to 124 times, under
 * the load of a check run at the low end; under KCSAN (qemu-kcsan),
 * 3,000 bursts started it 84 times.
 */
#define BURSTS_MIN	1000
#define BURSTS_MAX	6000
#define EXITS_MIN	100

TEST_F_TIMEOUT(poll, bursts_at_poll_exit, 90)
{
	const unsigned int idle = 1;
	/* Pauses around the idle limit: 0.5, 1, 1.5 and 2 jiffies. */
	const unsigned int jiffy_us = 1000000 / vp_jiffy_hz();
	struct vp_vq_row sum = { 0 };
	unsigned int b, i;
	int polled;

	ASSERT_EQ(0, vp_param_set("poll_stop_idle", idle));
	ASSERT_EQ(0, vp_param_set("poll_start_rate", 2));
	for (b = 0; b < BURSTS_MAX; b++) {
		if (b >= BURSTS_MIN && b % 100 == 0) {
			ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
			if (sum.exits >= EXITS_MIN)
				break;
		}
		for (i = 0; i < 8; i++)
			vring_post(&self->d, 1);
		ASSERT_EQ(0, vring_drain(&self->d, STALL_MS)) {
			TH_LOG("burst %u: %llu of %llu buffers used", b,
			       (unsigned long long)self->d.used,
			       (unsigned long long)self->d.posted);
		}
		vp_sleep_us(jiffy_us * (1 + b % 4) / 2);
	}
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	TH_LOG("%u bursts: %llu kicks, %llu entries, %llu exits", b,
	       (unsigned long long)self->d.kicks, sum.enters, sum.exits);
	/* The race was run: the vq went in and out of poll mode many times. */
	EXPECT_LE(EXITS_MIN, sum.exits);
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/* vhost-test's byte weight: a handler run stops after this many bytes. */
#define TEST_WEIGHT	0x80000

/* Give vhost a memory table of the ring's arena and of @big. */
static int set_mem_with(struct vring_drv *d, void *big, size_t len)
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

/*
 * Make up to @n buffers of @len bytes at @big available with one store of
 * the avail index, and no kick. Returns how many.
 */
static unsigned int post_big(struct vring_drv *d, unsigned int n, void *big, __u32 len)
{
	unsigned int i;

	for (i = 0; i < n && d->nfree && d->posted + 1 < d->map_bits; i++) {
		__u16 head = d->free[--d->nfree];

		d->seq_of[head] = ++d->posted;
		vring_avail_add(d, head, (uintptr_t)big, len, 0);
	}
	vring_publish(d);
	return i;
}

/*
 * What does not change how the ring is read leaves a polled vq polled: a
 * GET of its base or busy-loop timeout, its call file set again, its
 * error file unbound, its busy-loop timeout set (a polling worker reads
 * it as it spins). Its buffers then go through as before. (Every vring
 * ioctl took it back to notification mode, until its kicks reached the
 * rate again.) vhost-net's; vhost-test flushes its device after every
 * ioctl (vhost_test_ioctl()), and a flush takes its vqs back.
 */
TEST_F(poll, reads_and_call_files_leave_it_polled)
{
	struct vhost_vring_state s = { .index = self->d.index };
	struct vhost_vring_file f = { .index = self->d.index };
	struct vp_vq_row a, b;
	int polled;

	if (!vring_is_net(variant->dev))
		SKIP(return, "vhost-test flushes, and so quiesces, after every ioctl");
	ASSERT_EQ(0, poll_for_long(&self->d));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &a, &polled));
	ASSERT_LE(1, polled);
	ASSERT_EQ(0, ioctl(self->d.fd, VHOST_GET_VRING_BASE, &s));
	ASSERT_EQ(0, ioctl(self->d.fd, VHOST_GET_VRING_BUSYLOOP_TIMEOUT, &s));
	f.fd = self->d.call;
	ASSERT_EQ(0, ioctl(self->d.fd, VHOST_SET_VRING_CALL, &f));
	f.fd = -1;
	ASSERT_EQ(0, ioctl(self->d.fd, VHOST_SET_VRING_ERR, &f));
	s.num = 0;
	ASSERT_EQ(0, ioctl(self->d.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &s));
	/* A hand-back, had there been one, shows within a jiffy or two. */
	vp_sleep_ms(vp_jiffies_ms(2) + 2);
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &b, &polled));
	TH_LOG("after five such ioctls: %d polled, %llu exits (%llu before)", polled, b.exits,
	       a.exits);
	EXPECT_EQ(a.exits, b.exits);
	EXPECT_LE(1, polled);
	ASSERT_EQ(0, vring_stream(&self->d, 200, 4, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

enum leave_request { LEAVE_SET_VRING_KICK, LEAVE_SET_MEM_TABLE, LEAVE_RATE_ZERO, LEAVE_N };

static const char *const leave_name[LEAVE_N] = {
	"SET_VRING_KICK", "SET_MEM_TABLE", "poll_start_rate=0",
};

static int leave_poll_mode(struct vring_drv *d, enum leave_request how, void *big, size_t len)
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
static unsigned int poller_takes(struct vring_drv *d, unsigned int try, __u64 used0)
{
	if (try % 9)
		vp_sleep_us(20 << (try % 9 - 1));
	vring_reap(d);
	return d->used - used0;
}

/*
 * The tests of one driver that only vhost-test can run: its byte weight
 * stops each handler run, and its rings may hold what no vhost-net
 * driver would show. With and without EVENT_IDX, as the poll fixture's
 * vhost-test variants.
 */
FIXTURE(poll_vhost_test) {
	struct vring_drv d;
};

FIXTURE_VARIANT(poll_vhost_test) {
	bool event_idx;
};

FIXTURE_VARIANT_ADD(poll_vhost_test, event_idx) {
	.event_idx = true,
};

FIXTURE_VARIANT_ADD(poll_vhost_test, no_event_idx) {
	.event_idx = false,
};

FIXTURE_SETUP(poll_vhost_test)
{
	poll_open(_metadata, &self->d, VRING_TEST, variant->event_idx);
}

FIXTURE_TEARDOWN(poll_vhost_test)
{
	poll_close(_metadata, &self->d);
}

/* Buffers a polled vq's driver made available and its handler has not
 * taken yet when the vq leaves poll mode on request (a vring ioctl such as
 * QEMU's SET_VRING_CALL on an MSI-X mask, a memory table, the rate set to
 * 0) are handled then, with no further kick. Each buffer is one byte
 * weight, so one handler run takes one: the leave comes between runs, or
 * before the first.
 */
TEST_F(poll_vhost_test, leaving_on_request_strands_nothing)
{
	const unsigned int burst = RING - 6;
	unsigned int hit[LEAVE_N] = { 0 }, took[LEAVE_N] = { 0 }, how, tries, n;
	void *big;

	big = mmap(NULL, TEST_WEIGHT, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, big);
	ASSERT_EQ(0, set_mem_with(&self->d, big, TEST_WEIGHT));

	for (how = 0; how < LEAVE_N; how++) {
		for (tries = 0; tries < 30 && !hit[how]; tries++) {
			__u64 used0;
			unsigned int taken;

			/* Polled until asked to leave. */
			ASSERT_EQ(0, poll_for_long(&self->d));
			used0 = self->d.used;
			n = post_big(&self->d, burst, big, TEST_WEIGHT);
			ASSERT_EQ(burst, n);
			taken = poller_takes(&self->d, tries, used0);
			ASSERT_EQ(0, leave_poll_mode(&self->d, how, big, TEST_WEIGHT));
			ASSERT_EQ(0, vring_drain(&self->d, STALL_MS)) {
				TH_LOG("%s after the poller took %u of %u: %llu never used",
				       leave_name[how], taken, n,
				       (unsigned long long)(self->d.posted - self->d.used));
			}
			if (taken < n) {
				hit[how] = 1;
				took[how] = taken;
			}
		}
	}
	for (how = 0; how < LEAVE_N; how++)
		TH_LOG("%s: came after the poller took %u of %u", leave_name[how], took[how], n);
	EXPECT_TRUE(vring_all_used_once(&self->d));
	munmap(big, TEST_WEIGHT);
	for (how = 0; how < LEAVE_N; how++) {
		if (!hit[how])
			SKIP(return, "%s never came before the ring was drained",
			     leave_name[how]);
	}
}

/* A hostile driver makes a head available that cannot be taken (past
 * the ring) and moves the avail index back and forth over it, with no
 * kick: every stop sees new buffers. The vq must leave poll mode as an
 * idle one does, not be kept polled for buffers nobody can take.
 */
TEST_F(poll_vhost_test, hostile_index_does_not_hold_the_poller)
{
	const unsigned int idle = 2, jiffy_us = 1000000 / vp_jiffy_hz();
	const unsigned long long window_ms = vp_jiffies_ms(25 * idle) + 20;
	struct vp_vq_row sum;
	unsigned long long t0;
	__u16 base;
	__u64 exits;
	int polled, flips = 0;

	ASSERT_EQ(0, poll_for_long(&self->d));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	exits = sum.exits;

	/* Slot base: a head no ring of RING entries has. */
	base = self->d.avail_idx;
	self->d.vr.avail->ring[base % self->d.num] = self->d.num + 7;
	vr_wmb();
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", idle));
	t0 = vp_now_ms();
	while (vp_now_ms() - t0 < window_ms) {
		__atomic_store_n(&self->d.vr.avail->idx, (__u16)(base + !(flips++ & 1)),
				 __ATOMIC_RELEASE);
		vp_sleep_us(jiffy_us / 4);
	}
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	TH_LOG("%d flips of the avail index over %llu ms: %s, %llu exits",
	       flips, window_ms, polled ? "still polled" : "notification mode",
	       (unsigned long long)(sum.exits - exits));
	EXPECT_EQ(0, polled);
	EXPECT_LT(exits, sum.exits);
	/* Back to the honest index: the ring is closed by the teardown. */
	__atomic_store_n(&self->d.vr.avail->idx, base, __ATOMIC_RELEASE);
}

static long long own_workers_ticks(void);

/* A ring the poller cannot read (the driver moved the avail index further
 * than the ring holds) is no work: as vhost leaves such a ring until the
 * next kick, the poller hands it back at once, instead of meeting the
 * error at every visit until poll_stop_idle. A worker that polls its own
 * ring does the same when it looks; but it may be asleep, notifications
 * on, as in notification mode: the driver did not kick. Either way nobody
 * spends its CPU meeting the error.
 */
static void unreadable_handed_back(struct __test_metadata *_metadata,
				   struct vring_drv *d, int in_worker)
{
	unsigned long long t0, ms;
	long long ticks, pct;
	struct vp_vq_row sum;
	__u16 base;
	int polled;

	ASSERT_EQ(0, vp_poll_in_worker(in_worker));
	ASSERT_EQ(0, poll_for_long(d));

	base = d->avail_idx;
	ticks = own_workers_ticks();
	ASSERT_LE(0, ticks);
	__atomic_store_n(&d->vr.avail->idx, (__u16)(base + d->num + 5),
			 __ATOMIC_RELEASE);
	/* A fifth of the idle limit, by the clock: only a hand-back ends
	 * polling in time.
	 */
	t0 = vp_now_ms();
	do {
		vp_sleep_ms(10);
		ASSERT_EQ(1, vp_vq_sum(getpid(), d->index, &sum, &polled));
	} while (polled && vp_now_ms() - t0 < vp_jiffies_ms(2 * vp_jiffy_hz()));
	ms = vp_now_ms() - t0;
	pct = (own_workers_ticks() - ticks) * 100000 / sysconf(_SC_CLK_TCK) /
	      (long long)(ms ? ms : 1);
	TH_LOG("%s after %llu ms; the worker used %lld%% of a CPU",
	       polled ? "still polled" : "handed back", ms, pct);
	if (in_worker) {
		EXPECT_TRUE(!polled || pct <= 25);
	} else {
		EXPECT_EQ(0, polled) {
			TH_LOG("still polled with an unreadable ring: %llu empty polls",
			       (unsigned long long)sum.empty_polls);
		}
	}
	__atomic_store_n(&d->vr.avail->idx, base, __ATOMIC_RELEASE);
}

TEST_F(poll_vhost_test, unreadable_ring_is_handed_back)
{
	unreadable_handed_back(_metadata, &self->d, 0);
}

/* The same when the vq's own worker polls it. */
TEST_F(poll_vhost_test, unreadable_ring_is_handed_back_by_its_worker)
{
	unreadable_handed_back(_metadata, &self->d, 1);
}

/*
 * Move @d's arena to shared memory, its contents kept, before any buffer
 * is posted: MADV_DONTNEED then only unmaps a page, which the next access
 * maps again with what it held, as after reclaim or migration.
 */
static int arena_shared(struct vring_drv *d)
{
	void *copy = malloc(d->arena_len);
	void *p;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, d->arena, d->arena_len);
	p = mmap(d->arena, d->arena_len, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p == d->arena)
		memcpy(d->arena, copy, d->arena_len);
	free(copy);
	return p == d->arena ? 0 : -errno;
}

/*
 * A ring whose page is away for a moment is not an error. Reclaim,
 * migration, NUMA hinting and THP collapse unmap a page that the next
 * access maps again; the poller reads the ring with page faults off, so
 * its look fails then. That look queues one handler run, which takes the
 * fault in the owner's worker as a kick's would, and the vq stays polled.
 * Here the avail ring's page is unmapped (shared memory, so it keeps its
 * contents) five times, each for longer than the pinned page's peeks are
 * trusted (100 ms). Before, the first failed look handed the vq back.
 */
TEST_F(poll_vhost_test, page_away_keeps_the_ring_polled)
{
	unsigned long long exits, queued, retries;
	long page = sysconf(_SC_PAGESIZE);
	struct vp_vq_row sum;
	uintptr_t avail;
	int polled, i;

	ASSERT_EQ(0, arena_shared(&self->d));
	ASSERT_EQ(0, poll_for_long(&self->d));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	ASSERT_EQ(1, polled);
	exits = sum.exits - sum.stalls;
	queued = sum.queued;
	retries = sum.retries;
	avail = (uintptr_t)&self->d.vr.avail->idx & ~(uintptr_t)(page - 1);
	for (i = 0; i < 5; i++) {
		ASSERT_EQ(0, madvise((void *)avail, page, MADV_DONTNEED));
		vp_sleep_ms(150);
	}
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	TH_LOG("avail page unmapped 5 times: %s, %llu exits, %llu stalls",
	       polled ? "still polled" : "handed back", sum.exits - sum.stalls - exits,
	       sum.stalls);
	TH_LOG("handler runs queued: %llu as work, %llu as retries",
	       sum.queued - queued, sum.retries - retries);
	/* No exit but the watchdog's (a loaded host), after which it cools. */
	EXPECT_TRUE(polled == 1 || sum.stalls);
	EXPECT_EQ(exits, sum.exits - sum.stalls);
	EXPECT_LE(1, sum.retries - retries);
	EXPECT_EQ(queued, sum.queued);
	ASSERT_EQ(0, vring_stream(&self->d, 1000, 1, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/*
 * Tests with several drivers and teardown paths; vhost_poll loaded. The
 * device a test drives is td_dev, set in each test's own process by the
 * setup, and td_open() opens one. The teardown fixture's tests run on
 * vhost-test and on vhost-net, its variants; a test tied to one device
 * belongs to teardown_vhost_test or teardown_vhost_net.
 */
FIXTURE(teardown) {
};

FIXTURE_VARIANT(teardown) {
	enum vring_dev dev;
};

FIXTURE_VARIANT_ADD(teardown, test) {
	.dev = VRING_TEST,
};

FIXTURE_VARIANT_ADD(teardown, net) {
	.dev = VRING_NET,
};

static enum vring_dev td_dev = VRING_TEST;

static int td_open(struct vring_drv *d, __u64 max_bufs)
{
	return vring_open_dev(d, td_dev, RING, true, max_bufs);
}

/* The vqs a td_dev device shows the poller: vhost-net's two, or one. */
static int td_vqs(void)
{
	return td_dev == VRING_NET ? 2 : 1;
}

/* The setup of the teardown fixtures, for tests on @dev. */
static void teardown_open(struct __test_metadata *_metadata, enum vring_dev dev)
{
	const char *why = vp_setup_modules(dev == VRING_TEST);

	if (why)
		SKIP(return, "%s", why);
	td_dev = dev;
	if (td_dev == VRING_NET && (access("/dev/vhost-net", F_OK) || access("/dev/net/tun", F_OK)))
		SKIP(return, "no /dev/vhost-net or /dev/net/tun (CONFIG_VHOST_NET, CONFIG_TUN)");
	ASSERT_TRUE(vp_loaded());
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", vp_jiffy_hz()));
}

static void teardown_close(struct __test_metadata *_metadata)
{
	if (vp_loaded())
		EXPECT_EQ(0, vp_unload());
}

FIXTURE_SETUP(teardown)
{
	teardown_open(_metadata, variant->dev);
}

FIXTURE_TEARDOWN(teardown)
{
	teardown_close(_metadata);
}

/* The teardown tests that need a vhost-test device of their own. */
FIXTURE(teardown_vhost_test) {
};

FIXTURE_SETUP(teardown_vhost_test)
{
	teardown_open(_metadata, VRING_TEST);
}

FIXTURE_TEARDOWN(teardown_vhost_test)
{
	teardown_close(_metadata);
}

/* The teardown tests of what only vhost-net has: an IOTLB, a tap. */
FIXTURE(teardown_vhost_net) {
};

FIXTURE_SETUP(teardown_vhost_net)
{
	teardown_open(_metadata, VRING_NET);
}

FIXTURE_TEARDOWN(teardown_vhost_net)
{
	teardown_close(_metadata);
}

/* The module is not pinned by anyone: its reference count is 0. */
static bool module_unpinned(void)
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

#define DEVS_PER_PROC	4
#define PROCS		2

struct dev_thread {
	struct vring_drv d;
	pthread_t t;
	int ret;
};

static void *stream_thread(void *arg)
{
	struct dev_thread *dt = arg;

	vring_post_kicked(&dt->d, 4 * RATE_LOW);
	dt->ret = vring_stream(&dt->d, 20000, 1, STALL_MS);
	if (!dt->ret && !vring_all_used_once(&dt->d))
		dt->ret = -EIO;
	return NULL;
}

/* One process of test e: 4 devices, a thread each. Exit status 0 if all
 * buffers were used once and every device was polled.
 */
static int many_devices_child(void)
{
	struct dev_thread dt[DEVS_PER_PROC];
	struct vp_vq_row rows[256];
	int i, n, polled_devs = 0;

	for (i = 0; i < DEVS_PER_PROC; i++)
		/*
		 * Without EVENT_IDX every buffer posted while the device is
		 * idle kicks: 8 streams sharing UML's one CPU then still reach
		 * the rate (with it, a device that lags behind its driver is
		 * kicked rarely, and one in 5 runs never reached the rate).
		 */
		if (vring_open_dev(&dt[i].d, td_dev, RING, false, 1 << 16))
			return 10;
	for (i = 0; i < DEVS_PER_PROC; i++)
		pthread_create(&dt[i].t, NULL, stream_thread, &dt[i]);
	for (i = 0; i < DEVS_PER_PROC; i++)
		pthread_join(dt[i].t, NULL);
	for (i = 0; i < DEVS_PER_PROC; i++)
		if (dt[i].ret)
			return 11;
	n = vp_vq_rows(rows, 256);
	for (i = 0; i < n; i++)
		if (rows[i].pid == getpid() && rows[i].enters)
			polled_devs++;
	for (i = 0; i < DEVS_PER_PROC; i++)
		vring_close(&dt[i].d);
	return polled_devs == DEVS_PER_PROC ? 0 : 12;
}

/* e. 8 devices from 2 processes, one worker thread for all. */
TEST_F(teardown, many_devices_one_thread)
{
	int status[PROCS], i, left = PROCS, max_threads = 0;
	pid_t pids[PROCS];

	for (i = 0; i < PROCS; i++) {
		pids[i] = fork();
		ASSERT_LE(0, pids[i]);
		if (!pids[i])
			_exit(many_devices_child());
	}
	while (left) {
		int t = vp_count_threads("vhost-poll");

		if (t > max_threads)
			max_threads = t;
		for (i = 0; i < PROCS; i++)
			if (pids[i] > 0 && waitpid(pids[i], &status[i], WNOHANG) == pids[i]) {
				pids[i] = -pids[i];
				left--;
			}
		vp_sleep_ms(5);
	}
	for (i = 0; i < PROCS; i++) {
		EXPECT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0) {
			TH_LOG("process %d: status 0x%x (10 open, 11 buffers, 12 not polled)",
			       i, status[i]);
		}
	}
	EXPECT_EQ(1, max_threads);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/* How many of process @pid's polled vqs thread @thread polls. */
static int polled_by(int pid, unsigned int thread)
{
	struct vp_vq_row rows[256];
	int n = vp_vq_rows(rows, 256), i, found = 0;

	for (i = 0; i < n; i++)
		if (rows[i].pid == pid && rows[i].poll && rows[i].thread == thread)
			found++;
	return found;
}

/* Wait up to @ms until exactly @want polling threads run. */
static bool threads_become(int want, unsigned int ms)
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

/*
 * e'. poll_threads 2: a second thread, vhost-poll/1, is started and
 * polls the vq that reached the rate while the first polled another (a
 * vq goes to the thread that polls the fewest). Back to 1, the second
 * thread hands its vq back, with buffers in flight, and is stopped:
 * nothing is lost. Back to 2, it is started again and takes the next vq.
 */
TEST_F(teardown, second_thread_shares_and_goes)
{
	unsigned int idle = 8 * vp_jiffy_hz();
	struct vring_drv d[3];
	struct vp_worker w[16];
	int i;

	if (vp_ncpus() < 2)
		SKIP(return, "one CPU: no more threads run than CPUs are given (poll_cpus)");
	ASSERT_EQ(0, vp_param_set("poll_threads", 2));
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(0, td_open(&d[i], 1 << 20));
		ASSERT_EQ(0, poll_with_idle(&d[i], idle));
	}
	EXPECT_EQ(1, polled_by(getpid(), 0));
	EXPECT_EQ(1, polled_by(getpid(), 1));
	ASSERT_EQ(2, vp_workers(w, 16));
	EXPECT_EQ(1, w[1].thread);
	EXPECT_EQ(1, w[1].polled_vqs);
	EXPECT_EQ(1, vp_count_threads("vhost-poll/1"));

	for (i = 0; i < 2; i++)
		vring_post(&d[i], RING / 2);
	ASSERT_EQ(0, vp_param_set("poll_threads", 1));
	EXPECT_TRUE(threads_become(1, STALL_MS));
	for (i = 0; i < 2; i++) {
		EXPECT_EQ(0, vring_drain(&d[i], STALL_MS));
		EXPECT_TRUE(vring_all_used_once(&d[i]));
	}
	EXPECT_EQ(0, polled_by(getpid(), 1));

	ASSERT_EQ(0, vp_param_set("poll_threads", 2));
	/* The first thread still polls one vq: the next goes to a new second. */
	ASSERT_EQ(1, polled_by(getpid(), 0));
	ASSERT_EQ(0, td_open(&d[2], 1 << 20));
	ASSERT_EQ(0, poll_with_idle(&d[2], idle));
	EXPECT_EQ(1, polled_by(getpid(), 1));
	EXPECT_TRUE(threads_become(2, STALL_MS));
	for (i = 0; i < 3; i++) {
		EXPECT_EQ(0, vring_stream(&d[i], 2000, 1, STALL_MS));
		EXPECT_TRUE(vring_all_used_once(&d[i]));
		vring_close(&d[i]);
	}
}

/* Open a vhost-test driver and kick it past RATE_LOW; 0 or -errno. */
static int kicked_driver(struct vring_drv *d, __u64 max_bufs)
{
	int ret = td_open(d, max_bufs);

	if (!ret)
		vring_post_kicked(d, 4 * RATE_LOW);
	return ret;
}

/* Get a driver polled, with buffers in flight. */
static int polled_driver(struct vring_drv *d)
{
	int ret = td_open(d, 1 << 20);

	if (!ret)
		ret = poll_with_idle(d, vp_jiffy_hz());
	if (!ret)
		ret = vring_stream(d, 5000, 1, STALL_MS);
	if (ret)
		return ret;
	vring_post(d, RING / 2);
	if (vp_wait_polled(getpid(), 1, 1000))
		return 0;
	/*
	 * A rule handed the vq back meanwhile (contention, on a host that
	 * keeps a vCPU from running), and buffers posted without a kick do
	 * not bring it back: poll it once more, whose kicks take them.
	 */
	ret = poll_with_idle(d, vp_jiffy_hz());
	if (ret)
		return ret;
	vring_post(d, RING / 2);
	return vp_wait_polled(getpid(), 1, 1000) ? 0 : -EAGAIN;
}

/* f. Close the device while polled. */
TEST_F(teardown, close_while_polled)
{
	struct vring_drv d;

	ASSERT_EQ(0, polled_driver(&d));
	vring_close(&d);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
	EXPECT_TRUE(module_unpinned());
}

/* f. SIGKILL the owner while polled. */
TEST_F(teardown, sigkill_owner_while_polled)
{
	struct vp_vq_row sum;
	int status;
	pid_t pid;

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct vring_drv d;

		if (kicked_driver(&d, 1 << 24))
			_exit(1);
		for (;;)
			if (vring_stream(&d, 1000, 1, STALL_MS))
				_exit(2);
	}
	EXPECT_TRUE(vp_wait_polled(pid, 1, STALL_MS));
	kill(pid, SIGKILL);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(0, vp_vq_sum(pid, -1, &sum, NULL));
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
	EXPECT_TRUE(module_unpinned());
}

/* f. Change the memory table and move the ring while polled. */
TEST_F(teardown, reconfigure_while_polled)
{
	size_t ring_len = vring_ring_len(RING);
	struct vp_vq_row sum;
	struct vring_drv d;
	int polled, i;

	ASSERT_EQ(0, polled_driver(&d));
	/* The same region again, with buffers in flight. */
	ASSERT_EQ(0, vring_set_mem(&d, d.arena, d.arena_len));
	ASSERT_EQ(0, vring_stream(&d, 5000, 1, STALL_MS));

	/* Move the ring: stop the backend, new addresses, start again. */
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(0, vring_drain(&d, STALL_MS));
		ASSERT_EQ(0, vring_run(&d, 0));
		ASSERT_EQ(0, vring_place(&d, (char *)d.arena + (i % 2 ? 0 : ring_len)));
		ASSERT_EQ(0, vring_run(&d, 1));
		ASSERT_EQ(0, poll_with_idle(&d, vp_jiffy_hz()));
		ASSERT_EQ(0, vring_stream(&d, 5000, 1, STALL_MS));
	}
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	TH_LOG("after 3 moves: %llu entries, %llu exits", sum.enters, sum.exits);
	EXPECT_LE(2, sum.enters);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/* f. rmmod in the middle of a stream: the vq goes back to notifications
 * and the stream completes with every buffer used once.
 */
TEST_F(teardown, rmmod_mid_stream)
{
	int status, ret = -1, tries;
	pid_t pid;

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct vring_drv d;

		if (kicked_driver(&d, 1 << 20))
			_exit(1);
		if (stream_in_time(&d, 200000, 1))
			_exit(2);
		_exit(vring_all_used_once(&d) ? 0 : 3);
	}
	EXPECT_TRUE(vp_wait_polled(pid, 1, STALL_MS));
	/* The module may be briefly busy (a debugfs reader): retry. */
	for (tries = 0; tries < 100 && ret; tries++) {
		ret = vp_unload();
		if (ret)
			vp_sleep_ms(10);
	}
	EXPECT_EQ(0, ret);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		TH_LOG("driver status 0x%x (2 stalled, 3 buffers lost or doubled)", status);
	}
	EXPECT_FALSE(vp_loaded());
}

/* The counters file held open across rmmod, then closed. The module
 * may refuse to unload while it is open (EAGAIN/EBUSY), or unload and
 * leave a file that reads nothing and closes safely; nothing may run
 * freed module code or data.
 */
TEST(debugfs_file_outlives_module)
{
	const char *why = vp_setup_modules(false);
	int kmsg, status;
	pid_t pid;

	if (why)
		SKIP(return, "%s", why);
	ASSERT_TRUE(vp_loaded());
	kmsg = vp_kmsg_open();
	ASSERT_LE(0, kmsg);
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		/* A child: with the bug its close() oopses and kills it. */
		char buf[256];
		int fd = open(VP_DEBUGFS "vqs", O_RDONLY | O_CLOEXEC), ret;

		if (fd < 0 || read(fd, buf, sizeof(buf)) <= 0)
			_exit(10);
		ret = vp_unload();
		if (ret == -EAGAIN || ret == -EBUSY) {
			close(fd);
			_exit(vp_unload() ? 11 : 1);
		}
		if (ret)
			_exit(12);
		if (read(fd, buf, sizeof(buf)) > 0)
			_exit(13);
		_exit(close(fd) ? 14 : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) <= 1) {
		TH_LOG("reader status 0x%x (a signal: the close oopsed; 10-14: see the test)",
		       status);
	}
	EXPECT_FALSE(vp_kmsg_has(kmsg, "BUG:", NULL)) {
		TH_LOG("the kernel logged a BUG (page fault or KASAN) for the close");
	}
	EXPECT_FALSE(vp_loaded());
	close(kmsg);
}

/*
 * Move @d's ring and buffers to a shared mapping, so that a process
 * forked later drives the same ring (vring_open()'s arena is private).
 * 0 or -errno.
 */
static int share_ring(struct vring_drv *d)
{
	void *shm = mmap(NULL, d->arena_len, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int ret;

	if (shm == MAP_FAILED)
		return -errno;
	ret = vring_run(d, 0);
	if (!ret)
		ret = vring_set_mem(d, shm, d->arena_len);
	if (!ret)
		ret = vring_place(d, shm);
	if (!ret)
		ret = vring_run(d, 1);
	if (ret) {
		munmap(shm, d->arena_len);
		return ret;
	}
	munmap(d->arena, d->arena_len);
	d->arena = shm;
	d->bufs = (char *)shm + 2 * vring_ring_len(d->num);
	return 0;
}

/* The owner is SIGKILLed while polled; a child it forked keeps the
 * device and the (shared) ring. As upstream (vhost_worker_killed()), no
 * handler runs again: the child's buffers stay unused, its kicks start
 * nothing, and the vq leaves poll mode at once.
 */
TEST_F(teardown, killed_owner_runs_no_handler)
{
	const unsigned int quiet_ms = vp_jiffies_ms(20) > 200 ? vp_jiffies_ms(20) : 200;
	int to_heir[2], from[2], status, polled;
	struct vp_vq_row sum;
	long used = -1;
	__u64 enters;
	pid_t owner;
	char c;

	FILE *f = fopen("/sys/module/vhost/parameters/fork_from_owner_default", "re");

	/* Kthread workers outlive their owner, upstream runs their handlers. */
	if (f && fgetc(f) == 'N') {
		fclose(f);
		SKIP(return, "vhost workers are kthreads (fork_from_owner_default=N)");
	}
	if (f)
		fclose(f);
	/* Without the fix the vq would stay polled this long. */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", 10 * vp_jiffy_hz()));
	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1));
	ASSERT_EQ(0, pipe(to_heir));
	ASSERT_EQ(0, pipe(from));
	owner = fork();
	ASSERT_LE(0, owner);
	if (!owner) {
		struct vring_drv d;

		if (td_open(&d, 1 << 16) || share_ring(&d))
			_exit(1);
		vring_post_kicked(&d, 4 * RATE_LOW);
		if (vring_stream(&d, 2000, 1, STALL_MS))
			_exit(2);
		if (!fork()) {
			/* The heir: same fd, eventfds and ring; outlives the owner. */
			__u64 used0 = d.used;
			long n;

			if (write(from[1], "h", 1) != 1 || read(to_heir[0], &c, 1) != 1)
				_exit(1);
			vring_post_kicked(&d, 32);
			vp_sleep_ms(quiet_ms);
			vring_reap(&d);
			n = d.used - used0;
			if (write(from[1], &n, sizeof(n)) != sizeof(n))
				_exit(1);
			/* Keep the device open until told. */
			_exit(read(to_heir[0], &c, 1) == 1 ? 0 : 1);
		}
		if (write(from[1], "o", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	ASSERT_EQ(1, read(from[0], &c, 1));
	ASSERT_EQ(1, read(from[0], &c, 1));
	ASSERT_TRUE(vp_wait_polled(owner, 1, STALL_MS));
	ASSERT_EQ(0, kill(owner, SIGKILL));
	ASSERT_EQ(owner, waitpid(owner, &status, 0));
	/* Handed back at the poller's next visit, not after poll_stop_idle. */
	EXPECT_TRUE(vp_wait_polled(owner, 0, 1000));
	ASSERT_EQ(td_vqs(), vp_vq_sum(owner, -1, &sum, &polled));
	enters = sum.enters;

	ASSERT_EQ(1, write(to_heir[1], "g", 1));
	ASSERT_EQ(sizeof(used), read(from[0], &used, sizeof(used)));
	EXPECT_EQ(0, used) {
		TH_LOG("%ld of 32 buffers used after the owner was killed", used);
	}
	ASSERT_EQ(td_vqs(), vp_vq_sum(owner, -1, &sum, &polled));
	EXPECT_EQ(0, polled);
	EXPECT_EQ(enters, sum.enters);
	ASSERT_EQ(1, write(to_heir[1], "x", 1));
	ASSERT_LT(0, waitpid(-1, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	EXPECT_EQ(0, vp_vq_sum(owner, -1, &sum, NULL));
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * A polled vhost-net queue with a busy-loop timeout (QEMU's poll-us) next
 * to a polled vhost-test device: the longest 100 buffers of the second
 * took (ms), or a failed assertion.
 */
static unsigned long long net_busy_loop_run(struct __test_metadata *_metadata)
{
	const unsigned int busy_ms = 2000;
	struct vhost_vring_state s = { .num = busy_ms * 1000 };
	unsigned long long t0, ms, worst = 0;
	struct vring_drv net, test;
	int i;

	if (vp_ncpus() < 2)
		SKIP(return 0, "needs 2 CPUs: on one, a wake-up ends the busy loop (UML)");
	if (access("/dev/vhost-net", F_OK) || access("/dev/net/tun", F_OK))
		SKIP(return 0, "no /dev/vhost-net or /dev/net/tun");
	ASSERT_EQ(0, vring_open_dev(&net, VRING_NET, RING, true, 1 << 16));
	s.index = net.index;
	ASSERT_EQ(0, ioctl(net.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &s));
	ASSERT_EQ(0, vring_open(&test, RING, true, 1 << 16));
	ASSERT_EQ(0, poll_for_long(&net));
	ASSERT_EQ(0, poll_for_long(&test));
	ASSERT_TRUE(vp_wait_polled(getpid(), 2, STALL_MS));

	for (i = 0; i < 5; i++) {
		/* One frame: the poller queues the net handler for it. */
		ASSERT_EQ(1, vring_post(&net, 1));
		t0 = vp_now_ms();
		ASSERT_EQ(0, vring_stream(&test, 100, 1, STALL_MS));
		ms = vp_now_ms() - t0;
		if (ms > worst)
			worst = ms;
		ASSERT_EQ(0, vring_drain(&net, STALL_MS));
	}
	TH_LOG("next to a net queue with a %u ms busy loop: 100 buffers in at most %llu ms",
	       busy_ms, worst);
	EXPECT_TRUE(vring_all_used_once(&net));
	EXPECT_TRUE(vring_all_used_once(&test));
	vring_close(&test);
	vring_close(&net);
	return worst;
}

/* The net queue's busy loop runs in its own worker, not in the shared
 * thread: the test device next to it keeps streaming (it would stall for
 * the whole busy loop, 2 s, if the thread ran the net handler). The
 * vhost-test device is the one measured, and vhost-net the one added.
 */
TEST_F(teardown_vhost_test, net_busy_loop_does_not_hold_the_poller)
{
	net_busy_loop_run(_metadata);
}

/* ...and is not slowed by it: a wall-clock bound, in a test of its own. */
TEST_F(teardown_vhost_test, net_busy_loop_neighbour_within_bound)
{
	const unsigned long long bound_ms = 250 * vp_slow();
	unsigned long long worst;

	worst = net_busy_loop_run(_metadata);
	if (_metadata->exit_code != KSFT_SKIP)
		EXPECT_GT(bound_ms, worst);
}

/* How an owner gets stuck on ring memory whose fault does not resolve. */
enum stuck_how {
	/* Its handler reads an indirect descriptor table not there yet. */
	STUCK_IN_HANDLER,
	/* Its GET_VRING_BASE writes its answer to a page not there yet, with
	 * the vq mutex held, while its driver kicks past the rate.
	 */
	STUCK_IN_IOCTL,
};

/* A page registered with @uffd for missing-page faults, after one that is
 * not; or MAP_FAILED.
 */
static char *uffd_page(int uffd)
{
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	char *p = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return p;
	p[0] = 1;
	reg.range.start = (uintptr_t)p + 4096;
	reg.range.len = 4096;
	if (ioctl(uffd, UFFDIO_REGISTER, &reg)) {
		munmap(p, 2 * 4096);
		return MAP_FAILED;
	}
	return p + 4096;
}

/* Wait up to @ms for a fault on @uffd; 0 or -errno. */
static int uffd_fault(int uffd, int ms)
{
	struct pollfd p = { .fd = uffd, .events = POLLIN };
	struct uffd_msg msg;

	if (poll(&p, 1, ms) <= 0)
		return -ETIMEDOUT;
	if (read(uffd, &msg, sizeof(msg)) != sizeof(msg))
		return -errno;
	return msg.event == UFFD_EVENT_PAGEFAULT ? 0 : -EPROTO;
}

struct stuck_ioctl {
	struct vring_drv *d;
	struct vhost_vring_state *arg;
	int ret;
};

static void *get_base_thread(void *arg)
{
	struct stuck_ioctl *s = arg;

	s->ret = ioctl(s->d->fd, VHOST_GET_VRING_BASE, s->arg) ? -errno : 0;
	return NULL;
}

/*
 * The stuck owner, a process of its own: gets its ring polled, then stuck
 * as @how says on a page of a userfaultfd nobody serves; says 's' on @out
 * once the kernel waits on that page, then waits for a byte on @in, fills
 * the page in and checks that its device completes. Exit status 0 if it
 * did.
 */
static int stuck_owner(enum stuck_how how, int in, int out)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_copy copy = { .len = 4096 };
	struct stuck_ioctl s = { 0 };
	struct vring_drv d;
	pthread_t t;
	int uffd, i;
	char c, *page, *src;
	__u16 head;

	uffd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api))
		return 10;
	page = uffd_page(uffd);
	src = calloc(1, 4096);
	if (page == MAP_FAILED || !src)
		return 11;
	if (vring_open(&d, RING, true, 1 << 16) || set_mem_with(&d, page, 4096))
		return 12;
	if (poll_for_long(&d))
		return 13;
	if (how == STUCK_IN_HANDLER) {
		struct vring_desc *ind = (struct vring_desc *)src;

		/* One buffer: an indirect table (in @src until filled in). */
		head = d.free[--d.nfree];
		d.seq_of[head] = ++d.posted;
		ind->addr = (uintptr_t)(d.bufs + (size_t)head * VR_BUF_SIZE);
		ind->len = VR_BUF_SIZE;
		vring_avail_add(&d, head, (uintptr_t)page, sizeof(*ind), VRING_DESC_F_INDIRECT);
		vring_publish(&d);
		if (uffd_fault(uffd, STALL_MS))
			return 14;
	} else {
		/* The index is readable, the answer's num is on the page. */
		s.d = &d;
		s.arg = (struct vhost_vring_state *)(page - sizeof(s.arg->index));
		s.arg->index = d.index;
		if (pthread_create(&t, NULL, get_base_thread, &s))
			return 15;
		if (uffd_fault(uffd, STALL_MS))
			return 16;
		/* Bursts of kicks past the rate while the vq mutex is held. */
		for (i = 0; i < 8 * RATE_LOW; i++) {
			vring_kick(&d);
			if (i % (2 * RATE_LOW) == 2 * RATE_LOW - 1)
				vp_sleep_us(1000000 / vp_jiffy_hz());
		}
	}
	if (write(out, "s", 1) != 1 || read(in, &c, 1) != 1)
		return 17;
	copy.dst = (uintptr_t)page;
	copy.src = (uintptr_t)src;
	if (ioctl(uffd, UFFDIO_COPY, &copy))
		return 18;
	if (how == STUCK_IN_IOCTL) {
		pthread_join(t, NULL);
		if (s.ret || s.arg->num != d.avail_idx)
			return 19;
	}
	if (vring_drain(&d, STALL_MS) || !vring_all_used_once(&d))
		return 20;
	vring_close(&d);
	return 0;
}

/*
 * The neighbour: a device of another owner opened, polled, streamed and
 * closed while the stuck owner waits on its fault. Sends the longest
 * any step took (ms) on @out; exit status 0 if all went well.
 */
static int neighbour(int out)
{
	unsigned long long t0, ms, worst = 0;
	struct vring_drv d;
	int step, ret = 0;

	for (step = 0; step < 4 && !ret; step++) {
		t0 = vp_now_ms();
		switch (step) {
		case 0:
			ret = td_open(&d, 1 << 16) ? 1 : 0;
			break;
		case 1:
			ret = poll_for_long(&d) ? 2 : 0;
			break;
		case 2:
			ret = vring_stream(&d, 2000, 1, STALL_MS) ? 3 : 0;
			if (!ret && !vring_all_used_once(&d))
				ret = 3;
			break;
		default:
			vring_close(&d);
		}
		ms = vp_now_ms() - t0;
		if (ms > worst)
			worst = ms;
	}
	if (write(out, &worst, sizeof(worst)) != sizeof(worst))
		return 4;
	return ret;
}

/* Wait up to @ms for child @pid; its status, or -1 if it did not end. */
static int wait_child(pid_t pid, unsigned int ms)
{
	int status;

	for (; ms; ms--) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
		vp_sleep_ms(1);
	}
	return -1;
}

/*
 * One owner stuck on memory that does not fault in (userfaultfd, a FUSE
 * mapping, postcopy migration) holds up nobody else: its held vq leaves
 * poll mode and the shared thread goes to sleep; another owner's device
 * opens, gets polled, streams and closes as usual meanwhile; and the stuck
 * one completes once its fault is served.
 */
static void stuck_owner_holds_up_nobody(struct __test_metadata *_metadata,
					enum stuck_how how)
{
	int to_a[2], from_a[2], from_b[2], status;
	unsigned long long worst = 0;
	pid_t a, b;
	char c;

	ASSERT_EQ(0, pipe(to_a));
	ASSERT_EQ(0, pipe(from_a));
	ASSERT_EQ(0, pipe(from_b));
	a = fork();
	ASSERT_LE(0, a);
	if (!a)
		_exit(stuck_owner(how, to_a[0], from_a[1]));
	close(from_a[1]);
	if (read(from_a[0], &c, 1) != 1) {
		status = wait_child(a, STALL_MS);
		if (WIFEXITED(status) && WEXITSTATUS(status) <= 11)
			SKIP(return, "no userfaultfd here (CONFIG_USERFAULTFD)");
		ASSERT_TRUE(0) TH_LOG("the owner did not get stuck: status 0x%x", status);
	}
	/* Its held vq is no work: it leaves poll mode, the thread sleeps. */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", 2));
	EXPECT_TRUE(vp_worker_settles(STALL_MS))
		TH_LOG("the shared thread polls or waits on the stuck owner");
	b = fork();
	ASSERT_LE(0, b);
	if (!b)
		_exit(neighbour(from_b[1]));
	/* Hung for good before the fix: wait a while, then unstick it. */
	status = wait_child(b, 2 * STALL_MS);
	EXPECT_NE(-1, status) TH_LOG("the neighbour waited on the stuck owner");
	ASSERT_EQ(1, write(to_a[1], "u", 1));
	if (status == -1)
		status = wait_child(b, 2 * STALL_MS);
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
		TH_LOG("neighbour: status 0x%x", status);
	if (read(from_b[0], &worst, sizeof(worst)) == sizeof(worst))
		TH_LOG("the neighbour's longest step took %llu ms", worst);
	status = wait_child(a, 2 * STALL_MS);
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
		TH_LOG("stuck owner once served: status 0x%x", status);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/* The stuck owner is a vhost-test device: its neighbour is one too. */
TEST_F(teardown_vhost_test, stuck_handler_holds_up_nobody)
{
	stuck_owner_holds_up_nobody(_metadata, STUCK_IN_HANDLER);
}

TEST_F(teardown_vhost_test, stuck_ioctl_holds_up_nobody)
{
	stuck_owner_holds_up_nobody(_metadata, STUCK_IN_IOCTL);
}

/*
 * Unload with one open virtqueue, then with @many: the times (ms) in
 * @one_ms and @many_ms. The devices stay open meanwhile and are closed
 * by the caller.
 */
static void unload_run(struct __test_metadata *_metadata, struct vring_drv *d,
		       int many, unsigned long long *one_ms, unsigned long long *many_ms)
{
	unsigned long long t0;
	struct vp_vq_row sum;
	int i;

	ASSERT_EQ(0, td_open(&d[0], 1 << 10));
	t0 = vp_now_ms();
	ASSERT_EQ(0, vp_unload());
	*one_ms = vp_now_ms() - t0;
	ASSERT_EQ(0, vp_load("poll_start_rate=4 poll_stop_idle=2" VP_STEADY));
	for (i = 1; i < many; i++)
		ASSERT_EQ(0, td_open(&d[i], 1 << 10));
	ASSERT_EQ(many * td_vqs(), vp_vq_sum(getpid(), -1, &sum, NULL));
	t0 = vp_now_ms();
	ASSERT_EQ(0, vp_unload());
	*many_ms = vp_now_ms() - t0;
	TH_LOG("unload with 1 open virtqueue: %llu ms; with %d: %llu ms",
	       *one_ms, many, *many_ms);
}

/* Unloading the module takes every virtqueue from it: each open device
 * goes on in notification mode, every buffer used once.
 */
TEST_F(teardown, unload_leaves_open_devices_working)
{
	enum { MANY = 64 };
	static struct vring_drv d[MANY];
	unsigned long long one_ms, many_ms;
	int i;

	unload_run(_metadata, d, MANY, &one_ms, &many_ms);
	for (i = 0; i < MANY; i++) {
		ASSERT_EQ(0, vring_stream(&d[i], 50, 1, STALL_MS));
		EXPECT_TRUE(vring_all_used_once(&d[i]));
		EXPECT_LT(0, d[i].kicks);
		vring_close(&d[i]);
	}
}

/* A kick may still be running with a virtqueue's data when the module
 * goes, so each virtqueue waits out an RCU grace period before its data
 * goes, while vhost's control path waits: one for all, not one each.
 * Measured as the unload with 64 open virtqueues against the unload with
 * one, in one run: a wall-clock bound, in a test of its own.
 */
TEST_F(teardown, unload_waits_one_grace_period)
{
	enum { MANY = 64 };
	static struct vring_drv d[MANY];
	unsigned long long one_ms, many_ms;
	int i;

	unload_run(_metadata, d, MANY, &one_ms, &many_ms);
	/*
	 * 64 grace periods would take about 64 times the one; allow 8 times,
	 * and a millisecond a virtqueue for the rest of its detach.
	 */
	EXPECT_GE((8 * one_ms + MANY) * vp_slow(), many_ms);
	for (i = 0; i < MANY; i++)
		vring_close(&d[i]);
}

static unsigned long long now_us(void)
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
static unsigned long long grace_period_us(void)
{
	unsigned long long t0 = now_us();

	if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0))
		return ~0ULL;
	return now_us() - t0;
}

struct closer {
	struct vring_drv *d;
	pthread_barrier_t *go;
	pthread_t t;
};

static void *close_thread(void *arg)
{
	struct closer *c = arg;

	pthread_barrier_wait(c->go);
	vring_close(c->d);
	return NULL;
}

/* Microseconds a vhost-test device takes to open, set up and close;
 * ~0 if it failed.
 */
static unsigned long long open_close_us(void)
{
	unsigned long long t0 = now_us();
	struct vring_drv d;

	if (td_open(&d, 1 << 10))
		return ~0ULL;
	if (vring_stream(&d, 4, 1, STALL_MS) || !vring_all_used_once(&d)) {
		vring_close(&d);
		return ~0ULL;
	}
	vring_close(&d);
	return now_us() - t0;
}

/* What closes_run measured, in us. */
struct closes {
	unsigned long long one_us;	/* one close alone, the shortest of 5 */
	unsigned long long gp_us;	/* one grace period, the shortest of 5 */
	unsigned long long many_us;	/* 64 closes at once */
	unsigned long long worst_us;	/* the slowest open-use-close meanwhile */
	int probes, failed;		/* open-use-closes meanwhile; failed ones */
};

/*
 * Close 64 devices at once while other devices are opened, used and
 * closed, and time it against one close alone.
 */
static void closes_run(struct __test_metadata *_metadata, struct closes *r)
{
	enum { MANY = 64 };
	static struct vring_drv d[MANY];
	static struct closer c[MANY];
	unsigned long long t0, us;
	pthread_barrier_t go;
	int i;

	memset(r, 0, sizeof(*r));
	r->one_us = ~0ULL;
	r->gp_us = ~0ULL;
	for (i = 0; i < 5; i++) {
		ASSERT_EQ(0, td_open(&d[0], 1 << 10));
		t0 = now_us();
		vring_close(&d[0]);
		us = now_us() - t0;
		if (us < r->one_us)
			r->one_us = us;
		us = grace_period_us();
		if (us < r->gp_us)
			r->gp_us = us;
	}
	for (i = 0; i < MANY; i++)
		ASSERT_EQ(0, td_open(&d[i], 1 << 10));
	ASSERT_EQ(0, pthread_barrier_init(&go, NULL, MANY + 1));
	for (i = 0; i < MANY; i++) {
		c[i].d = &d[i];
		c[i].go = &go;
		ASSERT_EQ(0, pthread_create(&c[i].t, NULL, close_thread, &c[i]));
	}
	pthread_barrier_wait(&go);
	t0 = now_us();
	/* Devices come and go while the others close. */
	for (i = 0; i < MANY; i++) {
		if (pthread_tryjoin_np(c[i].t, NULL) == EBUSY) {
			us = open_close_us();
			if (us == ~0ULL)
				r->failed++;
			else if (us > r->worst_us)
				r->worst_us = us;
			r->probes++;
			i--;
		}
	}
	r->many_us = now_us() - t0;
	pthread_barrier_destroy(&go);
	TH_LOG("one close: %llu us; %d at once: %llu us; a grace period: %llu us",
	       r->one_us, MANY, r->many_us, r->gp_us);
	TH_LOG("%d opened, used and closed meanwhile (%d failed), the slowest in %llu us",
	       r->probes, r->failed, r->worst_us);
}

/* Devices closed at once all close, and others open, work and close
 * meanwhile.
 */
TEST_F(teardown, closes_and_opens_at_once)
{
	struct closes r;

	closes_run(_metadata, &r);
	EXPECT_EQ(0, r.failed);
}

/*
 * A closing device waits out an RCU grace period before its data goes
 * (a kick may still hold it), but not under the mutex every vhost open
 * and close takes: 64 devices closed at once take about one grace
 * period, not 64, and a device opened and closed meanwhile waits for
 * none of theirs. Measured against one close alone, in one run: a
 * wall-clock bound, in a test of its own. On vhost-test only: closing a
 * vhost-net device closes a tap, whose unregistration takes RTNL and a
 * grace period, so that closes queue there, not in vhost.
 */
TEST_F(teardown_vhost_test, closes_wait_out_no_grace_period_of_others)
{
	struct closes r;

	unsigned long long work_us;

	closes_run(_metadata, &r);
	if (r.gp_us == ~0ULL)
		SKIP(return, "membarrier(MEMBARRIER_CMD_GLOBAL) failed: no grace period to time");
	/*
	 * Where a grace period is short against a close (one CPU: none at
	 * all), the closes' own work, on the CPU whatever they wait for, is
	 * what 64 of them take: there is nothing to tell apart.
	 */
	if (r.gp_us < 1000)
		SKIP(return, "a grace period costs nothing here (%llu us; a close %llu us)",
		     r.gp_us, r.one_us);
	work_us = r.one_us > r.gp_us ? r.one_us - r.gp_us : 0;
	/*
	 * 64 grace periods in a row would take 64 times the one; the work
	 * of 64 closes takes 64 times one's at most.
	 */
	EXPECT_GT(16 * r.one_us * vp_slow() + 64 * work_us, r.many_us);
	EXPECT_GT(8 * r.one_us * vp_slow() + 64 * work_us, r.worst_us);
}

/* One IOTLB message about the whole arena, which this driver maps to
 * itself: I/O virtual address = user address. 0 or -errno.
 */
static int iotlb_msg(struct vring_drv *d, __u8 type)
{
	struct vhost_msg_v2 msg = {
		.type = VHOST_IOTLB_MSG_V2,
		.iotlb.iova = (uintptr_t)d->arena,
		.iotlb.size = d->arena_len,
		.iotlb.uaddr = (uintptr_t)d->arena,
		.iotlb.perm = VHOST_ACCESS_RW,
		.iotlb.type = type,
	};
	ssize_t n = write(d->fd, &msg, sizeof(msg));

	if (n < 0)
		return -errno;
	return n == sizeof(msg) ? 0 : -EIO;
}

/*
 * Read the device's IOTLB messages for @ms (once at least), answering
 * none. Returns how many were misses, the last one's address in *@iova,
 * or -errno.
 */
static int iotlb_misses(struct vring_drv *d, unsigned int ms, __u64 *iova)
{
	struct pollfd p = { .fd = d->fd, .events = POLLIN };
	unsigned long long end = vp_now_ms() + ms, now;
	struct vhost_msg_v2 msg;
	int misses = 0;
	ssize_t n;

	do {
		now = vp_now_ms();
		poll(&p, 1, now < end ? end - now : 0);
		for (;;) {
			/* The fd is non-blocking: EAGAIN when none is left. */
			n = read(d->fd, &msg, sizeof(msg));
			if (n < 0 && errno == EAGAIN)
				break;
			if (n != sizeof(msg))
				return n < 0 ? -errno : -EIO;
			if (msg.iotlb.type == VHOST_IOTLB_MISS) {
				misses++;
				*iova = msg.iotlb.iova;
			}
		}
	} while (vp_now_ms() < end);
	return misses;
}

/*
 * As vring_open_dev() for vhost-net, behind an IOTLB (a vIOMMU): the ring
 * and buffers are given as I/O virtual addresses, which the arena's one
 * entry, loaded before the backend starts, maps to themselves. The fd is
 * non-blocking, for reading the device's misses. 0, -EOPNOTSUPP if
 * vhost-net refuses the IOTLB, or -errno.
 */
static int vring_open_iotlb(struct vring_drv *d, unsigned int num, __u64 max_bufs)
{
	__u64 features = 1ULL << VIRTIO_RING_F_EVENT_IDX |
			 1ULL << VIRTIO_F_ACCESS_PLATFORM;
	__u64 backend = 1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2, have;
	unsigned int i;
	int ret;

	memset(d, 0, sizeof(*d));
	d->dev = VRING_NET;
	d->index = 1;
	d->tap = -1;
	d->num = num;
	d->event_idx = true;
	d->arena_len = 2 * vring_ring_len(num) + (size_t)num * VR_BUF_SIZE;
	d->arena = mmap(NULL, d->arena_len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (d->arena == MAP_FAILED)
		return -errno;
	d->bufs = (char *)d->arena + 2 * vring_ring_len(num);
	d->free = calloc(num, sizeof(*d->free));
	d->seq_of = calloc(num, sizeof(*d->seq_of));
	d->map_bits = max_bufs + 1;
	d->used_map = calloc((d->map_bits + 7) / 8, 1);
	if (!d->free || !d->seq_of || !d->used_map)
		return -ENOMEM;
	for (i = 0; i < num; i++)
		d->free[i] = num - 1 - i;
	d->nfree = num;

	d->fd = open("/dev/vhost-net", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (d->fd < 0)
		return -errno;
	d->tap = vring_tap(10, d->ifname);
	if (d->tap < 0)
		return d->tap;
	d->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->kick < 0 || d->call < 0)
		return -errno;
	if (ioctl(d->fd, VHOST_SET_OWNER, NULL))
		return -errno;
	/* Misses as struct vhost_msg_v2: vhost looks at each miss. */
	if (ioctl(d->fd, VHOST_GET_BACKEND_FEATURES, &have))
		return -errno;
	if (!(have & backend))
		return -EOPNOTSUPP;
	if (ioctl(d->fd, VHOST_SET_BACKEND_FEATURES, &backend))
		return -errno;
	/*
	 * ACCESS_PLATFORM creates the IOTLB, and forgets the ring addresses
	 * given so far: before the ring, and before any IOTLB message. Its
	 * only refusal (max_iotlb_entries) is an EFAULT.
	 */
	if (ioctl(d->fd, VHOST_GET_FEATURES, &have))
		return -errno;
	if ((features & have) != features ||
	    ioctl(d->fd, VHOST_SET_FEATURES, &features))
		return -EOPNOTSUPP;
	/* Translates nothing behind an IOTLB, but a backend needs one. */
	ret = vring_set_mem(d, d->arena, d->arena_len);
	if (ret)
		return ret;
	/* Starting the backend reads the used ring: through this entry. */
	ret = iotlb_msg(d, VHOST_IOTLB_UPDATE);
	if (ret)
		return ret;
	return vring_start(d);
}

/*
 * A polled ring behind an IOTLB whose entry goes: the poller reads the
 * avail index through the ring's cached translation only, and without
 * one hands the ring back; the hand-back's handler run, in the owner's
 * worker, asks the driver for the translation, once. A poller that asked
 * at each visit would flood the driver with misses while polling on.
 * Answered, the device takes buffers again.
 */
TEST_F(teardown_vhost_net, iotlb_miss_is_asked_once)
{
	const unsigned int window_ms = vp_jiffies_ms(50);
	unsigned long long exits;
	struct vp_vq_row sum;
	struct vring_drv d;
	int polled, misses, ret;
	__u64 iova = 0;

	ret = vring_open_iotlb(&d, RING, 1 << 16);
	if (ret == -EOPNOTSUPP) {
		vring_close(&d);
		SKIP(return, "vhost-net refuses VIRTIO_F_ACCESS_PLATFORM or IOTLB_MSG_V2");
	}
	ASSERT_EQ(0, ret);
	/* Polled, the ring's translations cached by the handler. */
	ASSERT_EQ(0, poll_for_long(&d));
	EXPECT_EQ(0, iotlb_misses(&d, 0, &iova));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	ASSERT_EQ(1, polled);
	exits = sum.exits;

	/* The entry goes, with no kick; no miss is answered for a while. */
	ASSERT_EQ(0, iotlb_msg(&d, VHOST_IOTLB_INVALIDATE));
	misses = iotlb_misses(&d, window_ms, &iova);
	ASSERT_LE(0, misses);
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	TH_LOG("unanswered: %d misses in %u ms (last: arena + %lld), %s, %llu exits",
	       misses, window_ms, misses ? (long long)(iova - (uintptr_t)d.arena) : -1LL,
	       polled ? "still polled" : "handed back", sum.exits - exits);
	/*
	 * The hand-back's one handler run asks for the used ring (the avail
	 * event) and the descriptors; asked at each visit, hundreds.
	 */
	EXPECT_GE(4, misses);
	EXPECT_LE(1, misses);
	EXPECT_EQ(0, polled);

	/* Answered: every buffer is used, once. The hand-back could not
	 * write the avail event, so the driver kicks whatever it says.
	 */
	ASSERT_EQ(0, iotlb_msg(&d, VHOST_IOTLB_UPDATE));
	vring_post_kicked(&d, 4 * RATE_LOW);
	ASSERT_EQ(0, vring_drain(&d, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * An IOTLB update that leaves the ring's translation as it was (a vIOMMU
 * guest maps and unmaps its buffers all the time) does not hand the ring
 * back. vhost drops every virtqueue's cached translations at every update,
 * and the poller reads the ring only through that cache; before, its next
 * look failed and the ring went back to notification mode at every map
 * change. Now it queues one handler run, which caches the translation
 * again, and the ring stays polled. That run is a retry, not a kick's
 * work: with no buffer posted, `queued` (what the gain rule counts as
 * kicks saved) must not move, where `retries` does.
 */
TEST_F(teardown_vhost_net, iotlb_update_keeps_the_ring_polled)
{
	unsigned long long exits, queued, retries;
	struct vp_vq_row sum;
	struct vring_drv d;
	int polled, ret, i;
	__u64 iova = 0;

	ret = vring_open_iotlb(&d, RING, 1 << 16);
	if (ret == -EOPNOTSUPP) {
		vring_close(&d);
		SKIP(return, "vhost-net refuses VIRTIO_F_ACCESS_PLATFORM or IOTLB_MSG_V2");
	}
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	ASSERT_EQ(1, polled);
	exits = sum.exits - sum.stalls;
	queued = sum.queued;
	retries = sum.retries;
	/* Ten updates of the same mapping, a jiffy or so apart. */
	for (i = 0; i < 10; i++) {
		ASSERT_EQ(0, iotlb_msg(&d, VHOST_IOTLB_UPDATE));
		vp_sleep_ms(vp_jiffies_ms(2));
	}
	EXPECT_EQ(0, iotlb_misses(&d, 0, &iova));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	TH_LOG("10 IOTLB updates of the ring's own mapping: %s, %llu exits, %llu stalls",
	       polled ? "still polled" : "handed back", sum.exits - sum.stalls - exits,
	       sum.stalls);
	TH_LOG("handler runs queued: %llu as work, %llu as retries",
	       sum.queued - queued, sum.retries - retries);
	/* No exit but the watchdog's (a loaded host), after which it cools. */
	EXPECT_TRUE(polled == 1 || sum.stalls);
	EXPECT_EQ(exits, sum.exits - sum.stalls);
	/* The updates were seen, as retries; none counted as a kick saved. */
	EXPECT_LE(1, sum.retries - retries);
	EXPECT_EQ(queued, sum.queued);
	ASSERT_EQ(0, vring_stream(&d, 1000, 1, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * The trace events vhost's hooks emit show each vq entering and leaving
 * poll mode, with the owner, the vq and the reason: here an entry, an
 * exit when idle, and an exit when vhost takes the vq back
 * (SET_VRING_CALL), for an admin's or a CI's `perf trace` or bpftrace.
 */
TEST_F(teardown, trace_events_show_entries_and_exits)
{
	struct vhost_vring_file f;
	struct vring_drv d;
	char owner[32], vq[16];
	int traced;

	traced = trace_poller_on();
	if (!traced)
		SKIP(return, "no vhost_poller trace events (CONFIG_TRACING, tracefs)");
	ASSERT_EQ(1, traced);

	ASSERT_EQ(0, td_open(&d, 1 << 16));
	snprintf(owner, sizeof(owner), "owner=%d ", getpid());
	snprintf(vq, sizeof(vq), "vq=%u", d.index);
	/* In, then out when idle. */
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", 2));
	ASSERT_TRUE(vp_wait_polled(getpid(), 0, STALL_MS));
	/* In again, then taken back by vhost. */
	ASSERT_EQ(0, poll_for_long(&d));
	f.index = d.index;
	f.fd = d.kick;
	ASSERT_EQ(0, ioctl(d.fd, VHOST_SET_VRING_KICK, &f));
	ASSERT_EQ(0, tracefs_write("events/vhost_poller/enable", "0"));

	EXPECT_LE(2, trace_lines("vhost_poller_start: ", owner)) {
		TH_LOG("entries of %s%s: %d", owner, vq,
		       trace_lines("vhost_poller_start: ", owner));
	}
	EXPECT_LE(1, trace_lines(owner, "reason=idle"));
	EXPECT_LE(1, trace_lines(owner, "reason=quiesce"));
	EXPECT_EQ(trace_lines("vhost_poller_start: ", vq), trace_lines("vhost_poller_stop: ", vq));
	TH_LOG("entries %d, exits: idle %d, quiesce %d",
	       trace_lines("vhost_poller_start: ", owner), trace_lines(owner, "reason=idle"),
	       trace_lines(owner, "reason=quiesce"));
	vring_close(&d);
}

/* As leaving_on_request_strands_nothing, on vhost-net's transmit queue:
 * 600 frames made available with one index store, a handler run sends
 * 256 (the device's packet weight), and a SET_VRING_CALL lands between
 * the poller's runs. Every frame must be sent with no further kick.
 */
TEST_F(teardown_vhost_net, net_tx_leaving_on_request_strands_nothing)
{
	enum { NUM = 1024, FRAMES = 600 };
	unsigned int tries, n = 0, hit = 0;
	struct vring_drv d;

	ASSERT_EQ(0, vring_open_dev(&d, VRING_NET, NUM, true, 1 << 16));
	for (tries = 0; tries < 30 && !hit; tries++) {
		unsigned int taken;
		__u64 used0;

		ASSERT_EQ(0, poll_for_long(&d));
		used0 = d.used;
		n = vring_post(&d, FRAMES);
		ASSERT_EQ(FRAMES, n);
		taken = poller_takes(&d, tries, used0);
		ASSERT_EQ(0, leave_poll_mode(&d, LEAVE_SET_VRING_KICK, NULL, 0));
		ASSERT_EQ(0, vring_drain(&d, STALL_MS)) {
			TH_LOG("SET_VRING_KICK after the poller sent %u of %u: %llu never sent",
			       taken, n, (unsigned long long)(d.posted - d.used));
		}
		if (taken && taken < n)
			hit = taken;
	}
	TH_LOG("SET_VRING_CALL came after the poller sent %u of %u", hit, n);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
	if (!hit)
		SKIP(return, "SET_VRING_CALL never came while the poller was mid-ring");
}

/* Polling is opt-in per vhost driver. vhost-vsock is never shown
 * to the poller, whether opened while it is loaded or before; the
 * variant's device (vhost-test or vhost-net) is.
 */
TEST_F(teardown, only_opted_in_drivers_attach)
{
	struct vp_vq_row sum;
	struct vring_drv d;
	int fd;

	if (access("/dev/vhost-vsock", F_OK))
		SKIP(return, "no /dev/vhost-vsock (CONFIG_VHOST_VSOCK)");
	fd = open("/dev/vhost-vsock", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ioctl(fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(0, vp_vq_sum(getpid(), -1, &sum, NULL));
	ASSERT_EQ(0, vp_unload());
	ASSERT_EQ(0, vp_load("poll_start_rate=4 poll_stop_idle=2" VP_STEADY));
	EXPECT_EQ(0, vp_vq_sum(getpid(), -1, &sum, NULL));
	ASSERT_EQ(0, td_open(&d, 1 << 10));
	EXPECT_EQ(td_vqs(), vp_vq_sum(getpid(), -1, &sum, NULL));
	vring_close(&d);
	close(fd);
}

/*
 * A class's row of /proc/lock_stat: "name: con-bounces contentions
 * waittime-min -max -total -avg acq-bounces acquisitions ...", the name
 * right-aligned, the times with two decimals; the name and the
 * acquisitions are read.
 */
#define LOCK_STAT_ROW \
	" %127[^: ]: %*u %*u %*u.%*u %*u.%*u %*u.%*u %*u.%*u %*u %llu"

/*
 * How many times lock class @name was taken (/proc/lock_stat, from
 * CONFIG_LOCK_STAT): the count, 0 if the class was never taken, or
 * -errno if the kernel keeps no lock statistics.
 */
static long long lock_acquisitions(const char *name)
{
	unsigned long long acq;
	char line[512], cls[128];
	long long n = 0;
	FILE *f;

	f = fopen("/proc/lock_stat", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, LOCK_STAT_ROW, cls, &acq) == 2 && !strcmp(cls, name)) {
			n = acq;
			break;
		}
	}
	fclose(f);
	return n;
}

/*
 * How many times @n closes of devices of @path took vhost_poller_mutex
 * (opened first, not counted), or -errno.
 */
static long long poller_mutex_taken_by_closes(const char *path, int n)
{
	long long before;
	int fds[16], i;

	if (n > (int)ARRAY_SIZE(fds))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		fds[i] = open(path, O_RDWR | O_CLOEXEC);
		if (fds[i] < 0) {
			before = -errno;
			while (i--)
				close(fds[i]);
			return before;
		}
	}
	before = lock_acquisitions("vhost_poller_mutex");
	for (i = 0; i < n; i++)
		close(fds[i]);
	return lock_acquisitions("vhost_poller_mutex") - before;
}

/*
 * A driver that did not opt in to polling does not take the poller's
 * mutex, not even at close: its devices were never listed, so a vsock
 * or scsi close never waits for a poller's (un)registration or another
 * device's attach. Counted with lock statistics: closes of vhost-vsock
 * devices add no acquisition of vhost_poller_mutex, while as many
 * closes of the variant's devices, which are listed, add one each at
 * least (the count counts that lock). A kernel without CONFIG_LOCK_STAT
 * (the x86_64 guest) skips.
 */
TEST_F(teardown, unpolled_drivers_do_not_take_the_poller_mutex)
{
	const char *mine = td_dev == VRING_NET ? "/dev/vhost-net" : "/dev/vhost-test";
	enum { CLOSES = 16 };
	long long vsock_acq, mine_acq;

	if (access("/dev/vhost-vsock", F_OK))
		SKIP(return, "no /dev/vhost-vsock (CONFIG_VHOST_VSOCK)");
	if (lock_acquisitions("vhost_poller_mutex") < 0)
		SKIP(return, "no /proc/lock_stat (CONFIG_LOCK_STAT): no lock counts");
	ASSERT_EQ(0, write_text("/proc/sys/kernel/lock_stat", "1\n"));

	vsock_acq = poller_mutex_taken_by_closes("/dev/vhost-vsock", CLOSES);
	ASSERT_LE(0, vsock_acq);
	mine_acq = poller_mutex_taken_by_closes(mine, CLOSES);
	ASSERT_LE(0, mine_acq);

	TH_LOG("%d closes took vhost_poller_mutex %lld times (vhost-vsock), %lld (%s)",
	       CLOSES, vsock_acq, mine_acq, mine);
	EXPECT_LE(CLOSES, mine_acq);
	EXPECT_EQ(0, vsock_acq);
}

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

/* Pin task @pid (0: the caller) to CPU @cpu; 0 or -errno. */
static int pin_to(int pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(pid, sizeof(set), &set) ? -errno : 0;
}

/* A SCHED_FIFO task that spins on one CPU, and the pipes that drive it. */
struct spinner {
	pid_t pid;
	/*
	 * go[1]: a byte starts the spin; out[0]: a byte once it spins, then
	 * how long it spun (ms).
	 */
	int go[2], out[2];
};

/*
 * The caller pinned to CPU @cpu as a SCHED_FIFO task (priority 50): a
 * real-time neighbour, which no task of a lower class preempts. 0, or
 * -errno.
 */
static int rt_on(int cpu)
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
static int spinner_start(struct spinner *s, int cpu, unsigned int ms)
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
		close(s->go[1]);
		close(s->out[0]);
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
static int spinner_go(struct spinner *s)
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
static unsigned long long spinner_end(struct spinner *s)
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

#define WQ_CPUMASK	"/sys/devices/virtual/workqueue/cpumask"
/*
 * The mask wq_unbound_on() replaced, kept until it is put back: a test
 * the harness kills for its timeout runs no teardown, and the next
 * neighbour test's setup puts the mask back then.
 */
#define WQ_CPUMASK_SAVED	"/tmp/vhost_poll_test.wq_cpumask"

/* The unbound workqueues' cpumask before wq_unbound_on(), or "". */
static char wq_mask_saved[4096];

/*
 * Keep the unbound workqueues' workers on CPU @cpu, as an administrator
 * keeps them off a dedicated core; wq_unbound_restore() puts the mask
 * back. 0 or -errno.
 */
static int wq_unbound_on(int cpu)
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

static void wq_unbound_restore(void)
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
 */
TEST_F(neighbour, starved_thread_hands_back_within_bound)
{
	const unsigned int spin_ms = 300;
	unsigned long long t0, t, ms, worst = 0, spun, bound;
	struct spinner spinner;
	struct vp_vq_row sum;
	struct vring_drv d;
	bool spinning = false;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the spinner on one, the owner on the other");
	ASSERT_EQ(0, thread_on_0_owners_on_1());
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(0, spinner_start(&spinner, 0, spin_ms));
	ASSERT_EQ(0, vring_stream(&d, 100, 1, STALL_MS));

	/* One buffer at a time, from 50 ms before the spin to 50 ms after. */
	t0 = vp_now_ms();
	while ((ms = vp_now_ms() - t0) < spin_ms + 100) {
		if (ms >= 50 && !spinning) {
			ASSERT_EQ(0, spinner_go(&spinner));
			spinning = true;
		}
		t = vp_now_ms();
		ASSERT_EQ(1, vring_post(&d, 1));
		ASSERT_EQ(0, vring_drain(&d, STALL_MS));
		if (vp_now_ms() - t > worst)
			worst = vp_now_ms() - t;
	}
	spun = spinner_end(&spinner);
	EXPECT_LE(spin_ms, spun);
	EXPECT_EQ(0, vp_vq_sum(getpid(), d.index, &sum, NULL) < 0);
	bound = watchdog_ms();
	ASSERT_LT(0, bound);
	TH_LOG("polling thread off its CPU for %llu ms: the longest buffer took %llu ms",
	       spun, worst);
	TH_LOG("(bound %llu ms), %llu exits, %llu by the watchdog", bound, sum.exits, sum.stalls);
	EXPECT_GE(bound, worst);
	EXPECT_LE(1, sum.stalls);
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
	int polled;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the spinner on one, the owner on the other");
	ASSERT_EQ(0, thread_on_0_owners_on_1());
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(0, spinner_start(&spinner, 0, spin_ms));
	t0 = vp_now_ms();
	ASSERT_EQ(0, spinner_go(&spinner));
	ASSERT_EQ(0, vp_param_set("poll_start_rate", 0));
	ASSERT_TRUE(vp_wait_polled(getpid(), 0, STALL_MS));
	ms = vp_now_ms() - t0;
	spun = spinner_end(&spinner);
	/* The thread runs again, and polls nothing: the rate is 0. */
	ASSERT_EQ(0, vring_stream(&d, 1000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	TH_LOG("poll_start_rate=0, the thread off its CPU for %llu ms:", spun);
	TH_LOG("notification mode after %llu ms (bound %llu ms)", ms, bound);
	EXPECT_LE(spin_ms, spun);
	EXPECT_GE(bound, ms);
	EXPECT_EQ(0, polled);
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
	int polled = 1;
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

	/* No limit: polled on, idle, whoever wants the CPU now and then. */
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	ASSERT_EQ(0, vp_worker(&w0));
	exits = sum.exits;
	vp_sleep_ms(window);
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	ASSERT_EQ(0, vp_worker(&w1));
	TH_LOG("no limit: polled %d after %llu ms, %llu exits; the thread yielded %llu times",
	       polled, window, sum.exits - exits, w1.asides - w0.asides);
	EXPECT_EQ(1, polled);
	EXPECT_EQ(exits, sum.exits);
	/* The task did wait for the thread's CPU, or the rule has no case. */
	EXPECT_LT(0, w1.asides - w0.asides);

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
 * burst stalls the ring, which cools down; and a lane stalled again and
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
 * (LanePolicy::after_pass, whose host test fails on the rule before);
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
	       nap.cpu_pct, w1.passes - w0.passes, w1.asides - w0.asides, nap.naps);
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

/* What a receive queue's driver saw of the frames it was given. */
static struct rx_seen {
	unsigned int hlen;
	__u64 next, frames, bad, other;
} rx_seen;

/* A used receive buffer: a header, then a frame sent by rx_send(). */
static void rx_used(struct vring_drv *d, const char *buf, __u32 len)
{
	__u64 seq;

	(void)d;
	/* The host's own frames (IPv6 neighbour discovery on an interface
	 * that came up) are not the test's.
	 */
	if (len < rx_seen.hlen + 14 ||
	    (unsigned char)buf[rx_seen.hlen + 12] != 0x88 ||
	    (unsigned char)buf[rx_seen.hlen + 13] != 0xb5) {
		rx_seen.other++;
		return;
	}
	if (len != rx_seen.hlen + VR_NET_FRAME) {
		rx_seen.bad++;
		return;
	}
	memcpy(&seq, buf + rx_seen.hlen + 14, sizeof(seq));
	/* Every frame once, in order. */
	if (seq != rx_seen.next)
		rx_seen.bad++;
	rx_seen.next = seq + 1;
	rx_seen.frames++;
}

/* A packet socket that sends frames out of tap @ifname; its fd or -errno. */
static int rx_sender(const char *ifname, struct sockaddr_ll *to)
{
	int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);

	if (s < 0)
		return -errno;
	memset(to, 0, sizeof(*to));
	to->sll_family = AF_PACKET;
	to->sll_ifindex = if_nametoindex(ifname);
	to->sll_halen = ETH_ALEN;
	memset(to->sll_addr, 0xff, ETH_ALEN);
	return to->sll_ifindex ? s : -ENODEV;
}

/* Sends frame @seq (a broadcast of an unused type) out of the tap. */
static int rx_send(int s, struct sockaddr_ll *to, __u64 seq)
{
	char frame[VR_NET_FRAME] = { 0 };

	memset(frame, 0xff, 6);
	memset(frame + 6, 0x02, 6);
	frame[12] = 0x88;
	frame[13] = 0xb5;
	memcpy(frame + 14, &seq, sizeof(seq));
	return sendto(s, frame, sizeof(frame), 0, (struct sockaddr *)to, sizeof(*to)) ==
		sizeof(frame) ? 0 : -errno;
}

/*
 * Where the work is: a handler run only when it can make progress, counted
 * in buffers it used, whether the vhost-poll thread or the vq's own worker
 * polls (vp_poll_in_worker()).
 */

/* The CPU time, in clock ticks, of this process's vhost workers (its
 * threads named vhost-PID), or -1.
 */
static long long own_workers_ticks(void)
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
 * Make one buffer available that no handler can take: its address is in
 * no region of the memory table. Its descriptor is never used, nor freed.
 */
static void post_refused(struct vring_drv *d)
{
	vring_avail_add(d, d->free[--d->nfree], 16, VR_BUF_SIZE, 0);
	vring_publish(d);
	vr_mb();
	vring_kick(d);
}

/*
 * A polled vq whose next descriptor its handler refuses (vq_err: an error
 * signalled, the buffer left in the ring) is not run again for it while
 * nothing changes: the error is signalled once or twice, not at every
 * look. With the work rule "the ring is not empty" it was signalled 4,430
 * times in 300 ms by the thread's looks, 227,825 by the worker's (UML).
 */
static void refused_is_not_rerun(struct __test_metadata *_metadata,
				 struct vring_drv *d, int in_worker)
{
	struct vhost_vring_file f = { .index = d->index };
	struct vp_vq_row sum;
	__u64 errs = 0;
	int polled;

	f.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_LE(0, f.fd);
	ASSERT_EQ(0, ioctl(d->fd, VHOST_SET_VRING_ERR, &f));
	ASSERT_EQ(0, vp_poll_in_worker(in_worker));
	ASSERT_EQ(0, poll_with_idle(d, vp_jiffy_hz() / 2));
	post_refused(d);
	vp_sleep_ms(300);
	ASSERT_EQ(1, vp_vq_sum(getpid(), d->index, &sum, &polled));
	if (read(f.fd, &errs, sizeof(errs)) != sizeof(errs))
		errs = 0;
	TH_LOG("polled by its %s: %llu errors signalled in 300 ms, %s now",
	       in_worker ? "worker" : "thread", (unsigned long long)errs,
	       polled ? "polled" : "notification mode");
	EXPECT_LE(1, errs);
	EXPECT_GE(4, errs);
	close(f.fd);
}

TEST_F(poll_vhost_test, refused_descriptor_is_not_rerun)
{
	refused_is_not_rerun(_metadata, &self->d, 0);
}

TEST_F(poll_vhost_test, refused_descriptor_is_not_rerun_by_its_worker)
{
	refused_is_not_rerun(_metadata, &self->d, 1);
}

/*
 * Polled vqs get their buffers from the worker, in its own thread: the
 * requests' buffers go through, the vhost-poll thread looks once a jiffy
 * at most, and every polled vq's kicks are the driver's choice only while
 * its worker sleeps.
 */
TEST_F(poll_vhost_test, worker_polls_its_own_vq)
{
	struct vp_worker w0, w1;
	unsigned long long ms;
	struct vp_vq_row sum;
	__u64 bufs0;
	int polled;

	ASSERT_EQ(0, vp_poll_in_worker(true));
	ASSERT_EQ(0, poll_with_idle(&self->d, vp_jiffy_hz() / 2));
	ASSERT_EQ(0, vp_worker(&w0));
	bufs0 = self->d.used;
	ms = vp_now_ms();
	ASSERT_EQ(0, vring_stream(&self->d, 20000, 1, STALL_MS));
	ms = vp_now_ms() - ms;
	ASSERT_EQ(0, vp_worker(&w1));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	TH_LOG("%llu buffers in %llu ms, %llu kicks; vhost-poll: %llu passes",
	       (unsigned long long)(self->d.used - bufs0), ms,
	       (unsigned long long)self->d.kicks, w1.passes - w0.passes);
	EXPECT_LE(1, sum.enters);
	/* Counting passes only: one a jiffy, and a few for the starts. */
	EXPECT_GE(vp_jiffies_ms(1) ? ms / vp_jiffies_ms(1) + 1 + 2 * (sum.enters + 2) : 0,
		  w1.passes - w0.passes);
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/*
 * The rows of this process's two devices, the first opened (the lower
 * number) in @first; how many of each's vqs are polled in @pf and @ps.
 */
static int two_devices(struct vp_vq_row *first, int *pf,
		       struct vp_vq_row *second, int *ps)
{
	struct vp_vq_row rows[64];
	unsigned int lo = ~0U, hi = 0;
	int n, i;

	n = vp_vq_rows(rows, 64);
	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		if (rows[i].pid != getpid())
			continue;
		lo = rows[i].dev < lo ? rows[i].dev : lo;
		hi = rows[i].dev > hi ? rows[i].dev : hi;
	}
	if (lo >= hi)
		return -ENOENT;
	memset(first, 0, sizeof(*first));
	memset(second, 0, sizeof(*second));
	*pf = 0;
	*ps = 0;
	for (i = 0; i < n; i++) {
		struct vp_vq_row *r = rows[i].dev == lo ? first : second;
		int *polled = rows[i].dev == lo ? pf : ps;

		if (rows[i].pid != getpid() || (rows[i].dev != lo && rows[i].dev != hi))
			continue;
		r->enters += rows[i].enters;
		r->exits += rows[i].exits;
		r->refused += rows[i].refused;
		r->queued += rows[i].queued;
		*polled += rows[i].poll;
	}
	return 0;
}

/*
 * The budget of polling workers (poll_max_workers=1): a second device
 * whose kicks reach the rate does not poll beside the first; it takes the
 * place of the first once that one has polled for the tenure (16
 * jiffies) saving nothing (idle, kept polled by a long idle window). The
 * first's kicks at the rate then do not get it back within the second's
 * tenure.
 * Never are both polled. (Which device saves more, and the margin, are
 * the policy's host tests: on one CPU a polling worker saves few kicks.)
 */
TEST_F(poll_vhost_test, budget_goes_to_the_device_that_saves_kicks)
{
	struct vp_vq_row a, b;
	unsigned long long t0;
	int pa, pb, both = 0, lost = 0;
	struct vring_drv d2;
	__u64 kicks;

	ASSERT_EQ(0, vp_poll_in_worker(true));
	ASSERT_EQ(0, vp_param_set("poll_max_workers", 1));
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	ASSERT_EQ(0, poll_for_long(&self->d));
	ASSERT_EQ(0, vring_open(&d2, RING, variant->event_idx, 1 << 20));
	t0 = vp_now_ms();
	do {
		vring_post_kicked(&d2, 4 * RATE_LOW);
		ASSERT_EQ(0, vring_drain(&d2, STALL_MS));
		ASSERT_EQ(0, two_devices(&a, &pa, &b, &pb));
		both += pa && pb;
		vp_sleep_ms(1);
	} while (!pb && vp_now_ms() - t0 < STALL_MS);
	TH_LOG("second polled after %llu ms: first %d polled, %llu exits; second %llu refused",
	       vp_now_ms() - t0, pa, a.exits, b.refused);
	EXPECT_EQ(0, both);
	ASSERT_LE(1, pb);
	EXPECT_EQ(0, pa);
	EXPECT_LE(1, a.exits);
	/*
	 * Within the second's tenure the first's kicks, at the rate, do not
	 * get it polled (held since its hand-back, then refused): the place
	 * is not handed back and forth at every kick.
	 */
	kicks = self->d.kicks;
	t0 = vp_now_ms();
	do {
		vring_post(&d2, 1);
		ASSERT_EQ(0, vring_drain(&d2, STALL_MS));
		vring_post_kicked(&self->d, 4 * RATE_LOW);
		ASSERT_EQ(0, vring_drain(&self->d, STALL_MS));
		ASSERT_EQ(0, two_devices(&a, &pa, &b, &pb));
		both += pa && pb;
		lost += !pb;
		/* A round takes no simulated time without a sleep (uml-tt). */
		vp_sleep_ms(1);
	} while (vp_now_ms() - t0 < vp_jiffies_ms(8));
	TH_LOG("then the first: %llu kicks, %d polled; the second left %d rounds",
	       (unsigned long long)(self->d.kicks - kicks), pa, lost);
	EXPECT_EQ(0, both);
	EXPECT_EQ(0, pa);
	EXPECT_EQ(0, lost);
	EXPECT_LE(4 * RATE_LOW, self->d.kicks - kicks);
	EXPECT_TRUE(vring_all_used_once(&self->d));
	EXPECT_TRUE(vring_all_used_once(&d2));
	vring_close(&d2);
}

/*
 * The owner of a device whose worker spins on its polled, idle ring is
 * killed: the worker sees the signal and the owner is gone within a few
 * jiffies, not when the vq's idle window (a second here) ends.
 */
TEST_F(poll_vhost_test, sigkill_ends_a_spinning_worker)
{
	unsigned long long t0, ms;
	int p[2], status;
	pid_t pid;
	char c;

	ASSERT_EQ(0, vp_poll_in_worker(true));
	ASSERT_EQ(0, pipe(p));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct vring_drv d;

		close(p[0]);
		if (vring_open(&d, RING, variant->event_idx, 1 << 20) ||
		    poll_with_idle(&d, vp_jiffy_hz()))
			_exit(1);
		c = 'p';
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	ASSERT_EQ(1, read(p[0], &c, 1));
	close(p[0]);
	/* The worker spins on the idle ring now. */
	vp_sleep_ms(50);
	t0 = vp_now_ms();
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ms = vp_now_ms() - t0;
	TH_LOG("owner gone %llu ms after SIGKILL (idle window %u ms)", ms,
	       vp_jiffies_ms(vp_jiffy_hz()));
	EXPECT_TRUE(WIFSIGNALED(status));
	EXPECT_GE((vp_jiffies_ms(4) > 50 ? vp_jiffies_ms(4) : 50) * vp_slow(), ms);
}

/* The receive queue of a vhost-net device, as a guest keeps it: full. */
FIXTURE(rx) {
	struct vring_drv d;
	int s;
	struct sockaddr_ll to;
};

FIXTURE_VARIANT(rx) {
	enum vring_dev dev;
};

FIXTURE_VARIANT_ADD(rx, plain) {
	.dev = VRING_NET_RX,
};

FIXTURE_VARIANT_ADD(rx, mergeable) {
	.dev = VRING_NET_RX_MRG,
};

FIXTURE_SETUP(rx)
{
	self->s = -1;
	teardown_open(_metadata, VRING_NET);
	ASSERT_EQ(0, vring_open_dev(&self->d, variant->dev, RING, true, 1 << 20));
	memset(&rx_seen, 0, sizeof(rx_seen));
	rx_seen.hlen = variant->dev == VRING_NET_RX_MRG ? 12 : 10;
	rx_seen.next = 1;
	self->d.on_used = rx_used;
	self->s = rx_sender(self->d.ifname, &self->to);
	ASSERT_LE(0, self->s);
}

FIXTURE_TEARDOWN(rx)
{
	if (self->s >= 0)
		close(self->s);
	vring_close(&self->d);
	teardown_close(_metadata);
}

/*
 * Get a full receive ring polled, with an idle window of @idle jiffies:
 * the driver posts every buffer, then kicks in bursts that reach the rate
 * (a driver may always notify). 0, or -ETIMEDOUT.
 */
static int rx_poll(struct vring_drv *d, unsigned long idle)
{
	unsigned long long t0 = vp_now_ms();
	int polled, i;

	if (vp_param_set("poll_stop_idle", idle))
		return -EINVAL;
	vring_post(d, d->num);
	do {
		for (i = 0; i < 4 * RATE_LOW; i++)
			vring_kick(d);
		vp_sleep_ms(2);
		if (vp_vq_sum(getpid(), 0, &(struct vp_vq_row){ 0 }, &polled) > 0 && polled)
			return 0;
	} while (vp_now_ms() - t0 < STALL_MS);
	return -ETIMEDOUT;
}

/* Sends a frame of @len bytes (a broadcast of an unused type) out of the tap. */
static int rx_send_len(int s, struct sockaddr_ll *to, size_t len)
{
	char frame[1514] = { 0 };

	if (len > sizeof(frame))
		return -EINVAL;
	memset(frame, 0xff, 6);
	memset(frame + 6, 0x02, 6);
	frame[12] = 0x88;
	frame[13] = 0xb5;
	return sendto(s, frame, len, 0, (struct sockaddr *)to, sizeof(*to)) ==
		(ssize_t)len ? 0 : -errno;
}

/*
 * A polled mergeable receive ring with 2 of the 8 buffers a 1,000-byte
 * frame needs: vhost_enable_notify() says whether the avail index moved,
 * so the handler stops until the driver adds buffers, instead of being run
 * again and again: with "the ring is not empty" its worker used 94-100% of
 * a CPU (UML). With the rest posted, the frame comes through.
 */
static void rx_short_of_buffers(struct __test_metadata *_metadata, struct vring_drv *d,
				int s, struct sockaddr_ll *to, int in_worker)
{
	struct vp_vq_row sum0, sum1;
	long long t0, t1, pct;
	unsigned long long ms, start;
	int polled, i;

	d->on_used = NULL;
	ASSERT_EQ(0, vp_poll_in_worker(in_worker));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", vp_jiffy_hz() / 2));
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	ASSERT_EQ(2, vring_post(d, 2));
	start = vp_now_ms();
	do {
		for (i = 0; i < 4 * RATE_LOW; i++)
			vring_kick(d);
		vp_sleep_ms(2);
		ASSERT_LT(0, vp_vq_sum(getpid(), 0, &(struct vp_vq_row){ 0 }, &polled));
	} while (!polled && vp_now_ms() - start < STALL_MS);
	ASSERT_TRUE(polled);
	ASSERT_EQ(0, rx_send_len(s, to, 1000));
	vp_sleep_ms(50);
	ASSERT_LT(0, vp_vq_sum(getpid(), 0, &sum0, &polled));
	t0 = own_workers_ticks();
	ms = vp_now_ms();
	vp_sleep_ms(400);
	t1 = own_workers_ticks();
	ms = vp_now_ms() - ms;
	ASSERT_LT(0, vp_vq_sum(getpid(), 0, &sum1, &polled));
	ASSERT_LE(0, t0);
	pct = (t1 - t0) * 100000 / sysconf(_SC_CLK_TCK) / (long long)(ms ? ms : 1);
	TH_LOG("polled by its %s: the worker used %lld%% of a CPU over %llu ms, %llu used;",
	       in_worker ? "worker" : "thread", pct, ms, (unsigned long long)d->used);
	TH_LOG("visits that counted work meanwhile: %llu; handler runs the polling queued: %llu",
	       sum1.poll_work - sum0.poll_work, sum1.queued - sum0.queued);
	EXPECT_EQ(0, d->used);
	/* The handler is not run again for the buffers it cannot take. */
	EXPECT_GE(2, sum1.queued - sum0.queued);
	/*
	 * Where the thread polls, the worker runs only for its handler. A
	 * worker that polls also spins on its ring, as long as its CPU is its
	 * own: that CPU is its polling's, and the runs it queues are counted
	 * above.
	 */
	if (!in_worker)
		EXPECT_GE(25, pct);
	/*
	 * Nothing used, nothing counted: the buffers a handler took and gave
	 * back (vhost_discard_vq_desc()) are no work, whenever the poller
	 * looks.
	 */
	EXPECT_EQ(sum0.poll_work, sum1.poll_work);
	/* The rest of what the frame needs: it comes through. */
	ASSERT_EQ(6, vring_post(d, 6));
	start = vp_now_ms();
	while (!vring_reap(d) && vp_now_ms() - start < STALL_MS)
		vp_sleep_ms(1);
	EXPECT_LT(0, d->used);
}

TEST_F(rx, short_of_buffers_is_not_rerun)
{
	if (variant->dev != VRING_NET_RX_MRG)
		SKIP(return, "mergeable buffers only");
	rx_short_of_buffers(_metadata, &self->d, self->s, &self->to, 0);
}

TEST_F(rx, short_of_buffers_is_not_rerun_by_its_worker)
{
	if (variant->dev != VRING_NET_RX_MRG)
		SKIP(return, "mergeable buffers only");
	rx_short_of_buffers(_metadata, &self->d, self->s, &self->to, 1);
}

/*
 * Send @frames frames to the tap, @gap_us apart, the ring refilled as
 * they are used; *@sent counts them. 0, or the -errno of a send.
 */
static int rx_send_frames(struct vring_drv *d, int s, struct sockaddr_ll *to,
			  unsigned int frames, unsigned int gap_us, unsigned int *sent)
{
	unsigned int i;
	int ret;

	for (i = 1; i <= frames; i++) {
		unsigned long long t0 = vp_now_us();

		ret = rx_send(s, to, ++*sent);
		if (ret)
			return ret;
		/* Asleep between frames: on one CPU a spin would hold the
		 * device's worker, and simulated time moves only when idle.
		 */
		do {
			vp_sleep_us(gap_us / 5);
			if (vring_reap(d))
				vring_post(d, d->num);
		} while (vp_now_us() - t0 < gap_us);
	}
	return 0;
}

/* Wait up to a second for the @sent frames, the ring refilled as they are used. */
static void rx_wait(struct vring_drv *d, unsigned int sent)
{
	unsigned int i;

	for (i = 0; i < 100 && rx_seen.frames < sent; i++) {
		vp_sleep_ms(10);
		if (vring_reap(d))
			vring_post(d, d->num);
	}
}

/* rx_send_frames(), then rx_wait(). */
static int rx_stream(struct vring_drv *d, int s, struct sockaddr_ll *to,
		     unsigned int frames, unsigned int gap_us, unsigned int *sent)
{
	int ret = rx_send_frames(d, s, to, frames, gap_us, sent);

	if (!ret)
		rx_wait(d, *sent);
	return ret;
}

/* The run time of this process's one vhost worker (vhost-PID), in ns; -1 if not one. */
static __s64 own_worker_ns(void)
{
	char comm[32];
	int tid = 0;

	snprintf(comm, sizeof(comm), "vhost-%d", getpid());
	if (vp_scan_comm("/proc/self/task", comm, &tid) != 1)
		return -1;
	return vp_task_runtime_ns(tid);
}

/*
 * Work is what the backend can take. A polled receive ring that its
 * guest keeps full of buffers always "has buffers", but its handler
 * stops when the socket is empty and waits for the socket's wake-up,
 * which queues it when a frame comes. The poller must not queue it
 * meanwhile: not with no frame at all, and not for the frames, which
 * the socket's wake-up brings; they are still its work (buffers taken).
 * Before, the poller queued the handler at every pass that found the
 * ring non-empty and no handler queued: hundreds of runs a second with
 * no frame, one to three per frame with frames. Every frame arrives
 * once, in order. And its worker runs no longer for the frames than
 * for as many in notification mode (before: 2.4 times as long).
 */
TEST_F(rx, full_ring_queues_no_handler_for_nothing)
{
	const unsigned int frames = 400, gap_us = 2500;
	__s64 ns0, notify_ns, poll_ns = 0;
	struct vp_vq_row a, b, c;
	unsigned int try, sent = 0;
	int polled;

	/* The same frames in notification mode first: the worker's CPU unpolled. */
	vring_post(&self->d, self->d.num);
	ASSERT_EQ(1, vp_vq_sum(getpid(), 0, &a, &polled));
	ASSERT_EQ(0, polled);
	ns0 = own_worker_ns();
	ASSERT_LE(0, ns0);
	ASSERT_EQ(0, rx_stream(&self->d, self->s, &self->to, frames, gap_us, &sent));
	notify_ns = own_worker_ns();
	ASSERT_LE(0, notify_ns);
	notify_ns -= ns0;
	/* Unpolled throughout: the frames do not kick. */
	ASSERT_EQ(1, vp_vq_sum(getpid(), 0, &c, &polled));
	ASSERT_EQ(0, polled);
	ASSERT_EQ(a.enters, c.enters);
	for (try = 1; try <= 3; try++) {
		/* Idle for 10 s before it leaves: the test's phases fit in that. */
		ASSERT_EQ(0, rx_poll(&self->d, 10 * vp_jiffy_hz()));
		/* A second with no frame. */
		ASSERT_EQ(1, vp_vq_sum(getpid(), 0, &a, NULL));
		vp_sleep_ms(1000);
		ASSERT_EQ(1, vp_vq_sum(getpid(), 0, &b, NULL));
		/* 400 frames in a second, the ring refilled as they are used. */
		ns0 = own_worker_ns();
		ASSERT_EQ(0, rx_stream(&self->d, self->s, &self->to, frames, gap_us, &sent));
		poll_ns = own_worker_ns();
		ASSERT_LE(0, ns0);
		ASSERT_LE(0, poll_ns);
		poll_ns -= ns0;
		ASSERT_EQ(1, vp_vq_sum(getpid(), 0, &c, NULL));
		TH_LOG("no frame for 1 s: the poller queued the handler %llu times, %llu empty",
		       b.queued - a.queued, b.empty_polls - a.empty_polls);
		TH_LOG("%u frames in 1 s: %llu arrived in all, %llu wrong, %llu of the host's own;",
		       frames, rx_seen.frames, rx_seen.bad, rx_seen.other);
		TH_LOG("queued by the poller %llu times, %llu visits after work, %llu entries",
		       c.queued - b.queued, c.poll_work - b.poll_work, c.enters - b.enters);
		TH_LOG("the worker ran %lld us for them, %lld us for as many unpolled",
		       (long long)poll_ns / 1000, (long long)notify_ns / 1000);
		/*
		 * A pause of the guest longer than vhost's watchdog bound
		 * (seen under TCG) hands the ring back, and a receive ring
		 * kept full is not kicked into poll mode again: the phases
		 * were then not the poller's. Again, from a polled ring.
		 */
		if (c.stalls == a.stalls)
			break;
		TH_LOG("try %u: the watchdog handed the ring back %llu times: again",
		       try, c.stalls - a.stalls);
	}
	EXPECT_EQ(sent, rx_seen.frames);
	EXPECT_EQ(0, rx_seen.bad);
	/* Each buffer used once at most; those still posted wait for frames. */
	EXPECT_EQ(0, self->d.bad_id + self->d.dup);
	EXPECT_EQ(rx_seen.frames + rx_seen.other, self->d.used);
	/* About never: a handful, for a ring that ran dry. */
	EXPECT_GE(5, b.queued - a.queued);
	EXPECT_GE(frames / 10, c.queued - b.queued);
	/* The frames it takes are its work, and it does not churn. */
	EXPECT_LT(0, c.poll_work - b.poll_work);
	EXPECT_GE(5, c.enters - b.enters);
	EXPECT_EQ(a.stalls, c.stalls);
	/*
	 * Its worker does no more than in notification mode: the socket's
	 * wake-ups run it either way. (Half as much again, and eight
	 * jiffies, for the noise: UML counts run time in whole ticks, and a
	 * worker busy a few per cent of a second is caught by 0 to 5 of
	 * them: 0 ms unpolled against 50 ms polled, HZ=100, in one run; the
	 * bug this guards against cost hundreds of ms.) Under
	 * time-travel=inf-cpu tasks run in no simulated time, and no run
	 * time is counted: there the bound is not checked, and says so.
	 */
	if (!notify_ns && !poll_ns)
		TH_LOG("no run time counted (simulated time): the worker's bound is not checked");
	else
		EXPECT_GE(notify_ns * 3 / 2 + (__s64)vp_jiffies_ms(8) * 1000000, poll_ns);
}

/*
 * At a short idle window, a polled receive ring stays polled while frames
 * come: the frames its socket's wake-ups bring are its work, so a steady
 * stream does not end poll mode as idle. The window is four jiffies,
 * twice the module's default: UML's sleeps end on a jiffy, so frames
 * meant 2.5 ms apart come a jiffy or two apart there (at two jiffies,
 * five first tries of six lost the ring as idle, on UML, and no second
 * try did). (The test
 * above holds the window at 10 s for its phases, so it cannot see this.
 * A ring kept full is not kicked, so it would not come back: an exit ends
 * polling for the rest of the stream, where a driver that kicks its
 * refills would churn in and out.) Issue 19's report had the ring leave
 * poll mode within the second of frames. A pause of the guest longer than
 * the window (TCG) ends poll mode as idle, rightly: each of three tries
 * starts polled again, and the test fails only if every one lost the
 * ring, as a ring whose frames were not its work would.
 */
TEST_F(rx, steady_frames_keep_the_ring_polled)
{
	const unsigned int frames = 400, gap_us = 2500;
	struct vp_vq_row a, b;
	unsigned int try, sent = 0;
	int polled = 0, traced = 0;

	/*
	 * The hand-backs for want of gain or for contention stay off
	 * (poll_min_gain 0), as their own tests check them: on UML's one CPU
	 * the sender and the worker wait for the polling thread's CPU, and
	 * contention rightly hands the ring back.
	 */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle_max", 16));
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	for (try = 1; try <= 3; try++) {
		/* Exits are traced (where the kernel can), for the log. */
		traced = trace_poller_on() > 0;
		ASSERT_EQ(0, rx_poll(&self->d, 4));
		ASSERT_EQ(1, vp_vq_sum(getpid(), 0, &a, NULL));
		ASSERT_EQ(0, rx_send_frames(&self->d, self->s, &self->to, frames, gap_us, &sent));
		/* Read before the frames stop for long enough to end it. */
		ASSERT_EQ(1, vp_vq_sum(getpid(), 0, &b, &polled));
		rx_wait(&self->d, sent);
		TH_LOG("try %u: %u frames in 1 s: %s, window %llu jiffies, %llu exits, %llu stalls",
		       try, frames, polled ? "polled throughout" : "handed back", b.window,
		       b.exits - a.exits, b.stalls - a.stalls);
		TH_LOG("%llu entries, %llu visits after work, %llu handler runs queued",
		       b.enters - a.enters, b.poll_work - a.poll_work, b.queued - a.queued);
		if (polled && b.exits == a.exits)
			break;
		trace_print(_metadata, "vhost_poller_stop");
	}
	if (traced)
		tracefs_write("events/vhost_poller/enable", "0");
	EXPECT_EQ(sent, rx_seen.frames);
	EXPECT_EQ(0, rx_seen.bad);
	EXPECT_EQ(0, self->d.bad_id + self->d.dup);
	EXPECT_EQ(1, polled);
	EXPECT_EQ(a.exits, b.exits);
	EXPECT_EQ(a.enters, b.enters);
	/* The frames are its work. */
	EXPECT_LT(0, b.poll_work - a.poll_work);
}

/* The dummy device a back-pressured tap's frames are held on. */
#define TX_HELD_DEV	"vp_held0"

/* Run the shell command @fmt, its output thrown away; 0 if it exited 0. */
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int n, ret;

	va_start(ap, fmt);
	n = vsnprintf(cmd, sizeof(cmd) - 16, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(cmd) - 16)
		return -E2BIG;
	strcat(cmd, " >/dev/null 2>&1");
	ret = system(cmd);
	return WIFEXITED(ret) && !WEXITSTATUS(ret) ? 0 : -EIO;
}

/*
 * Make tap @ifname's transmit side slow: every frame it gets from vhost
 * is redirected to a dummy device whose token bucket lets out 1 kbit a
 * second and queues the rest. The frames stay charged to the tap's
 * socket while they wait, so with a small send buffer the tap refuses
 * more (vhost-net's sendmsg gets -EAGAIN) until one leaves. 0, or
 * -EOPNOTSUPP when tc, the dummy device or the qdiscs are missing.
 */
static int tx_hold(const char *ifname)
{
	if (sh("ip link add " TX_HELD_DEV " type dummy") ||
	    sh("ip link set " TX_HELD_DEV " up") ||
	    sh("tc qdisc add dev " TX_HELD_DEV " root tbf rate 1kbit burst 1600 limit 1mb") ||
	    sh("tc qdisc add dev %s clsact", ifname) ||
	    sh("tc filter add dev %s ingress matchall action mirred egress redirect dev "
	       TX_HELD_DEV, ifname))
		return -EOPNOTSUPP;
	return 0;
}

/* Undo tx_hold(): the held frames are freed, and the tap's socket writable. */
static void tx_release(const char *ifname)
{
	sh("tc qdisc del dev %s clsact", ifname);
	sh("ip link del " TX_HELD_DEV);
}

/* vhost-net's transmit queue, and whether its tap's frames are held. */
FIXTURE(tx) {
	struct vring_drv d;
	bool held;
};

FIXTURE_SETUP(tx)
{
	self->held = false;
	teardown_open(_metadata, VRING_NET);
	if (sh("tc -V") || sh("ip -V"))
		SKIP(return, "no tc or ip (iproute2)");
	ASSERT_EQ(0, vring_open_dev(&self->d, VRING_NET, RING, true, 1 << 20));
}

FIXTURE_TEARDOWN(tx)
{
	if (self->held)
		tx_release(self->d.ifname);
	vring_close(&self->d);
	teardown_close(_metadata);
}

/*
 * Work is what the backend can take, on transmit too. A polled transmit
 * queue whose tap refuses frames (-EAGAIN: its send buffer full of frames
 * a slow qdisc holds) has buffers in its ring that its handler put back:
 * it waits for the socket to be writable, whose wake-up queues it. The
 * poller must not queue it meanwhile; before, it did at every pass that
 * found the ring non-empty, and each run got -EAGAIN again. Once the
 * frames are let go, every buffer is used once.
 */
TEST_F(tx, back_pressure_queues_no_handler_for_nothing)
{
	struct vp_vq_row a, b;
	int sndbuf = 16384, ret;
	unsigned int used_held;

	ASSERT_EQ(0, poll_for_long(&self->d));
	ret = tx_hold(self->d.ifname);
	self->held = true;
	if (ret)
		SKIP(return, "cannot hold a tap's frames (%s)",
		     "CONFIG_DUMMY, NET_SCH_TBF, NET_SCH_INGRESS, NET_CLS_MATCHALL, NET_ACT_MIRRED?");
	ASSERT_EQ(0, ioctl(self->d.tap, TUNSETSNDBUF, &sndbuf));
	/* A full ring, no kick: it is polled. */
	ASSERT_EQ(self->d.num, vring_post(&self->d, self->d.num));
	vp_sleep_ms(200);
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &a, NULL));
	vp_sleep_ms(1000);
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &b, NULL));
	vring_reap(&self->d);
	used_held = self->d.used;
	tx_release(self->d.ifname);
	self->held = false;
	EXPECT_EQ(0, vring_drain(&self->d, STALL_MS));
	TH_LOG("%u of %u buffers used while the tap held its frames;", used_held,
	       self->d.num);
	TH_LOG("in 1 s, the handler queued by the poller %llu times,", b.queued - a.queued);
	TH_LOG("%llu visits after work, %llu entries", b.poll_work - a.poll_work,
	       b.enters - a.enters);
	/* The tap did hold the frames: else this tests nothing. */
	ASSERT_GT(self->d.num, used_held);
	EXPECT_GE(5, b.queued - a.queued);
	EXPECT_GE(1, b.enters - a.enters);
	EXPECT_TRUE(vring_all_used_once(&self->d));
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
 * reader.
 */
TEST_F_TIMEOUT(neighbour, counters_reader_holds_up_no_pass, 120)
{
	static int fds[READER_IDLE];
	struct rlimit rl = { READER_IDLE + 64, READER_IDLE + 64 };
	unsigned long long alone, read_on, reads;
	struct vring_drv d;
	struct vp_worker w;
	pid_t reader;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: the reader on one, the polling thread on the other");
	memset(fds, 0xff, sizeof(fds));
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	ASSERT_EQ(0, vp_worker(&w));
	ASSERT_EQ(0, thread_on_1(w.pid));
	ASSERT_EQ(0, pin_to(0, 0));
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(0, open_idle(fds, READER_IDLE));
	alone = passes_per_s(500);
	reader = vqs_reader_start();
	ASSERT_LT(0, reader);
	vp_sleep_ms(20);
	reads = __atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED);
	read_on = passes_per_s(500);
	reads = __atomic_load_n(&vqs_reading->reads, __ATOMIC_RELAXED) - reads;
	vqs_reader_stop(reader);
	TH_LOG("polling thread passes a second with %d idle devices open: %llu alone,",
	       READER_IDLE, alone);
	TH_LOG("%llu while a task read the vqs file (%llu reads in 500 ms)", read_on, reads);
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
 * table's lock that the lanes take between passes: N opens cost O(N^2),
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
 * look at about one entry a request (served, in the worker file). Before,
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
 * each burst asks for a start, which wakes the first lane wherever its
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

/* Read @c from the worker file: 0 or -errno. */
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
 * not overlap, so its empty visits, with its first lane woken again and
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
	TH_LOG("%d idle vqs of as many owners, the lane woken again and again:", COST_VQS);
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

/* Ratios the lanes test measures, at most twice as many tries, and the
 * median they must reach.
 */
#define LANES_RUNS	5
#define LANES_GAIN	1.25

/*
 * One owner's OWNER_VQS_MAX idle polled vqs, started with @threads
 * polling threads (poll_threads): the threads' empty visits a
 * millisecond, summed, over COST_MS, in *@per_ms. As idle_window().
 */
static int lanes_rate(int threads, double *per_ms)
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
 * Two polling threads do not take turns (poll_threads=2): each lane
 * visits the vqs it polls holding its own lock, so over the same idle
 * vqs two threads, each on a CPU, make well over the visits one makes.
 * When every visit took the table's one lock, two made 0.75 to 1.11
 * times one's in seven tries of eight (1.62 in the other), now 1.95 and
 * 2.06 (x86_64 guest, TCG). The median of LANES_RUNS ratios, each
 * measured back to back, must reach LANES_GAIN, in one of three rounds.
 */
TEST_F_TIMEOUT(neighbour, two_lanes_do_not_wait_on_each_other, 120)
{
	double one, two, r[LANES_RUNS], median = 0;
	int ret, tries, n, round;

	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: on one, two lanes take turns whatever they lock");
	ASSERT_EQ(0, vp_param_set("poll_min_gain", 0));
	/*
	 * A CPU each (one thread a CPU, in order): what is measured is the
	 * locks, not where the scheduler put the threads. Since the peek made
	 * an empty visit cheaper, ratios spread more (x0.88 to x2.54, TCG),
	 * and one median of LANES_RUNS in four or five missed: another
	 * round is measured when one misses, three rounds at most. Two
	 * rounds missed once (x1.24, x1.08) in make check, which boots a
	 * UML guest beside this one on a two-core host: two lanes gain only
	 * while both vCPUs run at once; alone, the same test gave x1.64.
	 * With one lock for both lanes no ratio reached the gain but one of
	 * eight (1.62).
	 */
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-1\n", 4));
	for (round = 0; round < 3 && median < LANES_GAIN; round++) {
		for (tries = 0, n = 0; tries < 2 * LANES_RUNS && n < LANES_RUNS; tries++) {
			ret = lanes_rate(1, &one);
			if (!ret)
				ret = lanes_rate(2, &two);
			if (ret == -EAGAIN)
				continue;
			ASSERT_EQ(0, ret) TH_LOG("%s", strerror(-ret));
			ASSERT_LT(0, one);
			r[n++] = two / one;
			TH_LOG("%d idle vqs of one owner, empty visits a ms:", OWNER_VQS_MAX);
			TH_LOG("%.0f with one thread, %.0f with two (x%.2f)", one, two, two / one);
		}
		ASSERT_EQ(LANES_RUNS, n)
			TH_LOG("a vq left poll mode, or one thread polled all, too often");
		qsort(r, n, sizeof(r[0]), cmp_double);
		median = r[n / 2];
		TH_LOG("round %d: median x%.2f", round + 1, median);
	}
	ASSERT_EQ(0, vp_param_set("poll_threads", 1));
	ASSERT_EQ(0, vp_param_write("poll_cpus", "\n", 1));
	EXPECT_LE(LANES_GAIN, median);
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
}

/*
 * poll_cpus: where the polling threads run. The tests need two CPUs; the
 * hotplug one, a CPU 1 that can go offline (the qemu guest).
 */
FIXTURE(cpus) {
	/* CPU 1 was taken offline and must come back. */
	bool cpu1_down;
};

FIXTURE_SETUP(cpus)
{
	self->cpu1_down = false;
	teardown_open(_metadata, VRING_TEST);
	if (vp_ncpus() < 2)
		SKIP(return, "one CPU: nowhere to place a polling thread but on it");
}

FIXTURE_TEARDOWN(cpus)
{
	if (self->cpu1_down)
		EXPECT_EQ(0, vp_cpu_set_online(1, true));
	teardown_close(_metadata);
}

/*
 * Wait up to @ms for exactly @n polling threads, thread i allowed on
 * @want[i] alone (as /proc lists it); what each last showed goes in @seen,
 * and a thread beyond the @n counts as a failure.
 */
static bool threads_on(const char *const *want, int n, unsigned int ms, char seen[][64])
{
	unsigned long long t0 = vp_now_ms();
	struct vp_worker w[8];

	do {
		int rows = vp_workers(w, 8), ok = 0, i;

		for (i = 0; i < n; i++)
			snprintf(seen[i], 64, "(no thread)");
		for (i = 0; i < rows; i++) {
			unsigned int t = w[i].thread;

			if (t >= (unsigned int)n) {
				ok = -1;
				break;
			}
			if (vp_task_cpus(w[i].pid, seen[t], 64))
				continue;
			ok += !strcmp(seen[t], want[t]);
		}
		if (ok == n)
			return true;
		vp_sleep_ms(5);
	} while (vp_now_ms() - t0 < ms);
	return false;
}

/*
 * A write moves the threads at once, asleep or not: one per listed CPU in
 * order, and no more threads than the list has CPUs (two on one CPU would
 * each see the other as contention and hand everything back: before, the
 * second went back to the first CPU); a bad list moves none; an empty one
 * lets them run anywhere again.
 */
TEST_F(cpus, threads_follow_the_list)
{
	const char *const spread[] = { "0", "1" }, *const on1[] = { "1" };
	const char *anywhere[2];
	char possible[64], seen[2][64];

	ASSERT_EQ(0, vp_read_line("/sys/devices/system/cpu/possible", possible,
				  sizeof(possible)));
	anywhere[0] = possible;
	anywhere[1] = possible;
	ASSERT_EQ(0, vp_param_set("poll_threads", 2));
	/* The write wakes the first thread, which starts the second. */
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-1\n", 4));
	EXPECT_TRUE(threads_on(spread, 2, 2000, seen)) {
		TH_LOG("poll_cpus=0-1: threads on %s and %s", seen[0], seen[1]);
	}
	ASSERT_EQ(0, vp_param_write("poll_cpus", "1", 1));
	EXPECT_TRUE(threads_on(on1, 1, 2000, seen)) {
		TH_LOG("poll_cpus=1: the first thread on %s, and not one thread", seen[0]);
	}
	EXPECT_EQ(-EINVAL, vp_param_write("poll_cpus", "0-x", 3));
	vp_sleep_ms(50);
	EXPECT_TRUE(threads_on(on1, 1, 0, seen)) {
		TH_LOG("a refused list moved them: the first on %s", seen[0]);
	}
	/* Two CPUs again: the second thread is back. */
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-1\n", 4));
	EXPECT_TRUE(threads_on(spread, 2, 2000, seen)) {
		TH_LOG("poll_cpus=0-1 again: threads on %s and %s", seen[0], seen[1]);
	}
	ASSERT_EQ(0, vp_param_write("poll_cpus", "\n", 1));
	EXPECT_TRUE(threads_on(anywhere, 2, 2000, seen)) {
		TH_LOG("poll_cpus empty: threads on %s and %s, not %s", seen[0], seen[1],
		       possible);
	}
}

/*
 * On a CPU of its own (poll_cpus=1, the owner, its worker and the driver
 * on CPU 0), the thread is never contended: it refuses no start and hands
 * nothing back, however busy CPU 0 is. (It may step aside for the
 * kernel's own work on CPU 1, which a CPU not isolated has: that is
 * counted, not asserted.)
 */
TEST_F(cpus, own_cpu_is_never_contended)
{
	const char *const on1[] = { "1" };
	struct vp_worker w0, w1;
	struct vp_vq_row s0, s1;
	char seen[1][64];
	struct vring_drv d;
	int polled;

	ASSERT_EQ(0, vp_param_write("poll_cpus", "1", 1));
	ASSERT_TRUE(threads_on(on1, 1, 2000, seen));
	ASSERT_EQ(0, pin_to(0, 0));
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(0, vp_worker(&w0));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s0, NULL));
	/* Half a second of CPU 0 kept busy by the stream. */
	ASSERT_EQ(0, vring_stream(&d, 20000, 1, STALL_MS));
	ASSERT_EQ(0, vp_worker(&w1));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s1, &polled));
	EXPECT_EQ(1, polled);
	EXPECT_EQ(s0.exits, s1.exits);
	EXPECT_EQ(s0.refused, s1.refused);
	EXPECT_EQ(w0.refused, w1.refused);
	EXPECT_TRUE(vring_all_used_once(&d));
	TH_LOG("%llu passes, %llu asides, %llu exits while CPU 0 streamed",
	       w1.passes - w0.passes, w1.asides - w0.asides, s1.exits - s0.exits);
	vring_close(&d);
}

/* This process's vhost worker (vhost-PID): its thread or kthread id, or -1. */
static int own_worker_tid(void)
{
	char comm[32];
	int tid = 0;

	snprintf(comm, sizeof(comm), "vhost-%d", getpid());
	if (vp_scan_comm("/proc/self/task", comm, &tid) == 1 ||
	    vp_scan_comm("/proc", comm, &tid) == 1)
		return tid;
	return -1;
}

/*
 * The I/O core of the cpus tests: the polling thread on CPU 1
 * (poll_cpus=1), the caller (the driver) on CPU 0, @d opened, its worker
 * placed on @worker_cpu, and @d polled. Returns the worker's id.
 */
static int io_core_open(struct __test_metadata *_metadata, struct vring_drv *d,
			int worker_cpu)
{
	const char *const on1[] = { "1" };
	char seen[1][64];
	int tid;

	ASSERT_EQ(0, vp_param_write("poll_cpus", "1", 1));
	ASSERT_TRUE(threads_on(on1, 1, 2000, seen));
	ASSERT_EQ(0, pin_to(0, 0));
	ASSERT_EQ(0, vring_open(d, RING, true, 1 << 20));
	tid = own_worker_tid();
	ASSERT_LT(0, tid);
	ASSERT_EQ(0, pin_to(tid, worker_cpu));
	ASSERT_EQ(0, poll_for_long(d));
	return tid;
}

/* What the vqs file counts of @d from @a to @b, for the I/O core tests. */
static void log_handoffs(struct __test_metadata *_metadata, const char *what,
			 const struct vp_vq_row *a, const struct vp_vq_row *b)
{
	TH_LOG("%s: %llu handler runs queued, %llu handed on the thread's CPU", what,
	       b->queued - a->queued, b->handed - a->handed);
	TH_LOG("%s: %llu crossed CPUs, %llu exits", what, b->crossed - a->crossed,
	       b->exits - a->exits);
}

/*
 * The I/O core: the polling thread on CPU 1 (poll_cpus=1), the owner's
 * worker placed there too, the driver on CPU 0. The thread queues the
 * handler to the worker beside it and gives it the CPU (a directed
 * yield), so no wake-up crosses CPUs; and the worker waiting for the CPU
 * is the thread's own, not another task it holds up. Before, the vqs file
 * had no count of either, and the thread could not tell its own worker
 * waiting from a stranger: the regime with the workers on the polling
 * CPU handed everything back as contended.
 */
TEST_F(cpus, own_worker_on_the_io_cpu_is_handed_not_contended)
{
	struct vp_vq_row s0, s1;
	struct vring_drv d;
	int polled;

	io_core_open(_metadata, &d, 1);
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s0, NULL));
	/*
	 * CPU 0 busy with the stream, the worker's handler runs on CPU 1; in
	 * slices, with a pause after each, so that the worker drains the
	 * ring and sleeps, and the thread queues its handler again (one run
	 * may otherwise keep up with the whole stream, requeued at its
	 * weight: no queue, no wake-up at all).
	 */
	ASSERT_EQ(0, stream_in_time(&d, 20000, 1));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s1, &polled));
	log_handoffs(_metadata, "worker on CPU 1", &s0, &s1);
	EXPECT_EQ(1, polled);
	EXPECT_EQ(s0.exits, s1.exits);
	EXPECT_EQ(s0.crossed, s1.crossed);
	EXPECT_LT(s0.handed, s1.handed);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * An owner whose worker may not run on the I/O CPU (its cpuset, or an
 * admin's placement) is still polled: each handler run the thread queues
 * wakes the worker across CPUs, and is counted so. The worker moved to
 * the I/O CPU mid-stream is handed the CPU from then on, and moved back
 * crosses again; no buffer is lost or served twice on the way.
 */
TEST_F(cpus, worker_off_the_io_cpu_crosses_and_is_counted)
{
	struct vp_vq_row s[4];
	struct vring_drv d;
	int i, tid;

	tid = io_core_open(_metadata, &d, 0);
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s[0], NULL));
	for (i = 1; i < 4; i++) {
		/* On CPU 0, then on the thread's, then back. */
		ASSERT_EQ(0, pin_to(tid, i == 2));
		ASSERT_EQ(0, stream_in_time(&d, 5000, 1));
		ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s[i], NULL));
	}
	log_handoffs(_metadata, "worker on CPU 0", &s[0], &s[1]);
	log_handoffs(_metadata, "moved to CPU 1", &s[1], &s[2]);
	log_handoffs(_metadata, "back on CPU 0", &s[2], &s[3]);
	/* Polled all along (the first stream keeps it so). */
	EXPECT_LT(s[0].queued, s[1].queued);
	EXPECT_EQ(s[0].handed, s[1].handed);
	EXPECT_LT(s[0].crossed, s[1].crossed);
	EXPECT_LT(s[1].handed, s[2].handed);
	EXPECT_LT(s[2].crossed, s[3].crossed);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * The I/O core changed under a stream (the owner streams, its worker on
 * CPU 1 with the thread, while a child makes the changes): poll_cpus moved
 * to CPU 0 and back, then CPU 1 taken offline (the worker and the thread
 * leave it; the worker's pinning is broken by the kernel) and brought
 * back. No buffer is lost or used twice, and the stream never waits
 * longer than a stall (each vring_stream() would fail).
 */
TEST_F(cpus, io_core_changed_mid_stream_strands_nothing)
{
	struct vp_vq_row s0, s1;
	struct vring_drv d;
	int status;
	pid_t changer;
	bool hotplug;

	hotplug = !access("/sys/devices/system/cpu/cpu1/online", W_OK);
	io_core_open(_metadata, &d, 1);
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s0, NULL));
	/* Brought back by the teardown if the changer fails half-way. */
	self->cpu1_down = hotplug;
	changer = fork();
	ASSERT_LE(0, changer);
	if (!changer) {
		int bad = 0;

		vp_sleep_ms(30);
		bad |= vp_param_write("poll_cpus", "0", 1);
		vp_sleep_ms(30);
		bad |= vp_param_write("poll_cpus", "1", 1);
		vp_sleep_ms(30);
		if (hotplug) {
			bad |= vp_cpu_set_online(1, false);
			vp_sleep_ms(30);
			bad |= vp_cpu_set_online(1, true);
			vp_sleep_ms(30);
		}
		_exit(bad ? 1 : 0);
	}
	do {
		ASSERT_EQ(0, vring_stream(&d, 500, 1, STALL_MS));
	} while (waitpid(changer, &status, WNOHANG) != changer);
	self->cpu1_down = false;
	EXPECT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status));
	ASSERT_EQ(0, vring_stream(&d, 2000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &s1, NULL));
	log_handoffs(_metadata, hotplug ? "list changed, CPU 1 offline and back" :
			 "list changed (no CPU hotplug here)", &s0, &s1);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * An owner killed while the I/O core serves it (its worker on CPU 1, with
 * the thread, handed the CPU at every request): its rows go, the thread
 * settles, and the module is free to unload.
 */
TEST_F(cpus, io_core_owner_killed_strands_nothing)
{
	struct vp_vq_row sum;
	int status;
	pid_t pid;

	ASSERT_EQ(0, vp_param_write("poll_cpus", "1", 1));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct vring_drv d;
		int tid;

		if (pin_to(0, 0) || kicked_driver(&d, 1 << 24))
			_exit(1);
		tid = own_worker_tid();
		if (tid < 0 || pin_to(tid, 1))
			_exit(2);
		for (;;)
			if (vring_stream(&d, 1000, 1, STALL_MS))
				_exit(3);
	}
	EXPECT_TRUE(vp_wait_polled(pid, 1, STALL_MS));
	/* Some handler runs handed to the worker on the thread's CPU. */
	vp_sleep_ms(100);
	EXPECT_LE(1, vp_vq_sum(pid, -1, &sum, NULL));
	EXPECT_LT(0, sum.handed);
	kill(pid, SIGKILL);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(0, vp_vq_sum(pid, -1, &sum, NULL));
	EXPECT_TRUE(vp_worker_settles(STALL_MS));
	EXPECT_TRUE(module_unpinned());
}

/*
 * The listed CPU goes offline under the polling thread while it polls a
 * ring, and comes back: the thread leaves it before it goes (it may then
 * run anywhere, the list having no other CPU), the ring stays served, and
 * the thread returns to the CPU once it is online.
 */
TEST_F(cpus, listed_cpu_goes_offline_and_comes_back)
{
	const char *const on1[] = { "1" };
	const char *anywhere[1];
	char possible[64], seen[1][64];
	struct vp_worker w;
	struct vring_drv d;

	if (access("/sys/devices/system/cpu/cpu1/online", W_OK))
		SKIP(return, "CPU 1 cannot go offline here (CONFIG_HOTPLUG_CPU)");
	ASSERT_EQ(0, vp_read_line("/sys/devices/system/cpu/possible", possible,
				  sizeof(possible)));
	anywhere[0] = possible;
	ASSERT_EQ(0, vp_param_write("poll_cpus", "1", 1));
	ASSERT_TRUE(threads_on(on1, 1, 2000, seen));
	ASSERT_EQ(0, pin_to(0, 0));
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));
	ASSERT_EQ(0, vp_worker(&w));

	ASSERT_EQ(0, vp_cpu_set_online(1, false));
	self->cpu1_down = true;
	EXPECT_TRUE(threads_on(anywhere, 1, 2000, seen)) {
		TH_LOG("CPU 1 offline: thread on %s, not %s", seen[0], possible);
	}
	EXPECT_EQ(0, vp_task_cpu(w.pid));
	/* Served meanwhile, by the thread or, handed back, by kicks. */
	EXPECT_EQ(0, vring_stream(&d, 2000, 1, STALL_MS));

	ASSERT_EQ(0, vp_cpu_set_online(1, true));
	self->cpu1_down = false;
	EXPECT_TRUE(threads_on(on1, 1, 2000, seen)) {
		TH_LOG("CPU 1 back: thread on %s, not 1", seen[0]);
	}
	EXPECT_EQ(1, vp_task_cpu(w.pid));
	EXPECT_EQ(0, vring_stream(&d, 2000, 1, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

/*
 * Two threads on poll_cpus=0-1, and CPU 1 goes offline: one thread
 * remains, on CPU 0, rather than both there (before, the second moved to
 * CPU 0 too, where each saw the other as contention); its CPU back, the
 * second thread is too. A ring polled meanwhile stays served.
 */
TEST_F(cpus, offline_cpu_stacks_no_two_threads)
{
	const char *const spread[] = { "0", "1" }, *const on0[] = { "0" };
	char seen[2][64];
	struct vring_drv d;

	if (access("/sys/devices/system/cpu/cpu1/online", W_OK))
		SKIP(return, "CPU 1 cannot go offline here (CONFIG_HOTPLUG_CPU)");
	ASSERT_EQ(0, vp_param_set("poll_threads", 2));
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-1\n", 4));
	ASSERT_TRUE(threads_on(spread, 2, 2000, seen)) {
		TH_LOG("poll_cpus=0-1: threads on %s and %s", seen[0], seen[1]);
	}
	ASSERT_EQ(0, vring_open(&d, RING, true, 1 << 20));
	ASSERT_EQ(0, poll_for_long(&d));

	ASSERT_EQ(0, vp_cpu_set_online(1, false));
	self->cpu1_down = true;
	EXPECT_TRUE(threads_on(on0, 1, 2000, seen)) {
		TH_LOG("CPU 1 offline: the first thread on %s, and not one thread", seen[0]);
	}
	EXPECT_EQ(0, vring_stream(&d, 2000, 1, STALL_MS));

	ASSERT_EQ(0, vp_cpu_set_online(1, true));
	self->cpu1_down = false;
	EXPECT_TRUE(threads_on(spread, 2, 2000, seen)) {
		TH_LOG("CPU 1 back: threads on %s and %s", seen[0], seen[1]);
	}
	EXPECT_EQ(0, vring_stream(&d, 2000, 1, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
}

int main(int argc, char **argv)
{
	vp_skip_if_cannot_run(argc, argv, VP_NEEDS_DEBUGFS | VP_NEEDS_DEVICE);
	return test_harness_run(argc, argv);
}
