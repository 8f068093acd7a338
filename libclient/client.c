/* SPDX-License-Identifier: MIT */
/*
 * client.c - libclient: the control calls (one request, one reply over the
 * SEQPACKET socket) and the data path (rings, no system call unless a
 * doorbell must be rung or a sleep was asked for).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cuda_export.h"
#include "dataplane.h"
#include "dp_client_pvt.h"
#include "dp_proto.h"
#include "dp_ring.h"
#include "net.h"
#include "sockpath.h"

#define MAX_ALLOCS 1024
#define RPC_TIMEOUT_MS 10000	     /* a control call's reply; $DP_CTL_TIMEOUT_MS overrides it */
#define LIVENESS_EVERY_NS 1000000ull /* dp_submit and idle dp_poll check the socket this often */

/* The exported copies of the header's inline helpers (C99 inline: this
 * declaration makes this file's definitions the external ones). */
extern inline void dp_prep_write(struct dp_desc *d, int region, uint64_t local_off, int segment,
				 uint64_t target_off, uint64_t len, uint64_t user_data);
extern inline void dp_prep_read(struct dp_desc *d, int region, uint64_t local_off, int segment,
				uint64_t target_off, uint64_t len, uint64_t user_data);
extern inline void dp_prep_write_notify(struct dp_desc *d, int region, uint64_t local_off,
					int segment, uint64_t target_off, uint64_t len,
					uint64_t user_data, uint64_t value);
extern inline void dp_prep_write_msg(struct dp_desc *d, int region, uint64_t local_off, int segment,
				     uint64_t target_off, uint64_t len, uint64_t user_data,
				     const void *msg, size_t msg_len);
extern inline void dp_prep_read_msg(struct dp_desc *d, int region, uint64_t local_off, int segment,
				    uint64_t target_off, uint64_t len, uint64_t user_data,
				    const void *msg, size_t msg_len);

struct alloc {
	int region;
	void *addr;
	size_t len;
};

/* A region with an address in this process (dp_alloc, dp_register_mem,
 * dp_register_cuda): what the session is told (SESSION_ADD). */
struct reg_addr {
	int region;
	uint64_t addr;
};

struct dp_client {
	int fd;
	pid_t pid;    /* the process that connected (dp_register_mem names its memory) */
	uint32_t seq; /* of the last request sent (never 0: the service's "no header") */
	uint64_t timeout_ns;
	/* The service hung up (or a reply broke off): set once, read by any
	 * thread, the data path included, without the lock. */
	atomic_bool dead;
	char server_name[DP_NAME_MAX];
	uint32_t default_depth, max_depth;
	pthread_mutex_t lock; /* control calls may come from several threads */
	struct alloc allocs[MAX_ALLOCS];
	unsigned nallocs;
	struct reg_addr addrs[MAX_ALLOCS]; /* under the lock */
	unsigned naddrs;
	char session[DP_NAME_MAX]; /* "host:port", "" before dp_session_create */
	struct dp_queue *queues;
	/* The notification ring (dp_notify_open): set once, under the lock,
	 * read by the notification calls without it. */
	_Atomic(struct dp_notify *) notify;
	/* dp_notify_send's bytes (a dp_alloc region of DP_NOTIFY_MSG_MAX,
	 * made at its first call; under the lock); -1 before. */
	int send_region;
	uint8_t *send_buf;
};

/* A notification ring, client side: the pair's CQ is the ring (consumer),
 * its SQ unused; the doorbell is the client's end. */
struct dp_notify {
	struct dp_ring_pair pair;
	int db;
	/* dp_notify_fd's: an epoll set of the doorbell and of `kick`, an
	 * eventfd the library sets when notifications wait that rang no
	 * doorbell (they came before NEED_WAKEUP was set); -1 before. */
	int epfd, kick;
	/* dp_notify_fd was called: NEED_WAKEUP stays set for good, and a
	 * poll that finds the ring empty drains the doorbell. */
	atomic_bool armed;
	uint64_t last_check_ns;
};

struct dp_queue {
	struct dp_client *c;
	struct dp_ring_pair pair; /* client side: SQ producer, CQ consumer */
	int sq_efd, cq_efd;
	uint32_t id, depth;
	uint32_t in_flight;
	uint64_t last_check_ns;
	/* Notifications' bytes (DP_DESC_F_NOTIFY_MSG): a dp_alloc region of
	 * depth slots of DP_NOTIFY_MSG_MAX, one per SQ index (dp_proto.h),
	 * made at the first such descriptor; -1 before. */
	int msg_region;
	uint8_t *msg_buf;
	struct dp_queue_stats st;
	struct dp_queue *next;
};

/* ---- errors: dp_last_error() ---- */

enum call {
	C_ANY, /* texts every call shares */
	C_CONNECT,
	C_QUEUE_CREATE,
	C_QUEUE_DESTROY,
	C_ALLOC,
	C_FREE,
	C_REGISTER_FD,
	C_REGISTER_CUDA,
	C_REGISTER_MEM,
	C_REGISTER_FILE,
	C_OPEN_FILE,
	C_EXPORT,
	C_UNEXPORT,
	C_OPEN,
	C_CLOSE,
	C_SUBMIT,
	C_POLL,
	C_WAIT,
	C_QUEUE_STATS,
	C_NOTIFY_OPEN,
	C_NOTIFY_POLL,
	C_NOTIFY_WAIT,
	C_NOTIFY_FD,
	C_SESSION_CREATE,
	C_SESSION_OPEN,
	C_NOTIFY_RECV,
	C_NOTIFY_SEND,
};

static const char *const call_names[] = {
	[C_ANY] = "dataplane",
	[C_CONNECT] = "dp_connect",
	[C_QUEUE_CREATE] = "dp_queue_create",
	[C_QUEUE_DESTROY] = "dp_queue_destroy",
	[C_ALLOC] = "dp_alloc",
	[C_FREE] = "dp_free",
	[C_REGISTER_FD] = "dp_register_fd",
	[C_REGISTER_CUDA] = "dp_register_cuda",
	[C_REGISTER_MEM] = "dp_register_mem",
	[C_REGISTER_FILE] = "dp_register_file",
	[C_OPEN_FILE] = "dp_open_file",
	[C_EXPORT] = "dp_segment_export",
	[C_UNEXPORT] = "dp_segment_unexport",
	[C_OPEN] = "dp_segment_open",
	[C_CLOSE] = "dp_segment_close",
	[C_SUBMIT] = "dp_submit",
	[C_POLL] = "dp_poll",
	[C_WAIT] = "dp_wait",
	[C_QUEUE_STATS] = "dp_queue_stats",
	[C_NOTIFY_OPEN] = "dp_notify_open",
	[C_NOTIFY_POLL] = "dp_notify_poll",
	[C_NOTIFY_WAIT] = "dp_notify_wait",
	[C_NOTIFY_FD] = "dp_notify_fd",
	[C_SESSION_CREATE] = "dp_session_create",
	[C_SESSION_OPEN] = "dp_session_open",
	[C_NOTIFY_RECV] = "dp_notify_recv",
	[C_NOTIFY_SEND] = "dp_notify_send",
};

_Static_assert(DP_SEGMENT_NAME_MAX == DP_NAME_MAX - 1, "dataplane.h and dp_proto.h agree");

#define NAME_RULE                                                                                  \
	"a segment name is 1..63 bytes of [A-Za-z0-9._:/-], no empty, '.' or '..' component"

/* What each call's documented errors mean for that call (dataplane.h,
 * docs/api.md); C_ANY rows serve every call, after its own rows. */
