// SPDX-License-Identifier: GPL-2.0
/*
 * Storms: nothing stranded, nothing wedged. One shared thread polls the
 * rings of many owners, and an owner may be racy or hostile: it opens and
 * closes devices as fast as it can, is killed mid-stream, reconfigures its
 * ring under the poller, hammers the parameters, shows rings no device can
 * take, or has the module unloaded and loaded again under its streams. Or
 * it does what a VMM does: hands a device to another process, logs the
 * device's writes for a migration, or opens hundreds of devices at once.
 *
 * Each storm runs many rounds of one such operation while well-behaved
 * devices stream with polling on, and checks what must hold whatever the
 * rounds hit:
 *
 *  - every buffer of a well-behaved device is used exactly once;
 *  - no well-behaved device stalls (takes nothing for STALL_MS);
 *  - once the storm is over the shared thread polls nothing and sleeps;
 *  - the kernel logged no splat (BUG, WARNING, lockdep, KASAN, UBSAN, ...).
 *
 * VHOST_POLL_STORM scales the rounds: 20 by default (the short form of
 * make check), 1000 for the long run.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include "vhost_poll.h"
#include "vring.h"
#include "poll_util.h"
/*
 * The 6.12 harness is not -Wextra clean: its timeout handler ignores an
 * argument, and each TEST_F wrapper keeps a variable across its setjmp
 * (which it reads only where it was not changed). Neither is this file's.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kselftest_harness.h"
#pragma GCC diagnostic pop
/* -Wclobbered is gcc's alone: clang would warn of an unknown warning. */
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wclobbered"
#endif

/* RING, STALL_MS and RATE_LOW are poll_util.h's. */
#define STORM_DEFAULT	20
/* Buffers a streaming driver's bitmap covers: checked, then started over. */
#define SEGMENT		65536
/* Buffers of one vring_stream() call of a streaming thread. */
#define CHUNK		1000

/* The storm's scale, from $VHOST_POLL_STORM. */
static unsigned int storm_n(void)
{
	const char *s = getenv("VHOST_POLL_STORM");
	unsigned long n;
	char *end;

	if (!s || !*s)
		return STORM_DEFAULT;
	errno = 0;
	n = strtoul(s, &end, 10);
	if (errno || *end || !n || n > 1000000)
		return STORM_DEFAULT;
	return n;
}

/*
 * The harness kills a test after its timeout (30 s by default); a storm
 * runs longer as it is scaled up. Evaluated when the test registers.
 */
static int storm_timeout(void)
{
	return 30 + 2 * storm_n();
}

/* Wait up to @ms for any vq of this process to be polled. */
static bool wait_any_polled(unsigned int ms)
{
	struct vp_vq_row sum;
	int polled;

	for (; ms; ms--) {
		if (vp_vq_sum(getpid(), -1, &sum, &polled) > 0 && polled)
			return true;
		vp_sleep_ms(1);
	}
	return false;
}

/*
 * The storm is over and its devices are idle: the shared thread must poll
 * nothing and sleep. A short idle limit first, so that the check does not
 * wait out the second-long one the storm ran with.
 */
static bool storm_settles(void)
{
	if (vp_param_set("poll_stop_idle", 2))
		return false;
	return vp_worker_settles(STALL_MS);
}

/* Unload vhost_poll, retrying for up to @ms while it is busy; 0 or -errno. */
static int unload_retry(unsigned int ms, unsigned int *retries)
{
	unsigned long long t0 = vp_now_ms();
	int ret;

	for (;;) {
		ret = vp_unload();
		if ((ret != -EBUSY && ret != -EAGAIN) || vp_now_ms() - t0 >= ms)
			return ret;
		if (retries)
			(*retries)++;
		vp_sleep_ms(10);
	}
}

/*
 * Count the kernel log records since @fd was opened that show a kernel bug,
 * and log the first few: a storm passes only if the kernel stayed quiet.
 */
static int kmsg_splats(struct __test_metadata *_metadata, int fd)
{
	static const char *const signs[] = {
		"BUG:", "WARNING:", "INFO: task", "Oops", "KASAN", "UBSAN",
		"possible circular locking", "inconsistent lock state",
		"sleeping function called",
	};
	/* A read smaller than a record fails (EINVAL) and skips it: room for any. */
	static char rec[8192];
	int found = 0;
	char *msg;
	size_t i;
	ssize_t n;

	for (;;) {
		n = read(fd, rec, sizeof(rec) - 1);
		if (n < 0 && (errno == EPIPE || errno == EINTR))
			continue;	/* overwritten records: go on */
		if (n <= 0)
			break;		/* EAGAIN: no more records */
		rec[n] = '\0';
		for (i = 0; i < ARRAY_SIZE(signs); i++)
			if (strstr(rec, signs[i]))
				break;
		if (i == ARRAY_SIZE(signs) || found++ >= 5)
			continue;
		/* "prio,seq,time,flags;message": the message is what tells. */
		msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		msg[strcspn(msg, "\n")] = '\0';
		TH_LOG("kernel log: %s", msg);
	}
	return found;
}

/* What a failed stream returned, in words. */
static const char *fail_name(int ret)
{
	switch (ret) {
	case -ETIMEDOUT:
		return "stalled: nothing used for STALL_MS";
	case -EIO:
		return "a buffer lost, used twice or unknown";
	default:
		return strerror(-ret);
	}
}

/* What one driver saw: buffers checked, and its longest wait. */
struct tally {
	/* Buffers found used exactly once. */
	unsigned long long checked;
	/* The longest one stream or drain took, in ms. */
	unsigned long long worst_ms;
};

static void tally_ms(struct tally *t, unsigned long long t0)
{
	unsigned long long ms = vp_now_ms() - t0;

	if (ms > t->worst_ms)
		t->worst_ms = ms;
}

static void tally_add(struct tally *sum, const struct tally *t)
{
	sum->checked += t->checked;
	if (t->worst_ms > sum->worst_ms)
		sum->worst_ms = t->worst_ms;
}

/*
 * Check that every buffer @d posted so far was used exactly once, count
 * them, and start its bitmap over, so that a driver can stream for as
 * long as a storm lasts. @d must be drained: no descriptor holds a
 * buffer, so the sequence numbers can start again. 0 or -EIO.
 */
static int check_segment(struct vring_drv *d, struct tally *t)
{
	if (!vring_all_used_once(d))
		return -EIO;
	t->checked += d->posted;
	memset(d->used_map, 0, (d->map_bits + 7) / 8);
	d->posted = 0;
	d->used = 0;
	return 0;
}

/* Make room in drained @d's bitmap for @n more buffers; 0 or -EIO. */
static int make_room(struct vring_drv *d, unsigned int n, struct tally *t)
{
	return d->posted + n + 1 < d->map_bits ? 0 : check_segment(d, t);
}

/* vring_stream(), timed; room for @n buffers made by the caller. */
static int stream_timed(struct vring_drv *d, unsigned int n, unsigned int batch,
			struct tally *t)
{
	unsigned long long t0 = vp_now_ms();
	int ret = vring_stream(d, n, batch, STALL_MS);

	tally_ms(t, t0);
	return ret;
}

static int drain_timed(struct vring_drv *d, struct tally *t)
{
	unsigned long long t0 = vp_now_ms();
	int ret = vring_drain(d, STALL_MS);

	tally_ms(t, t0);
	return ret;
}

/*
 * After each chunk, a driver that streams until it is stopped or killed
 * rests 100 us when it shares one CPU with everything else. Under
 * simulated time (UML's time-travel=inf-cpu) the clock moves only while
 * the CPU idles, and a driver that never sleeps keeps it from idling:
 * sigkill_mid_stream's waits of a millisecond took seconds, and its
 * second of waiting for an owner to be polled outlasted the run. On a
 * real clock the rest is a tenth of a chunk's time or less.
 */
static void chunk_rest(void)
{
	static int cpus;

	if (!cpus)
		cpus = vp_ncpus();
	if (cpus < 2)
		vp_sleep_us(100);
}

/* A well-behaved device, streamed by a thread of its own until stopped. */
struct streamer {
	struct vring_drv d;
	pthread_t t;
	unsigned int batch;
	/* Set by the main thread: end after the current chunk. */
	int stop;
	/* Chunks streamed, and whether the thread is done; read while it runs. */
	unsigned int rounds;
	int done;
	/* An eventfd the thread adds 1 to after each chunk. */
	int progress;
	/* 0, or why the stream ended: -ETIMEDOUT (a stall), -EIO. */
	int ret;
	struct tally tally;
};

/* Add 1 to eventfd @fd: it would take 2^64 - 2 of them to fill. */
static void eventfd_add1(int fd)
{
	__u64 one = 1;
	ssize_t n = write(fd, &one, sizeof(one));

	(void)n;
}

static void *streamer_run(void *arg)
{
	struct streamer *s = arg;
	int ret;

	/* Kicks past the rate: the stream runs polled from the start. */
	vring_post_kicked(&s->d, 4 * RATE_LOW);
	ret = drain_timed(&s->d, &s->tally);
	while (!ret && !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		ret = make_room(&s->d, CHUNK, &s->tally);
		if (!ret)
			ret = stream_timed(&s->d, CHUNK, s->batch, &s->tally);
		__atomic_add_fetch(&s->rounds, 1, __ATOMIC_RELEASE);
		eventfd_add1(s->progress);
		chunk_rest();
	}
	if (!ret)
		ret = check_segment(&s->d, &s->tally);
	s->ret = ret;
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Open a vhost-test device and stream it in a new thread; 0 or -errno. */
static int streamer_start(struct streamer *s, unsigned int batch)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->batch = batch;
	s->progress = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->progress < 0)
		return -errno;
	ret = vring_open(&s->d, RING, true, SEGMENT);
	if (!ret)
		ret = -pthread_create(&s->t, NULL, streamer_run, s);
	if (ret) {
		vring_close(&s->d);
		close(s->progress);
	}
	return ret;
}

