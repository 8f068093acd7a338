/* SPDX-License-Identifier: MIT */
/*
 * notif_remote.c - notifications across services (notif.h): the outbox
 * pollers hand them to, the per-peer queues the control thread sends them
 * from (rpc.h DP_RPC_NOTIFY, a batch at a time, one batch in flight per
 * peer: those of one peer arrive in the order they left), and the
 * receiving side, which puts them on the owners' rings.
 *
 * A notification follows its WRITE's completion on the writer's service
 * (fabric: FI_DELIVERY_COMPLETE; same host: the copy into the mapping is
 * done), so the bytes are in place before the peer hears of it. It is
 * never waited for: the WRITE has completed already. One that cannot be
 * sent (the peer does not answer within DP_RPC_TIMEOUT_MS, refuses, or too
 * many wait) is lost and counted (stats: notify_lost).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "notif.h"
#include "rpc.h"
#include "segments.h"
#include "stats.h"

/* A notification on its way to `server`. */
struct notif_out {
	struct notif_out *next;
	char server[DP_NAME_MAX];
	struct dp_rpc_notify_entry e;
};

/* The outbox: pollers push, the control thread takes all. */
static struct {
	pthread_mutex_t lock;
	struct notif_out *head, *tail;
	unsigned n;
	atomic_ulong lost; /* pushes refused (full, out of memory) */
} outbox = {.lock = PTHREAD_MUTEX_INITIALIZER};

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

void notif_forward(const char *server, const char *segment, const struct notif_req *n)
{
	struct notif_out *o = NULL;
	bool was_empty = false;

	/* Full: the control thread has a wake-up pending already. */
	if (__atomic_load_n(&outbox.n, __ATOMIC_RELAXED) < NOTIF_OUT_MAX)
		o = malloc(sizeof(*o));
	if (!o) {
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
		wake_efd_ring(control_wake_efd);
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
	while (!p->busy && p->head && !atomic_load(&dp_stopping)) {
		struct dp_rpc_notify_entry e[DP_RPC_NOTIFY_MAX];
		struct notif_out *o = p->head;
		unsigned n = 0;
		int rc;

		for (; o && n < DP_RPC_NOTIFY_MAX; o = o->next)
			e[n++] = o->e;
		rc = rpc_notify_start(p->server, e, n, batch_done, p);
		if (!rc) {
			p->busy = true;
			p->nbatch = n;
			return;
		}
		/* Not even started (the peer's name does not resolve, too
		 * many calls): that batch is lost, the next one may do. */
		p->nbatch = n;
		batch_end(p, rc);
		if (rc == -EAGAIN)
			return;
	}
}

void notif_outbox_run(void)
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

void notif_receive(const struct dp_rpc_notify_entry *e, unsigned n)
{
	uint64_t delivered = 0, dropped = 0;

	for (unsigned i = 0; i < n; i++) {
		struct notif_req req = {.value = e[i].value,
					.offset = e[i].offset,
					.len = e[i].len,
					.sender = e[i].sender,
					.flags = e[i].flags};
		struct segment *s = NULL;

		/* Only what a WRITE to a live, writable export could have
		 * done: a name of ours, a range inside it, a known path. */
		if (strnlen(e[i].segment, sizeof(e[i].segment)) < sizeof(e[i].segment))
			s = export_find(e[i].segment);
		if (s &&
		    (atomic_load(&s->dead) || !(s->access & DP_ACCESS_WRITE) ||
		     e[i].len > s->region->len || e[i].offset > s->region->len - e[i].len ||
		     (e[i].flags != DP_NOTIFY_F_FABRIC && e[i].flags != DP_NOTIFY_F_SAME_HOST)))
			s = NULL;
		if (s && notif_ring_put(s, &req))
			delivered++;
		else
			dropped++;
	}
	stats_notify_remote(0, 0, delivered, dropped);
}

void notif_remote_cleanup(void)
{
	notif_outbox_run(); /* after dp_stopping: queues them, sends nothing */
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
