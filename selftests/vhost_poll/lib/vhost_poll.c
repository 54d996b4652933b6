// SPDX-License-Identifier: GPL-2.0
/*
 * The helpers every vhost_poll selftest shares: load and unload the
 * module under test, read and write its parameters, read its counters
 * and the tasks it runs, and watch the kernel log.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>
#include "kselftest.h"
#include "vhost_poll.h"

/* From include/uapi/linux/module.h, for C libraries older than 5.17's. */
#ifndef MODULE_INIT_COMPRESSED_FILE
#define MODULE_INIT_COMPRESSED_FILE	4
#endif

/*
 * Find module @name (without .ko) the way a CI lays the tests out: the
 * file environment variable @env names, if set (scripts/check sets it);
 * else @name.ko next to this program, where an installed kselftest tree
 * carries it; else the file modinfo(8) finds for the running kernel.
 * NULL if none; else @env's value, or @buf.
 */
static const char *vp_find_ko(const char *env, const char *name,
			      char *buf, size_t len)
{
	const char *path = getenv(env);
	char cmd[64], *slash;
	ssize_t n;
	FILE *f;

	if (path && *path)
		return path;
	n = readlink("/proc/self/exe", buf, len - 1);
	if (n > 0) {
		buf[n] = '\0';
		slash = strrchr(buf, '/');
		if (slash && (size_t)(slash - buf) + strlen(name) + 5 < len) {
			sprintf(slash + 1, "%s.ko", name);
			if (!access(buf, F_OK))
				return buf;
		}
	}
	/* "modinfo -n" prints "(builtin)" for a built-in module: not a file. */
	snprintf(cmd, sizeof(cmd), "modinfo -n %s 2>/dev/null", name);
	f = popen(cmd, "r");
	if (!f)
		return NULL;
	if (!fgets(buf, len, f))
		buf[0] = '\0';
	pclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return buf[0] == '/' && !access(buf, F_OK) ? buf : NULL;
}

/*
 * The module under test, from vp_find_ko(). Looked up once, before the
 * harness forks the tests, which then inherit the answer.
 */
const char *vp_ko(void)
{
	static char buf[PATH_MAX];
	static const char *ko;
	static bool looked;

	if (!looked) {
		ko = vp_find_ko("VHOST_POLL_KO", VP_MODULE, buf, sizeof(buf));
		looked = true;
	}
	return ko;
}

bool vp_builtin(void)
{
	return access("/sys/module/" VP_MODULE "/parameters", F_OK) == 0 &&
	       access("/sys/module/" VP_MODULE "/initstate", F_OK) != 0;
}

/* Why this test cannot run here, or NULL when it can. */
const char *vp_cannot_run(void)
{
	if (geteuid() != 0)
		return "needs root to load modules";
	if (vp_builtin())
		return NULL;
	if (!vp_ko())
		return VP_KO_MISSING;
	if (access(vp_ko(), R_OK))
		return "the vhost_poll.ko found is not readable";
	return NULL;
}

bool vp_loaded(void)
{
	return access("/sys/module/" VP_MODULE, F_OK) == 0;
}

/* Whether @path ends with @suffix. */
static bool vp_ends_with(const char *path, const char *suffix)
{
	size_t n = strlen(path), m = strlen(suffix);

	return n >= m && !strcmp(path + n - m, suffix);
}

/*
 * Whether module file @path is compressed, as modules_install leaves it
 * with CONFIG_MODULE_COMPRESS_*: the kernel then has to be told so.
 */
bool vp_ko_compressed(const char *path)
{
	return vp_ends_with(path, ".ko.gz") || vp_ends_with(path, ".ko.xz") ||
	       vp_ends_with(path, ".ko.zst");
}

/* Load module file @path with @args; 0 or -errno. */
int vp_load_file(const char *path, const char *args)
{
	int fd, ret, flags;

	flags = vp_ko_compressed(path) ? MODULE_INIT_COMPRESSED_FILE : 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = syscall(SYS_finit_module, fd, args, flags);
	if (ret)
		ret = -errno;
	close(fd);
	return ret;
}

/* The online CPUs, as a cpulist ("0-1"), into @buf; 0 or -errno. */
static int vp_cpus_online(char *buf, size_t len)
{
	return vp_read_line("/sys/devices/system/cpu/online", buf, len);
}

