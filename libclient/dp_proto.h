/* SPDX-License-Identifier: MIT */
/*
 * dp_proto.h - the control protocol between libclient and dataplaned.
 * Internal: shared by libclient/ and dataplane/, not for applications.
 *
 * Transport: a SOCK_SEQPACKET Unix socket, so one message is one packet.
 * Every message is a dp_msg_hdr followed by exactly the payload its type
 * defines; a packet of any other length is malformed (-EBADMSG). Replies carry
 * the request's type with DP_MSG_REPLY set, the request's seq, and start with
 * an int32 status (0 or -errno). File descriptors travel with SCM_RIGHTS:
 * QUEUE_CREATE replies carry three (ring memfd, SQ doorbell, CQ doorbell:
 * the client's ends of two SOCK_DGRAM socketpairs, docs/ring.md),
 * REGION_REGISTER requests carry one (the memfd), REGION_REGISTER_CUDA_VMM
 * requests one per piece (1 .. DP_CUDA_VMM_MAX_PIECES), NOTIFY_OPEN replies
 * two (ring memfd, notification doorbell). Layout: docs/api.md.
 */
#ifndef DP_PROTO_H
#define DP_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define DP_PROTO_MAGIC 0x4c504444u /* "DDPL" */
/* 2: the doorbells are the client's ends of socketpairs (docs/ring.md)
 * 3: the queue rings carry sequence words (DP_SQ_SEQ_OFF, DP_CQ_SEQ_OFF) */
#define DP_PROTO_VERSION 3u
#define DP_MSG_MAX 1024u /* 512 before REGION_REGISTER_CUDA_VMM */
#define DP_NAME_MAX 64u	 /* segment names and peers, NUL included */
#define DP_MSG_REPLY 0x8000u

/*
 * A queue's rings have sequence words (ring/dp_ring.h, docs/ring.md): in an
 * SQ slot the descriptor's reserved1 (dp_submit folds a caller's nonzero
 * reserved1 into reserved0, which the service refuses the same way), in a
 * CQ slot the high half of the completion's reserved (little-endian). A
 * consumer's copies read 0 there.
 */
#define DP_SQ_SEQ_OFF 20u
#define DP_CQ_SEQ_OFF 28u

/*
 * A segment name (dataplane.h, docs/api.md): 1..DP_NAME_MAX - 1 bytes of
 * [A-Za-z0-9._:/-], read as '/'-separated components none of which is
 * empty, "." or "..": no leading or trailing '/', no "//". Both sides check
 * it, libclient before sending and the service in ctlmsg.c; @cap bounds the
 * scan (a fixed field need not hold a NUL).
 */
static inline int dp_proto_segment_name_ok(const char *s, size_t cap)
{
	size_t n, comp = 0; /* bytes of the current component */
	int dots = 0;	    /* it is all dots so far */

	for (n = 0; n < cap && s[n]; n++) {
		char ch = s[n];

		if (ch == '/') {
			if (!comp || (dots && comp <= 2))
				return 0;
			comp = 0;
			continue;
		}
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == ':' || ch == '-'))
			return 0;
		dots = comp ? dots && ch == '.' : ch == '.';
		comp++;
	}
	if (n == cap || n >= DP_NAME_MAX || !comp || (dots && comp <= 2))
		return 0;
	return 1;
}

