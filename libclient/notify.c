/* SPDX-License-Identifier: MIT */
/*
 * notify.c - libclient's notifications (docs/api.md "Notifications"): the
 * client's notification ring (dp_notify_open), records taken from it
 * (dp_notify_poll, dp_notify_wait, dp_notify_recv with the sender's name
 * and bytes), an fd for event loops (dp_notify_fd), and a notification
 * sent alone (dp_notify_send).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "clock.h"

static int notify_open(struct dp_client *c, uint32_t entries)
{
	struct dp_msg_notify_open req = {.entries = entries};
	struct dp_msg_notify_open_reply r;
	struct dp_notify *n;
	int fds[2], rc;

	if (!c || (entries & (entries - 1)))
		return -EINVAL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	if (c->notify) {
		pthread_mutex_unlock(&c->lock);
		free(n);
		return -EEXIST;
	}
	rc = dp__rpc(c, DP_MSG_NOTIFY_OPEN, &req, sizeof(req), -1, &r, sizeof(r), fds, 2);
	if (!rc) {
		rc = dp_ring_pair_attach(&n->pair, fds[0], 8, sizeof(struct dp_notification));
		if (!rc && dp_ring_size(&n->pair.cq) != r.entries) {
			dp_ring_pair_close(&n->pair);
			fds[0] = -1;
			rc = -EBADMSG;
		}
		if (rc) {
			if (fds[0] >= 0)
				close(fds[0]);
			close(fds[1]);
		}
	}
	if (rc) {
		pthread_mutex_unlock(&c->lock);
		free(n);
		return rc;
	}
	n->db = fds[1];
	n->epfd = n->kick = -1;
	atomic_store_explicit(&c->notify, n, memory_order_release);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int dp_notify_open(struct dp_client *c, uint32_t entries)
{
	if (!c)
		return dp__null_arg(C_NOTIFY_OPEN, -EINVAL);
	return dp__fail(C_NOTIFY_OPEN, notify_open(c, entries));
}

static struct dp_notify *notify_get(struct dp_client *c)
{
	return c ? atomic_load_explicit(&c->notify, memory_order_acquire) : NULL;
}

/* How many ring entries the record at idx takes (dp_proto.h): one, or
 * one and its sender's name and bytes. */
static uint32_t record_slots(const struct dp_notification *e)
{
	uint32_t len = e->msg_len <= DP_NOTIFY_MSG_MAX ? e->msg_len : DP_NOTIFY_MSG_MAX;

	return e->flags & DP_NOTIFY_F_MSG ? DP_NOTIFY_MSG_SLOTS(len) : 1;
}

/* Up to max records' first entries into out, their other entries
 * skipped: the count, or -EPROTO for a ring out of range. */
static int notify_take(struct dp_notify *n, struct dp_notification *out, unsigned max)
{
	uint32_t idx, used = 0;
	int avail, k = 0;

	avail = dp_ring_peek(&n->pair.cq, UINT32_MAX, &idx);
	if (avail <= 0)
		return avail;
	while ((unsigned)k < max && used < (uint32_t)avail) {
		dp_ring_copy_out(&n->pair.cq, idx + used, &out[k], 1);
		used += record_slots(&out[k]);
		k++;
	}
	/* A record is committed whole, so used never passes avail. */
	dp_ring_release(&n->pair.cq, used <= (uint32_t)avail ? used : (uint32_t)avail);
	return k;
}

/* The ring was found empty: 1 when records came meanwhile (after an
 * armed fd's doorbell was emptied), else 0, or -ECONNRESET when the
 * service is gone (checked at most once a millisecond, a system call). */
static int notify_idle(struct dp_client *c, struct dp_notify *n)
{
	uint32_t idx;
	uint64_t t;

	/* An event loop's fd must stop reading ready once the ring is empty:
	 * empty the doorbell, then look again (what rang before the drain is
	 * on the ring now; what rings after it makes the fd ready again). */
	if (atomic_load_explicit(&n->armed, memory_order_relaxed)) {
		/* NEED_WAKEUP again, fenced: 0 when entries came meanwhile
		 * (the flag is then clear until the next empty poll). */
		if (dp_ring_prepare_sleep(&n->pair.cq)) {
			uint64_t v;

			dp_doorbell_drain(n->db);
			if (n->kick >= 0)
				(void)!read(n->kick, &v, sizeof(v));
		}
		if (dp_ring_peek(&n->pair.cq, 1, &idx))
			return 1;
	}
	t = dp_clock_ns(CLOCK_MONOTONIC_COARSE);
	if (t - n->last_check_ns < LIVENESS_EVERY_NS)
		return 0;
	n->last_check_ns = t;
	return dp__service_alive(c) ? 0 : -ECONNRESET;
}