/* End @s's stream; the device stays open. 0, or why the stream failed. */
static int streamer_stop(struct streamer *s)
{
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	pthread_join(s->t, NULL);
	close(s->progress);
	return s->ret;
}

/*
 * Wait @ms, or until @s has streamed @chunks more chunks, whichever comes
 * first; returns whether the chunks came first. Under simulated time
 * (UML's time-travel=inf-cpu) the clock moves only while the CPU idles
 * or the polling thread pauses, and a neighbour that streams keeps both
 * from happening: a wait bounded by the clock alone lasts as long as the
 * neighbour takes to stream through it (millions of buffers for a few
 * jiffies); bounded by its chunks too, about as long as on a real clock.
 */
static bool streamer_wait(struct streamer *s, unsigned int chunks, unsigned int ms)
{
	struct pollfd p = { .fd = s->progress, .events = POLLIN };
	unsigned long long t0 = vp_now_ms(), spent;
	unsigned int got = 0;
	__u64 n;

	/* Only the chunks from now on. */
	if (read(s->progress, &n, sizeof(n)) < 0 && errno != EAGAIN)
		return false;
	while (got < chunks) {
		spent = vp_now_ms() - t0;
		if (spent >= ms || poll(&p, 1, ms - spent) <= 0)
			return false;
		if (read(s->progress, &n, sizeof(n)) == sizeof(n))
			got += n;
	}
	return true;
}

/*
 * The row of a vq of process @pid on another device than @skip_dev; 1 if
 * there is one, 0 if not, or -errno. Devices are numbered in the table as
 * they attach, which tells two devices of one process apart.
 */
static int other_row(int pid, unsigned int skip_dev, struct vp_vq_row *row)
{
	struct vp_vq_row rows[256];
	int n = vp_vq_rows(rows, 256), i;

	for (i = 0; i < n; i++) {
		if (rows[i].pid == pid && rows[i].dev != skip_dev) {
			*row = rows[i];
			return 1;
		}
	}
	return n < 0 ? n : 0;
}

FIXTURE(storm) {
	int kmsg;
	unsigned int n;
};

FIXTURE_SETUP(storm)
{
	const char *why;

	/* From before the modules load: a splat while loading counts too. */
	self->kmsg = vp_kmsg_open();
	why = vp_setup_modules(true);
	if (why)
		SKIP(return, "%s", why);
	ASSERT_LE(0, self->kmsg);
	ASSERT_TRUE(vp_loaded());
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", vp_jiffy_hz()));
	self->n = storm_n();
}

FIXTURE_TEARDOWN(storm)
{
	/* The unload is part of the storm: its splats count. */
	if (vp_loaded())
		EXPECT_EQ(0, unload_retry(1000, NULL));
	/* The hand-backs queued at the unload run in the owners' workers. */
	vp_sleep_ms(vp_jiffies_ms(2) + 10);
	EXPECT_EQ(0, kmsg_splats(_metadata, self->kmsg)) {
		TH_LOG("the kernel logged a splat during the storm");
	}
	close(self->kmsg);
}

#define CYCLERS		2

/* A thread that opens, polls, streams and closes device after device. */
struct cycler {
	pthread_t t;
	unsigned int cycles, done;
	int finished;
	int ret;
	const char *step;
	struct tally tally;
};

