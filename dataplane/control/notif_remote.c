/* SPDX-License-Identifier: MIT */
/*
 * notif_remote.c - notifications across services (notif.h): the outbox
 * pollers hand them to, the per-peer queues the control thread sends them
 * from (rpc.h DP_RPC_NOTIFY, a batch at a time, one batch in flight per
 * peer: those of one peer arrive in the order they left), and the
 * receiving side, which puts them on the owners' rings.
 *
 * A notification follows its transfer's completion on the writer's
 * service (fabric: FI_DELIVERY_COMPLETE; same host: the copy into the
 * mapping is done), so the bytes are in place before the peer hears of it;
 * one sent alone (NOTIFY_SEND) follows what was handed over before it.
 * Entries travel with their bytes and their sender's name (rpc.h). It is
 * never waited for: the WRITE has completed already. One that cannot be
 * sent (the peer does not answer within DP_RPC_TIMEOUT_MS, refuses, or too
 * many wait) is lost and counted (stats: notify_lost).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "notif.h"
#include "rpc.h"
#include "segments.h"
#include "stats.h"

/* A batch that found every lookup slot taken goes again this much later. */
#define NOTIF_RETRY_MS 10

static struct ev_timer *retry_timer; /* the loop's; notif_remote_retry */

/* A notification on its way to `server`: its entry and bytes as they go
 * on the wire. */
struct notif_out {
	struct notif_out *next;
	char server[DP_NAME_MAX];
	struct dp_rpc_notify_entry e;
	uint8_t msg[]; /* e.msg_len bytes */
};

/* The outbox: pollers push, the control thread takes all. */
static struct {
	pthread_mutex_t lock;
	struct notif_out *head, *tail;
	unsigned n;
	atomic_ulong lost; /* pushes refused (full, out of memory) */
} outbox = {.lock = PTHREAD_MUTEX_INITIALIZER};
/* Rung by a push onto an empty outbox. */
static struct ev_wake outbox_wake = {.ev.fd = -1};

/* A peer's queue and the batch in flight (control thread). */
struct notif_peer {
	char server[DP_NAME_MAX];
	struct notif_out *head, *tail;
	unsigned queued;
	bool busy;   /* a batch is in flight */
	bool warned; /* a loss was logged since the last batch went through */
	unsigned nbatch;
	struct notif_peer *next;
};

static struct notif_peer *peers;

void notif_forward(const char *server, const char *segment, struct notif_req *n)
{
	uint32_t mlen = n->msg ? n->msg->len : 0;
	struct notif_out *o = NULL;
	bool was_empty = false;

	/* Full: the control thread has a wake-up pending already. */
	if (__atomic_load_n(&outbox.n, __ATOMIC_RELAXED) < NOTIF_OUT_MAX)
		o = malloc(sizeof(*o) + mlen);
	if (!o) {
		notif_req_release(n);
		atomic_fetch_add(&outbox.lost, 1);
		return;
	}
	memset(o, 0, sizeof(*o));
	snprintf(o->server, sizeof(o->server), "%s", server);
	snprintf(o->e.segment, sizeof(o->e.segment), "%s", segment);
	o->e.value = n->value;
	o->e.offset = n->offset;
	o->e.len = n->len;
	o->e.sender = n->sender;
	o->e.flags = n->flags;
	if (n->msg) {
		snprintf(o->e.sender_name, sizeof(o->e.sender_name), "%s", n->msg->sender);
		o->e.msg_len = mlen;
		memcpy(o->msg, n->msg->bytes, mlen);
		notif_req_release(n);
	}
	pthread_mutex_lock(&outbox.lock);
	if (outbox.n >= NOTIF_OUT_MAX) {
		pthread_mutex_unlock(&outbox.lock);
		free(o);
		atomic_fetch_add(&outbox.lost, 1);
		return;
	}
	was_empty = !outbox.head;
	if (outbox.tail)
		outbox.tail->next = o;
	else
		outbox.head = o;
	outbox.tail = o;
	__atomic_store_n(&outbox.n, outbox.n + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&outbox.lock);
	/* One wake-up per batch the control thread has not taken yet. */
	if (was_empty)
		wake_efd_ring(outbox_wake.ev.fd);
}

static struct notif_peer *peer_find(const char *server)
{
	struct notif_peer *p;

	for (p = peers; p; p = p->next)
		if (!strcmp(p->server, server))
			return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	snprintf(p->server, sizeof(p->server), "%s", server);
	p->next = peers;
	peers = p;
	return p;
}

