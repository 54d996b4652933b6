// SPDX-License-Identifier: GPL-2.0
/*
 * cost_probe: what the events on a request's path cost on this machine,
 * for the cost model of scripts/bench.
 *
 * scripts/bench counts the events one request costs (kicks, wake-ups,
 * those that cross CPUs, idle entries, address-space switches); this
 * times each kind here, so that counts times costs can be checked
 * against the latencies measured in the same boot. Each probe prints
 * one JSON line: {"probe": NAME, "p10": NS, "p50": NS, "p90": NS, "n": N}.
 *
 *   evfd_write        an eventfd write nobody waits for: a kick from a
 *                     process, a system call
 *   wake_local        half a ping-pong of two threads on one CPU over two
 *                     eventfds: a write, a wake-up, a switch, the read's
 *                     return
 *   wake_local_mm     the same between two processes: adds an
 *                     address-space switch
 *   wake_remote_idle  two threads on two CPUs, nothing else there: adds
 *                     the wake-up's IPI and the target CPU's idle exit
 *   wake_remote_busy  the same with a SCHED_IDLE spinner on each CPU, so
 *                     that neither goes idle: the IPI without the idle exit
 *
 * The remote probes need two online CPUs; with one they print
 * {"probe": NAME, "skip": REASON}.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>
#include "probe_time.h"

struct pingpong {
	int ping, pong;		/* eventfds: to the responder, and back */
	long rounds;
	int cpu;		/* the responder's CPU */
};

static int spinners_stop;

/* The first two CPUs this process may run on, in @cpu; how many of two. */
static int two_cpus(int cpu[2])
{
	cpu_set_t set;
	int c, n = 0;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 0;
	for (c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &set))
			cpu[n++] = c;
	return n;
}

static int pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
}

static void report(const char *name, long long *ns, long n)
{
	qsort(ns, n, sizeof(*ns), cmp_ll);
	printf("{\"probe\": \"%s\", \"p10\": %lld, \"p50\": %lld, \"p90\": %lld, \"n\": %ld}\n",
	       name, ns[n / 10], ns[n / 2], ns[n * 9 / 10], n);
	fflush(stdout);
}

static void print_skip(const char *name, const char *why)
{
	printf("{\"probe\": \"%s\", \"skip\": \"%s\"}\n", name, why);
	fflush(stdout);
}

/* A side that waits this long for the other has lost it. */
#define WAIT_MS 5000

static int evfd_wait(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	__u64 v;
	int n;

	do
		n = poll(&p, 1, WAIT_MS);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n ? -errno : -ETIMEDOUT;
	while (read(fd, &v, sizeof(v)) != sizeof(v))
		if (errno != EINTR)
			return -errno;
	return 0;
}

static int evfd_post(int fd)
{
	__u64 v = 1;

	return write(fd, &v, sizeof(v)) == sizeof(v) ? 0 : -errno;
}

/*
 * The responder: wait for a ping, answer with a pong, @rounds times. On
 * a failure it still answers once, so that the initiator sees it end.
 */
static void *responder(void *arg)
{
	struct pingpong *p = arg;
	long i;

	if (pin_self(p->cpu)) {
		evfd_post(p->pong);
		return (void *)1L;
	}
	for (i = 0; i < p->rounds; i++)
		if (evfd_wait(p->ping) || evfd_post(p->pong)) {
			evfd_post(p->pong);
			return (void *)1L;
		}
	return NULL;
}

/* The initiator's side, on CPU @cpu: half of each round trip into @ns. */
static int initiate(struct pingpong *p, int cpu, long long *ns)
{
	long i;

	if (pin_self(cpu))
		return -1;
	for (i = 0; i < p->rounds; i++) {
		long long t0 = now_ns();

		if (evfd_post(p->ping) || evfd_wait(p->pong))
			return -1;
		ns[i] = (now_ns() - t0) / 2;
	}
	return 0;
}

static int pingpong_open(struct pingpong *p, long rounds, int cpu)
{
	p->ping = eventfd(0, EFD_CLOEXEC);
	p->pong = eventfd(0, EFD_CLOEXEC);
	p->rounds = rounds;
	p->cpu = cpu;
	return p->ping < 0 || p->pong < 0 ? -1 : 0;
}

static void pingpong_close(struct pingpong *p)
{
	close(p->ping);
	close(p->pong);
}

/* Threads: the responder on @rcpu, the initiator on @icpu. */
static int probe_threads(const char *name, long rounds, int icpu, int rcpu, long long *ns)
{
	struct pingpong p;
	pthread_t t;
	void *rc = NULL;
	int err;

	if (pingpong_open(&p, rounds, rcpu))
		return -1;
	if (pthread_create(&t, NULL, responder, &p)) {
		pingpong_close(&p);
		return -1;
	}
	err = initiate(&p, icpu, ns);
	if (err)
		pthread_cancel(t);
	pthread_join(t, &rc);
	pingpong_close(&p);
	if (err || rc)
		return -1;
	report(name, ns, rounds);
	return 0;
}