static int notify_poll(struct dp_client *c, struct dp_notify *n, struct dp_notification *out,
		       unsigned max)
{
	int k;

	if (!out && max)
		return -EINVAL;
	if (!max)
		return 0;
	k = notify_take(n, out, max);
	if (k)
		return k;
	k = notify_idle(c, n);
	return k > 0 ? notify_take(n, out, max) : k;
}

int dp_notify_poll(struct dp_client *c, struct dp_notification *out, unsigned max)
{
	struct dp_notify *n = notify_get(c);

	if (!n)
		return dp__fail(C_NOTIFY_POLL, c ? -EBADF : -EINVAL);
	return dp__fail(C_NOTIFY_POLL, notify_poll(c, n, out, max));
}

/* Sleep on the notification doorbell until it rings or `deadline` (ns,
 * UINT64_MAX: none) passes: 1 (look again), 0 (deadline passed) or
 * -ECONNRESET (the service is gone). */
static int notify_sleep(struct dp_client *c, struct dp_notify *n, uint64_t deadline)
{
	struct pollfd pfd[2] = {{.fd = n->db, .events = POLLIN},
				{.fd = c->fd, .events = POLLRDHUP}};
	uint64_t now;
	int wait_ms;

	if (!dp__service_alive(c))
		return -ECONNRESET;
	now = dp_now_ns();
	if (now >= deadline)
		return 0;
	wait_ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
	if (!dp_ring_prepare_sleep(&n->pair.cq))
		return 1;
	poll(pfd, 2, wait_ms);
	if (!atomic_load_explicit(&n->armed, memory_order_relaxed))
		dp_ring_finish_sleep(&n->pair.cq);
	if (pfd[0].revents & POLLIN)
		dp_doorbell_drain(n->db);
	return 1;
}

int dp_notify_wait(struct dp_client *c, struct dp_notification *out, unsigned max, int timeout_ms)
{
	struct dp_notify *n = notify_get(c);
	uint64_t deadline;

	if (!n)
		return dp__fail(C_NOTIFY_WAIT, c ? -EBADF : -EINVAL);
	if (!out || !max)
		return dp__fail(C_NOTIFY_WAIT, -EINVAL);
	deadline = timeout_ms < 0 ? UINT64_MAX : dp_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		int k = notify_take(n, out, max);

		if (k)
			return k < 0 ? dp__fail(C_NOTIFY_WAIT, k) : k;
		k = notify_sleep(c, n, deadline);
		if (k <= 0)
			return dp__fail(C_NOTIFY_WAIT, k);
	}
}

/* The first record on the ring, whole: 1, 0 (none), -EMSGSIZE (its bytes
 * exceed cap; left there) or -EPROTO. */
static int recv_one(struct dp_notify *n, struct dp_notification *e, char *sender, void *msg,
		    size_t cap)
{
	const uint32_t es = DP_NOTIFY_ENTRY_SIZE;
	uint32_t idx, slots, len;
	int avail;

	avail = dp_ring_peek(&n->pair.cq, UINT32_MAX, &idx);
	if (avail <= 0)
		return avail;
	dp_ring_copy_out(&n->pair.cq, idx, e, 1);
	slots = record_slots(e);
	sender[0] = '\0';
	if (slots > (uint32_t)avail)
		return -EPROTO;
	if (e->flags & DP_NOTIFY_F_MSG) {
		len = e->msg_len;
		if (len > DP_NOTIFY_MSG_MAX)
			return -EPROTO;
		if (len > cap)
			return -EMSGSIZE;
		/* The name, then the bytes, entry by entry (the run may
		 * wrap). */
		for (uint32_t k = 1; k < slots; k++) {
			const uint8_t *p = dp_ring_slot(&n->pair.cq, idx + k);
			uint32_t at = (k - 1) * es, m;

			if (at < DP_NOTIFY_SENDER_MAX) {
				memcpy(sender, p, DP_NOTIFY_SENDER_MAX);
				sender[DP_NOTIFY_SENDER_MAX - 1] = '\0';
				m = len < es - DP_NOTIFY_SENDER_MAX ? len
								    : es - DP_NOTIFY_SENDER_MAX;
				memcpy(msg, p + DP_NOTIFY_SENDER_MAX, m);
				continue;
			}
			at -= DP_NOTIFY_SENDER_MAX;
			m = len - at < es ? len - at : es;
			memcpy((uint8_t *)msg + at, p, m);
		}
	}
	dp_ring_release(&n->pair.cq, slots);
	return 1;
}

