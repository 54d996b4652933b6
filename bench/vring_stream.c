// SPDX-License-Identifier: GPL-2.0
/*
 * Stream buffers through vhost-test and print the figures: buffers per
 * second and kicks per 1000 buffers. Used by `make demo`; not a test.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "vring.h"

/* This device's rows of vhost_poll's counters, and the polling threads'. */
static void print_counters(void)
{
	static const char * const files[] = { "/sys/kernel/debug/vhost_poll/vqs",
				"/sys/kernel/debug/vhost_poll/threads" };
	char line[256];
	unsigned int i;

	for (i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "re");
		bool header = true;

		if (!f) {
			printf("(no %s: vhost_poll not loaded)\n", files[i]);
			continue;
		}
		printf("%s:\n", files[i]);
		while (fgets(line, sizeof(line), f)) {
			if (header || i == 1 || atoi(line) == getpid())
				printf("  %s", line);
			header = false;
		}
		fclose(f);
	}
}

static void usage(const char *prog)
{
	printf("Usage: %s [-n BUFFERS] [-b BATCH] [-r RING] [-E] [-c]\n"
	       "Streams BUFFERS (default 200000) buffers through /dev/vhost-test,\n"
	       "BATCH (default 1) per post, with a ring of RING (default 256)\n"
	       "entries; -E turns VIRTIO_RING_F_EVENT_IDX off. Prints one line of\n"
	       "figures and exits 0 if every buffer was used exactly once. -c also\n"
	       "prints vhost_poll's counters for this device before closing it.\n", prog);
}

int main(int argc, char **argv)
{
	unsigned long long n = 200000;
	unsigned int batch = 1, ring = 256;
	bool event_idx = true, counters = false;
	struct timespec t0, t1;
	struct vring_drv d;
	double secs;
	int c, ret;

	while ((c = getopt(argc, argv, "n:b:r:Ech")) != -1) {
		switch (c) {
		case 'n':
			n = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			batch = strtoul(optarg, NULL, 0);
			break;
		case 'r':
			ring = strtoul(optarg, NULL, 0);
			break;
		case 'E':
			event_idx = false;
			break;
		case 'c':
			counters = true;
			break;
		case 'h':
			usage(argv[0]);
			return 0;
		default:
			usage(argv[0]);
			return 2;
		}
	}
	if (!n || !batch || !ring || ring > 32768 || (ring & (ring - 1))) {
		fprintf(stderr, "vring_stream: bad -n, -b or -r (RING: a power of 2)\n");
		return 2;
	}
	ret = vring_open(&d, ring, event_idx, n);
	if (ret) {
		fprintf(stderr, "vring_stream: cannot set up /dev/vhost-test: %s\n",
			strerror(-ret));
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = vring_stream(&d, n, batch, 5000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("buffers=%llu seconds=%.3f buffers_per_s=%.0f ",
	       (unsigned long long)d.used, secs, d.used / secs);
	printf("kicks=%llu kicks_per_1000=%.2f all_used_once=%s\n",
	       (unsigned long long)d.kicks, d.used ? 1000.0 * d.kicks / d.used : 0,
	       vring_all_used_once(&d) ? "yes" : "no");
	if (ret)
		fprintf(stderr, "vring_stream: the device stalled after %llu buffers\n",
			(unsigned long long)d.used);
	ret = ret || !vring_all_used_once(&d);
	if (counters)
		print_counters();
	vring_close(&d);
	return ret;
}