enum dp_msg_type {
	DP_MSG_HELLO = 1,
	DP_MSG_QUEUE_CREATE = 2,
	DP_MSG_QUEUE_DESTROY = 3,
	DP_MSG_REGION_REGISTER = 4,
	DP_MSG_REGION_FREE = 5,
	DP_MSG_SEGMENT_EXPORT = 6,
	DP_MSG_SEGMENT_UNEXPORT = 7,
	DP_MSG_SEGMENT_OPEN = 8,
	DP_MSG_SEGMENT_CLOSE = 9,
	DP_MSG_REGION_REGISTER_CUDA = 10, /* gpu.c: a CUDA IPC handle */
	DP_MSG_REGION_REGISTER_FILE = 11, /* file.c: an fd */
	DP_MSG_REGION_OPEN_PATH = 12,	  /* file.c: a path under --file-root */
	DP_MSG_REGION_REGISTER_MEM = 13,  /* vm.c: memory of the client process */
	DP_MSG_NOTIFY_OPEN = 14,	  /* notif.c: the client's notification ring */
	DP_MSG_NOTIFY_SEND = 15,	  /* notif.c: a notification alone (dp_notify_send) */
	DP_MSG_SESSION_CREATE = 17,	  /* session.c: the client's engine session */
	DP_MSG_SESSION_ADD = 18,	  /* session.c: a region at its address, in the session */
	DP_MSG_SESSION_OPEN = 19,	  /* session.c: a handle on another engine's session */
	DP_MSG_REGION_REGISTER_CUDA_VMM = 16, /* gpu.c: cuMemMap'ed pieces, one fd each */
};

struct dp_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len; /* payload bytes after this header */
	uint32_t seq;
};

struct dp_msg_hello {
	uint32_t abi_version; /* DP_ABI_VERSION of the client */
	uint32_t pid;
	char name[32];
};
struct dp_msg_hello_reply {
	int32_t status;
	uint32_t abi_version;
	uint32_t default_depth;
	uint32_t max_depth;
	char server_name[DP_NAME_MAX];
};

struct dp_msg_queue_create {
	uint32_t depth; /* 0 = default */
	uint32_t reserved;
};
struct dp_msg_queue_create_reply {
	int32_t status;
	uint32_t queue_id;
	uint32_t depth;
	uint32_t flags; /* DP_QUEUE_F_* */
};
/* The service's pollers arm this queue's SQ with membarrier(2) before they
 * sleep: a client registered for it may skip the fence after its commit
 * (docs/ring.md, "Light producers"). A service that leaves it out (0, as
 * before) needs the fence. */
#define DP_QUEUE_F_SQ_MEMBARRIER 1u

/*
 * NOTIFY_OPEN: the client's notification ring (dp_notify_open). The reply
 * carries two fds: the ring pair's memfd (a 1-entry SQ of 8 bytes, unused,
 * and the notification ring as its CQ, struct dp_notification entries;
 * docs/ring.md) and the client's end of the notification doorbell.
 */
struct dp_msg_notify_open {
	uint32_t entries; /* 0 = DP_NOTIFY_DEFAULT_ENTRIES; else a power of two */
	uint32_t reserved;
};
struct dp_msg_notify_open_reply {
	int32_t status;
	uint32_t entries;
};
#define DP_NOTIFY_DEFAULT_ENTRIES 256u

/*
 * Notifications with bytes (DP_DESC_F_NOTIFY_MSG, dp_notify_send).
 *
 * The bytes travel in memory of the client's that the service maps, never
 * in the descriptor: in an SQ slot, a descriptor with DP_DESC_F_NOTIFY_MSG
 * has notify = DP_NOTIFY_MSG_REF(region, offset, len), the bytes at
 * `offset` of host region `region` of the same client. dp_submit copies a
 * caller's bytes into its queue's message buffer (a dp_alloc region of
 * depth * DP_NOTIFY_MSG_MAX bytes, made at the first such descriptor),
 * into the slot of the descriptor's SQ index modulo depth. The service
 * copies them out when it takes the descriptor, and it takes descriptors
 * in SQ order, so once k completions of a queue were reaped its first k
 * descriptors were taken: the queue's credit (depth in flight) keeps a
 * slot from being rewritten before the service copied it.
 *
 * NOTIFY_SEND names the bytes the same way (a region of the client's that
 * the library keeps for it) and the segment handle to notify.
 *
 * On the notification ring a DP_NOTIFY_F_MSG entry is followed by
 * DP_NOTIFY_MSG_SLOTS(msg_len) - 1 entries that hold, as plain bytes, the
 * sender's name (DP_NOTIFY_SENDER_MAX, NUL-padded) and then the msg_len
 * bytes; the service commits them together with the first, and a full
 * ring drops the whole record.
 */
