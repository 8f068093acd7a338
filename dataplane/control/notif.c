/* SPDX-License-Identifier: MIT */
/*
 * notif.c - the service's side of notification rings (notif.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric.h"
#include "notif.h"
#include "samehost.h"
#include "session.h"
#include "stats.h"

int notif_open(struct client *c, uint32_t entries, int fds[2])
{
	struct notif_ring *r;
	int db[2], rc;

	if (atomic_load_explicit(&c->notify, memory_order_relaxed))
		return -EEXIST;
	if (!entries)
		entries = DP_NOTIFY_DEFAULT_ENTRIES;
	if (entries > cfg.max_depth && entries > DP_NOTIFY_DEFAULT_ENTRIES)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	rc = dp_ring_pair_create(&r->pair, "dataplane-notify", 1, 8, entries,
				 sizeof(struct dp_notification), 0);
	if (rc) {
		free(r);
		return rc;
	}
	rc = dp_doorbell_pair(db);
	if (rc) {
		dp_ring_pair_close(&r->pair);
		free(r);
		return rc;
	}
	pthread_spin_init(&r->lock, PTHREAD_PROCESS_PRIVATE);
	r->db = db[0];
	r->db_peer = db[1];
	fds[0] = r->pair.fd;
	fds[1] = r->db_peer;
	/* Release: pairs with the acquire in notif_deliver(); the ring is
	 * whole before a poller can see it. */
	atomic_store_explicit(&c->notify, r, memory_order_release);
	return 0;
}

void notif_free(struct client *c)
{
	struct notif_ring *r = atomic_exchange(&c->notify, NULL);

	if (!r)
		return;
	close(r->db);
	close(r->db_peer);
	dp_ring_pair_close(&r->pair);
	pthread_spin_destroy(&r->lock);
	free(r);
}

_Static_assert(sizeof(struct dp_notification) == DP_NOTIFY_ENTRY_SIZE, "ring entry");
_Static_assert(DP_NOTIFY_SENDER_MAX == DP_NAME_MAX, "a sender's name is a name");

void notif_req_release(struct notif_req *n)
{
	free(n->msg);
	n->msg = NULL;
}

int notif_msg_copy(const struct client *c, uint64_t ref, struct notif_msg **out)
{
	uint32_t id = DP_NOTIFY_MSG_REGION(ref), off = DP_NOTIFY_MSG_OFF(ref),
		 len = DP_NOTIFY_MSG_LEN(ref);
	const struct region *r;
	struct notif_msg *m;

	if (len > DP_NOTIFY_MSG_MAX)
		return -EMSGSIZE;
	r = id < DP_MAX_REGIONS ? atomic_load_explicit(&c->regions[id], memory_order_acquire)
				: NULL;
	if (!r || r->kind != REGION_HOST)
		return -EBADF;
	if (len > r->len || off > r->len - len)
		return -EFAULT;
	m = malloc(sizeof(*m) + len);
	if (!m)
		return -ENOMEM;
	if (c->session[0])
		snprintf(m->sender, sizeof(m->sender), "%s", c->session);
	else
		snprintf(m->sender, sizeof(m->sender), "%.50s/%u", cfg.server_name, c->id);
	m->len = len;
	/* Once, from memory the client may rewrite at any time: what is
	 * delivered is this copy. */
	memcpy(m->bytes, r->base + off, len);
	*out = m;
	return 0;
}

/* Writes one entry into shared memory the client can read at any time:
 * field by field, nothing of the service's beyond what it says. */
static void entry_fill(struct dp_notification *e, const struct segment *seg,
		       const struct notif_req *n, uint32_t dropped)
{
	memset(e, 0, sizeof(*e));
	e->value = n->value;
	e->offset = n->offset;
	if (seg->session_member && !(n->flags & DP_NOTIFY_F_ALONE))
		e->offset += seg->session_va;
	e->len = n->len;
	e->flags = n->flags;
	e->dropped = dropped;
	e->sender = n->sender;
	e->msg_len = n->msg ? n->msg->len : 0;
	/* seg->name is NUL-terminated within DP_NAME_MAX (= the field); a
	 * session's member is named by its session. */
	if (seg->session_member)
		memcpy(e->segment, seg->owner->session,
		       strnlen(seg->owner->session, sizeof(e->segment) - 1));
	else
		memcpy(e->segment, seg->name, strnlen(seg->name, sizeof(e->segment) - 1));
}

/* The entries after a DP_NOTIFY_F_MSG one (dp_proto.h): the sender's name,
 * NUL-padded, then the bytes, DP_NOTIFY_ENTRY_SIZE at a time, slot by slot
 * (the run may wrap); their room was reserved with the first's. */
