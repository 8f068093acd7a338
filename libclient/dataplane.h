/* SPDX-License-Identifier: MIT */
/**
 * @file dataplane.h
 * The client API of dataplane: the only header applications include.
 *
 * A client connects to the host's dataplaned over a Unix socket, opens one
 * or more queue pairs (one per thread is the intended pattern), registers
 * memory, exports or opens named segments, and moves bytes by writing 64-byte
 * descriptors into its submission ring. Submission and completion make no
 * system call; dp_wait() sleeps on a doorbell only when asked to.
 *
 * Every call returns 0 (or a non-negative count/handle) on success and a
 * negative errno on failure; dp_strerror() turns one into text, and
 * dp_last_error() says what it meant for the call that failed. Nothing here
 * prints or exits.
 */
#ifndef DATAPLANE_H
#define DATAPLANE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DP_ABI_VERSION 1

/** Descriptor opcodes. WRITE copies local -> target, READ target -> local. */
enum dp_opcode {
	DP_OP_WRITE = 1,
	DP_OP_READ = 2,
	DP_OP_NOP = 3 /**< completes at once with status 0, moves nothing */
};

/** dp_desc.flags: a WRITE that carries a notification. Once its bytes are
 * in place, the client that exported the target segment receives
 * dp_desc.notify on its notification ring (dp_notify_open; docs/api.md
 * "Notifications"). Only with DP_OP_WRITE (else -EINVAL). Targets on
 * another service (fabric, same host, host staging) notify its owner too;
 * a file region on either side: -ENOTSUP. */
#define DP_DESC_F_NOTIFY 1u
/** dp_desc.flags: a WRITE or a READ that carries a notification of bytes
 * (0 to DP_NOTIFY_MSG_MAX) and the sender's name for the owner of the
 * target segment: a WRITE's once its bytes are in place, a READ's once its
 * bytes left the segment (the READ completed). Not with DP_DESC_F_NOTIFY.
 * Fill it with dp_prep_write_msg() / dp_prep_read_msg(): until dp_submit()
 * the descriptor holds the address of the caller's bytes in @c notify and
 * their length in @c submit_ns; dp_submit() copies them into a buffer of
 * the queue's that the service reads (no system call), so the caller's
 * bytes may be reused once it returns; more than DP_NOTIFY_MSG_MAX:
 * dp_submit() fails with -EMSGSIZE. docs/api.md "Notifications". */
#define DP_DESC_F_NOTIFY_MSG 2u
/** The most bytes a notification carries. */
#define DP_NOTIFY_MSG_MAX 4096
/** The size of a sender's name, NUL included (dp_notify_recv). */
#define DP_NOTIFY_SENDER_MAX 64

/**
 * A transfer descriptor: exactly 64 bytes, one ring slot. Regions and
 * segments are named by the small integer handles the service handed out;
 * no pointer crosses the trust boundary. Fields marked reserved must be 0.
 */
struct dp_desc {
	uint8_t opcode;	     /**< enum dp_opcode */
	uint8_t flags;	     /**< 0, DP_DESC_F_NOTIFY (WRITE only) or DP_DESC_F_NOTIFY_MSG */
	uint16_t reserved0;  /**< must be 0 */
	uint32_t region;     /**< local region id (dp_alloc / dp_register_fd) */
	uint64_t local_off;  /**< byte offset in the local region */
	uint32_t segment;    /**< target segment handle (dp_segment_open, dp_session_open) */
	uint32_t reserved1;  /**< must be 0 */
	uint64_t target_off; /**< byte offset in the target segment; through a
			      *   session handle, an address of its process */
	uint64_t len;	     /**< bytes to move */
	uint64_t user_data;  /**< returned untouched in the completion */
	uint64_t submit_ns;  /**< set by dp_submit (CLOCK_MONOTONIC), for latency stats */
	uint64_t notify;     /**< with DP_DESC_F_NOTIFY: the value the target's owner
			      *   receives (a request id); with DP_DESC_F_NOTIFY_MSG:
			      *   the address of the bytes (dp_prep_write_msg);
			      *   otherwise must be 0 */
};

/** A completion: exactly one per accepted descriptor. */
struct dp_cqe {
	uint64_t user_data; /**< the descriptor's user_data */
	int32_t status;	    /**< 0 or -errno (see docs/api.md) */
	uint32_t flags;	    /**< DP_CQE_F_* */
	uint64_t bytes;	    /**< bytes moved */
	uint64_t reserved;
};