/*
 * Load the module with @args. Where @args does not name poll_cpus, with
 * every online CPU given to polling: those tests are of the vhost-poll
 * thread, which polls only on CPUs given to it (with none, the vqs' own
 * workers poll; the tests of a worker's own polling ask for that with
 * vp_poll_in_worker()). Where it does not name poll_stall_us, with the
 * watchdog's bound the tests were written for, 4 jiffies: on UML's one
 * CPU, shared with the driver and the worker at HZ=100, the thread is
 * kept off it for a tick at times, and the module's default (5 ms) would
 * hand its rings back then. The tests of the bound set their own.
 */
int vp_load(const char *args)
{
	char buf[512], cpus[64];
	int n, ret;

	n = snprintf(buf, sizeof(buf), "%s", args);
	if (!strstr(args, "poll_cpus")) {
		ret = vp_cpus_online(cpus, sizeof(cpus));
		if (ret)
			return ret;
		n += snprintf(buf + n, sizeof(buf) - n, "%spoll_cpus=%s", n ? " " : "", cpus);
	}
	if (!strstr(args, "poll_stall_us"))
		snprintf(buf + n, sizeof(buf) - n, "%spoll_stall_us=%u", n ? " " : "",
			 4 * 1000000 / vp_jiffy_hz());
	return vp_load_file(vp_ko(), buf);
}

/* Unload module @name; 0 or -errno. */
int vp_unload_name(const char *name)
{
	return syscall(SYS_delete_module, name, O_NONBLOCK) ? -errno : 0;
}

int vp_unload(void)
{
	return vp_unload_name(VP_MODULE);
}

/* Read parameter @name into @buf, newline included; 0 or -errno. */
int vp_param_read(const char *name, char *buf, size_t len)
{
	char path[256];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), VP_PARAMS "%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n < 0)
		return n;
	buf[n] = '\0';
	return 0;
}

/* Write @len bytes of @val to parameter @name in one write(); 0 or -errno. */
int vp_param_write(const char *name, const char *val, size_t len)
{
	char path[256];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), VP_PARAMS "%s", name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, val, len);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n < 0)
		return n;
	return n == (ssize_t)len ? 0 : -EIO;
}

/*
 * Where the polled vqs of the next starts are polled: @in_worker, by
 * their own workers (poll_cpus empty); else by the vhost-poll thread,
 * every online CPU given to it. 0 or -errno.
 */
int vp_poll_in_worker(bool in_worker)
{
	char cpus[64];
	int ret;

	if (in_worker)
		return vp_param_write("poll_cpus", "\n", 1);
	ret = vp_cpus_online(cpus, sizeof(cpus));
	return ret ? ret : vp_param_write("poll_cpus", cpus, strlen(cpus));
}

const char *const vp_param_defaults[VP_NPARAMS][2] = {
	{ "poll_start_rate", "0" }, { "poll_stop_idle", "2" },
	{ "poll_stop_idle_max", "16" }, { "poll_min_gain", "16" },
	{ "poll_threads", "1" }, { "poll_max_kick_cost", "0" },
	{ "poll_max_nap", "0" }, { "poll_max_workers", "0" },
	{ "poll_stall_us", "5000" }, { "poll_cpus", "\n" },
};

/*
 * Write the parameters @words names, as a load's arguments give them
 * ("name=value" words: VP_STEADY), through sysfs. 0 or -errno.
 */
int vp_params_apply(const char *words)
{
	char buf[512], *w, *val, *save = NULL;
	int ret = 0;

	snprintf(buf, sizeof(buf), "%s", words);
	for (w = strtok_r(buf, " ", &save); w && !ret; w = strtok_r(NULL, " ", &save)) {
		val = strchr(w, '=');
		if (!val)
			return -EINVAL;
		*val++ = '\0';
		ret = vp_param_write(w, val, strlen(val));
	}
	return ret;
}

/* Built in: every parameter back to its default, as a load would give it. */
int vp_builtin_reset(void)
{
	size_t i;
	int ret = 0;

	for (i = 0; i < VP_NPARAMS && !ret; i++)
		ret = vp_param_write(vp_param_defaults[i][0], vp_param_defaults[i][1],
				     strlen(vp_param_defaults[i][1]));
	return ret;
}

/* Open /dev/kmsg positioned after the records already logged. */
int vp_kmsg_open(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0)
		lseek(fd, 0, SEEK_END);
	return fd;
}

