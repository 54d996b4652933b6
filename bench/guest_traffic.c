// SPDX-License-Identifier: GPL-2.0
/*
 * guest_traffic - the traffic of make bench's guest device.
 *
 * client: the nested guest's /init (PID 1, static, alone in an
 *	initramfs). Brings eth0 up with ioctls, then obeys commands that
 *	arrive on UDP port 7001: a stream of small UDP packets to the
 *	server, or request/response round trips, each for a given time,
 *	answering with its figures and the kicks virtio-net counted
 *	(ethtool statistics rxN_kicks, txN_kicks), or with those counters
 *	alone (kicks). Where the initramfs has /bin/iperf3, it also runs
 *	an iperf3 server (TCP, make bench's tcp cells), and where it has
 *	/bin/netserver, netperf's (scripts/kvm-bench).
 * ifup IFNAME ADDR/PREFIX: give the tap device of a nested guest an
 *	address and bring it up (the outer guest's side).
 * wait, run, kicks, off: the outer guest's side: wait for a client to
 *	answer, run one workload against it (sink for stream, echo for rr,
 *	counting) and print the figures as one JSON line, print its kick
 *	counters, or power it off.
 *
 * See scripts/nested-guest --help and scripts/bench.py.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/reboot.h>
#include <linux/sockios.h>
#include <linux/types.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DATA_PORT	7000	/* the server's socket */
#define CTL_PORT	7001	/* the client's command socket */
#define MAGIC		0x76706774u	/* "vpgt" */
#define MAX_RTTS	1048576
#define MAX_PKT		1472

enum { T_DATA = 1, T_REQ, T_RESP, T_CMD, T_DONE };

/*
 * Every packet: @run is the command's number, which the outer side picks
 * and the client copies into each packet the command makes and into its
 * answer. A command that timed out and ran late, or its answer, is then
 * told apart from the next command's, and not counted for it.
 */
struct hdr {
	__u32 magic;
	__u32 type;
	__u32 run;
	__u32 reserved;
	__u64 seq;
};

static const char *prog = "guest_traffic";

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: error: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void parse_addr(const char *s, struct in_addr *addr, int *prefix)
{
	char buf[64], *slash;

	snprintf(buf, sizeof(buf), "%s", s);
	slash = strchr(buf, '/');
	*prefix = 24;
	if (slash) {
		*slash = '\0';
		*prefix = atoi(slash + 1);
	}
	if (inet_pton(AF_INET, buf, addr) != 1 || *prefix < 1 || *prefix > 30)
		die("bad address '%s' (expected A.B.C.D/PREFIX)", s);
}

/* Give @ifname the address @spec (A.B.C.D/PREFIX) and bring it up. */
static void ifup(const char *ifname, const char *spec)
{
	struct sockaddr_in *sin;
	struct in_addr addr;
	struct ifreq ifr;
	int fd, prefix;

	parse_addr(spec, &addr, &prefix);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
	sin = (struct sockaddr_in *)&ifr.ifr_addr;
	sin->sin_family = AF_INET;
	sin->sin_addr = addr;
	if (ioctl(fd, SIOCSIFADDR, &ifr))
		die("%s: SIOCSIFADDR: %s", ifname, strerror(errno));
	sin->sin_addr.s_addr = htonl(~0u << (32 - prefix));
	if (ioctl(fd, SIOCSIFNETMASK, &ifr))
		die("%s: SIOCSIFNETMASK: %s", ifname, strerror(errno));
	if (ioctl(fd, SIOCGIFFLAGS, &ifr))
		die("%s: SIOCGIFFLAGS: %s", ifname, strerror(errno));
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr))
		die("%s: SIOCSIFFLAGS: %s", ifname, strerror(errno));
	close(fd);
}

/*
 * The kicks virtio-net counted on @ifname, its receive queues' (refills)
 * in *@rx and its transmit queues' in *@tx; -1 when it has no such
 * statistics.
 */