/** The copy went through the local (same-service) copy engine. */
#define DP_CQE_F_LOCAL 1u
/** The transfer went through the fabric (libfabric RMA to another service). */
#define DP_CQE_F_FABRIC 2u
/** A GPU took part: a copy on the poller's stream (cudaMemcpyAsync; with
 * DP_CQE_F_LOCAL or DP_CQE_F_SAME_HOST), or this service's GPU memory over
 * the fabric (FI_HMEM RMA or host staging; with DP_CQE_F_FABRIC). */
#define DP_CQE_F_GPU 4u
/** A file took part (io_uring). */
#define DP_CQE_F_FILE 8u
/** The target was another service of this host, whose memory this service
 * mapped and copied directly: no fabric (docs/cluster.md "Same host"); with
 * DP_CQE_F_GPU when a GPU took part. DP_CQE_F_LOCAL is not set. */
#define DP_CQE_F_SAME_HOST 16u
/** A copy between two GPUs that have no peer access to each other (no
 * NVLink or PCIe peer path): the CUDA driver staged it through host
 * memory. With DP_CQE_F_GPU; never set for a copy within one GPU or
 * between peers. */
#define DP_CQE_F_GPU_STAGED 32u

/**
 * A notification: one entry of a client's notification ring, telling the
 * owner of an exported segment that a WRITE with DP_DESC_F_NOTIFY put
 * @p len bytes at @p offset of it. The bytes are in place when the
 * notification is seen. Exactly 128 bytes. One that carries bytes
 * (DP_NOTIFY_F_MSG) is followed on the ring by its sender's name and its
 * bytes, which dp_notify_recv() returns (dp_notify_poll() skips them).
 */
struct dp_notification {
	uint64_t value;	       /**< the WRITE's dp_desc.notify */
	uint64_t offset;       /**< where the bytes went in the segment */
	uint64_t len;	       /**< how many */
	uint32_t flags;	       /**< DP_NOTIFY_F_*: which path the WRITE took */
	uint32_t dropped;      /**< notifications for this client dropped because
			    *   its ring was full, from dp_notify_open to this
			    *   one; wraps at 2^32 */
	uint32_t sender;       /**< local and same-host: the sender's client id on its
			    *   service (as in ring-stat); fabric: 0 */
	uint32_t msg_len;      /**< DP_NOTIFY_F_MSG: how many bytes it carries
			    *   (0..DP_NOTIFY_MSG_MAX); otherwise 0 */
	char segment[64];      /**< the segment's name, NUL-terminated */
	uint64_t reserved2[3]; /**< 0 */
};

/** The WRITE came from a client of this service (a local copy). */
#define DP_NOTIFY_F_LOCAL 1u
/** It came through the fabric from another service. */
#define DP_NOTIFY_F_FABRIC 2u
/** It came from another service of this host that maps the export. */
#define DP_NOTIFY_F_SAME_HOST 16u
/** It carries bytes and its sender's name (DP_DESC_F_NOTIFY_MSG,
 * dp_notify_send): value is 0, msg_len says how many bytes. */
#define DP_NOTIFY_F_MSG 32u
/** It came with a READ of [offset, offset + len), which completed. */
#define DP_NOTIFY_F_READ 64u
/** It came alone (dp_notify_send): offset and len are 0. */
#define DP_NOTIFY_F_ALONE 128u

/* The layout checks, in whichever form the including language has: C++11
 * static_assert, C11 _Static_assert, else (C99) an array of size -1. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define DP__STATIC_ASSERT(e, msg, tag) static_assert(e, msg)
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define DP__STATIC_ASSERT(e, msg, tag) _Static_assert(e, msg)
#else
#define DP__STATIC_ASSERT(e, msg, tag) typedef char dp__static_assert_##tag[(e) ? 1 : -1]
#endif
DP__STATIC_ASSERT(sizeof(struct dp_desc) == 64, "descriptor is one 64-byte slot", desc);
DP__STATIC_ASSERT(sizeof(struct dp_cqe) == 32, "completion is 32 bytes", cqe);
DP__STATIC_ASSERT(sizeof(struct dp_notification) == 128, "notification is 128 bytes", notif);
#undef DP__STATIC_ASSERT

/** Segment access modes (dp_segment_export, dp_segment_open). */
#define DP_ACCESS_READ 1u
#define DP_ACCESS_WRITE 2u
#define DP_ACCESS_RW (DP_ACCESS_READ | DP_ACCESS_WRITE)

