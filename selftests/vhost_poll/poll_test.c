// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_poll in action: a user-space virtio driver (vring.h) streams
 * tagged buffers through vhost-test, or packets through vhost-net into a
 * tap device, while the module switches the virtqueue between
 * notification and poll mode. Every test checks that every buffer was
 * used exactly once.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include "vhost_poll.h"
#include "vring.h"
#include "kselftest_harness.h"

#define RING		256
/* How long the device may take nothing before a test calls it stuck. */
#define STALL_MS	5000
/* A rate every streaming driver here reaches, and one none does. */
#define RATE_LOW	4
#define RATE_NEVER	1000000

static int hz(void)
{
	int h = vp_hz();

	/* 100 is the lowest HZ Kconfig offers: the longest jiffy. */
	return h > 0 ? h : 100;
}

static unsigned int jiffies_ms(unsigned int j)
{
	return (j * 1000 + hz() - 1) / hz();
}

/* Load vhost-test and a fresh vhost_poll; a reason to skip, or NULL. */
static const char *setup_modules(void)
{
	const char *why = vp_cannot_run();
	int ret;

	if (why)
		return why;
	ret = vp_load_vhost_test();
	if (ret)
		return "vhost_test.ko cannot be loaded (VHOST_POLL_TEST_KO)";
	if (vp_loaded() && vp_unload())
		return "vhost_poll is loaded and busy";
	if (vp_load("poll_start_rate=0 poll_stop_idle=2"))
		return NULL;	/* the test's own assertions report it */
	return NULL;
}

