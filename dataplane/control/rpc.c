/* SPDX-License-Identifier: MIT */
/*
 * rpc.c - the peer protocol over TCP (see rpc.h), event-driven on the
 * control thread's epoll set: nothing here waits on the network.
 *
 * Server: each accepted connection is a struct srv_conn, an ev_handler of
 * its own with a read buffer, its accept time and a deadline
 * (RPC_SERVE_TIMEOUT_MS for the whole exchange); it walks
 * SRV_REQUEST -> SRV_REPLY -> closed, reading and writing only what the
 * socket takes (EPOLLIN, then EPOLLOUT while a reply is left). At most
 * RPC_MAX_CONNS are open; one more evicts the oldest.
 *
 * Client: each lookup is a struct call, a non-blocking connect, send and
 * receive on the same epoll set with its own deadline (DP_RPC_TIMEOUT_MS),
 * which reports through a callback from the loop. A peer given by host name
 * is resolved first by a thread of its own (detached, one per name being
 * resolved, at most RPC_MAX_RESOLVING): getaddrinfo(), then the answer on
 * a list and a write to an eventfd in the epoll set, and the call goes on
 * from there. A resolution still running when its lookup ends (deadline,
 * shutdown) is left to finish, and freed then.
 *
 * Deadlines are kept by rpc_sweep(), run by a timer of the loop that is
 * armed for each deadline set; objects closed during a batch are freed
 * there too, the timer armed for after the batch (an event of the same
 * batch may still point at one).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "event.h"
#include "net.h"
#include "notif.h"
#include "rpc.h"
#include "segments.h"
#include "session.h"

#define NS_PER_MS 1000000ull

struct challenge_msg {
	struct dp_rpc_hdr h;
	struct dp_rpc_challenge c;
};

struct req_msg {
	struct dp_rpc_hdr h;
	struct dp_rpc_lookup req;
};

struct notify_msg {
	struct dp_rpc_hdr h;
	struct dp_rpc_notify n;
};

/* A request as received or sent: its header says which. */
union rpc_req {
	struct dp_rpc_hdr h;
	struct req_msg lookup;
	struct notify_msg notify;
};

struct reply_msg {
	struct dp_rpc_hdr h;
	struct dp_rpc_lookup_reply r;
	uint8_t mac[DP_AUTH_MAC];
};

#define LABEL_LOOKUP "dp-rpc lookup"
#define LABEL_REPLY "dp-rpc reply"
#define LABEL_NOTIFY "dp-rpc notify"

/* ---- server connections ---- */

enum srv_state {
	SRV_CHALLENGE, /* writing the challenge */
	SRV_REQUEST,   /* reading the request (header, then payload) */
	SRV_REPLY,     /* writing the reply; closed once it is out */
};

struct srv_conn {
	struct ev_handler ev;
	enum srv_state state;
	uint32_t events; /* what ev is registered for */
	uint64_t accepted_ns, deadline_ns;
	uint8_t nonce[DP_AUTH_NONCE]; /* the challenge's */
	bool local;		      /* on the same-host socket */
	uint16_t session_port;	      /* on an engine session's port; 0: the RPC port */
	int fds[SAMEHOST_FDS];	      /* to send with the reply */
	unsigned nfds;
	size_t in_len; /* bytes of `in` read */
	union rpc_req in;
	size_t out_off, out_len; /* bytes of `out` written, to write */
	union {
		struct challenge_msg challenge;
		struct reply_msg reply;
	} out;
	struct srv_conn *prev, *next; /* open ones, oldest first */
};

/* ---- lookups ---- */

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
	struct gai_req *next; /* rpc.gais */
};

struct call {
	struct ev_handler ev; /* fd -1 while resolving */
	enum call_state state;
	struct gai_req *gai; /* CALL_RESOLVING */
	uint64_t deadline_ns;
	rpc_done_fn done;
	void *arg;
	size_t ch_len; /* bytes of `ch` read */
	struct challenge_msg ch;
	size_t out_off, out_len;
	union rpc_req out;
	size_t in_len;
	struct reply_msg in;
	bool local;	       /* a same-host lookup, on a Unix socket */
	int fds[SAMEHOST_FDS]; /* came with the reply */
	int nfds;
	char peer[DP_NAME_MAX];
	struct call *prev, *next;
};