/** dp_register_file / dp_open_file flag, beside the access mode: never
 * O_DIRECT, every slice through the page cache (files read many times). */
#define DP_FILE_BUFFERED 0x100u

/** dp_alloc flags. */
#define DP_ALLOC_HUGE 1u /**< back with huge pages when the host has them */

struct dp_client;
struct dp_queue;

/** Per-queue figures kept by the client library. */
struct dp_queue_stats {
	uint64_t submitted; /**< descriptors accepted by dp_submit */
	uint64_t completed; /**< completions returned with status 0 */
	uint64_t failed;    /**< completions returned with status < 0 */
	uint64_t bytes;	    /**< bytes moved by successful completions */
	uint32_t in_flight; /**< submitted, not yet reaped */
	uint32_t depth;	    /**< queue depth (= credit limit) */
};

/**
 * Connects to the service listening on @p socket_path (NULL: the default,
 * $DP_SOCKET, else $XDG_RUNTIME_DIR/dataplane/dataplane.sock, else
 * /run/dataplane/dataplane.sock). @p name labels the client in the
 * service's logs and stats. -ENOENT/-ECONNREFUSED when no service runs,
 * -EPROTONOSUPPORT on an ABI mismatch.
 */
int dp_connect(const char *socket_path, const char *name, struct dp_client **out);

/** Closes the connection; the service frees everything the client had.
 * Queues and memory of the client must not be used afterwards. */
void dp_close(struct dp_client *c);

/** The service's identity, "host:rpc-port". */
const char *dp_server_name(const struct dp_client *c);

/**
 * Opens a queue pair of @p depth entries (power of two, 0 = the service's
 * default). At most @p depth descriptors may be in flight on it.
 */
int dp_queue_create(struct dp_client *c, uint32_t depth, struct dp_queue **out);

/** Closes a queue; completions not yet reaped are lost. */
int dp_queue_destroy(struct dp_queue *q);

/**
 * Allocates @p len bytes of memory shared with the service and registers it.
 * Returns the region id (>= 0) and the address in *@p addr.
 */
int dp_alloc(struct dp_client *c, size_t len, unsigned flags, void **addr);

/** Deregisters a region (dp_alloc, dp_register_fd, dp_register_mem,
 * dp_register_cuda, dp_register_file, dp_open_file); memory from dp_alloc is
 * unmapped here too. */
int dp_free(struct dp_client *c, int region);

/**
 * Registers bytes [@p off, @p off + @p len) of a memfd the caller owns as a
 * region (the service maps it and seals it against shrinking). The memfd
 * must allow sealing: memfd_create(name, MFD_ALLOW_SEALING), opened
 * read-write, F_SEAL_SEAL not set (or F_SEAL_SHRINK set already): without
 * the seal the file could shrink under the service's mapping. Returns the
 * region id. -EINVAL when the fd is not open, not a memfd or too short (a
 * bad fd fails the call, never the connection), -EPERM when the service
 * cannot seal it (a memfd made without MFD_ALLOW_SEALING, or a read-only
 * fd; dp_last_error() and the service's log say which). A memfd
 * that cannot be sealed can still be mapped by the caller and that mapping
 * registered with dp_register_mem().
 */
int dp_register_fd(struct dp_client *c, int fd, uint64_t off, uint64_t len);

/**
 * Registers memory this process already has, bytes [@p addr, @p addr +
 * @p len) of its address space (malloc'd memory, a numpy array, a torch CPU
 * tensor), without copying it into shared memory. The service cannot map
 * it: it reads and writes it with process_vm_readv/process_vm_writev, one
 * system call per slice of a transfer (dp_submit stays free of system
 * calls), which costs more than a region from dp_alloc (docs/api.md,
 * "Memory the caller already has"). Such a region, as the local region or
 * exported as a target, works with host memory of the service (a
 * dp_alloc/dp_register_fd region, an export of another client) or another
 * such region, notifications included; with another service of this host
 * (which is given this process's pidfd and reads and writes it itself, if
 * the kernel lets it: same uid or root; else through the fabric, or -EPERM
 * at its open without one); and over the fabric, staged through host
 * bounce buffers (no notification there). With GPU memory or a file region
 * on the other side: -ENOTSUP. The memory stays the caller's: keep it
 * mapped until dp_free(), or descriptors fail with -EFAULT; nothing here
 * pins it. Not
 * charged to the service's --max-mapped-gb-per-uid. Returns the region
 * id. -EFAULT the first or last byte is not mapped, -EPERM the service may
 * not access this process's memory (another uid and not root, Yama
 * ptrace_scope) or the process is not dumpable (refused by the library
 * itself, whatever the service's privileges), -EINVAL NULL or empty, or
 * called in a process forked after dp_connect(), -EAGAIN the service's
 * probe of the first or last byte did not return in 200 ms (the kernel
 * holds it on a page waiting for the process: an unanswered userfaultfd,
 * a FUSE server): make the pages present and call again.
 */
