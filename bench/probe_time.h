/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The clock and the sort of the benchmark's timing probes (nap_cost,
 * cost_probe): each times many short events and reports percentiles.
 */
#ifndef VHOST_POLL_PROBE_TIME_H
#define VHOST_POLL_PROBE_TIME_H

#include <time.h>

static inline long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* qsort()'s comparison of two long longs, in increasing order. */
static inline int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

#endif