/* Whether a record logged since vp_kmsg_open() contains every @needle. */
bool vp_kmsg_has(int fd, const char *needle1, const char *needle2)
{
	char rec[2048];
	ssize_t n;

	for (;;) {
		n = read(fd, rec, sizeof(rec) - 1);
		if (n < 0) {
			if (errno == EPIPE)	/* overwritten records: go on */
				continue;
			return false;		/* EAGAIN: no more records */
		}
		rec[n] = '\0';
		if (strstr(rec, needle1) && (!needle2 || strstr(rec, needle2)))
			return true;
	}
}

/* CPUs online now (1 if it cannot tell). */
int vp_ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

/* The first line of @path, without its newline, into @buf: 0, or -errno. */
int vp_read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	int ret = 0;

	if (!f)
		return -errno;
	if (!fgets(buf, (int)len, f))
		ret = ferror(f) ? -EIO : -ENODATA;
	fclose(f);
	if (!ret)
		buf[strcspn(buf, "\n")] = 0;
	return ret;
}

/* The CPUs task @pid may run on, as the kernel lists them ("0-1"): 0, or
 * -errno.
 */
int vp_task_cpus(int pid, char *buf, size_t len)
{
	static const char key[] = "Cpus_allowed_list:";
	char path[64], line[256];
	int ret = -ENODATA;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, sizeof(key) - 1))
			continue;
		const char *v = line + sizeof(key) - 1;

		snprintf(buf, len, "%s", v + strspn(v, " \t"));
		buf[strcspn(buf, "\n")] = 0;
		ret = 0;
		break;
	}
	fclose(f);
	return ret;
}

/* The CPU task @pid runs on, or last ran on (field 39 of its stat), or
 * -errno.
 */