static void msg_fill(struct dp_ring *cq, const struct notif_msg *m, uint32_t slots)
{
	const uint32_t es = DP_NOTIFY_ENTRY_SIZE;

	for (uint32_t k = 1; k < slots; k++) {
		uint8_t *e = dp_ring_slot(cq, cq->local + k);
		uint32_t at = (k - 1) * es, n;

		memset(e, 0, es);
		if (at < DP_NOTIFY_SENDER_MAX) {
			/* es is twice the name: the first slot holds all of it
			 * and the first bytes. */
			memcpy(e, m->sender, strnlen(m->sender, DP_NOTIFY_SENDER_MAX - 1));
			n = m->len < es - DP_NOTIFY_SENDER_MAX ? m->len : es - DP_NOTIFY_SENDER_MAX;
			memcpy(e + DP_NOTIFY_SENDER_MAX, m->bytes, n);
			continue;
		}
		at -= DP_NOTIFY_SENDER_MAX;
		n = m->len - at < es ? m->len - at : es;
		memcpy(e, m->bytes + at, n);
	}
}

bool notif_ring_put(struct segment *seg, const struct notif_req *n)
{
	uint32_t slots = n->msg ? DP_NOTIFY_MSG_SLOTS(n->msg->len) : 1;
	struct notif_ring *r = NULL;
	struct dp_notification *e;
	bool ok = false, ring = false;

	/* A dead export's owner may be gone; a live one's is alive for this
	 * loop (its teardown kills its exports, then waits a grace period
	 * before it frees the client and the ring). */
	if (!atomic_load_explicit(&seg->dead, memory_order_acquire) && seg->owner)
		r = atomic_load_explicit(&seg->owner->notify, memory_order_acquire);
	if (r) {
		pthread_spin_lock(&r->lock);
		/* No room for the whole record: dropped and counted. A head
		 * out of range (the client's own doing) reads as no room, for
		 * good. */
		if (dp_ring_stage(&r->pair.cq, slots - 1, (void **)&e) &&
		    dp_ring_stage(&r->pair.cq, 0, (void **)&e)) {
			entry_fill(e, seg, n, r->dropped);
			if (n->msg)
				msg_fill(&r->pair.cq, n->msg, slots);
			/* All of a record or none of it (dp_proto.h). */
			dp_ring_commit(&r->pair.cq, slots);
			ring = dp_ring_needs_wakeup(&r->pair.cq);
			ok = true;
		} else {
			r->dropped++;
		}
		pthread_spin_unlock(&r->lock);
		/* Outside the lock: never blocks (MSG_DONTWAIT), and the fd
		 * lives as long as the ring. */
		if (ring)
			dp_doorbell_ring(r->db);
	}
	return ok;
}

void notif_deliver(struct poller *p, struct segment *seg, struct notif_req *n)
{
	bool ok;

	if (seg->remote || seg->same) {
		/* The writer's client id means nothing over there; its name
		 * (a message's) does. notif_forward takes the message. */
		n->flags = (n->flags & ~NOTIF_F_PATH) |
			   (seg->remote ? DP_NOTIFY_F_FABRIC : DP_NOTIFY_F_SAME_HOST);
		if (seg->remote)
			n->sender = 0;
		notif_forward(seg->remote ? seg->remote->peer->name
					  : samehost_seg_server(seg->same),
			      seg->name, n);
		return;
	}
	ok = notif_ring_put(seg, n);
	notif_req_release(n);
	if (p)
		stats_notify(p, ok);
}

void notif_finish(struct poller *p, struct segment *seg, struct notif_req *n, int status)
{
	if (!status)
		notif_deliver(p, seg, n);
	else
		notif_req_release(n);
}

int notif_send(struct client *c, const struct dp_msg_notify_send *req)
{
	struct seg_handle *h = NULL;
	struct notif_req n = {.sender = c->id,
			      .flags = DP_NOTIFY_F_LOCAL | DP_NOTIFY_F_ALONE | DP_NOTIFY_F_MSG};
	struct segment *seg;
	int rc;

	if (req->len > DP_NOTIFY_MSG_MAX)
		return -EMSGSIZE;
	if (req->segment < DP_MAX_SEGS)
		h = atomic_load_explicit(&c->segs[req->segment], memory_order_acquire);
	if (!h)
		return -EBADF;
	/* A session's: through any of its members, to its client; with none
	 * known, the session is asked again first (control.c). */
	seg = h->sess ? session_any_member(h->sess) : h->seg;
	if (!seg)
		return NOTIF_SEND_ASK;
	if (atomic_load_explicit(&seg->dead, memory_order_acquire) ||
	    (seg->same && !samehost_alive(seg->same)))
		return -ECONNRESET;
	rc = notif_msg_copy(c, DP_NOTIFY_MSG_REF(req->region, req->offset, req->len), &n.msg);
	if (rc)
		return rc;
	/* Another service's: through the outbox, behind what this service's
	 * pollers handed over before (their WRITEs completed before this
	 * call), so that order holds there too. */
	notif_deliver(NULL, seg, &n);
	return 0;
}
