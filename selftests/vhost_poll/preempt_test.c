// SPDX-License-Identifier: GPL-2.0
/*
 * The control path beside a preempted polling thread. With the kernel
 * fully preemptible (preempt=full), a real-time task on the first
 * polling thread's CPU (another tenant's real-time vCPU) preempts the
 * thread anywhere it does not hold a spinlock. Opening and closing a
 * device (vhost's attach and detach, under the mutex every vhost open
 * and close takes) must not wait for it, and the other polling thread
 * must go on polling. Runs built in (qemu-builtin, booted preempt=full)
 * as well as loaded; sets the model itself where the kernel lets it.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kselftest_harness.h"
#include "vhost_poll.h"
#include "vring.h"
#include "poll_util.h"

#define SCHED_PREEMPT	"/sys/kernel/debug/sched/preempt"
#define NO_MODEL	"no " SCHED_PREEMPT " (CONFIG_PREEMPT_DYNAMIC, debugfs): " \
			"cannot make the kernel fully preemptible"

/* Rounds without the neighbour, then as many with it. */
#define ROUNDS		24
/* Devices the first thread polls: one closed a round, four left. */
#define FIRST_DEVS	(2 * ROUNDS + 4)
/* Each round's spin on the first thread's CPU, and the rest after it. */
#define SPIN_MS		300
#define REST_MS		50
/*
 * How much longer than the slowest without the neighbour an open or a
 * close may take with it: half the spin. One that waited for the
 * preempted thread takes what was left of the spin, nearly all of it.
 * Under TCG an open once took 90 ms beside a spin for reasons of its own
 * (the host's two cores run the spinning vCPU, the other one and qemu's
 * own threads), more than a quarter of a 200 ms spin.
 */
#define SLACK_MS	(SPIN_MS / 2)

/* The model the kernel had before the fixture set "full", or "". */
static char model_before[32];

/* The preemption model in use (SCHED_PREEMPT shows it in parentheses). */
static int preempt_model(char *model, size_t len)
{
	char buf[128], *open_paren, *close_paren;
	int ret = vp_read_line(SCHED_PREEMPT, buf, sizeof(buf));

	if (ret)
		return ret;
	open_paren = strchr(buf, '(');
	close_paren = open_paren ? strchr(open_paren, ')') : NULL;
	if (!close_paren)
		return -EINVAL;
	*close_paren = '\0';
	snprintf(model, len, "%s", open_paren + 1);
	return 0;
}

/*
 * The kernel preempts fully from here on: NULL, or why it cannot. A model
 * set here is put back by preempt_restore().
 */
static const char *preempt_full(void)
{
	char model[32];

	if (preempt_model(model, sizeof(model)))
		return NO_MODEL;
	if (!strcmp(model, "full"))
		return NULL;
	if (write_text(SCHED_PREEMPT, "full"))
		return "the kernel refused preempt=full through " SCHED_PREEMPT;
	snprintf(model_before, sizeof(model_before), "%s", model);
	return NULL;
}

static void preempt_restore(void)
{
	if (model_before[0])
		write_text(SCHED_PREEMPT, model_before);
	model_before[0] = '\0';
}

/* RCU's kernel threads moved by rcu_kthreads_on(), and where they were. */
static struct {
	pid_t pid;
	cpu_set_t was;
} rcu_moved[16];
static int rcu_nmoved;

/*
 * RCU's own kernel threads (rcu_preempt, the expedited and tasks-RCU
 * workers) on CPU @cpu, as a host with real-time vCPUs keeps its
 * housekeeping off their CPUs: left on the neighbour's CPU, the
 * grace-period thread waits for the spin to end, and with it every close
 * (which waits out a grace period), polled or not. The per-CPU ones
 * refuse to move and stay. How many moved.
 */
static int rcu_kthreads_on(int cpu)
{
	char path[300], comm[64];
	struct dirent *e;
	cpu_set_t set;
	DIR *d = opendir("/proc");

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	while (d && (e = readdir(d)) && rcu_nmoved < (int)ARRAY_SIZE(rcu_moved)) {
		pid_t pid = atoi(e->d_name);

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/comm", pid);
		if (vp_read_line(path, comm, sizeof(comm)) || strncmp(comm, "rcu_", 4))
			continue;
		if (sched_getaffinity(pid, sizeof(cpu_set_t), &rcu_moved[rcu_nmoved].was) ||
		    sched_setaffinity(pid, sizeof(set), &set))
			continue;
		rcu_moved[rcu_nmoved++].pid = pid;
	}
	if (d)
		closedir(d);
	return rcu_nmoved;
}

static void rcu_kthreads_restore(void)
{
	while (rcu_nmoved > 0) {
		rcu_nmoved--;
		sched_setaffinity(rcu_moved[rcu_nmoved].pid, sizeof(cpu_set_t),
				  &rcu_moved[rcu_nmoved].was);
	}
}

FIXTURE(preempt) {
};

