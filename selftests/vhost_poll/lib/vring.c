// SPDX-License-Identifier: GPL-2.0
/*
 * A user-space virtio driver for vhost-test and vhost-net: see vring.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/if_tun.h>
#include <linux/virtio_config.h>
#include <linux/virtio_net.h>
#include "vring.h"

/* Whether @dev is one of vhost-net's queues. */
bool vring_is_net(enum vring_dev dev)
{
	return dev != VRING_TEST;
}

/* Whether @dev is a receive queue: its buffers are written by the device. */
static bool vring_is_rx(enum vring_dev dev)
{
	return dev == VRING_NET_RX || dev == VRING_NET_RX_MRG;
}

/* Map the arena into vhost's memory table at its own address. */
int vring_set_mem(struct vring_drv *d, void *base, size_t len)
{
	struct {
		struct vhost_memory m;
		struct vhost_memory_region r;
	} mem = {
		.m.nregions = 1,
		.r.guest_phys_addr = (uintptr_t)base,
		.r.memory_size = len,
		.r.userspace_addr = (uintptr_t)base,
	};

	return ioctl(d->fd, VHOST_SET_MEM_TABLE, &mem) ? -errno : 0;
}

/* Bytes one ring of @num entries takes, rounded up to whole pages. */
size_t vring_ring_len(unsigned int num)
{
	return (vring_size(num, VR_ALIGN) + VR_ALIGN - 1) & ~(size_t)(VR_ALIGN - 1);
}

/* Lay the ring out at @p (zeroed) and give vhost its addresses, from base 0. */
int vring_place(struct vring_drv *d, void *p)
{
	struct vhost_vring_state s = { .index = d->index, .num = d->num };
	struct vhost_vring_addr a = { .index = d->index };

	memset(p, 0, vring_size(d->num, VR_ALIGN));
	vring_init(&d->vr, d->num, p, VR_ALIGN);
	a.desc_user_addr = (uintptr_t)d->vr.desc;
	a.avail_user_addr = (uintptr_t)d->vr.avail;
	a.used_user_addr = (uintptr_t)d->vr.used;
	d->avail_idx = 0;
	d->last_used = 0;
	if (ioctl(d->fd, VHOST_SET_VRING_NUM, &s))
		return -errno;
	s.num = 0;
	if (ioctl(d->fd, VHOST_SET_VRING_BASE, &s))
		return -errno;
	return ioctl(d->fd, VHOST_SET_VRING_ADDR, &a) ? -errno : 0;
}

/* Start (@on) or stop the device's backend. */
int vring_run(struct vring_drv *d, int on)
{
	struct vhost_vring_file b = { .index = d->index, .fd = on ? d->tap : -1 };

	if (vring_is_net(d->dev))
		return ioctl(d->fd, VHOST_NET_SET_BACKEND, &b) ? -errno : 0;
	return ioctl(d->fd, VHOST_TEST_RUN, &on) ? -errno : 0;
}

/*
 * A tap device, up, with virtio-net headers of @hdr_len bytes; its fd or
 * -errno, its name in @name (IFNAMSIZ bytes).
 */
int vring_tap(int hdr_len, char *name)
{
	struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR };
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC), s;

	if (fd < 0)
		return -errno;
	if (ioctl(fd, TUNSETIFF, &ifr) || ioctl(fd, TUNSETVNETHDRSZ, &hdr_len))
		goto err;
	memcpy(name, ifr.ifr_name, IFNAMSIZ);
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		goto err;
	ifr.ifr_flags = IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr)) {
		close(s);
		goto err;
	}
	close(s);
	return fd;
err:
	s = -errno;
	close(fd);
	return s;
}

/*
 * Once the device has an owner, features and a memory table: lay the ring
 * out in the arena, give vhost the kick and call eventfds, and start the
 * backend. 0 or -errno.
 */
int vring_start(struct vring_drv *d)
{
	struct vhost_vring_file f = { .index = d->index };
	int ret = vring_place(d, d->arena);

	if (ret)
		return ret;
	f.fd = d->kick;
	if (ioctl(d->fd, VHOST_SET_VRING_KICK, &f))
		return -errno;
	f.fd = d->call;
	if (ioctl(d->fd, VHOST_SET_VRING_CALL, &f))
		return -errno;
	return vring_run(d, 1);
}