static void *cycler_run(void *arg)
{
	struct cycler *c = arg;
	struct vring_drv d;

	for (c->done = 0; c->done < c->cycles; c->done++) {
		c->step = "open";
		c->ret = vring_open(&d, RING, true, 1024);
		if (!c->ret) {
			/* Kicks past the rate: the vq is polled as it streams. */
			c->step = "stream";
			vring_post_kicked(&d, 4 * RATE_LOW);
			c->ret = stream_timed(&d, 500, 16, &c->tally);
		}
		if (!c->ret) {
			c->step = "check";
			c->ret = check_segment(&d, &c->tally);
		}
		/* Closed polled, or about to be: the race this storm is for. */
		vring_close(&d);
		if (c->ret)
			break;
	}
	__atomic_store_n(&c->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * 1. Devices come and go as fast as two threads can open, poll, stream and
 * close them: attach and detach race with the poller's visits and with
 * each other. Every stream completes, every buffer used once.
 */
TEST_F_TIMEOUT(storm, open_stream_close, storm_timeout())
{
	unsigned int i, samples = 0, hot = 0, cycles = 0;
	struct cycler c[CYCLERS];
	struct tally all = { 0 };
	struct vp_vq_row sum;
	bool running = true;
	int polled;

	memset(c, 0, sizeof(c));
	for (i = 0; i < CYCLERS; i++) {
		c[i].cycles = self->n;
		ASSERT_EQ(0, pthread_create(&c[i].t, NULL, cycler_run, &c[i]));
	}
	/*
	 * Sample the table while they run: proof that the storm ran with
	 * polling on, and a reader of the table racing the detaches.
	 */
	while (running) {
		if (vp_vq_sum(getpid(), -1, &sum, &polled) > 0) {
			samples++;
			hot += polled > 0;
		}
		vp_sleep_ms(5);
		running = false;
		for (i = 0; i < CYCLERS; i++)
			running |= !__atomic_load_n(&c[i].finished, __ATOMIC_ACQUIRE);
	}
	for (i = 0; i < CYCLERS; i++) {
		pthread_join(c[i].t, NULL);
		EXPECT_EQ(0, c[i].ret) {
			TH_LOG("thread %u, cycle %u: %s: %s", i, c[i].done, c[i].step,
			       fail_name(c[i].ret));
		}
		cycles += c[i].done;
		tally_add(&all, &c[i].tally);
	}
	TH_LOG("%u cycles, %llu buffers checked, worst stall %llu ms; polled in %u of %u samples",
	       cycles, all.checked, all.worst_ms, hot, samples);
	EXPECT_TRUE(storm_settles());
}

/*
 * An owner that streams until it is killed; it returns only on failure,
 * with its exit status: 1, its device did not open; 2, it stalled; 3, a
 * buffer lost or doubled.
 */
static int doomed_owner(void)
{
	struct tally t = { 0 };
	struct vring_drv d;

	/* Should the test end before it kills this owner, it goes too. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (vring_open(&d, RING, true, SEGMENT))
		return 1;
	vring_post_kicked(&d, 4 * RATE_LOW);
	if (vring_drain(&d, STALL_MS))
		return 2;
	for (;;) {
		if (make_room(&d, CHUNK, &t))
			return 3;
		if (vring_stream(&d, CHUNK, 1, STALL_MS))
			return 2;
		chunk_rest();
	}
}

/* Rows the table may hold here: 256 devices at once (storm 9), and room. */
#define ROWS_MAX	1024

/* How many rows of the table belong to one of @pids; the first in *@first. */
static int rows_of(const pid_t *pids, unsigned int n, pid_t *first)
{
	struct vp_vq_row *rows = calloc(ROWS_MAX, sizeof(*rows));
	int nr = rows ? vp_vq_rows(rows, ROWS_MAX) : -ENOMEM, i, found = 0;
	unsigned int j;

	for (i = 0; i < nr; i++) {
		for (j = 0; j < n; j++) {
			if (rows[i].pid == pids[j] && !found++)
				*first = pids[j];
		}
	}
	free(rows);
	return nr < 0 ? nr : found;
}

/*
 * Wait up to a second for the table to hold no row of @pids, processes
 * that own no device any more: they exited, or gave their devices up.
 * Returns how many rows are left (the first one's pid in *@first).
 */
static int rows_gone(const pid_t *pids, unsigned int n, pid_t *first)
{
	unsigned long long t0 = vp_now_ms();
	int left;

	while ((left = rows_of(pids, n, first)) && vp_now_ms() - t0 < 1000)
		vp_sleep_ms(10);
	return left;
}

/*
 * 2. Owners SIGKILLed while their vq is polled, or on the way to it: the
 * killed worker's vq is forgotten, the device released, and a neighbour
 * streaming the whole time never waits for any of it.
 */
TEST_F_TIMEOUT(storm, sigkill_mid_stream, storm_timeout())
{
	unsigned int i, hot = 0, early = 0;
	int status, first_status = 0, ret, left;
	struct streamer s;
	pid_t *killed, pid, stays = 0;

	killed = calloc(self->n, sizeof(*killed));
	ASSERT_NE(NULL, killed);
	ASSERT_EQ(0, streamer_start(&s, 16));
	for (i = 0; i < self->n; i++) {
		pid = fork();
		ASSERT_LE(0, pid);
		if (!pid)
			_exit(doomed_owner());
		killed[i] = pid;
		/* Polled, or not yet: it is killed either way. */
		hot += vp_wait_polled(pid, 1, 1000);
		/* At a different point of its stream each time. */
		vp_sleep_us((i % 4) * 500);
		ASSERT_EQ(0, kill(pid, SIGKILL));
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		if ((!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) && !early++)
			first_status = status;
	}
	ret = streamer_stop(&s);
	EXPECT_EQ(0, ret) TH_LOG("the neighbour: %s", fail_name(ret));
	EXPECT_EQ(0U, early) {
		TH_LOG("%u owners ended unkilled, the first with status 0x%x",
		       early, first_status);
	}
	/* Their devices were released as they died: their rows go. */
	left = rows_gone(killed, self->n, &stays);
	EXPECT_EQ(0, left) {
		TH_LOG("%d rows of killed owners left (pid %d) after 1 s", left, stays);
	}
	TH_LOG("%u owners killed (%u polled); %llu buffers checked, worst stall %llu ms",
	       i, hot, s.tally.checked, s.tally.worst_ms);
	EXPECT_TRUE(storm_settles());
	vring_close(&s.d);
	free(killed);
}

/* Reconfigurations that take a vq out of poll mode: each with the same values. */
enum reconf { RC_MEM_TABLE, RC_VRING_CALL, RC_VRING_KICK, RC_BACKEND, RC_N };

static const char *const reconf_name[RC_N] = {
	"SET_MEM_TABLE", "SET_VRING_CALL", "SET_VRING_KICK", "TEST_RUN 0, 1",
};

static int reconfigure(struct vring_drv *d, enum reconf how)
{
	struct vhost_vring_file f = { .index = d->index };
	int ret;

	switch (how) {
	case RC_MEM_TABLE:
		return vring_set_mem(d, d->arena, d->arena_len);
	case RC_VRING_CALL:
		f.fd = d->call;
		return ioctl(d->fd, VHOST_SET_VRING_CALL, &f) ? -errno : 0;
	case RC_VRING_KICK:
		f.fd = d->kick;
		return ioctl(d->fd, VHOST_SET_VRING_KICK, &f) ? -errno : 0;
	default:
		ret = vring_run(d, 0);
		if (!ret)
			ret = vring_run(d, 1);
		/*
		 * A restarted vhost-test backend looks at its ring only when
		 * told to, polled or not (vhost_test_run() runs no handler): a
		 * driver notifies after a restart, as QEMU does when it starts
		 * vhost. The buffers in flight are then the device's to take.
		 */
		if (!ret)
			vring_kick(d);
		return ret;
	}
}

/* Buffers one round of the reconfiguration storm posts. */
#define RECONF_ROUND	(4 * RATE_LOW + 200 + RING / 2)

/*
 * 3. A polled device reconfigured with buffers in flight, again and again:
 * each vring ioctl, memory table or backend restart takes the vq out of
 * poll mode, and the buffers the poller saw but did not take must still
 * be used, once. One thread does it all: post, reconfigure, drain.
 */
TEST_F_TIMEOUT(storm, reconfigure_mid_stream, storm_timeout())
{
	/* Each round is cheap: ten per unit of scale. */
	const unsigned int ops = 10 * self->n;
	unsigned int done[RC_N] = { 0 }, hot[RC_N] = { 0 }, i;
	struct tally t = { 0 };
	struct vp_vq_row sum;
	struct vring_drv d;
	enum reconf how;
	int polled, ret;

	ASSERT_EQ(0, vring_open(&d, RING, true, SEGMENT));
	vring_post_kicked(&d, 4 * RATE_LOW);
	ASSERT_EQ(0, drain_timed(&d, &t));
	ASSERT_TRUE(vp_wait_polled(getpid(), 1, STALL_MS));
	for (i = 0; i < ops; i++) {
		how = i % RC_N;
		ASSERT_EQ(0, make_room(&d, RECONF_ROUND, &t));
		/* Back to poll mode, if the last round took it out. */
		vring_post_kicked(&d, 4 * RATE_LOW);
		ret = stream_timed(&d, 200, 1, &t);
		ASSERT_EQ(0, ret) TH_LOG("round %u: %s", i, fail_name(ret));
		/* In flight as the vq leaves: kicked only if the device asks. */
		vring_post(&d, RING / 2);
		if (vp_vq_sum(getpid(), d.index, &sum, &polled) == 1 && polled)
			hot[how]++;
		ret = reconfigure(&d, how);
		ASSERT_EQ(0, ret) TH_LOG("%s: %s", reconf_name[how], strerror(-ret));
		ret = drain_timed(&d, &t);
		ASSERT_EQ(0, ret) {
			TH_LOG("%s with buffers in flight: %llu of %llu never used",
			       reconf_name[how], (unsigned long long)(d.posted - d.used),
			       (unsigned long long)d.posted);
		}
		done[how]++;
	}
	ASSERT_EQ(0, check_segment(&d, &t));
	ASSERT_EQ(1, vp_vq_sum(getpid(), d.index, &sum, &polled));
	for (how = 0; how < RC_N; how++)
		TH_LOG("%s: %u times, %u of them while polled", reconf_name[how], done[how],
		       hot[how]);
	TH_LOG("%u reconfigurations, %llu buffers checked, worst stall %llu ms; %llu poll entries",
	       ops, t.checked, t.worst_ms, sum.enters);
	EXPECT_TRUE(storm_settles());
	vring_close(&d);
}

#define PARAM_STREAMERS	4

/* A parameter and the values the storm writes to it. */
struct param_plan {
	const char *name;
	const unsigned int *valid;
	unsigned int nvalid;
	/* The value of the last valid write, which a bad one must leave. */
	unsigned int last;
	unsigned int next_valid, next_invalid;
};

/* A bad value; sysfs drops an empty write before the parameter sees it. */
static int invalid_ret(const char *val)
{
	return *val ? -EINVAL : 0;
}

/*
 * 4. The parameters written as fast as the main thread can, valid and
 * invalid values in turn, while four devices stream: polling starts and
 * stops under the streams (rate 0 stops every vq, 1000 starts none, an
 * idle limit of 1 jiffy stops them between batches). Valid writes take,
 * bad ones fail and leave the last valid value.
 */
TEST_F_TIMEOUT(storm, param_storm, storm_timeout())
{
	static const unsigned int rates[] = { 0, 1, 4, 1000 };
	static const unsigned int idles[] = { 1, 2, 100 };
	static const char *const invalid[] = {
		"-1", "abc", "", "99999999999999999999", "4x",
	};
	/* 10,000 in all at most: the long form repeats nothing new here. */
	const unsigned int writes = self->n * 500 < 10000 ? self->n * 500 : 10000;
	struct param_plan plan[2] = {
		{ "poll_start_rate", rates, ARRAY_SIZE(rates), RATE_LOW, 0, 0 },
		{ "poll_stop_idle", idles, ARRAY_SIZE(idles), vp_jiffy_hz(), 0, 0 },
	};
	unsigned int bad_valid = 0, bad_invalid = 0, bad_read = 0, base[PARAM_STREAMERS];
	struct streamer s[PARAM_STREAMERS];
	unsigned int w, i, v, moved;
	struct tally all = { 0 };
	unsigned long long t0;
	char buf[64], want[32];
	struct param_plan *p;
	const char *val;
	int ret;

	/* Batches of 1, 4, 16 and 64: kick patterns the rate sees differently. */
	for (i = 0; i < PARAM_STREAMERS; i++)
		ASSERT_EQ(0, streamer_start(&s[i], 1 << (2 * i)));
	for (w = 0; w < writes; w++) {
		p = &plan[(w / 2) % 2];
		if (!(w & 1)) {
			v = p->valid[p->next_valid++ % p->nvalid];
			ret = vp_param_set(p->name, v);
			if (ret && !bad_valid++)
				TH_LOG("%s=%u: %s", p->name, v, strerror(-ret));
			if (!ret)
				p->last = v;
			continue;
		}
		val = invalid[p->next_invalid++ % ARRAY_SIZE(invalid)];
		ret = vp_param_write(p->name, val, strlen(val));
		if (ret != invalid_ret(val) && !bad_invalid++)
			TH_LOG("%s=\"%s\" returned %d", p->name, val, ret);
		snprintf(want, sizeof(want), "%u\n", p->last);
		buf[0] = '\0';
		ret = vp_param_read(p->name, buf, sizeof(buf));
		if ((ret || strcmp(buf, want)) && !bad_read++) {
			TH_LOG("%s reads \"%.*s\" (%d) after \"%s\", not %u", p->name,
			       (int)strcspn(buf, "\n"), buf, ret, val, p->last);
		}
	}
	EXPECT_EQ(0U, bad_valid) TH_LOG("%u valid writes failed", bad_valid);
	EXPECT_EQ(0U, bad_invalid) TH_LOG("%u bad writes did not fail", bad_invalid);
	EXPECT_EQ(0U, bad_read) TH_LOG("%u reads after a bad write changed", bad_read);

	/* Polling on again: every stream must go on, two whole chunks each. */
	ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
	ASSERT_EQ(0, vp_param_set("poll_stop_idle", vp_jiffy_hz()));
	for (i = 0; i < PARAM_STREAMERS; i++)
		base[i] = __atomic_load_n(&s[i].rounds, __ATOMIC_ACQUIRE);
	t0 = vp_now_ms();
	do {
		vp_sleep_ms(1);
		for (moved = 0, i = 0; i < PARAM_STREAMERS; i++)
			moved += __atomic_load_n(&s[i].rounds, __ATOMIC_ACQUIRE) >= base[i] + 2 ||
				 __atomic_load_n(&s[i].done, __ATOMIC_ACQUIRE);
	} while (moved < PARAM_STREAMERS && vp_now_ms() - t0 < 2 * STALL_MS);
	for (i = 0; i < PARAM_STREAMERS; i++) {
		ret = streamer_stop(&s[i]);
		EXPECT_EQ(0, ret) TH_LOG("device %u: %s", i, fail_name(ret));
		tally_add(&all, &s[i].tally);
	}
	TH_LOG("%u parameter writes, %llu buffers checked, worst stall %llu ms", writes,
	       all.checked, all.worst_ms);
	EXPECT_TRUE(storm_settles());
	for (i = 0; i < PARAM_STREAMERS; i++)
		vring_close(&s[i].d);
}

/* Rings no device can take, shown to the poller with no kick. */
enum hostile {
	/* The avail index moved further than the ring holds. */
	H_AVAIL_AHEAD,
	/* An avail entry naming a head past the ring. */
	H_HEAD_RANGE,
	/* Two descriptors chained to each other. */
	H_LOOP,
	/* Every descriptor chained to the next, the last to the first. */
	H_LONG_CHAIN,
	/* A descriptor just past the one memory region. */
	H_BAD_ADDR,
	/* An indirect table whose length is no multiple of a descriptor. */
	H_INDIRECT_LEN,
	/* An indirect table holding an indirect descriptor. */
	H_INDIRECT_NESTED,
	H_N,
};

static const char *const hostile_name[H_N] = {
	"avail index past the ring", "head past the ring", "descriptor loop",
	"chain longer than the ring", "address outside the memory table",
	"indirect table of a bad length", "nested indirect table",
};

static void set_desc(struct vring_desc *desc, uintptr_t addr, __u32 len, __u16 flags,
		     __u16 next)
{
	desc->addr = addr;
	desc->len = len;
	desc->flags = flags;
	desc->next = next;
}

static uintptr_t buf_of(struct vring_drv *d, unsigned int i)
{
	return (uintptr_t)(d->bufs + (size_t)i * VR_BUF_SIZE);
}

/*
 * Make drained @h's ring hostile as @how says, and publish it with one
 * store of the avail index and no kick: only a poller sees it. The
 * driver's own bookkeeping is left behind: the device is closed next.
 */
static void show_hostile(struct vring_drv *h, enum hostile how)
{
	const unsigned int num = h->num, a = 0, b = 1;
	struct vring_desc *desc = h->vr.desc, *table;
	__u16 slot = h->avail_idx % num, idx = h->avail_idx + 1;
	unsigned int i;

	h->vr.avail->ring[slot] = a;
	switch (how) {
	case H_AVAIL_AHEAD:
		set_desc(&desc[a], buf_of(h, a), VR_BUF_SIZE, 0, 0);
		idx = h->avail_idx + num + 5;
		break;
	case H_HEAD_RANGE:
		h->vr.avail->ring[slot] = num + 7;
		break;
	case H_LOOP:
		set_desc(&desc[a], buf_of(h, a), VR_BUF_SIZE, VRING_DESC_F_NEXT, b);
		set_desc(&desc[b], buf_of(h, b), VR_BUF_SIZE, VRING_DESC_F_NEXT, a);
		break;
	case H_LONG_CHAIN:
		/* Every index valid, every address mapped: only the length is wrong. */
		for (i = 0; i < num; i++)
			set_desc(&desc[i], buf_of(h, i), VR_BUF_SIZE, VRING_DESC_F_NEXT,
				 (i + 1) % num);
		break;
	case H_BAD_ADDR:
		set_desc(&desc[a], (uintptr_t)h->arena + h->arena_len, VR_BUF_SIZE, 0, 0);
		break;
	case H_INDIRECT_LEN:
		memset((void *)buf_of(h, b), 0, VR_BUF_SIZE);
		set_desc(&desc[a], buf_of(h, b), 3 * sizeof(*desc) / 2, VRING_DESC_F_INDIRECT,
			 0);
		break;
	default:
		table = (struct vring_desc *)buf_of(h, b);
		set_desc(&table[0], buf_of(h, a), VR_BUF_SIZE, VRING_DESC_F_INDIRECT, 0);
		set_desc(&desc[a], (uintptr_t)table, sizeof(*table), VRING_DESC_F_INDIRECT, 0);
		break;
	}
	vr_wmb();
	__atomic_store_n(&h->vr.avail->idx, idx, __ATOMIC_RELEASE);
}

/*
 * Wait up to @ms for this process's device other than @skip_dev to be
 * polled, while @s streams: each step of a millisecond ends after one of
 * @s's chunks, if that comes first (see streamer_wait()).
 */
static bool wait_other_polled_beside(struct streamer *s, unsigned int skip_dev,
				     unsigned int ms)
{
	struct vp_vq_row row;

	for (; ms; ms--) {
		if (other_row(getpid(), skip_dev, &row) == 1 && row.poll)
			return true;
		streamer_wait(s, 1, 1);
	}
	return false;
}

/*
 * How long a hostile ring is left to the poller: 2 jiffies, or while the
 * neighbour streams this many chunks, if that comes first. On a real
 * clock the jiffies come first (UML streams about 9 chunks in 2 of its
 * jiffies); under simulated time the chunks (see streamer_wait()).
 */
#define HOSTILE_CHUNKS	32

/*
 * 5. Hostile rings shown to a polled vq of a second device, one after
 * another: the poller and the handlers it starts meet an error, not a
 * buffer, and the device is closed in that state. A well-behaved device
 * streams the whole time.
 */
TEST_F_TIMEOUT(storm, hostile_rings, storm_timeout())
{
	/* Indirect descriptors negotiated, so that only their shape is wrong. */
	const __u64 features = 1ULL << VIRTIO_F_VERSION_1 |
		1ULL << VIRTIO_RING_F_EVENT_IDX | 1ULL << VIRTIO_RING_F_INDIRECT_DESC;
	const unsigned int rounds = self->n > H_N ? self->n : H_N;
	unsigned int shown[H_N] = { 0 }, hot[H_N] = { 0 }, left[H_N] = { 0 }, i;
	unsigned int good_dev, by_chunks = 0;
	struct vp_vq_row row;
	struct vring_drv h;
	struct streamer s;
	enum hostile how;
	int ret;

	ASSERT_EQ(0, streamer_start(&s, 1));
	/* The well-behaved device's number, to tell the hostile one's row. */
	ASSERT_EQ(1, other_row(getpid(), UINT_MAX, &row));
	good_dev = row.dev;
	for (i = 0; i < rounds; i++) {
		how = i % H_N;
		ASSERT_EQ(0, vring_open(&h, RING, true, 1024));
		ASSERT_EQ(0, ioctl(h.fd, VHOST_SET_FEATURES, &features));
		/* Polled before it turns hostile: the poller finds it, not a kick. */
		vring_post_kicked(&h, 4 * RATE_LOW);
		ASSERT_EQ(0, vring_drain(&h, STALL_MS));
		hot[how] += wait_other_polled_beside(&s, good_dev, 1000);
		show_hostile(&h, how);
		shown[how]++;
		by_chunks += streamer_wait(&s, HOSTILE_CHUNKS, vp_jiffies_ms(2));
		if (other_row(getpid(), good_dev, &row) == 1 && !row.poll)
			left[how]++;
		vring_close(&h);
	}
	ret = streamer_stop(&s);
	EXPECT_EQ(0, ret) TH_LOG("the well-behaved device: %s", fail_name(ret));
	for (how = 0; how < H_N; how++) {
		TH_LOG("%s: shown %u times, %u polled, out of poll mode after the wait %u",
		       hostile_name[how], shown[how], hot[how], left[how]);
	}
	TH_LOG("%u hostile rings, %u waits ended by the neighbour's %u chunks, not 2 jiffies",
	       rounds, by_chunks, HOSTILE_CHUNKS);
	TH_LOG("%llu buffers checked, worst stall %llu ms", s.tally.checked, s.tally.worst_ms);
	EXPECT_TRUE(storm_settles());
	vring_close(&s.d);
}

#define MODULE_STREAMERS	8

/*
 * 6. The module unloaded and loaded again under eight streams, polled or
 * about to be: unregistration takes every vq back (the polled ones with
 * their buffers in flight), and registration finds the open devices
 * again. No stream notices beyond a pause.
 */
TEST_F_TIMEOUT(storm, insmod_rmmod_while_streaming, storm_timeout())
{
	const unsigned int cycles = self->n / 4 > 2 ? self->n / 4 : 2;
	unsigned int i, hot = 0, retries = 0;
	struct streamer s[MODULE_STREAMERS];
	struct tally all = { 0 };
	int ret;

	for (i = 0; i < MODULE_STREAMERS; i++)
		ASSERT_EQ(0, streamer_start(&s[i], 32));
	for (i = 0; i < cycles; i++) {
		/* Unloaded with vqs polled, if they get there in time. */
		hot += wait_any_polled(500);
		ret = unload_retry(1000, &retries);
		ASSERT_EQ(0, ret) TH_LOG("unload %u: %s", i, strerror(-ret));
		ret = vp_load("poll_start_rate=4 poll_stop_idle=2" VP_STEADY);
		ASSERT_EQ(0, ret) TH_LOG("load %u: %s", i, strerror(-ret));
	}
	/* Polled again under the last load before the streams end. */
	wait_any_polled(500);
	for (i = 0; i < MODULE_STREAMERS; i++) {
		ret = streamer_stop(&s[i]);
		EXPECT_EQ(0, ret) TH_LOG("device %u: %s", i, fail_name(ret));
		tally_add(&all, &s[i].tally);
	}
	TH_LOG("%u rmmod/insmod (%u polled, %u retries), %llu buffers checked, worst stall %llu ms",
	       cycles, hot, retries, all.checked, all.worst_ms);
	EXPECT_TRUE(storm_settles());
	/* With the devices still open, as the storm left them. */
	ret = unload_retry(1000, NULL);
	EXPECT_EQ(0, ret) TH_LOG("final unload: %s", strerror(-ret));
	EXPECT_FALSE(vp_loaded());
	for (i = 0; i < MODULE_STREAMERS; i++)
		vring_close(&s[i].d);
}

/*
 * vring_open()'s device setup, on @d's vhost-test fd, open already: the
 * owner, the features, the memory table, the ring laid out afresh, kick,
 * call, and the backend started. What a process does with a device it
 * was handed, which kept nothing of its last owner. 0 or -errno.
 */
static int drv_setup(struct vring_drv *d)
{
	__u64 features = 1ULL << VIRTIO_F_VERSION_1 |
		(d->event_idx ? 1ULL << VIRTIO_RING_F_EVENT_IDX : 0);
	int ret;

	if (ioctl(d->fd, VHOST_SET_OWNER, NULL) ||
	    ioctl(d->fd, VHOST_SET_FEATURES, &features))
		return -errno;
	ret = vring_set_mem(d, d->arena, d->arena_len);
	if (ret)
		return ret;
	/* The reset stopped vhost-test's backend: it runs only when told. */
	return vring_start(d);
}

/* Buffers each side of a hand-over streams after its kicks. */
#define HANDOVER_BUFS	500

/* One side of a hand-over, as the process that drove it saw it. */
struct side {
	/* 0, or why it failed: -errno, -ETIMEDOUT (a stall), -EIO. */
	int ret;
	const char *step;
	/* Whether its vq was polled as it streamed, and still at the reset. */
	int polled, polled_at_reset;
	/* The giver's rows just after its reset: it owns nothing then. */
	int rows_after_reset;
	struct tally tally;
};

/* Shared by the test and both sides of one hand-over. */
struct handover {
	pid_t tester, taker;
	/* The giver, then the taker. */
	struct side side[2];
};

static const char *const side_name[2] = { "giver", "taker" };

/* Kick @d past the rate, stream and check it; 0 or why not. */
static int handover_stream(struct vring_drv *d, struct side *s)
{
	struct vp_vq_row sum;
	int ret;

	s->step = "stream";
	vring_post_kicked(d, 4 * RATE_LOW);
	ret = stream_timed(d, HANDOVER_BUFS, 16, &s->tally);
	if (ret)
		return ret;
	s->polled = vp_vq_sum(getpid(), -1, &sum, NULL) == 1 && sum.enters;
	s->step = "check";
	return check_segment(d, &s->tally);
}

/*
 * The taker: a child of the giver, holding the device's fd and a copy of
 * its ring memory. Once the giver is gone (this process reparented to the
 * test), it sets the device up from scratch as its owner, streams it
 * polled and closes it. Its exit status: 0, or 1 and h->side[1] says why.
 */
static int handover_take(struct handover *h, struct vring_drv *d, pid_t giver)
{
	struct side *s = &h->side[1];
	unsigned int ms;

	s->step = "wait for the giver to exit";
	for (ms = 0; getppid() == giver; ms++) {
		if (ms == STALL_MS) {
			s->ret = -ETIMEDOUT;
			return 1;
		}
		vp_sleep_ms(1);
	}
	/* The test reaps this process now: end with it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != h->tester) {
		s->ret = -ECHILD;
		return 1;
	}
	s->step = "setup";
	/* New eventfds too: nothing of the giver's setup is used again. */
	close(d->kick);
	close(d->call);
	d->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->ret = d->kick < 0 || d->call < 0 ? -errno : drv_setup(d);
	if (!s->ret)
		s->ret = handover_stream(d, s);
	vring_close(d);
	return s->ret ? 1 : 0;
}

/*
 * The giver: open a device, stream it polled, give it up with
 * VHOST_RESET_OWNER (which stops the backend and forgets the ring, the
 * memory table and the eventfds), fork the taker, which inherits the fd,
 * and exit. Its exit status: 0, or 1 and h->side[0] says why.
 */
static int handover_give(struct handover *h)
{
	struct side *s = &h->side[0];
	const pid_t me = getpid();
	struct vp_vq_row sum;
	struct vring_drv d;
	int polled;
	pid_t pid;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	s->step = "open";
	s->ret = vring_open(&d, RING, true, 1024);
	if (!s->ret)
		s->ret = handover_stream(&d, s);
	if (s->ret)
		return 1;
	/* Still polled, most likely: the idle limit is a second. */
	s->polled_at_reset = vp_vq_sum(me, -1, &sum, &polled) == 1 && polled;
	s->step = "VHOST_RESET_OWNER";
	if (ioctl(d.fd, VHOST_RESET_OWNER, NULL)) {
		s->ret = -errno;
		return 1;
	}
	s->rows_after_reset = vp_vq_sum(me, -1, &sum, NULL);
	s->step = "fork";
	pid = fork();
	if (pid < 0) {
		s->ret = -errno;
		return 1;
	}
	if (!pid)
		_exit(handover_take(h, &d, me));
	h->taker = pid;
	return 0;
}

/*
 * 7. A device handed from process to process, as a VMM hands a guest's
 * devices over: its owner streams it polled, gives it up with
 * VHOST_RESET_OWNER and exits; a child that inherited the fd becomes the
 * owner and sets it up from scratch. The poller drops the vq at the
 * reset and takes it up again in the new owner's address space; no row
 * is left for a process that owns nothing, and a neighbour streams
 * throughout.
 */
TEST_F_TIMEOUT(storm, reset_owner_handover, storm_timeout())
{
	unsigned int i, j, polled[2] = { 0 }, at_reset = 0;
	struct tally all = { 0 };
	struct handover *h;
	pid_t pids[2], stays = 0, nobody = 0;
	int status[2], left, ret;
	struct streamer s;

	h = mmap(NULL, sizeof(*h), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, h);
	/* The taker outlives its parent, the giver: it is reparented here. */
	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1));
	ASSERT_EQ(0, streamer_start(&s, 16));
	for (i = 0; i < self->n; i++) {
		memset(h, 0, sizeof(*h));
		h->tester = getpid();
		pids[0] = fork();
		ASSERT_LE(0, pids[0]);
		if (!pids[0])
			_exit(handover_give(h));
		ASSERT_EQ(pids[0], waitpid(pids[0], &status[0], 0));
		pids[1] = h->taker;
		/* The giver is gone and its device lives on in the taker. */
		left = rows_gone(pids, 1, &stays);
		/* The taker, if the giver got that far; reparented here. */
		status[1] = 0;
		if (pids[1] > 0 && waitpid(pids[1], &status[1], 0) != pids[1])
			status[1] = -1;
		for (j = 0; j < 2; j++) {
			ASSERT_EQ(0, h->side[j].ret) {
				TH_LOG("round %u, the %s: %s: %s", i, side_name[j],
				       h->side[j].step, fail_name(h->side[j].ret));
			}
			ASSERT_TRUE(WIFEXITED(status[j]) && !WEXITSTATUS(status[j])) {
				TH_LOG("round %u, the %s: status 0x%x", i, side_name[j], status[j]);
			}
			polled[j] += h->side[j].polled;
			tally_add(&all, &h->side[j].tally);
		}
		at_reset += h->side[0].polled_at_reset;
		ASSERT_EQ(0, h->side[0].rows_after_reset) {
			TH_LOG("round %u: %d rows of the giver after its VHOST_RESET_OWNER", i,
			       h->side[0].rows_after_reset);
		}
		ASSERT_EQ(0, left) {
			TH_LOG("round %u: %d rows of the exited giver (pid %d) after 1 s", i, left,
			       stays);
		}
		left = rows_gone(pids, 2, &stays);
		ASSERT_EQ(0, left) {
			TH_LOG("round %u: %d rows of exited owners (pid %d) after 1 s", i, left,
			       stays);
		}
	}
	ret = streamer_stop(&s);
	EXPECT_EQ(0, ret) TH_LOG("the neighbour: %s", fail_name(ret));
	/* Between a reset and the next SET_OWNER a vq has no owner: none now. */
	left = rows_gone(&nobody, 1, &stays);
	EXPECT_EQ(0, left) TH_LOG("%d rows of devices with no owner left", left);
	TH_LOG("%u hand-overs: giver polled %u (%u at its reset), taker polled %u", i,
	       polled[0], at_reset, polled[1]);
	TH_LOG("%llu buffers checked, worst stall %llu ms", all.checked, all.worst_ms);
	TH_LOG("the neighbour: %llu buffers checked, worst stall %llu ms", s.tally.checked,
	       s.tally.worst_ms);
	EXPECT_TRUE(storm_settles());
	vring_close(&s.d);
	munmap(h, sizeof(*h));
}

/* A ring whose used ring spans pages: 4 + 8 * 1024 + 2 bytes, three pages. */
#define LOG_RING	1024
/*
 * Buffers posted with one store of the avail index: more than vhost-test
 * takes in one handler run (VHOST_TEST_PKT_WEIGHT, 256), so the handler
 * requeues itself and several runs write and log the used ring.
 */
#define LOG_BATCH	600
/* vhost's dirty log has a bit per VHOST_PAGE_SIZE (4 KiB) of guest memory. */
#define LOG_PAGE	0x1000ULL

/*
 * A dirty log for @d's arena. Guest addresses are the arena's own
 * (vring_set_mem() maps it at its address), so the log's bits for it lie
 * far into a bitmap of the whole address space. vhost sets the bit of
 * guest page p = gpa / LOG_PAGE at byte base + p / 8, bit p % 8
 * (log_write(), set_bit_to_user() in drivers/vhost/vhost.c; a bit
 * number within a byte, as set_bit() counts them on a little-endian
 * machine): base is chosen so that the arena's bytes are those of map.
 */
struct dirty_log {
	__u8 *map;
	size_t len;
	/* The log's byte map[0] is: that of the arena's first page. */
	__u64 first;
	/* What VHOST_SET_LOG_BASE is given: map's address, less first. */
	__u64 base;
};

static int log_alloc(struct dirty_log *l, const struct vring_drv *d)
{
	const __u64 start = (uintptr_t)d->arena, end = start + d->arena_len;

	l->first = start / LOG_PAGE / 8;
	l->len = (end - 1) / LOG_PAGE / 8 - l->first + 1;
	/* vhost pins the log's pages to write them: plain anonymous memory. */
	l->map = mmap(NULL, l->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (l->map == MAP_FAILED)
		return -errno;
	l->base = (uintptr_t)l->map - l->first;
	return 0;
}

/* Whether @l has the bit of guest page @page. */
static bool log_has(const struct dirty_log *l, __u64 page)
{
	__u64 byte = page / 8 - l->first;

	/* Set by vhost as the test waits: read again each time. */
	return byte < l->len &&
	       (__atomic_load_n(&l->map[byte], __ATOMIC_ACQUIRE) & (1 << (page % 8)));
}

/*
 * Check that @l has the bit of every page of @d's used ring that the
 * device wrote since its used index was @from: the index's page, and each
 * written element's (an element may straddle two pages). vhost logs a
 * write just after it, so the driver may have seen the last index before
 * its bit: each bit has a second to come. Returns how many never came;
 * adds those checked to *@pages.
 */
static unsigned int log_check(const struct dirty_log *l, const struct vring_drv *d, __u16 from,
			      unsigned long long *pages)
{
	const __u64 used = (uintptr_t)d->vr.used, first = used / LOG_PAGE;
	unsigned long long t0 = vp_now_ms();
	unsigned int missing = 0;
	/* A bit per page of the used ring, from its first: three here. */
	__u64 want;
	__u64 e, page;
	__u16 i;

	want = 1ULL << ((used + offsetof(struct vring_used, idx)) / LOG_PAGE - first);
	for (i = from; i != d->last_used; i++) {
		e = (uintptr_t)&d->vr.used->ring[i % d->num];
		want |= 1ULL << (e / LOG_PAGE - first);
		want |= 1ULL << ((e + sizeof(struct vring_used_elem) - 1) / LOG_PAGE - first);
	}
	for (page = first; want; page++, want >>= 1) {
		if (!(want & 1))
			continue;
		++*pages;
		while (!log_has(l, page) && vp_now_ms() - t0 < 1000)
			vp_sleep_ms(1);
		missing += !log_has(l, page);
	}
	return missing;
}

/*
 * 8. A migration: the device's used ring writes are logged, as a VMM has
 * them logged while it copies a guest's memory. Logging starts on the
 * polled, running device as a VMM starts it (log base, VHOST_F_LOG_ALL,
 * the ring's log address); then each round clears the log, posts more
 * than one handler run takes with one store of the avail index, drains
 * it, and finds the bit of every used ring page written, whichever of
 * the poller, a kick or the hand-back of a vq leaving poll mode (every
 * third round: polling switched off and on) ran the handler.
 */
TEST_F_TIMEOUT(storm, migration_log, storm_timeout())
{
	const __u64 features = 1ULL << VIRTIO_F_VERSION_1 | 1ULL << VIRTIO_RING_F_EVENT_IDX |
		1ULL << VHOST_F_LOG_ALL;
	const unsigned int rounds = 3 * self->n;
	unsigned int i, toggled = 0, left_poll = 0, hot = 0, missing = 0, miss, first_miss = 0;
	unsigned long long pages = 0;
	struct vhost_vring_addr a;
	bool polled_at_start;
	struct tally t = { 0 };
	struct vp_vq_row sum;
	struct dirty_log l = { 0 };
	struct vring_drv d;
	int polled, ret;
	__u16 from;
	__u64 base;

	ASSERT_EQ(0, vring_open(&d, LOG_RING, true, SEGMENT));
	ASSERT_EQ(0, log_alloc(&l, &d));
	/* Polled when the migration starts: each step quiesces the vq. */
	vring_post_kicked(&d, 4 * RATE_LOW);
	ASSERT_EQ(0, drain_timed(&d, &t));
	polled_at_start = vp_wait_polled(getpid(), 1, 1000);
	base = l.base;
	ASSERT_EQ(0, ioctl(d.fd, VHOST_SET_LOG_BASE, &base)) {
		TH_LOG("VHOST_SET_LOG_BASE: %s", strerror(errno));
	}
	if (ioctl(d.fd, VHOST_SET_FEATURES, &features)) {
		ret = errno;
		vring_close(&d);
		munmap(l.map, l.len);
		SKIP(return, "VHOST_SET_FEATURES with VHOST_F_LOG_ALL: %s", strerror(ret));
	}
	memset(&a, 0, sizeof(a));
	a.index = d.index;
	a.flags = 1 << VHOST_VRING_F_LOG;
	a.desc_user_addr = (uintptr_t)d.vr.desc;
	a.avail_user_addr = (uintptr_t)d.vr.avail;
	a.used_user_addr = (uintptr_t)d.vr.used;
	/* A guest address, which is the ring's own here. */
	a.log_guest_addr = (uintptr_t)d.vr.used;
	ASSERT_EQ(0, ioctl(d.fd, VHOST_SET_VRING_ADDR, &a)) {
		TH_LOG("VHOST_SET_VRING_ADDR with VHOST_VRING_F_LOG: %s", strerror(errno));
	}
	for (i = 0; i < rounds; i++) {
		ASSERT_EQ(0, make_room(&d, 4 * RATE_LOW + LOG_BATCH, &t));
		/* From here on the log holds this round's writes only. */
		memset(l.map, 0, l.len);
		from = d.last_used;
		/* Back to poll mode, if the last round took it out. */
		vring_post_kicked(&d, 4 * RATE_LOW);
		hot += vp_vq_sum(getpid(), d.index, &sum, &polled) == 1 && polled;
		vring_post(&d, LOG_BATCH);
		if (i % 3 == 2) {
			/* Out of poll mode with the batch in flight, and on again. */
			ASSERT_EQ(0, vp_param_set("poll_start_rate", 0));
			left_poll += vp_wait_polled(getpid(), 0, 1000);
			ASSERT_EQ(0, vp_param_set("poll_start_rate", RATE_LOW));
			toggled++;
		}
		ret = drain_timed(&d, &t);
		ASSERT_EQ(0, ret) TH_LOG("round %u: %s", i, fail_name(ret));
		miss = log_check(&l, &d, from, &pages);
		if (miss && !missing)
			first_miss = i;
		missing += miss;
	}
	ASSERT_EQ(0, check_segment(&d, &t));
	TH_LOG("logging started with the vq %s", polled_at_start ? "polled" : "not polled");
	TH_LOG("%u rounds, %u polled at the post", rounds, hot);
	TH_LOG("polling off and on in %u rounds, %u of them left poll mode", toggled, left_poll);
	TH_LOG("%llu buffers checked, worst stall %llu ms", t.checked, t.worst_ms);
	TH_LOG("%llu used ring pages checked, %u bits missing", pages, missing);
	EXPECT_EQ(0U, missing) {
		TH_LOG("the dirty log missed %u used ring pages, the first in round %u", missing,
		       first_miss);
	}
	EXPECT_TRUE(storm_settles());
	vring_close(&d);
	munmap(l.map, l.len);
}

#define MEM_PROCS	8
#define MEM_DEVS	32
#define MEM_BUFS	200
/* The first is the warm-up: KASAN's quarantine and the slab caches fill. */
#define MEM_CYCLES	5
/*
 * Slab growth from the first cycle to the last that is a leak, in kB: 4 KiB
 * for each of the 1024 devices of cycles 2 to 5. Slab moves by 2 to 3 MB
 * between cycles with no leak (KASAN's quarantine, per-CPU caches), so
 * this catches only gross leaks; kmemleak (soak.sh) catches the rest.
 */
#define MEM_SLACK_KB	4096LL
/* For the frees RCU defers: the exited tasks, their vhost workers. */
#define MEM_SETTLE_MS	500
/* A fixed scale, whatever VHOST_POLL_STORM says. */
#define MEM_TIMEOUT	180

/* What one process of the memory storm saw, shared with the test. */
struct mem_proc {
	/* 0, or why it failed: -errno, -ETIMEDOUT (a stall), -EIO. */
	int ret;
	const char *step;
	unsigned int opened, polled, closed;
	struct tally tally;
};

/*
 * One process of the memory storm: open MEM_DEVS devices and stream
 * MEM_BUFS buffers through each, kicked past the rate; tell the test on
 * @ready; close them all when @go reaches its end. Its exit status: 0,
 * or 1 and @p says why.
 */
static int mem_proc_run(struct mem_proc *p, int ready, int go)
{
	struct vring_drv *d = calloc(MEM_DEVS, sizeof(*d));
	struct vp_vq_row *rows = calloc(ROWS_MAX, sizeof(*rows));
	int i, n;
	char c;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	p->step = "calloc";
	p->ret = d && rows ? 0 : -ENOMEM;
	for (i = 0; !p->ret && i < MEM_DEVS; i++) {
		p->step = "open";
		p->ret = vring_open(&d[i], RING, true, 1024);
		if (p->ret)
			break;
		p->opened++;
		p->step = "stream";
		vring_post_kicked(&d[i], 4 * RATE_LOW);
		p->ret = stream_timed(&d[i], MEM_BUFS - 4 * RATE_LOW, 16, &p->tally);
		if (!p->ret) {
			p->step = "check";
			p->ret = check_segment(&d[i], &p->tally);
		}
	}
	n = rows ? vp_vq_rows(rows, ROWS_MAX) : 0;
	for (i = 0; i < n; i++)
		p->polled += rows[i].pid == getpid() && rows[i].enters;
	/* A read returns at the go: the test closes its end of the pipe. */
	if (write(ready, "r", 1) == 1) {
		while (read(go, &c, 1) < 0 && errno == EINTR)
			;
	}
	/* A zeroed driver closes nothing: each one, opened or not. */
	p->step = "close";
	for (i = 0; d && i < MEM_DEVS; i++) {
		vring_close(&d[i]);
		p->closed++;
	}
	free(d);
	free(rows);
	return p->ret ? 1 : 0;
}

/*
 * Wait up to @ms for child @pid; its pid, or 0 if it is still running:
 * then where it waits is logged (and the step of @p, the memory storm's
 * process, if not NULL), every blocked task's stack goes to the kernel
 * log (sysrq w), and it is killed and reaped.
 */
static pid_t wait_bounded(struct __test_metadata *_metadata, pid_t pid, int *status,
			  unsigned int ms, const struct mem_proc *p)
{
	char path[64], wchan[64] = "?";
	unsigned int waited;
	pid_t got;
	int fd;

	for (waited = 0; waited < ms; waited += 10) {
		got = waitpid(pid, status, WNOHANG);
		if (got)
			return got;
		vp_sleep_ms(10);
	}
	snprintf(path, sizeof(path), "/proc/%d/wchan", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, wchan, sizeof(wchan) - 1);

		wchan[n > 0 ? n : 0] = 0;
		close(fd);
	}
	TH_LOG("process %d still running after %u ms, waits in %s", pid, ms, wchan);
	if (p)
		TH_LOG("(%s, %u of %u devices closed)", p->step, p->closed, p->opened);
	fd = open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "w", 1) != 1)
			TH_LOG("sysrq w: %s", strerror(errno));
		close(fd);
	}
	kill(pid, SIGKILL);
	waitpid(pid, status, 0);
	return 0;
}