static struct {
	int epfd;
	struct ev_timer *deadlines; /* runs rpc_sweep() */
	struct srv_conn *conns, *conns_tail;
	unsigned nconns;
	struct call *calls;
	unsigned ncalls;
	/* Closed during this batch: freed by rpc_sweep(). */
	struct srv_conn *dead_conns;
	struct call *dead_calls;
	struct ev_handler local; /* the same-host listener (samehost.h) */
	/* Resolutions running (their lookups may have ended), and the
	 * eventfd their threads write when done. */
	struct ev_handler gai_ev;
	struct gai_req *gais;
	unsigned ngais;
} rpc = {.epfd = -1, .local = {.fd = -1}, .gai_ev.fd = -1};

/* Resolutions done, from their threads to the control thread. */
static pthread_mutex_t gai_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gai_req *gai_done;

/* A TCP listening socket on every address, port `port` (0: any free one):
 * the fd, or -errno. */
int rpc_listen_port(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_ANY),
				 .sin_port = htons(port)};
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

int rpc_listen(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = rpc_listen_port((uint16_t)cfg.rpc_port);

	if (fd < 0)
		return fd;
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	config_set_rpc_port(ntohs(sa.sin_port));
	log_info("peer RPC on TCP port %d; server name %s", cfg.rpc_port, cfg.server_name);
	return fd;
}

int rpc_segment_record(const struct segment *s, struct dp_rpc_lookup_reply *r)
{
	memcpy(r->server_name, cfg.server_name, sizeof(r->server_name));
	r->access = s->access;
	r->len = s->region->len;
	r->base = fabric_virt_addr() ? (uint64_t)(uintptr_t)s->region->base : 0;
	r->flags = fabric_virt_addr() ? DP_RPC_F_VIRT_ADDR : 0;
	if (rpc.local.fd >= 0) {
		r->flags |= DP_RPC_F_SAME_HOST;
		memcpy(r->host_id, samehost_id(), DP_HOST_ID_LEN);
		snprintf(r->local_path, sizeof(r->local_path), "%s", samehost_path());
	}
	if (!s->eng[ENGINE_fabric])
		r->flags |= DP_RPC_F_GPU_UNREGISTERED;
	/* We stage it for our peers (stage.c): base names it, the keys are
	 * its secret. */
	if (!s->eng[ENGINE_fabric] && s->stage_id) {
		r->flags |= DP_RPC_F_OWNER_STAGES;
		r->base = s->stage_id;
	}
	r->nrails = fabric_nrails();
	for (unsigned i = 0; i < r->nrails; i++) {
		size_t len = DP_FABRIC_ADDR_MAX;

		if (fabric_rail_addr(i, r->rail[i].addr, &len)) {
			r->status = -EIO;
			return -EIO;
		}
		r->rail[i].addr_len = (uint32_t)len;
		r->rail[i].key = s->fab_keys[i];
	}
	return 0;
}

static void fill_reply(struct srv_conn *k, struct dp_rpc_lookup_reply *r)
{
	const struct dp_rpc_lookup *req = &k->in.lookup.req;
	bool same = rpc.local.fd >= 0 && !memcmp(req->host_id, samehost_id(), DP_HOST_ID_LEN);
	struct segment *s;
	int rc;

	memcpy(r->server_name, cfg.server_name, sizeof(r->server_name));
	if (strnlen(req->name, sizeof(req->name)) == sizeof(req->name) || !req->name[0] ||
	    req->flags & ~DP_RPC_Q_SAME_HOST || req->reserved ||
	    (req->flags & DP_RPC_Q_SAME_HOST && (!k->local || !same))) {
		r->status = -EINVAL;
		return;
	}
	if (k->session_port) {
		session_fill_reply(k->session_port, req->name, r);
		return;
	}
	s = export_find(req->name);
	/* Exports with fabric registrations are reachable: a region's own
	 * (local-access) registration never leaves the service. One without
	 * (GPU memory on rails without FI_HMEM) is described as such, so that
	 * transfers to it fail with -ENOTSUP rather than the open -ENOENT; a
	 * service of this host maps any export that has a word. A file
	 * region reaches no other service, of this host or not (docs/files.md,
	 * "Not done"). */
	if (!s || s->region->kind == REGION_FILE ||
	    (!s->eng[ENGINE_fabric] && !(same && s->eng[ENGINE_samehost]) && !fabric_nrails())) {
		r->status = -ENOENT;
		return;
	}
	if (rpc_segment_record(s, r))
		return;
	if (req->flags & DP_RPC_Q_SAME_HOST) {
		rc = samehost_describe(s, &r->same, k->fds, &k->nfds);
		if (rc)
			r->status = rc;
	}
}