static const struct {
	enum call call;
	int err;
	const char *text;
} call_errors[] = {
	{C_CONNECT, -ENOENT,
	 "no service listens on that socket (is dataplaned running? $DP_SOCKET)"},
	{C_CONNECT, -ECONNREFUSED, "no service listens on that socket (is dataplaned running?)"},
	{C_CONNECT, -EPROTONOSUPPORT, "client library and service speak different ABI versions"},
	{C_CONNECT, -ENAMETOOLONG, "socket path too long for a Unix socket"},
	{C_CONNECT, -EACCES, "no permission to connect to the service's socket"},
	{C_CONNECT, -EUSERS, "the service serves its --max-clients clients already"},
	{C_CONNECT, -EDQUOT,
	 "this uid holds the service's --max-clients-per-uid connections already"},
	{C_CONNECT, -EMFILE,
	 "this process holds the service's --max-clients-per-process connections already "
	 "(other processes, of this uid too, still connect)"},
	{C_QUEUE_CREATE, -EINVAL, "depth not a power of two, or above the service's --max-depth"},
	{C_QUEUE_CREATE, -EMFILE, "the service's --max-queues queues are open already"},
	{C_ALLOC, -EINVAL, "length 0 or unknown flags"},
	{C_ALLOC, -ENOSPC, "the client's region table is full (1024 regions)"},
	{C_ALLOC, -EDQUOT, "this uid's --max-mapped-gb-per-uid of the service is used up"},
	{C_ALLOC, -EFBIG, "this process's --max-mapped-gb-per-process of the service is used up"},
	{C_REGISTER_FD, -EINVAL,
	 "the fd is not open or not a memfd, or offset + length lies beyond its size"},
	{C_REGISTER_FD, -EPERM,
	 "the service cannot seal the memfd against shrinking: it was made without "
	 "MFD_ALLOW_SEALING (create it with memfd_create(name, MFD_ALLOW_SEALING)), has "
	 "F_SEAL_SEAL set, or is open read-only; or register its mapping with dp_register_mem()"},
	{C_REGISTER_FD, -ENOSPC, "the client's region table is full (1024 regions)"},
	{C_REGISTER_FD, -EDQUOT, "this uid's --max-mapped-gb-per-uid of the service is used up"},
	{C_REGISTER_FD, -EFBIG,
	 "this process's --max-mapped-gb-per-process of the service is used up"},
	{C_REGISTER_FD, -EACCES,
	 "the service may not map the memfd read-write (a read-only fd of a memfd already "
	 "sealed against shrinking)"},
	{C_REGISTER_MEM, -EINVAL,
	 "a NULL address, a length of 0, a range that wraps, or a process forked after "
	 "dp_connect (register through a connection of its own)"},
	{C_REGISTER_MEM, -EFAULT,
	 "the first or the last byte of the range is not mapped in this process"},
	{C_REGISTER_MEM, -EPERM,
	 "the service may not access this process's memory (it runs as another uid and not "
	 "as root, or Yama ptrace_scope forbids it), or the process is not dumpable "
	 "(prctl(PR_SET_DUMPABLE, 0), a setuid program): the library refuses those itself"},
	{C_REGISTER_MEM, -ESRCH, "the service cannot find this process (another pid namespace)"},
	{C_REGISTER_MEM, -EAGAIN,
	 "the service's probe of the first or the last byte did not return in 200 ms: the "
	 "kernel holds it on a page that waits for this process (a userfaultfd range nobody "
	 "answers, a FUSE file whose server does not); make the pages present and call again"},
	{C_REGISTER_MEM, -ENOSPC, "the client's region table is full (1024 regions)"},
	{C_REGISTER_CUDA, -EINVAL,
	 "neither cudaMalloc device memory nor memory mapped with cuMemMap, or the range leaves "
	 "the allocation (or the pieces mapped side by side there)"},
	{C_REGISTER_FILE, -EPERM,
	 "the fd's open mode does not allow the access (a read-only fd for DP_ACCESS_RW, or a "
	 "write-only fd)"},
	{C_REGISTER_FILE, -EINVAL,
	 "not an open fd of a regular file or block device, a range beyond a read-only file, "
	 "an O_APPEND fd for DP_ACCESS_RW, or bad flags"},
	{C_REGISTER_FILE, -ENOTSUP, "the service has no io_uring"},
	{C_OPEN_FILE, -EPERM,
	 "the path is outside the service's --file-root (an absolute path, '..' or a symlink "
	 "leading out), or the service runs without --file-root"},
	{C_OPEN_FILE, -ENOENT, "no such file beneath the service's --file-root"},
	{C_OPEN_FILE, -ENAMETOOLONG, "the path is 256 bytes or more"},
	{C_OPEN_FILE, -EACCES, "the service may not open that file (file permissions)"},
	{C_OPEN_FILE, -EINVAL,
	 "empty path, not a regular file or block device (a directory?), a range beyond a "
	 "read-only file, or bad flags"},
	{C_OPEN_FILE, -ENOTSUP, "the service has no io_uring, or the kernel no openat2"},
	{C_FREE, -EBADF, "unknown region id"},
	{C_EXPORT, -EINVAL,
	 "bad name (" NAME_RULE "), or access not DP_ACCESS_READ / DP_ACCESS_RW"},
	{C_EXPORT, -EBADF, "unknown region id"},
	{C_EXPORT, -EPERM, "the region does not allow that access (a read-only file region)"},
	{C_EXPORT, -EEXIST, "the name is taken (here, or by another service of the cluster)"},
	{C_EXPORT, -EHOSTUNREACH, "the cluster directory cannot be reached"},
	{C_EXPORT, -ETIMEDOUT, "the cluster directory, or the service, did not answer in time"},
	{C_UNEXPORT, -EINVAL, "bad name (" NAME_RULE ")"},
	{C_UNEXPORT, -ENOENT, "no segment of that name is exported here"},
	{C_UNEXPORT, -EPERM, "the segment is another client's export"},
	{C_OPEN, -EINVAL,
	 "bad name (" NAME_RULE "), peer of 64 bytes or more, or access not READ/WRITE/RW"},
	{C_OPEN, -ENOENT,
	 "no segment of that name (on that peer, here, or in the cluster directory)"},
	{C_OPEN, -EPERM,
	 "access beyond what the segment's export grants, or (same host, no fabric) the "
	 "export is dp_register_mem memory of a process this service may not access "
	 "(another uid and not root, Yama ptrace_scope, not dumpable)"},
	{C_OPEN, -EACCES,
	 "the peer and this service do not trust each other: different fleet keys (--peer-key)"},
	{C_OPEN, -EHOSTUNREACH, "the peer, or the cluster directory, cannot be reached"},
	{C_OPEN, -ETIMEDOUT,
	 "the peer, the cluster directory, or the service did not answer in time"},
	{C_OPEN, -ENOSPC, "the client's segment handle table is full"},
	{C_OPEN, -EAGAIN, "the service has its limit of peer lookups in flight; try again"},
	{C_OPEN, -EBUSY, "an open of this client is still waiting for its peer"},
	{C_CLOSE, -EBADF, "unknown segment handle"},
	{C_QUEUE_DESTROY, -EBADF, "unknown queue"},
	{C_NOTIFY_OPEN, -EEXIST, "the client's notification ring is open already (one per client)"},
	{C_NOTIFY_OPEN, -EINVAL,
	 "entries not a power of two, or above both 256 and the service's --max-depth"},
	{C_NOTIFY_POLL, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_WAIT, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_FD, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_RECV, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_RECV, -EMSGSIZE,
	 "the buffer is shorter than the notification's bytes (msg_len; at most "
	 "DP_NOTIFY_MSG_MAX): it is left on the ring"},
	{C_NOTIFY_RECV, -EPROTO, "the notification ring is corrupt (its head was moved)"},
	{C_SUBMIT, -EMSGSIZE,
	 "a notification carries more than DP_NOTIFY_MSG_MAX (4096) bytes; that descriptor and "
	 "those after it were not submitted"},
	{C_NOTIFY_SEND, -EMSGSIZE, "a notification carries at most DP_NOTIFY_MSG_MAX (4096) bytes"},
	{C_NOTIFY_SEND, -EBADF, "unknown segment handle"},
	{C_NOTIFY_SEND, -ECONNRESET,
	 "the segment is gone (its owner unexported it or left), or the service went away"},
	{C_NOTIFY_POLL, -EPROTO, "the notification ring is corrupt (its head was moved)"},
	{C_NOTIFY_WAIT, -EPROTO, "the notification ring is corrupt (its head was moved)"},
	{C_SESSION_CREATE, -EEXIST, "the client has a session already (one per client)"},
	{C_SESSION_CREATE, -EADDRINUSE, "the port is taken on this host"},
	{C_SESSION_CREATE, -EACCES, "the service may not listen on that port (below 1024)"},
	{C_SESSION_CREATE, -EINVAL,
	 "port above 65535, or the service runs without a peer RPC port"},
	{C_SESSION_OPEN, -EINVAL,
	 "the session name is not \"host:port\" (port 1..65535), or "
	 "access not READ/WRITE/RW"},
	{C_SESSION_OPEN, -ENOENT, "something answers on that port, but not a session"},
	{C_SESSION_OPEN, -EHOSTUNREACH,
	 "nothing answers on that host and port (the session's client left, or a wrong name)"},
	{C_SESSION_OPEN, -ETIMEDOUT, "the session's host did not answer in time"},
	{C_SESSION_OPEN, -EACCES,
	 "the session's service and this one do not trust each other: different fleet keys"},
	{C_SESSION_OPEN, -ENOSPC, "the client's segment handle table is full"},
	{C_SESSION_OPEN, -EAGAIN, "the service has its limit of peer lookups in flight; try again"},
	{C_SESSION_OPEN, -EBUSY, "an open of this client is still waiting for its peer"},
	{C_REGISTER_MEM, -EEXIST, "the range overlaps memory already in the client's session"},
	{C_REGISTER_CUDA, -EEXIST, "the range overlaps memory already in the client's session"},
	{C_ALLOC, -EEXIST, "the mapping overlaps memory already in the client's session"},
	{C_ANY, -ECONNRESET, "the service went away (restart, crash or shutdown)"},
	{C_ANY, -ETIMEDOUT,
	 "the service did not answer in time ($DP_CTL_TIMEOUT_MS, 10 s by default); the "
	 "connection stays usable"},
	{C_ANY, -EBADMSG, "malformed reply: client library and service do not match"},
	{C_ANY, -ENOMEM, "out of memory"},
	{C_ANY, -EINVAL, "bad argument (a NULL pointer, a negative id, a length of 0)"},
};

