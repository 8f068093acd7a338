/* SPDX-License-Identifier: MIT */
/*
 * session.c - engine sessions (session.h): the owner's port and members,
 * the initiator's map and questions, and the `session` engine, which holds
 * a descriptor whose address no member answered yet.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "clock.h"
#include "engine.h"
#include "event.h"
#include "file.h"
#include "rpc.h"
#include "samehost.h"
#include "segments.h"
#include "session.h"
#include "stats.h"

/* Questions one session's handle keeps before they are taken (a batch that
 * first touches every registration of a big engine fits), and lookups one
 * handle has in flight (the peer's RPC server serves 64 at once). */
#define SESSION_ASKS DP_MAX_REGIONS
#define SESSION_LOOKUPS 16
/* Questions of all handles in flight at once: a quarter of the service's
 * lookups (RPC_MAX_CALLS), and their same-host follow-ups (a lookup each)
 * as many at most, so that sessions' questions, whoever asks them, never
 * leave a segment open without a lookup slot (-EAGAIN); and, with those
 * follow-ups, half the connections a peer's RPC server keeps
 * (RPC_MAX_CONNS), which evicts its oldest beyond them. A handle over it
 * waits its turn (stalled). */
#define SESSION_LOOKUPS_ALL                                                                        \
	(RPC_MAX_CALLS / 4 < RPC_MAX_CONNS / 4 ? RPC_MAX_CALLS / 4 : RPC_MAX_CONNS / 4)
/* Tries of a question whose connection to the session's port was cut: a
 * peer's RPC server that is full closes its oldest connection (rpc.h), so
 * a cut is a session gone only when it comes again (a port nobody listens
 * on refuses at once). */
#define ASK_TRIES 4
/* A held descriptor whose answer did not come runs again after this. */
#define HOLD_MAX_NS (3ull * DP_RPC_TIMEOUT_MS * 1000000ull)

static int sess_epfd = -1;
/* Pollers' questions (session_ask) for the control thread. */
static struct ev_wake ask_wake = {.ev.fd = -1};

static void sessions_run(void);

int session_start(int epfd)
{
	sess_epfd = epfd;
	return ev_wake_open(epfd, &ask_wake, sessions_run, "the sessions' questions");
}

/* ---- owner side ---- */

struct srv_member {
	uint64_t va, len;
	uint32_t region;
	char name[DP_NAME_MAX]; /* its export */
};

struct session_srv {
	struct ev_handler ev; /* the listening socket */
	struct client *c;
	uint16_t port;
	uint32_t gen; /* member names are never reused */
	unsigned n;
	struct srv_member m[DP_MAX_REGIONS]; /* sorted by va, disjoint */
	struct session_srv *next;
};

static struct session_srv *srvs;

static struct session_srv *srv_by_client(const struct client *c)
{
	for (struct session_srv *ss = srvs; ss; ss = ss->next)
		if (ss->c == c)
			return ss;
	return NULL;
}

static struct session_srv *srv_by_port(uint16_t port)
{
	for (struct session_srv *ss = srvs; ss; ss = ss->next)
		if (ss->port == port)
			return ss;
	return NULL;
}

static void on_session_accept(struct ev_handler *h, uint32_t events)
{
	struct session_srv *ss = (struct session_srv *)h;

	(void)events;
	rpc_accept(h->fd, ss->port);
}

