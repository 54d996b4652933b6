// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_poll module parameters: values given at load time, reading and
 * writing them at run time through sysfs, rejection of bad values (the
 * old value kept), the CPU list poll_cpus, CPU hotplug beside parameter
 * writes, and unloading and reloading the module. With vhost_poll built
 * into the kernel, the tests of writing run on it (each from the
 * defaults, put back after it) and those of loading skip.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "vhost_poll.h"
#include "kselftest_harness.h"

static const char *const params[] = {
	"poll_start_rate", "poll_stop_idle", "poll_stop_idle_max", "poll_min_gain",
	"poll_threads", "poll_max_kick_cost", "poll_max_nap", "poll_max_workers",
	"poll_stall_us",
};

/* Values no u32 parameter may take, each written in one write(). */
static const char *const bad_values[] = {
	"abc", "abc\n", "-1", "-1\n", "\n", "1x", "1x\n", "12 34", " 5",
	"4294967296", "4294967296\n", "18446744073709551616", "0x", "5\n\n",
};

#define EXPECT_PARAM(name, want) do {					\
		char _buf[64];						\
		ASSERT_EQ(0, vp_param_read(name, _buf, sizeof(_buf)));	\
		EXPECT_STREQ(want, _buf);				\
	} while (0)

FIXTURE(loaded) {
};

FIXTURE_SETUP(loaded)
{
	const char *why = vp_cannot_run();

	if (why)
		SKIP(return, "%s", why);
	if (vp_builtin()) {
		ASSERT_EQ(0, vp_builtin_reset());
		return;
	}
	if (vp_loaded())
		ASSERT_EQ(0, vp_unload());
	/* With the module's own defaults. */
	ASSERT_EQ(0, vp_load_file(vp_ko(), ""));
}

FIXTURE_TEARDOWN(loaded)
{
	int ret = 0;

	if (vp_builtin())
		ret = vp_builtin_reset();
	else if (vp_loaded())
		ret = vp_unload();
	EXPECT_EQ(0, ret);
}

TEST_F(loaded, defaults)
{
	EXPECT_PARAM("poll_start_rate", "0\n");
	EXPECT_PARAM("poll_stop_idle", "2\n");
	EXPECT_PARAM("poll_stop_idle_max", "16\n");
	EXPECT_PARAM("poll_min_gain", "16\n");
	EXPECT_PARAM("poll_threads", "1\n");
	EXPECT_PARAM("poll_max_kick_cost", "0\n");
	EXPECT_PARAM("poll_max_nap", "0\n");
	EXPECT_PARAM("poll_max_workers", "0\n");
	EXPECT_PARAM("poll_stall_us", "5000\n");
	EXPECT_PARAM("poll_cpus", "\n");
}

TEST_F(loaded, defaults_table_is_complete)
{
	/* vp_builtin_reset() must know every parameter the tests write. */
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(params); i++) {
		for (j = 0; j < ARRAY_SIZE(vp_param_defaults); j++)
			if (!strcmp(params[i], vp_param_defaults[j][0]))
				break;
		EXPECT_LT(j, ARRAY_SIZE(vp_param_defaults)) {
			TH_LOG("no default for %s", params[i]);
		}
	}
}

TEST_F(loaded, permissions_0644)
{
	char path[128];
	struct stat st;
	size_t i;

	for (i = 0; i <= ARRAY_SIZE(params); i++) {
		const char *name = i < ARRAY_SIZE(params) ? params[i] : "poll_cpus";

		snprintf(path, sizeof(path), VP_PARAMS "%s", name);
		ASSERT_EQ(0, stat(path, &st));
		EXPECT_EQ(0644, st.st_mode & 07777) {
			TH_LOG("%s has mode %o", name, st.st_mode & 07777);
		}
		EXPECT_EQ(0, st.st_uid);
	}
}