static _Thread_local char last_error[512];

/* Records why @call failed with @err (< 0) for dp_last_error(): @text, or
 * dp_strerror's when NULL; returns @err. */
static int fail_text(enum call call, int err, const char *text)
{
	const char *name = strerrorname_np(-err);

	snprintf(last_error, sizeof(last_error), "%s: %s (%s)", call_names[call],
		 text ? text : dp_strerror(err), name ? name : "?");
	return err;
}

/* fail_text with the call's own text for @err (call_errors); passes a
 * success through untouched. */
static int fail(enum call call, int err)
{
	const char *text = NULL;

	if (err >= 0)
		return err;
	for (size_t i = 0; !text && i < sizeof(call_errors) / sizeof(call_errors[0]); i++)
		if (call_errors[i].call == call && call_errors[i].err == err)
			text = call_errors[i].text;
	for (size_t i = 0; !text && i < sizeof(call_errors) / sizeof(call_errors[0]); i++)
		if (call_errors[i].call == C_ANY && call_errors[i].err == err)
			text = call_errors[i].text;
	return fail_text(call, err, text);
}

/* A NULL pointer where @call needs one: @err (-EINVAL, or -EBADF for the
 * calls that say so), with that as the reason rather than the call's own
 * text for the errno. */
static int null_arg(enum call call, int err)
{
	return fail_text(call, err, "a NULL pointer where one is needed");
}

const char *dp_last_error(void)
{
	return last_error;
}

/* ---- control calls ---- */

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static void set_dead(struct dp_client *c)
{
	atomic_store_explicit(&c->dead, true, memory_order_relaxed);
}