/* Read up to @n bytes from @fd, waiting up to @ms in all; how many came. */
static int read_bytes(int fd, int n, unsigned int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	unsigned long long t0 = vp_now_ms(), spent;
	int got = 0;
	char buf[64];
	ssize_t r;

	while (got < n) {
		spent = vp_now_ms() - t0;
		if (spent >= ms || poll(&pfd, 1, ms - spent) <= 0)
			break;
		r = read(fd, buf, n - got < (int)sizeof(buf) ? n - got : (int)sizeof(buf));
		if (r <= 0)
			break;
		got += r;
	}
	return got;
}

/* Wait up to @ms for the table to be empty; how many rows it still has. */
static int table_left(unsigned int ms)
{
	struct vp_vq_row *rows = calloc(ROWS_MAX, sizeof(*rows));
	unsigned long long t0 = vp_now_ms();
	int n;

	if (!rows)
		return -ENOMEM;
	while ((n = vp_vq_rows(rows, ROWS_MAX)) && vp_now_ms() - t0 < ms)
		vp_sleep_ms(10);
	free(rows);
	return n;
}

/* Field @name of /proc/meminfo, in kB; -1 if it is not there. */
static long long meminfo_kb(const char *name)
{
	FILE *f = fopen("/proc/meminfo", "re");
	size_t len = strlen(name);
	long long kb = -1;
	char line[128];

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, name, len) && line[len] == ':' &&
		    sscanf(line + len + 1, "%lld", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/*
 * Shrink every slab cache (/sys/kernel/slab/CACHE/shrink): the empty slabs
 * of its per-CPU and partial lists go back, and under KASAN its
 * quarantine is emptied first (kmem_cache_shrink()). The quarantine keeps
 * freed objects for a while to catch uses after free, up to 1/32 of
 * memory: a debug kernel's Slab grows by what it holds of the tasks and
 * devices just freed, and less each cycle, until it is full. How many
 * caches were shrunk; 0 without the directory (no SLUB sysfs).
 */
static int slab_shrink_all(void)
{
	DIR *dir = opendir("/sys/kernel/slab");
	char path[PATH_MAX];
	struct dirent *e;
	int n = 0;

	if (!dir)
		return 0;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/kernel/slab/%s/shrink", e->d_name);
		if (!write_text(path, "1"))
			n++;
	}
	closedir(dir);
	return n;
}