TEST_F(loaded, write_valid)
{
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "25\n", 3));
	EXPECT_PARAM("poll_start_rate", "25\n");
	/* Without the newline, as a program writes it. */
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "7", 1));
	EXPECT_PARAM("poll_start_rate", "7\n");
	/* The C parsers' bases: 0x for hex, a leading 0 for octal. */
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "0x10", 4));
	EXPECT_PARAM("poll_start_rate", "16\n");
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "010", 3));
	EXPECT_PARAM("poll_start_rate", "8\n");
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "+3", 2));
	EXPECT_PARAM("poll_start_rate", "3\n");
	/* The whole u32 range. */
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "4294967295", 10));
	EXPECT_PARAM("poll_start_rate", "4294967295\n");
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "0", 1));
	EXPECT_PARAM("poll_start_rate", "0\n");
	ASSERT_EQ(0, vp_param_write("poll_stop_idle", "1\n", 2));
	EXPECT_PARAM("poll_stop_idle", "1\n");
	ASSERT_EQ(0, vp_param_write("poll_stop_idle", "100\n", 4));
	EXPECT_PARAM("poll_stop_idle", "100\n");
}

TEST_F(loaded, write_invalid_keeps_value)
{
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(params); i++) {
		ASSERT_EQ(0, vp_param_write(params[i], "42\n", 3));
		for (j = 0; j < ARRAY_SIZE(bad_values); j++) {
			const char *bad = bad_values[j];

			EXPECT_EQ(-EINVAL, vp_param_write(params[i], bad, strlen(bad))) {
				TH_LOG("%s accepted \"%s\"", params[i], bad);
			}
			EXPECT_PARAM(params[i], "42\n");
		}
	}
}

TEST_F(loaded, write_empty_keeps_value)
{
	/*
	 * sysfs drops a zero-length write before the parameter code sees it
	 * (echo -n "" > file): the value must simply stay.
	 */
	ASSERT_EQ(0, vp_param_write("poll_start_rate", "9\n", 2));
	EXPECT_EQ(0, vp_param_write("poll_start_rate", "", 0));
	EXPECT_PARAM("poll_start_rate", "9\n");
}

/* One past the last possible CPU, as a string (the possible list ends
 * with its highest number).
 */
static void past_possible(char *buf, size_t len)
{
	char possible[64];
	const char *p;
	int last = 99999;

	if (!vp_read_line("/sys/devices/system/cpu/possible", possible, sizeof(possible))) {
		p = possible + strlen(possible);
		while (p > possible && p[-1] >= '0' && p[-1] <= '9')
			p--;
		last = atoi(p);
	}
	snprintf(buf, len, "%d", last + 1);
}

/* The kernel's cpulist syntax; shown with ranges folded. */
TEST_F(loaded, cpus_write_valid)
{
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0\n", 2));
	EXPECT_PARAM("poll_cpus", "0\n");
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0-0", 3));
	EXPECT_PARAM("poll_cpus", "0\n");
	if (vp_ncpus() >= 2) {
		ASSERT_EQ(0, vp_param_write("poll_cpus", "1,0", 3));
		EXPECT_PARAM("poll_cpus", "0-1\n");
		ASSERT_EQ(0, vp_param_write("poll_cpus", "1", 1));
		EXPECT_PARAM("poll_cpus", "1\n");
	}
	/* A newline alone empties it: anywhere. */
	ASSERT_EQ(0, vp_param_write("poll_cpus", "\n", 1));
	EXPECT_PARAM("poll_cpus", "\n");
	/* A zero-length write never reaches the parameter. */
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0", 1));
	EXPECT_EQ(0, vp_param_write("poll_cpus", "", 0));
	EXPECT_PARAM("poll_cpus", "0\n");
}

TEST_F(loaded, cpus_write_invalid_keeps_value)
{
	static const char *const bad[] = { "abc", "-1", "0-", "x0", "1-0", "0,a", "100000" };
	char past[16];
	size_t i;

	/* And one past the last possible CPU. */
	past_possible(past, sizeof(past));
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0", 1));
	for (i = 0; i <= ARRAY_SIZE(bad); i++) {
		const char *v = i < ARRAY_SIZE(bad) ? bad[i] : past;

		EXPECT_EQ(-EINVAL, vp_param_write("poll_cpus", v, strlen(v))) {
			TH_LOG("poll_cpus accepted \"%s\"", v);
		}
		EXPECT_PARAM("poll_cpus", "0\n");
	}
}