FIXTURE_SETUP(preempt)
{
	const char *why = vp_cannot_run();

	if (why)
		SKIP(return, "%s", why);
	if (vp_ncpus() < 2)
		SKIP(return, "needs 2 CPUs: one for the neighbour, one for the test");
	/* Before any module is loaded: most kernels here have no such file. */
	if (access(SCHED_PREEMPT, F_OK))
		SKIP(return, "%s", NO_MODEL);
	if (vp_builtin()) {
		if (access("/dev/vhost-test", F_OK))
			SKIP(return, "no /dev/vhost-test (CONFIG_VHOST_TEST)");
		ASSERT_EQ(0, vp_builtin_reset());
		/* What the loaded module gets from vp_setup_modules(). */
		ASSERT_EQ(0, vp_params_apply(VP_STEADY));
	} else {
		why = vp_setup_modules(true);
		if (why)
			SKIP(return, "%s", why);
		ASSERT_TRUE(vp_loaded());
	}
	why = preempt_full();
	if (why)
		SKIP(return, "%s", why);
	/* The kernel's own work off the neighbour's CPU (rcu_kthreads_on()). */
	wq_unbound_restore();
	ASSERT_EQ(0, wq_unbound_on(1));
	ASSERT_LT(0, rcu_kthreads_on(1));
}

FIXTURE_TEARDOWN(preempt)
{
	int ret = 0;

	rcu_kthreads_restore();
	wq_unbound_restore();
	preempt_restore();
	if (vp_builtin())
		ret = vp_builtin_reset();
	else if (vp_loaded())
		ret = vp_unload();
	EXPECT_EQ(0, ret);
}

/*
 * The second thread's owner: one device, polled, round trips one buffer
 * at a time until @stop closes; says on @out when it is polled, then
 * the slowest round trip (us). Exit status: 0, or the step that failed.
 */
static int second_owner(int stop, int out)
{
	unsigned long long worst = 0, t;
	struct vring_drv d;
	struct pollfd p = { .fd = stop, .events = POLLIN };

	if (pin_to(0, 1) || vring_open(&d, RING, true, 1 << 24))
		return 2;
	if (poll_for_long(&d))
		return 3;
	if (write(out, "r", 1) != 1)
		return 4;
	while (poll(&p, 1, 0) == 0) {
		t = vp_now_us();
		if (vring_post(&d, 1) != 1 || vring_drain(&d, STALL_MS))
			return 5;
		if (vp_now_us() - t > worst)
			worst = vp_now_us() - t;
	}
	vring_close(&d);
	return write(out, &worst, sizeof(worst)) == sizeof(worst) ? 0 : 6;
}

/*
 * Two polling threads, the first on CPU 0 polling FIRST_DEVS devices of
 * this process, the second on CPU 1 polling another owner's device; this
 * process, and so its devices' workers, on CPU 1. Each round closes one
 * of the first thread's devices and opens a new one, timed; in the last
 * ROUNDS a SCHED_FIFO task has just begun a SPIN_MS spin on CPU 0, which
 * preempts the first thread wherever it was. Neither an open nor a close
 * may wait for it: each within SLACK_MS of the slowest without the
 * neighbour. The second thread's device stays polled by it, none of its
 * round trips waiting out a spin.
 *
 * The watchdog's bound is set past the spin (poll_stall_us, 1 s), so the
 * first thread's rings stay in its hands while it is off its CPU, and a
 * detach has its ring to see to every round. RCU's kernel threads and the
 * unbound workqueues are on CPU 1, as a host keeps them off its real-time
 * vCPUs' CPUs: else a close, which waits out a grace period, waits for the
 * spin whatever the poller does.
 *
 * With the table's and the rings' locks as mutexes, a close waited for
 * the rest of the spin whenever the thread was preempted within a visit:
 * 302 to 309 ms, in 4 to 6 rounds of 24, in each of 3 runs; with them as
 * spinlocks, 0 rounds of 24 in 3 runs, the slowest open or close 23 ms
 * (x86_64 guest, TCG).
 */