int dp_notify_recv(struct dp_client *c, struct dp_notification *e,
		   char sender[DP_NOTIFY_SENDER_MAX], void *msg, size_t cap, int timeout_ms)
{
	struct dp_notify *n = notify_get(c);
	uint64_t deadline;

	if (!n)
		return dp__fail(C_NOTIFY_RECV, c ? -EBADF : -EINVAL);
	if (!e || !sender || (!msg && cap))
		return dp__null_arg(C_NOTIFY_RECV, -EINVAL);
	deadline = timeout_ms < 0 ? UINT64_MAX : dp_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		int k = recv_one(n, e, sender, msg, cap);

		if (k)
			return dp__fail(C_NOTIFY_RECV, k);
		if (!timeout_ms) {
			/* As dp_notify_poll: the doorbell of an armed fd
			 * emptied, the service's liveness checked now and
			 * then. */
			k = notify_idle(c, n);
			return dp__fail(C_NOTIFY_RECV,
					k > 0 ? recv_one(n, e, sender, msg, cap) : k);
		}
		k = notify_sleep(c, n, deadline);
		if (k <= 0)
			return dp__fail(C_NOTIFY_RECV, k);
	}
}

static int notify_send(struct dp_client *c, int segment, const void *msg, size_t len)
{
	struct dp_msg_notify_send req = {.segment = (uint32_t)segment, .len = (uint32_t)len};
	int rc;

	if (len > DP_NOTIFY_MSG_MAX)
		return -EMSGSIZE;
	if (segment < 0)
		return -EBADF;
	if (!msg && len)
		return -EINVAL;
	/* The bytes go in a region of ours the service reads, as a queue's
	 * do (dp_proto.h); one call at a time uses it (the lock). */
	if (__atomic_load_n(&c->send_region, __ATOMIC_ACQUIRE) < 0) {
		void *buf;
		int region = dp__alloc(c, DP_NOTIFY_MSG_MAX, 0, &buf);

		if (region < 0)
			return region;
		pthread_mutex_lock(&c->lock);
		if (c->send_region < 0) {
			c->send_buf = buf;
			__atomic_store_n(&c->send_region, region, __ATOMIC_RELEASE);
			region = -1;
		}
		pthread_mutex_unlock(&c->lock);
		if (region >= 0)
			dp_free(c, region); /* another thread's came first */
	}
	pthread_mutex_lock(&c->lock);
	if (len)
		memcpy(c->send_buf, msg, len);
	req.region = (uint32_t)c->send_region;
	rc = dp__rpc(c, DP_MSG_NOTIFY_SEND, &req, sizeof(req), -1, NULL,
		     sizeof(struct dp_msg_status), NULL, 0);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int dp_notify_send(struct dp_client *c, int segment, const void *msg, size_t len)
{
	if (!c)
		return dp__null_arg(C_NOTIFY_SEND, -EINVAL);
	return dp__fail(C_NOTIFY_SEND, notify_send(c, segment, msg, len));
}

int dp_notify_fd(struct dp_client *c)
{
	struct dp_notify *n = notify_get(c);

	if (!n)
		return dp__fail(C_NOTIFY_FD, c ? -EBADF : -EINVAL);
	/* An event loop sleeps on the fd without dp_notify_wait: from now
	 * on every dp_notify_poll that finds the ring empty sets NEED_WAKEUP
	 * (and leaves it set) and empties the doorbell, so the fd reads ready
	 * exactly when there may be something to take. The fd is an epoll
	 * set of the doorbell and of an eventfd of ours: notifications that
	 * wait already rang no doorbell, and the eventfd makes it ready for
	 * them. Made at the first call, without the client's lock (a control
	 * call may hold it for seconds): one thread at a time takes
	 * notifications (docs/api.md), this call included. */
	if (n->epfd < 0) {
		struct epoll_event ev = {.events = EPOLLIN};
		int epfd = epoll_create1(EPOLL_CLOEXEC),
		    kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

		if (epfd < 0 || kick < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, n->db, &ev) ||
		    epoll_ctl(epfd, EPOLL_CTL_ADD, kick, &ev)) {
			int rc = -errno;

			if (epfd >= 0)
				close(epfd);
			if (kick >= 0)
				close(kick);
			return dp__fail(C_NOTIFY_FD, rc);
		}
		n->epfd = epfd;
		n->kick = kick;
	}
	atomic_store_explicit(&n->armed, true, memory_order_relaxed);
	if (!dp_ring_prepare_sleep(&n->pair.cq)) {
		uint64_t one = 1;

		/* Entries wait (NEED_WAKEUP is clear until a poll empties
		 * the ring, as after any poll that finds some): ready. */
		(void)!write(n->kick, &one, sizeof(one));
	}
	return n->epfd;
}

void dp__notify_free(struct dp_notify *n)
{
	dp_ring_pair_close(&n->pair);
	close(n->db);
	if (n->epfd >= 0)
		close(n->epfd);
	if (n->kick >= 0)
		close(n->kick);
	free(n);
}
