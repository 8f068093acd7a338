/* SPDX-License-Identifier: MIT */
/*
 * client_internal.h - what libclient's files share: the client, its queues
 * and its notification ring as the library keeps them, the control channel
 * (control.c), the error texts (errors.c), the regions the data path makes
 * for itself (region.c). Not installed and not for inclusion outside
 * libclient/; every function here is hidden from the shared library's users
 * (libdataplane.map exports dataplane.h's calls alone) and prefixed dp__ so
 * that a program linked with the static library keeps its own names.
 */
#ifndef DP_CLIENT_INTERNAL_H
#define DP_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dataplane.h"
#include "dp_proto.h"
#include "dp_ring.h"

#define MAX_ALLOCS 1024
#define LIVENESS_EVERY_NS 1000000ull /* dp_submit and idle dp_poll check the socket this often */

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

/* The calls, for the error texts (errors.c): dp_last_error() names the call
 * and says what its errno means for it. */
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

#pragma GCC visibility push(hidden)

/* ---- errors.c ---- */

/* Records why `call` failed with `err` (< 0) for dp_last_error(): `text`,
 * or dp_strerror's when NULL; returns `err`. */
int dp__fail_text(enum call call, int err, const char *text);

/* dp__fail_text with the call's own text for `err` (else the text every
 * call shares); passes a success (err >= 0) through untouched. */
int dp__fail(enum call call, int err);

/* A NULL pointer where `call` needs one: `err` (-EINVAL, or -EBADF for the
 * calls that say so), with that as the reason. */
int dp__null_arg(enum call call, int err);

/* The call's own text for `err`, NULL when it has none. */
const char *dp__call_text(enum call call, int err);

/* ---- control.c: the control socket ---- */

/*
 * One request and its reply (control.c says how a late reply is told from
 * the current one): the reply's status, -ECONNRESET when the service is
 * gone, -ETIMEDOUT when it did not answer in time. dp__rpc_fds and dp__rpc
 * are called under c->lock (or before the client is shared); the _locked
 * ones take it. dp__rpc sends one fd, none when fd_in < 0.
 */
int dp__rpc_fds(struct dp_client *c, uint16_t type, const void *req, size_t len, const int *fds_in,
		int nfds_in, void *reply, size_t rlen, int *fds_out, int nfds_out);
int dp__rpc(struct dp_client *c, uint16_t type, const void *req, size_t len, int fd_in, void *reply,
	    size_t rlen, int *fds_out, int nfds_out);
int dp__rpc_locked_fds(struct dp_client *c, uint16_t type, const void *req, size_t len,
		       const int *fds_in, int nfds_in, void *reply, size_t rlen, int *fds_out,
		       int nfds_out);
int dp__rpc_locked(struct dp_client *c, uint16_t type, const void *req, size_t len, int fd_in,
		   void *reply, size_t rlen, int *fds_out, int nfds_out);

/* Whether the service still holds its end of the control socket (a
 * system call: callers on the data path rate-limit it). */
bool dp__service_alive(struct dp_client *c);

static inline void set_dead(struct dp_client *c)
{
	atomic_store_explicit(&c->dead, true, memory_order_relaxed);
}

static inline bool is_dead(const struct dp_client *c)
{
	return atomic_load_explicit(&c->dead, memory_order_relaxed);
}

/* ---- region.c ---- */

/* dp_alloc without its error text: the region, or -errno. The data path's
 * message buffers are made with it. */
int dp__alloc(struct dp_client *c, size_t len, unsigned flags, void **addr);

/* ---- segment.c ---- */

/* A peer ("" allowed) into its field; a segment name must also keep the
 * rules of dp_proto_segment_name_ok() (the service checks them too). */
int dp__copy_name(char *dst, size_t cap, const char *src, bool segment);

/* ---- queue.c, notify.c: what dp_close frees ---- */

void dp__queue_unmap(struct dp_queue *q);
void dp__notify_free(struct dp_notify *n);

#pragma GCC visibility pop

#endif /* DP_CLIENT_INTERNAL_H */