int session_create(struct client *c, unsigned port, struct dp_msg_session_reply *r)
{
	struct sockaddr_in sa;
	socklen_t slen = sizeof(sa);
	struct session_srv *ss;
	int fd;

	if (srv_by_client(c))
		return -EEXIST;
	if (sess_epfd < 0)
		return -EINVAL;
	ss = calloc(1, sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	fd = rpc_listen_port((uint16_t)port);
	if (fd < 0) {
		free(ss);
		return fd;
	}
	if (getsockname(fd, (struct sockaddr *)&sa, &slen) < 0) {
		close(fd);
		free(ss);
		return -EINVAL;
	}
	ss->ev = (struct ev_handler){.fd = fd, .on_event = on_session_accept};
	ss->c = c;
	ss->port = ntohs(sa.sin_port);
	if (ev_add(sess_epfd, &ss->ev, EPOLLIN, "a session's port")) {
		close(fd);
		free(ss);
		return -ENOMEM;
	}
	ss->next = srvs;
	srvs = ss;
	snprintf(c->session, sizeof(c->session), "%.48s:%u", cfg.server_host, ss->port);
	r->port = ss->port;
	memcpy(r->name, c->session, sizeof(r->name));
	log_info("client %u: session %s", c->id, c->session);
	stats_session(1, 0, 0);
	return 0;
}

/* Of @n members sorted by address, @stride bytes apart from @m, each
 * beginning with its address (srv_member, sess_member): how many start at
 * or below @va. */
static inline unsigned va_upper(const void *m, size_t stride, unsigned n, uint64_t va)
{
	unsigned lo = 0, hi = n;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		uint64_t at;

		memcpy(&at, (const char *)m + (size_t)mid * stride, sizeof(at));
		if (at <= va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The index of the last member starting at or below va; -1 none. */
static int srv_find(const struct session_srv *ss, uint64_t va)
{
	return (int)va_upper(ss->m, sizeof(ss->m[0]), ss->n, va) - 1;
}

int session_add(struct client *c, uint32_t region, uint64_t addr)
{
	struct session_srv *ss = srv_by_client(c);
	struct region *reg;
	struct segment *exp;
	char name[DP_NAME_MAX];
	unsigned access;
	int i, rc;

	if (!ss)
		return -ENOTCONN;
	reg = atomic_load_explicit(&c->regions[region], memory_order_relaxed);
	if (!reg)
		return -EBADF;
	if (reg->kind == REGION_FILE || addr + reg->len < addr)
		return -EINVAL;
	for (unsigned k = 0; k < ss->n; k++)
		if (ss->m[k].region == region)
			return -EEXIST;
	i = srv_find(ss, addr);
	/* Disjoint from the member before it and the one after. */
	if ((i >= 0 && addr - ss->m[i].va < ss->m[i].len) ||
	    ((unsigned)(i + 1) < ss->n && ss->m[i + 1].va - addr < reg->len))
		return -EEXIST;
	if (ss->n == DP_MAX_REGIONS)
		return -ENOSPC;
	snprintf(name, sizeof(name), "%c%u/%u", SESSION_MEMBER_MARK, ss->port, ++ss->gen);
	access = fileio_access_ok(reg, DP_ACCESS_RW) ? DP_ACCESS_RW : DP_ACCESS_READ;
	rc = export_add(c, reg, name, access, NULL, NULL);
	if (rc)
		return rc == SEGMENT_PENDING ? -EINVAL : rc;
	exp = export_find(name);
	exp->session_member = true;
	exp->session_va = addr;
	memmove(&ss->m[i + 2], &ss->m[i + 1], sizeof(ss->m[0]) * (ss->n - (unsigned)(i + 1)));
	ss->m[i + 1] = (struct srv_member){.va = addr, .len = reg->len, .region = region};
	memcpy(ss->m[i + 1].name, name, sizeof(name));
	ss->n++;
	stats_session(0, 1, 0);
	log_debug("session %s: region %u at 0x%" PRIx64 ", %" PRIu64 " bytes", c->session, region,
		  addr, reg->len);
	return 0;
}

void session_region_gone(struct client *c, const struct region *reg)
{
	struct session_srv *ss = srv_by_client(c);

	if (!ss)
		return;
	for (unsigned k = 0; k < ss->n; k++)
		if (ss->m[k].region == reg->id) {
			memmove(&ss->m[k], &ss->m[k + 1], sizeof(ss->m[0]) * (ss->n - k - 1));
			ss->n--;
			stats_session(0, -1, 0);
			return;
		}
}

void session_client_gone(struct client *c)
{
	for (struct session_srv **pp = &srvs; *pp; pp = &(*pp)->next) {
		struct session_srv *ss = *pp;

		if (ss->c != c)
			continue;
		*pp = ss->next;
		ev_del(sess_epfd, &ss->ev, "a session's port");
		close(ss->ev.fd);
		log_info("client %u: session %s ends", c->id, c->session);
		stats_session(-1, -(int)ss->n, 0);
		free(ss);
		return;
	}
}

/* "@<va hex>+<len hex>": 0, or -EINVAL. */
static int parse_range(const char *q, uint64_t *va, uint64_t *len)
{
	char *end;

	if (q[0] != '@' || q[1] == '+' || !q[1])
		return -EINVAL;
	*va = strtoull(q + 1, &end, 16);
	if (*end != '+' || !end[1])
		return -EINVAL;
	*len = strtoull(end + 1, &end, 16);
	return *end ? -EINVAL : 0;
}

void session_fill_reply(uint16_t port, const char *name, struct dp_rpc_lookup_reply *r)
{
	struct session_srv *ss = srv_by_port(port);
	const struct srv_member *m;
	const struct segment *s;
	uint64_t va, len;
	int i;

	/* The port's client went after this connection came. */
	if (!ss) {
		r->status = -ECONNRESET;
		return;
	}
	if (!strcmp(name, "@")) {
		/* "A session", with its first registration when it has one:
		 * the opener knows one member before its first transfer (and
		 * one to send notifications alone through). */
		r->flags = DP_RPC_F_SESSION;
		r->members = ss->n;
		if (!ss->n || !(s = export_find(ss->m[0].name)))
			return;
		m = &ss->m[0];
	} else if (name[1] == '#') {
		unsigned long k = strtoul(name + 2, NULL, 10);

		if (k >= ss->n || !(s = export_find(ss->m[k].name))) {
			r->status = -EFAULT;
			return;
		}
		m = &ss->m[k];
	} else {
		if (parse_range(name, &va, &len)) {
			r->status = -EINVAL;
			return;
		}
		i = srv_find(ss, va);
		m = i >= 0 ? &ss->m[i] : NULL;
		/* No registration holds it whole: outside all, or across two. */
		if (!m || va - m->va > m->len || len > m->len - (va - m->va) ||
		    !(s = export_find(m->name))) {
			r->status = -EFAULT;
			return;
		}
	}
	if (rpc_segment_record(s, r))
		return;
	r->flags |= DP_RPC_F_SESSION;
	r->va = m->va;
	memcpy(r->member, m->name, sizeof(r->member));
}

/* ---- initiator side ---- */

struct sess_member {
	uint64_t va, len;
	struct segment *seg; /* one reference */
};
_Static_assert(offsetof(struct sess_member, va) == 0 && offsetof(struct srv_member, va) == 0,
	       "va_upper reads a member's address at its start");

struct sess_map {
	unsigned n;
	struct sess_member m[]; /* sorted by va, disjoint */
};

struct ask {
	uint64_t va, len;
	uint32_t idx; /* 0: the range [va, va + len); i + 1: the i-th registration */
};

/* A map a batch replaced (with its references), freed after one grace
 * period at the batch's end. */
struct retired {
	struct sess_map *map;
	struct retired *next;
};

struct session_cli {
	char name[DP_NAME_MAX];
	/* Read by pollers: */
	_Atomic(struct sess_map *) map;
	atomic_int gone;     /* 0, or every descriptor's errno */
	atomic_int miss_err; /* a second miss's errno */
	atomic_uint asked, answered;
	/* Pollers' questions: */
	pthread_mutex_t lock;
	unsigned nask;
	bool listed; /* on `asking` */
	struct session_cli *ask_next;
	struct ask asks[SESSION_ASKS];
	/* Control thread: */
	uint16_t local_port;   /* a session of this service's: its port and */
	uint32_t local_client; /* its client's id; 0: another service's */
	int refs;	       /* the handle, the open, every lookup in flight */
	bool closed;
	uint32_t batch; /* the ticket a batch in flight answers; 0: none */
	bool stalled;	/* waits for SESSION_LOOKUPS_ALL to leave room */
	struct session_cli *stalled_next;
	struct open_ctx *opening;     /* an open waiting for its batch (prefetch) */
	void (*refreshed)(void *arg); /* session_refresh's, called at the batch's end */
	void *refreshed_arg;
	struct ask *work;
	unsigned nwork, next_work, running;
	struct retired *retired;
};

static pthread_mutex_t ask_lock = PTHREAD_MUTEX_INITIALIZER;
static struct session_cli *asking;
/* Control thread: questions in flight, all handles; the handles whose
 * batches wait for room, oldest first (each holds a reference). */
static unsigned questions;
static struct session_cli *stalled, **stalled_tail = &stalled;
/* Pollers holding descriptors (a bit each): kicked when answers come. */
static atomic_ullong holding;

static void holders_kick(void)
{
	unsigned long long m = atomic_exchange(&holding, 0);

	for (; m; m &= m - 1)
		poller_kick(&pollers[__builtin_ctzll(m)]);
}

static void map_free(struct sess_map *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < m->n; i++)
		segment_put(m->m[i].seg);
	free(m);
}

static void retired_free(struct session_cli *s)
{
	struct retired *rt;

	if (!s->retired)
		return;
	qsbr_synchronize();
	while ((rt = s->retired)) {
		s->retired = rt->next;
		map_free(rt->map);
		free(rt);
	}
}

static void sess_put(struct session_cli *s)
{
	if (--s->refs)
		return;
	pthread_mutex_lock(&ask_lock);
	if (s->listed)
		for (struct session_cli **pp = &asking; *pp; pp = &(*pp)->ask_next)
			if (*pp == s) {
				*pp = s->ask_next;
				break;
			}
	pthread_mutex_unlock(&ask_lock);
	/* No poller reaches it: its handle went a grace period ago. */
	retired_free(s);
	map_free(atomic_load_explicit(&s->map, memory_order_relaxed));
	free(s->work);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* The member [va, va + len) is `seg`: a new map without the members it
 * overlaps or that died, published; the old one (and the references of
 * the members it drops) retired. */
static int map_insert(struct session_cli *s, uint64_t va, uint64_t len, struct segment *seg)
{
	struct sess_map *old = atomic_load_explicit(&s->map, memory_order_relaxed), *m;
	unsigned n = old ? old->n : 0, k = 0;
	struct retired *rt;
	bool placed = false;

	for (unsigned i = 0; i < n; i++)
		if (old->m[i].seg == seg && old->m[i].va == va)
			return 0; /* known already (two questions, one answer) */
	m = malloc(sizeof(*m) + sizeof(m->m[0]) * (n + 1));
	rt = old ? malloc(sizeof(*rt)) : NULL;
	if (!m || (old && !rt)) {
		free(m);
		free(rt);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		const struct sess_member *o = &old->m[i];

		if ((o->va < va + len && va < o->va + o->len) || atomic_load(&o->seg->dead))
			continue;
		if (!placed && o->va > va) {
			m->m[k++] = (struct sess_member){va, len, seg};
			placed = true;
		}
		m->m[k++] = *o;
		atomic_fetch_add(&o->seg->refs, 1);
	}
	if (!placed)
		m->m[k++] = (struct sess_member){va, len, seg};
	m->n = k;
	atomic_fetch_add(&seg->refs, 1);
	/* Release: pairs with the acquire in session_translate(); the
	 * members are whole before a poller can see them. */
	atomic_store_explicit(&s->map, m, memory_order_release);
	if (old) {
		*rt = (struct retired){.map = old, .next = s->retired};
		s->retired = rt;
	}
	return 0;
}

static void batch_issue(struct session_cli *s);
struct open_ctx;
static void open_part_done(struct open_ctx *o);

static void batch_start(struct session_cli *s)
{
	pthread_mutex_lock(&s->lock);
	if (s->batch || !s->nask || s->closed) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	free(s->work);
	s->work = malloc(sizeof(*s->work) * s->nask);
	if (!s->work) {
		pthread_mutex_unlock(&s->lock);
		return; /* asked again at the next wake-up; held ones time out */
	}
	memcpy(s->work, s->asks, sizeof(*s->work) * s->nask);
	s->nwork = s->nask;
	s->nask = 0;
	s->batch = atomic_load(&s->asked);
	pthread_mutex_unlock(&s->lock);
	s->next_work = 0;
	s->running = 0;
	atomic_store(&s->miss_err, -EFAULT);
	batch_issue(s);
}

static void batch_end(struct session_cli *s)
{
	retired_free(s);
	/* The map published before is seen by whoever sees this; sequentially
	 * consistent with holders_kick's exchange (session_waits). */
	atomic_store(&s->answered, s->batch);
	s->batch = 0;
	holders_kick();
	if (s->opening) {
		struct open_ctx *o = s->opening;

		s->opening = NULL;
		open_part_done(o);
	}
	if (s->refreshed) {
		void (*fn)(void *) = s->refreshed;

		s->refreshed = NULL;
		fn(s->refreshed_arg);
		batch_start(s);
		sess_put(s); /* session_refresh's */
		return;
	}
	batch_start(s);
}

struct ask_ctx {
	struct session_cli *s;
	struct ask a;	  /* the question */
	uint64_t va, len; /* the member that answered it */
	unsigned tries;
};

static void on_ask_reply(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds,
			 unsigned nfds);

/* Asks the session's port x's question: 0 or rpc_lookup_start's -errno. */
static int ask_start(struct ask_ctx *x)
{
	char q[DP_NAME_MAX];

	if (x->a.idx)
		snprintf(q, sizeof(q), "@#%u", x->a.idx - 1);
	else
		snprintf(q, sizeof(q), "@%" PRIx64 "+%" PRIx64, x->a.va, x->a.len);
	x->tries++;
	return rpc_lookup_start(x->s->name, q, on_ask_reply, x);
}

/* A question's end: its member installed, or its error noted. */
static void ask_done(struct ask_ctx *x, int rc, struct segment *seg, bool from_port)
{
	struct session_cli *s = x->s;

	/* Cut before its answer: asked again, in the same slot. A retry
	 * that cannot start (no fd, no memory, no lookup slot) is this
	 * service's trouble, not a sign the session went. */
	if (rc == -EHOSTUNREACH && from_port && x->tries < ASK_TRIES && !s->closed) {
		int again = ask_start(x);

		if (!again)
			return;
		rc = again;
		from_port = false;
	}
	if (!rc && !s->closed)
		rc = map_insert(s, x->va, x->len, seg);
	/* The session's port went away: so did its client. */
	if (rc == -EHOSTUNREACH && from_port)
		atomic_store(&s->gone, -ECONNRESET);
	else if (rc == -ECONNRESET || (rc == -ENOENT && from_port))
		atomic_store(&s->gone, -ECONNRESET);
	else if (rc && rc != -EFAULT)
		atomic_store(&s->miss_err, rc);
	if (rc)
		log_debug("session %s: [0x%" PRIx64 ", +%" PRIu64 "): %s", s->name, x->va, x->len,
			  strerror(-rc));
	stats_session_question(rc != 0);
	free(x);
	s->running--;
	questions--;
	batch_issue(s);
	/* Room for a handle that waits for it. */
	if (stalled && questions < SESSION_LOOKUPS_ALL) {
		struct session_cli *w = stalled;

		stalled = w->stalled_next;
		if (!stalled)
			stalled_tail = &stalled;
		w->stalled = false;
		batch_issue(w);
		sess_put(w);
	}
	sess_put(s);
}

static void on_member(void *arg, int rc, struct segment *seg)
{
	ask_done(arg, rc, seg, false);
}

static void on_ask_reply(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds,
			 unsigned nfds)
{
	struct ask_ctx *x = arg;

	while (nfds)
		close(fds[--nfds]);
	if (rc == RPC_LOOKUP_SELF || (!rc && !(r->flags & DP_RPC_F_SESSION && r->member[0])))
		rc = -ENOENT;
	if (!rc && !x->s->closed) {
		x->va = r->va;
		x->len = r->len;
		/* The member is an export of the session's service: found
		 * as an open by its name there would find it. */
		rc = segment_resolve_reply(r->server_name, r->member, r, on_member, x);
		if (rc == SEGMENT_PENDING)
			return;
		ask_done(x, rc, NULL, false);
		return;
	}
	ask_done(x, rc, NULL, true);
}

/* A session of this service's: the member that holds a's range, found
 * here and installed at once. */
static void ask_local(struct session_cli *s, const struct ask *a)
{
	struct session_srv *ss = srv_by_port(s->local_port);
	const struct srv_member *m;
	struct segment *seg;
	int i, rc = -EFAULT;

	if (!ss || ss->c->id != s->local_client) {
		atomic_store(&s->gone, -ECONNRESET);
		return;
	}
	i = srv_find(ss, a->va);
	m = i >= 0 ? &ss->m[i] : NULL;
	if (m && a->va - m->va <= m->len && a->len <= m->len - (a->va - m->va) &&
	    (seg = export_find(m->name)))
		rc = map_insert(s, m->va, m->len, seg);
	if (rc && rc != -EFAULT)
		atomic_store(&s->miss_err, rc);
	stats_session_question(rc != 0);
}

static void batch_issue(struct session_cli *s)
{
	while (s->local_port && s->next_work < s->nwork)
		ask_local(s, &s->work[s->next_work++]);
	while (s->running < SESSION_LOOKUPS && questions < SESSION_LOOKUPS_ALL &&
	       s->next_work < s->nwork) {
		const struct ask *a = &s->work[s->next_work++];
		struct ask_ctx *x = malloc(sizeof(*x));
		int rc;

		if (!x) {
			atomic_store(&s->miss_err, -ENOMEM);
			continue;
		}
		*x = (struct ask_ctx){.s = s, .a = *a, .va = a->va, .len = a->len};
		rc = ask_start(x);
		if (rc) {
			free(x);
			atomic_store(&s->miss_err, rc);
			continue;
		}
		s->refs++;
		s->running++;
		questions++;
	}
	/* Work left and no room anywhere: it waits its turn (ask_done). */
	if (s->next_work < s->nwork && !s->running && !s->stalled) {
		s->stalled = true;
		s->stalled_next = NULL;
		*stalled_tail = s;
		stalled_tail = &s->stalled_next;
		s->refs++;
		return;
	}
	if (s->batch && !s->running && s->next_work == s->nwork)
		batch_end(s);
}

/* The pollers' questions since the last run (ask_wake). */
static void sessions_run(void)
{
	struct session_cli *list, *s;

	pthread_mutex_lock(&ask_lock);
	list = asking;
	asking = NULL;
	for (s = list; s; s = s->ask_next)
		s->listed = false;
	pthread_mutex_unlock(&ask_lock);
	while ((s = list)) {
		list = s->ask_next;
		s->refs++;
		batch_start(s);
		sess_put(s);
	}
}

struct open_ctx {
	struct session_cli *s;
	session_opened_fn fn;
	void *arg;
	uint64_t va, len; /* the first member the port described, if any */
	uint32_t members; /* how many the session has */
	/* What the open still waits for: the first member's mapping, and
	 * the batch that asks for the others (both at once). */
	unsigned parts;
};

static void open_end(struct open_ctx *o, int rc)
{
	if (rc)
		log_info("session %s: %s", o->s->name, strerror(-rc));
	o->fn(o->arg, rc, rc ? NULL : o->s);
	if (rc) {
		o->s->closed = true;
		sess_put(o->s);
	}
	free(o);
}

/* One of what the open waits for is done; the handle is granted after
 * the last. */
static void open_part_done(struct open_ctx *o)
{
	if (!--o->parts)
		open_end(o, 0);
}

/* The open's answer: the session's other registrations are asked for now,
 * beside the first one's mapping, and the handle is granted once they are
 * in (a registration made later, or one that cannot be reached now, is
 * asked about at its first use). One after the other, they were four
 * exchanges with a service of this host where a named open makes two. */
static void open_prefetch(struct open_ctx *o)
{
	struct session_cli *s = o->s;
	unsigned n = o->members < SESSION_ASKS ? o->members : SESSION_ASKS;

	if (n <= 1)
		return;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 1; i < n && s->nask < SESSION_ASKS; i++)
		s->asks[s->nask++] = (struct ask){.idx = i + 1};
	atomic_fetch_add(&s->asked, 1);
	pthread_mutex_unlock(&s->lock);
	o->parts++;
	s->opening = o;
	batch_start(s);
}

/* The first member, resolved: in the map before the handle exists. */
static void on_first_member(void *arg, int rc, struct segment *seg)
{
	struct open_ctx *o = arg;

	if (!rc)
		map_insert(o->s, o->va, o->len, seg);
	open_part_done(o);
}

static void on_ping(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds, unsigned nfds)
{
	struct open_ctx *o = arg;

	while (nfds)
		close(fds[--nfds]);
	if (rc == RPC_LOOKUP_SELF || (!rc && !(r->flags & DP_RPC_F_SESSION)) || rc == -ECONNRESET)
		rc = -ENOENT;
	if (!rc && r->member[0]) {
		o->va = r->va;
		o->len = r->len;
		o->members = r->members;
		o->parts = 1;
		open_prefetch(o);
		/* -ENOMEM (on_first_member not called): the member is asked
		 * about at its first use. */
		if (segment_resolve_reply(r->server_name, r->member, r, on_first_member, o) !=
		    SEGMENT_PENDING)
			open_part_done(o);
		return;
	}
	open_end(o, rc);
}

/* A new handle's map of a session of this service: every registration it
 * has now, at once. */
static int map_all(struct session_cli *s, const struct session_srv *ss)
{
	struct sess_map *m = malloc(sizeof(*m) + sizeof(m->m[0]) * (ss->n ? ss->n : 1));
	unsigned k = 0;

	if (!m)
		return -ENOMEM;
	for (unsigned i = 0; i < ss->n; i++) {
		struct segment *seg = export_find(ss->m[i].name);

		if (!seg)
			continue;
		atomic_fetch_add(&seg->refs, 1);
		m->m[k++] = (struct sess_member){ss->m[i].va, ss->m[i].len, seg};
	}
	m->n = k;
	atomic_store_explicit(&s->map, m, memory_order_release);
	return 0;
}

int session_refresh(struct session_cli *s, void (*fn)(void *arg), void *arg)
{
	struct session_srv *ss;

	if (atomic_load(&s->gone))
		return atomic_load(&s->gone);
	if (s->local_port) {
		struct sess_map *old = atomic_load_explicit(&s->map, memory_order_relaxed);
		struct retired *rt = malloc(sizeof(*rt));

		ss = srv_by_port(s->local_port);
		if (!ss || ss->c->id != s->local_client) {
			free(rt);
			atomic_store(&s->gone, -ECONNRESET);
			return -ECONNRESET;
		}
		if (!rt || map_all(s, ss)) {
			free(rt);
			return -ENOMEM;
		}
		if (old) {
			*rt = (struct retired){.map = old, .next = s->retired};
			s->retired = rt;
			retired_free(s);
		} else {
			free(rt);
		}
		return 0;
	}
	if (s->refreshed || s->opening)
		return -EBUSY;
	pthread_mutex_lock(&s->lock);
	if (s->nask < SESSION_ASKS)
		s->asks[s->nask++] = (struct ask){.idx = 1};
	atomic_fetch_add(&s->asked, 1);
	pthread_mutex_unlock(&s->lock);
	s->refreshed = fn;
	s->refreshed_arg = arg;
	s->refs++;
	batch_start(s);
	return SEGMENT_PENDING;
}

struct segment *session_any_member(struct session_cli *s)
{
	const struct sess_map *m = atomic_load_explicit(&s->map, memory_order_relaxed);

	if (atomic_load(&s->gone))
		return NULL;
	for (unsigned i = 0; m && i < m->n; i++)
		if (!atomic_load(&m->m[i].seg->dead) &&
		    (!m->m[i].seg->same || samehost_alive(m->m[i].seg->same)))
			return m->m[i].seg;
	return NULL;
}

int session_open(const char *name, struct session_cli **out, session_opened_fn fn, void *arg)
{
	const char *colon = strrchr(name, ':');
	struct session_srv *ss;
	struct session_cli *s;
	struct open_ctx *o;
	int local;
	unsigned long port;
	char *end;
	int rc;

	if (!colon || colon == name)
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (*end || !port || port > 65535 || colon[1] < '0' || colon[1] > '9')
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	o = malloc(sizeof(*o));
	if (!s || !o) {
		free(s);
		free(o);
		return -ENOMEM;
	}
	snprintf(s->name, sizeof(s->name), "%s", name);
	pthread_mutex_init(&s->lock, NULL);
	atomic_init(&s->miss_err, -EFAULT);
	s->refs = 1;
	/* A session of this service's: no question on the network, now or
	 * at a miss (ask_local). */
	local = rpc_self_port(name);
	ss = local > 0 ? srv_by_port((uint16_t)local) : NULL;
	if (ss) {
		free(o);
		s->local_port = ss->port;
		s->local_client = ss->c->id;
		if (map_all(s, ss)) {
			sess_put(s);
			return -ENOMEM;
		}
		*out = s;
		return 0;
	}
	*o = (struct open_ctx){.s = s, .fn = fn, .arg = arg};
	rc = rpc_lookup_start(name, "@", on_ping, o);
	if (rc) {
		pthread_mutex_destroy(&s->lock);
		free(s);
		free(o);
		return rc;
	}
	return SEGMENT_PENDING;
}

void session_close(struct session_cli *s)
{
	s->closed = true;
	sess_put(s);
}

void sessions_cleanup(void)
{
	while (srvs)
		session_client_gone(srvs->c);
	ev_wake_close(&ask_wake);
}

/* ---- pollers ---- */

int session_translate(struct session_cli *s, uint64_t va, uint64_t len, bool final,
		      struct segment **seg, uint64_t *off)
{
	int gone = atomic_load_explicit(&s->gone, memory_order_acquire);
	/* Acquire: pairs with the release in map_insert(). QSBR keeps the
	 * map and its segments alive for this loop. */
	const struct sess_map *m = atomic_load_explicit(&s->map, memory_order_acquire);

	if (gone)
		return gone;
	if (m) {
		unsigned lo = va_upper(m->m, sizeof(m->m[0]), m->n, va);

		if (lo) {
			const struct sess_member *e = &m->m[lo - 1];
			struct segment *sg = e->seg;

			/* A member that died (unregistered, or its peer's
			 * export moved) is asked about again. */
			if (va - e->va <= e->len && len <= e->len - (va - e->va) &&
			    !atomic_load_explicit(&sg->dead, memory_order_acquire) &&
			    (!sg->same || samehost_alive(sg->same))) {
				*seg = sg;
				*off = va - e->va;
				return 0;
			}
		}
	}
	return final ? atomic_load_explicit(&s->miss_err, memory_order_relaxed) : SESSION_MISS;
}

/* The question of a poller: returns the ticket its answer carries. */
static uint32_t session_ask(struct session_cli *s, uint64_t va, uint64_t len)
{
	bool known = false, wake = false;
	uint32_t t;

	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nask && !known; i++)
		known = !s->asks[i].idx && s->asks[i].va <= va &&
			va - s->asks[i].va <= s->asks[i].len &&
			len <= s->asks[i].len - (va - s->asks[i].va);
	if (!known && s->nask < SESSION_ASKS)
		s->asks[s->nask++] = (struct ask){.va = va, .len = len};
	t = atomic_fetch_add(&s->asked, 1) + 1;
	if (!s->listed) {
		s->listed = wake = true;
		pthread_mutex_lock(&ask_lock);
		s->ask_next = asking;
		asking = s;
		pthread_mutex_unlock(&ask_lock);
	}
	pthread_mutex_unlock(&s->lock);
	if (wake)
		wake_efd_ring(ask_wake.ev.fd);
	return t;
}

/* The session engine's per-poller state: descriptors held, oldest first. */
struct held {
	struct queue *q;
	struct dp_desc d;
	const struct session_cli *s; /* compared, never followed */
	uint32_t ticket;
	uint64_t since_ns;
	struct held *next;
};

struct sess_poller {
	struct held *head, **tail, *spare;
};

static struct sess_poller *sess_poller(struct poller *p)
{
	struct sess_poller *sp = p->eng[ENGINE_session];

	if (!sp) {
		sp = calloc(1, sizeof(*sp));
		if (!sp)
			return NULL;
		sp->tail = &sp->head;
		p->eng[ENGINE_session] = sp;
	}
	return sp;
}

void session_hold(struct poller *p, struct queue *q, const struct dp_desc *d, struct session_cli *s)
{
	struct sess_poller *sp = sess_poller(p);
	struct held *h = sp ? sp->spare : NULL;

	if (h)
		sp->spare = h->next;
	else if (sp)
		h = malloc(sizeof(*h));
	if (!h) {
		queue_complete_ns(q, d->user_data, d->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	*h = (struct held){.q = q, .d = *d, .s = s, .since_ns = dp_now_ns()};
	h->ticket = session_ask(s, d->target_off, d->len);
	*sp->tail = h;
	sp->tail = &h->next;
	q->inflight++;
	engine_kick(p, ENGINE_session);
	atomic_fetch_or(&holding, 1ull << p->idx);
}

/* Is h's answer in (or will it never come)? */
static bool held_ready(const struct held *h, uint64_t now)
{
	const struct seg_handle *sh;
	struct session_cli *s;

	if (h->d.segment >= DP_MAX_SEGS)
		return true;
	sh = atomic_load_explicit(&h->q->client->segs[h->d.segment], memory_order_acquire);
	if (!sh || sh->sess != h->s)
		return true; /* closed: it runs again and fails -EBADF */
	s = sh->sess;
	return atomic_load_explicit(&s->gone, memory_order_acquire) ||
	       (int32_t)(atomic_load_explicit(&s->answered, memory_order_acquire) - h->ticket) >=
		       0 ||
	       now - h->since_ns > HOLD_MAX_NS;
}

static int session_progress(struct poller *p)
{
	struct sess_poller *sp = p->eng[ENGINE_session];
	struct held **pp, *h;
	uint64_t now;
	int work = 0;

	if (!sp)
		return 0;
	now = dp_now_ns();
	pp = &sp->head;
	while ((h = *pp)) {
		if (!held_ready(h, now)) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		if (!*pp)
			sp->tail = pp;
		h->q->inflight--;
		desc_process_held(p, h->q, &h->d);
		h->next = sp->spare;
		sp->spare = h;
		work++;
	}
	return work;
}

static bool session_busy(const struct poller *p)
{
	const struct sess_poller *sp = p->eng[ENGINE_session];

	return sp && sp->head;
}

/* Nothing held is ready: the answers come with a kick (holders_kick), a
 * timeout within the poller's sleep cap. */
static bool session_waits(const struct poller *p)
{
	const struct sess_poller *sp = p->eng[ENGINE_session];
	uint64_t now = dp_now_ns();

	/* The bit first, then the answers (both sequentially consistent, as
	 * the answer's store and holders_kick's exchange are): an answer
	 * this misses finds the bit and kicks. */
	atomic_fetch_or(&holding, 1ull << p->idx);
	for (const struct held *h = sp->head; h; h = h->next)
		if (held_ready(h, now))
			return false;
	return true;
}

static void session_cancel_all(struct poller *p)
{
	struct sess_poller *sp = p->eng[ENGINE_session];
	struct held *h;

	if (!sp)
		return;
	while ((h = sp->head)) {
		sp->head = h->next;
		h->q->inflight--;
		queue_complete_ns(h->q, h->d.user_data, h->d.submit_ns, -ECANCELED, 0, 0);
		h->next = sp->spare;
		sp->spare = h;
	}
	sp->tail = &sp->head;
}

static void session_poller_free(struct poller *p)
{
	struct sess_poller *sp = p->eng[ENGINE_session];
	struct held *h;

	if (!sp)
		return;
	session_cancel_all(p);
	while ((h = sp->spare)) {
		sp->spare = h->next;
		free(h);
	}
	free(sp);
	p->eng[ENGINE_session] = NULL;
}

const struct engine session_engine = {
	.name = "session",
	.progress = session_progress,
	.busy = session_busy,
	.waits = session_waits,
	.cancel_all = session_cancel_all,
	.poller_free = session_poller_free,
};