static void srv_close(struct srv_conn *k)
{
	if (k->prev)
		k->prev->next = k->next;
	else
		rpc.conns = k->next;
	if (k->next)
		k->next->prev = k->prev;
	else
		rpc.conns_tail = k->prev;
	rpc.nconns--;
	while (k->nfds)
		close(k->fds[--k->nfds]);
	ev_del(rpc.epfd, &k->ev, "a peer RPC connection");
	close(k->ev.fd);
	k->ev.fd = -1;
	k->next = rpc.dead_conns;
	rpc.dead_conns = k;
	ev_timer_arm(rpc.deadlines, dp_now_ns());
}

/* The request is whole (or cannot become so: status set): the reply. A
 * whole request is answered only when its MAC proves the fleet key (else
 * -EACCES, and nothing of any export); every reply to a whole request
 * carries the MAC that proves the key to the asker. */
/* A whole NOTIFY request: authenticated like a lookup, then each of its
 * notifications handed to its export's owner (notif.c); the reply carries
 * the status and the MAC, nothing else. */
static void srv_notify_reply(struct srv_conn *k, int status)
{
	struct dp_rpc_lookup_reply *r = &k->out.reply.r;
	const struct dp_rpc_notify *q = &k->in.notify.n;

	if (!status) {
		/* The header's len was checked (srv_check_hdr); bytes must
		 * say the same before the MAC covers them. */
		if (q->bytes != k->in.h.len - offsetof(struct dp_rpc_notify, data))
			status = -EBADMSG;
	}
	if (!status) {
		struct auth_part in[4] = {{k->nonce, DP_AUTH_NONCE},
					  {q->nonce, DP_AUTH_NONCE},
					  {&q->count, 2 * sizeof(uint32_t)},
					  {q->data, q->bytes}};

		if (!auth_check(LABEL_NOTIFY, in, 4, q->mac)) {
			log_debug("peer RPC: notifications failed authentication (not our fleet "
				  "key)");
			status = -EACCES;
		}
	}
	if (!status && (!q->count || q->count > DP_RPC_NOTIFY_MAX))
		status = -EINVAL;
	if (!status)
		status = notif_receive(q);
	r->status = status;
	if (status != -EBADMSG && status != -EPROTONOSUPPORT) {
		struct auth_part out[3] = {
			{q->nonce, DP_AUTH_NONCE}, {k->nonce, DP_AUTH_NONCE}, {r, sizeof(*r)}};

		auth_mac(LABEL_REPLY, out, 3, k->out.reply.mac);
	}
	if (r->status)
		log_debug("peer RPC: notifications refused: %s", strerror(-r->status));
	k->state = SRV_REPLY;
	k->out_off = 0;
	k->out_len = sizeof(k->out.reply);
}

static void srv_reply(struct srv_conn *k, int status)
{
	struct dp_rpc_lookup_reply *r = &k->out.reply.r;
	const struct dp_rpc_lookup *q = &k->in.lookup.req;
	bool notify = k->in_len >= sizeof(k->in.h) && k->in.h.type == DP_RPC_NOTIFY;

	memset(&k->out, 0, sizeof(k->out));
	k->out.reply.h =
		(struct dp_rpc_hdr){.magic = DP_RPC_MAGIC,
				    .version = DP_RPC_VERSION,
				    .type = (notify ? DP_RPC_NOTIFY : DP_RPC_LOOKUP) | DP_RPC_REPLY,
				    .len = sizeof(*r) + DP_AUTH_MAC};
	memcpy(r->server_name, cfg.server_name, sizeof(r->server_name));
	if (notify) {
		srv_notify_reply(k, status);
		return;
	}
	if (!status) {
		struct auth_part in[3] = {{k->nonce, DP_AUTH_NONCE},
					  {q->nonce, DP_AUTH_NONCE},
					  {q, offsetof(struct dp_rpc_lookup, nonce)}};

		if (!auth_check(LABEL_LOOKUP, in, 3, q->mac)) {
			log_debug("peer RPC: a lookup failed authentication (not our fleet key)");
			status = -EACCES;
		}
	}
	if (status)
		r->status = status;
	else
		fill_reply(k, r);
	/* A proven asker's fabric addresses go into our address vectors,
	 * whatever the reply (efa-direct needs them to be a target). */
	if (!status && q->nrails)
		segments_peer_learn(q->server_name, q->nrails, q->rail);
	if (status != -EBADMSG && status != -EPROTONOSUPPORT) {
		struct auth_part out[3] = {
			{q->nonce, DP_AUTH_NONCE}, {k->nonce, DP_AUTH_NONCE}, {r, sizeof(*r)}};

		auth_mac(LABEL_REPLY, out, 3, k->out.reply.mac);
	}
	if (r->status)
		log_debug("peer RPC: request refused: %s", strerror(-r->status));
	k->state = SRV_REPLY;
	k->out_off = 0;
	k->out_len = sizeof(k->out.reply);
}

