/* SPDX-License-Identifier: MIT */
/*
 * rpc_client.c - the asking end of the peer protocol (rpc.h): lookups and
 * notifications to other services, on the control thread's epoll set.
 *
 * Each is a struct call, a non-blocking connect, then states that each
 * move what the socket takes (rpc_step()): the server's challenge in, the
 * request out, the reply in; its own deadline (DP_RPC_TIMEOUT_MS); the
 * end reported through a callback from the loop. A peer given by host
 * name is resolved first by a thread of its own (detached, one per name
 * being resolved, at most RPC_MAX_RESOLVING): getaddrinfo(), then the
 * answer on a list and a write to an eventfd in the epoll set, and the
 * call goes on from there. A resolution still running when its lookup
 * ends (deadline, shutdown) is left to finish, and freed then.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "net.h"
#include "rpc_internal.h"

enum call_state { CALL_RESOLVING, CALL_CONNECTING, CALL_CHALLENGE, CALL_SENDING, CALL_RECEIVING };

struct call;

/* A host name being resolved by its thread, until the thread is done,
 * even after its lookup ended (call NULL). */
struct gai_req {
	char host[DP_NAME_MAX];
	char port[16];
	int efd; /* written when done */
	/* The thread's until it puts the request on the done list: */
	int err;
	struct addrinfo *res;
	struct gai_req *done_next;
	/* The control thread's: */
	struct call *call;
	struct gai_req *next; /* gais */
};

struct call {
	struct rpc_sock s; /* first: on rpc_calls, freed through it; fd -1 while resolving */
	enum call_state state;
	struct gai_req *gai; /* CALL_RESOLVING */
	rpc_done_fn done;
	void *arg;
	size_t ch_len; /* bytes of `ch` read */
	struct challenge_msg ch;
	size_t out_off, out_len;
	union rpc_req out;
	size_t in_len;
	struct reply_msg in;
	bool local; /* a same-host lookup, on a Unix socket: s.fds come with the reply */
	char peer[DP_NAME_MAX];
};

/* Resolutions running (their lookups may have ended), and the eventfd
 * their threads write when done. */
static struct ev_handler gai_ev = {.fd = -1};
static struct gai_req *gais;
static unsigned ngais;

/* Resolutions done, from their threads to the control thread. */
static pthread_mutex_t gai_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gai_req *gai_done;