/*
 * The features a driver of @dev acks: vhost-net's legacy header (10
 * bytes), or 12 with mergeable buffers; version 1 for vhost-test.
 */
__u64 vring_features(enum vring_dev dev, bool event_idx)
{
	return (dev == VRING_TEST ? 1ULL << VIRTIO_F_VERSION_1 : 0) |
	       (dev == VRING_NET_RX_MRG ? 1ULL << VIRTIO_NET_F_MRG_RXBUF : 0) |
	       (event_idx ? 1ULL << VIRTIO_RING_F_EVENT_IDX : 0);
}

/*
 * Open vhost-test or vhost-net (@dev) with a ring of @num entries;
 * @max_bufs bounds the sequence numbers this driver can check. Its worker
 * is a kernel thread if @fork_owner is 0 (VHOST_FORK_OWNER_KTHREAD), a
 * thread of this process if 1, as vhost's default has it if -1. 0 or
 * -errno (-ENOTTY: the kernel has no such choice).
 */
int vring_open_owner(struct vring_drv *d, enum vring_dev dev, unsigned int num,
		     bool event_idx, __u64 max_bufs, int fork_owner)
{
	__u64 features = vring_features(dev, event_idx);
	size_t ring_len = vring_ring_len(num);
	unsigned int i;
	int ret;

	memset(d, 0, sizeof(*d));
	d->dev = dev;
	d->index = dev == VRING_NET ? 1 : 0;
	d->tap = -1;
	d->num = num;
	d->event_idx = event_idx;
	/* Two ring slots, so that the ring can be moved; then the buffers. */
	d->arena_len = 2 * ring_len + (size_t)num * VR_BUF_SIZE;
	d->arena = mmap(NULL, d->arena_len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (d->arena == MAP_FAILED)
		return -errno;
	d->bufs = (char *)d->arena + 2 * ring_len;
	d->free = calloc(num, sizeof(*d->free));
	d->seq_of = calloc(num, sizeof(*d->seq_of));
	d->map_bits = max_bufs + 1;
	d->used_map = calloc((d->map_bits + 7) / 8, 1);
	if (!d->free || !d->seq_of || !d->used_map)
		return -ENOMEM;
	for (i = 0; i < num; i++)
		d->free[i] = num - 1 - i;
	d->nfree = num;

	d->fd = open(vring_is_net(dev) ? "/dev/vhost-net" : "/dev/vhost-test",
		     O_RDWR | O_CLOEXEC);
	if (d->fd < 0)
		return -errno;
	if (vring_is_net(dev)) {
		d->tap = vring_tap(dev == VRING_NET_RX_MRG ? 12 : 10, d->ifname);
		if (d->tap < 0)
			return d->tap;
	}
	d->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->kick < 0 || d->call < 0)
		return -errno;
	if (fork_owner >= 0) {
		__u8 v = fork_owner;

		if (ioctl(d->fd, VHOST_SET_FORK_FROM_OWNER, &v))
			return -errno;
	}
	if (ioctl(d->fd, VHOST_SET_OWNER, NULL) ||
	    ioctl(d->fd, VHOST_SET_FEATURES, &features))
		return -errno;
	ret = vring_set_mem(d, d->arena, d->arena_len);
	if (ret)
		return ret;
	return vring_start(d);
}

/*
 * Negotiate the features again, with VIRTIO_RING_F_EVENT_IDX @on, as a
 * driver reset short of the rings would: the ring, its indexes and the
 * backend stay. 0 or -errno.
 */
int vring_set_event_idx(struct vring_drv *d, bool on)
{
	__u64 features = vring_features(d->dev, on);

	if (ioctl(d->fd, VHOST_SET_FEATURES, &features))
		return -errno;
	d->event_idx = on;
	return 0;
}