static bool is_dead(const struct dp_client *c)
{
	return atomic_load_explicit(&c->dead, memory_order_relaxed);
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
static int rpc_fds(struct dp_client *c, uint16_t type, const void *req, size_t len,
		   const int *fds_in, int nfds_in, void *reply, size_t rlen, int *fds_out,
		   int nfds_out)
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

/* rpc_fds with one fd to send (none when fd_in < 0). */
static int rpc(struct dp_client *c, uint16_t type, const void *req, size_t len, int fd_in,
	       void *reply, size_t rlen, int *fds_out, int nfds_out)
{
	return rpc_fds(c, type, req, len, &fd_in, fd_in >= 0, reply, rlen, fds_out, nfds_out);
}

static int rpc_locked_fds(struct dp_client *c, uint16_t type, const void *req, size_t len,
			  const int *fds_in, int nfds_in, void *reply, size_t rlen, int *fds_out,
			  int nfds_out)
{
	int rc;

	pthread_mutex_lock(&c->lock);
	rc = rpc_fds(c, type, req, len, fds_in, nfds_in, reply, rlen, fds_out, nfds_out);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int rpc_locked(struct dp_client *c, uint16_t type, const void *req, size_t len, int fd_in,
		      void *reply, size_t rlen, int *fds_out, int nfds_out)
{
	return rpc_locked_fds(c, type, req, len, &fd_in, fd_in >= 0, reply, rlen, fds_out,
			      nfds_out);
}

/* Region `region` is at `addr` here: remembered, and told to the session
 * when the client has one (then a refusal, -EEXIST for a range that
 * overlaps a member, is the registration's). */
static int region_addr_add(struct dp_client *c, int region, const void *addr)
{
	struct dp_msg_session_add req = {.region = (uint32_t)region,
					 .addr = (uint64_t)(uintptr_t)addr};
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	if (c->session[0])
		rc = rpc(c, DP_MSG_SESSION_ADD, &req, sizeof(req), -1, NULL,
			 sizeof(struct dp_msg_status), NULL, 0);
	if (!rc && c->naddrs < MAX_ALLOCS)
		c->addrs[c->naddrs++] = (struct reg_addr){region, req.addr};
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Under the lock: region `region` is gone. */
static void region_addr_drop(struct dp_client *c, int region)
{
	for (unsigned i = 0; i < c->naddrs; i++)
		if (c->addrs[i].region == region) {
			c->addrs[i] = c->addrs[--c->naddrs];
			return;
		}
}

/* A registration whose address the session refused goes again. */
static int registered(struct dp_client *c, int region, const void *addr)
{
	int rc = region_addr_add(c, region, addr);

	if (rc) {
		dp_free(c, region);
		return rc;
	}
	return region;
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
	rc = rpc(c, DP_MSG_HELLO, &h, sizeof(h), -1, &r, sizeof(r), NULL, 0);
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

	return local ? fail_text(C_CONNECT, rc, local) : fail(C_CONNECT, rc);
}

const char *dp_server_name(const struct dp_client *c)
{
	return c->server_name;
}

static void queue_unmap(struct dp_queue *q)
{
	dp_ring_pair_close(&q->pair);
	close(q->sq_efd);
	close(q->cq_efd);
	free(q);
}

void dp_close(struct dp_client *c)
{
	if (!c)
		return;
	close(c->fd);
	while (c->queues) {
		struct dp_queue *q = c->queues;

		c->queues = q->next;
		queue_unmap(q);
	}
	for (unsigned i = 0; i < c->nallocs; i++)
		munmap(c->allocs[i].addr, c->allocs[i].len);
	if (c->notify) {
		dp_ring_pair_close(&c->notify->pair);
		close(c->notify->db);
		if (c->notify->epfd >= 0)
			close(c->notify->epfd);
		if (c->notify->kick >= 0)
			close(c->notify->kick);
		free(c->notify);
	}
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/*
 * Whether this process is registered for the service's membarrier (its
 * pollers' sleep path), so that dp_submit may skip its fence: registered
 * once per process (a forked child registers again), false where the
 * kernel or a seccomp filter refuses.
 */
static bool light_registered(void)
{
	static _Atomic pid_t registered; /* the pid that registered; -pid: refused */
	pid_t pid = getpid(), r = atomic_load_explicit(&registered, memory_order_relaxed);

	if (r != pid && r != -pid) {
		r = dp_ring_light_register() ? -pid : pid;
		atomic_store_explicit(&registered, r, memory_order_relaxed);
	}
	return r == pid;
}

static int queue_create(struct dp_client *c, uint32_t depth, struct dp_queue **out)
{
	struct dp_msg_queue_create req = {.depth = depth};
	struct dp_msg_queue_create_reply r;
	struct dp_queue *q;
	int fds[3], rc;

	if (!c || !out)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	rc = rpc_locked(c, DP_MSG_QUEUE_CREATE, &req, sizeof(req), -1, &r, sizeof(r), fds, 3);
	if (rc) {
		free(q);
		return rc;
	}
	rc = dp_ring_pair_attach_seq(
		&q->pair, fds[0],
		&(struct dp_ring_layout){0, sizeof(struct dp_desc), DP_SQ_SEQ_OFF},
		&(struct dp_ring_layout){0, sizeof(struct dp_cqe), DP_CQ_SEQ_OFF});
	if (!rc && (dp_ring_size(&q->pair.sq) != r.depth || dp_ring_size(&q->pair.cq) != r.depth)) {
		dp_ring_pair_close(&q->pair);
		fds[0] = -1;
		rc = -EBADMSG;
	}
	if (rc) {
		if (fds[0] >= 0)
			close(fds[0]);
		close(fds[1]);
		close(fds[2]);
		free(q);
		return rc;
	}
	if ((r.flags & DP_QUEUE_F_SQ_MEMBARRIER) && light_registered())
		dp_ring_set_light(&q->pair.sq);
	q->c = c;
	q->sq_efd = fds[1];
	q->cq_efd = fds[2];
	q->id = r.queue_id;
	q->depth = r.depth;
	q->st.depth = r.depth;
	q->msg_region = -1;
	pthread_mutex_lock(&c->lock);
	q->next = c->queues;
	c->queues = q;
	pthread_mutex_unlock(&c->lock);
	*out = q;
	return 0;
}

int dp_queue_create(struct dp_client *c, uint32_t depth, struct dp_queue **out)
{
	if (!c || !out)
		return null_arg(C_QUEUE_CREATE, -EINVAL);
	return fail(C_QUEUE_CREATE, queue_create(c, depth, out));
}

int dp_queue_destroy(struct dp_queue *q)
{
	struct dp_client *c;
	struct dp_msg_id req;
	int rc;

	if (!q)
		return fail(C_QUEUE_DESTROY, -EINVAL);
	c = q->c;
	req = (struct dp_msg_id){.id = q->id};
	pthread_mutex_lock(&c->lock);
	rc = rpc(c, DP_MSG_QUEUE_DESTROY, &req, sizeof(req), -1, NULL, sizeof(struct dp_msg_status),
		 NULL, 0);
	for (struct dp_queue **pp = &c->queues; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	if (q->msg_region >= 0)
		dp_free(c, q->msg_region);
	queue_unmap(q);
	return fail(C_QUEUE_DESTROY, rc);
}

int dp_register_fd(struct dp_client *c, int fd, uint64_t off, uint64_t len)
{
	struct dp_msg_region_register req = {.offset = off, .len = len};
	struct dp_msg_id_reply r;
	int rc;

	if (!c)
		return null_arg(C_REGISTER_FD, -EINVAL);
	/* An fd that is not open would fail the send (EBADF), not the
	 * service: say so here. */
	if (fd < 0 || !len || fcntl(fd, F_GETFD) < 0)
		return fail(C_REGISTER_FD, -EINVAL);
	rc = rpc_locked(c, DP_MSG_REGION_REGISTER, &req, sizeof(req), fd, &r, sizeof(r), NULL, 0);
	return rc ? fail(C_REGISTER_FD, rc) : (int)r.id;
}

int dp_register_cuda(struct dp_client *c, void *ptr, size_t len)
{
	struct dp_cuda_reg req;
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !ptr)
		return null_arg(C_REGISTER_CUDA, -EINVAL);
	if (!len)
		return fail(C_REGISTER_CUDA, -EINVAL);
	rc = dp_cuda_export(ptr, len, &req);
	if (rc)
		return req.why ? fail_text(C_REGISTER_CUDA, rc, req.why)
			       : fail(C_REGISTER_CUDA, rc);
	rc = rpc_locked_fds(c, req.type, &req.msg, req.len, req.fds, (int)req.nfds, &r, sizeof(r),
			    NULL, 0);
	/* The service imported what it maps: the fds are done here. */
	dp_cuda_reg_close(&req);
	return fail(C_REGISTER_CUDA, rc ? rc : registered(c, (int)r.id, ptr));
}

int dp_register_mem(struct dp_client *c, void *addr, size_t len)
{
	struct dp_msg_region_register_mem req = {.addr = (uint64_t)(uintptr_t)addr, .len = len};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !addr)
		return null_arg(C_REGISTER_MEM, -EINVAL);
	if (!len || req.addr + req.len < req.addr)
		return fail(C_REGISTER_MEM, -EINVAL);
	/* The service reads the memory of the process that connected: after
	 * a fork, this process's addresses would name its parent's bytes. */
	if (getpid() != c->pid)
		return fail(C_REGISTER_MEM, -EINVAL);
	/* A process that made itself non-dumpable (or a setuid one) asked
	 * not to be read from outside; a service with CAP_SYS_PTRACE (root)
	 * could read it anyway, so the refusal is made here. */
	if (prctl(PR_GET_DUMPABLE) != 1)
		return fail(C_REGISTER_MEM, -EPERM);
	rc = rpc_locked(c, DP_MSG_REGION_REGISTER_MEM, &req, sizeof(req), -1, &r, sizeof(r), NULL,
			0);
	return fail(C_REGISTER_MEM, rc ? rc : registered(c, (int)r.id, addr));
}

int dp__register_file(struct dp_client *c, int fd, uint64_t offset, uint64_t len, unsigned flags,
		      uint64_t *len_out)
{
	struct dp_msg_region_file req = {.offset = offset, .len = len, .access = flags};
	struct dp_msg_id_reply r;
	int rc;

	if (!c)
		return null_arg(C_REGISTER_FILE, -EINVAL);
	if (fd < 0 || fcntl(fd, F_GETFD) < 0)
		return fail(C_REGISTER_FILE, -EINVAL);
	rc = rpc_locked(c, DP_MSG_REGION_REGISTER_FILE, &req, sizeof(req), fd, &r, sizeof(r), NULL,
			0);
	if (rc)
		return fail(C_REGISTER_FILE, rc);
	if (len_out)
		*len_out = r.len;
	return (int)r.id;
}

int dp_register_file(struct dp_client *c, int fd, uint64_t offset, uint64_t len, unsigned flags)
{
	return dp__register_file(c, fd, offset, len, flags, NULL);
}

int dp__open_file(struct dp_client *c, const char *path, uint64_t offset, uint64_t len,
		  unsigned flags, uint64_t *len_out)
{
	struct dp_msg_region_path req = {.file = {.offset = offset, .len = len, .access = flags}};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !path)
		return null_arg(C_OPEN_FILE, -EINVAL);
	if (!*path)
		return fail(C_OPEN_FILE, -EINVAL);
	if (strlen(path) >= sizeof(req.path))
		return fail(C_OPEN_FILE, -ENAMETOOLONG);
	strcpy(req.path, path);
	rc = rpc_locked(c, DP_MSG_REGION_OPEN_PATH, &req, sizeof(req), -1, &r, sizeof(r), NULL, 0);
	if (rc)
		return fail(C_OPEN_FILE, rc);
	if (len_out)
		*len_out = r.len;
	return (int)r.id;
}

int dp_open_file(struct dp_client *c, const char *path, uint64_t offset, uint64_t len,
		 unsigned flags)
{
	return dp__open_file(c, path, offset, len, flags, NULL);
}

/* A sealed memfd of `len` bytes, mapped; huge pages when asked and the host
 * has them reserved (hugetlbfs fails at mmap time when it has none). */
static int map_memfd(size_t len, bool huge, int *fd_out, void **addr)
{
	void *p;
	int fd;

	fd = memfd_create("dataplane", MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		close(fd);
		return -errno;
	}
	/* The service relies on the size staying put. */
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return -ENOMEM;
	}
	*fd_out = fd;
	*addr = p;
	return 0;
}

static int alloc_(struct dp_client *c, size_t len, unsigned flags, void **addr)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), huge = 2u << 20, maplen;
	void *p = NULL;
	int fd = -1, region, rc = -1;

	bool full;

	if (!len || flags & ~DP_ALLOC_HUGE)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	full = c->nallocs == MAX_ALLOCS;
	pthread_mutex_unlock(&c->lock);
	if (full)
		return -ENOSPC;
	if (flags & DP_ALLOC_HUGE) {
		maplen = (len + huge - 1) & ~(huge - 1);
		rc = map_memfd(maplen, true, &fd, &p);
	}
	if (rc) {
		maplen = (len + page - 1) & ~(page - 1);
		rc = map_memfd(maplen, false, &fd, &p);
		if (rc)
			return rc;
		/* Transparent huge pages, where shmem allows them. */
		if (flags & DP_ALLOC_HUGE)
			madvise(p, maplen, MADV_HUGEPAGE);
	}
	region = dp_register_fd(c, fd, 0, len);
	close(fd);
	if (region < 0) {
		munmap(p, maplen);
		return region;
	}
	pthread_mutex_lock(&c->lock);
	full = c->nallocs == MAX_ALLOCS; /* other threads' dp_alloc meanwhile */
	if (!full)
		c->allocs[c->nallocs++] =
			(struct alloc){.region = region, .addr = p, .len = maplen};
	pthread_mutex_unlock(&c->lock);
	if (full) {
		dp_free(c, region);
		munmap(p, maplen);
		return -ENOSPC;
	}
	region = registered(c, region, p); /* dp_free unmaps it on failure */
	if (region >= 0)
		*addr = p;
	return region;
}