/*
 * 9. Many devices, and the memory they leave: eight processes open 32
 * devices each and stream them polled, all 256 open at once, then close
 * them all; five times. After each cycle the table is empty, the shared
 * thread sleeps, and the slab, every cache shrunk, did not grow from the
 * first cycle to the last by more than MEM_SLACK_KB: a device, a vq's
 * place in the poller, a worker task, nothing is kept per open.
 */
TEST_F_TIMEOUT(storm, many_devices_memory, MEM_TIMEOUT)
{
	int ready[2], go[2], status[MEM_PROCS], came, open_rows, left, shrunk;
	long long slab[MEM_CYCLES], vmalloc;
	unsigned int cycle, i, polled;
	pid_t pids[MEM_PROCS], stays = 0;
	struct tally all;
	struct mem_proc *p;
	struct rlimit rl;

	/* Three fds a device: the device, its kick and its call. */
	ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &rl));
	rl.rlim_cur = rl.rlim_max;
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_cur < 3 * MEM_DEVS + 32) {
		SKIP(return, "RLIMIT_NOFILE allows %llu fds, a process needs %d",
		     (unsigned long long)rl.rlim_cur, 3 * MEM_DEVS + 32);
	}
	p = mmap(NULL, MEM_PROCS * sizeof(*p), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, p);
	for (cycle = 0; cycle < MEM_CYCLES; cycle++) {
		memset(p, 0, MEM_PROCS * sizeof(*p));
		ASSERT_EQ(0, pipe(ready));
		ASSERT_EQ(0, pipe(go));
		for (i = 0; i < MEM_PROCS; i++) {
			pids[i] = fork();
			ASSERT_LE(0, pids[i]);
			if (!pids[i]) {
				close(ready[0]);
				close(go[1]);
				_exit(mem_proc_run(&p[i], ready[1], go[0]));
			}
		}
		close(ready[1]);
		close(go[0]);
		/* Each process streams a few seconds at most: a minute is a hang. */
		came = read_bytes(ready[0], MEM_PROCS, 60000);
		open_rows = rows_of(pids, MEM_PROCS, &stays);
		/* The go: every process reads the end of the pipe. */
		close(go[1]);
		close(ready[0]);
		/* Closing its devices takes a process a second or two: a minute is a hang. */
		for (i = 0; i < MEM_PROCS; i++)
			ASSERT_EQ(pids[i], wait_bounded(_metadata, pids[i], &status[i],
							60000, &p[i]));
		memset(&all, 0, sizeof(all));
		polled = 0;
		for (i = 0; i < MEM_PROCS; i++) {
			ASSERT_EQ(0, p[i].ret) {
				TH_LOG("cycle %u, process %u, %u devices open: %s: %s", cycle + 1,
				       i, p[i].opened, p[i].step, fail_name(p[i].ret));
			}
			ASSERT_TRUE(WIFEXITED(status[i]) && !WEXITSTATUS(status[i])) {
				TH_LOG("cycle %u, process %u: status 0x%x", cycle + 1, i,
				       status[i]);
			}
			tally_add(&all, &p[i].tally);
			polled += p[i].polled;
		}
		ASSERT_EQ(MEM_PROCS, came) TH_LOG("cycle %u: %d processes ready", cycle + 1, came);
		/* Every device of every process was open at once, each with its row. */
		ASSERT_EQ(MEM_PROCS * MEM_DEVS, open_rows) {
			TH_LOG("cycle %u: %d rows with every device open", cycle + 1, open_rows);
		}
		left = table_left(1000);
		ASSERT_EQ(0, left) {
			TH_LOG("cycle %u: %d rows 1 s after every device closed", cycle + 1, left);
		}
		ASSERT_TRUE(storm_settles()) TH_LOG("cycle %u: the worker polls on", cycle + 1);
		ASSERT_EQ(0, vp_param_set("poll_stop_idle", vp_jiffy_hz()));
		vp_sleep_ms(MEM_SETTLE_MS);
		shrunk = slab_shrink_all();
		slab[cycle] = meminfo_kb("Slab");
		vmalloc = meminfo_kb("VmallocUsed");
		ASSERT_LE(0, slab[cycle]);
		TH_LOG("cycle %u: %d devices open at once, %u polled", cycle + 1, open_rows,
		       polled);
		TH_LOG("cycle %u: %llu buffers checked, worst stall %llu ms", cycle + 1,
		       all.checked, all.worst_ms);
		TH_LOG("cycle %u: Slab %lld kB (%d caches shrunk), VmallocUsed %lld kB",
		       cycle + 1, slab[cycle], shrunk, vmalloc);
	}
	TH_LOG("Slab from cycle 1 to %u: %+lld kB (at most %lld)", MEM_CYCLES,
	       slab[MEM_CYCLES - 1] - slab[0], MEM_SLACK_KB);
	EXPECT_GE(MEM_SLACK_KB, slab[MEM_CYCLES - 1] - slab[0]) {
		TH_LOG("the slab grew by %lld kB over %u cycles of %u devices",
		       slab[MEM_CYCLES - 1] - slab[0], MEM_CYCLES - 1, MEM_PROCS * MEM_DEVS);
	}
	munmap(p, MEM_PROCS * sizeof(*p));
}

