/* SPDX-License-Identifier: MIT */
/*
 * queue.c - libclient's data path: a queue pair (dp_queue_create maps its
 * rings and doorbells, dp_queue_destroy), descriptors written into the SQ
 * and published by their sequence words (dp_submit), completions taken from
 * the CQ (dp_poll, dp_wait). No system call unless a doorbell must be rung
 * or a sleep was asked for; the service's liveness is checked at most once
 * a millisecond. Also the exported copies of dataplane.h's dp_prep_*.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "clock.h"
#include "dp_client_pvt.h"

/* The exported copies of the header's inline helpers (C99 inline: this
 * declaration makes this file's definitions the external ones). */
extern inline void dp_prep_write(struct dp_desc *d, int region, uint64_t local_off, int segment,
				 uint64_t target_off, uint64_t len, uint64_t user_data);
extern inline void dp_prep_read(struct dp_desc *d, int region, uint64_t local_off, int segment,
				uint64_t target_off, uint64_t len, uint64_t user_data);
extern inline void dp_prep_write_notify(struct dp_desc *d, int region, uint64_t local_off,
					int segment, uint64_t target_off, uint64_t len,
					uint64_t user_data, uint64_t value);
extern inline void dp_prep_write_msg(struct dp_desc *d, int region, uint64_t local_off, int segment,
				     uint64_t target_off, uint64_t len, uint64_t user_data,
				     const void *msg, size_t msg_len);
extern inline void dp_prep_read_msg(struct dp_desc *d, int region, uint64_t local_off, int segment,
				    uint64_t target_off, uint64_t len, uint64_t user_data,
				    const void *msg, size_t msg_len);

void dp__queue_unmap(struct dp_queue *q)
{
	dp_ring_pair_close(&q->pair);
	close(q->sq_efd);
	close(q->cq_efd);
	free(q);
}

/*
 * Whether this process is registered for the service's membarrier (its
 * pollers' sleep path), so that dp_submit may skip its fence: registered
 * once per process (a forked child registers again), false where the
 * kernel or a seccomp filter refuses.
 */
static bool light_registered(void)
{
	static _Atomic pid_t registered; /* the pid that registered; -pid: refused */
	pid_t pid = getpid(), r = atomic_load_explicit(&registered, memory_order_relaxed);

	if (r != pid && r != -pid) {
		r = dp_ring_light_register() ? -pid : pid;
		atomic_store_explicit(&registered, r, memory_order_relaxed);
	}
	return r == pid;
}

static int queue_create(struct dp_client *c, uint32_t depth, struct dp_queue **out)
{
	struct dp_msg_queue_create req = {.depth = depth};
	struct dp_msg_queue_create_reply r;
	struct dp_queue *q;
	int fds[3], rc;

	if (!c || !out)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	rc = dp__rpc_locked(c, DP_MSG_QUEUE_CREATE, &req, sizeof(req), -1, &r, sizeof(r), fds, 3);
	if (rc) {
		free(q);
		return rc;
	}
	rc = dp_ring_pair_attach_seq(
		&q->pair, fds[0],
		&(struct dp_ring_layout){0, sizeof(struct dp_desc), DP_SQ_SEQ_OFF},
		&(struct dp_ring_layout){0, sizeof(struct dp_cqe), DP_CQ_SEQ_OFF});
	if (!rc && (dp_ring_size(&q->pair.sq) != r.depth || dp_ring_size(&q->pair.cq) != r.depth)) {
		dp_ring_pair_close(&q->pair);
		fds[0] = -1;
		rc = -EBADMSG;
	}
	if (rc) {
		if (fds[0] >= 0)
			close(fds[0]);
		close(fds[1]);
		close(fds[2]);
		free(q);
		return rc;
	}
	if ((r.flags & DP_QUEUE_F_SQ_MEMBARRIER) && light_registered())
		dp_ring_set_light(&q->pair.sq);
	q->c = c;
	q->sq_efd = fds[1];
	q->cq_efd = fds[2];
	q->id = r.queue_id;
	q->depth = r.depth;
	q->st.depth = r.depth;
	q->msg_region = -1;
	pthread_mutex_lock(&c->lock);
	q->next = c->queues;
	c->queues = q;
	pthread_mutex_unlock(&c->lock);
	*out = q;
	return 0;
}