/* Wait up to @ms for process @pid to have @want polled vqs. */
static bool wait_polled(int pid, int want, unsigned int ms)
{
	struct vp_vq_row sum;
	int polled;

	for (; ms; ms--) {
		if (vp_vq_sum(pid, -1, &sum, &polled) >= 0 && polled == want)
			return true;
		vp_sleep_ms(1);
	}
	return false;
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

FIXTURE_SETUP(poll)
{
	const char *why = setup_modules();

	if (why)
		SKIP(return, "%s", why);
	ASSERT_TRUE(vp_loaded());
	if (variant->dev == VRING_NET && access("/dev/vhost-net", F_OK))
		SKIP(return, "no /dev/vhost-net (CONFIG_VHOST_NET)");
	if (variant->dev == VRING_NET && access("/dev/net/tun", F_OK))
		SKIP(return, "no /dev/net/tun (CONFIG_TUN)");
	ASSERT_EQ(0, vring_open_dev(&self->d, variant->dev, RING, variant->event_idx, 1 << 21));
}

FIXTURE_TEARDOWN(poll)
{
	vring_close(&self->d);
	if (vp_loaded())
		EXPECT_EQ(0, vp_unload());
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
TEST_F(poll, above_rate_polls_and_silences_kicks)
{
	struct vp_vq_row sum;
	__u64 kicks0, bufs0;
	int polled;

	/* A long idle time: the driver's pauses are not what is measured. */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", hz() / 2));
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	vring_post_kicked(&self->d, 4 * RATE_LOW);
	ASSERT_EQ(0, vring_stream(&self->d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	ASSERT_LE(1, sum.enters);

	kicks0 = self->d.kicks;
	bufs0 = self->d.used;
	ASSERT_EQ(0, vring_stream(&self->d, 100000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	TH_LOG("steady: %llu buffers, %llu kicks; poll_work %llu, empty %llu, enters %llu",
	       (unsigned long long)(self->d.used - bufs0),
	       (unsigned long long)(self->d.kicks - kicks0), sum.poll_work,
	       sum.empty_polls, sum.enters);
	EXPECT_LE((self->d.kicks - kicks0) * 1000, self->d.used - bufs0);
	EXPECT_LT(0, sum.poll_work);
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/* c. When the load stops the vq leaves poll mode within poll_stop_idle + 1
 * jiffies, the worker sleeps, and the next buffer comes with a kick.
 */
TEST_F(poll, idle_returns_to_notification)
{
	const unsigned int idle = 2;
	/*
	 * The bound is idle + 1 jiffies. This test observes it from user
	 * space, which lags: under UML it shares the one CPU with the polling
	 * thread, under qemu TCG everything is emulated. It allows its own
	 * observation two more jiffies or 20 ms, whichever is longer.
	 */
	const unsigned int slack_ms = jiffies_ms(2) > 20 ? jiffies_ms(2) : 20;
	const unsigned int limit_ms = jiffies_ms(idle + 1) + slack_ms;
	struct vp_vq_row sum;
	struct vp_worker w;
	unsigned long long t0, left_ms, asleep_ms;
	__u64 kicks, exits;
	bool was_polled;
	int polled;

	/*
	 * Stream with a long idle limit, so that the vq does not leave poll
	 * mode while the driver is descheduled; then set the limit under
	 * test. The last work came before the drain returned, so the vq must
	 * leave within the limit of the moment the new limit is in force.
	 */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", hz()));
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	vring_post_kicked(&self->d, 4 * RATE_LOW);
	ASSERT_EQ(0, vring_stream(&self->d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	ASSERT_LE(1, sum.enters);
	exits = sum.exits;
	was_polled = polled;
	/* The last work was before this write: the bound runs from here. */
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", idle));
	t0 = vp_now_ms();

	while (polled && (unsigned int)(vp_now_ms() - t0) < limit_ms) {
		vp_sleep_us(200);
		ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	}
	left_ms = vp_now_ms() - t0;
	EXPECT_EQ(0, polled) {
		TH_LOG("still polled %u ms after the last buffer (HZ %d)",
		       (unsigned int)(vp_now_ms() - t0), hz());
	}
	ASSERT_EQ(0, vp_worker(&w));
	while (vp_task_state(w.pid) != 'S' && (unsigned int)(vp_now_ms() - t0) < limit_ms)
		vp_sleep_us(200);
	asleep_ms = vp_now_ms() - t0;
	EXPECT_EQ('S', vp_task_state(w.pid));
	EXPECT_EQ(0, w.polled_vqs);
	TH_LOG("notification mode after %llu ms, worker asleep after %llu (limit %u, HZ %d)",
	       left_ms, asleep_ms, limit_ms, hz());

	/* It did leave poll mode: now, or already while draining. */
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	EXPECT_LE(1, sum.exits);
	EXPECT_LT(exits, sum.exits + !was_polled);
	kicks = self->d.kicks;
	ASSERT_EQ(1, vring_post(&self->d, 1));
	EXPECT_EQ(kicks + 1, self->d.kicks);
	ASSERT_EQ(0, vring_drain(&self->d, STALL_MS));
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/* d. poll_start_rate=0 mid-stream returns the vq to notifications at once;
 * a rate again brings polling back; nothing is lost on the way.
 */
TEST_F(poll, rate_zero_mid_stream)
{
	struct vp_vq_row sum;
	__u64 enters;
	int polled, i;

	ASSERT_EQ(0, vp_param_set("poll_stop_idle", hz()));
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	vring_post_kicked(&self->d, 4 * RATE_LOW);
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

	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	vring_post_kicked(&self->d, 4 * RATE_LOW);
	ASSERT_EQ(0, vring_stream(&self->d, 5000, 1, STALL_MS));
	ASSERT_EQ(1, vp_vq_sum(getpid(), self->d.index, &sum, &polled));
	EXPECT_LT(enters, sum.enters);
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/* g. Bursts timed to land as the vq leaves poll mode: none is lost. */
TEST_F(poll, bursts_at_poll_exit)
{
	const unsigned int idle = 1, bursts = 1000;
	/* Pauses around the idle limit: 0.5, 1, 1.5 and 2 jiffies. */
	const unsigned int jiffy_us = 1000000 / hz();
	struct vp_vq_row sum;
	unsigned int b, i;
	int polled;

	ASSERT_EQ(0, vp_param_set("poll_stop_idle", idle));
	ASSERT_EQ(0, vp_param_set("poll_start_rate", 2));
	for (b = 0; b < bursts; b++) {
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
	TH_LOG("%u bursts: %llu kicks, %llu entries, %llu exits", bursts,
	       (unsigned long long)self->d.kicks, sum.enters, sum.exits);
	/* The race was run: the vq went in and out of poll mode many times. */
	EXPECT_LE(bursts / 10, sum.exits);
	EXPECT_TRUE(vring_all_used_once(&self->d));
}

/* Tests with several drivers and teardown paths; vhost_poll loaded. */
FIXTURE(teardown) {
};

FIXTURE_SETUP(teardown)
{
	const char *why = setup_modules();

	if (why)
		SKIP(return, "%s", why);
	ASSERT_TRUE(vp_loaded());
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", hz()));
}

FIXTURE_TEARDOWN(teardown)
{
	if (vp_loaded())
		EXPECT_EQ(0, vp_unload());
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

/* Wait until the worker polls nothing and sleeps. */
static bool worker_settles(unsigned int ms)
{
	struct vp_worker w;

	for (; ms; ms--) {
		if (!vp_worker(&w) && !w.polled_vqs && vp_task_state(w.pid) == 'S')
			return true;
		vp_sleep_ms(1);
	}
	return false;
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
		if (vring_open(&dt[i].d, RING, true, 1 << 16))
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
	EXPECT_TRUE(worker_settles(STALL_MS));
}

/* Open a vhost-test driver and kick it past RATE_LOW; 0 or -errno. */
static int kicked_driver(struct vring_drv *d, __u64 max_bufs)
{
	int ret = vring_open(d, RING, true, max_bufs);

	if (!ret)
		vring_post_kicked(d, 4 * RATE_LOW);
	return ret;
}

/* Get a driver polled, with buffers in flight. */
static int polled_driver(struct vring_drv *d)
{
	int ret = kicked_driver(d, 1 << 20);

	if (ret)
		return ret;
	ret = vring_stream(d, 5000, 1, STALL_MS);
	if (ret)
		return ret;
	vring_post(d, RING / 2);
	return wait_polled(getpid(), 1, 1000) ? 0 : -EAGAIN;
}

/* f. Close the device while polled. */
TEST_F(teardown, close_while_polled)
{
	struct vring_drv d;

	ASSERT_EQ(0, polled_driver(&d));
	vring_close(&d);
	EXPECT_TRUE(worker_settles(STALL_MS));
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
	EXPECT_TRUE(wait_polled(pid, 1, STALL_MS));
	kill(pid, SIGKILL);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(0, vp_vq_sum(pid, -1, &sum, NULL));
	EXPECT_TRUE(worker_settles(STALL_MS));
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
		vring_post_kicked(&d, 4 * RATE_LOW);
		ASSERT_EQ(0, vring_stream(&d, 5000, 1, STALL_MS));
	}
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	TH_LOG("after 3 moves: %llu entries, %llu exits", sum.enters, sum.exits);
	EXPECT_LE(2, sum.enters);
	EXPECT_TRUE(vring_all_used_once(&d));
	vring_close(&d);
	EXPECT_TRUE(worker_settles(STALL_MS));
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
		if (vring_stream(&d, 200000, 1, STALL_MS))
			_exit(2);
		_exit(vring_all_used_once(&d) ? 0 : 3);
	}
	EXPECT_TRUE(wait_polled(pid, 1, STALL_MS));
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

TEST_HARNESS_MAIN