int vp_task_cpu(int pid)
{
	char path[64], line[1024], *p;
	int field, cpu = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (vp_read_line(path, line, sizeof(line)))
		return -ENOENT;
	/* After the command, which may hold spaces, field 3 (the state). */
	p = strrchr(line, ')');
	if (!p)
		return -EPROTO;
	p++;
	for (field = 3; field < 39 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %d", &cpu) != 1)
		return -EPROTO;
	return cpu;
}

/* Takes CPU @cpu offline, or brings it back: 0, or -errno (-ENOENT where
 * it cannot go offline).
 */
int vp_cpu_set_online(int cpu, bool online)
{
	char path[64];
	int fd, ret = 0;

	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/online", cpu);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, online ? "1" : "0", 1) != 1)
		ret = -errno;
	close(fd);
	return ret;
}

/* Read the rows of the vqs file; returns how many, or -errno. */
int vp_vq_rows(struct vp_vq_row *rows, int max)
{
	/* 18 columns, 13 of them 64-bit counters: under 400 bytes a row. */
	char line[512], mode[16];
	FILE *f = fopen(VP_DEBUGFS "vqs", "re");
	int n = 0;

	if (!f)
		return -errno;
	if (!fgets(line, sizeof(line), f) || strncmp(line, "pid dev vq mode", 15)) {
		fclose(f);
		return -EPROTO;
	}
	while (n < max && fgets(line, sizeof(line), f)) {
		struct vp_vq_row *r = &rows[n];

		memset(r, 0, sizeof(*r));
		if (sscanf(line, VP_VQ_ROW, &r->pid, &r->dev, &r->vq, mode, &r->kicks,
			   &r->poll_work, &r->notify_work, &r->empty_polls,
			   &r->enters, &r->exits, &r->window, &r->refused,
			   &r->queued, &r->busy, &r->cooldown, &r->thread, &r->stalls,
			   &r->retries, &r->spin_us, &r->crossed, &r->handed) < 10)
			continue;
		r->poll = !strcmp(mode, "poll");
		n++;
	}
	fclose(f);
	return n;
}

/* The rows of process @pid (and of vq index @vq, unless -1), summed;
 * returns how many rows, or -errno.
 */
int vp_vq_sum(int pid, int vq, struct vp_vq_row *sum, int *polled)
{
	struct vp_vq_row rows[256];
	int n = vp_vq_rows(rows, 256), i, found = 0;

	memset(sum, 0, sizeof(*sum));
	if (polled)
		*polled = 0;
	for (i = 0; i < n; i++) {
		if (rows[i].pid != pid || (vq >= 0 && rows[i].vq != (unsigned int)vq))
			continue;
		found++;
		sum->kicks += rows[i].kicks;
		sum->poll_work += rows[i].poll_work;
		sum->notify_work += rows[i].notify_work;
		sum->empty_polls += rows[i].empty_polls;
		sum->enters += rows[i].enters;
		sum->exits += rows[i].exits;
		sum->window += rows[i].window;
		sum->refused += rows[i].refused;
		sum->queued += rows[i].queued;
		sum->busy += rows[i].busy;
		sum->cooldown += rows[i].cooldown;
		sum->stalls += rows[i].stalls;
		sum->retries += rows[i].retries;
		sum->spin_us += rows[i].spin_us;
		sum->crossed += rows[i].crossed;
		sum->handed += rows[i].handed;
		if (polled && rows[i].poll)
			(*polled)++;
	}
	return n < 0 ? n : found;
}

/* Read the rows of the threads file (a polling thread each); returns how
 * many, or -errno.
 */
int vp_workers(struct vp_worker *w, int max)
{
	unsigned long long yield_us;
	char line[512];
	FILE *f = fopen(VP_DEBUGFS "threads", "re");
	int n = 0;

	if (!f)
		return -errno;
	if (!fgets(line, sizeof(line), f) || strncmp(line, "pid passes", 10)) {
		fclose(f);
		return -EPROTO;
	}
	while (n < max && fgets(line, sizeof(line), f)) {
		memset(&w[n], 0, sizeof(w[n]));
		if (sscanf(line,
			   "%d %llu %llu %llu %llu %u %llu %llu %llu %u %llu %llu %llu %llu %llu %llu %llu",
			   &w[n].pid, &w[n].passes, &w[n].busy_ns, &w[n].idle_ns,
			   &w[n].mm_switches, &w[n].polled_vqs, &w[n].yields,
			   &yield_us, &w[n].refused, &w[n].thread, &w[n].empty_visits,
			   &w[n].empty_visit_ns, &w[n].served, &w[n].naps, &w[n].nap_us,
			   &w[n].contended, &w[n].stalled) < 6)
			continue;
		n++;
	}
	fclose(f);
	return n;
}

/* The first thread's row (vhost-poll's): 0, or -errno. */
int vp_worker(struct vp_worker *w)
{
	int n = vp_workers(w, 1);

	return n < 0 ? n : n == 1 ? 0 : -EPROTO;
}

/* The scheduler state letter of task @pid (R, S, D, ...), or 0. */
char vp_task_state(int pid)
{
	char path[64], buf[512], *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p)
		return 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/*
 * The tasks under @dir (/proc, or a /proc/PID/task) named @comm: returns
 * how many, and stores the first one's id in *@first unless it is NULL.
 */
int vp_scan_comm(const char *dir, const char *comm, int *first)
{
	char path[300], buf[64];
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		FILE *f;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "%s/%s/comm", dir, de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f)) {
			buf[strcspn(buf, "\n")] = '\0';
			if (!strcmp(buf, comm) && !n++ && first)
				*first = atoi(de->d_name);
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

/* How many tasks are named @comm. */
int vp_count_threads(const char *comm)
{
	return vp_scan_comm("/proc", comm, NULL);
}

/* CONFIG_HZ from the first "CONFIG_HZ=" line of stream @f (closed); 0 if none. */
static int vp_hz_from(FILE *f, bool piped)
{
	char line[256];
	int hz = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CONFIG_HZ=%d", &hz) == 1)
			break;
	if (piped)
		pclose(f);
	else
		fclose(f);
	return hz;
}

/* The kernel's jiffies, from /proc/timer_list; 0 if it does not show them. */
static unsigned long long vp_jiffies(void)
{
	FILE *f = fopen("/proc/timer_list", "re");
	unsigned long long j = 0;
	char line[256];

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "jiffies: %llu", &j) == 1)
			break;
	fclose(f);
	return j;
}

/*
 * CONFIG_HZ of the running kernel; 0 if unknown. From the build tree's
 * .config ($VHOST_POLL_KDIR, set by scripts/check), else /proc/config.gz,
 * else measured: jiffies over 200 ms of CLOCK_MONOTONIC, rounded to the
 * nearest HZ Kconfig offers. A CI kernel is often HZ=1000, ours 100 or
 * 250: every bound in jiffies depends on it.
 */
