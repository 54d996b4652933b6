// SPDX-License-Identifier: GPL-2.0
/*
 * Loading Rust modules: vhost_poll.ko (out of tree) and the kernel's own
 * rust_minimal.ko sample (in tree) load and unload with no extra build
 * flags, and modinfo describes every parameter.
 */
#include <fcntl.h>
#include "vhost_poll.h"
#include "kselftest_harness.h"

TEST(out_of_tree_module_loads)
{
	const char *why = vp_cannot_run();
	int kmsg;

	if (why)
		SKIP(return, "%s", why);
	if (vp_loaded())
		ASSERT_EQ(0, vp_unload());
	kmsg = vp_kmsg_open();
	ASSERT_LE(0, kmsg);
	ASSERT_EQ(0, vp_load(""));
	EXPECT_TRUE(vp_loaded());
	EXPECT_TRUE(vp_kmsg_has(kmsg, "vhost_poll: loaded", NULL));
	EXPECT_EQ(0, vp_unload());
	EXPECT_TRUE(vp_kmsg_has(kmsg, "vhost_poll: unloaded", NULL));
	close(kmsg);
}

TEST(in_tree_rust_sample_loads)
{
	const char *kdir = getenv("VHOST_POLL_KDIR");
	char path[512];

	if (geteuid() != 0)
		SKIP(return, "needs root to load modules");
	if (!kdir)
		SKIP(return, "VHOST_POLL_KDIR is not set (run through scripts/check)");
	snprintf(path, sizeof(path), "%s/samples/rust/rust_minimal.ko", kdir);
	if (access(path, R_OK))
		SKIP(return, "no rust_minimal.ko: CONFIG_SAMPLE_RUST_MINIMAL=m is for uml only");
	vp_unload_name("rust_minimal");
	ASSERT_EQ(0, vp_load_file(path, ""));
	EXPECT_EQ(0, access("/sys/module/rust_minimal", F_OK));
	EXPECT_EQ(0, vp_unload_name("rust_minimal"));
}

TEST(modinfo_describes_parameters)
{
	static const char *const want[] = {
		"parm=poll_start_rate:Kicks in one jiffy",
		"parmtype=poll_start_rate:uint",
		"parm=poll_stop_idle:Stop polling",
		"parmtype=poll_stop_idle:uint",
		"parm=poll_stop_idle_max:Longest idle window",
		"parmtype=poll_stop_idle_max:uint",
		"parm=poll_min_gain:Kicks per 1000 buffers",
		"parmtype=poll_min_gain:uint",
		"parm=poll_threads:Polling threads",
		"parmtype=poll_threads:uint",
		"parm=poll_max_kick_cost:Most CPU (us)",
		"parmtype=poll_max_kick_cost:uint",
		"parm=poll_max_nap:Longest sleep (us)",
		"parmtype=poll_max_nap:uint",
		"license=GPL",
		"description=Per-virtqueue adaptive polling for vhost",
	};
	char *info = NULL;
	size_t len = 0, i;
	int fd;

	if (!vp_ko() || access(vp_ko(), R_OK))
		SKIP(return, "no readable vhost_poll.ko");
	if (vp_ko_compressed(vp_ko()))
		SKIP(return, "%s is compressed: its .modinfo is not plain text", vp_ko());
	/*
	 * Read the .modinfo strings the way modinfo(8) finds them: they are
	 * NUL-separated key=value pairs somewhere in the ELF file.
	 */
	fd = open(vp_ko(), O_RDONLY);
	ASSERT_LE(0, fd);
	for (;;) {
		char chunk[65536];
		ssize_t n = read(fd, chunk, sizeof(chunk));

		ASSERT_LE(0, n);
		if (!n)
			break;
		info = realloc(info, len + n);
		ASSERT_NE(NULL, info);
		memcpy(info + len, chunk, n);
		len += n;
	}
	close(fd);
	for (i = 0; i < ARRAY_SIZE(want); i++) {
		EXPECT_NE(NULL, memmem(info, len, want[i], strlen(want[i]))) {
			TH_LOG("no \"%s\" in %s", want[i], vp_ko());
		}
	}
	free(info);
}

int main(int argc, char **argv)
{
	vp_skip_if_cannot_run(argc, argv, 0);
	return test_harness_run(argc, argv);
}