/* Checks a whole header: 0 (read the payload) or the status to answer. */
static int srv_check_hdr(const struct dp_rpc_hdr *h)
{
	if (h->magic != DP_RPC_MAGIC)
		return -EBADMSG;
	if (h->version != DP_RPC_VERSION)
		return -EPROTONOSUPPORT;
	if (h->type == DP_RPC_LOOKUP && h->len == sizeof(struct dp_rpc_lookup))
		return 0;
	if (h->type == DP_RPC_NOTIFY && h->len >= DP_RPC_NOTIFY_LEN_MIN &&
	    h->len <= DP_RPC_NOTIFY_LEN_MAX)
		return 0;
	return -EBADMSG;
}

/* Registers the connection for `events` unless it is already. */
static int srv_want(struct srv_conn *k, uint32_t events)
{
	if (k->events == events)
		return 0;
	k->events = events;
	return ev_mod(rpc.epfd, &k->ev, events, "a peer RPC connection");
}

/* Reads what the request still lacks. 1: whole (or answered: the reply is
 * set), 0: wait for more, -1: closed. */
static int srv_read(struct srv_conn *k)
{
	for (;;) {
		/* The header, then the payload it announced (checked). */
		size_t want = k->in_len < sizeof(k->in.h) ? sizeof(k->in.h)
							  : sizeof(k->in.h) + k->in.h.len;
		ssize_t n = recv(k->ev.fd, (char *)&k->in + k->in_len, want - k->in_len, 0);
		int rc;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0) {
			/* Gone before a whole header: nothing to answer. A
			 * payload cut short is answered (-EBADMSG). */
			if (k->in_len < sizeof(k->in.h)) {
				srv_close(k);
				return -1;
			}
			srv_reply(k, -EBADMSG);
			return 1;
		}
		k->in_len += (size_t)n;
		if (k->in_len == sizeof(k->in.h) && (rc = srv_check_hdr(&k->in.h))) {
			srv_reply(k, rc);
			return 1;
		}
		if (k->in_len > sizeof(k->in.h) && k->in_len == sizeof(k->in.h) + k->in.h.len) {
			srv_reply(k, 0);
			return 1;
		}
	}
}

/*
 * Moves a connection as far as its socket allows: the challenge out, the
 * request in (only the bytes the state needs: the header, then the payload
 * it announced), the reply out, then closed; writes only what the socket
 * takes and closes the connection once the reply is out or the peer is
 * gone.
 */
static void srv_advance(struct srv_conn *k)
{
	for (;;) {
		/* A same-host reply's fds go with its first byte. */
		if (k->state == SRV_REPLY && k->nfds && !k->out_off) {
			struct iovec iov = {&k->out, 1};
			int rc = dp_net_send_fds(k->ev.fd, &iov, 1, k->fds, (int)k->nfds,
						 MSG_DONTWAIT);

			if (rc == -EAGAIN || rc == -EWOULDBLOCK) {
				if (srv_want(k, EPOLLOUT))
					srv_close(k);
				return;
			}
			if (rc) {
				srv_close(k);
				return;
			}
			while (k->nfds)
				close(k->fds[--k->nfds]);
			k->out_off = 1;
		}
		while (k->out_off < k->out_len) {
			ssize_t n = send(k->ev.fd, (char *)&k->out + k->out_off,
					 k->out_len - k->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				if (srv_want(k, EPOLLOUT))
					srv_close(k);
				return;
			}
			if (n <= 0) {
				srv_close(k);
				return;
			}
			k->out_off += (size_t)n;
		}
		if (k->state == SRV_REPLY) {
			srv_close(k);
			return;
		}
		if (k->state == SRV_CHALLENGE) {
			k->state = SRV_REQUEST;
			k->out_off = k->out_len = 0;
		}
		if (srv_want(k, EPOLLIN)) {
			srv_close(k);
			return;
		}
		if (srv_read(k) <= 0)
			return;
	}
}

