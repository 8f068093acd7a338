/* SPDX-License-Identifier: MIT */
/*
 * rpc.c - the peer protocol over TCP (see rpc.h), event-driven on the
 * control thread's epoll set: nothing here waits on the network. This
 * file holds what both ends share (rpc_internal.h): the framing, the one
 * step that moves a message as far as its socket takes, the lists of
 * sockets with deadlines, and the loop's side of the layer (rpc_start,
 * rpc_timeout_ms, rpc_sweep, rpc_shutdown). The ends are rpc_server.c
 * (the connections this service serves) and rpc_client.c (the lookups
 * and notifications it sends, and the resolver thread of host names).
 *
 * Deadlines are kept by rpc_sweep(), run by a timer of the loop that is
 * armed for each socket's deadline as it is listed; sockets closed during
 * a batch are freed there too, the timer armed for after the batch (an
 * event of the same batch may still point at one).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "net.h"
#include "rpc_internal.h"

int rpc_epfd = -1;
static struct ev_timer *deadlines; /* the loop's timer that runs rpc_sweep() */
struct rpc_socks rpc_conns = RPC_SOCKS_INIT(rpc_conns, "a peer RPC connection");
struct rpc_socks rpc_calls = RPC_SOCKS_INIT(rpc_calls, "a peer RPC lookup");

int rpc_hdr_check(const struct dp_rpc_hdr *h)
{
	if (h->magic != DP_RPC_MAGIC)
		return -EBADMSG;
	if (h->version != DP_RPC_VERSION)
		return -EPROTONOSUPPORT;
	return 0;
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
	if (r->flags & ~DP_RPC_F_ALL)
		return -EBADMSG;
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
	if (r->nrails > DP_MAX_RAILS)
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

/* ---- moving a message ---- */

void rpc_fds_close(struct rpc_fds *f)
{
	while (f->n)
		close(f->fd[--f->n]);
}

/* A same-host reply's first byte, its fds with it: 1 or -errno. */
static ssize_t send_with_fds(int fd, const char *p, struct rpc_fds *fds)
{
	struct iovec iov = {(void *)p, 1};
	int rc = dp_net_send_fds(fd, &iov, 1, fds->fd, (int)fds->n, MSG_DONTWAIT);

	if (rc)
		return rc;
	rpc_fds_close(fds);
	return 1;
}

/* Bytes of a same-host reply, and the fds that come with them: the count
 * or -errno. */
static ssize_t recv_with_fds(int fd, char *p, size_t len, struct rpc_fds *fds)
{
	int got[SAMEHOST_FDS], ngot = 0;
	ssize_t n = dp_net_recv_fds(fd, p, len, got, SAMEHOST_FDS, &ngot, MSG_DONTWAIT);

	for (int i = 0; i < ngot; i++)
		if (fds->n < SAMEHOST_FDS)
			fds->fd[fds->n++] = got[i];
		else
			close(got[i]);
	return n;
}

/* One send or receive of what is left of buf[0, len): bytes or -errno. */
static ssize_t step_once(int fd, enum rpc_dir dir, char *buf, size_t off, size_t len,
			 struct rpc_fds *fds)
{
	ssize_t n;

	if (dir == RPC_SEND && fds && fds->n && !off)
		return send_with_fds(fd, buf, fds);
	if (dir == RPC_RECV && fds)
		return recv_with_fds(fd, buf + off, len - off, fds);
	if (dir == RPC_SEND)
		n = send(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
	else
		n = recv(fd, buf + off, len - off, MSG_DONTWAIT);
	return n < 0 ? -errno : n;
}

int rpc_step(int fd, enum rpc_dir dir, void *buf, size_t *off, size_t len, struct rpc_fds *fds)
{
	while (*off < len) {
		ssize_t n = step_once(fd, dir, buf, *off, len, fds);

		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return 0;
		if (n <= 0)
			return n ? (int)n : -ECONNRESET;
		*off += (size_t)n;
	}
	return 1;
}

/* ---- sockets on the loop ---- */

void rpc_socks_push(struct rpc_socks *l, struct rpc_sock *s)
{
	ev_timer_arm(deadlines, s->deadline_ns);
	s->prev = &l->ends;
	s->next = l->ends.next;
	s->next->prev = s;
	l->ends.next = s;
	l->n++;
}

void rpc_socks_close(struct rpc_socks *l, struct rpc_sock *s)
{
	s->prev->next = s->next;
	s->next->prev = s->prev;
	l->n--;
	rpc_fds_close(&s->fds);
	if (s->ev.fd >= 0) {
		ev_del(rpc_epfd, &s->ev, l->what);
		close(s->ev.fd);
		s->ev.fd = -1;
	}
	s->next = l->dead;
	l->dead = s;
	ev_timer_arm(deadlines, dp_now_ns());
}

static uint64_t socks_next_deadline(const struct rpc_socks *l, uint64_t next)
{
	for (const struct rpc_sock *s = l->ends.next; s != &l->ends; s = s->next)
		if (s->deadline_ns < next)
			next = s->deadline_ns;
	return next;
}

static void socks_free_dead(struct rpc_socks *l)
{
	while (l->dead) {
		struct rpc_sock *s = l->dead;

		l->dead = s->next;
		free(s);
	}
}

/* ---- the loop's side ---- */

void rpc_start(int epfd, struct ev_timer *sweep)
{
	rpc_epfd = epfd;
	deadlines = sweep;
	samehost_start(epfd);
	rpc_client_start();
	rpc_server_start();
}

int rpc_timeout_ms(void)
{
	uint64_t next = socks_next_deadline(&rpc_conns, UINT64_MAX), now;

	next = socks_next_deadline(&rpc_calls, next);

	if (next == UINT64_MAX)
		return -1;
	now = dp_now_ns();
	/* Rounded up: woken before the deadline, the sweep would find
	 * nothing due and the loop would spin. */
	return next <= now ? 0 : (int)((next - now + NS_PER_MS - 1) / NS_PER_MS);
}

void rpc_sweep(void)
{
	uint64_t now = dp_now_ns();

	rpc_server_expire(now);
	rpc_client_expire(now);
	socks_free_dead(&rpc_conns);
	socks_free_dead(&rpc_calls);
}

void rpc_shutdown(void)
{
	rpc_server_shutdown();
	rpc_client_shutdown();
	socks_free_dead(&rpc_conns);
	socks_free_dead(&rpc_calls);
}