/* A CPU that is offline cannot be listed, alone or in a range. */
TEST_F(loaded, cpus_offline_cpu_refused)
{
	int kmsg;

	if (vp_ncpus() < 2 || access("/sys/devices/system/cpu/cpu1/online", W_OK))
		SKIP(return, "no CPU 1 that can go offline (CONFIG_HOTPLUG_CPU)");
	ASSERT_EQ(0, vp_param_write("poll_cpus", "0", 1));
	ASSERT_EQ(0, vp_cpu_set_online(1, false));
	kmsg = vp_kmsg_open();
	EXPECT_EQ(-EINVAL, vp_param_write("poll_cpus", "1", 1));
	EXPECT_EQ(-EINVAL, vp_param_write("poll_cpus", "0-1", 3));
	EXPECT_PARAM("poll_cpus", "0\n");
	EXPECT_TRUE(kmsg >= 0 && vp_kmsg_has(kmsg, "poll_cpus", "CPU 1 is not online"));
	if (kmsg >= 0)
		close(kmsg);
	ASSERT_EQ(0, vp_cpu_set_online(1, true));
	EXPECT_EQ(0, vp_param_write("poll_cpus", "1", 1));
	EXPECT_PARAM("poll_cpus", "1\n");
}

#define WQ_SCOPE "/sys/module/workqueue/parameters/default_affinity_scope"

/* Writes @val to the file at @path: 0, or -errno. */
static int write_file(const char *path, const char *val)
{
	int fd, ret = 0;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * One of the three loops of cpus_hotplug_beside_param_writes: 0 when each
 * step did what it may, else the number of the loop's step that did not.
 */
static int hotplug_loop(int role)
{
	/* Every scope but "default", which it refuses to default to. */
	static const char *const scopes[] = { "cpu", "smt", "cache", "numa", "system" };
	static const char *const lists[] = { "1", "0", "0-1", "\n" };
	int i, ret;

	for (i = 0; i < 40; i++) {
		switch (role) {
		case 0:
			/* CPU 1 out and back: the hotplug callbacks run. */
			if (vp_cpu_set_online(1, false) || vp_cpu_set_online(1, true))
				return i + 1;
			break;
		case 1:
			/* A setter that takes cpus_read_lock() under param_lock. */
			if (write_file(WQ_SCOPE, scopes[i % ARRAY_SIZE(scopes)]))
				return i + 1;
			break;
		default:
			/* Refused only for naming CPU 1 while it is away. */
			ret = vp_param_write("poll_cpus", lists[i % ARRAY_SIZE(lists)],
					     strlen(lists[i % ARRAY_SIZE(lists)]));
			if (ret && ret != -EINVAL)
				return i + 1;
			break;
		}
	}
	return 0;
}

/*
 * CPU hotplug beside parameter writes. The poll_cpus hotplug callbacks run
 * with cpu_hotplug_lock held; a built-in parameter's setter may take
 * cpus_read_lock() with the parameter lock held (workqueue's
 * default_affinity_scope). Built in, vhost_poll's parameters take that same
 * lock (param_lock), and as a module one of the same lockdep class: a
 * callback that took it would deadlock against such a write. CPU 1 goes
 * offline and online 40 times while the workqueue parameter and poll_cpus
 * are written 40 times each: all three finish within 120 s, and the
 * runner fails the test on any splat (lockdep's in qemu-builtin).
 */
TEST_F(loaded, cpus_hotplug_beside_param_writes)
{
	char scope[32];
	pid_t pids[3];
	int i, status, left = 3, waited = 0;

	if (vp_ncpus() < 2 || access("/sys/devices/system/cpu/cpu1/online", W_OK))
		SKIP(return, "no CPU 1 that can go offline (CONFIG_HOTPLUG_CPU)");
	if (access(WQ_SCOPE, W_OK) || vp_read_line(WQ_SCOPE, scope, sizeof(scope)))
		SKIP(return, "no %s to write", WQ_SCOPE);
	for (i = 0; i < 3; i++) {
		pids[i] = fork();
		ASSERT_LE(0, pids[i]);
		if (!pids[i])
			_exit(hotplug_loop(i));
	}
	while (left && waited < 120 * 10) {
		for (i = 0; i < 3; i++) {
			if (!pids[i] || waitpid(pids[i], &status, WNOHANG) != pids[i])
				continue;
			EXPECT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status)) {
				TH_LOG("loop %d failed at step %d", i,
				       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
			}
			pids[i] = 0;
			left--;
		}
		if (left) {
			vp_sleep_ms(100);
			waited++;
		}
	}
	EXPECT_EQ(0, left) {
		TH_LOG("%d loops still run after 120 s: hotplug and a write wait on each other",
		       left);
	}
	for (i = 0; i < 3; i++)
		if (pids[i]) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], &status, 0);
		}
	EXPECT_EQ(0, write_file(WQ_SCOPE, scope));
	vp_cpu_set_online(1, true);
}