/* vring_open_owner(), the worker as vhost's default has it. */
int vring_open_dev(struct vring_drv *d, enum vring_dev dev,
		   unsigned int num, bool event_idx, __u64 max_bufs)
{
	return vring_open_owner(d, dev, num, event_idx, max_bufs, -1);
}

int vring_open(struct vring_drv *d, unsigned int num,
	       bool event_idx, __u64 max_bufs)
{
	return vring_open_dev(d, VRING_TEST, num, event_idx, max_bufs);
}

void vring_close(struct vring_drv *d)
{
	if (d->fd > 0)
		close(d->fd);
	if (d->kick > 0)
		close(d->kick);
	if (d->call > 0)
		close(d->call);
	if (d->tap > 0)
		close(d->tap);
	if (d->arena && d->arena != MAP_FAILED)
		munmap(d->arena, d->arena_len);
	free(d->free);
	free(d->seq_of);
	free(d->used_map);
	memset(d, 0, sizeof(*d));
}

void vring_kick(struct vring_drv *d)
{
	__u64 one = 1;

	if (write(d->kick, &one, sizeof(one)) == sizeof(one))
		d->kicks++;
}

/*
 * Fill descriptor @head with one buffer (@addr, @len bytes, @flags) and put
 * it in the avail ring; vring_publish() then makes it available.
 */
void vring_avail_add(struct vring_drv *d, __u16 head, __u64 addr,
		     __u32 len, __u16 flags)
{
	d->vr.desc[head].addr = addr;
	d->vr.desc[head].len = len;
	d->vr.desc[head].flags = flags;
	d->vr.desc[head].next = 0;
	d->vr.avail->ring[d->avail_idx % d->num] = head;
	d->avail_idx++;
}

/* Store the avail index, after the entries vring_avail_add() wrote. */
void vring_publish(struct vring_drv *d)
{
	vr_wmb();
	__atomic_store_n(&d->vr.avail->idx, d->avail_idx, __ATOMIC_RELEASE);
}

/* Post up to @n buffers; kick if the device asks for it. Returns how many. */
unsigned int vring_post(struct vring_drv *d, unsigned int n)
{
	__u16 old = d->avail_idx;
	unsigned int i;

	for (i = 0; i < n && d->nfree && d->posted + 1 < d->map_bits; i++) {
		__u16 head = d->free[--d->nfree];
		char *buf = d->bufs + (size_t)head * VR_BUF_SIZE;
		__u64 seq = ++d->posted;

		d->seq_of[head] = seq;
		if (vring_is_rx(d->dev)) {
			/* Empty, for the device to write a frame into. */
			memset(buf, 0, VR_BUF_SIZE);
			vring_avail_add(d, head, (uintptr_t)buf, VR_BUF_SIZE, VRING_DESC_F_WRITE);
			continue;
		} else if (d->dev == VRING_NET) {
			/* No offloads; a broadcast frame of an unused type. */
			memset(buf, 0, VR_NET_HDR);
			memset(buf + VR_NET_HDR, 0xff, 6);
			memset(buf + VR_NET_HDR + 6, 0x02, 6);
			buf[VR_NET_HDR + 12] = 0x88;
			buf[VR_NET_HDR + 13] = 0xb5;
			memcpy(buf + VR_NET_HDR + 14, &seq, sizeof(seq));
			vring_avail_add(d, head, (uintptr_t)buf, VR_NET_HDR + VR_NET_FRAME, 0);
		} else {
			memcpy(buf, &seq, sizeof(seq));
			vring_avail_add(d, head, (uintptr_t)buf, VR_BUF_SIZE, 0);
		}
	}
	if (!i)
		return 0;
	vring_publish(d);
	/* Make the new index visible before reading whether to kick. */
	vr_mb();
	if (d->event_idx) {
		if (vring_need_event(__atomic_load_n(&vring_avail_event(&d->vr), __ATOMIC_ACQUIRE),
				     d->avail_idx, old))
			vring_kick(d);
	} else if (!(__atomic_load_n(&d->vr.used->flags, __ATOMIC_ACQUIRE) &
		     VRING_USED_F_NO_NOTIFY)) {
		vring_kick(d);
	}
	return i;
}