int dp_register_mem(struct dp_client *c, void *addr, size_t len);

/**
 * Registers GPU memory: bytes [@p ptr, @p ptr + @p len) of an allocation
 * from cudaMalloc (any pointer inside it; the service opens the
 * allocation's CUDA IPC handle), or of memory mapped with the driver's
 * cuMemCreate + cuMemMap: up to 32 physical allocations mapped side by side
 * (PyTorch's expandable segments), each created with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes (the
 * service imports each one's shareable fd and maps them the same way).
 * Copies that touch the region run as cudaMemcpyAsync on the service's
 * streams (DP_CQE_F_GPU in completions). Returns the region id; dp_free()
 * deregisters it (the memory stays the caller's: deregister before
 * cudaFree, cuMemUnmap or cuMemRelease). -ENOTSUP built without CUDA,
 * -ENODEV no GPU here or the service does not see the device, -EINVAL
 * neither kind of device memory (host, managed or pool memory), the range
 * leaves the allocation or the mapped pieces, or a piece that cannot be
 * shared (no POSIX fd handle type, another device, a 33rd piece):
 * dp_last_error() says which and, for the handle type, the allocator
 * setting.
 *
 * Ordering: the service copies in its own process, on its own streams. GPU
 * work of the caller that writes a descriptor's source, or touches its
 * destination, must be complete (cudaStreamSynchronize, cudaEventSynchronize)
 * before dp_submit; once the completion is reaped the bytes are in place for
 * any stream.
 */
int dp_register_cuda(struct dp_client *c, void *ptr, size_t len);

/**
 * Registers bytes [@p offset, @p offset + @p len) of the open file @p fd
 * (a regular file or a block device; @p len 0: to the end of the file) as
 * a file region. @p flags: the access, DP_ACCESS_READ or DP_ACCESS_RW,
 * optionally ORed with DP_FILE_BUFFERED. The service keeps its own copy of
 * the fd: the caller may close its fd afterwards. Descriptors between a
 * file region and a host region (either may be the local region or the
 * segment target) are read and written by the service through io_uring,
 * O_DIRECT where aligned (DP_CQE_F_FILE; docs/files.md). A writable
 * regular file grows when written past its end; a read-only region must
 * lie within the file. Returns the region id. -EPERM the fd's open mode
 * does not allow the access (a read-only fd for DP_ACCESS_RW), -EINVAL an
 * fd that is not open, not a regular file or block device, a range beyond
 * a read-only file, an O_APPEND fd for DP_ACCESS_RW, or bad @p flags,
 * -ENOTSUP the service has no io_uring.
 */
int dp_register_file(struct dp_client *c, int fd, uint64_t offset, uint64_t len, unsigned flags);

/**
 * As dp_register_file(), for @p path, which the service opens (as itself)
 * relative to the directory of its --file-root flag. -EPERM the path leaves
 * that directory ("..", absolute paths, symlinks that lead out of it) or
 * the service has no --file-root, -ENOENT no such file, -ENAMETOOLONG
 * 256 bytes or more.
 */
int dp_open_file(struct dp_client *c, const char *path, uint64_t offset, uint64_t len,
		 unsigned flags);

/**
 * Segment names (dp_segment_export, dp_segment_unexport, dp_segment_open):
 * 1..DP_SEGMENT_NAME_MAX bytes of [A-Za-z0-9._:/-], read as '/'-separated
 * components, none of them empty, "." or "..": no leading or trailing '/',
 * no "//", no control characters, spaces or non-ASCII bytes. Any other name
 * is -EINVAL (checked by the library and again by the service).
 */
#define DP_SEGMENT_NAME_MAX 63