static int vp_hz(void)
{
	static const int offered[] = { 100, 250, 300, 1000 };
	static int cached;
	const char *kdir = getenv("VHOST_POLL_KDIR");
	unsigned long long j0, j1;
	struct timespec t0, t1;
	char path[512];
	double rate;
	int i, best;

	if (cached)
		return cached;
	if (kdir && *kdir) {
		snprintf(path, sizeof(path), "%s/.config", kdir);
		cached = vp_hz_from(fopen(path, "re"), false);
	}
	if (!cached && !access("/proc/config.gz", R_OK))
		cached = vp_hz_from(popen("zcat /proc/config.gz 2>/dev/null", "r"), true);
	if (cached)
		return cached;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	j0 = vp_jiffies();
	usleep(200000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	j1 = vp_jiffies();
	if (!j0 || j1 <= j0)
		return 0;
	rate = (j1 - j0) / ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	best = 0;
	for (i = 1; i < 4; i++)
		if ((rate - offered[i]) * (rate - offered[i]) <
		    (rate - offered[best]) * (rate - offered[best]))
			best = i;
	cached = offered[best];
	return cached;
}

/*
 * How much to stretch a wall-clock bound: 4 when the runner says the
 * machine is slow (KSFT_MACHINE_SLOW=yes: an emulator, a debug kernel on
 * a small board), else 1. Bounds in kernel time (jiffies, counters) are
 * not stretched.
 */
unsigned int vp_slow(void)
{
	const char *s = getenv("KSFT_MACHINE_SLOW");

	return s && !strcmp(s, "yes") ? 4 : 1;
}

/* CLOCK_MONOTONIC, in milliseconds. */
unsigned long long vp_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ULL + ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC, in microseconds. */
unsigned long long vp_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
}

void vp_sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

void vp_sleep_us(unsigned int us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Write a decimal value to a parameter; 0 or -errno. */
int vp_param_set(const char *name, unsigned long v)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%lu\n", v);

	return vp_param_write(name, buf, n);
}

/*
 * vhost_test.ko, built from the kernel tree (drivers/vhost/test.c, which
 * tools/virtio builds): from vp_find_ko(), like vp_ko().
 */
static const char *vp_test_ko(void)
{
	static char buf[PATH_MAX];
	static const char *ko;
	static bool looked;

	if (!looked) {
		ko = vp_find_ko("VHOST_POLL_TEST_KO", "vhost_test", buf, sizeof(buf));
		looked = true;
	}
	return ko;
}

/* Make sure vhost_test is loaded; 0 or -errno. */
static int vp_load_vhost_test(void)
{
	int ret;

	if (!access("/dev/vhost-test", F_OK))
		return 0;
	if (!vp_test_ko())
		return -ENOENT;
	ret = vp_load_file(vp_test_ko(), "");
	return ret == -EEXIST ? 0 : ret;
}

/* Whether /proc/kallsyms names @sym: 1, 0, or -errno if it cannot be read. */
static int vp_kallsyms_has(const char *sym)
{
	char line[512], name[256];
	FILE *f = fopen("/proc/kallsyms", "re");
	int found = 0;

	if (!f)
		return -errno;
	/* Without root the addresses read 0; the names are still all there. */
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, sym) &&
			sscanf(line, "%*s %*s %255s", name) == 1 && !strcmp(name, sym);
	fclose(f);
	return found;
}

/*
 * Load the vhost drivers the tests use when they are modules (as
 * distributions build them) not loaded yet: vhost_test.ko, loaded by
 * finit_module(), needs vhost.ko, and /dev/vhost-net and /dev/vhost-vsock
 * appear with their modules. Quietly: a driver that is built in, or not
 * there at all, is the tests' to find out about. Returns how many failed.
 */
static int vp_load_vhost_drivers(void)
{
	static const char *const mods[] = { "vhost", "vhost_net", "vhost_vsock" };
	char cmd[128], dir[64];
	unsigned int i;
	int failed = 0;

	for (i = 0; i < ARRAY_SIZE(mods); i++) {
		snprintf(dir, sizeof(dir), "/sys/module/%s", mods[i]);
		if (!access(dir, F_OK))
			continue;
		snprintf(cmd, sizeof(cmd), "modprobe -q %s 2>/dev/null", mods[i]);
		failed += system(cmd) != 0;
	}
	return failed;
}

