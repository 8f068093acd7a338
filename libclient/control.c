/* SPDX-License-Identifier: MIT */
/*
 * control.c - libclient's control channel: the SEQPACKET socket to the
 * service, one request and one reply at a time (dp__rpc and its variants,
 * for every control call of the other files), the service's liveness as
 * the socket shows it, and the client's life: dp_connect (HELLO), dp_close.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_internal.h"
#include "clock.h"
#include "net.h"
#include "sockpath.h"

#define RPC_TIMEOUT_MS 10000 /* a control call's reply; $DP_CTL_TIMEOUT_MS overrides it */

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* Whether @seq is that of an earlier request. Calls are made one at a
 * time, so its call has returned: with its reply, after which no other
 * comes, or having given up waiting (-ETIMEDOUT), and this is that reply,
 * late. It belongs to nobody. The service answers in order, except calls it
 * leaves pending (a peer's or the directory's answer, CTL_PENDING): those
 * may be answered after later calls were, so a late reply can come even
 * after the current call's. */
static bool seq_stale(const struct dp_client *c, uint32_t seq)
{
	uint32_t back = c->seq - seq;

	/* Not seq 0: the service's answer to a request it could not parse
	 * (a library and service that do not match: -EBADMSG at once). */
	return seq && back && back < (1u << 31);
}

/* Whether one of the @n fds is not open. */
static bool fds_bad(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fcntl(fds[i], F_GETFD) < 0)
			return true;
	return false;
}

/* Sends one request before the deadline: 0, -ETIMEDOUT (the service does
 * not read: its socket's queue is full), -EBADF (one of fds_in is not open:
 * nothing was sent, the connection is fine), or -ECONNRESET (it is gone). */
static int rpc_send(struct dp_client *c, struct iovec *iov, const int *fds_in, int nfds_in,
		    uint64_t deadline)
{
	for (;;) {
		int rc = dp_net_send_fds(c->fd, iov, 2, fds_in, nfds_in, MSG_DONTWAIT);

		if (rc == -EBADF && fds_bad(fds_in, nfds_in))
			return -EBADF;
		if (rc != -EAGAIN)
			return rc ? -ECONNRESET : 0;
		if (dp_net_wait(c->fd, POLLOUT, deadline))
			return -ETIMEDOUT;
	}
}

/*
 * Sends one request and waits for its reply, under c->lock (or before the
 * client is shared). The reply must be the request's type and seq, and
 * exactly `rlen` bytes or a bare status. Returns the reply's status,
 * -ECONNRESET when the service is gone, -ETIMEDOUT when it did not answer
 * within c->timeout_ns.
 *
 * A timeout is not a death: the service may be stopped, swapped
 * out or busy. The call gives up, the client stays usable, and the reply
 * that comes late is recognised by its seq (seq_stale) and dropped by the
 * next call, the fds it carries (QUEUE_CREATE's ring and doorbells) closed.
 * Any reply to an earlier seq is such a late one, whenever it comes (the
 * service answers pending calls out of order: seq_stale). Only EOF, a
 * reset or a failed send mark the connection dead.
 */
int dp__rpc_fds(struct dp_client *c, uint16_t type, const void *req, size_t len, const int *fds_in,
		int nfds_in, void *reply, size_t rlen, int *fds_out, int nfds_out)
{
	struct dp_msg_hdr hdr = {.magic = DP_PROTO_MAGIC,
				 .version = DP_PROTO_VERSION,
				 .type = type,
				 .len = (uint32_t)len};
	_Alignas(8) char buf[DP_MSG_MAX];
	struct iovec iov[2] = {{&hdr, sizeof(hdr)}, {(void *)req, len}};
	uint64_t deadline = dp_now_ns() + c->timeout_ns;
	int got[4], ngot = 0, rc;
	ssize_t n;

	if (is_dead(c))
		return -ECONNRESET;
	if (!++c->seq)
		c->seq = 1;
	hdr.seq = c->seq;
	rc = rpc_send(c, iov, fds_in, nfds_in, deadline);
	/* The caller's fd went between its check and the send (another
	 * thread closed it): a bad argument, not a dead service. */
	if (rc == -EBADF)
		return -EINVAL;
	for (;;) {
		if (rc == -ETIMEDOUT)
			return rc;
		if (rc) {
			set_dead(c);
			return -ECONNRESET;
		}
		n = dp_net_recv_fds(c->fd, buf, sizeof(buf), got, 4, &ngot, MSG_DONTWAIT);
		if (n == -EAGAIN) {
			rc = dp_net_wait(c->fd, POLLIN, deadline);
			continue;
		}
		/* A reply longer than any the service sends, or with more fds. */
		if (n == -EMSGSIZE)
			return -EBADMSG;
		if (n <= 0) {
			rc = -ECONNRESET; /* EOF, or the connection was reset */
			continue;
		}
		memcpy(&hdr, buf, sizeof(hdr) <= (size_t)n ? sizeof(hdr) : 0);
		if ((size_t)n < sizeof(hdr) || hdr.magic != DP_PROTO_MAGIC ||
		    !seq_stale(c, hdr.seq))
			break;
		close_fds(got, ngot); /* a late reply to a call that timed out */
		ngot = 0;
	}
	rc = -EBADMSG;
	if ((size_t)n < sizeof(hdr) + sizeof(int32_t) || hdr.magic != DP_PROTO_MAGIC ||
	    hdr.version != DP_PROTO_VERSION || hdr.type != (type | DP_MSG_REPLY) ||
	    hdr.seq != c->seq || hdr.len != (size_t)n - sizeof(hdr))
		goto out;
	memcpy(&rc, buf + sizeof(hdr), sizeof(rc));
	if (rc > 0)
		rc = -EBADMSG;
	if (rc < 0)
		goto out;
	if (hdr.len != rlen || ngot != nfds_out) {
		rc = -EBADMSG;
		goto out;
	}
	if (reply)
		memcpy(reply, buf + sizeof(hdr), rlen);
	if (nfds_out) {
		memcpy(fds_out, got, sizeof(int) * (size_t)nfds_out);
		ngot = 0;
	}
out:
	close_fds(got, ngot);
	return rc;
}