TEST_F_TIMEOUT(preempt, rt_neighbour_holds_up_no_open_or_close, 240)
{
	unsigned long long t, open_us, close_us, spun, worst_rt = 0;
	unsigned long long base_open = 0, base_close = 0, rt_open = 0, rt_close = 0;
	static struct vring_drv first[FIRST_DEVS], fresh[2 * ROUNDS];
	int stop[2], out[2], status, i, ret, preempted = 0, slow = 0;
	struct vp_worker w0, w1;
	struct vp_vq_row sum0, sum1;
	struct spinner s;
	struct vp_worker w;
	pid_t second;
	char c;

	ASSERT_EQ(0, pin_to(0, 1));
	ASSERT_EQ(0, vp_param_set("poll_stall_us", 1000000));
	ASSERT_EQ(0, vp_param_set("poll_threads", 1));
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-1", 3));
	ASSERT_TRUE(threads_become(1, STALL_MS));
	ASSERT_EQ(0, vp_worker(&w));
	for (t = vp_now_ms(); vp_task_cpu(w.pid) != 0; vp_sleep_ms(1))
		ASSERT_LT(vp_now_ms() - t, STALL_MS) TH_LOG("the first thread is not on CPU 0");
	for (i = 0; i < FIRST_DEVS; i++) {
		ret = vring_open(&first[i], RING, true, 1 << 20);
		ASSERT_EQ(0, ret) TH_LOG("device %d: %s", i, strerror(-ret));
		ASSERT_EQ(0, poll_for_long(&first[i]));
	}
	ASSERT_EQ(FIRST_DEVS, polled_by(getpid(), 0));

	/* The second thread, and a device it polls. */
	ASSERT_EQ(0, vp_param_set("poll_threads", 2));
	ASSERT_TRUE(threads_become(2, STALL_MS));
	ASSERT_EQ(0, pipe(stop));
	ASSERT_EQ(0, pipe(out));
	second = fork();
	ASSERT_LE(0, second);
	if (!second) {
		/* Not the first thread's devices: their closes are the test's. */
		close_fds_but(stop[0], out[1]);
		_exit(second_owner(stop[0], out[1]));
	}
	close(stop[0]);
	close(out[1]);
	ASSERT_EQ(1, read(out[0], &c, 1)) TH_LOG("the second owner's device was not polled");
	ASSERT_EQ(1, polled_by(second, 1)) TH_LOG("the second thread does not poll its device");
	ASSERT_LT(0, vp_vq_sum(second, 0, &sum0, NULL));
	ASSERT_EQ(0, vp_worker(&w0));

	for (i = 0; i < 2 * ROUNDS; i++) {
		bool rt = i >= ROUNDS;

		if (rt) {
			ASSERT_EQ(0, spinner_start(&s, 0, SPIN_MS));
			ASSERT_EQ(0, spinner_go(&s));
			/* Kept off its CPU (runnable), not asleep. */
			preempted += vp_task_state(w.pid) == 'R';
		}
		t = vp_now_us();
		vring_close(&first[i]);
		close_us = vp_now_us() - t;
		t = vp_now_us();
		ret = vring_open(&fresh[i], RING, true, 1 << 20);
		open_us = vp_now_us() - t;
		ASSERT_EQ(0, ret) TH_LOG("open: %s", strerror(-ret));
		if (rt) {
			spun = spinner_end(&s);
			ASSERT_LE(SPIN_MS, spun) TH_LOG("the neighbour did not spin");
			/* As long as a quarter of the spin: it waited. */
			slow += close_us > SLACK_MS * 1000 || open_us > SLACK_MS * 1000;
			rt_open = open_us > rt_open ? open_us : rt_open;
			rt_close = close_us > rt_close ? close_us : rt_close;
			vp_sleep_ms(REST_MS);
		} else {
			base_open = open_us > base_open ? open_us : base_open;
			base_close = close_us > base_close ? close_us : base_close;
		}
	}
	ASSERT_LT(0, vp_vq_sum(second, 0, &sum1, NULL));
	ASSERT_EQ(0, vp_worker(&w1));
	ASSERT_EQ(1, polled_by(second, 1)) TH_LOG("the second thread's device left it");
	close(stop[1]);
	ASSERT_EQ(sizeof(worst_rt), read(out[0], &worst_rt, sizeof(worst_rt)));
	ASSERT_EQ(second, waitpid(second, &status, 0));
	ASSERT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status));
	close(out[0]);
	for (i = 0; i < 2 * ROUNDS; i++)
		vring_close(&fresh[i]);
	for (i = 2 * ROUNDS; i < FIRST_DEVS; i++)
		vring_close(&first[i]);

	TH_LOG("slowest close: %llu us alone, %llu us beside the spinning neighbour",
	       base_close, rt_close);
	TH_LOG("slowest open: %llu us alone, %llu us beside it", base_open, rt_open);
	TH_LOG("%d of %d rounds beside it had an open or a close over %d ms",
	       slow, ROUNDS, SLACK_MS);
	TH_LOG("second thread's device: slowest round trip %llu us, %llu exits",
	       worst_rt, sum1.exits - sum0.exits);
	TH_LOG("first thread: %llu passes, %llu empty visits, %d of %d spins found it runnable",
	       w1.passes - w0.passes, w1.empty_visits - w0.empty_visits, preempted, ROUNDS);
	EXPECT_LE(rt_close, base_close + SLACK_MS * 1000);
	EXPECT_LE(rt_open, base_open + SLACK_MS * 1000);
	EXPECT_EQ(sum0.exits, sum1.exits);
	EXPECT_LT(worst_rt, SPIN_MS * 1000ULL / 2);
}

int main(int argc, char **argv)
{
	vp_skip_if_cannot_run(argc, argv, 0);
	return test_harness_run(argc, argv);
}