TEST(load_with_values)
{
	const char *args =
		"poll_start_rate=16 poll_stop_idle=3 poll_stop_idle_max=40 poll_threads=3";
	const char *why = vp_cannot_run();

	if (why)
		SKIP(return, "%s", why);
	if (vp_builtin())
		SKIP(return, "vhost_poll is built in: nothing to load");
	if (vp_loaded())
		ASSERT_EQ(0, vp_unload());
	ASSERT_EQ(0, vp_load(args));
	EXPECT_PARAM("poll_start_rate", "16\n");
	EXPECT_PARAM("poll_stop_idle", "3\n");
	EXPECT_PARAM("poll_stop_idle_max", "40\n");
	EXPECT_PARAM("poll_threads", "3\n");
	EXPECT_EQ(0, vp_unload());
	ASSERT_EQ(0, vp_load("poll_cpus=0"));
	EXPECT_PARAM("poll_cpus", "0\n");
	EXPECT_EQ(0, vp_unload());
}

TEST(load_bad_value_fails)
{
	static const char *const bad_args[] = {
		"poll_start_rate=abc", "poll_start_rate=-1", "poll_start_rate=",
		"poll_start_rate=1x", "poll_start_rate=4294967296",
		"poll_stop_idle=abc", "poll_stop_idle=-1", "poll_stop_idle=",
		"poll_stop_idle=1x", "poll_stop_idle=4294967296",
		"poll_stop_idle_max=abc", "poll_stop_idle_max=-1",
		"poll_min_gain=1x", "poll_min_gain=4294967296",
		"poll_threads=two", "poll_threads=-1",
		"poll_max_kick_cost=1ms", "poll_max_kick_cost=4294967296",
		"poll_max_nap=1ms", "poll_max_nap=-1",
		"poll_stall_us=5ms", "poll_stall_us=-1",
		"poll_cpus=abc", "poll_cpus=0-", "poll_cpus=100000",
		"poll_start_rate",
	};
	const char *why = vp_cannot_run();
	size_t i;

	if (why)
		SKIP(return, "%s", why);
	if (vp_builtin())
		SKIP(return, "vhost_poll is built in: nothing to load");
	if (vp_loaded())
		ASSERT_EQ(0, vp_unload());
	for (i = 0; i < ARRAY_SIZE(bad_args); i++) {
		char name[64];
		int kmsg = vp_kmsg_open();

		ASSERT_LE(0, kmsg);
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(bad_args[i], "="),
			 bad_args[i]);
		EXPECT_EQ(-EINVAL, vp_load(bad_args[i])) {
			TH_LOG("insmod %s did not fail with EINVAL", bad_args[i]);
		}
		EXPECT_FALSE(vp_loaded());
		/* The kernel log names the parameter that was refused. */
		EXPECT_TRUE(vp_kmsg_has(kmsg, VP_MODULE, name)) {
			TH_LOG("no log line names %s after insmod %s", name, bad_args[i]);
		}
		close(kmsg);
		if (vp_loaded())
			vp_unload();
	}
}

TEST(unload_and_reload)
{
	const char *why = vp_cannot_run();

	if (why)
		SKIP(return, "%s", why);
	if (vp_builtin())
		SKIP(return, "vhost_poll is built in: nothing to load");
	if (vp_loaded())
		ASSERT_EQ(0, vp_unload());
	ASSERT_EQ(0, vp_load("poll_start_rate=5"));
	ASSERT_EQ(0, vp_param_write("poll_stop_idle", "9\n", 2));
	ASSERT_EQ(0, vp_unload());
	EXPECT_FALSE(vp_loaded());
	EXPECT_EQ(-ENOENT, vp_unload());

	/* A reload starts from the defaults, not from the last values. */
	ASSERT_EQ(0, vp_load(""));
	EXPECT_PARAM("poll_start_rate", "0\n");
	EXPECT_PARAM("poll_stop_idle", "2\n");
	/* Loading twice is refused while loaded. */
	EXPECT_EQ(-EEXIST, vp_load(""));
	EXPECT_EQ(0, vp_unload());
}

int main(int argc, char **argv)
{
	vp_skip_if_cannot_run(argc, argv, 0);
	return test_harness_run(argc, argv);
}