static void on_srv_event(struct ev_handler *h, uint32_t events)
{
	struct srv_conn *k = (struct srv_conn *)h;

	/* Closed earlier in this batch (evicted by an accept): freed after
	 * it, and its fd number may be someone else's already. */
	if (k->ev.fd < 0)
		return;
	if (events & EPOLLERR) {
		srv_close(k);
		return;
	}
	srv_advance(k);
}

void rpc_accept(int lfd, uint16_t session_port)
{
	/* A bounded batch per wake-up: the loop has other fds to serve. */
	for (unsigned i = 0; i < RPC_MAX_CONNS; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct srv_conn *k;

		if (fd < 0)
			return;
		/* Full: the oldest goes. A real request is answered within a
		 * loop round of its arrival, so the oldest is one that says
		 * nothing (or trickles); a flood of such cycles through its
		 * own connections, not through the lookups of others. */
		if (rpc.nconns >= RPC_MAX_CONNS) {
			log_debug("peer RPC: %u connections open; the oldest is closed",
				  rpc.nconns);
			srv_close(rpc.conns);
		}
		k = calloc(1, sizeof(*k));
		if (!k) {
			close(fd);
			return;
		}
		k->ev = (struct ev_handler){.fd = fd, .on_event = on_srv_event};
		k->local = lfd == rpc.local.fd;
		k->session_port = session_port;
		k->state = SRV_CHALLENGE;
		k->events = EPOLLIN;
		auth_nonce(k->nonce);
		k->out.challenge.h = (struct dp_rpc_hdr){.magic = DP_RPC_MAGIC,
							 .version = DP_RPC_VERSION,
							 .type = DP_RPC_CHALLENGE,
							 .len = sizeof(struct dp_rpc_challenge)};
		memcpy(k->out.challenge.c.nonce, k->nonce, DP_AUTH_NONCE);
		k->out_len = sizeof(k->out.challenge);
		k->accepted_ns = dp_now_ns();
		k->deadline_ns = k->accepted_ns + RPC_SERVE_TIMEOUT_MS * NS_PER_MS;
		ev_timer_arm(rpc.deadlines, k->deadline_ns);
		if (ev_add(rpc.epfd, &k->ev, EPOLLIN, "a peer RPC connection")) {
			close(fd);
			free(k);
			return;
		}
		k->prev = rpc.conns_tail;
		if (rpc.conns_tail)
			rpc.conns_tail->next = k;
		else
			rpc.conns = k;
		rpc.conns_tail = k;
		rpc.nconns++;
		/* The challenge goes out at once. */
		srv_advance(k);
	}
}

int rpc_reply_check(const struct dp_rpc_hdr *h, const struct dp_rpc_lookup_reply *r)
{
	if (h->magic != DP_RPC_MAGIC || h->version != DP_RPC_VERSION ||
	    h->type != (DP_RPC_LOOKUP | DP_RPC_REPLY) || h->len != sizeof(*r))
		return -EBADMSG;
	if (strnlen(r->server_name, sizeof(r->server_name)) == sizeof(r->server_name))
		return -EBADMSG;
	if (r->status > 0 || r->status < -4095)
		return -EBADMSG;
	if (r->status)
		return r->status;
	if (r->flags & DP_RPC_F_SESSION) {
		if (strnlen(r->member, sizeof(r->member)) == sizeof(r->member))
			return -EBADMSG;
		/* "Yes, a session": nothing more to check. */
		if (!r->member[0])
			return 0;
		if (r->va + r->len < r->va)
			return -EBADMSG;
	}
	if (r->access != DP_ACCESS_READ && r->access != DP_ACCESS_RW)
		return -EBADMSG;
	if (!r->len || r->base + r->len < r->base)
		return -EBADMSG;
	if (r->nrails > DP_MAX_RAILS || r->flags & ~DP_RPC_F_ALL)
		return -EBADMSG;
	/* Without rails, the export is for services of its host only (a
	 * session's member: or for its own service's clients). */
	if (!r->nrails && !(r->flags & (DP_RPC_F_SAME_HOST | DP_RPC_F_SESSION)))
		return -EBADMSG;
	if (strnlen(r->local_path, sizeof(r->local_path)) == sizeof(r->local_path))
		return -EBADMSG;
	for (unsigned i = 0; i < r->nrails; i++)
		if (!r->rail[i].addr_len || r->rail[i].addr_len > DP_FABRIC_ADDR_MAX)
			return -EBADMSG;
	return 0;
}

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
	for (struct gai_req **pp = &rpc.gais; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	rpc.ngais--;
}