/* "host:port[@rail]" -> host, port. */
static int split_peer(const char *peer, char *host, size_t hlen, char *port, size_t plen)
{
	char buf[DP_NAME_MAX], *at, *colon;

	if (snprintf(buf, sizeof(buf), "%s", peer) >= (int)sizeof(buf))
		return -EINVAL;
	at = strchr(buf, '@');
	if (at)
		*at = 0;
	colon = strrchr(buf, ':');
	if (!colon || colon == buf || !colon[1] ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return -EINVAL;
	*colon = 0;
	if (strlen(buf) >= hlen || strlen(colon + 1) >= plen)
		return -EINVAL;
	strcpy(host, buf);
	strcpy(port, colon + 1);
	return 0;
}

static bool addr_is_ours(const struct sockaddr *sa)
{
	struct ifaddrs *ifs, *i;
	bool ours = false;

	/* Loopback, and 0.0.0.0 (which connects to this host). */
	if (sa->sa_family == AF_INET &&
	    ((ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127 ||
	     ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY)))
		return true;
	if (getifaddrs(&ifs))
		return false;
	for (i = ifs; i && !ours; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && sa->sa_family == AF_INET)
			ours = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
			       ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
	freeifaddrs(ifs);
	return ours;
}

int rpc_self_port(const char *peer)
{
	char host[DP_NAME_MAX], port[16];
	struct sockaddr_in sa = {.sin_family = AF_INET};
	long p;

	if (split_peer(peer, host, sizeof(host), port, sizeof(port)))
		return -1;
	p = strtol(port, NULL, 10);
	if (p <= 0 || p > 65535)
		return -1;
	if (!strcmp(host, cfg.server_host))
		return (int)p;
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -1;
	return addr_is_ours((const struct sockaddr *)&sa) ? (int)p : -1;
}

bool rpc_is_self(const char *peer)
{
	char host[DP_NAME_MAX], port[16], self[DP_NAME_MAX + 16];
	struct sockaddr_in sa = {.sin_family = AF_INET};

	if (split_peer(peer, host, sizeof(host), port, sizeof(port)))
		return false;
	snprintf(self, sizeof(self), "%s:%s", host, port);
	if (!strcmp(self, cfg.server_name))
		return true;
	if (atoi(port) != cfg.rpc_port)
		return false;
	/* A host name is not resolved here (that could wait on DNS): its
	 * lookup finds out, once resolved (RPC_LOOKUP_SELF). */
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return false;
	return addr_is_ours((const struct sockaddr *)&sa);
}

/* ---- lookups ---- */

static void gai_unlink(struct gai_req *g)
{
	for (struct gai_req **pp = &gais; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	ngais--;
}

/* Its lookup has ended: freed when its thread is done (on_gai_event). */
static void gai_abandon(struct gai_req *g)
{
	g->call = NULL;
}

static void call_unlink(struct call *k)
{
	rpc_socks_close(&rpc_calls, &k->s);
	if (k->gai)
		gai_abandon(k->gai);
	k->gai = NULL;
}

/* A whole reply: from a holder of the fleet key, for this lookup (-EACCES
 * otherwise), then checked field by field. */
static int call_reply_check(const struct call *k)
{
	struct dp_rpc_hdr h = k->in.h;
	bool notify = k->out.h.type == DP_RPC_NOTIFY;
	struct auth_part parts[3] = {
		{notify ? k->out.notify.n.nonce : k->out.lookup.req.nonce, DP_AUTH_NONCE},
		{k->ch.c.nonce, DP_AUTH_NONCE},
		{&k->in.r, sizeof(k->in.r)}};

	if (h.magic != DP_RPC_MAGIC || h.version != DP_RPC_VERSION ||
	    h.len != sizeof(k->in.r) + DP_AUTH_MAC)
		return -EBADMSG;
	if (!auth_check(LABEL_REPLY, parts, 3, k->in.mac)) {
		log_warn("peer RPC: the reply of %s does not prove our fleet key: not trusted",
			 k->peer);
		return -EACCES;
	}
	if (notify) {
		/* Only the status means anything. */
		if (h.type != (DP_RPC_NOTIFY | DP_RPC_REPLY) || k->in.r.status > 0 ||
		    k->in.r.status < -4095)
			return -EBADMSG;
		return k->in.r.status;
	}
	h.len = sizeof(k->in.r);
	return rpc_reply_check(&h, &k->in.r);
}

/* Ends a lookup: closed first, then its caller told (rc, and the reply
 * when rc is 0). */
static void call_end(struct call *k, int rc)
{
	struct dp_rpc_lookup_reply r;
	struct rpc_fds fds = {.n = 0};

	if (!rc)
		rc = call_reply_check(k);
	if (!rc) {
		r = k->in.r;
		/* The fds are the callee's from here. */
		fds = k->s.fds;
		k->s.fds.n = 0;
	}
	call_unlink(k);
	k->done(k->arg, rc, rc ? NULL : &r, fds.fd, fds.n);
}

/* How a socket error (-errno, rpc_step()) ends a lookup: a peer that went
 * away is unreachable, anything else garbled the exchange. */
static int call_err(int rc)
{
	return rc == -ECONNRESET || rc == -EPIPE || rc == -ECONNREFUSED ? -EHOSTUNREACH : -EBADMSG;
}

/* The server's first message: a challenge of this protocol version. */
static int call_challenge_check(const struct dp_rpc_hdr *h)
{
	int rc = rpc_hdr_check(h);

	if (rc)
		return rc;
	if (h->type != DP_RPC_CHALLENGE || h->len != sizeof(struct dp_rpc_challenge))
		return -EBADMSG;
	return 0;
}

/* The request, answering the challenge: our nonce and the MAC. */
static void call_request(struct call *k)
{
	struct dp_rpc_lookup *q = &k->out.lookup.req;
	struct auth_part parts[3] = {{k->ch.c.nonce, DP_AUTH_NONCE},
				     {q->nonce, DP_AUTH_NONCE},
				     {q, offsetof(struct dp_rpc_lookup, nonce)}};

	if (k->out.h.type == DP_RPC_NOTIFY) {
		struct dp_rpc_notify *nq = &k->out.notify.n;
		struct auth_part np[4] = {{k->ch.c.nonce, DP_AUTH_NONCE},
					  {nq->nonce, DP_AUTH_NONCE},
					  {&nq->count, 2 * sizeof(uint32_t)},
					  {nq->data, nq->bytes}};

		auth_nonce(nq->nonce);
		auth_mac(LABEL_NOTIFY, np, 4, nq->mac);
		return;
	}

	auth_nonce(q->nonce);
	auth_mac(LABEL_LOOKUP, parts, 3, q->mac);
}

/* rpc_step() for a lookup, which it ends on an error: 1, 0 or -1 (ended). */
static int call_step(struct call *k, enum rpc_dir dir, void *buf, size_t *off, size_t len,
		     struct rpc_fds *fds)
{
	int rc = rpc_step(k->s.ev.fd, dir, buf, off, len, fds);

	if (rc >= 0)
		return rc;
	call_end(k, call_err(rc));
	return -1;
}

/* Each state below moves the lookup as far as the socket allows: true
 * when it is on to the next state, false when it waits or has ended. */

static bool call_connected(struct call *k)
{
	if (dp_net_connect_result(k->s.ev.fd) ||
	    ev_mod(rpc_epfd, &k->s.ev, EPOLLIN, rpc_calls.what)) {
		call_end(k, -EHOSTUNREACH);
		return false;
	}
	k->state = CALL_CHALLENGE;
	return true;
}

/* The challenge in, then our request ready to go. */
static bool call_read_challenge(struct call *k)
{
	int rc;

	if (call_step(k, RPC_RECV, &k->ch, &k->ch_len, sizeof(k->ch), NULL) <= 0)
		return false;
	rc = call_challenge_check(&k->ch.h);
	if (rc) {
		call_end(k, rc);
		return false;
	}
	call_request(k);
	k->state = CALL_SENDING;
	return true;
}

static bool call_send(struct call *k)
{
	int rc = call_step(k, RPC_SEND, &k->out, &k->out_off, k->out_len, NULL);

	if (!rc && ev_mod(rpc_epfd, &k->s.ev, EPOLLOUT, rpc_calls.what))
		call_end(k, -EHOSTUNREACH);
	if (rc <= 0)
		return false;
	k->state = CALL_RECEIVING;
	if (ev_mod(rpc_epfd, &k->s.ev, EPOLLIN, rpc_calls.what)) {
		call_end(k, -EHOSTUNREACH);
		return false;
	}
	return true;
}

/* The reply in, its header's length checked first; the lookup ends once
 * it is whole. */
static void call_read_reply(struct call *k)
{
	/* A same-host reply: fds may come with its bytes. */
	struct rpc_fds *fds = k->local ? &k->s.fds : NULL;

	if (call_step(k, RPC_RECV, &k->in, &k->in_len, sizeof(k->in.h), fds) <= 0)
		return;
	if (k->in.h.len != sizeof(k->in.r) + DP_AUTH_MAC) {
		call_end(k, -EBADMSG);
		return;
	}
	if (call_step(k, RPC_RECV, &k->in, &k->in_len, sizeof(k->in), fds) > 0)
		call_end(k, 0);
}

static void call_advance(struct call *k)
{
	if (k->state == CALL_CONNECTING && !call_connected(k))
		return;
	if (k->state == CALL_CHALLENGE && !call_read_challenge(k))
		return;
	if (k->state == CALL_SENDING && !call_send(k))
		return;
	call_read_reply(k);
}

static void on_call_event(struct ev_handler *h, uint32_t events)
{
	struct call *k = (struct call *)h;

	if (k->s.ev.fd < 0)
		return;
	/* A failed connect shows as EPOLLERR: SO_ERROR says which. */
	if (events & EPOLLERR && k->state != CALL_CONNECTING) {
		call_end(k, -EHOSTUNREACH);
		return;
	}
	call_advance(k);
}

/* Connects `k` to `sa` (TCP, or the same-host Unix socket), without
 * waiting: 0, or -errno (nothing left). */
static int call_connect(struct call *k, const struct sockaddr *sa, socklen_t salen)
{
	int fd, rc;

	fd = dp_net_socket(sa->sa_family, SOCK_STREAM);
	if (fd < 0)
		return fd;
	rc = dp_net_connect_start(fd, sa, salen);
	if (rc && rc != -EINPROGRESS) {
		close(fd);
		return -EHOSTUNREACH;
	}
	k->s.ev.fd = fd;
	k->state = rc ? CALL_CONNECTING : CALL_CHALLENGE;
	/* Connecting: wait until writable. Connected (loopback may be at
	 * once): wait for the challenge. Either way `done` never runs inside
	 * this call. */
	if (ev_add(rpc_epfd, &k->s.ev, rc ? EPOLLOUT : EPOLLIN, rpc_calls.what)) {
		close(fd);
		k->s.ev.fd = -1;
		return -EHOSTUNREACH;
	}
	return 0;
}

/* A resolution's thread: getaddrinfo() may wait seconds on a name server,
 * here and nowhere else. */
static void *gai_main(void *arg)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
	struct gai_req *g = arg;
	uint64_t one = 1;
	int efd = g->efd;

	g->err = getaddrinfo(g->host, g->port, &hints, &g->res);
	pthread_mutex_lock(&gai_lock);
	g->done_next = gai_done;
	gai_done = g;
	pthread_mutex_unlock(&gai_lock);
	/* `g` is the control thread's from here on. */
	(void)!write(efd, &one, sizeof(one));
	return NULL;
}

/* Starts resolving `host` for `k`, on a thread: 0 or -errno. */
static int call_resolve(struct call *k, const char *host, const char *port)
{
	pthread_attr_t attr;
	struct gai_req *g;
	pthread_t t;
	int rc;

	if (gai_ev.fd < 0)
		return -EHOSTUNREACH;
	/* Resolutions still running for lookups that ended count too. */
	if (ngais >= RPC_MAX_RESOLVING)
		return -EAGAIN;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	snprintf(g->host, sizeof(g->host), "%s", host);
	snprintf(g->port, sizeof(g->port), "%s", port);
	g->efd = gai_ev.fd;
	g->call = k;
	/* Listed before the thread can finish: on_gai_event unlinks it. */
	g->next = gais;
	gais = g;
	ngais++;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, gai_main, g);
	pthread_attr_destroy(&attr);
	if (rc) {
		gai_unlink(g);
		free(g);
		return -EAGAIN;
	}
	k->gai = g;
	k->state = CALL_RESOLVING;
	return 0;
}

