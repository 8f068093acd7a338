/* SPDX-License-Identifier: MIT */
/*
 * net.c - the one messaging and network layer (net.h): SCM_RIGHTS packets,
 * whole reads and writes with a deadline, connect with a deadline, fd
 * flags. Shared by the service (control socket, peer RPC, directory) and
 * libclient; see net.h for the contract of each call.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "net.h"

/* Room for DP_NET_MAX_FDS fds in one control message, aligned for it. */
union fd_cmsg {
	char buf[CMSG_SPACE(sizeof(int) * DP_NET_MAX_FDS)];
	struct cmsghdr align;
};

int dp_net_send_fds(int fd, const struct iovec *iov, int iovcnt, const int *fds, int nfds,
		    int flags)
{
	struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
	union fd_cmsg u;

	if (nfds < 0 || nfds > DP_NET_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *cm;

		memset(&u, 0, sizeof(u));
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	while (sendmsg(fd, &msg, flags | MSG_NOSIGNAL) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

static void close_all(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* Takes every SCM_RIGHTS fd of a received message into fds[]; false when
 * there were more than max_fds (all of them are closed then). */
static bool take_fds(struct msghdr *msg, int *fds, int max_fds, int *nfds)
{
	bool fit = true;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		size_t k;
		int *in;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		in = (int *)CMSG_DATA(cm);
		for (size_t i = 0; i < k; i++) {
			int f;

			memcpy(&f, in + i, sizeof(f));
			if (*nfds < max_fds) {
				fds[(*nfds)++] = f;
			} else {
				close(f);
				fit = false;
			}
		}
	}
	if (!fit) {
		close_all(fds, *nfds);
		*nfds = 0;
	}
	return fit;
}

ssize_t dp_net_recv_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *nfds, int flags)
{
	struct iovec iov = {buf, len};
	union fd_cmsg u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf};
	ssize_t n;

	*nfds = 0;
	if (max_fds < 0 || max_fds > DP_NET_MAX_FDS)
		return -EINVAL;
	msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)max_fds);
	do
		n = recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* The fds that did arrive are ours to close, whatever else failed:
	 * CMSG_SPACE's alignment may leave room for one more than asked. */
	if (!take_fds(&msg, fds, max_fds, nfds) || msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		close_all(fds, *nfds);
		*nfds = 0;
		return -EMSGSIZE;
	}
	/* A 0-byte packet reads like EOF, and callers take it as one: the
	 * fds it carried must not outlive it (docs/reliability.md). */
	if (n == 0 && *nfds) {
		close_all(fds, *nfds);
		*nfds = 0;
	}
	return n;
}

int dp_net_wait(int fd, short events, uint64_t deadline_ns)
{
	struct pollfd pfd = {.fd = fd, .events = events};

	for (;;) {
		uint64_t t = dp_now_ns();
		int k;

		if (t >= deadline_ns)
			return -ETIMEDOUT;
		k = poll(&pfd, 1, (int)((deadline_ns - t + 999999) / 1000000));
		if (k > 0)
			return 0;
		if (k == 0 || errno != EINTR)
			return -ETIMEDOUT;
	}
}

int dp_net_read_full(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n;

		if (dp_net_wait(fd, POLLIN, deadline_ns))
			return -ETIMEDOUT;
		n = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	return 0;
}

int dp_net_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n;

		if (dp_net_wait(fd, POLLOUT, deadline_ns))
			return -ETIMEDOUT;
		n = send(fd, (const char *)buf + put, len - put, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		put += (size_t)n;
	}
	return 0;
}

int dp_net_socket(int domain, int type)
{
	int fd = socket(domain, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	return fd < 0 ? -errno : fd;
}

int dp_net_connect_start(int fd, const struct sockaddr *sa, socklen_t salen)
{
	if (connect(fd, sa, salen) == 0)
		return 0;
	return errno == EINPROGRESS ? -EINPROGRESS : -errno;
}

int dp_net_connect_result(int fd)
{
	socklen_t len = sizeof(int);
	int err = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	return -err;
}

int dp_net_connect(int fd, const struct sockaddr *sa, socklen_t salen, uint64_t deadline_ns)
{
	int rc = dp_net_connect_start(fd, sa, salen);

	if (rc != -EINPROGRESS)
		return rc;
	if (dp_net_wait(fd, POLLOUT, deadline_ns))
		return -ETIMEDOUT;
	return dp_net_connect_result(fd);
}

int dp_net_set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
	return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

int dp_net_set_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFD);

	if (fl < 0)
		return -errno;
	return fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0 ? -errno : 0;
}