int dp_alloc(struct dp_client *c, size_t len, unsigned flags, void **addr)
{
	if (!c || !addr)
		return null_arg(C_ALLOC, -EINVAL);
	return fail(C_ALLOC, alloc_(c, len, flags, addr));
}

int dp__alloc_detach(struct dp_client *c, int region, void **addr, size_t *len)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->nallocs; i++)
		if (c->allocs[i].region == region) {
			*addr = c->allocs[i].addr;
			*len = c->allocs[i].len;
			c->allocs[i] = c->allocs[--c->nallocs];
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int dp_free(struct dp_client *c, int region)
{
	struct dp_msg_id req = {.id = (uint32_t)region};
	int rc;

	if (!c)
		return null_arg(C_FREE, -EBADF);
	if (region < 0)
		return fail(C_FREE, -EBADF);
	pthread_mutex_lock(&c->lock);
	rc = rpc(c, DP_MSG_REGION_FREE, &req, sizeof(req), -1, NULL, sizeof(struct dp_msg_status),
		 NULL, 0);
	if (!rc)
		region_addr_drop(c, region);
	for (unsigned i = 0; i < c->nallocs; i++)
		if (c->allocs[i].region == region) {
			munmap(c->allocs[i].addr, c->allocs[i].len);
			c->allocs[i] = c->allocs[--c->nallocs];
			break;
		}
	pthread_mutex_unlock(&c->lock);
	return fail(C_FREE, rc);
}

/* A peer ("" allowed) into its field; a segment name must also keep the
 * rules of dp_proto_segment_name_ok() (the service checks them too). */
static int copy_name(char *dst, size_t cap, const char *src, bool segment)
{
	size_t n;

	if (!src)
		src = "";
	n = strlen(src);
	if (n >= cap || (segment && !dp_proto_segment_name_ok(src, cap)))
		return -EINVAL;
	memset(dst, 0, cap);
	memcpy(dst, src, n);
	return 0;
}

int dp_segment_export(struct dp_client *c, int region, const char *name, unsigned access)
{
	struct dp_msg_segment_export req = {.region = (uint32_t)region, .access = access};

	if (!c || !name)
		return null_arg(C_EXPORT, -EINVAL);
	if (copy_name(req.name, sizeof(req.name), name, true))
		return fail(C_EXPORT, -EINVAL);
	if (region < 0)
		return fail(C_EXPORT, -EBADF);
	return fail(C_EXPORT, rpc_locked(c, DP_MSG_SEGMENT_EXPORT, &req, sizeof(req), -1, NULL,
					 sizeof(struct dp_msg_status), NULL, 0));
}

int dp_segment_unexport(struct dp_client *c, const char *name)
{
	struct dp_msg_segment_name req;

	if (!c || !name)
		return null_arg(C_UNEXPORT, -EINVAL);
	if (copy_name(req.name, sizeof(req.name), name, true))
		return fail(C_UNEXPORT, -EINVAL);
	return fail(C_UNEXPORT, rpc_locked(c, DP_MSG_SEGMENT_UNEXPORT, &req, sizeof(req), -1, NULL,
					   sizeof(struct dp_msg_status), NULL, 0));
}

int dp_segment_open(struct dp_client *c, const char *peer, const char *name, unsigned access)
{
	struct dp_msg_segment_open req = {.access = access};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !name)
		return null_arg(C_OPEN, -EINVAL);
	if (copy_name(req.name, sizeof(req.name), name, true) ||
	    copy_name(req.peer, sizeof(req.peer), peer, false))
		return fail(C_OPEN, -EINVAL);
	rc = rpc_locked(c, DP_MSG_SEGMENT_OPEN, &req, sizeof(req), -1, &r, sizeof(r), NULL, 0);
	return rc ? fail(C_OPEN, rc) : (int)r.id;
}

int dp_segment_close(struct dp_client *c, int segment)
{
	struct dp_msg_id req = {.id = (uint32_t)segment};

	if (!c)
		return null_arg(C_CLOSE, -EBADF);
	if (segment < 0)
		return fail(C_CLOSE, -EBADF);
	return fail(C_CLOSE, rpc_locked(c, DP_MSG_SEGMENT_CLOSE, &req, sizeof(req), -1, NULL,
					sizeof(struct dp_msg_status), NULL, 0));
}

/* ---- engine sessions ---- */