int main(int argc, char **argv)
{
	vp_skip_if_cannot_run(argc, argv, VP_NEEDS_DEBUGFS | VP_NEEDS_VHOST_TEST);
	return test_harness_run(argc, argv);
}

/* The random storm's drivers, and the operations each tries on its device. */
#define RANDOM_DRIVERS	3

enum rop {
	ROP_POST, ROP_CALL, ROP_CALL_BADF, ROP_GET_BASE, ROP_SET_NUM, ROP_FEATURES,
	ROP_EVENT_IDX, ROP_MEM_TABLE, ROP_KICK, ROP_BACKEND, ROP_CLOSE, ROP_N
};

static const char *const rop_name[ROP_N] = {
	"post", "SET_VRING_CALL", "SET_VRING_CALL (bad fd)", "GET_VRING_BASE",
	"SET_VRING_NUM", "SET_FEATURES", "SET_FEATURES (EVENT_IDX flipped)",
	"SET_MEM_TABLE", "SET_VRING_KICK",
	"backend off and on", "close",
};

/*
 * Operation @op on @d, as a driver (or an attacker) may try it on a
 * running device: what it returned. Refusals (a bad fd, a size change
 * while the backend runs) are part of the storm, not failures; none of
 * these changes what the ring is.
 */
static int rop_do(struct vring_drv *d, enum rop op)
{
	struct vhost_vring_state s = { .index = d->index, .num = d->num };
	struct vhost_vring_file f = { .index = d->index, .fd = INT_MAX };
	__u64 features = vring_features(d->dev, d->event_idx);

	switch (op) {
	case ROP_CALL:
		return reconfigure(d, RC_VRING_CALL);
	case ROP_CALL_BADF:
		return ioctl(d->fd, VHOST_SET_VRING_CALL, &f) ? -errno : 0;
	case ROP_GET_BASE:
		return ioctl(d->fd, VHOST_GET_VRING_BASE, &s) ? -errno : 0;
	case ROP_SET_NUM:
		return ioctl(d->fd, VHOST_SET_VRING_NUM, &s) ? -errno : 0;
	case ROP_FEATURES:
		return ioctl(d->fd, VHOST_SET_FEATURES, &features) ? -errno : 0;
	case ROP_EVENT_IDX:
		/* The driver follows: it kicks as the new features say. */
		return vring_set_event_idx(d, !d->event_idx);
	case ROP_MEM_TABLE:
		return reconfigure(d, RC_MEM_TABLE);
	case ROP_KICK:
		return reconfigure(d, RC_VRING_KICK);
	case ROP_BACKEND:
		return reconfigure(d, RC_BACKEND);
	default:
		return 0;
	}
}