/* A resolved name goes on to connect; this service's own address and
 * port ends the lookup RPC_LOOKUP_SELF, a failure -EHOSTUNREACH. */
static void call_resolved(struct call *k, struct gai_req *g)
{
	struct sockaddr_in sa;
	int rc;

	k->gai = NULL;
	if (g->err || !g->res || g->res->ai_family != AF_INET) {
		log_info("peer RPC: %s: %s", g->host,
			 g->err ? gai_strerror(g->err) : "no IPv4 address");
		call_end(k, -EHOSTUNREACH);
		return;
	}
	sa = *(const struct sockaddr_in *)g->res->ai_addr;
	if (ntohs(sa.sin_port) == cfg.rpc_port && addr_is_ours((const struct sockaddr *)&sa)) {
		call_end(k, RPC_LOOKUP_SELF);
		return;
	}
	rc = call_connect(k, (const struct sockaddr *)&sa, sizeof(sa));
	if (rc)
		call_end(k, rc);
}

/* Resolutions done: each goes to its lookup, if it still has one. */
static void on_gai_event(struct ev_handler *h, uint32_t events)
{
	struct gai_req *g, *next;
	uint64_t n;

	(void)events;
	(void)!read(h->fd, &n, sizeof(n));
	pthread_mutex_lock(&gai_lock);
	g = gai_done;
	gai_done = NULL;
	pthread_mutex_unlock(&gai_lock);
	for (; g; g = next) {
		next = g->done_next;
		gai_unlink(g);
		if (g->call)
			call_resolved(g->call, g);
		if (g->res)
			freeaddrinfo(g->res);
		free(g);
	}
}

