/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A user-space virtio driver for vhost-test and vhost-net (lib/vring.c):
 * one split ring in this process's memory, identity-mapped into vhost
 * with one memory region, kicked and waited for through eventfds. For
 * vhost-net the ring is the transmit queue, backed by a tap device: each
 * buffer is a virtio-net header and an Ethernet frame.
 *
 * Every buffer carries a sequence number; a bitmap records which were
 * used, so that a buffer used twice, or never, is caught.
 */
#ifndef VHOST_POLL_VRING_H
#define VHOST_POLL_VRING_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include <linux/if.h>
#include <linux/vhost.h>
#include <linux/virtio_ring.h>

/* From drivers/vhost/test.h. */
#define VHOST_TEST_RUN _IOW(VHOST_VIRTIO, 0x31, int)

#ifndef VHOST_SET_FORK_FROM_OWNER
/* 6.12.45 and later; not in older C libraries' headers. */
#define VHOST_SET_FORK_FROM_OWNER	_IOW(VHOST_VIRTIO, 0x84, __u8)
#endif

#define VR_BUF_SIZE	128
/* vhost-net: a legacy virtio-net header, then a minimal Ethernet frame. */
#define VR_NET_HDR	10
#define VR_NET_FRAME	60
#define VR_ALIGN	4096

/*
 * The device and queue driven: vhost-test's, vhost-net's transmit queue,
 * or vhost-net's receive queue (the guest posts empty buffers; frames the
 * host sends out of the tap fill them), with or without mergeable
 * receive buffers (VIRTIO_NET_F_MRG_RXBUF: a 12-byte header).
 */
enum vring_dev { VRING_TEST, VRING_NET, VRING_NET_RX, VRING_NET_RX_MRG };

struct vring_drv {
	int fd, kick, call, tap;
	enum vring_dev dev;
	/* The queue driven: 0 for vhost-test and net's receive queue, the
	 * transmit queue (1) for net.
	 */
	unsigned int index;
	/* The tap's name, for a vhost-net device. */
	char ifname[IFNAMSIZ];
	/* Called for each used buffer (receive: the frame it holds). */
	void (*on_used)(struct vring_drv *d, const char *buf, __u32 len);
	unsigned int num;
	bool event_idx;
	struct vring vr;
	void *arena;
	size_t arena_len;
	char *bufs;
	__u16 avail_idx, last_used;
	/* Free descriptors, as a stack. */
	__u16 *free;
	unsigned int nfree;
	/* Sequence number of the buffer in each descriptor; 0 when free. */
	__u64 *seq_of;
	/* Which sequence numbers were used (bit per buffer). */
	__u8 *used_map;
	__u64 map_bits;
	__u64 posted, used, kicks, calls;
	/* Errors seen: unknown or free id used, a buffer used twice. */
	__u64 bad_id, dup;
};

static inline void vr_wmb(void)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void vr_mb(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

bool vring_is_net(enum vring_dev dev);

/* Setting a device up, and closing it. */
int vring_set_mem(struct vring_drv *d, void *base, size_t len);
size_t vring_ring_len(unsigned int num);
int vring_place(struct vring_drv *d, void *p);
int vring_run(struct vring_drv *d, int on);
int vring_tap(int hdr_len, char *name);
int vring_start(struct vring_drv *d);
__u64 vring_features(enum vring_dev dev, bool event_idx);
int vring_set_event_idx(struct vring_drv *d, bool on);
int vring_open_owner(struct vring_drv *d, enum vring_dev dev, unsigned int num,
		     bool event_idx, __u64 max_bufs, int fork_owner);
int vring_open_dev(struct vring_drv *d, enum vring_dev dev,
		   unsigned int num, bool event_idx, __u64 max_bufs);
int vring_open(struct vring_drv *d, unsigned int num,
	       bool event_idx, __u64 max_bufs);
void vring_close(struct vring_drv *d);

/* Buffers made available, kicked, used and checked. */
void vring_kick(struct vring_drv *d);
void vring_avail_add(struct vring_drv *d, __u16 head, __u64 addr,
		     __u32 len, __u16 flags);
void vring_publish(struct vring_drv *d);
unsigned int vring_post(struct vring_drv *d, unsigned int n);
bool vring_wants_kick(struct vring_drv *d);
unsigned int vring_post_kicked(struct vring_drv *d, unsigned int n);
unsigned int vring_reap(struct vring_drv *d);
int vring_wait(struct vring_drv *d, int ms);
int vring_drain(struct vring_drv *d, int ms);
int vring_stream(struct vring_drv *d, __u64 total,
		 unsigned int batch, int ms);
bool vring_all_used_once(struct vring_drv *d);

#endif /* VHOST_POLL_VRING_H */