/** Exports a region as the named segment, with @p access DP_ACCESS_READ or
 * DP_ACCESS_RW. -EEXIST when the name is taken (with a cluster directory:
 * by any live service of the fleet; -EHOSTUNREACH / -ETIMEDOUT when the
 * directory cannot be reached, docs/cluster.md), -EINVAL a name outside the
 * rules above or a bad @p access, -EBADF an unknown region, -EPERM an
 * access the region does not allow (a read-only file region). */
int dp_segment_export(struct dp_client *c, int region, const char *name, unsigned access);

/** Withdraws an export; descriptors already accepted on this service (or
 * mapping it on this host) finish. Another service's transfers through the
 * fabric that arrive after it fail (docs/api.md, "Errors of a descriptor"). */
int dp_segment_unexport(struct dp_client *c, const char *name);

/**
 * Opens segment @p name on @p peer ("host:port"; NULL = this service) for
 * @p access. Returns a segment handle for descriptors. -ENOENT unknown name,
 * -EPERM access not granted by the export. With @p peer NULL and a service
 * run with a cluster directory (--directory), a name not exported here is
 * looked up there and opened wherever it lives; -EHOSTUNREACH / -ETIMEDOUT
 * when the directory cannot be reached (docs/cluster.md).
 */
int dp_segment_open(struct dp_client *c, const char *peer, const char *name, unsigned access);

/** Closes a segment handle. */
int dp_segment_close(struct dp_client *c, int segment);

/*
 * Engine sessions (docs/api.md "Engine sessions"): a client's own memory,
 * addressed by its own virtual addresses, under a name "host:port" that any
 * service of the fleet can open, the way Mooncake's transfer engines and
 * NIXL agents name each other.
 */

/**
 * Makes this client a session: the service listens on TCP @p port (0: a
 * free one) for peers asking about this client's memory. Every region of
 * the client that has an address here (dp_alloc, dp_register_mem,
 * dp_register_cuda; before this call or after) is reachable through the
 * session at that address, with the access it was registered with, until
 * dp_free() or the client goes; a registration that overlaps one already
 * in the session fails -EEXIST (registered before this call: it stays out).
 * Returns the port (> 0). dp_session_name() gives the name. -EEXIST the
 * client has a session, -EADDRINUSE the port is taken, -EINVAL @p port
 * above 65535. The session ends with the client: its port closes, and
 * descriptors of other clients that name it fail -ECONNRESET.
 */
int dp_session_create(struct dp_client *c, unsigned port);

/** The client's session name, "host:port" (host: the service's host, as in
 * dp_server_name()); "" before dp_session_create(). */
const char *dp_session_name(const struct dp_client *c);

/**
 * Opens session @p session ("host:port": any client's, this one's
 * included, of this service, another service of this host, or another
 * host) for @p access, asking its port once. Returns a segment handle
 * whose descriptors' target_off is a virtual address in the session's
 * process: the range [target_off, target_off + len) must lie within one
 * of its registrations, else the descriptor fails -EFAULT (outside all of
 * them, across two, unregistered); -EPERM a registration without the
 * access; -ECONNRESET once the session's client left. The first
 * descriptor to touch a registration waits for one question to the
 * session's port; later ones do not. Completions say which path moved the
 * bytes (DP_CQE_F_LOCAL for a session of this service, DP_CQE_F_SAME_HOST,
 * DP_CQE_F_FABRIC). dp_segment_close() closes it. -EINVAL not host:port,
 * -EHOSTUNREACH nothing answers there, -ENOENT what answers is not a
 * session, -ETIMEDOUT, -EACCES (another fleet key); dp_last_error() names
 * the session.
 */
int dp_session_open(struct dp_client *c, const char *session, unsigned access);

/**
 * Submits up to @p n descriptors. Returns how many were accepted (fewer when
 * the ring or the credit is short; 0 means try after reaping), or -errno.
 * Makes no system call unless the service's poller sleeps, besides a check
 * that the service is alive at most once a millisecond (-ECONNRESET).
 */
int dp_submit(struct dp_queue *q, const struct dp_desc *descs, unsigned n);

/** Reaps up to @p max completions without blocking. Returns the count. */
int dp_poll(struct dp_queue *q, struct dp_cqe *cqes, unsigned max);

/**
 * Reaps at least one completion, sleeping on the doorbell up to
 * @p timeout_ms (-1: forever). Returns the count, 0 on timeout, -ECONNRESET
 * when the service went away.
 */