#define DP_NOTIFY_MSG_REF(region, off, len)                                                        \
	((uint64_t)(region) << 48 | (uint64_t)(len) << 32 | (uint64_t)(uint32_t)(off))
#define DP_NOTIFY_MSG_REGION(ref) ((uint32_t)((ref) >> 48))
#define DP_NOTIFY_MSG_LEN(ref) ((uint32_t)((ref) >> 32) & 0xffffu)
#define DP_NOTIFY_MSG_OFF(ref) ((uint32_t)(ref))
#define DP_NOTIFY_ENTRY_SIZE 128u /* sizeof(struct dp_notification) */
#define DP_NOTIFY_MSG_SLOTS(len)                                                                   \
	(1u + (64u + (uint32_t)(len) + DP_NOTIFY_ENTRY_SIZE - 1) / DP_NOTIFY_ENTRY_SIZE)

struct dp_msg_notify_send {
	uint32_t segment; /* a segment handle of the client's */
	uint32_t region;  /* the bytes: a host region of the client's */
	uint32_t offset;
	uint32_t len; /* 0..DP_NOTIFY_MSG_MAX */
};
/* The reply: a struct dp_msg_status. */

struct dp_msg_id {
	uint32_t id;
	uint32_t reserved;
};

struct dp_msg_region_register {
	uint64_t offset; /* into the memfd */
	uint64_t len;
};

struct dp_msg_segment_export {
	uint32_t region;
	uint32_t access;
	char name[DP_NAME_MAX];
};

struct dp_msg_segment_name {
	char name[DP_NAME_MAX];
};

struct dp_msg_segment_open {
	uint32_t access;
	uint32_t reserved;
	char peer[DP_NAME_MAX]; /* "" = this service */
	char name[DP_NAME_MAX];
};

/*
 * REGION_REGISTER_CUDA: bytes [offset, offset + len) of a cudaMalloc
 * allocation, exported with cudaIpcGetMemHandle (which names the whole
 * allocation). The device is named by its UUID: ordinals differ between
 * processes (CUDA_VISIBLE_DEVICES). No fd travels. Reply: dp_msg_id_reply.
 */
struct dp_msg_region_register_cuda {
	uint8_t handle[64]; /* cudaIpcMemHandle_t */
	uint8_t uuid[16];   /* cudaDeviceProp.uuid of the allocation's device */
	uint64_t offset;    /* of the first byte in the allocation */
	uint64_t len;
	int32_t device;	   /* the client's ordinal, for logs only */
	uint32_t reserved; /* must be 0 */
};

/*
 * REGION_REGISTER_CUDA_VMM: bytes [offset, offset + len) of a range of GPU
 * memory mapped with the driver's virtual memory calls (cuMemCreate +
 * cuMemMap), made of `npieces` physical allocations mapped side by side:
 * piece i covers [piece[i].offset, piece[i].offset + piece[i].size) of the
 * range, and its allocation travels as the i-th fd (SCM_RIGHTS, from
 * cuMemExportToShareableHandle(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)).
 * The pieces tile the range from 0 without a gap (dp_proto_cuda_vmm_ok).
 * The service imports them, maps them side by side in a range of its own
 * and makes one GPU region of it. Reply: dp_msg_id_reply.
 */
#define DP_CUDA_VMM_MAX_PIECES 32u
struct dp_cuda_vmm_piece {
	uint64_t offset; /* in the range: the sum of the sizes before it */
	uint64_t size;	 /* bytes of the piece's mapping (from its allocation's start) */
};
struct dp_msg_region_register_cuda_vmm {
	uint8_t uuid[16]; /* cudaDeviceProp.uuid of the pieces' device */
	uint64_t offset;  /* of the first byte in the range (in piece 0) */
	uint64_t len;
	int32_t device;	  /* the client's ordinal, for logs only */
	uint32_t npieces; /* 1 .. DP_CUDA_VMM_MAX_PIECES, as many fds */
	struct dp_cuda_vmm_piece piece[DP_CUDA_VMM_MAX_PIECES]; /* unused ones 0 */
};