/*
 * Whether the device asks to be kicked for the next buffer: notifications
 * are on (VRING_USED_F_NO_NOTIFY clear, or avail_event caught up).
 */
bool vring_wants_kick(struct vring_drv *d)
{
	vr_mb();
	if (d->event_idx)
		return __atomic_load_n(&vring_avail_event(&d->vr), __ATOMIC_ACQUIRE) ==
		       d->avail_idx;
	return !(__atomic_load_n(&d->vr.used->flags, __ATOMIC_ACQUIRE) & VRING_USED_F_NO_NOTIFY);
}

/*
 * Post @n buffers one at a time, kicking after each whatever the device
 * asked (a driver may always notify): @n kicks in a row, the load that
 * makes the rate in any time model, simulated time included.
 */
unsigned int vring_post_kicked(struct vring_drv *d, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		__u64 kicks = d->kicks;

		if (!vring_post(d, 1))
			break;
		if (d->kicks == kicks)
			vring_kick(d);
	}
	return i;
}

/* Take the used buffers; returns how many. */
unsigned int vring_reap(struct vring_drv *d)
{
	unsigned int n = 0;

	for (;;) {
		__u16 idx = __atomic_load_n(&d->vr.used->idx, __ATOMIC_ACQUIRE);
		__u32 id, len;
		__u64 seq;

		if (idx == d->last_used)
			break;
		id = d->vr.used->ring[d->last_used % d->num].id;
		len = d->vr.used->ring[d->last_used % d->num].len;
		d->last_used++;
		if (id >= d->num || !d->seq_of[id]) {
			d->bad_id++;
			continue;
		}
		if (d->on_used)
			d->on_used(d, d->bufs + (size_t)id * VR_BUF_SIZE, len);
		seq = d->seq_of[id];
		if (d->used_map[seq / 8] & (1 << (seq % 8)))
			d->dup++;
		d->used_map[seq / 8] |= 1 << (seq % 8);
		d->seq_of[id] = 0;
		d->free[d->nfree++] = id;
		d->used++;
		n++;
	}
	/* Ask for a call when the next buffer is used. */
	if (d->event_idx)
		__atomic_store_n(&vring_used_event(&d->vr), d->last_used, __ATOMIC_RELEASE);
	vr_mb();
	return n;
}

/* Wait up to @ms for a call (0 if one came, -ETIMEDOUT if not). */
int vring_wait(struct vring_drv *d, int ms)
{
	struct pollfd p = { .fd = d->call, .events = POLLIN };
	__u64 v;

	if (poll(&p, 1, ms) <= 0)
		return -ETIMEDOUT;
	if (read(d->call, &v, sizeof(v)) == sizeof(v))
		d->calls++;
	return 0;
}

/* Wait until every posted buffer is used; 0 or -ETIMEDOUT after @ms quiet. */
int vring_drain(struct vring_drv *d, int ms)
{
	while (d->used < d->posted) {
		if (vring_reap(d))
			continue;
		if (vring_wait(d, ms) && !vring_reap(d))
			return -ETIMEDOUT;
	}
	return 0;
}

/*
 * Stream @total more buffers, @batch at a time, as fast as the device
 * takes them. 0, or -ETIMEDOUT if the device took nothing for @ms.
 */
int vring_stream(struct vring_drv *d, __u64 total,
		 unsigned int batch, int ms)
{
	__u64 end = d->posted + total;

	while (d->posted < end) {
		__u64 left = end - d->posted;

		vring_reap(d);
		if (vring_post(d, left < batch ? left : batch))
			continue;
		/* Ring full: wait for the device. */
		if (vring_wait(d, ms) && !vring_reap(d))
			return -ETIMEDOUT;
	}
	return vring_drain(d, ms);
}

/* Whether every buffer posted so far was used exactly once. */
bool vring_all_used_once(struct vring_drv *d)
{
	__u64 s;

	if (d->bad_id || d->dup || d->used != d->posted)
		return false;
	for (s = 1; s <= d->posted; s++)
		if (!(d->used_map[s / 8] & (1 << (s % 8))))
			return false;
	return true;
}