int dp__rpc(struct dp_client *c, uint16_t type, const void *req, size_t len, int fd_in, void *reply,
	    size_t rlen, int *fds_out, int nfds_out)
{
	return dp__rpc_fds(c, type, req, len, &fd_in, fd_in >= 0, reply, rlen, fds_out, nfds_out);
}

int dp__rpc_locked_fds(struct dp_client *c, uint16_t type, const void *req, size_t len,
		       const int *fds_in, int nfds_in, void *reply, size_t rlen, int *fds_out,
		       int nfds_out)
{
	int rc;

	pthread_mutex_lock(&c->lock);
	rc = dp__rpc_fds(c, type, req, len, fds_in, nfds_in, reply, rlen, fds_out, nfds_out);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int dp__rpc_locked(struct dp_client *c, uint16_t type, const void *req, size_t len, int fd_in,
		   void *reply, size_t rlen, int *fds_out, int nfds_out)
{
	return dp__rpc_locked_fds(c, type, req, len, &fd_in, fd_in >= 0, reply, rlen, fds_out,
				  nfds_out);
}

/*
 * Whether the service still holds its end of our control socket.
 *
 * The evidence is the socket's hang-up alone, polled with POLLRDHUP and not
 * POLLIN: poll() reads nothing, so it cannot race with a control call in
 * flight on another thread (the documented pattern: one thread in dp_wait,
 * another making control calls). The old check peeked at the socket when it
 * was readable, taking "readable" for EOF; a reply to the other thread's
 * call is readable too, and when that thread took it first the peek's
 * EAGAIN read as death. A SEQPACKET socket whose peer closed (the
 * service exited, was killed, or dropped us) reports POLLHUP (and POLLRDHUP)
 * whatever is still queued; POLLERR comes with a reset. The doorbells would
 * not do: a SOCK_DGRAM socketpair reports nothing when its other end closes.
 * A service that is merely slow or stopped never reads as dead here.
 */
bool dp__service_alive(struct dp_client *c)
{
	struct pollfd pfd = {.fd = c->fd, .events = POLLRDHUP};

	if (is_dead(c))
		return false;
	if (poll(&pfd, 1, 0) > 0 && pfd.revents & (POLLHUP | POLLRDHUP | POLLERR))
		set_dead(c);
	return !is_dead(c);
}

/* $DP_CTL_TIMEOUT_MS (docs/api.md): how long a control call waits for the
 * service's reply; 10 s when unset or not a positive number of ms. */
static uint64_t ctl_timeout_ms(void)
{
	const char *env = getenv("DP_CTL_TIMEOUT_MS");
	unsigned long long ms;
	char *end;

	if (!env || !*env)
		return RPC_TIMEOUT_MS;
	errno = 0;
	ms = strtoull(env, &end, 10);
	if (errno || *end || !ms || ms > 24ull * 3600 * 1000 || env[0] == '-')
		return RPC_TIMEOUT_MS;
	return ms;
}

/* dp_connect; *local says why when the failure is this process's own
 * (out of fds), not the service's answer, whose errno may be the same. */
static int connect_(const char *socket_path, const char *name, struct dp_client **out,
		    const char **local)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION, .pid = (uint32_t)getpid()};
	struct dp_msg_hello_reply r;
	struct dp_client *c;
	int rc;

	if (!out)
		return -EINVAL;
	if (socket_path && strlen(socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	if (socket_path)
		memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
	else
		dp_default_socket(sa.sun_path, sizeof(sa.sun_path));
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->send_region = -1;
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		rc = -errno;
		if (rc == -EMFILE || rc == -ENFILE)
			*local = "this process (or the system) is out of file descriptors";
		goto err;
	}
	c->timeout_ns = ctl_timeout_ms() * 1000000ull;
	c->pid = getpid();
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		goto err;
	}
	snprintf(h.name, sizeof(h.name), "%s", name ? name : "");
	rc = dp__rpc(c, DP_MSG_HELLO, &h, sizeof(h), -1, &r, sizeof(r), NULL, 0);
	if (rc)
		goto err;
	memcpy(c->server_name, r.server_name, sizeof(c->server_name));
	c->server_name[sizeof(c->server_name) - 1] = 0;
	c->default_depth = r.default_depth;
	c->max_depth = r.max_depth;
	*out = c;
	return 0;
err:
	if (c->fd >= 0)
		close(c->fd);
	free(c);
	return rc;
}

int dp_connect(const char *socket_path, const char *name, struct dp_client **out)
{
	const char *local = NULL;
	int rc = connect_(socket_path, name, out, &local);

	return local ? dp__fail_text(C_CONNECT, rc, local) : dp__fail(C_CONNECT, rc);
}

const char *dp_server_name(const struct dp_client *c)
{
	return c->server_name;
}

void dp_close(struct dp_client *c)
{
	if (!c)
		return;
	close(c->fd);
	while (c->queues) {
		struct dp_queue *q = c->queues;

		c->queues = q->next;
		dp__queue_unmap(q);
	}
	for (unsigned i = 0; i < c->nallocs; i++)
		munmap(c->allocs[i].addr, c->allocs[i].len);
	if (c->notify)
		dp__notify_free(c->notify);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