int dp_queue_create(struct dp_client *c, uint32_t depth, struct dp_queue **out)
{
	if (!c || !out)
		return dp__null_arg(C_QUEUE_CREATE, -EINVAL);
	return dp__fail(C_QUEUE_CREATE, queue_create(c, depth, out));
}

int dp_queue_destroy(struct dp_queue *q)
{
	struct dp_client *c;
	struct dp_msg_id req;
	int rc;

	if (!q)
		return dp__fail(C_QUEUE_DESTROY, -EINVAL);
	c = q->c;
	req = (struct dp_msg_id){.id = q->id};
	pthread_mutex_lock(&c->lock);
	rc = dp__rpc(c, DP_MSG_QUEUE_DESTROY, &req, sizeof(req), -1, NULL,
		     sizeof(struct dp_msg_status), NULL, 0);
	for (struct dp_queue **pp = &c->queues; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	if (q->msg_region >= 0)
		dp_free(c, q->msg_region);
	dp__queue_unmap(q);
	return dp__fail(C_QUEUE_DESTROY, rc);
}

/* Rate-limited liveness check for calls that made no progress. */
static int idle_check(struct dp_queue *q)
{
	uint64_t t = dp_clock_ns(CLOCK_MONOTONIC_COARSE);

	if (t - q->last_check_ns < LIVENESS_EVERY_NS)
		return 0;
	q->last_check_ns = t;
	return dp__service_alive(q->c) ? 0 : -ECONNRESET;
}

_Static_assert(offsetof(struct dp_desc, reserved1) == DP_SQ_SEQ_OFF, "SQ sequence word");
_Static_assert(offsetof(struct dp_cqe, reserved) + 4 == DP_CQ_SEQ_OFF, "CQ sequence word");

/*
 * A descriptor whose reserved1 is set, into its slot: every field but the
 * ring's sequence word in reserved1's place (an odd value there could
 * publish the entry half written), and reserved1 becomes reserved0's low
 * bit, which the service refuses with -EINVAL as it would reserved1.
 */
static void slot_write_reserved1(struct dp_desc *slot, const struct dp_desc *d)
{
	memcpy(slot, d, offsetof(struct dp_desc, reserved1));
	memcpy(&slot->target_off, &d->target_off,
	       sizeof(*d) - offsetof(struct dp_desc, target_off));
	slot->reserved0 |= 1;
}

/* One descriptor into its SQ slot, stamped, its word not yet stored. A
 * reserved1 of 0 is copied over the word: 0 publishes nothing. */
static inline void slot_write(struct dp_desc *slot, const struct dp_desc *d, uint64_t now)
{
	if (__builtin_expect(d->reserved1 == 0, 1))
		*slot = *d;
	else
		slot_write_reserved1(slot, d);
	slot->submit_ns = now;
}

/* n descriptors into consecutive SQ slots from index idx, each written
 * and then published by its sequence word (dp_ring_commit_tail moves the
 * tail after). Returns their flags, ORed: whether any carries a message
 * (submit_msgs), at the cost of one OR per descriptor, no pass of its own. */
static inline uint8_t slots_write(struct dp_desc *slot, const struct dp_desc *d, uint32_t n,
				  uint64_t now, uint32_t idx)
{
	uint32_t v = dp_ring_seq_value(idx);
	uint8_t flags = 0;

	for (const struct dp_desc *end = d + n; d < end; d++, slot++, v += 2) {
		slot_write(slot, d, now);
		flags |= d->flags;
		__atomic_store_n(&slot->reserved1, v, __ATOMIC_RELEASE);
	}
	return flags;
}

/* The words of slots [from, k) of a run from idx taken back (the first's,
 * never stored, needs none): the run ends before `from`. */
static void slots_take_back(struct dp_queue *q, uint32_t idx, int from, int k)
{
	for (int j = from > 0 ? from : 1; j < k; j++) {
		struct dp_desc *s = dp_ring_slot(&q->pair.sq, idx + (uint32_t)j);

		__atomic_store_n(&s->reserved1, 0, __ATOMIC_RELAXED);
	}
}

/*
 * dp_submit, once its k slots from idx are written (all but the first
 * published by their words, which the first's gates: the service reads
 * none of them yet) and some carry DP_DESC_F_NOTIFY_MSG: each message's
 * bytes go into the queue's message buffer, at its SQ index's place (made
 * at the first message), and its slot names them by region, offset and
 * length (dp_proto.h); the caller's notify and submit_ns (the address and
 * length) never reach the service. A length beyond the most ends the run
 * there: the words of that slot and those after it are taken back (0 is
 * no slot's value). Returns how many stay (-EMSGSIZE, -EINVAL or the
 * buffer's error when none).
 */
static int submit_msgs(struct dp_queue *q, const struct dp_desc *descs, uint32_t idx, int k)
{
	for (int i = 0; i < k; i++) {
		const struct dp_desc *d = &descs[i];
		struct dp_desc *slot = dp_ring_slot(&q->pair.sq, idx + (uint32_t)i);
		uint32_t off;

		if (!(d->flags & DP_DESC_F_NOTIFY_MSG))
			continue;
		if (d->submit_ns > DP_NOTIFY_MSG_MAX || (!d->notify && d->submit_ns)) {
			slots_take_back(q, idx, i, k);
			if (i)
				return i;
			return d->submit_ns > DP_NOTIFY_MSG_MAX ? -EMSGSIZE : -EINVAL;
		}
		if (q->msg_region < 0) {
			void *buf;
			int rc = dp__alloc(q->c, (size_t)q->depth * DP_NOTIFY_MSG_MAX, 0, &buf);

			if (rc < 0) {
				slots_take_back(q, idx, i, k);
				return i ? i : rc;
			}
			q->msg_region = rc;
			q->msg_buf = buf;
		}
		off = ((idx + (uint32_t)i) & (q->depth - 1)) * DP_NOTIFY_MSG_MAX;
		if (d->submit_ns)
			memcpy(q->msg_buf + off, (const void *)(uintptr_t)d->notify, d->submit_ns);
		slot->notify = DP_NOTIFY_MSG_REF(q->msg_region, off, d->submit_ns);
	}
	return k;
}

int dp_submit(struct dp_queue *q, const struct dp_desc *descs, unsigned n)
{
	uint8_t flags = 0;
	struct dp_desc *slot;
	uint32_t idx, credit, first;
	uint64_t now;
	int k;

	if (is_dead(q->c) || idle_check(q))
		return dp__fail(C_SUBMIT, -ECONNRESET);
	/* The ring alone never says that the service died: a client that
	 * submits slowly and reaps late would fill it for seconds first. */
	credit = q->depth - q->in_flight;
	if (n > credit)
		n = credit;
	if (!n)
		return 0;
	k = dp_ring_reserve(&q->pair.sq, n, &idx);
	if (k <= 0)
		return dp__fail(C_SUBMIT, k < 0 ? k : idle_check(q));
	now = dp_now_ns();
	/* One pass: each slot is written once, stamp included, in at most two
	 * runs of consecutive slots (before and after the wrap). */
	first = dp_ring_size(&q->pair.sq) - (idx & q->pair.sq.mask);
	if (first > (uint32_t)k)
		first = (uint32_t)k;
	slot = dp_ring_slot(&q->pair.sq, idx);
	slot_write(slot, descs, now);
	flags = descs->flags | slots_write(slot + 1, descs + 1, first - 1, now, idx + 1);
	flags |= slots_write(dp_ring_slot(&q->pair.sq, idx + first), descs + first,
			     (uint32_t)k - first, now, idx + first);
	if (__builtin_expect(flags & DP_DESC_F_NOTIFY_MSG, 0)) {
		k = submit_msgs(q, descs, idx, k);
		if (k <= 0)
			return dp__fail(C_SUBMIT, k);
	}
	/* The first slot's word last (dp_ring__publish says why). */
	__atomic_store_n(&slot->reserved1, dp_ring_seq_value(idx), __ATOMIC_RELEASE);
	dp_ring_commit_tail(&q->pair.sq, (uint32_t)k);
	if (dp_ring_needs_wakeup(&q->pair.sq))
		dp_doorbell_ring(q->sq_efd);
	q->in_flight += (uint32_t)k;
	q->st.submitted += (uint64_t)k;
	return k;
}

int dp_poll(struct dp_queue *q, struct dp_cqe *cqes, unsigned max)
{
	int k = dp_ring_dequeue_burst(&q->pair.cq, cqes, max);
	uint64_t bytes = 0, failed = 0;

	if (k < 0)
		return dp__fail(C_POLL, k);
	if (!k) {
		/* An empty poll makes no call into errors.c unless the
		 * service is gone. */
		int rc = q->in_flight ? idle_check(q) : 0;

		return rc ? dp__fail(C_POLL, rc) : 0;
	}
	/* Counted in locals: the stores into cqes could alias q->st. */
	for (int i = 0; i < k; i++) {
		cqes[i].reserved = 0; /* the ring's sequence word (dp_proto.h) */
		if (cqes[i].status)
			failed++;
		else
			bytes += cqes[i].bytes;
	}
	q->st.failed += failed;
	q->st.completed += (uint64_t)k - failed;
	q->st.bytes += bytes;
	q->in_flight -= (uint32_t)k <= q->in_flight ? (uint32_t)k : q->in_flight;
	return k;
}

int dp_wait(struct dp_queue *q, struct dp_cqe *cqes, unsigned max, int timeout_ms)
{
	uint64_t deadline =
		timeout_ms < 0 ? UINT64_MAX : dp_now_ns() + (uint64_t)timeout_ms * 1000000u;

	for (;;) {
		/* The control socket wakes us on its hang-up only: replies to
		 * other threads' calls are theirs (dp__service_alive). */
		struct pollfd pfd[2] = {{.fd = q->cq_efd, .events = POLLIN},
					{.fd = q->c->fd, .events = POLLRDHUP}};
		int k = dp_poll(q, cqes, max), wait_ms;
		uint64_t now;

		if (k)
			return k < 0 ? dp__fail(C_WAIT, k) : k;
		if (!dp__service_alive(q->c))
			return dp__fail(C_WAIT, -ECONNRESET);
		now = dp_now_ns();
		if (now >= deadline)
			return 0;
		wait_ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
		if (!dp_ring_prepare_sleep(&q->pair.cq))
			continue;
		poll(pfd, 2, wait_ms);
		dp_ring_finish_sleep(&q->pair.cq);
		if (pfd[0].revents & POLLIN)
			dp_doorbell_drain(q->cq_efd);
	}
}

int dp__queue_ring(struct dp_queue *q, struct dp_ring_pair **pair, int *sq_efd)
{
	if (!q || !pair || !sq_efd)
		return -EINVAL;
	*pair = &q->pair;
	*sq_efd = q->sq_efd;
	return 0;
}

int dp__queue_cq_doorbell(struct dp_queue *q)
{
	return q ? q->cq_efd : -EINVAL;
}

int dp_queue_stats(const struct dp_queue *q, struct dp_queue_stats *st)
{
	if (!q || !st)
		return dp__fail(C_QUEUE_STATS, -EINVAL);
	*st = q->st;
	st->in_flight = q->in_flight;
	return 0;
}