int dp_wait(struct dp_queue *q, struct dp_cqe *cqes, unsigned max, int timeout_ms);

/**
 * Opens the client's notification ring of @p entries (power of two, 0: 256;
 * at most 256 or the service's --max-depth, whichever is larger). From then on, each WRITE with
 * DP_DESC_F_NOTIFY into a segment this client exported puts one struct
 * dp_notification on it, after the WRITE's bytes are in place. A
 * notification that finds the ring full is dropped and counted
 * (dp_notification.dropped of the next one, the stats region's
 * notify_dropped); one that arrives before this call is dropped and counted
 * in the stats region only. The writer is never slowed down by either: its
 * WRITE completes as it would have. Once per client: -EEXIST the second
 * time, -EINVAL bad @p entries. A notification with n bytes takes
 * 1 + ceil((64 + n) / 128) entries (34 for DP_NOTIFY_MSG_MAX); one that
 * does not fit whole is dropped. docs/api.md "Notifications".
 */
int dp_notify_open(struct dp_client *c, uint32_t entries);

/** Takes up to @p max notifications without blocking (of one that carries
 * bytes, DP_NOTIFY_F_MSG, the entry only: dp_notify_recv() returns the
 * bytes and the sender's name). Returns the count,
 * -EBADF without dp_notify_open, -ECONNRESET when the service went away
 * (checked at most once a millisecond when there is nothing to take). One
 * thread at a time. */
int dp_notify_poll(struct dp_client *c, struct dp_notification *out, unsigned max);

/** As dp_notify_poll(), sleeping on the notification doorbell up to
 * @p timeout_ms (-1: forever) until at least one arrives. Returns the
 * count, 0 on timeout, -ECONNRESET when the service went away. */
int dp_notify_wait(struct dp_client *c, struct dp_notification *out, unsigned max, int timeout_ms);

/** The notification doorbell, for an event loop: readable (POLLIN) when
 * notifications may have arrived, those already waiting when it is called
 * included. Read them with dp_notify_poll() until it returns 0, then wait
 * on the fd again; never read the fd itself (the library drains it; it is
 * an epoll set of the doorbell and an eventfd of the library's).
 * -EBADF without dp_notify_open. The fd stays the library's: do not close
 * it. */
int dp_notify_fd(struct dp_client *c);

/**
 * Takes one notification, of either form, sleeping on the notification
 * doorbell up to @p timeout_ms (0: never sleeps; -1: forever): the entry
 * into *@p n, and for one with DP_NOTIFY_F_MSG its sender's name into
 * @p sender (NUL-terminated; "" for the 64-bit form) and its n->msg_len
 * bytes into @p msg. The sender's name is its client's session name when
 * it has one, else "<server name>/<client id>" of its service. Returns 1,
 * 0 when none came, -EBADF without dp_notify_open, -EMSGSIZE when
 * @p cap is less than its msg_len (*@p n filled, the notification left on
 * the ring: call again with DP_NOTIFY_MSG_MAX bytes), -ECONNRESET when the
 * service went away. One thread at a time, as dp_notify_poll().
 */
int dp_notify_recv(struct dp_client *c, struct dp_notification *n,
		   char sender[DP_NOTIFY_SENDER_MAX], void *msg, size_t cap, int timeout_ms);

/**
 * Sends a notification of @p len bytes (0..DP_NOTIFY_MSG_MAX) alone, with
 * no transfer, to the owner of the segment behind handle @p segment
 * (dp_segment_open, any access), on this service, another of this host or
 * one across the fabric: DP_NOTIFY_F_ALONE | DP_NOTIFY_F_MSG on its ring.
 * A notification of this client's queues whose descriptor completed
 * before this call reaches the same owner before this one. Returns 0 once
 * the service took it: put on the ring or dropped (ring full, no ring),
 * or, for another service's segment, on its way (lost and counted if that
 * service does not answer, as for a WRITE's). -EMSGSIZE more than
 * DP_NOTIFY_MSG_MAX bytes, -EBADF an unknown handle, -ECONNRESET the
 * segment is gone, -EINVAL NULL @p msg with @p len.
 */
int dp_notify_send(struct dp_client *c, int segment, const void *msg, size_t len);

/** Fills @p st with the queue's figures. */
int dp_queue_stats(const struct dp_queue *q, struct dp_queue_stats *st);