int dp_session_create(struct dp_client *c, unsigned port)
{
	struct dp_msg_session_create req = {.port = port};
	struct dp_msg_session_reply r;
	int rc;

	if (!c)
		return null_arg(C_SESSION_CREATE, -EINVAL);
	if (port > 65535)
		return fail(C_SESSION_CREATE, -EINVAL);
	pthread_mutex_lock(&c->lock);
	rc = rpc(c, DP_MSG_SESSION_CREATE, &req, sizeof(req), -1, &r, sizeof(r), NULL, 0);
	if (!rc && !memchr(r.name, 0, sizeof(r.name)))
		rc = -EBADMSG;
	if (!rc) {
		memcpy(c->session, r.name, sizeof(c->session));
		/* What was registered before joins now; a range that overlaps
		 * one already in stays out (the first registration holds it). */
		for (unsigned i = 0; i < c->naddrs; i++) {
			struct dp_msg_session_add add = {.region = (uint32_t)c->addrs[i].region,
							 .addr = c->addrs[i].addr};

			rpc(c, DP_MSG_SESSION_ADD, &add, sizeof(add), -1, NULL,
			    sizeof(struct dp_msg_status), NULL, 0);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc ? fail(C_SESSION_CREATE, rc) : (int)r.port;
}

const char *dp_session_name(const struct dp_client *c)
{
	return c ? c->session : "";
}

int dp_session_open(struct dp_client *c, const char *session, unsigned access)
{
	struct dp_msg_session_open req = {.access = access};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !session)
		return null_arg(C_SESSION_OPEN, -EINVAL);
	if (copy_name(req.session, sizeof(req.session), session, false) || !session[0] ||
	    !strchr(session, ':') || !access || access & ~DP_ACCESS_RW)
		return fail(C_SESSION_OPEN, -EINVAL);
	rc = rpc_locked(c, DP_MSG_SESSION_OPEN, &req, sizeof(req), -1, &r, sizeof(r), NULL, 0);
	if (rc) {
		char text[200];

		snprintf(text, sizeof(text), "session '%s': %s", session, dp_strerror(rc));
		for (size_t i = 0; i < sizeof(call_errors) / sizeof(call_errors[0]); i++)
			if (call_errors[i].call == C_SESSION_OPEN && call_errors[i].err == rc) {
				snprintf(text, sizeof(text), "session '%s': %s", session,
					 call_errors[i].text);
				break;
			}
		return fail_text(C_SESSION_OPEN, rc, text);
	}
	return (int)r.id;
}

/* ---- data path ---- */

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
static bool service_alive(struct dp_client *c)
{
	struct pollfd pfd = {.fd = c->fd, .events = POLLRDHUP};

	if (is_dead(c))
		return false;
	if (poll(&pfd, 1, 0) > 0 && pfd.revents & (POLLHUP | POLLRDHUP | POLLERR))
		set_dead(c);
	return !is_dead(c);
}

/* Rate-limited liveness check for calls that made no progress. */
static int idle_check(struct dp_queue *q)
{
	uint64_t t = dp_clock_ns(CLOCK_MONOTONIC_COARSE);

	if (t - q->last_check_ns < LIVENESS_EVERY_NS)
		return 0;
	q->last_check_ns = t;
	return service_alive(q->c) ? 0 : -ECONNRESET;
}

_Static_assert(offsetof(struct dp_desc, reserved1) == DP_SQ_SEQ_OFF, "SQ sequence word");
_Static_assert(offsetof(struct dp_cqe, reserved) + 4 == DP_CQ_SEQ_OFF, "CQ sequence word");

/*
 * A descriptor whose reserved1 is set, into its slot: every field but the
 * ring's sequence word in reserved1's place (an odd value there could
 * publish the entry half written), and reserved1 becomes reserved0's low
 * bit, which the service refuses with -EINVAL as it would reserved1.
 */
static void slot_write_reserved1(struct dp_desc *slot, const struct dp_desc *d)
{
	memcpy(slot, d, offsetof(struct dp_desc, reserved1));
	memcpy(&slot->target_off, &d->target_off,
	       sizeof(*d) - offsetof(struct dp_desc, target_off));
	slot->reserved0 |= 1;
}

/* One descriptor into its SQ slot, stamped, its word not yet stored. A
 * reserved1 of 0 is copied over the word: 0 publishes nothing. */
static inline void slot_write(struct dp_desc *slot, const struct dp_desc *d, uint64_t now)
{
	if (__builtin_expect(d->reserved1 == 0, 1))
		*slot = *d;
	else
		slot_write_reserved1(slot, d);
	slot->submit_ns = now;
}

/* n descriptors into consecutive SQ slots from index idx, each written
 * and then published by its sequence word (dp_ring_commit_tail moves the
 * tail after). Returns their flags, ORed: whether any carries a message
 * (submit_msgs), at the cost of one OR per descriptor, no pass of its own. */
static inline uint8_t slots_write(struct dp_desc *slot, const struct dp_desc *d, uint32_t n,
				  uint64_t now, uint32_t idx)
{
	uint32_t v = dp_ring_seq_value(idx);
	uint8_t flags = 0;

	for (const struct dp_desc *end = d + n; d < end; d++, slot++, v += 2) {
		slot_write(slot, d, now);
		flags |= d->flags;
		__atomic_store_n(&slot->reserved1, v, __ATOMIC_RELEASE);
	}
	return flags;
}

/*
 * dp_submit, once its k slots from idx are written (all but the first
 * published by their words, which the first's gates: the service reads
 * none of them yet) and some carry DP_DESC_F_NOTIFY_MSG: each message's
 * bytes go into the queue's message buffer, at its SQ index's place (made
 * at the first message), and its slot names them by region, offset and
 * length (dp_proto.h); the caller's notify and submit_ns (the address and
 * length) never reach the service. A length beyond the most ends the run
 * there: the words of that slot and those after it are taken back (0 is
 * no slot's value). Returns how many stay (-EMSGSIZE, -EINVAL or the
 * buffer's error when none).
 */
/* The words of slots [from, k) of a run from idx taken back (the first's,
 * never stored, needs none): the run ends before `from`. */
static void slots_take_back(struct dp_queue *q, uint32_t idx, int from, int k)
{
	for (int j = from > 0 ? from : 1; j < k; j++) {
		struct dp_desc *s = dp_ring_slot(&q->pair.sq, idx + (uint32_t)j);

		__atomic_store_n(&s->reserved1, 0, __ATOMIC_RELAXED);
	}
}

static int submit_msgs(struct dp_queue *q, const struct dp_desc *descs, uint32_t idx, int k)
{
	for (int i = 0; i < k; i++) {
		const struct dp_desc *d = &descs[i];
		struct dp_desc *slot = dp_ring_slot(&q->pair.sq, idx + (uint32_t)i);
		uint32_t off;

		if (!(d->flags & DP_DESC_F_NOTIFY_MSG))
			continue;
		if (d->submit_ns > DP_NOTIFY_MSG_MAX || (!d->notify && d->submit_ns)) {
			slots_take_back(q, idx, i, k);
			if (i)
				return i;
			return d->submit_ns > DP_NOTIFY_MSG_MAX ? -EMSGSIZE : -EINVAL;
		}
		if (q->msg_region < 0) {
			void *buf;
			int rc = alloc_(q->c, (size_t)q->depth * DP_NOTIFY_MSG_MAX, 0, &buf);

			if (rc < 0) {
				slots_take_back(q, idx, i, k);
				return i ? i : rc;
			}
			q->msg_region = rc;
			q->msg_buf = buf;
		}
		off = ((idx + (uint32_t)i) & (q->depth - 1)) * DP_NOTIFY_MSG_MAX;
		if (d->submit_ns)
			memcpy(q->msg_buf + off, (const void *)(uintptr_t)d->notify, d->submit_ns);
		slot->notify = DP_NOTIFY_MSG_REF(q->msg_region, off, d->submit_ns);
	}
	return k;
}

int dp_submit(struct dp_queue *q, const struct dp_desc *descs, unsigned n)
{
	uint8_t flags = 0;
	struct dp_desc *slot;
	uint32_t idx, credit, first;
	uint64_t now;
	int k;

	if (is_dead(q->c) || idle_check(q))
		return fail(C_SUBMIT, -ECONNRESET);
	/* The ring alone never says that the service died: a client that
	 * submits slowly and reaps late would fill it for seconds first. */
	credit = q->depth - q->in_flight;
	if (n > credit)
		n = credit;
	if (!n)
		return 0;
	k = dp_ring_reserve(&q->pair.sq, n, &idx);
	if (k <= 0)
		return fail(C_SUBMIT, k < 0 ? k : idle_check(q));
	now = dp_now_ns();
	/* One pass: each slot is written once, stamp included, in at most two
	 * runs of consecutive slots (before and after the wrap). */
	first = dp_ring_size(&q->pair.sq) - (idx & q->pair.sq.mask);
	if (first > (uint32_t)k)
		first = (uint32_t)k;
	slot = dp_ring_slot(&q->pair.sq, idx);
	slot_write(slot, descs, now);
	flags = descs->flags | slots_write(slot + 1, descs + 1, first - 1, now, idx + 1);
	flags |= slots_write(dp_ring_slot(&q->pair.sq, idx + first), descs + first,
			     (uint32_t)k - first, now, idx + first);
	if (__builtin_expect(flags & DP_DESC_F_NOTIFY_MSG, 0)) {
		k = submit_msgs(q, descs, idx, k);
		if (k <= 0)
			return fail(C_SUBMIT, k);
	}
	/* The first slot's word last (dp_ring__publish says why). */
	__atomic_store_n(&slot->reserved1, dp_ring_seq_value(idx), __ATOMIC_RELEASE);
	dp_ring_commit_tail(&q->pair.sq, (uint32_t)k);
	if (dp_ring_needs_wakeup(&q->pair.sq))
		dp_doorbell_ring(q->sq_efd);
	q->in_flight += (uint32_t)k;
	q->st.submitted += (uint64_t)k;
	return k;
}

int dp_poll(struct dp_queue *q, struct dp_cqe *cqes, unsigned max)
{
	int k = dp_ring_dequeue_burst(&q->pair.cq, cqes, max);
	uint64_t bytes = 0, failed = 0;

	if (k < 0)
		return fail(C_POLL, k);
	if (!k)
		return q->in_flight ? fail(C_POLL, idle_check(q)) : 0;
	/* Counted in locals: the stores into cqes could alias q->st. */
	for (int i = 0; i < k; i++) {
		cqes[i].reserved = 0; /* the ring's sequence word (dp_proto.h) */
		if (cqes[i].status)
			failed++;
		else
			bytes += cqes[i].bytes;
	}
	q->st.failed += failed;
	q->st.completed += (uint64_t)k - failed;
	q->st.bytes += bytes;
	q->in_flight -= (uint32_t)k <= q->in_flight ? (uint32_t)k : q->in_flight;
	return k;
}

int dp_wait(struct dp_queue *q, struct dp_cqe *cqes, unsigned max, int timeout_ms)
{
	uint64_t deadline =
		timeout_ms < 0 ? UINT64_MAX : dp_now_ns() + (uint64_t)timeout_ms * 1000000u;

	for (;;) {
		/* The control socket wakes us on its hang-up only: replies to
		 * other threads' calls are theirs (service_alive). */
		struct pollfd pfd[2] = {{.fd = q->cq_efd, .events = POLLIN},
					{.fd = q->c->fd, .events = POLLRDHUP}};
		int k = dp_poll(q, cqes, max), wait_ms;
		uint64_t now;

		if (k)
			return k < 0 ? fail(C_WAIT, k) : k;
		if (!service_alive(q->c))
			return fail(C_WAIT, -ECONNRESET);
		now = dp_now_ns();
		if (now >= deadline)
			return 0;
		wait_ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
		if (!dp_ring_prepare_sleep(&q->pair.cq))
			continue;
		poll(pfd, 2, wait_ms);
		dp_ring_finish_sleep(&q->pair.cq);
		if (pfd[0].revents & POLLIN)
			dp_doorbell_drain(q->cq_efd);
	}
}

/* ---- notifications ---- */

static int notify_open(struct dp_client *c, uint32_t entries)
{
	struct dp_msg_notify_open req = {.entries = entries};
	struct dp_msg_notify_open_reply r;
	struct dp_notify *n;
	int fds[2], rc;

	if (!c || (entries & (entries - 1)))
		return -EINVAL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	if (c->notify) {
		pthread_mutex_unlock(&c->lock);
		free(n);
		return -EEXIST;
	}
	rc = rpc(c, DP_MSG_NOTIFY_OPEN, &req, sizeof(req), -1, &r, sizeof(r), fds, 2);
	if (!rc) {
		rc = dp_ring_pair_attach(&n->pair, fds[0], 8, sizeof(struct dp_notification));
		if (!rc && dp_ring_size(&n->pair.cq) != r.entries) {
			dp_ring_pair_close(&n->pair);
			fds[0] = -1;
			rc = -EBADMSG;
		}
		if (rc) {
			if (fds[0] >= 0)
				close(fds[0]);
			close(fds[1]);
		}
	}
	if (rc) {
		pthread_mutex_unlock(&c->lock);
		free(n);
		return rc;
	}
	n->db = fds[1];
	n->epfd = n->kick = -1;
	atomic_store_explicit(&c->notify, n, memory_order_release);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int dp_notify_open(struct dp_client *c, uint32_t entries)
{
	if (!c)
		return null_arg(C_NOTIFY_OPEN, -EINVAL);
	return fail(C_NOTIFY_OPEN, notify_open(c, entries));
}

static struct dp_notify *notify_get(struct dp_client *c)
{
	return c ? atomic_load_explicit(&c->notify, memory_order_acquire) : NULL;
}

/* How many ring entries the record at idx takes (dp_proto.h): one, or
 * one and its sender's name and bytes. */
static uint32_t record_slots(const struct dp_notification *e)
{
	uint32_t len = e->msg_len <= DP_NOTIFY_MSG_MAX ? e->msg_len : DP_NOTIFY_MSG_MAX;

	return e->flags & DP_NOTIFY_F_MSG ? DP_NOTIFY_MSG_SLOTS(len) : 1;
}

/* Up to max records' first entries into out, their other entries
 * skipped: the count, or -EPROTO for a ring out of range. */
static int notify_take(struct dp_notify *n, struct dp_notification *out, unsigned max)
{
	uint32_t idx, used = 0;
	int avail, k = 0;

	avail = dp_ring_peek(&n->pair.cq, UINT32_MAX, &idx);
	if (avail <= 0)
		return avail;
	while ((unsigned)k < max && used < (uint32_t)avail) {
		dp_ring_copy_out(&n->pair.cq, idx + used, &out[k], 1);
		used += record_slots(&out[k]);
		k++;
	}
	/* A record is committed whole, so used never passes avail. */
	dp_ring_release(&n->pair.cq, used <= (uint32_t)avail ? used : (uint32_t)avail);
	return k;
}

/* The ring was found empty: 1 when records came meanwhile (after an
 * armed fd's doorbell was emptied), else 0, or -ECONNRESET when the
 * service is gone (checked at most once a millisecond, a system call). */
static int notify_idle(struct dp_client *c, struct dp_notify *n)
{
	uint32_t idx;
	uint64_t t;

	/* An event loop's fd must stop reading ready once the ring is empty:
	 * empty the doorbell, then look again (what rang before the drain is
	 * on the ring now; what rings after it makes the fd ready again). */
	if (atomic_load_explicit(&n->armed, memory_order_relaxed)) {
		/* NEED_WAKEUP again, fenced: 0 when entries came meanwhile
		 * (the flag is then clear until the next empty poll). */
		if (dp_ring_prepare_sleep(&n->pair.cq)) {
			uint64_t v;

			dp_doorbell_drain(n->db);
			if (n->kick >= 0)
				(void)!read(n->kick, &v, sizeof(v));
		}
		if (dp_ring_peek(&n->pair.cq, 1, &idx))
			return 1;
	}
	t = dp_clock_ns(CLOCK_MONOTONIC_COARSE);
	if (t - n->last_check_ns < LIVENESS_EVERY_NS)
		return 0;
	n->last_check_ns = t;
	return service_alive(c) ? 0 : -ECONNRESET;
}

static int notify_poll(struct dp_client *c, struct dp_notify *n, struct dp_notification *out,
		       unsigned max)
{
	int k;

	if (!out && max)
		return -EINVAL;
	if (!max)
		return 0;
	k = notify_take(n, out, max);
	if (k)
		return k;
	k = notify_idle(c, n);
	return k > 0 ? notify_take(n, out, max) : k;
}

int dp_notify_poll(struct dp_client *c, struct dp_notification *out, unsigned max)
{
	struct dp_notify *n = notify_get(c);

	if (!n)
		return fail(C_NOTIFY_POLL, c ? -EBADF : -EINVAL);
	return fail(C_NOTIFY_POLL, notify_poll(c, n, out, max));
}

/* Sleep on the notification doorbell until it rings or `deadline` (ns,
 * UINT64_MAX: none) passes: 1 (look again), 0 (deadline passed) or
 * -ECONNRESET (the service is gone). */
static int notify_sleep(struct dp_client *c, struct dp_notify *n, uint64_t deadline)
{
	struct pollfd pfd[2] = {{.fd = n->db, .events = POLLIN},
				{.fd = c->fd, .events = POLLRDHUP}};
	uint64_t now;
	int wait_ms;

	if (!service_alive(c))
		return -ECONNRESET;
	now = dp_now_ns();
	if (now >= deadline)
		return 0;
	wait_ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
	if (!dp_ring_prepare_sleep(&n->pair.cq))
		return 1;
	poll(pfd, 2, wait_ms);
	if (!atomic_load_explicit(&n->armed, memory_order_relaxed))
		dp_ring_finish_sleep(&n->pair.cq);
	if (pfd[0].revents & POLLIN)
		dp_doorbell_drain(n->db);
	return 1;
}

int dp_notify_wait(struct dp_client *c, struct dp_notification *out, unsigned max, int timeout_ms)
{
	struct dp_notify *n = notify_get(c);
	uint64_t deadline;

	if (!n)
		return fail(C_NOTIFY_WAIT, c ? -EBADF : -EINVAL);
	if (!out || !max)
		return fail(C_NOTIFY_WAIT, -EINVAL);
	deadline = timeout_ms < 0 ? UINT64_MAX : dp_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		int k = notify_take(n, out, max);

		if (k)
			return k < 0 ? fail(C_NOTIFY_WAIT, k) : k;
		k = notify_sleep(c, n, deadline);
		if (k <= 0)
			return fail(C_NOTIFY_WAIT, k);
	}
}

/* The first record on the ring, whole: 1, 0 (none), -EMSGSIZE (its bytes
 * exceed cap; left there) or -EPROTO. */
static int recv_one(struct dp_notify *n, struct dp_notification *e, char *sender, void *msg,
		    size_t cap)
{
	const uint32_t es = DP_NOTIFY_ENTRY_SIZE;
	uint32_t idx, slots, len;
	int avail;

	avail = dp_ring_peek(&n->pair.cq, UINT32_MAX, &idx);
	if (avail <= 0)
		return avail;
	dp_ring_copy_out(&n->pair.cq, idx, e, 1);
	slots = record_slots(e);
	sender[0] = '\0';
	if (slots > (uint32_t)avail)
		return -EPROTO;
	if (e->flags & DP_NOTIFY_F_MSG) {
		len = e->msg_len;
		if (len > DP_NOTIFY_MSG_MAX)
			return -EPROTO;
		if (len > cap)
			return -EMSGSIZE;
		/* The name, then the bytes, entry by entry (the run may
		 * wrap). */
		for (uint32_t k = 1; k < slots; k++) {
			const uint8_t *p = dp_ring_slot(&n->pair.cq, idx + k);
			uint32_t at = (k - 1) * es, m;

			if (at < DP_NOTIFY_SENDER_MAX) {
				memcpy(sender, p, DP_NOTIFY_SENDER_MAX);
				sender[DP_NOTIFY_SENDER_MAX - 1] = '\0';
				m = len < es - DP_NOTIFY_SENDER_MAX ? len
								    : es - DP_NOTIFY_SENDER_MAX;
				memcpy(msg, p + DP_NOTIFY_SENDER_MAX, m);
				continue;
			}
			at -= DP_NOTIFY_SENDER_MAX;
			m = len - at < es ? len - at : es;
			memcpy((uint8_t *)msg + at, p, m);
		}
	}
	dp_ring_release(&n->pair.cq, slots);
	return 1;
}

int dp_notify_recv(struct dp_client *c, struct dp_notification *e,
		   char sender[DP_NOTIFY_SENDER_MAX], void *msg, size_t cap, int timeout_ms)
{
	struct dp_notify *n = notify_get(c);
	uint64_t deadline;

	if (!n)
		return fail(C_NOTIFY_RECV, c ? -EBADF : -EINVAL);
	if (!e || !sender || (!msg && cap))
		return null_arg(C_NOTIFY_RECV, -EINVAL);
	deadline = timeout_ms < 0 ? UINT64_MAX : dp_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		int k = recv_one(n, e, sender, msg, cap);

		if (k)
			return fail(C_NOTIFY_RECV, k);
		if (!timeout_ms) {
			/* As dp_notify_poll: the doorbell of an armed fd
			 * emptied, the service's liveness checked now and
			 * then. */
			k = notify_idle(c, n);
			return fail(C_NOTIFY_RECV, k > 0 ? recv_one(n, e, sender, msg, cap) : k);
		}
		k = notify_sleep(c, n, deadline);
		if (k <= 0)
			return fail(C_NOTIFY_RECV, k);
	}
}