/* A lookup of `name` on `peer` (on the same-host socket when `local`) in
 * *kp, not yet connected nor listed: 0, -EAGAIN (RPC_MAX_CALLS in flight)
 * or -ENOMEM. */
static int call_new(struct call **kp, const char *peer, const char *name, bool local,
		    rpc_done_fn done, void *arg, const struct dp_rpc_notify *notify)
{
	struct call *k;

	if (rpc_calls.n >= RPC_MAX_CALLS)
		return -EAGAIN;
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	*kp = k;
	k->s.ev = (struct ev_handler){.fd = -1, .on_event = on_call_event};
	k->s.deadline_ns = dp_now_ns() + DP_RPC_TIMEOUT_MS * NS_PER_MS;
	k->done = done;
	k->arg = arg;
	snprintf(k->peer, sizeof(k->peer), "%s", peer);
	k->local = local;
	if (notify) {
		uint32_t len = (uint32_t)offsetof(struct dp_rpc_notify, data) + notify->bytes;

		k->out.notify.h = rpc_hdr(DP_RPC_NOTIFY, len);
		memcpy(&k->out.notify.n, notify, len);
		k->out_len = sizeof(k->out.notify.h) + len;
		return 0;
	}
	k->out.lookup.h = rpc_hdr(DP_RPC_LOOKUP, sizeof(k->out.lookup.req));
	k->out_len = sizeof(k->out.lookup);
	snprintf(k->out.lookup.req.name, sizeof(k->out.lookup.req.name), "%s", name);
	/* Our host, so that a service of this host tells us where to ask
	 * for its memory (samehost.h). */
	if (samehost_enabled())
		memcpy(k->out.lookup.req.host_id, samehost_id(), DP_HOST_ID_LEN);
	k->out.lookup.req.flags = local ? DP_RPC_Q_SAME_HOST : 0;
	/* Who asks, and where our rails are (see struct dp_rpc_lookup). */
	memcpy(k->out.lookup.req.server_name, cfg.server_name,
	       sizeof(k->out.lookup.req.server_name));
	for (unsigned i = 0; !local && i < fabric_nrails() && i < DP_MAX_RAILS; i++) {
		size_t alen = DP_FABRIC_ADDR_MAX;

		if (fabric_rail_addr(i, k->out.lookup.req.rail[i].addr, &alen))
			break;
		k->out.lookup.req.rail[i].addr_len = (uint32_t)alen;
		k->out.lookup.req.nrails = i + 1;
	}
	return 0;
}