/* The fields of a REGION_REGISTER_CUDA_VMM description (the service checks
 * them in ctlmsg.c, and again on one that comes from a service of this
 * host): 1 .. DP_CUDA_VMM_MAX_PIECES pieces of nonzero size tiling the range
 * from 0, unused slots 0, a nonzero len that ends inside the last piece and
 * begins in the first. */
static inline int dp_proto_cuda_vmm_ok(const struct dp_msg_region_register_cuda_vmm *m)
{
	uint64_t end = 0;

	if (!m->npieces || m->npieces > DP_CUDA_VMM_MAX_PIECES || !m->len)
		return 0;
	for (uint32_t i = 0; i < DP_CUDA_VMM_MAX_PIECES; i++) {
		const struct dp_cuda_vmm_piece *p = &m->piece[i];

		if (i >= m->npieces) {
			if (p->offset || p->size)
				return 0;
			continue;
		}
		if (p->offset != end || !p->size || end + p->size < end)
			return 0;
		end += p->size;
	}
	return m->offset < m->piece[0].size && m->len <= end - m->offset &&
	       m->offset + m->len > end - m->piece[m->npieces - 1].size;
}

/*
 * REGION_REGISTER_FILE (one fd travels: the file) and REGION_OPEN_PATH (no
 * fd; a relative path the service opens beneath its --file-root): bytes
 * [offset, offset + len) of a file, len 0 = to the end of the file.
 * Reply: dp_msg_id_reply. See file.h.
 */
struct dp_msg_region_file {
	uint64_t offset;
	uint64_t len;
	uint32_t access;   /* DP_ACCESS_READ or DP_ACCESS_RW, | DP_FILE_BUFFERED */
	uint32_t reserved; /* must be 0 */
};
#define DP_PATH_MAX 256u /* dp_open_file paths, NUL included */
struct dp_msg_region_path {
	struct dp_msg_region_file file;
	char path[DP_PATH_MAX];
};

/*
 * REGION_REGISTER_MEM: bytes [addr, addr + len) of the address space of the
 * process that connected (its pid is the connection's SO_PEERCRED, never a
 * field of a message). No fd travels. Reply: dp_msg_id_reply. See vm.h.
 */
struct dp_msg_region_register_mem {
	uint64_t addr;
	uint64_t len;
};

/*
 * Engine sessions (session.h, docs/api.md "Engine sessions").
 * SESSION_CREATE: the service listens on one more TCP port (port, 0: any)
 * for peers asking about this client's memory; the reply names it
 * "host:port". SESSION_ADD: region `region` of the client is at `addr` in
 * its address space, and peers may reach it there (the library sends one
 * per region that has an address: dp_alloc, dp_register_mem,
 * dp_register_cuda). SESSION_OPEN: a handle (as SEGMENT_OPEN's) on the
 * session `session` names, whose descriptors' target_off is a virtual
 * address of that session's process. Reply: dp_msg_id_reply, len 0.
 */
struct dp_msg_session_create {
	uint32_t port; /* 0: any free port; else 1..65535 */
	uint32_t reserved;
};
struct dp_msg_session_reply {
	int32_t status;
	uint32_t port;
	char name[DP_NAME_MAX];
};
struct dp_msg_session_add {
	uint32_t region;
	uint32_t reserved;
	uint64_t addr;
};
struct dp_msg_session_open {
	uint32_t access;
	uint32_t reserved;
	char session[DP_NAME_MAX]; /* "host:port" */
};

/* Reply of REGION_REGISTER and SEGMENT_OPEN: the new id plus the size. */
struct dp_msg_id_reply {
	int32_t status;
	uint32_t id;
	uint64_t len;
	uint32_t access;
	uint32_t reserved;
};

/* Reply with nothing but a status. */
struct dp_msg_status {
	int32_t status;
	uint32_t reserved;
};

#endif /* DP_PROTO_H */