/* Its lookup has ended: freed when its thread is done (on_gai_event). */
static void gai_abandon(struct gai_req *g)
{
	g->call = NULL;
}

static void call_unlink(struct call *k)
{
	if (k->prev)
		k->prev->next = k->next;
	else
		rpc.calls = k->next;
	if (k->next)
		k->next->prev = k->prev;
	rpc.ncalls--;
	while (k->nfds > 0)
		close(k->fds[--k->nfds]);
	if (k->ev.fd >= 0) {
		ev_del(rpc.epfd, &k->ev, "a peer RPC lookup");
		close(k->ev.fd);
		k->ev.fd = -1;
	}
	if (k->gai)
		gai_abandon(k->gai);
	k->gai = NULL;
	k->next = rpc.dead_calls;
	rpc.dead_calls = k;
	ev_timer_arm(rpc.deadlines, dp_now_ns());
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
	int fds[SAMEHOST_FDS], nfds = 0;

	if (!rc)
		rc = call_reply_check(k);
	if (!rc) {
		r = k->in.r;
		/* The fds are the callee's from here. */
		nfds = k->nfds;
		memcpy(fds, k->fds, sizeof(int) * (size_t)nfds);
		k->nfds = 0;
	}
	call_unlink(k);
	k->done(k->arg, rc, rc ? NULL : &r, fds, (unsigned)nfds);
}

/* How a socket error ends a lookup: a peer that went away is unreachable,
 * anything else garbled the exchange. */
static int call_err(int err)
{
	return err == ECONNRESET || err == EPIPE || err == ECONNREFUSED ? -EHOSTUNREACH : -EBADMSG;
}

