/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fixture setup and teardown that the tests of teardown, of
 * neighbours, of vhost-net's queues and of poll_cpus share, and a
 * failure's trace lines. They report through the harness (SKIP,
 * ASSERT_*, TH_LOG), which only a test program includes: static inline
 * here, as the harness's own helpers are, rather than in lib/poll_util.c.
 */
#ifndef VHOST_POLL_POLL_FIXTURE_H
#define VHOST_POLL_POLL_FIXTURE_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "kselftest_harness.h"
#include "vhost_poll.h"
#include "vring.h"
#include "poll_util.h"

/* Print the recorded trace lines that contain @a: what a failure saw. */
static inline void trace_print(struct __test_metadata *_metadata, const char *a)
{
	FILE *f = fopen(TRACEFS "trace", "re");
	char line[512];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, a))
			TH_LOG("%s", strtok(line, "\n"));
	fclose(f);
}

/* The setup of the teardown fixtures, for tests on @dev. */
static inline void teardown_open(struct __test_metadata *_metadata, enum vring_dev dev)
{
	const char *why = vp_setup_modules(dev == VRING_TEST);

	if (why)
		SKIP(return, "%s", why);
	td_dev = dev;
	if (td_dev == VRING_NET && (access("/dev/vhost-net", F_OK) || access("/dev/net/tun", F_OK)))
		SKIP(return, "no /dev/vhost-net or /dev/net/tun (CONFIG_VHOST_NET, CONFIG_TUN)");
	ASSERT_TRUE(vp_loaded());
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", vp_jiffy_hz()));
}

static inline void teardown_close(struct __test_metadata *_metadata)
{
	if (vp_loaded())
		EXPECT_EQ(0, vp_unload());
}

#endif /* VHOST_POLL_POLL_FIXTURE_H */
