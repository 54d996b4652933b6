// SPDX-License-Identifier: GPL-2.0
/*
 * nap_cost: what a short sleep costs on this machine, for scripts/bench.
 *
 * A poller that naps through part of a predictable gap (io_uring's hybrid
 * IOPOLL, the nap a vq's steady requests would allow) pays only where a
 * nap of a few microseconds ends a few microseconds late. This times
 * clock_nanosleep() of each asked length, with the timer slack at 1 ns
 * (a kernel thread's hrtimer sleep has none to add either), and prints,
 * for each, one line of JSON: the length asked and the 10th, 50th and
 * 90th percentiles of the time the sleep took, in ns.
 *
 * The path is the one a polling thread's nap would take (an hrtimer, a
 * switch to idle or to another task, the timer's interrupt, a wake-up),
 * plus a system call each way.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include "probe_time.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: nap_cost [-n COUNT] NS...\n"
		"Times COUNT (default 1000) sleeps of each NS nanoseconds\n"
		"(clock_nanosleep, timer slack 1 ns) and prints a JSON line\n"
		"for each: {\"ns\": NS, \"p10\": .., \"p50\": .., \"p90\": ..}.\n");
}

int main(int argc, char **argv)
{
	long long *took;
	long count = 1000;
	int i = 1;

	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc > 2 && !strcmp(argv[1], "-n")) {
		count = strtol(argv[2], NULL, 10);
		i = 3;
	}
	if (i >= argc || count < 10 || count > 1000000) {
		usage(stderr);
		return 2;
	}
	if (prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0)) {
		fprintf(stderr, "nap_cost: PR_SET_TIMERSLACK: %s\n", strerror(errno));
		return 1;
	}
	took = calloc(count, sizeof(*took));
	if (!took) {
		fprintf(stderr, "nap_cost: out of memory\n");
		return 1;
	}
	for (; i < argc; i++) {
		char *end;
		long ns = strtol(argv[i], &end, 10);
		struct timespec ts;
		long k;

		if (*end || ns < 1 || ns > 999999999) {
			fprintf(stderr, "nap_cost: bad length '%s' (1 to 999999999 ns)\n", argv[i]);
			free(took);
			return 2;
		}
		ts.tv_sec = 0;
		ts.tv_nsec = ns;
		for (k = 0; k < count; k++) {
			long long t0 = now_ns();

			while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL) == EINTR)
				;
			took[k] = now_ns() - t0;
		}
		qsort(took, count, sizeof(*took), cmp_ll);
		printf("{\"ns\": %ld, \"p10\": %lld, \"p50\": %lld, \"p90\": %lld}\n",
		       ns, took[count / 10], took[count / 2], took[count * 9 / 10]);
	}
	free(took);
	return 0;
}