/* Processes: the responder a child on the initiator's CPU. */
static int probe_processes(const char *name, long rounds, int cpu, long long *ns)
{
	struct pingpong p;
	int status, err;
	pid_t pid;

	if (pingpong_open(&p, rounds, cpu))
		return -1;
	pid = fork();
	if (pid < 0) {
		pingpong_close(&p);
		return -1;
	}
	if (!pid)
		_exit(responder(&p) ? 1 : 0);
	err = initiate(&p, cpu, ns);
	if (err)
		kill(pid, SIGKILL);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		err = -1;
	pingpong_close(&p);
	if (err)
		return -1;
	report(name, ns, rounds);
	return 0;
}

static void *spinner(void *arg)
{
	struct sched_param sp = { 0 };

	if (pin_self((int)(long)arg) || sched_setscheduler(0, SCHED_IDLE, &sp))
		return (void *)1L;
	while (!__atomic_load_n(&spinners_stop, __ATOMIC_RELAXED))
		;
	return NULL;
}

static int probe_evfd_write(long rounds, int cpu, long long *ns)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	__u64 v;
	long i;

	if (fd < 0 || pin_self(cpu))
		return -1;
	for (i = 0; i < rounds; i++) {
		long long t0 = now_ns();

		if (evfd_post(fd))
			break;
		ns[i] = now_ns() - t0;
		/* Empty it now and then: an eventfd counter saturates. */
		if (!(i & 1023) && read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			break;
	}
	close(fd);
	if (i < rounds)
		return -1;
	report("evfd_write", ns, rounds);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: cost_probe [-n COUNT]\n"
		"Times COUNT (default 2000) of each event a request's path is made of\n"
		"(evfd_write, wake_local, wake_local_mm, wake_remote_idle,\n"
		"wake_remote_busy) and prints a JSON line for each:\n"
		"{\"probe\": NAME, \"p10\": NS, \"p50\": NS, \"p90\": NS, \"n\": COUNT}.\n");
}

int main(int argc, char **argv)
{
	pthread_t spin[2];
	long long *ns;
	long count = 2000;
	int cpu[2] = { 0, 0 };
	bool two;
	int i, fail = 0;

	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "-n"))
		count = strtol(argv[2], NULL, 10);
	else if (argc != 1)
		count = 0;
	if (count < 10 || count > 1000000) {
		usage(stderr);
		return 2;
	}
	ns = calloc(count, sizeof(*ns));
	if (!ns) {
		fprintf(stderr, "cost_probe: out of memory\n");
		return 1;
	}
	two = two_cpus(cpu) == 2;
	if (probe_evfd_write(count, cpu[0], ns)) {
		fprintf(stderr, "cost_probe: evfd_write: %s\n", strerror(errno));
		fail = 1;
	}
	if (probe_threads("wake_local", count, cpu[0], cpu[0], ns)) {
		fprintf(stderr, "cost_probe: wake_local: %s\n", strerror(errno));
		fail = 1;
	}
	if (probe_processes("wake_local_mm", count, cpu[0], ns)) {
		fprintf(stderr, "cost_probe: wake_local_mm: %s\n", strerror(errno));
		fail = 1;
	}
	if (!two) {
		print_skip("wake_remote_idle", "one CPU allowed");
		print_skip("wake_remote_busy", "one CPU allowed");
		free(ns);
		return fail;
	}
	if (probe_threads("wake_remote_idle", count, cpu[0], cpu[1], ns)) {
		fprintf(stderr, "cost_probe: wake_remote_idle: %s\n", strerror(errno));
		fail = 1;
	}
	for (i = 0; i < 2; i++)
		if (pthread_create(&spin[i], NULL, spinner, (void *)(long)cpu[i])) {
			fprintf(stderr, "cost_probe: no spinner thread\n");
			free(ns);
			return 1;
		}
	if (probe_threads("wake_remote_busy", count, cpu[0], cpu[1], ns)) {
		fprintf(stderr, "cost_probe: wake_remote_busy: %s\n", strerror(errno));
		fail = 1;
	}
	__atomic_store_n(&spinners_stop, 1, __ATOMIC_RELAXED);
	for (i = 0; i < 2; i++) {
		void *rc;

		pthread_join(spin[i], &rc);
		if (rc) {
			fprintf(stderr,
				"cost_probe: a spinner could not pin itself or be SCHED_IDLE\n");
			fail = 1;
		}
	}
	free(ns);
	return fail;
}
