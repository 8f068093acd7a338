/* SPDX-License-Identifier: MIT */
/*
 * net.h - the one messaging and network layer of the tree (Redis's anet.c
 * is the model): packets with fds over a SOCK_SEQPACKET Unix socket
 * (SCM_RIGHTS), whole buffers over a stream socket before a deadline, a
 * connect with a deadline, fd flags.
 *
 * Internal: compiled into the service and into libclient, but the names
 * (dp_net_*) are not in libclient/libdataplane.map, so libdataplane.so does
 * not export them. No logging, no service state: every call returns 0 (or
 * a count, or an fd) or -errno, and leaves no fd of its making open on
 * error. Deadlines are CLOCK_MONOTONIC nanoseconds (clock.h: dp_now_ns()).
 */
#ifndef DP_COMMON_NET_H
#define DP_COMMON_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The most fds one packet carries either way: a VMM GPU registration's 32
 * pieces (dp_proto.h), a same-host reply's 3 + 32 (samehost.h). */
#define DP_NET_MAX_FDS 40

/*
 * Sends one packet: the `iovcnt` buffers of `iov`, and `nfds` fds (0 ..
 * DP_NET_MAX_FDS) as SCM_RIGHTS. `flags` are added to MSG_NOSIGNAL (e.g.
 * MSG_DONTWAIT). Retries EINTR. 0, or -errno (-EINVAL too many fds).
 */
int dp_net_send_fds(int fd, const struct iovec *iov, int iovcnt, const int *fds, int nfds,
		    int flags);

/*
 * Receives one packet into buf[0..len) and up to `max_fds` (<=
 * DP_NET_MAX_FDS) fds into fds[], their count in *nfds; received fds are
 * close-on-exec. `flags` are added to MSG_CMSG_CLOEXEC (e.g. MSG_DONTWAIT).
 * Retries EINTR. Returns the packet's size (0: the peer closed, or a 0-byte
 * packet, which reads the same: any fds it carried are closed), or
 * -EMSGSIZE when the packet was longer than `len` (MSG_TRUNC) or came
 * with more than `max_fds` fds (MSG_CTRUNC), or -errno (-EAGAIN). On every
 * error, *nfds is 0 and each fd that did arrive is closed.
 */
ssize_t dp_net_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds, int flags);

/* Waits for `events` (POLLIN, POLLOUT) on fd until the deadline: 0 or
 * -ETIMEDOUT. One limit for a whole exchange, so a peer that trickles
 * bytes gets no more time than one that sends nothing. */
int dp_net_wait(int fd, short events, uint64_t deadline_ns);

/* Reads exactly `len` bytes before the deadline: 0, -ETIMEDOUT,
 * -ECONNRESET (the peer closed first) or -errno. */
int dp_net_read_full(int fd, void *buf, size_t len, uint64_t deadline_ns);
/* Writes exactly `len` bytes before the deadline (no SIGPIPE): 0,
 * -ETIMEDOUT or -errno. */
int dp_net_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ns);

/* A new socket, close-on-exec and non-blocking: the fd or -errno. */
int dp_net_socket(int domain, int type);
/* Starts a connect on a non-blocking socket: 0 connected, -EINPROGRESS
 * (wait for POLLOUT, then dp_net_connect_result()), or -errno. */
int dp_net_connect_start(int fd, const struct sockaddr *sa, socklen_t salen);
/* How a connect that was in progress ended (SO_ERROR): 0 or -errno. */
int dp_net_connect_result(int fd);
/* A whole connect before the deadline: 0, -ETIMEDOUT, or -errno of the
 * connect (-ECONNREFUSED, ...). */
int dp_net_connect(int fd, const struct sockaddr *sa, socklen_t salen, uint64_t deadline_ns);

/* O_NONBLOCK on or off, FD_CLOEXEC on: 0 or -errno. */
int dp_net_set_nonblock(int fd, bool on);
int dp_net_set_cloexec(int fd);

#endif /* DP_COMMON_NET_H */