static void peer_send(struct notif_peer *p);

/* The batch in flight is over: freed and counted. */
static void batch_end(struct notif_peer *p, int rc)
{
	unsigned n = p->nbatch;

	for (unsigned i = 0; i < n; i++) {
		struct notif_out *o = p->head;

		p->head = o->next;
		free(o);
	}
	if (!p->head)
		p->tail = NULL;
	p->queued -= n;
	p->busy = false;
	p->nbatch = 0;
	if (rc) {
		if (!p->warned)
			log_warn("notifications: %u for %s lost: %s (further losses: stats "
				 "notify_lost)",
				 n, p->server, strerror(-rc));
		p->warned = true;
		stats_notify_remote(0, n, 0, 0);
	} else {
		p->warned = false;
		stats_notify_remote(n, 0, 0, 0);
	}
}

static void batch_done(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds,
		       unsigned nfds)
{
	struct notif_peer *p = arg;

	(void)r;
	(void)fds;
	(void)nfds;
	batch_end(p, rc);
	peer_send(p);
}

/* The next batch of `p`, if it has one and none is in flight. */
static void peer_send(struct notif_peer *p)
{
	static uint8_t data[DP_RPC_NOTIFY_BYTES]; /* control thread */

	while (!p->busy && p->head && !atomic_load(&dp_stopping)) {
		struct notif_out *o = p->head;
		uint32_t bytes = 0;
		unsigned n = 0;
		int rc;

		/* In order, as many as fit: one always does (the largest
		 * entry is far below DP_RPC_NOTIFY_BYTES). */
		for (; o && n < DP_RPC_NOTIFY_MAX; o = o->next, n++) {
			size_t len = DP_RPC_NOTIFY_ENTRY_LEN(o->e.msg_len);

			if (bytes + len > sizeof(data))
				break;
			memcpy(data + bytes, &o->e, sizeof(o->e));
			memcpy(data + bytes + sizeof(o->e), o->msg, o->e.msg_len);
			memset(data + bytes + sizeof(o->e) + o->e.msg_len, 0,
			       len - sizeof(o->e) - o->e.msg_len);
			bytes += (uint32_t)len;
		}
		rc = rpc_notify_start(p->server, data, bytes, n, batch_done, p);
		if (!rc) {
			p->busy = true;
			p->nbatch = n;
			return;
		}
		/* Every lookup slot taken: the batch stays, and is sent again
		 * once the retry timer fires (nothing else would run it). */
		if (rc == -EAGAIN) {
			ev_timer_arm(retry_timer, dp_now_ns() + NOTIF_RETRY_MS * 1000000ull);
			return;
		}
		/* Not even started (the peer's name does not resolve): that
		 * batch is lost, the next one may do. */
		p->nbatch = n;
		batch_end(p, rc);
	}
}

/* Sends what pollers handed over (outbox_wake). */
static void notif_outbox_run(void)
{
	struct notif_out *o, *next;
	unsigned long lost;

	pthread_mutex_lock(&outbox.lock);
	o = outbox.head;
	outbox.head = outbox.tail = NULL;
	__atomic_store_n(&outbox.n, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&outbox.lock);
	lost = atomic_exchange(&outbox.lost, 0);
	if (lost) {
		log_warn("notifications: %lu lost: %u waiting already", lost, NOTIF_OUT_MAX);
		stats_notify_remote(0, lost, 0, 0);
	}
	for (; o; o = next) {
		struct notif_peer *p = peer_find(o->server);

		next = o->next;
		o->next = NULL;
		if (!p) {
			free(o);
			stats_notify_remote(0, 1, 0, 0);
			continue;
		}
		if (p->tail)
			p->tail->next = o;
		else
			p->head = o;
		p->tail = o;
		p->queued++;
	}
	for (struct notif_peer *p = peers; p; p = p->next)
		peer_send(p);
}

/* What entry `e` says is what a sender of ours could have said: a known
 * path; bytes and a sender's name together (DP_NOTIFY_F_MSG, value 0) or
 * neither; READ and ALONE only with bytes, never both; nothing of a range
 * for a notification alone. */