static int notify_send(struct dp_client *c, int segment, const void *msg, size_t len)
{
	struct dp_msg_notify_send req = {.segment = (uint32_t)segment, .len = (uint32_t)len};
	int rc;

	if (len > DP_NOTIFY_MSG_MAX)
		return -EMSGSIZE;
	if (segment < 0)
		return -EBADF;
	if (!msg && len)
		return -EINVAL;
	/* The bytes go in a region of ours the service reads, as a queue's
	 * do (dp_proto.h); one call at a time uses it (the lock). */
	if (__atomic_load_n(&c->send_region, __ATOMIC_ACQUIRE) < 0) {
		void *buf;
		int region = alloc_(c, DP_NOTIFY_MSG_MAX, 0, &buf);

		if (region < 0)
			return region;
		pthread_mutex_lock(&c->lock);
		if (c->send_region < 0) {
			c->send_buf = buf;
			__atomic_store_n(&c->send_region, region, __ATOMIC_RELEASE);
			region = -1;
		}
		pthread_mutex_unlock(&c->lock);
		if (region >= 0)
			dp_free(c, region); /* another thread's came first */
	}
	pthread_mutex_lock(&c->lock);
	if (len)
		memcpy(c->send_buf, msg, len);
	req.region = (uint32_t)c->send_region;
	rc = rpc(c, DP_MSG_NOTIFY_SEND, &req, sizeof(req), -1, NULL, sizeof(struct dp_msg_status),
		 NULL, 0);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int dp_notify_send(struct dp_client *c, int segment, const void *msg, size_t len)
{
	if (!c)
		return null_arg(C_NOTIFY_SEND, -EINVAL);
	return fail(C_NOTIFY_SEND, notify_send(c, segment, msg, len));
}

int dp_notify_fd(struct dp_client *c)
{
	struct dp_notify *n = notify_get(c);

	if (!n)
		return fail(C_NOTIFY_FD, c ? -EBADF : -EINVAL);
	/* An event loop sleeps on the fd without dp_notify_wait: from now
	 * on every dp_notify_poll that finds the ring empty sets NEED_WAKEUP
	 * (and leaves it set) and empties the doorbell, so the fd reads ready
	 * exactly when there may be something to take. The fd is an epoll
	 * set of the doorbell and of an eventfd of ours: notifications that
	 * wait already rang no doorbell, and the eventfd makes it ready for
	 * them. Made at the first call, without the client's lock (a control
	 * call may hold it for seconds): one thread at a time takes
	 * notifications (docs/api.md), this call included. */
	if (n->epfd < 0) {
		struct epoll_event ev = {.events = EPOLLIN};
		int epfd = epoll_create1(EPOLL_CLOEXEC),
		    kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

		if (epfd < 0 || kick < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, n->db, &ev) ||
		    epoll_ctl(epfd, EPOLL_CTL_ADD, kick, &ev)) {
			int rc = -errno;

			if (epfd >= 0)
				close(epfd);
			if (kick >= 0)
				close(kick);
			return fail(C_NOTIFY_FD, rc);
		}
		n->epfd = epfd;
		n->kick = kick;
	}
	atomic_store_explicit(&n->armed, true, memory_order_relaxed);
	if (!dp_ring_prepare_sleep(&n->pair.cq)) {
		uint64_t one = 1;

		/* Entries wait (NEED_WAKEUP is clear until a poll empties
		 * the ring, as after any poll that finds some): ready. */
		(void)!write(n->kick, &one, sizeof(one));
	}
	return n->epfd;
}