#define ROP_HISTORY	8

/* What a random driver did last, for the report of a ring left undrained. */
struct rop_history {
	enum rop op[ROP_HISTORY];
	int ret[ROP_HISTORY];
	unsigned int n;
};

static void rop_note(struct rop_history *h, enum rop op, int ret)
{
	h->op[h->n % ROP_HISTORY] = op;
	h->ret[h->n % ROP_HISTORY] = ret;
	h->n++;
}

/* @h's operations, oldest first, in @buf. */
static void rop_show(const struct rop_history *h, char *buf, size_t len)
{
	unsigned int i = h->n > ROP_HISTORY ? h->n - ROP_HISTORY : 0;
	size_t at = 0;

	buf[0] = 0;
	for (; i < h->n && at < len; i++)
		at += snprintf(buf + at, len - at, "%s%s (%d)", at ? ", " : "",
			       rop_name[h->op[i % ROP_HISTORY]], h->ret[i % ROP_HISTORY]);
}

/*
 * Open a device for the random storm: vhost-test or vhost-net's transmit
 * queue, event index or not, its worker a kernel thread or a thread of
 * this process, as @seed's draws say. 0 or -errno.
 */
static int random_open(struct vring_drv *d, int *mode)
{
	enum vring_dev dev = rand() % 2 ? VRING_NET : VRING_TEST;
	bool event_idx = rand() % 2;
	int ret;

	*mode = rand() % 2;
	ret = vring_open_owner(d, dev, RING, event_idx, SEGMENT, *mode);
	if (ret == -ENOTTY) {
		/* No choice of worker in this kernel: its default. */
		vring_close(d);
		*mode = -1;
		ret = vring_open_owner(d, dev, RING, event_idx, SEGMENT, -1);
	}
	return ret;
}