/*
 * Whether the running kernel has the hooks vhost_poll attaches to: the
 * kernel image exports vhost_poller_register (built in even with vhost a
 * module). Without /proc/kallsyms (CONFIG_KALLSYMS=n) this cannot tell,
 * and says yes: the test load in vp_cannot_run_here() tells then.
 */
static bool vp_hooks_present(void)
{
	vp_load_vhost_drivers();
	return vp_kallsyms_has("vhost_poller_register") != 0;
}

/*
 * Why the counters under VP_DEBUGFS cannot be read, or NULL; vhost_poll
 * loaded. debugfs is mounted if it is not: a CI's rootfs may not have.
 */
static const char *vp_debugfs_missing(void)
{
	struct statfs sfs;

	if ((statfs("/sys/kernel/debug", &sfs) || sfs.f_type != DEBUGFS_MAGIC) &&
	    mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL))
		return "debugfs cannot be mounted at /sys/kernel/debug (CONFIG_DEBUG_FS)";
	if (access(VP_DEBUGFS, F_OK))
		return "vhost_poll loaded but shows no " VP_DEBUGFS;
	return NULL;
}

/*
 * Why vhost_poll.ko cannot be loaded into this kernel, from the error of a
 * test load: NULL if the error is not of that kind, and the tests should
 * run and fail on it. @kmsg is /dev/kmsg opened before that load, or -1.
 */
static const char *vp_refused_why(int err, int kmsg)
{
	switch (err) {
	case ENOENT:
		return "a symbol it needs is missing: built for another kernel or config";
	case ENOEXEC:
		return "invalid module format: built for another kernel";
	case EKEYREJECTED:
		return "its signature is rejected";
	case EPERM:
		return "module loading is disabled here (modules_disabled, lockdown)";
	case EINVAL:
		/*
		 * With CONFIG_MODVERSIONS a symbol CRC of another kernel is
		 * EINVAL too, and only the log tells it from a bad argument.
		 */
		if (kmsg >= 0 && vp_kmsg_has(kmsg, "disagrees about version of symbol", NULL))
			return "a symbol's version differs: built for another kernel";
		return NULL;
	default:
		return NULL;
	}
}

/*
 * Why this test program cannot run on this machine, or NULL when it can:
 * what a CI should report as a skip of the whole program rather than as a
 * pass made of skipped tests, or as failures. Loads vhost_poll.ko once to
 * find out, and unloads it; with VP_NEEDS_VHOST_TEST (or VP_NEEDS_DEVICE,
 * if it can), leaves vhost_test loaded.
 */
static const char *vp_cannot_run_here(unsigned int needs)
{
	static char why[PATH_MAX + 128];
	const char *ko = vp_ko(), *refused, *missing = NULL;
	int ret, kmsg, i;

	if (geteuid() != 0)
		return "needs root to load modules";
	/* Built in: only a program that loads nothing else runs. */
	if (vp_builtin())
		return needs ? "vhost_poll is built in; this program loads modules" : NULL;
	if (!ko)
		return VP_KO_MISSING;
	if (access(ko, R_OK)) {
		snprintf(why, sizeof(why), "%s: %s", ko, strerror(errno));
		return why;
	}
	if (!vp_hooks_present())
		return "the running kernel lacks the vhost_poll hooks (no vhost_poller_register)";
	if (vp_loaded() && vp_unload())
		return "vhost_poll is loaded already, and in use";
	kmsg = vp_kmsg_open();
	ret = vp_load("poll_start_rate=0");
	refused = ret ? vp_refused_why(-ret, kmsg) : NULL;
	if (kmsg >= 0)
		close(kmsg);
	if (refused) {
		snprintf(why, sizeof(why), "the kernel refuses %s (%s): %s", ko,
			 strerror(-ret), refused);
		return why;
	}
	if (!ret) {
		if (needs & VP_NEEDS_DEBUGFS)
			missing = vp_debugfs_missing();
		/* It may be briefly busy (a debugfs reader): retry, as tests do. */
		for (i = 0; i < 100 && vp_unload() == -EAGAIN; i++)
			vp_sleep_ms(10);
		if (missing)
			return missing;
	}
	/* vhost-net will do for the tests that have a vhost-net variant. */
	if ((needs & VP_NEEDS_DEVICE) && vp_load_vhost_test() &&
	    (access("/dev/vhost-net", F_OK) || access("/dev/net/tun", F_OK)))
		return vp_test_ko() ? "vhost_test.ko refused; no /dev/vhost-net or /dev/net/tun" :
		       "no vhost_test.ko; no /dev/vhost-net or /dev/net/tun";
	if (needs & VP_NEEDS_VHOST_TEST) {
		ret = vp_load_vhost_test();
		if (ret && !vp_test_ko())
			return VP_TEST_KO_MISSING;
		if (ret) {
			snprintf(why, sizeof(why), "the kernel refuses %s (%s)",
				 vp_test_ko(), strerror(-ret));
			return why;
		}
	}
	return NULL;
}