int dp__queue_ring(struct dp_queue *q, struct dp_ring_pair **pair, int *sq_efd)
{
	if (!q || !pair || !sq_efd)
		return -EINVAL;
	*pair = &q->pair;
	*sq_efd = q->sq_efd;
	return 0;
}

int dp__queue_cq_doorbell(struct dp_queue *q)
{
	return q ? q->cq_efd : -EINVAL;
}

int dp_queue_stats(const struct dp_queue *q, struct dp_queue_stats *st)
{
	if (!q || !st)
		return fail(C_QUEUE_STATS, -EINVAL);
	*st = q->st;
	st->in_flight = q->in_flight;
	return 0;
}

const char *dp_strerror(int err)
{
	switch (-err) {
	case 0:
		return "success";
	case ECONNRESET:
		return "connection to the service lost (or the target's owner left)";
	case EPROTO:
		return "ring protocol violation";
	case EPROTONOSUPPORT:
		return "client and service speak different ABI versions";
	case EBADMSG:
		return "malformed message";
	case EBADF:
		return "unknown region, segment or queue handle";
	case EFAULT:
		return "bad address: offset and length fall outside the region or segment, or "
		       "dp_register_mem memory is not mapped (at registration, or unmapped since)";
	case EPERM:
		/* Several calls: dp_last_error() names the one and the cause. */
		return "not permitted: access beyond the segment's export, the region's or the "
		       "fd's mode, a path outside the service's --file-root, a memfd that "
		       "does not allow sealing, or memory the service may not read (another "
		       "uid, a process that is not dumpable)";
	case EHOSTUNREACH:
		return "peer service unreachable";
	case ECANCELED:
		return "cancelled: the service is shutting down";
	case ENODEV:
		return "no usable GPU (no device or driver here, or the service sees none)";
	case ENOTSUP:
		return "not supported: this pair of memories or this path (dp_register_mem memory "
		       "with a file, file <-> file or over the fabric, GPU memory without CUDA, "
		       "staging off: --stage-bufs 0; docs/api.md)";
	default:
		return err < 0 ? strerror(-err) : "not an error code";
	}
}