/** Text for a negative errno returned by this API, the same for every call
 * (an errno can mean different things to different calls: see
 * dp_last_error()). */
const char *dp_strerror(int err);

/**
 * What the last call of this thread that failed was and what its errno
 * means for that call, e.g. "dp_open_file: the path is outside the
 * service's --file-root ... (EPERM)". "" before any failure. Like errno, a
 * call that succeeds leaves it alone. Thread-local; valid until this
 * thread's next failing call.
 */
const char *dp_last_error(void);

/*
 * dp_prep_write() and dp_prep_read() are exported functions of the library
 * (for callers that cannot use inline functions: ctypes, other FFIs) and, in
 * C99 and later and in C++, inline functions of the same name: a C or C++
 * caller gets the body inlined and links against the exported copy only
 * where the compiler chose not to inline. docs/api.md, "Preparing
 * descriptors".
 */
#if defined(__cplusplus) || !defined(__GNUC_GNU_INLINE__)
#define DP__INLINE inline /* C99 / C++ inline; libclient/queue.c emits the symbol */
#else
#define DP__INLINE extern inline /* gnu89 inline: the same meaning, other words */
#endif

/** Fills a WRITE descriptor (local region -> target segment); every other
 * field is 0. */
DP__INLINE void dp_prep_write(struct dp_desc *d, int region, uint64_t local_off, int segment,
			      uint64_t target_off, uint64_t len, uint64_t user_data)
{
	/* Field by field (there is no padding): the subset of C and C++
	 * that both accept, no designated initialisers. */
	d->opcode = (uint8_t)DP_OP_WRITE;
	d->flags = 0;
	d->reserved0 = 0;
	d->region = (uint32_t)region;
	d->local_off = local_off;
	d->segment = (uint32_t)segment;
	d->reserved1 = 0;
	d->target_off = target_off;
	d->len = len;
	d->user_data = user_data;
	d->submit_ns = 0;
	d->notify = 0;
}

/** As dp_prep_write(), and the WRITE carries a notification of @p value to
 * the owner of the target segment (DP_DESC_F_NOTIFY). */
DP__INLINE void dp_prep_write_notify(struct dp_desc *d, int region, uint64_t local_off, int segment,
				     uint64_t target_off, uint64_t len, uint64_t user_data,
				     uint64_t value)
{
	dp_prep_write(d, region, local_off, segment, target_off, len, user_data);
	d->flags = (uint8_t)DP_DESC_F_NOTIFY;
	d->notify = value;
}

/** Fills a READ descriptor (target segment -> local region); every other
 * field is 0. */
DP__INLINE void dp_prep_read(struct dp_desc *d, int region, uint64_t local_off, int segment,
			     uint64_t target_off, uint64_t len, uint64_t user_data)
{
	dp_prep_write(d, region, local_off, segment, target_off, len, user_data);
	d->opcode = (uint8_t)DP_OP_READ;
}

/** As dp_prep_write(), and the WRITE carries @p msg_len bytes at @p msg
 * and the sender's name to the owner of the target segment
 * (DP_DESC_F_NOTIFY_MSG). @p msg must stay valid until dp_submit() took
 * the descriptor, which copies the bytes. */
DP__INLINE void dp_prep_write_msg(struct dp_desc *d, int region, uint64_t local_off, int segment,
				  uint64_t target_off, uint64_t len, uint64_t user_data,
				  const void *msg, size_t msg_len)
{
	dp_prep_write(d, region, local_off, segment, target_off, len, user_data);
	d->flags = (uint8_t)DP_DESC_F_NOTIFY_MSG;
	d->notify = (uint64_t)(uintptr_t)msg;
	d->submit_ns = (uint64_t)msg_len;
}

/** As dp_prep_read(), with a notification of bytes as dp_prep_write_msg():
 * the owner of the target segment gets it once the READ completed. */
DP__INLINE void dp_prep_read_msg(struct dp_desc *d, int region, uint64_t local_off, int segment,
				 uint64_t target_off, uint64_t len, uint64_t user_data,
				 const void *msg, size_t msg_len)
{
	dp_prep_write_msg(d, region, local_off, segment, target_off, len, user_data, msg, msg_len);
	d->opcode = (uint8_t)DP_OP_READ;
}
#undef DP__INLINE

#ifdef __cplusplus
}
#endif
#endif /* DATAPLANE_H */