/* A new lookup whose connect or resolution started (rc 0): listed; or
 * that did not: freed, and rc. */
static int call_started(struct call *k, int rc)
{
	if (rc) {
		free(k);
		return rc;
	}
	rpc_socks_push(&rpc_calls, &k->s);
	return 0;
}

/* A lookup or a notification to `peer` over TCP, without waiting. */
static int tcp_start(const char *peer, const char *name, rpc_done_fn done, void *arg,
		     const struct dp_rpc_notify *notify)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char host[DP_NAME_MAX], port[16];
	struct call *k;
	int rc;

	if (split_peer(peer, host, sizeof(host), port, sizeof(port)))
		return -EINVAL;
	if (atoi(port) <= 0 || atoi(port) > 65535)
		return -EINVAL;
	rc = call_new(&k, peer, name, false, done, arg, notify);
	if (rc)
		return rc;
	/* A literal address costs nothing; a name is resolved without
	 * waiting, and the deadline counts from now. */
	sa.sin_port = htons((uint16_t)atoi(port));
	if (inet_pton(AF_INET, host, &sa.sin_addr) == 1)
		rc = call_connect(k, (const struct sockaddr *)&sa, sizeof(sa));
	else
		rc = call_resolve(k, host, port);
	return call_started(k, rc);
}

int rpc_lookup_start(const char *peer, const char *name, rpc_done_fn done, void *arg)
{
	return tcp_start(peer, name, done, arg, NULL);
}

int rpc_notify_start(const char *peer, const void *data, uint32_t bytes, unsigned n,
		     rpc_done_fn done, void *arg)
{
	static struct dp_rpc_notify req; /* control thread; copied by call_new */

	if (!n || n > DP_RPC_NOTIFY_MAX || bytes < sizeof(struct dp_rpc_notify_entry) ||
	    bytes > DP_RPC_NOTIFY_BYTES)
		return -EINVAL;
	memset(&req, 0, offsetof(struct dp_rpc_notify, data));
	req.count = n;
	req.bytes = bytes;
	memcpy(req.data, data, bytes);
	return tcp_start(peer, "", done, arg, &req);
}

int rpc_lookup_local_start(const char *path, const char *peer, const char *name, rpc_done_fn done,
			   void *arg)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct call *k;
	int rc;

	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path) >= (int)sizeof(sa.sun_path))
		return -EINVAL;
	rc = call_new(&k, peer, name, true, done, arg, NULL);
	if (rc)
		return rc;
	return call_started(k, call_connect(k, (const struct sockaddr *)&sa, sizeof(sa)));
}

void rpc_client_start(void)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	/* Never closed: a resolution still running at exit may write it. */
	if (fd < 0) {
		log_warn("peer RPC: eventfd: %s; peers given by host name are unreachable",
			 strerror(errno));
		return;
	}
	gai_ev = (struct ev_handler){.fd = fd, .on_event = on_gai_event};
	if (ev_add(rpc_epfd, &gai_ev, EPOLLIN, "the peer RPC resolver"))
		gai_ev.fd = -1; /* leaks the eventfd: nothing else may write */
}

void rpc_client_expire(uint64_t now)
{
	struct rpc_sock *s;

	/* A lookup's callback may start another lookup (at the head of the
	 * list); the deadlines are checked on a snapshot of the due ones. */
	for (;;) {
		for (s = rpc_calls.ends.next; s != &rpc_calls.ends; s = s->next)
			if (s->deadline_ns <= now)
				break;
		if (s == &rpc_calls.ends)
			break;
		call_end((struct call *)s, -ETIMEDOUT);
	}
}

void rpc_client_shutdown(void)
{
	while (rpc_calls.n)
		call_end((struct call *)rpc_calls.ends.next, -ECANCELED);
}