/*
 * Whether the harness is asked only to list its tests or show its usage
 * (-l, -h): that needs no module, and works as any user, anywhere.
 */
static bool vp_harness_lists(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-l") || !strcmp(argv[i], "-h"))
			return true;
	return false;
}

/*
 * Whether the kernel runs on simulated time (UML's time-travel=inf-cpu,
 * on its command line): its clock moves only while the CPU idles or a
 * task delays, so work takes no time by it.
 */
bool vp_simulated_time(void)
{
	char line[4096] = "";
	FILE *f = fopen("/proc/cmdline", "re");

	if (!f)
		return false;
	if (!fgets(line, sizeof(line), f))
		line[0] = 0;
	fclose(f);
	return strstr(line, "time-travel=inf-cpu") || strstr(line, "time-travel=ext");
}

/* HZ of the kernel under test; 100, the longest jiffy Kconfig offers, if unknown. */
int vp_jiffy_hz(void)
{
	int h = vp_hz();

	return h > 0 ? h : 100;
}

/* @j jiffies in milliseconds, rounded up. */
unsigned int vp_jiffies_ms(unsigned int j)
{
	return (j * 1000 + vp_jiffy_hz() - 1) / vp_jiffy_hz();
}

/* Wait up to @ms for process @pid to have @want polled vqs. */
bool vp_wait_polled(int pid, int want, unsigned int ms)
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

/* Nanoseconds task @pid has run, from /proc/PID/sched; -1 if unknown. */
__s64 vp_task_runtime_ns(int pid)
{
	char path[64], line[256];
	long long ms, frac;
	__s64 ns = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/sched", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "se.sum_exec_runtime : %lld.%6lld", &ms, &frac) == 2) {
			ns = ms * 1000000 + frac;
			break;
		}
	fclose(f);
	return ns;
}

/* Whether every polling thread polls nothing and sleeps. */
bool vp_workers_asleep(void)
{
	struct vp_worker w[16];
	int n = vp_workers(w, 16), i;

	for (i = 0; i < n; i++)
		if (w[i].polled_vqs || vp_task_state(w[i].pid) != 'S')
			return false;
	return n > 0;
}

/* Wait up to @ms until every polling thread polls nothing and sleeps. */
bool vp_worker_settles(unsigned int ms)
{
	for (; ms; ms--) {
		if (vp_workers_asleep())
			return true;
		vp_sleep_ms(1);
	}
	return false;
}

/*
 * Load a fresh vhost_poll, and vhost-test if @vhost_test (only the tests
 * that drive it load it); a reason to skip, or NULL.
 */
const char *vp_setup_modules(bool vhost_test)
{
	const char *why = vp_cannot_run();

	if (why)
		return why;
	if (vhost_test && vp_load_vhost_test())
		return vp_test_ko() ? "vhost_test.ko refused" : VP_TEST_KO_MISSING;
	if (vp_loaded() && vp_unload())
		return "vhost_poll is loaded and busy";
	/* A failed load is the test's own assertions' to report. */
	vp_load("poll_start_rate=0 poll_stop_idle=2" VP_STEADY);
	return NULL;
}

/*
 * Before TEST_HARNESS_MAIN's work, a look at the machine: when vhost_poll
 * cannot run here at all (@needs: VP_NEEDS_*), the whole program is one
 * skip (exit status KSFT_SKIP) that a CI reports as such, not a pass made
 * of skipped tests. Returns when it can run, and when the harness is only
 * asked to list its tests or show its usage.
 */
void vp_skip_if_cannot_run(int argc, char **argv, unsigned int needs)
{
	const char *why = NULL;

	if (!vp_harness_lists(argc, argv))
		why = vp_cannot_run_here(needs);
	if (why) {
		ksft_print_header();
		ksft_exit_skip("%s\n", why);
	}
}