/* The server's first message: a challenge of this protocol version. */
static int call_challenge_check(const struct dp_rpc_hdr *h)
{
	if (h->magic != DP_RPC_MAGIC)
		return -EBADMSG;
	if (h->version != DP_RPC_VERSION)
		return -EPROTONOSUPPORT;
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

static void call_advance(struct call *k)
{
	ssize_t n;
	int rc;

	if (k->state == CALL_CONNECTING) {
		rc = dp_net_connect_result(k->ev.fd);
		if (rc) {
			call_end(k, -EHOSTUNREACH);
			return;
		}
		k->state = CALL_CHALLENGE;
		if (ev_mod(rpc.epfd, &k->ev, EPOLLIN, "a peer RPC lookup")) {
			call_end(k, -EHOSTUNREACH);
			return;
		}
	}
	while (k->state == CALL_CHALLENGE) {
		n = recv(k->ev.fd, (char *)&k->ch + k->ch_len, sizeof(k->ch) - k->ch_len,
			 MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			call_end(k, n < 0 ? call_err(errno) : -EHOSTUNREACH);
			return;
		}
		k->ch_len += (size_t)n;
		if (k->ch_len < sizeof(k->ch))
			continue;
		if ((rc = call_challenge_check(&k->ch.h))) {
			call_end(k, rc);
			return;
		}
		call_request(k);
		k->state = CALL_SENDING;
	}
	while (k->state == CALL_SENDING) {
		n = send(k->ev.fd, (char *)&k->out + k->out_off, k->out_len - k->out_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (ev_mod(rpc.epfd, &k->ev, EPOLLOUT, "a peer RPC lookup"))
				call_end(k, -EHOSTUNREACH);
			return;
		}
		if (n <= 0) {
			call_end(k, n < 0 ? call_err(errno) : -EHOSTUNREACH);
			return;
		}
		k->out_off += (size_t)n;
		if (k->out_off < k->out_len)
			continue;
		k->state = CALL_RECEIVING;
		if (ev_mod(rpc.epfd, &k->ev, EPOLLIN, "a peer RPC lookup")) {
			call_end(k, -EHOSTUNREACH);
			return;
		}
	}
	for (;;) {
		size_t want = k->in_len < sizeof(k->in.h) ? sizeof(k->in.h) : sizeof(k->in);

		if (k->local) {
			/* A same-host reply: fds may come with its bytes. */
			int got[SAMEHOST_FDS], ngot = 0;

			n = dp_net_recv_fds(k->ev.fd, (char *)&k->in + k->in_len, want - k->in_len,
					    got, SAMEHOST_FDS, &ngot, MSG_DONTWAIT);
			if (n < 0) {
				errno = (int)-n;
				n = -1;
			}
			for (int i = 0; i < ngot; i++)
				if (k->nfds < SAMEHOST_FDS)
					k->fds[k->nfds++] = got[i];
				else
					close(got[i]);
		} else {
			n = recv(k->ev.fd, (char *)&k->in + k->in_len, want - k->in_len,
				 MSG_DONTWAIT);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			/* Closed (or reset) before the whole reply. */
			call_end(k, n < 0 ? call_err(errno) : -EHOSTUNREACH);
			return;
		}
		k->in_len += (size_t)n;
		if (k->in_len == sizeof(k->in.h) && k->in.h.len != sizeof(k->in.r) + DP_AUTH_MAC) {
			call_end(k, -EBADMSG);
			return;
		}
		if (k->in_len == sizeof(k->in)) {
			call_end(k, 0);
			return;
		}
	}
}

static void on_call_event(struct ev_handler *h, uint32_t events)
{
	struct call *k = (struct call *)h;

	if (k->ev.fd < 0)
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
	k->ev.fd = fd;
	k->state = rc ? CALL_CONNECTING : CALL_CHALLENGE;
	/* Connecting: wait until writable. Connected (loopback may be at
	 * once): wait for the challenge. Either way `done` never runs inside
	 * this call. */
	if (ev_add(rpc.epfd, &k->ev, rc ? EPOLLOUT : EPOLLIN, "a peer RPC lookup")) {
		close(fd);
		k->ev.fd = -1;
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

	if (rpc.gai_ev.fd < 0)
		return -EHOSTUNREACH;
	/* Resolutions still running for lookups that ended count too. */
	if (rpc.ngais >= RPC_MAX_RESOLVING)
		return -EAGAIN;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	snprintf(g->host, sizeof(g->host), "%s", host);
	snprintf(g->port, sizeof(g->port), "%s", port);
	g->efd = rpc.gai_ev.fd;
	g->call = k;
	/* Listed before the thread can finish: on_gai_event unlinks it. */
	g->next = rpc.gais;
	rpc.gais = g;
	rpc.ngais++;
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

/* A lookup of `name` on `peer`, not yet connected nor listed (on the
 * same-host socket when `local`). */
static struct call *call_new(const char *peer, const char *name, bool local, rpc_done_fn done,
			     void *arg, const struct dp_rpc_notify *notify)
{
	struct call *k = calloc(1, sizeof(*k));

	if (!k)
		return NULL;
	k->ev = (struct ev_handler){.fd = -1, .on_event = on_call_event};
	k->deadline_ns = dp_now_ns() + DP_RPC_TIMEOUT_MS * NS_PER_MS;
	ev_timer_arm(rpc.deadlines, k->deadline_ns);
	k->done = done;
	k->arg = arg;
	snprintf(k->peer, sizeof(k->peer), "%s", peer);
	k->local = local;
	if (notify) {
		uint32_t len = (uint32_t)offsetof(struct dp_rpc_notify, data) + notify->bytes;

		k->out.notify.h = (struct dp_rpc_hdr){.magic = DP_RPC_MAGIC,
						      .version = DP_RPC_VERSION,
						      .type = DP_RPC_NOTIFY,
						      .len = len};
		memcpy(&k->out.notify.n, notify, len);
		k->out_len = sizeof(k->out.notify.h) + len;
		return k;
	}
	k->out.lookup.h = (struct dp_rpc_hdr){.magic = DP_RPC_MAGIC,
					      .version = DP_RPC_VERSION,
					      .type = DP_RPC_LOOKUP,
					      .len = sizeof(k->out.lookup.req)};
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
	return k;
}

static void call_list(struct call *k)
{
	k->next = rpc.calls;
	if (rpc.calls)
		rpc.calls->prev = k;
	rpc.calls = k;
	rpc.ncalls++;
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
	if (rpc.ncalls >= RPC_MAX_CALLS)
		return -EAGAIN;
	k = call_new(peer, name, false, done, arg, notify);
	if (!k)
		return -ENOMEM;
	/* A literal address costs nothing; a name is resolved without
	 * waiting, and the deadline counts from now. */
	sa.sin_port = htons((uint16_t)atoi(port));
	if (inet_pton(AF_INET, host, &sa.sin_addr) == 1)
		rc = call_connect(k, (const struct sockaddr *)&sa, sizeof(sa));
	else
		rc = call_resolve(k, host, port);
	if (rc) {
		free(k);
		return rc;
	}
	call_list(k);
	return 0;
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
	if (rpc.ncalls >= RPC_MAX_CALLS)
		return -EAGAIN;
	k = call_new(peer, name, true, done, arg, NULL);
	if (!k)
		return -ENOMEM;
	rc = call_connect(k, (const struct sockaddr *)&sa, sizeof(sa));
	if (rc) {
		free(k);
		return rc;
	}
	call_list(k);
	return 0;
}

/* ---- the loop's side ---- */

static void on_local_listen(struct ev_handler *h, uint32_t events)
{
	(void)events;
	rpc_accept(h->fd, 0);
}

/* The same-host socket: any local user may connect (the lookup still has to
 * prove the fleet key), so it is 0666. A stale socket of a dead service is
 * replaced; anything else at the path is left alone. */
static int local_listen(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd;

	if (!path[0] || strlen(path) >= sizeof(sa.sun_path))
		return -EINVAL;
	strcpy(sa.sun_path, path);
	if (!lstat(path, &st)) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0 ||
	    listen(fd, 64) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

void rpc_start(int epfd, struct ev_timer *deadlines)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	rpc.epfd = epfd;
	rpc.deadlines = deadlines;
	samehost_start(epfd);
	/* Never closed: a resolution still running at exit may write it. */
	if (fd < 0) {
		log_warn("peer RPC: eventfd: %s; peers given by host name are unreachable",
			 strerror(errno));
	} else {
		rpc.gai_ev = (struct ev_handler){.fd = fd, .on_event = on_gai_event};
		if (ev_add(epfd, &rpc.gai_ev, EPOLLIN, "the peer RPC resolver"))
			rpc.gai_ev.fd = -1; /* leaks the eventfd: nothing else may write */
	}
	if (!samehost_enabled())
		return;
	fd = local_listen(samehost_path());
	if (fd < 0) {
		log_warn("same host: off: same-host socket %s: %s", samehost_path(), strerror(-fd));
		return;
	}
	rpc.local = (struct ev_handler){.fd = fd, .on_event = on_local_listen};
	if (ev_add(epfd, &rpc.local, EPOLLIN, "the same-host peer socket")) {
		close(fd);
		unlink(samehost_path());
		rpc.local.fd = -1;
	}
}

int rpc_timeout_ms(void)
{
	uint64_t next = UINT64_MAX, now;

	for (struct srv_conn *k = rpc.conns; k; k = k->next)
		if (k->deadline_ns < next)
			next = k->deadline_ns;
	for (struct call *k = rpc.calls; k; k = k->next)
		if (k->deadline_ns < next)
			next = k->deadline_ns;
	if (next == UINT64_MAX)
		return -1;
	now = dp_now_ns();
	/* Rounded up: woken before the deadline, the sweep would find
	 * nothing due and the loop would spin. */
	return next <= now ? 0 : (int)((next - now + NS_PER_MS - 1) / NS_PER_MS);
}

static void free_dead(void)
{
	while (rpc.dead_conns) {
		struct srv_conn *k = rpc.dead_conns;

		rpc.dead_conns = k->next;
		free(k);
	}
	while (rpc.dead_calls) {
		struct call *k = rpc.dead_calls;

		rpc.dead_calls = k->next;
		free(k);
	}
}

void rpc_sweep(void)
{
	uint64_t now = dp_now_ns();
	struct srv_conn *k, *knext;
	struct call *c, *cnext;

	for (k = rpc.conns; k; k = knext) {
		knext = k->next;
		if (k->deadline_ns <= now) {
			log_debug("peer RPC: a connection idle or slow for %u ms is closed",
				  RPC_SERVE_TIMEOUT_MS);
			srv_close(k);
		}
	}
	/* A lookup's callback may start another lookup (at the head of the
	 * list); the deadlines are checked on a snapshot of the due ones. */
	for (;;) {
		for (c = rpc.calls; c; c = cnext) {
			cnext = c->next;
			if (c->deadline_ns <= now)
				break;
		}
		if (!c)
			break;
		call_end(c, -ETIMEDOUT);
	}
	free_dead();
}

void rpc_shutdown(void)
{
	if (rpc.local.fd >= 0) {
		ev_del(rpc.epfd, &rpc.local, "the same-host peer socket");
		close(rpc.local.fd);
		unlink(samehost_path());
		rpc.local.fd = -1;
	}
	while (rpc.conns)
		srv_close(rpc.conns);
	while (rpc.calls)
		call_end(rpc.calls, -ECANCELED);
	free_dead();
}
