/* SPDX-License-Identifier: MIT */
/*
 * control.c - the control socket: clients attach, open queue pairs,
 * register memory, export and open segments. One thread, one epoll loop.
 *
 * Every message is checked before it is believed (ctlmsg.c): the packet
 * length must equal header + the type's payload, strings must be
 * NUL-terminated inside their field, fds must come exactly where a type
 * expects them (any other fd is closed). A message those checks call
 * malformed (ctl_msg_strike()) gets an error reply and a strike; the third
 * strike disconnects the client. A message that passed goes to its
 * handler, which returns a status (0 or -errno) and fills the reply; the
 * dispatcher sends it. A failed request is never a strike. Table changes
 * are published with release stores and reclaimed only after
 * qsbr_synchronize(). Exports, the remote-segment cache and peers are
 * segments.c's; the fds of the loop (event.h) each carry their handler.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "ctlmsg.h"
#include "directory.h"
#include "dp_internal.h"
#include "engine.h"
#include "event.h"
#include "net.h"
#include "notif.h"
#include "rpc.h"
#include "segments.h"
#include "session.h"
#include "stats.h"

#define MAX_STRIKES 3
/* The most a request carries: one per piece of REGION_REGISTER_CUDA_VMM. */
#define MAX_FDS DP_CUDA_VMM_MAX_PIECES
/* Refused connections that wait for their HELLO, to be told why (at most
 * --hello-timeout-ms each); beyond this many, the oldest silent one of the
 * process that holds most of them is hung up on (evict_silent). */
#define MAX_REFUSING 64
/* A handler's return for "the reply comes later" (struct ctl_wait). */
#define CTL_PENDING 1

/* A client's connection: its socket's handler in the epoll set. */
struct conn {
	struct ev_handler ev; /* ev.fd is c->fd */
	struct client *c;
	struct conn *next;
};

static struct {
	int epfd;
	struct ev_handler listen, rpc, signals, wake;
	struct ev_timers timers;
	/* Connections to drop: broken ones (a poller found a queue corrupt),
	 * silent ones evicted, and those past their HELLO deadline (armed
	 * for the earliest). */
	struct ev_timer reap;
	struct ev_timer rpc_deadlines; /* armed by rpc.c */
	struct ev_timer notify_retry;  /* armed by notif_remote.c */
	struct ev_timer quarantine;    /* host.c's quarantined mappings */
	struct ev_wake quarantined;    /* host.c: the first one is kept */
} ctl = {.epfd = -1};

int control_wake_efd = -1; /* made by main before any thread starts */

static struct conn *conns;
static unsigned nclients;  /* admitted connections, HELLO or not */
static unsigned nrefusing; /* refused ones waiting to be told */
static uint32_t next_client_id = 1;

/* ---- quotas (docs/reliability.md, "Limits") ----
 *
 * What one uid holds: its admitted connections (--max-clients-per-uid)
 * and the bytes of its clients' memory the service has mapped
 * (--max-mapped-gb-per-uid). The resource the second guards is the
 * service's address space, not RAM: a sparse memfd maps without a page of
 * it, and one client mapping 128 TiB left no room for anyone's 1 MiB.
 *
 * What one process holds, the same within its uid's (struct proc_acct):
 * engines of one host usually run as one uid, and a limit per uid alone
 * let one engine lock its siblings out. */
struct uid_acct {
	uid_t uid;
	unsigned conns;
	uint64_t mapped;
	struct uid_acct *next;
};

static struct uid_acct *uid_accts;

static struct uid_acct *uid_find(uid_t uid)
{
	for (struct uid_acct *a = uid_accts; a; a = a->next)
		if (a->uid == uid)
			return a;
	return NULL;
}

/* One more connection of `uid`: its account, or NULL (out of memory). */
static struct uid_acct *uid_get(uid_t uid)
{
	struct uid_acct *a = uid_find(uid);

	if (!a) {
		a = calloc(1, sizeof(*a));
		if (!a)
			return NULL;
		a->uid = uid;
		a->next = uid_accts;
		uid_accts = a;
	}
	a->conns++;
	return a;
}

/* A connection of the account's uid is gone; the account goes with its
 * last (by then its clients' regions are uncharged). */