static void read_kicks(const char *ifname, long long *rx, long long *tx)
{
	struct ethtool_sset_info *info;
	struct ethtool_gstrings *names;
	struct ethtool_stats *stats;
	struct ifreq ifr;
	unsigned int i, n;
	int fd;

	*rx = -1;
	*tx = -1;
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
	info = calloc(1, sizeof(*info) + sizeof(__u32));
	if (!info)
		goto out;
	info->cmd = ETHTOOL_GSSET_INFO;
	info->sset_mask = 1ull << ETH_SS_STATS;
	ifr.ifr_data = (void *)info;
	if (ioctl(fd, SIOCETHTOOL, &ifr) || !info->sset_mask)
		goto out_info;
	n = info->data[0];
	names = calloc(1, sizeof(*names) + n * ETH_GSTRING_LEN);
	stats = calloc(1, sizeof(*stats) + n * sizeof(__u64));
	if (!names || !stats)
		goto out_free;
	names->cmd = ETHTOOL_GSTRINGS;
	names->string_set = ETH_SS_STATS;
	names->len = n;
	ifr.ifr_data = (void *)names;
	if (ioctl(fd, SIOCETHTOOL, &ifr))
		goto out_free;
	stats->cmd = ETHTOOL_GSTATS;
	stats->n_stats = n;
	ifr.ifr_data = (void *)stats;
	if (ioctl(fd, SIOCETHTOOL, &ifr))
		goto out_free;
	*rx = 0;
	*tx = 0;
	/* The totals, rx_kicks and tx_kicks; rxN_kicks are per queue. */
	for (i = 0; i < n; i++) {
		char *name = (char *)names->data + i * ETH_GSTRING_LEN;

		if (!strncmp(name, "rx_kicks", ETH_GSTRING_LEN))
			*rx = stats->data[i];
		else if (!strncmp(name, "tx_kicks", ETH_GSTRING_LEN))
			*tx = stats->data[i];
	}
out_free:
	free(names);
	free(stats);
out_info:
	free(info);
out:
	close(fd);
}

static int udp_socket(__u32 addr, int port)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = addr,
	};
	int fd, big = 4 << 20;

	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	/* Root may go past rmem_max: the sink must not drop. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)))
		die("bind %s:%d: %s", inet_ntoa(sin.sin_addr), port, strerror(errno));
	return fd;
}

static int cmp_u64(const void *a, const void *b)
{
	__u64 x = *(const __u64 *)a, y = *(const __u64 *)b;

	return x < y ? -1 : x > y;
}

/* One command of the server, run; @reply gets the figures as text. */
static void client_run(const char *cmd, __u32 run, const char *ifname, int fd,
		       const struct sockaddr_in *server, char *reply, size_t len)
{
	long long rx0, tx0, rx1, tx1;
	unsigned long long sent = 0, errs = 0, answered = 0, lost = 0;
	static __u64 rtts[MAX_RTTS];
	static char pkt[MAX_PKT];
	struct hdr *h = (struct hdr *)pkt;
	__u64 t0, t1, end, p50 = 0, p99 = 0;
	char workload[16];
	int ms, size;

	if (sscanf(cmd, "%15s %d %d", workload, &ms, &size) != 3 || ms <= 0 ||
	    size < (int)sizeof(*h) || size > MAX_PKT) {
		snprintf(reply, len, "error bad command '%.200s'", cmd);
		return;
	}
	/* Answers left over from an earlier command are dropped. */
	while (recv(fd, pkt, sizeof(pkt), MSG_DONTWAIT) >= 0)
		;
	memset(pkt, 0, size);
	h->magic = MAGIC;
	h->run = run;
	read_kicks(ifname, &rx0, &tx0);
	t0 = now_ns();
	end = t0 + (__u64)ms * 1000000;
	if (!strcmp(workload, "stream")) {
		h->type = T_DATA;
		while (now_ns() < end) {
			h->seq = sent;
			if (sendto(fd, pkt, size, 0, (const struct sockaddr *)server,
				   sizeof(*server)) == size)
				sent++;
			else
				errs++;
		}
	} else if (!strcmp(workload, "rr")) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		h->type = T_REQ;
		while (now_ns() < end) {
			__u64 s = now_ns();
			struct hdr r;

			h->seq = sent;
			if (sendto(fd, pkt, size, 0, (const struct sockaddr *)server,
				   sizeof(*server)) != size) {
				errs++;
				continue;
			}
			sent++;
			/*
			 * The answer to this request; a stale one is skipped.
			 * None in 5 s (far beyond any round trip, even under
			 * TCG within TCG) counts as lost.
			 */
			for (;;) {
				if (poll(&pfd, 1, 5000) <= 0) {
					lost++;
					break;
				}
				if (recv(fd, &r, sizeof(r), 0) < (ssize_t)sizeof(r) ||
				    r.magic != MAGIC || r.type != T_RESP || r.run != run ||
				    r.seq != h->seq)
					continue;
				if (answered < MAX_RTTS)
					rtts[answered] = now_ns() - s;
				answered++;
				break;
			}
		}
		if (answered) {
			size_t n = answered < MAX_RTTS ? answered : MAX_RTTS;

			qsort(rtts, n, sizeof(rtts[0]), cmp_u64);
			p50 = rtts[(n - 1) / 2];
			p99 = rtts[(n * 99 + 99) / 100 - 1];
		}
	} else {
		snprintf(reply, len, "error unknown workload '%s'", workload);
		return;
	}
	t1 = now_ns();
	read_kicks(ifname, &rx1, &tx1);
	snprintf(reply, len,
		 "done workload=%s sent=%llu errors=%llu answered=%llu lost=%llu ns=%llu p50_ns=%llu p99_ns=%llu rx_kicks=%lld tx_kicks=%lld",
		 workload, sent, errs, answered, lost, (unsigned long long)(t1 - t0),
		 (unsigned long long)p50, (unsigned long long)p99,
		 rx0 < 0 ? -1 : rx1 - rx0, tx0 < 0 ? -1 : tx1 - tx0);
}

