/* SPDX-License-Identifier: MIT */
/*
 * rpc_server.c - the server end of the peer protocol (rpc.h): the RPC
 * port, an engine session's port (session.h) and the same-host socket
 * (samehost.h) are served here, on the control thread's epoll set.
 *
 * Each accepted connection is a struct srv_conn: a socket on the loop
 * with a deadline (struct rpc_sock, RPC_SERVE_TIMEOUT_MS for the whole
 * exchange) and its buffers. It walks SRV_CHALLENGE -> SRV_REQUEST ->
 * SRV_REPLY -> closed, reading and writing only what the socket takes
 * (rpc_step(); EPOLLOUT only while something is left to write). At most
 * RPC_MAX_CONNS are open; one more evicts the oldest.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "notif.h"
#include "rpc_internal.h"
#include "segments.h"
#include "session.h"

enum srv_state {
	SRV_CHALLENGE, /* writing the challenge */
	SRV_REQUEST,   /* reading the request (header, then payload) */
	SRV_REPLY,     /* writing the reply (s.fds with its first byte); closed once it is out */
};

struct srv_conn {
	struct rpc_sock s; /* first: on rpc_conns, freed through it */
	enum srv_state state;
	uint32_t events;	      /* what s.ev is registered for */
	uint8_t nonce[DP_AUTH_NONCE]; /* the challenge's */
	bool local;		      /* on the same-host socket */
	uint16_t session_port;	      /* on an engine session's port; 0: the RPC port */
	size_t in_len;		      /* bytes of `in` read */
	union rpc_req in;
	size_t out_off, out_len; /* bytes of `out` written, to write */
	union {
		struct challenge_msg challenge;
		struct reply_msg reply;
	} out;
};

/* The same-host listener (samehost.h). */
static struct ev_handler local = {.fd = -1};

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
	if (local.fd >= 0) {
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
	bool same = local.fd >= 0 && !memcmp(req->host_id, samehost_id(), DP_HOST_ID_LEN);
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
		rc = samehost_describe(s, &r->same, k->s.fds.fd, &k->s.fds.n);
		if (rc)
			r->status = rc;
	}
}

static void srv_close(struct srv_conn *k)
{
	rpc_socks_close(&rpc_conns, &k->s);
}

/* The reply is set: its MAC, unless the request was not of this protocol
 * (then it brought no nonce to answer), and out it goes. */
static void srv_reply_out(struct srv_conn *k, const uint8_t *req_nonce, int status,
			  const char *what)
{
	struct dp_rpc_lookup_reply *r = &k->out.reply.r;

	if (status != -EBADMSG && status != -EPROTONOSUPPORT) {
		struct auth_part out[3] = {
			{req_nonce, DP_AUTH_NONCE}, {k->nonce, DP_AUTH_NONCE}, {r, sizeof(*r)}};

		auth_mac(LABEL_REPLY, out, 3, k->out.reply.mac);
	}
	if (r->status)
		log_debug("peer RPC: %s refused: %s", what, strerror(-r->status));
	k->state = SRV_REPLY;
	k->out_off = 0;
	k->out_len = sizeof(k->out.reply);
}

/* A whole NOTIFY request: authenticated like a lookup, then each of its
 * notifications handed to its export's owner (notif.c); the reply carries
 * the status and the MAC, nothing else. */
static void srv_notify_reply(struct srv_conn *k, int status)
{
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
	k->out.reply.r.status = status;
	srv_reply_out(k, q->nonce, status, "notifications");
}

/* The request is whole (or cannot become so: status set): the reply. A
 * whole request is answered only when its MAC proves the fleet key (else
 * -EACCES, and nothing of any export); every reply to a whole request
 * carries the MAC that proves the key to the asker. */
static void srv_reply(struct srv_conn *k, int status)
{
	struct dp_rpc_lookup_reply *r = &k->out.reply.r;
	const struct dp_rpc_lookup *q = &k->in.lookup.req;
	bool notify = k->in_len >= sizeof(k->in.h) && k->in.h.type == DP_RPC_NOTIFY;

	memset(&k->out, 0, sizeof(k->out));
	k->out.reply.h = rpc_hdr((notify ? DP_RPC_NOTIFY : DP_RPC_LOOKUP) | DP_RPC_REPLY,
				 sizeof(*r) + DP_AUTH_MAC);
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
	srv_reply_out(k, q->nonce, status, "request");
}

/* Checks a whole header: 0 (read the payload) or the status to answer. */
static int srv_check_hdr(const struct dp_rpc_hdr *h)
{
	int rc = rpc_hdr_check(h);

	if (rc)
		return rc;
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
	return ev_mod(rpc_epfd, &k->s.ev, events, rpc_conns.what);
}