/*
 * A random driver: for @ms, and @most rounds at most (on simulated time,
 * where the clock moves only while the CPU idles, rounds cost wall time
 * but little simulated time), operations drawn from @seed on a device it
 * opens, closes and opens again, and after each a few buffers kicked as
 * the ring asks, which must all be used within STALL_MS. Says on @out
 * what it did, or which ring was left undrained and after what.
 * Exit status 0, or 1 if a ring was left undrained, 2 if a step failed.
 */
static int random_driver(unsigned int seed, unsigned int ms, unsigned long long most, int out)
{
	unsigned long long t0 = vp_now_ms(), rounds = 0, opens = 0, hot = 0;
	struct rop_history h = { 0 };
	struct tally t = { 0 };
	char msg[1024], ops[700];
	struct vp_vq_row row;
	struct vring_drv d;
	int mode = -1, ret, len, polled;
	bool open = false;
	enum rop op;

	srand(seed);
	while (vp_now_ms() - t0 < ms && rounds < most) {
		if (!open) {
			ret = random_open(&d, &mode);
			if (ret) {
				len = snprintf(msg, sizeof(msg), "open: %s", strerror(-ret));
				return write(out, msg, len) == len ? 2 : 3;
			}
			open = true;
			opens++;
		}
		op = rand() % ROP_N;
		ret = rop_do(&d, op);
		rop_note(&h, op, ret);
		if (op == ROP_CLOSE) {
			/* Drained: every buffer it posted used once. */
			if (check_segment(&d, &t))
				break;
			vring_close(&d);
			open = false;
			chunk_rest();
			continue;
		}
		if (make_room(&d, 8, &t))
			break;
		vring_post(&d, 1 + rand() % 8);
		ret = drain_timed(&d, &t);
		if (ret) {
			rop_show(&h, ops, sizeof(ops));
			vp_vq_sum(getpid(), d.index, &row, &polled);
			len = snprintf(msg, sizeof(msg),
				       "%s vq %u (%s worker, event index %d): %llu of %llu buffers used after %d ms; its row: polled %d, %llu kicks, %llu enters, %llu exits; last: %s",
				       vring_is_net(d.dev) ? "vhost-net" : "vhost-test", d.index,
				       mode == 0 ? "kthread" : mode == 1 ? "task" : "default",
				       d.event_idx, (unsigned long long)d.used,
				       (unsigned long long)d.posted, STALL_MS, polled, row.kicks,
				       row.enters, row.exits, ops);
			return write(out, msg, len) == len ? 1 : 3;
		}
		/* Now and then: was it polled? */
		if (!(++rounds % 16) && vp_vq_sum(getpid(), d.index, &row, &polled) == 1)
			hot += polled > 0;
		/* Simulated time passes only while the CPU idles (uml-tt). */
		chunk_rest();
	}
	ret = open ? check_segment(&d, &t) : 0;
	if (open)
		vring_close(&d);
	len = snprintf(msg, sizeof(msg),
		       "%llu rounds (%llu of %llu looks polled), %llu opens, %llu buffers checked once each, worst %llu ms%s",
		       rounds, hot, rounds / 16, opens, t.checked, t.worst_ms,
		       ret ? "; a buffer lost, used twice or unknown" : "");
	if (write(out, msg, len) != len)
		return 3;
	return ret ? 2 : 0;
}

/* The module reloaded with random parameters, or one of them written. */
static const char *random_module_op(void)
{
	static const unsigned int idle[] = { 0, 1, 2, 25 }, threads[] = { 1, 2, 4, 8 };
	static const unsigned int stalls[] = { 100, 1000, 5000 };
	char args[160];

	switch (rand() % 7) {
	case 0:
		if (unload_retry(1000, NULL))
			return "unload";
		/* poll_cpus empty or every CPU: the workers poll, or the threads. */
		snprintf(args, sizeof(args),
			 "poll_start_rate=%d poll_stop_idle=%u poll_threads=%u%s",
			 RATE_LOW, idle[rand() % 4], threads[rand() % 4],
			 rand() % 2 ? " poll_cpus=" : "");
		return vp_load(args) ? "load" : NULL;
	case 1:
		vp_param_set("poll_threads", threads[rand() % 4]);
		return NULL;
	case 2:
		vp_param_set("poll_stop_idle", idle[rand() % 4]);
		return NULL;
	case 3:
		vp_param_set("poll_min_gain", rand() % 2 ? 0 : 16);
		return NULL;
	case 4:
		vp_poll_in_worker(rand() % 2);
		return NULL;
	case 5:
		/* Down to the shortest bound: the watchdog takes rings back often. */
		vp_param_set("poll_stall_us", stalls[rand() % 3]);
		return NULL;
	default:
		vp_param_set("poll_start_rate", rand() % 2 ? 1 : RATE_LOW);
		return NULL;
	}
}

/*
 * 10. What an attacker would try, at random, for 150 ms and 100 rounds
 * of each driver per unit of scale: RANDOM_DRIVERS processes
 * drive vhost-test and vhost-net devices, kthread and task workers, with
 * the vring ioctls a VMM or a hostile owner issues on a running device
 * (call and kick files, a bad fd, the base, a size change it refuses,
 * features, the memory table, the backend off and on, close and open),
 * while the module is unloaded and loaded again and its parameters
 * change (poll_threads, poll_stop_idle 0 among them, poll_min_gain,
 * poll_cpus, poll_stall_us down to 100 us). After every operation
 * a few buffers, kicked as the ring asks, must all be used: a ring left
 * undrained fails the storm, with the driver's last operations. @with_module false: the control,
 * vhost_poll unloaded throughout. Seeds from $VHOST_POLL_SEED, or the
 * clock, logged to replay a failure.
 */
static void random_storm(struct __test_metadata *_metadata, unsigned int n, bool with_module)
{
	const unsigned int ms = 150 * n;
	const char *given = getenv("VHOST_POLL_SEED");
	unsigned int seed = given ? strtoul(given, NULL, 0) : (unsigned int)vp_now_us();
	int out[RANDOM_DRIVERS][2], status, i, failed = 0, module_ops = 0;
	pid_t pid[RANDOM_DRIVERS];
	const char *why = NULL;
	char msg[1024];
	ssize_t len;

	TH_LOG("seed %u (VHOST_POLL_SEED=%u replays it), %u ms", seed, seed, ms);
	if (!with_module)
		ASSERT_EQ(0, unload_retry(1000, NULL));
	for (i = 0; i < RANDOM_DRIVERS; i++) {
		ASSERT_EQ(0, pipe(out[i]));
		pid[i] = fork();
		ASSERT_LE(0, pid[i]);
		if (!pid[i]) {
			close(out[i][0]);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(random_driver(seed + i, ms, 100ULL * n, out[i][1]));
		}
		close(out[i][1]);
	}
	srand(seed + RANDOM_DRIVERS);
	while (with_module && waitpid(-1, &status, WNOHANG) == 0 && !why) {
		why = random_module_op();
		module_ops++;
		vp_sleep_ms(20 + rand() % 50);
	}
	for (i = 0; i < RANDOM_DRIVERS; i++) {
		if (!wait_bounded(_metadata, pid[i], &status, ms + 20000, NULL))
			status = -1;
		len = read(out[i][0], msg, sizeof(msg) - 1);
		msg[len > 0 ? len : 0] = 0;
		close(out[i][0]);
		TH_LOG("driver %d: %s", i, msg);
		failed += !WIFEXITED(status) || WEXITSTATUS(status);
	}
	TH_LOG("%d module operations%s%s", module_ops, why ? "; failed to " : "", why ? why : "");
	EXPECT_EQ(NULL, why);
	EXPECT_EQ(0, failed);
	if (!with_module)
		ASSERT_EQ(0, vp_load("poll_start_rate=4 poll_stop_idle=2" VP_STEADY));
}

TEST_F_TIMEOUT(storm, random_ops_drain, storm_timeout())
{
	random_storm(_metadata, self->n, true);
}

/* 10, the control: the same without the module. */
TEST_F_TIMEOUT(storm, random_ops_drain_without_module, storm_timeout())
{
	random_storm(_metadata, self->n, false);
}