static bool entry_kind_ok(const struct dp_rpc_notify_entry *e)
{
	const uint32_t kinds = DP_NOTIFY_F_MSG | DP_NOTIFY_F_READ | DP_NOTIFY_F_ALONE;
	uint32_t path = e->flags & ~kinds, kind = e->flags & kinds;

	if (path != DP_NOTIFY_F_FABRIC && path != DP_NOTIFY_F_SAME_HOST)
		return false;
	if (!(kind & DP_NOTIFY_F_MSG))
		return !kind && !e->sender_name[0];
	if (e->value || strnlen(e->sender_name, sizeof(e->sender_name)) == sizeof(e->sender_name))
		return false;
	if (kind & DP_NOTIFY_F_ALONE)
		return !(kind & DP_NOTIFY_F_READ) && !e->offset && !e->len;
	return true;
}

/* Entry `e` of a batch, with its bytes `msg`, as its export's owner gets
 * it: only what a transfer to a live export could have done (a name of
 * ours, the access the transfer needed, a range inside it), else
 * dropped. */
static bool receive_one(const struct dp_rpc_notify_entry *e, const uint8_t *msg)
{
	struct notif_req req = {.value = e->value,
				.offset = e->offset,
				.len = e->len,
				.sender = e->sender,
				.flags = e->flags};
	unsigned need = e->flags & DP_NOTIFY_F_ALONE  ? 0
			: e->flags & DP_NOTIFY_F_READ ? DP_ACCESS_READ
						      : DP_ACCESS_WRITE;
	struct segment *s = NULL;
	bool ok;

	if (strnlen(e->segment, sizeof(e->segment)) < sizeof(e->segment))
		s = export_find(e->segment);
	if (!s || atomic_load(&s->dead) || (s->access & need) != need || e->len > s->region->len ||
	    e->offset > s->region->len - e->len || !entry_kind_ok(e))
		return false;
	if (e->flags & DP_NOTIFY_F_MSG) {
		req.msg = malloc(sizeof(*req.msg) + e->msg_len);
		if (!req.msg)
			return false;
		memcpy(req.msg->sender, e->sender_name, sizeof(req.msg->sender));
		req.msg->len = e->msg_len;
		memcpy(req.msg->bytes, msg, e->msg_len);
	}
	ok = notif_ring_put(s, &req);
	notif_req_release(&req);
	return ok;
}

int notif_receive(const struct dp_rpc_notify *q)
{
	uint64_t delivered = 0, dropped = 0;
	size_t at = 0;

	/* The shape first, whole: entries that fill `bytes` exactly, each
	 * with its length in range, or nothing is delivered. */
	for (unsigned i = 0; i < q->count; i++) {
		struct dp_rpc_notify_entry e;

		if (q->bytes - at < sizeof(e))
			return -EINVAL;
		memcpy(&e, q->data + at, sizeof(e));
		if (e.msg_len > DP_NOTIFY_MSG_MAX || e.reserved ||
		    (e.msg_len && !(e.flags & DP_NOTIFY_F_MSG)) ||
		    q->bytes - at < DP_RPC_NOTIFY_ENTRY_LEN(e.msg_len))
			return -EINVAL;
		at += DP_RPC_NOTIFY_ENTRY_LEN(e.msg_len);
	}
	if (at != q->bytes)
		return -EINVAL;
	at = 0;
	for (unsigned i = 0; i < q->count; i++) {
		struct dp_rpc_notify_entry e;

		memcpy(&e, q->data + at, sizeof(e));
		if (receive_one(&e, q->data + at + sizeof(e)))
			delivered++;
		else
			dropped++;
		at += DP_RPC_NOTIFY_ENTRY_LEN(e.msg_len);
	}
	stats_notify_remote(0, 0, delivered, dropped);
	return 0;
}

int notif_remote_start(int epfd, struct ev_timer *retry)
{
	retry_timer = retry;
	return ev_wake_open(epfd, &outbox_wake, notif_outbox_run, "the notifications' outbox");
}

int notif_remote_retry(struct ev_timer *t)
{
	(void)t;
	for (struct notif_peer *p = peers; p; p = p->next)
		peer_send(p);
	return EV_TIMER_NOMORE;
}

void notif_remote_cleanup(void)
{
	notif_outbox_run(); /* after dp_stopping: queues them, sends nothing */
	ev_wake_close(&outbox_wake);
	while (peers) {
		struct notif_peer *p = peers;

		peers = p->next;
		if (p->queued)
			stats_notify_remote(0, p->queued, 0, 0);
		while (p->head) {
			struct notif_out *o = p->head;

			p->head = o->next;
			free(o);
		}
		free(p);
	}
}