/* Reads what the request still lacks: the header, then the payload it
 * announced (checked). 1: whole (or answered: the reply is set), 0: wait
 * for more, -1: closed. */
static int srv_read(struct srv_conn *k)
{
	int fd = k->s.ev.fd;
	int rc = rpc_step(fd, RPC_RECV, &k->in, &k->in_len, sizeof(k->in.h), NULL);

	if (rc == 1) {
		rc = srv_check_hdr(&k->in.h);
		if (rc) {
			srv_reply(k, rc);
			return 1;
		}
		rc = rpc_step(fd, RPC_RECV, &k->in, &k->in_len, sizeof(k->in.h) + k->in.h.len,
			      NULL);
	}
	if (rc >= 0) {
		if (rc)
			srv_reply(k, 0);
		return rc;
	}
	/* Gone before a whole header: nothing to answer. A payload cut
	 * short is answered (-EBADMSG). */
	if (k->in_len < sizeof(k->in.h)) {
		srv_close(k);
		return -1;
	}
	srv_reply(k, -EBADMSG);
	return 1;
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
		int rc =
			rpc_step(k->s.ev.fd, RPC_SEND, &k->out, &k->out_off, k->out_len, &k->s.fds);

		if (!rc) {
			if (srv_want(k, EPOLLOUT))
				srv_close(k);
			return;
		}
		if (rc < 0 || k->state == SRV_REPLY) {
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
	if (k->s.ev.fd < 0)
		return;
	if (events & EPOLLERR) {
		srv_close(k);
		return;
	}
	srv_advance(k);
}

/* A connection accepted on `fd`, its challenge ready and registered for
 * EPOLLIN, or NULL (fd closed). */
static struct srv_conn *srv_open(int fd, bool on_local, uint16_t session_port)
{
	struct srv_conn *k = calloc(1, sizeof(*k));

	if (!k) {
		close(fd);
		return NULL;
	}
	k->s.ev = (struct ev_handler){.fd = fd, .on_event = on_srv_event};
	k->s.deadline_ns = dp_now_ns() + RPC_SERVE_TIMEOUT_MS * NS_PER_MS;
	k->local = on_local;
	k->session_port = session_port;
	k->state = SRV_CHALLENGE;
	k->events = EPOLLIN;
	auth_nonce(k->nonce);
	k->out.challenge.h = rpc_hdr(DP_RPC_CHALLENGE, sizeof(struct dp_rpc_challenge));
	memcpy(k->out.challenge.c.nonce, k->nonce, DP_AUTH_NONCE);
	k->out_len = sizeof(k->out.challenge);
	if (ev_add(rpc_epfd, &k->s.ev, EPOLLIN, rpc_conns.what)) {
		close(fd);
		free(k);
		return NULL;
	}
	return k;
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
		if (rpc_conns.n >= RPC_MAX_CONNS) {
			log_debug("peer RPC: %u connections open; the oldest is closed",
				  rpc_conns.n);
			srv_close((struct srv_conn *)rpc_conns.ends.prev);
		}
		k = srv_open(fd, lfd == local.fd, session_port);
		if (!k)
			return;
		rpc_socks_push(&rpc_conns, &k->s);
		/* The challenge goes out at once. */
		srv_advance(k);
	}
}

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

void rpc_server_start(void)
{
	int fd;

	if (!samehost_enabled())
		return;
	fd = local_listen(samehost_path());
	if (fd < 0) {
		log_warn("same host: off: same-host socket %s: %s", samehost_path(), strerror(-fd));
		return;
	}
	local = (struct ev_handler){.fd = fd, .on_event = on_local_listen};
	if (ev_add(rpc_epfd, &local, EPOLLIN, "the same-host peer socket")) {
		close(fd);
		unlink(samehost_path());
		local.fd = -1;
	}
}

void rpc_server_expire(uint64_t now)
{
	struct rpc_sock *s, *next;

	for (s = rpc_conns.ends.next; s != &rpc_conns.ends; s = next) {
		next = s->next;
		if (s->deadline_ns <= now) {
			log_debug("peer RPC: a connection idle or slow for %u ms is closed",
				  RPC_SERVE_TIMEOUT_MS);
			srv_close((struct srv_conn *)s);
		}
	}
}

void rpc_server_shutdown(void)
{
	if (local.fd >= 0) {
		ev_del(rpc_epfd, &local, "the same-host peer socket");
		close(local.fd);
		unlink(samehost_path());
		local.fd = -1;
	}
	while (rpc_conns.n)
		srv_close((struct srv_conn *)rpc_conns.ends.next);
}