/*
 * A server in the background, its output thrown away, where the
 * initramfs has it: iperf3's (TCP, make bench's tcp cells) and netperf's
 * (scripts/kvm-bench's netperf cells).
 */
static void start_server(const char *path, char *const argv[])
{
	static char *const envp[] = { "LD_LIBRARY_PATH=/lib", "TMPDIR=/tmp", NULL };
	pid_t pid;

	if (access(path, X_OK))
		return;
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execve(path, argv, envp);
		_exit(127);
	}
	printf("%s: %s %s: pid %d\n", prog, argv[0], argv[1] ?: "", (int)pid);
}

static void start_servers(void)
{
	/* -J: the client gets the receiver's intervals (--get-server-output). */
	static char *const iperf3[] = { "iperf3", "-s", "-J", NULL };
	/* -D: in the foreground, a child of PID 1. */
	static char *const netserver[] = { "netserver", "-D", NULL };

	start_server("/bin/iperf3", iperf3);
	start_server("/bin/netserver", netserver);
}

static int client(void)
{
	const char *ifname = getenv("vpg_if") ?: "eth0";
	const char *addr = getenv("vpg_addr") ?: "10.77.0.2/24";
	struct sockaddr_in server = { .sin_family = AF_INET, .sin_port = htons(DATA_PORT) };
	struct in_addr a;
	int prefix, ctl, data;

	if (getpid() == 1) {
		/* A console of its own, should the initramfs lack one. */
		mkdir("/dev", 0755);
		if (mount("devtmpfs", "/dev", "devtmpfs", 0, NULL) == 0) {
			int fd = open("/dev/console", O_RDWR);

			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_addr(addr, &a, &prefix);
	ifup(ifname, addr);
	/* The server is the first host of the subnet: the tap's side. */
	server.sin_addr.s_addr = htonl((ntohl(a.s_addr) & (~0u << (32 - prefix))) | 1);
	ctl = udp_socket(INADDR_ANY, CTL_PORT);
	data = udp_socket(INADDR_ANY, 0);
	start_servers();
	printf("%s: ready on %s %s, server %s\n", prog, ifname, addr,
	       inet_ntoa(server.sin_addr));
	for (;;) {
		char buf[512], reply[512];
		struct sockaddr_in from;
		socklen_t flen = sizeof(from);
		struct hdr *h = (struct hdr *)buf;
		ssize_t n;

		n = recvfrom(ctl, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &flen);
		if (n < (ssize_t)sizeof(*h) || h->magic != MAGIC || h->type != T_CMD)
			continue;
		buf[n] = '\0';
		if (!strcmp(buf + sizeof(*h), "off")) {
			printf("%s: powering off\n", prog);
			sync();
			reboot(RB_POWER_OFF);
			/* No ACPI: a reset, which qemu -no-reboot makes an exit. */
			reboot(RB_AUTOBOOT);
			return 0;
		}
		/* PID 1 reaps iperf3's children, should any end. */
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (!strcmp(buf + sizeof(*h), "hello")) {
			snprintf(reply, sizeof(reply), "hello");
		} else if (!strcmp(buf + sizeof(*h), "kicks")) {
			long long rx, tx;

			read_kicks(ifname, &rx, &tx);
			snprintf(reply, sizeof(reply),
				 "done workload=kicks sent=0 errors=0 answered=0 lost=0 ns=0 p50_ns=0 p99_ns=0 rx_kicks=%lld tx_kicks=%lld",
				 rx, tx);
		} else {
			client_run(buf + sizeof(*h), h->run, ifname, data, &server, reply,
				   sizeof(reply));
		}
		h->type = T_DONE;
		snprintf(buf + sizeof(*h), sizeof(buf) - sizeof(*h), "%.480s", reply);
		sendto(data, buf, sizeof(*h) + strlen(reply) + 1, 0,
		       (struct sockaddr *)&server, sizeof(server));
	}
}

/* The value of @key=NUMBER in @text, or -1. */
static long long field(const char *text, const char *key)
{
	char pat[32];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(text, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/*
 * The outer side of one command: send @cmd to the client at @guest and
 * serve it (count data, echo requests) until its answer arrives or
 * @timeout_ms passes. Prints the figures as JSON; returns 0 if answered.
 */
static int server(const char *guest, const char *cmd, int timeout_ms, int quiet)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(CTL_PORT) };
	unsigned long long received = 0, echoed = 0, bad = 0, stale = 0;
	static char buf[MAX_PKT + 64];
	struct hdr *h = (struct hdr *)buf;
	struct pollfd pfd;
	struct in_addr self;
	__u64 start = now_ns(), deadline, next_send = 0;
	int prefix, fd, tries = 0;
	char *done = NULL;
	/* This command's number: not that of one before it. */
	__u32 run = (__u32)(start ^ (start >> 32) ^ ((__u64)getpid() << 16));

	parse_addr(guest, &to.sin_addr, &prefix);
	self.s_addr = htonl((ntohl(to.sin_addr.s_addr) & (~0u << (32 - prefix))) | 1);
	fd = udp_socket(self.s_addr, DATA_PORT);
	pfd.fd = fd;
	pfd.events = POLLIN;
	deadline = start + (__u64)timeout_ms * 1000000;
	while (!done) {
		__u64 t = now_ns();
		struct sockaddr_in from;
		socklen_t flen = sizeof(from);
		ssize_t n;

		if (t >= deadline)
			break;
		/* hello is repeated until answered (the guest may be booting). */
		if (t >= next_send && (!tries || !strcmp(cmd, "hello"))) {
			struct hdr c = { .magic = MAGIC, .type = T_CMD, .run = run };
			char out[256];

			memcpy(out, &c, sizeof(c));
			snprintf(out + sizeof(c), sizeof(out) - sizeof(c), "%s", cmd);
			sendto(fd, out, sizeof(c) + strlen(cmd) + 1, 0,
			       (struct sockaddr *)&to, sizeof(to));
			tries++;
			next_send = t + 200000000;
			if (!strcmp(cmd, "off")) {
				close(fd);
				return 0;
			}
		}
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		n = recvfrom(fd, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &flen);
		if (n < (ssize_t)sizeof(*h) || h->magic != MAGIC) {
			bad++;
			continue;
		}
		if (h->run != run) {
			/* An earlier command's, late: not this one's. */
			stale++;
			continue;
		}
		switch (h->type) {
		case T_DATA:
			received++;
			break;
		case T_REQ:
			h->type = T_RESP;
			if (sendto(fd, buf, n, 0, (struct sockaddr *)&from, flen) == n)
				echoed++;
			break;
		case T_DONE:
			buf[n] = '\0';
			done = buf + sizeof(*h);
			break;
		default:
			bad++;
		}
	}
	if (!done) {
		fprintf(stderr, "%s: error: no answer from %s to '%s' in %d ms\n", prog, guest,
			cmd, timeout_ms);
		return 1;
	}
	if (!strcmp(cmd, "hello")) {
		if (!quiet)
			printf("{\"answered_after_ms\": %.0f, \"tries\": %d}\n",
			       (now_ns() - start) / 1e6, tries);
		return 0;
	}
	if (strncmp(done, "done ", 5)) {
		fprintf(stderr, "%s: error: the client said: %s\n", prog, done);
		return 1;
	}
	/*
	 * The answer follows the client's last packet on the same queue;
	 * anything still in flight (reordered) is counted for a moment.
	 */
	{
		long long sent;
		__u64 drain = now_ns() + 200000000;
		char d[512];
		int rr;

		snprintf(d, sizeof(d), " %.500s", done);
		sent = field(d, "sent");
		rr = !!strstr(d, "workload=rr");
		while (!rr && (long long)received < sent && now_ns() < drain) {
			if (poll(&pfd, 1, 20) <= 0)
				continue;
			if (recv(fd, buf, sizeof(buf), 0) >= (ssize_t)sizeof(*h) &&
			    h->magic == MAGIC && h->type == T_DATA && h->run == run)
				received++;
		}
		printf("{\"workload\": \"%s\", \"sent\": %lld, \"send_errors\": %lld, ",
		       rr ? "rr" : strstr(d, "workload=kicks") ? "kicks" : "stream", sent,
		       field(d, "errors"));
		printf("\"received\": %llu, \"echoed\": %llu, \"answered\": %lld, ",
		       received, echoed, field(d, "answered"));
		printf("\"lost\": %lld, \"seconds\": %.6f, \"p50_ns\": %lld, ",
		       field(d, "lost"), field(d, "ns") / 1e9, field(d, "p50_ns"));
		printf("\"p99_ns\": %lld, \"rx_kicks\": %lld, \"tx_kicks\": %lld, ",
		       field(d, "p99_ns"), field(d, "rx_kicks"), field(d, "tx_kicks"));
		printf("\"bad\": %llu, \"stale\": %llu}\n", bad, stale);
	}
	close(fd);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: guest_traffic client             (the nested guest's /init)\n"
		"       guest_traffic ifup IFNAME A.B.C.D/PREFIX\n"
		"       guest_traffic wait GUEST TIMEOUT_MS\n"
		"       guest_traffic run GUEST stream|rr MS [SIZE]\n"
		"       guest_traffic kicks GUEST\n"
		"       guest_traffic off GUEST\n"
		"\n"
		"client: brings eth0 up (vpg_if, vpg_addr=A.B.C.D/PREFIX from the kernel\n"
		"command line; default 10.77.0.2/24) and runs the commands the server\n"
		"sends to UDP port %d: a stream of SIZE-byte UDP packets or\n"
		"request/response round trips to the first address of the subnet,\n"
		"port %d, for MS milliseconds. It answers with its figures and the\n"
		"kicks virtio-net counted. Run as PID 1, it powers off on 'off'.\n"
		"\n"
		"The other commands run outside, on the tap side: ifup gives the tap an\n"
		"address; wait asks the client at GUEST (its A.B.C.D/PREFIX) until it\n"
		"answers; run sends it one workload, sinks or echoes the packets, and\n"
		"prints one JSON line: sent, received, lost, seconds, rr p50/p99 (ns),\n"
		"the guest's rx and tx kicks; kicks prints those counters as they are.\n"
		"SIZE defaults to 64 bytes of payload. Where /bin/iperf3 is there, the\n"
		"client also runs 'iperf3 -s', and 'netserver -D' where /bin/netserver is.\n",
		CTL_PORT, DATA_PORT);
}

int main(int argc, char **argv)
{
	char cmd[64];

	if (getpid() == 1)
		return client();
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "client") && argc == 2)
		return client();
	if (!strcmp(argv[1], "ifup") && argc == 4) {
		ifup(argv[2], argv[3]);
		return 0;
	}
	if (!strcmp(argv[1], "wait") && argc == 4)
		return server(argv[2], "hello", atoi(argv[3]), 0);
	if (!strcmp(argv[1], "kicks") && argc == 3)
		return server(argv[2], "kicks", 5000, 0);
	if (!strcmp(argv[1], "off") && argc == 3)
		return server(argv[2], "off", 300, 1);
	if (!strcmp(argv[1], "run") && (argc == 5 || argc == 6)) {
		int ms = atoi(argv[4]);

		if (ms <= 0)
			die("MS must be a positive number of milliseconds, not '%s'", argv[4]);
		snprintf(cmd, sizeof(cmd), "%s %d %s", argv[3], ms, argc == 6 ? argv[5] : "64");
		return server(argv[2], cmd, ms + 30000, 0);
	}
	usage(stderr);
	return 2;
}