static void uid_put(struct uid_acct *a)
{
	if (--a->conns)
		return;
	for (struct uid_acct **pp = &uid_accts; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	free(a);
}

/*
 * What one process holds (SO_PEERCRED pid at accept): its admitted
 * connections (--max-clients-per-process), its connections without HELLO,
 * refused ones included (--max-connecting-per-process), its refused ones
 * waiting to be told, and the bytes mapped for its clients
 * (--max-mapped-gb-per-process). An account lives exactly as long as a
 * connection of its pid, admitted or refused: a pid reused after the last
 * one is gone starts afresh. Pid 0 (a peer in a pid namespace the service
 * cannot see into) has an account but no per-process limit: every such
 * peer reads as pid 0, and its uid's limits hold.
 */
struct proc_acct {
	pid_t pid;
	unsigned refs; /* its connections, admitted or refused */
	unsigned conns, connecting, refusing;
	unsigned evicted; /* silent connections hung up on (logged when it goes) */
	uint64_t mapped;
	struct proc_acct *next;
};

static struct proc_acct *proc_accts;

/* The account of `pid`, made when it has none (not referenced yet), or
 * NULL (out of memory). */
static struct proc_acct *proc_get(pid_t pid)
{
	struct proc_acct *p;

	for (p = proc_accts; p; p = p->next)
		if (p->pid == pid)
			return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->pid = pid;
	p->next = proc_accts;
	proc_accts = p;
	return p;
}

/* Frees the account once no connection of its pid is left. */
static void proc_put(struct proc_acct *p)
{
	if (p->refs)
		return;
	if (p->evicted > 1)
		log_warn("pid %d: %u connections without HELLO hung up on in all "
			 "(--max-connecting-per-process, or the refused ones' budget)",
			 (int)p->pid, p->evicted);
	for (struct proc_acct **pp = &proc_accts; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	free(p);
}

/* Whether per-process limits apply to `p` (its pid is known). */
static bool proc_limited(const struct proc_acct *p)
{
	return p->pid > 0;
}

/* The uid's limit first, as at accept (accept_refusal). */
int client_map_quota(const struct client *c, uint64_t len)
{
	const struct proc_acct *p = c->proc;

	if (len > cfg.max_mapped_per_uid || c->acct->mapped > cfg.max_mapped_per_uid - len) {
		log_warn("client %u (pid %d uid %d '%s'): region of %llu bytes refused: uid has "
			 "%llu of %llu bytes mapped (--max-mapped-gb-per-uid)",
			 c->id, (int)c->pid, (int)c->uid, c->name, (unsigned long long)len,
			 (unsigned long long)c->acct->mapped,
			 (unsigned long long)cfg.max_mapped_per_uid);
		return -EDQUOT;
	}
	if (proc_limited(p) &&
	    (len > cfg.max_mapped_per_process || p->mapped > cfg.max_mapped_per_process - len)) {
		log_warn("client %u (pid %d uid %d '%s'): region of %llu bytes refused: the "
			 "process has %llu of %llu bytes mapped (--max-mapped-gb-per-process)",
			 c->id, (int)c->pid, (int)c->uid, c->name, (unsigned long long)len,
			 (unsigned long long)p->mapped,
			 (unsigned long long)cfg.max_mapped_per_process);
		return -EFBIG;
	}
	return 0;
}

/* A region leaves the client's table: its uid and process get its bytes
 * back. */
static void region_uncharge(struct client *c, struct region *reg)
{
	c->acct->mapped -= reg->charged;
	c->proc->mapped -= reg->charged;
	reg->charged = 0;
}

struct msg_in {
	struct dp_msg_hdr hdr;
	const void *payload;
	int fds[MAX_FDS];
	int nfds;
};

/* A handler's reply: a payload whose first field is the status, and fds
 * that go with it; or, len 0, a bare status (the handler's return). */
struct msg_out {
	_Alignas(8) char payload[DP_MSG_MAX - sizeof(struct dp_msg_hdr)];
	size_t len;
	int fds[3];
	int nfds;
	bool hang_up; /* disconnect the client once the reply is sent */
};

static int send_reply(struct client *c, const struct dp_msg_hdr *req, const void *payload,
		      size_t len, const int *fds, int nfds)
{
	struct dp_msg_hdr hdr = {.magic = DP_PROTO_MAGIC,
				 .version = DP_PROTO_VERSION,
				 .type = (uint16_t)(req->type | DP_MSG_REPLY),
				 .len = (uint32_t)len,
				 .seq = req->seq};
	struct iovec iov[2] = {{&hdr, sizeof(hdr)}, {(void *)payload, len}};

	return dp_net_send_fds(c->fd, iov, 2, fds, nfds, MSG_DONTWAIT);
}

/* The reply to a request (`req` all zero when no whole header came). A
 * reply that cannot be sent is dropped: the client is gone or does not
 * read, and its socket's hang-up or the next request settles it. */
static void reply(struct client *c, const struct dp_msg_hdr *req, int status,
		  const struct msg_out *o)
{
	struct dp_msg_status st = {.status = status};

	if (o && o->len)
		send_reply(c, req, o->payload, o->len, o->fds, o->nfds);
	else
		send_reply(c, req, &st, sizeof(st), NULL, 0);
}

/* Sets a handler's reply payload; returns `status` for the handler to. */
static int reply_with(struct msg_out *o, const void *payload, size_t len, int status)
{
	memcpy(o->payload, payload, len);
	o->len = len;
	return status;
}

static void close_fds(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

/* The fds of a type that carries them (as many as ctl_msg_fds() says: the
 * checks saw them come), now the handler's to close; 0 for other types,
 * whose stray fds the dispatcher closes. */
static unsigned take_fds(struct msg_in *m)
{
	unsigned n = ctl_msg_fds(&m->hdr, m->payload);

	if (n)
		m->nfds = 0;
	return n;
}

/* ---- handlers: each runs on a message ctl_msg_check_payload() accepted
 * (length, fds, fields), checks what needs state, and returns 0 or
 * -errno; a reply with a payload goes in `o`. ---- */

static int on_hello(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_hello *h = m->payload;
	struct dp_msg_hello_reply r = {.abi_version = DP_ABI_VERSION,
				       .default_depth = cfg.queue_depth,
				       .max_depth = cfg.max_depth};

	if (c->hello)
		return -EALREADY;
	if (h->abi_version != DP_ABI_VERSION) {
		log_warn("client %u (pid %d): ABI %u, we speak %u", c->id, (int)c->pid,
			 h->abi_version, DP_ABI_VERSION);
		/* Answered in a HELLO reply, then disconnected; no strike. */
		r.status = -EPROTONOSUPPORT;
		o->hang_up = true;
		return reply_with(o, &r, sizeof(r), r.status);
	}
	if (c->refuse) {
		/* Refused at accept (--max-clients, --max-clients-per-uid):
		 * told in the HELLO reply, which dp_connect returns. */
		r.status = c->refuse;
		o->hang_up = true;
		return reply_with(o, &r, sizeof(r), r.status);
	}
	memcpy(c->name, h->name, sizeof(c->name));
	c->name[sizeof(c->name) - 1] = 0;
	for (char *p = c->name; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	c->hello = true;
	c->proc->connecting--;
	memcpy(r.server_name, cfg.server_name, sizeof(r.server_name));
	log_info("client %u: hello from '%s' (pid %d uid %d)", c->id, c->name, (int)c->pid,
		 (int)c->uid);
	return reply_with(o, &r, sizeof(r), 0);
}

/* A new queue pair with its two doorbells, or NULL (*rc). */
static struct queue *queue_new(uint32_t depth, int *rc)
{
	struct queue *q = calloc(1, sizeof(*q));
	int sq[2] = {-1, -1}, cq[2] = {-1, -1};

	*rc = -ENOMEM;
	if (!q)
		return NULL;
	*rc = dp_ring_pair_create_seq(
		&q->pair, "dataplane-queue",
		&(struct dp_ring_layout){depth, sizeof(struct dp_desc), DP_SQ_SEQ_OFF},
		&(struct dp_ring_layout){depth, sizeof(struct dp_cqe), DP_CQ_SEQ_OFF}, 0);
	if (*rc) {
		free(q);
		return NULL;
	}
	/* Socketpairs, not eventfds: an fd passed with SCM_RIGHTS shares its
	 * file description, and a client that cleared O_NONBLOCK on a shared
	 * eventfd could block a poller in write(2) or read(2) (docs/ring.md). */
	if ((*rc = dp_doorbell_pair(sq)) || (*rc = dp_doorbell_pair(cq))) {
		if (sq[0] >= 0) {
			close(sq[0]);
			close(sq[1]);
		}
		dp_ring_pair_close(&q->pair);
		free(q);
		return NULL;
	}
	q->sq_efd = sq[0];
	q->cq_efd = cq[0];
	q->sq_peer = sq[1];
	q->cq_peer = cq[1];
	return q;
}

static int on_queue_create(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_queue_create *req = m->payload;
	struct dp_msg_queue_create_reply r = {0};
	struct queue *q;
	unsigned slot, used = 0;
	uint32_t depth;
	int rc;

	depth = req->depth ? req->depth : cfg.queue_depth;
	if (depth > cfg.max_depth)
		return -EINVAL;
	for (slot = DP_MAX_QUEUES, used = 0; used < DP_MAX_QUEUES; used++)
		if (!c->queues[used] && slot == DP_MAX_QUEUES)
			slot = used;
	used = 0;
	for (unsigned i = 0; i < DP_MAX_QUEUES; i++)
		used += c->queues[i] != NULL;
	if (slot == DP_MAX_QUEUES || used >= cfg.max_queues)
		return -EMFILE;
	q = queue_new(depth, &rc);
	if (!q)
		return rc;
	q->id = slot;
	q->depth = depth;
	q->client = c;
	atomic_fetch_add(&c->refs, 1);
	c->queues[slot] = q;
	r.queue_id = slot;
	r.depth = depth;
	r.flags = cfg.membarrier ? DP_QUEUE_F_SQ_MEMBARRIER : 0;
	o->fds[0] = q->pair.fd;
	o->fds[1] = q->sq_peer;
	o->fds[2] = q->cq_peer;
	o->nfds = 3;
	/* Handed to a poller before the reply goes (the queue keeps its
	 * fds): if the reply fails, the client is gone, and the normal
	 * teardown frees the queue. */
	poller_add_queue(q);
	log_debug("client %u: queue %u, depth %u, poller %u", c->id, slot, depth, q->poller->idx);
	return reply_with(o, &r, sizeof(r), 0);
}

static void queue_close(struct queue *q)
{
	struct poller *p = q->poller;

	/* Release: the poller retires the queue once it sees this. */
	atomic_store_explicit(&q->closing, 1, memory_order_release);
	poller_kick(p);
	stats_queue_closed();
}

static int on_queue_destroy(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_id *req = m->payload;

	(void)o;
	if (!c->queues[req->id])
		return -EBADF;
	queue_close(c->queues[req->id]);
	c->queues[req->id] = NULL;
	return 0;
}

/* Lets every engine add its state to a new memory region (the fabric
 * registers it, the GPU engine pins host memory), publishes it in the client's
 * table at `slot` and fills the reply with its id; on failure drops it. */
static int region_publish(struct client *c, struct region *reg, unsigned slot, unsigned access,
			  struct msg_out *o)
{
	struct dp_msg_id_reply r = {0};
	int rc = engines_region_open(reg);

	if (rc) {
		region_put(reg);
		return rc;
	}
	/* Release: pairs with the acquire in desc_resolve(). */
	atomic_store_explicit(&c->regions[slot], reg, memory_order_release);
	stats_region_added(reg->len);
	r.id = slot;
	r.len = reg->len;
	r.access = access;
	return reply_with(o, &r, sizeof(r), 0);
}

/* The client's first free region slot, DP_MAX_REGIONS when none is left
 * (control thread: the only writer of the table). */
static unsigned region_slot_free(const struct client *c)
{
	unsigned slot;

	for (slot = 0; slot < DP_MAX_REGIONS; slot++)
		if (!atomic_load_explicit(&c->regions[slot], memory_order_relaxed))
			break;
	return slot;
}

/*
 * A new region, of a kind some engine brings (engine.h, region_msgs): the
 * engine's open makes it from the request, every engine adds its state
 * (region_publish), and it takes the client's first free slot.
 */
static int on_region_new(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct engine_region_msg *rm = engines_region_msg(m->hdr.type);
	unsigned nfds = take_fds(m);
	unsigned slot = region_slot_free(c);
	struct region *reg;
	int access, rc;

	if (!rm) { /* a type of the protocol no engine of this build takes */
		close_fds(m->fds, nfds);
		return -EOPNOTSUPP;
	}
	reg = slot < DP_MAX_REGIONS ? calloc(1, sizeof(*reg)) : NULL;
	if (!reg) {
		close_fds(m->fds, nfds);
		return slot < DP_MAX_REGIONS ? -ENOMEM : -ENOSPC;
	}
	access = rm->open(reg, c, m->payload, m->fds, nfds);
	if (access < 0) {
		free(reg);
		return access;
	}
	atomic_init(&reg->refs, 1);
	reg->id = slot;
	reg->owner_pid = c->pid;
	rc = region_publish(c, reg, slot, (unsigned)access, o);
	if (rc)
		return rc;
	c->acct->mapped += reg->charged;
	c->proc->mapped += reg->charged;
	log_debug("client %u: %s region %u, %llu bytes", c->id, rm->what, slot,
		  (unsigned long long)reg->len);
	return 0;
}

/* A handle on session `sess` for `c` with `access`, and the open's reply
 * (len 0: a session has no length). Takes the caller's reference. */
static int session_grant(struct client *c, struct session_cli *sess, unsigned access,
			 struct msg_out *o)
{
	struct dp_msg_id_reply r = {0};
	struct seg_handle *h;
	unsigned slot;

	for (slot = 0; slot < DP_MAX_SEGS; slot++)
		if (!atomic_load_explicit(&c->segs[slot], memory_order_relaxed))
			break;
	h = slot < DP_MAX_SEGS ? calloc(1, sizeof(*h)) : NULL;
	if (!h) {
		session_close(sess);
		return slot < DP_MAX_SEGS ? -ENOMEM : -ENOSPC;
	}
	h->sess = sess;
	h->access = access;
	stats_session(0, 0, 1);
	/* Release: pairs with the acquire in desc_resolve(). */
	atomic_store_explicit(&c->segs[slot], h, memory_order_release);
	r.id = slot;
	r.access = access;
	return reply_with(o, &r, sizeof(r), 0);
}

/* Drops a handle unpublished a grace period ago. */
static void handle_free(struct seg_handle *h)
{
	if (h->sess) {
		session_close(h->sess);
		stats_session(0, 0, -1);
	} else
		segment_put(h->seg);
	free(h);
}

/* A handle on `s` for `c` with `access`, and the open's reply. */
static int segment_grant(struct client *c, struct segment *s, unsigned access, struct msg_out *o)
{
	struct dp_msg_id_reply r = {0};
	struct seg_handle *h;
	unsigned slot;

	if ((access & s->access) != access)
		return -EPERM;
	for (slot = 0; slot < DP_MAX_SEGS; slot++)
		if (!atomic_load_explicit(&c->segs[slot], memory_order_relaxed))
			break;
	if (slot == DP_MAX_SEGS)
		return -ENOSPC;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	atomic_fetch_add(&s->refs, 1);
	h->seg = s;
	h->access = access;
	/* Release: pairs with the acquire in desc_resolve(). */
	atomic_store_explicit(&c->segs[slot], h, memory_order_release);
	r.id = slot;
	r.len = s->remote ? s->remote->len : s->region->len;
	r.access = access;
	return reply_with(o, &r, sizeof(r), 0);
}

/*
 * A control call answered later (segments.h SEGMENT_PENDING): a
 * SEGMENT_OPEN waiting for a peer's or the directory's answer, a
 * SEGMENT_EXPORT waiting for the directory's publish, or a SEGMENT_UNEXPORT
 * for the withdrawal of its record. The handler returns
 * CTL_PENDING (no reply now) and on_call_done() replies from the loop. It
 * holds a reference on its client, whose connection may close meanwhile:
 * the answer then goes nowhere (and an export made meanwhile goes again).
 * One per client (libclient makes one control call at a time): a client
 * cannot pile up lookups, publishes or withdrawals.
 */
struct ctl_wait {
	struct client *c;
	struct dp_msg_hdr hdr;		/* the request's, for the reply's type and seq */
	unsigned access;		/* SEGMENT_OPEN's */
	struct dp_msg_notify_send send; /* NOTIFY_SEND's, sent once its session answered */
	struct ctl_wait *next;
};

static struct ctl_wait *waits;

static bool client_connected(const struct client *c)
{
	for (struct conn *k = conns; k; k = k->next)
		if (k->c == c)
			return true;
	return false;
}

/* A wait for `c`'s request `m`, not listed yet; NULL with *rc -EBUSY
 * (another call of the client waits) or -ENOMEM. */
static struct ctl_wait *wait_new(struct client *c, const struct msg_in *m, unsigned access, int *rc)
{
	struct ctl_wait *w;

	for (w = waits; w; w = w->next)
		if (w->c == c) {
			*rc = -EBUSY;
			return NULL;
		}
	w = calloc(1, sizeof(*w));
	if (!w) {
		*rc = -ENOMEM;
		return NULL;
	}
	w->c = c;
	w->hdr = m->hdr;
	w->access = access;
	atomic_fetch_add(&c->refs, 1);
	return w;
}

/* After the segment call: listed (CTL_PENDING) or freed (its status). */
static int wait_pending(struct ctl_wait *w, int rc)
{
	if (rc == SEGMENT_PENDING) {
		w->next = waits;
		waits = w;
		return CTL_PENDING;
	}
	client_put(w->c);
	free(w);
	return rc;
}

/* An export's answer: the export stays only if its client is still there
 * with the region (a client that sends without waiting may have freed it
 * meanwhile). */
static int export_done(struct client *c, int rc, struct segment *s)
{
	struct region *reg;

	if (rc)
		return rc;
	reg = atomic_load_explicit(&c->regions[s->region->id], memory_order_relaxed);
	if (client_connected(c) && reg == s->region)
		return 0;
	export_remove(c, s->name, NULL, NULL);
	return -EBADF;
}

static void wait_unlist(struct ctl_wait *w)
{
	for (struct ctl_wait **pp = &waits; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
}

static void on_call_done(void *arg, int rc, struct segment *s)
{
	struct ctl_wait *w = arg;
	struct msg_out o;

	wait_unlist(w);
	o.len = 0;
	o.nfds = 0;
	o.hang_up = false;
	if (w->hdr.type == DP_MSG_SEGMENT_EXPORT)
		rc = export_done(w->c, rc, s);
	else if (w->hdr.type == DP_MSG_SEGMENT_OPEN && !rc && client_connected(w->c))
		rc = segment_grant(w->c, s, w->access, &o);
	if (client_connected(w->c))
		reply(w->c, &w->hdr, rc, &o);
	client_put(w->c);
	free(w);
}

static int on_segment_export(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_segment_export *req = m->payload;
	struct ctl_wait *w;
	struct region *reg;
	int rc;

	(void)o;
	reg = atomic_load_explicit(&c->regions[req->region], memory_order_relaxed);
	if (!reg)
		return -EBADF;
	w = wait_new(c, m, 0, &rc);
	if (!w)
		return rc;
	/* Answered by on_call_done() when the directory has the record. */
	rc = export_add(c, reg, req->name, req->access, on_call_done, w);
	return wait_pending(w, rc);
}

static int on_segment_unexport(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_segment_name *req = m->payload;
	struct ctl_wait *w;
	int rc;

	(void)o;
	w = wait_new(c, m, 0, &rc);
	if (!w)
		return rc;
	/* Answered by on_call_done() once the record is gone, if it had one:
	 * a name unexported is found by no one when the call returns. */
	return wait_pending(w, export_remove(c, req->name, on_call_done, w));
}

static int on_segment_open(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_segment_open *req = m->payload;
	struct ctl_wait *w;
	struct segment *s;
	int rc;

	w = wait_new(c, m, req->access, &rc);
	if (!w)
		return rc;
	/* Whatever a peer or the directory answered (-EBADMSG too) is the
	 * status: only the message checks make strikes. Answered by
	 * on_call_done() from the loop when pending. */
	rc = wait_pending(w, segment_resolve(req->peer, req->name, &s, on_call_done, w));
	if (rc)
		return rc;
	return segment_grant(c, s, req->access, o);
}

static int on_segment_close(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_id *req = m->payload;
	struct seg_handle *h;

	(void)o;
	h = atomic_exchange(&c->segs[req->id], NULL);
	if (!h)
		return -EBADF;
	qsbr_synchronize();
	handle_free(h);
	return 0;
}

static int on_region_free(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_id *req = m->payload;
	struct segment *dead;
	struct region *reg;

	(void)o;
	reg = atomic_exchange(&c->regions[req->id], NULL);
	if (!reg)
		return -EBADF;
	/* Exports of the region go with it, its session member too. */
	session_region_gone(c, reg);
	dead = exports_kill(NULL, reg);
	qsbr_synchronize();
	exports_release(dead);
	stats_region_removed(reg->len);
	region_uncharge(c, reg);
	region_put(reg);
	return 0;
}

/* The client's notification ring (notif.h): the memfd and the client's
 * doorbell end go with the reply; the service keeps its copies until the
 * client leaves. */
static int on_notify_open(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_notify_open *req = m->payload;
	struct dp_msg_notify_open_reply r = {0};
	int fds[2], rc;

	rc = notif_open(c, req->entries, fds);
	if (rc)
		return rc;
	r.entries = req->entries ? req->entries : DP_NOTIFY_DEFAULT_ENTRIES;
	o->fds[0] = fds[0];
	o->fds[1] = fds[1];
	o->nfds = 2;
	log_debug("client %u: notification ring of %u", c->id, r.entries);
	return reply_with(o, &r, sizeof(r), 0);
}

static int on_session_create(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_session_create *req = m->payload;
	struct dp_msg_session_reply r = {0};
	int rc = session_create(c, req->port, &r);

	return rc ? rc : reply_with(o, &r, sizeof(r), 0);
}

static int on_session_add(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_session_add *req = m->payload;

	(void)o;
	return session_add(c, req->region, req->addr);
}

static void on_session_opened(void *arg, int rc, struct session_cli *sess)
{
	struct ctl_wait *w = arg;
	struct msg_out o = {0};

	wait_unlist(w);
	if (!rc && client_connected(w->c))
		rc = session_grant(w->c, sess, w->access, &o);
	else if (!rc)
		session_close(sess);
	if (client_connected(w->c))
		reply(w->c, &w->hdr, rc, &o);
	client_put(w->c);
	free(w);
}

static int on_session_open(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_session_open *req = m->payload;
	struct session_cli *sess;
	struct ctl_wait *w;
	int rc;

	w = wait_new(c, m, req->access, &rc);
	if (!w)
		return rc;
	/* Answered by on_session_opened() once its port said it is one, or
	 * now for a session of this service. */
	rc = wait_pending(w, session_open(req->session, &sess, on_session_opened, w));
	if (rc)
		return rc;
	return session_grant(c, sess, req->access, o);
}

/* A notification alone (dp_notify_send): delivered or handed over now
 * (notif.c), the reply its status. */
static void on_notify_asked(void *arg)
{
	struct ctl_wait *w = arg;
	struct dp_msg_status r = {0};
	struct msg_out o = {0};
	int rc;

	wait_unlist(w);
	if (client_connected(w->c)) {
		rc = notif_send(w->c, &w->send);
		if (rc == NOTIF_SEND_ASK)
			rc = -ENOENT; /* still no registration to send through */
		if (!rc)
			rc = reply_with(&o, &r, sizeof(r), 0);
		reply(w->c, &w->hdr, rc, &o);
	}
	client_put(w->c);
	free(w);
}

static int on_notify_send(struct client *c, struct msg_in *m, struct msg_out *o)
{
	const struct dp_msg_notify_send *req = m->payload;
	struct dp_msg_status r = {0};
	const struct seg_handle *h;
	struct ctl_wait *w;
	int rc = notif_send(c, req);

	if (rc == NOTIF_SEND_ASK) {
		/* An engine session opened before it had a registration:
		 * asked again, answered by on_notify_asked(). */
		h = atomic_load_explicit(&c->segs[req->segment], memory_order_relaxed);
		w = wait_new(c, m, 0, &rc);
		if (!w)
			return rc;
		w->send = *req;
		/* Listed first: the answer may come from inside the call. */
		wait_pending(w, SEGMENT_PENDING);
		rc = session_refresh(h->sess, on_notify_asked, w);
		if (rc == SEGMENT_PENDING)
			return CTL_PENDING;
		wait_unlist(w);
		client_put(w->c);
		free(w);
		if (!rc)
			rc = notif_send(c, req);
		if (rc == NOTIF_SEND_ASK)
			rc = -ENOENT;
	}
	if (rc)
		return rc;
	return reply_with(o, &r, sizeof(r), 0);
}

typedef int (*handler_fn)(struct client *, struct msg_in *, struct msg_out *);

/* Indexed by a type ctl_msg_check_hdr() accepted: one handler for each,
 * or on_region_new for the types an engine registers memory with. */
static const handler_fn handlers[CTL_MSG_NTYPES] = {
	[DP_MSG_HELLO] = on_hello,
	[DP_MSG_QUEUE_CREATE] = on_queue_create,
	[DP_MSG_QUEUE_DESTROY] = on_queue_destroy,
	[DP_MSG_REGION_FREE] = on_region_free,
	[DP_MSG_SEGMENT_EXPORT] = on_segment_export,
	[DP_MSG_SEGMENT_UNEXPORT] = on_segment_unexport,
	[DP_MSG_SEGMENT_OPEN] = on_segment_open,
	[DP_MSG_SEGMENT_CLOSE] = on_segment_close,
	[DP_MSG_NOTIFY_OPEN] = on_notify_open,
	[DP_MSG_SESSION_CREATE] = on_session_create,
	[DP_MSG_SESSION_ADD] = on_session_add,
	[DP_MSG_SESSION_OPEN] = on_session_open,
	[DP_MSG_NOTIFY_SEND] = on_notify_send,
};

/* ---- the dispatcher ---- */

/* Everything that can be known of a packet of n bytes (or n = -EMSGSIZE:
 * truncated) before a handler runs: 0, or the error a strike is made of
 * when ctl_msg_strike() says so. m->hdr stays all zero unless a whole
 * header came: the error reply then carries type 0 and seq 0. */
static int msg_check(const struct client *c, const char *buf, ssize_t n, struct msg_in *m)
{
	int rc;

	if (n < 0)
		return (int)n;
	rc = ctl_msg_check_hdr(buf, (size_t)n, &m->hdr);
	if (!rc && !c->hello && m->hdr.type != DP_MSG_HELLO)
		rc = -EPROTO;
	if (!rc)
		rc = ctl_msg_check_payload(&m->hdr, m->payload, (unsigned)m->nfds);
	return rc;
}

/* A message the checks refused: its reply, and a strike when it was
 * malformed. Returns false when the client must be dropped. */
static bool msg_refused(struct client *c, const struct msg_in *m, int rc)
{
	reply(c, &m->hdr, rc, NULL);
	if (!ctl_msg_strike(rc))
		return true;
	log_warn("client %u (pid %d): malformed message (%s), strike %u", c->id, (int)c->pid,
		 strerror(-rc), c->strikes + 1);
	return ++c->strikes < MAX_STRIKES && rc != -EPROTONOSUPPORT;
}

/* One message off the client's socket. Returns false when the client must
 * be dropped. */
static bool client_read(struct client *c)
{
	_Alignas(8) char buf[DP_MSG_MAX];
	struct msg_in m = {.payload = buf + sizeof(struct dp_msg_hdr)};
	struct msg_out o;
	ssize_t n;
	int rc;

	n = dp_net_recv_fds(c->fd, buf, sizeof(buf), m.fds, MAX_FDS, &m.nfds, MSG_DONTWAIT);
	if (n == -EAGAIN || n == -EINTR)
		return true;
	if (n == 0 || (n < 0 && n != -EMSGSIZE)) {
		/* EOF, or a 0-byte packet (it reads the same): nothing it
		 * carried is kept, whatever the net layer left. */
		for (int i = 0; i < m.nfds; i++)
			close(m.fds[i]);
		return false;
	}
	rc = msg_check(c, buf, n, &m);
	if (c->refuse && (rc || m.hdr.type != DP_MSG_HELLO)) {
		/* A refused connection gets its refusal whatever it sends
		 * (on_hello answers a HELLO), then goes; no strikes. */
		for (int i = 0; i < m.nfds; i++)
			close(m.fds[i]);
		reply(c, &m.hdr, c->refuse, NULL);
		return false;
	}
	if (rc) {
		for (int i = 0; i < m.nfds; i++)
			close(m.fds[i]);
		return msg_refused(c, &m, rc);
	}
	o.len = 0;
	o.nfds = 0;
	o.hang_up = false;
	rc = handlers[m.hdr.type] ? handlers[m.hdr.type](c, &m, &o) : on_region_new(c, &m, &o);
	/* Fds the handler did not take: none of the type's, or left over. */
	for (int i = 0; i < m.nfds; i++)
		close(m.fds[i]);
	if (rc != CTL_PENDING)
		reply(c, &m.hdr, rc, &o);
	return !o.hang_up;
}

/* ---- client lifetime ---- */

static void client_drop(struct conn *k)
{
	struct client *c = k->c;
	struct region *regs[DP_MAX_REGIONS];
	struct seg_handle *hs[DP_MAX_SEGS];
	struct segment *dead;

	for (struct conn **pp = &conns; *pp; pp = &(*pp)->next)
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	if (c->acct)
		nclients--, c->proc->conns--, stats_client_removed();
	else
		nrefusing--, c->proc->refusing--;
	if (!c->hello)
		c->proc->connecting--;
	/* Closing the fd would take it out of the set anyway. */
	ev_del(ctl.epfd, &k->ev, "a client socket");
	close(c->fd);
	free(k);
	for (unsigned i = 0; i < DP_MAX_QUEUES; i++)
		if (c->queues[i]) {
			queue_close(c->queues[i]);
			c->queues[i] = NULL;
		}
	session_client_gone(c);
	dead = exports_kill(c, NULL);
	for (unsigned i = 0; i < DP_MAX_REGIONS; i++) {
		regs[i] = atomic_exchange(&c->regions[i], NULL);
		if (regs[i])
			region_uncharge(c, regs[i]);
	}
	for (unsigned i = 0; i < DP_MAX_SEGS; i++)
		hs[i] = atomic_exchange(&c->segs[i], NULL);
	/* One grace period for everything the client had. */
	qsbr_synchronize();
	exports_release(dead);
	/* No poller delivers to it any more: its exports were dead before the
	 * grace period. */
	notif_free(c);
	for (unsigned i = 0; i < DP_MAX_REGIONS; i++)
		if (regs[i]) {
			stats_region_removed(regs[i]->len);
			region_put(regs[i]);
		}
	for (unsigned i = 0; i < DP_MAX_SEGS; i++)
		if (hs[i])
			handle_free(hs[i]);
	log_info("client %u (pid %d '%s') left", c->id, (int)c->pid, c->name);
	if (c->acct)
		uid_put(c->acct);
	c->acct = NULL;
	c->proc->refs--;
	proc_put(c->proc);
	c->proc = NULL;
	client_put(c);
}

static void on_client_event(struct ev_handler *h, uint32_t events)
{
	struct conn *k = (struct conn *)((char *)h - offsetof(struct conn, ev));

	(void)events; /* a hang-up reads as EOF */
	if (!client_read(k->c))
		client_drop(k);
}

/* The oldest connection of `p` without HELLO and not yet marked to go
 * (refused ones alone when `refused`), or NULL. The list is newest first. */
static struct conn *oldest_silent(const struct proc_acct *p, bool refused)
{
	struct conn *found = NULL;

	for (struct conn *k = conns; k; k = k->next)
		if (k->c->proc == p && !k->c->hello && !k->c->evict && (!refused || k->c->refuse))
			found = k;
	return found;
}

/*
 * Makes room among `p`'s connections without HELLO (refused ones alone
 * when `refused`): its oldest silent one is marked to go after the batch
 * (the reap timer; a connection may still have an event of its own in this
 * batch). Each candidate is read first, as the loop would: one whose HELLO
 * is waiting is served, and is not silent. So a flood without HELLO cycles
 * through its own connections, and a newcomer, of this process or any
 * other, is never the one hung up on. Returns whether one was marked.
 */
static bool evict_silent(struct proc_acct *p, bool refused, const char *why)
{
	struct conn *k;

	while ((k = oldest_silent(p, refused))) {
		struct client *c = k->c;
		bool keep = client_read(c);

		if (keep && c->hello)
			continue;
		c->evict = true;
		ev_timer_arm(&ctl.reap, dp_now_ns());
		if (!p->evicted++)
			log_warn("pid %d uid %d: a connection without HELLO hung up on (%s); "
				 "further ones of this process are counted, not logged",
				 (int)c->pid, (int)c->uid, why);
		return true;
	}
	return false;
}

/* The process whose refused connections fill most of the refusing budget. */
static struct proc_acct *top_refuser(void)
{
	struct proc_acct *top = NULL;

	for (struct proc_acct *p = proc_accts; p; p = p->next)
		if (p->refusing && (!top || p->refusing > top->refusing))
			top = p;
	return top;
}

/* Over a limit, a connection stays until its HELLO (or its HELLO
 * deadline) only to be told why: dp_connect returns the errno. The
 * broadest limit first: the service's, the uid's (which refuses every
 * process of the uid), then the process's (which refuses it alone). */
static int accept_refusal(const struct ucred *cred, const struct proc_acct *p,
			  const struct uid_acct *a)
{
	if (nclients >= cfg.max_clients) {
		log_warn("refusing pid %d uid %d: %u clients already (--max-clients)",
			 (int)cred->pid, (int)cred->uid, nclients);
		return -EUSERS;
	}
	if (a && a->conns >= cfg.max_clients_per_uid) {
		log_warn("refusing pid %d uid %d: the uid holds %u connections already "
			 "(--max-clients-per-uid)",
			 (int)cred->pid, (int)cred->uid, a->conns);
		return -EDQUOT;
	}
	if (proc_limited(p) && p->conns >= cfg.max_clients_per_process) {
		log_warn("refusing pid %d uid %d: the process holds %u connections already "
			 "(--max-clients-per-process)",
			 (int)cred->pid, (int)cred->uid, p->conns);
		return -EMFILE;
	}
	return 0;
}

static void client_accept(int lfd)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct uid_acct *a = NULL;
	struct proc_acct *p;
	struct client *c;
	struct conn *k;
	int fd, refuse;

	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
	    !(p = proc_get(cred.pid))) {
		close(fd);
		return;
	}
	/* One process's connections without HELLO: its oldest silent one
	 * makes room for this one. The loop accepts one connection a batch
	 * and drops the marked ones after it, so the count is back within
	 * the limit before the next accept. */
	if (proc_limited(p) && p->connecting >= cfg.max_connecting_per_process)
		evict_silent(p, false, "--max-connecting-per-process");
	refuse = accept_refusal(&cred, p, uid_find(cred.uid));
	if (refuse && nrefusing >= MAX_REFUSING) {
		/* The refused ones waiting to be told are full: the process
		 * that holds most of them gives up its oldest silent one,
		 * rather than this newcomer being hung up on unanswered. */
		struct proc_acct *top = top_refuser();

		if (!top || !evict_silent(top, true, "the refused connections' budget is full")) {
			close(fd);
			proc_put(p);
			return;
		}
	}
	c = calloc(1, sizeof(*c));
	k = calloc(1, sizeof(*k));
	if (!c || !k || (!refuse && !(a = uid_get(cred.uid)))) {
		free(c);
		free(k);
		close(fd);
		proc_put(p);
		return;
	}
	atomic_init(&c->refs, 1);
	c->fd = fd;
	c->id = next_client_id++;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->refuse = refuse;
	c->acct = refuse ? NULL : a;
	c->proc = p;
	c->accepted_ns = dp_now_ns();
	k->c = c;
	k->ev = (struct ev_handler){.fd = fd, .on_event = on_client_event};
	if (ev_add(ctl.epfd, &k->ev, EPOLLIN, "a client socket")) {
		if (c->acct)
			uid_put(c->acct);
		close(fd);
		free(k);
		free(c);
		proc_put(p);
		return;
	}
	k->next = conns;
	conns = k;
	p->refs++;
	p->connecting++;
	ev_timer_arm(&ctl.reap, c->accepted_ns + (uint64_t)cfg.hello_timeout_ms * 1000000u);
	if (refuse) {
		nrefusing++;
		p->refusing++;
		return;
	}
	nclients++;
	p->conns++;
	stats_client_added();
	log_info("client %u: connected, pid %d uid %d gid %d", c->id, (int)cred.pid, (int)cred.uid,
		 (int)cred.gid);
}

/* Broken clients, and connections past their HELLO deadline, go after
 * the batch (a timer: ctl.reap): a client dropped in the batch may still
 * have an event of its own later in it, and its fd number may already
 * belong to a client accepted in it. Due again at the earliest HELLO
 * deadline of the connections left. */
static int reap_broken(struct ev_timer *t)
{
	uint64_t now = dp_now_ns(), timeout = (uint64_t)cfg.hello_timeout_ms * 1000000u;
	uint64_t next_deadline = 0;
	struct conn *k, *next;

	(void)t;
	for (k = conns; k; k = next) {
		struct client *c = k->c;

		next = k->next;
		if (atomic_load(&c->broken) || (c->evict && !c->hello)) {
			client_drop(k);
		} else if (!c->hello && now - c->accepted_ns >= timeout) {
			log_warn("client %u (pid %d uid %d): no HELLO within %u ms "
				 "(--hello-timeout-ms): dropped",
				 c->id, (int)c->pid, (int)c->uid, cfg.hello_timeout_ms);
			client_drop(k);
		} else if (!c->hello &&
			   (!next_deadline || c->accepted_ns + timeout < next_deadline)) {
			next_deadline = c->accepted_ns + timeout;
		}
	}
	if (!next_deadline)
		return EV_TIMER_NOMORE;
	return (int)((next_deadline - now + 999999u) / 1000000u);
}

/* The peer RPC's deadlines (rpc.c arms this timer for each it sets), and
 * the connections and lookups a batch closed, freed after it. */
static int rpc_deadlines(struct ev_timer *t)
{
	(void)t;
	rpc_sweep();
	return rpc_timeout_ms();
}

static int quarantine_sweep(struct ev_timer *t)
{
	int ms = host_quarantine_sweep();

	(void)t;
	return ms >= 0 ? ms : EV_TIMER_NOMORE;
}

/* A poller kept a mapping where none was: the sweep's timer runs again. */
static void quarantine_started(void)
{
	ev_timer_arm(&ctl.quarantine, dp_now_ns());
}

/* ---- the loop's other fds ---- */

static void on_listen_event(struct ev_handler *h, uint32_t events)
{
	(void)events;
	client_accept(h->fd);
}

static void on_rpc_event(struct ev_handler *h, uint32_t events)
{
	(void)events;
	rpc_accept(h->fd, 0);
}

static void on_signal_event(struct ev_handler *h, uint32_t events)
{
	struct signalfd_siginfo si;

	(void)events;
	if (read(h->fd, &si, sizeof(si)) == sizeof(si))
		log_info("signal %u: shutting down", si.ssi_signo);
	atomic_store_explicit(&dp_stopping, 1, memory_order_release);
}

/* A poller found a client's queue corrupt (control_wake_efd). */
static void on_wake_event(struct ev_handler *h, uint32_t events)
{
	(void)events;
	wake_efd_drain(h->fd);
	ev_timer_arm(&ctl.reap, dp_now_ns());
}

/* ---- the socket and the loop ---- */

static int mkdir_parent(const char *path)
{
	char dir[sizeof(cfg.socket_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		mkdir(dir, 0755);
		*p = '/';
	}
	if (mkdir(dir, 0750) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int listen_socket(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc;

	memcpy(sa.sun_path, cfg.socket_path, strlen(cfg.socket_path) + 1);
	rc = mkdir_parent(cfg.socket_path);
	if (rc)
		return rc;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A socket file nobody answers on is a leftover of a crash. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		return -EADDRINUSE;
	}
	close(fd);
	unlink(cfg.socket_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(cfg.socket_path, 0660) < 0 ||
	    listen(fd, 128) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

static void control_cleanup(void)
{
	while (conns)
		client_drop(conns);
	sessions_cleanup();
	segments_cleanup();
}

/* The signals, the wake-up eventfd, the control socket and the peer RPC
 * port into a new epoll set, and the loop's timers: 0 or -errno (logged). */
static int loop_open(int lfd, int rpc_fd)
{
	sigset_t sigs;
	int sfd;

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		return -errno;
	ctl.signals = (struct ev_handler){.fd = sfd, .on_event = on_signal_event};
	ctl.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ctl.epfd < 0)
		return -errno;
	ctl.listen = (struct ev_handler){.fd = lfd, .on_event = on_listen_event};
	ctl.wake = (struct ev_handler){.fd = control_wake_efd, .on_event = on_wake_event};
	ctl.rpc = (struct ev_handler){.fd = rpc_fd, .on_event = on_rpc_event};
	ctl.rpc_deadlines.on_timer = rpc_deadlines;
	ctl.notify_retry.on_timer = notif_remote_retry;
	ctl.reap.on_timer = reap_broken;
	ctl.quarantine.on_timer = quarantine_sweep;
	ev_timer_add(&ctl.timers, &ctl.rpc_deadlines);
	ev_timer_add(&ctl.timers, &ctl.notify_retry);
	ev_timer_add(&ctl.timers, &ctl.reap);
	ev_timer_add(&ctl.timers, &ctl.quarantine);
	ev_timer_arm(&ctl.quarantine, dp_now_ns());
	if (ev_add(ctl.epfd, &ctl.listen, EPOLLIN, "the control socket") ||
	    ev_add(ctl.epfd, &ctl.signals, EPOLLIN, "the signalfd") ||
	    ev_add(ctl.epfd, &ctl.wake, EPOLLIN, "the wake-up eventfd") ||
	    (rpc_fd >= 0 && ev_add(ctl.epfd, &ctl.rpc, EPOLLIN, "the peer RPC port")))
		return -EIO;
	return 0;
}

/* Stops the pollers when the loop cannot start. */
static int loop_fail(int rc)
{
	atomic_store(&dp_stopping, 1);
	pollers_stop();
	return rc;
}

/* What registers fds, wake-ups and timers of its own in the loop: 0, or
 * the first failure (logged), which stops the service. */
static int loop_start(void)
{
	int rc, dir_rc;

	rpc_start(ctl.epfd, &ctl.rpc_deadlines);
	rc = ev_wake_open(ctl.epfd, &ctl.quarantined, quarantine_started, "the quarantine");
	if (!rc)
		host_quarantine_wake(ctl.quarantined.ev.fd);
	if (!rc)
		rc = segments_start(ctl.epfd);
	if (!rc)
		rc = notif_remote_start(ctl.epfd, &ctl.notify_retry);
	if (!rc)
		rc = session_start(ctl.epfd);
	dir_rc = directory_start(ctl.epfd, remotes_invalidate);
	if (dir_rc)
		log_err("directory: %s", strerror(-dir_rc));
	return rc ? rc : dir_rc;
}

int control_run(int rpc_fd)
{
	int lfd, rc;

	ctl.signals.fd = -1;
	lfd = listen_socket();
	if (lfd < 0) {
		log_err("control socket %s: %s", cfg.socket_path, strerror(-lfd));
		return loop_fail(lfd);
	}
	rc = loop_open(lfd, rpc_fd);
	if (rc) {
		log_err("control loop: %s", strerror(-rc));
		close(lfd);
		unlink(cfg.socket_path);
		if (ctl.epfd >= 0)
			close(ctl.epfd);
		if (ctl.signals.fd >= 0)
			close(ctl.signals.fd);
		return loop_fail(rc);
	}
	rc = loop_start();
	if (rc)
		atomic_store(&dp_stopping, 1);
	log_info("listening on %s", cfg.socket_path);
	if (!atomic_load(&dp_stopping))
		service_notify("READY=1\nSTATUS=accepting clients");

	while (!atomic_load(&dp_stopping))
		ev_process(ctl.epfd, &ctl.timers);
	service_notify("STOPPING=1");
	/* Stop accepting at once; clients stay connected until the pollers
	 * have answered everything they handed over. */
	close(lfd);
	if (rpc_fd >= 0)
		close(rpc_fd);
	unlink(cfg.socket_path);
	pollers_stop();
	control_cleanup();
	host_quarantine_sweep(); /* dp_stopping: all of them */
	host_quarantine_wake(-1);
	ev_wake_close(&ctl.quarantined);
	notif_remote_cleanup();
	directory_stop();
	close(ctl.epfd);
	close(ctl.signals.fd);
	return rc;
}
