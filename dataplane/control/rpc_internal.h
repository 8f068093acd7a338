/* SPDX-License-Identifier: MIT */
/*
 * rpc_internal.h - what the two ends of the peer protocol share, not for
 * inclusion outside rpc.c, rpc_server.c and rpc_client.c (rpc.h is the
 * RPC layer's interface to the rest of the service): the messages as
 * they travel, the one step that moves a message over a non-blocking
 * socket, and the socket on the loop that a served connection and a
 * lookup both are.
 */
#ifndef DP_RPC_INTERNAL_H
#define DP_RPC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "rpc.h"

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

/* The header of a message of this protocol version. */
static inline struct dp_rpc_hdr rpc_hdr(uint16_t type, uint32_t len)
{
	return (struct dp_rpc_hdr){
		.magic = DP_RPC_MAGIC, .version = DP_RPC_VERSION, .type = type, .len = len};
}

/* A request's or a challenge's header, before its type and length: 0,
 * -EBADMSG (not this protocol) or -EPROTONOSUPPORT (another version). */
int rpc_hdr_check(const struct dp_rpc_hdr *h);

/* The fds that travel with a same-host reply (samehost.h). */
struct rpc_fds {
	int fd[SAMEHOST_FDS];
	unsigned n;
};
void rpc_fds_close(struct rpc_fds *f);

enum rpc_dir { RPC_RECV, RPC_SEND };

/*
 * Moves bytes [*off, len) of `buf` over the non-blocking socket `fd`, as
 * many as the socket takes now: 1 all of them (*off == len), 0 no more
 * for now (wait for EPOLLIN or EPOLLOUT), or -errno (-ECONNRESET: the peer
 * closed). With `fds`: sent with the first byte (then closed: the peer
 * has its own), or gathered from what arrives (those beyond SAMEHOST_FDS
 * closed).
 */
int rpc_step(int fd, enum rpc_dir dir, void *buf, size_t *off, size_t len, struct rpc_fds *fds);

/*
 * What a served connection (rpc_server.c) and a lookup (rpc_client.c)
 * both start with: a socket on the loop's epoll set (fd -1 while a lookup
 * resolves its peer), its deadline, the fds of its reply, and its place
 * on a list. Closed, it waits on the list's dead ones until rpc_sweep(),
 * as an event of the same batch may still point at it; then it is freed
 * whole (struct rpc_sock is the first member of both).
 */
struct rpc_sock {
	struct ev_handler ev; /* first: the loop hands it back */
	uint64_t deadline_ns;
	struct rpc_fds fds;
	struct rpc_sock *prev, *next;
};

/* A circular list: `ends` is no socket, only where it starts and ends
 * (next: the newest, prev: the oldest; itself when the list is empty),
 * so that no link is a special case. */
struct rpc_socks {
	struct rpc_sock ends;
	unsigned n;
	struct rpc_sock *dead; /* closed during this batch */
	const char *what;      /* for the event loop's logs */
};
#define RPC_SOCKS_INIT(l, what_)                                                                   \
	{                                                                                          \
		.ends = {.prev = &(l).ends, .next = &(l).ends}, .what = (what_)                    \
	}

/* The control loop's epoll set, and the sockets on it. */
extern int rpc_epfd;
extern struct rpc_socks rpc_conns, rpc_calls;

/* `s` as the newest of `l`. */
void rpc_socks_push(struct rpc_socks *l, struct rpc_sock *s);
/* Off the list, its fds and socket closed, onto the dead ones. */
void rpc_socks_close(struct rpc_socks *l, struct rpc_sock *s);

/* Each end's part of rpc_start(), rpc_sweep() (ends what is past its
 * deadline) and rpc_shutdown(). */
void rpc_server_start(void);
void rpc_server_expire(uint64_t now);
void rpc_server_shutdown(void);
void rpc_client_start(void);
void rpc_client_expire(uint64_t now);
void rpc_client_shutdown(void);

#endif /* DP_RPC_INTERNAL_H */
