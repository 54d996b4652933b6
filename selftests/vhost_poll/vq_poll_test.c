// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_poll in action on one vq: a user-space virtio driver (lib/vring.c)
 * streams tagged buffers through vhost-test, or packets through vhost-net
 * into a tap device, while the module switches the virtqueue between
 * notification and poll mode: when polling starts and stops, what leaves
 * it, what a polled ring may hold, and which thread or worker polls it.
 * Every test checks that every buffer was used exactly once.
 */
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "kselftest_harness.h"
#include "vhost_poll.h"
#include "vring.h"
#include "poll_util.h"
#include "poll_fixture.h"

/* A rate no streaming driver here reaches. */
#define RATE_NEVER	1000000

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
	for (i = 0; i < 4 && sum.cooldown; i++) {
		TH_LOG("the last exit was a hand-back (%llu stalls, cool-down %llu): round again",
		       sum.stalls, sum.cooldown);
		ASSERT_EQ(0, window_round(&self->d, 4, &grown, &sum));
	}
	idle_exit = !sum.cooldown;

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
	EXPECT_LE(16, sum.cooldown);
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
				       polled, sum.cooldown);
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
	TH_LOG("handed back, cool-down %llu jiffies; %llu queued, %llu busy, %llu refused,",
	       sum.cooldown, sum.queued, sum.busy, sum.refused);
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
 * jiffy, so how many bursts start polling depends on the timing. Every
 * other pause is half a jiffy, to start polling; the others are 1, 1.5
 * and 2 jiffies, around the idle limit, for the burst after them to
 * land as the vq leaves. In UML (HZ 100) 400 to 500 bursts started it
 * 101 to 124 times (with pauses of 0.5 to 2 jiffies in turn, 1,000
 * bursts took twice as long and started vhost-net's 94 to 124 times);
 * under KCSAN (qemu-kcsan), 3,000 of those bursts started it 84 times.
 */
#define BURSTS_MIN	400

#define BURSTS_MAX	6000

#define EXITS_MIN	100

TEST_F_TIMEOUT(poll, bursts_at_poll_exit, 90)
{
	const unsigned int idle = 1;
	/* Pauses of half a jiffy, and around the idle limit: 1, 1.5, 2. */
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
		vp_sleep_us(b % 2 ? jiffy_us * (2 + b / 2 % 3) / 2 : jiffy_us / 2);
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

static const char *const leave_name[LEAVE_N] = {
	"SET_VRING_KICK", "SET_MEM_TABLE", "poll_start_rate=0",
};

/*
 * The driver negotiates its features again while its vq is polled
 * (vhost-test's, or vhost-net's transmit queue): EVENT_IDX off and back
 * on, or on and back off, as a guest driver's reset does. Each
 * SET_FEATURES hands the vq back first; back in notification mode, the
 * ring must ask for the next kick in the way the features in force say
 * (used->flags without EVENT_IDX, avail_event with it), as it does when
 * nothing polled it: a driver that kicks only when asked is otherwise
 * never heard again. (The undrained ring of a stress run: its last
 * operation was a SET_FEATURES.)
 */
TEST_F(poll, event_idx_flip_while_polled_keeps_kicks)
{
	const bool ev = variant->event_idx;
	unsigned int round;

	for (round = 0; round < 5; round++) {
		ASSERT_EQ(0, poll_for_long(&self->d));
		ASSERT_EQ(0, vring_set_event_idx(&self->d, !ev));
		ASSERT_EQ(0, vring_set_event_idx(&self->d, ev));
		/* Handed back; then time for the hand-back's handler run. */
		ASSERT_TRUE(vp_wait_polled(getpid(), 0, STALL_MS));
		vp_sleep_ms(50);
		EXPECT_TRUE(vring_wants_kick(&self->d)) {
			TH_LOG("round %u: EVENT_IDX %s, then %s: the ring asks for no kick",
			       round, ev ? "off" : "on", ev ? "on" : "off");
		}
		/* Kicked only if the ring asks, as a guest's driver does. */
		ASSERT_EQ(8, vring_post(&self->d, 8));
		ASSERT_EQ(0, vring_drain(&self->d, STALL_MS)) {
			TH_LOG("round %u: %llu buffers never used", round,
			       (unsigned long long)(self->d.posted - self->d.used));
		}
	}
	EXPECT_TRUE(vring_all_used_once(&self->d));
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
 * Where the work is: a handler run only when it can make progress, counted
 * in buffers it used, whether the vhost-poll thread or the vq's own worker
 * polls (vp_poll_in_worker()).
 */

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

int main(int argc, char **argv)
{
	vp_skip_if_cannot_run(argc, argv, VP_NEEDS_DEBUGFS | VP_NEEDS_DEVICE);
	return test_harness_run(argc, argv);
}
