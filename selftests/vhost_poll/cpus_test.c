// SPDX-License-Identifier: GPL-2.0
/*
 * poll_cpus: where the polling threads run, the I/O core's hand-offs to
 * the workers beside it, and a listed CPU that goes offline and comes
 * back.
 */
#include <signal.h>
#include <sys/wait.h>
#include "kselftest_harness.h"
#include "vhost_poll.h"
#include "vring.h"
#include "poll_util.h"
#include "poll_fixture.h"

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
	TH_LOG("%llu passes, %llu yields, %llu exits while CPU 0 streamed",
	       w1.passes - w0.passes, w1.yields - w0.yields, s1.exits - s0.exits);
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
