/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the vhost_poll selftests: load and unload the module
 * under test, read and write its parameters, and watch the kernel log.
 */
#ifndef VHOST_POLL_SELFTEST_H
#define VHOST_POLL_SELFTEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define VP_MODULE	"vhost_poll"
#define VP_PARAMS	"/sys/module/vhost_poll/parameters/"

/* The module under test, from $VHOST_POLL_KO (set by scripts/check). */
static inline const char *vp_ko(void)
{
	const char *ko = getenv("VHOST_POLL_KO");

	return ko && *ko ? ko : NULL;
}

/* Why this test cannot run here, or NULL when it can. */
static inline const char *vp_cannot_run(void)
{
	if (geteuid() != 0)
		return "needs root to load modules";
	if (!vp_ko())
		return "VHOST_POLL_KO is not set (run through scripts/check or scripts/vm)";
	if (access(vp_ko(), R_OK))
		return "VHOST_POLL_KO names no readable file";
	return NULL;
}

static inline bool vp_loaded(void)
{
	return access("/sys/module/" VP_MODULE, F_OK) == 0;
}

/* Load module file @path with @args; 0 or -errno. */
static inline int vp_load_file(const char *path, const char *args)
{
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = syscall(SYS_finit_module, fd, args, 0);
	if (ret)
		ret = -errno;
	close(fd);
	return ret;
}

static inline int vp_load(const char *args)
{
	return vp_load_file(vp_ko(), args);
}

/* Unload module @name; 0 or -errno. */
static inline int vp_unload_name(const char *name)
{
	return syscall(SYS_delete_module, name, O_NONBLOCK) ? -errno : 0;
}

static inline int vp_unload(void)
{
	return vp_unload_name(VP_MODULE);
}

/* Read parameter @name into @buf, newline included; 0 or -errno. */
static inline int vp_param_read(const char *name, char *buf, size_t len)
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
static inline int vp_param_write(const char *name, const char *val, size_t len)
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

/* Open /dev/kmsg positioned after the records already logged. */
static inline int vp_kmsg_open(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0)
		lseek(fd, 0, SEEK_END);
	return fd;
}

/* Whether a record logged since vp_kmsg_open() contains every @needle. */
static inline bool vp_kmsg_has(int fd, const char *needle1, const char *needle2)
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

#endif /* VHOST_POLL_SELFTEST_H */
