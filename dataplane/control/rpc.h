/* SPDX-License-Identifier: MIT */
/*
 * rpc.h - the peer protocol: how one dataplaned asks another, over TCP, for
 * the description of a segment it exports. One request and one reply per
 * connection, fixed sizes, every field checked on both ends.
 *
 * Both ends run on the control thread's epoll loop and never wait on the
 * network there: the server serves each connection as its bytes come
 * (non-blocking, a deadline per connection, a cap on connections), and a
 * lookup is a non-blocking exchange that reports through a callback.
 */
#ifndef DP_RPC_H
#define DP_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "fabric.h"
#include "samehost.h"

#define DP_RPC_MAGIC 0x50525044u /* "DPRP" */
/* 2: every lookup authenticated (auth.h); 3: same host; 4: notifications
 * carry bytes and the sender's name (struct dp_rpc_notify), engine sessions */
#define DP_RPC_VERSION 4u
#define DP_RPC_LOOKUP 1u
#define DP_RPC_CHALLENGE 2u
/* Notifications for exports of the server (notif.h): a batch, answered
 * with a lookup reply that carries only its status. */
#define DP_RPC_NOTIFY 3u
#define DP_RPC_NOTIFY_MAX 16	   /* notifications per request */
#define DP_RPC_NOTIFY_BYTES 32768u /* their entries and bytes, per request */
#define DP_RPC_REPLY 0x8000u
#define DP_RPC_TIMEOUT_MS 2000	 /* a lookup, connect to reply */
#define RPC_SERVE_TIMEOUT_MS 500 /* a served connection, accept to reply */
#define RPC_MAX_CONNS 64	 /* served connections at once; one more evicts the oldest */
#define RPC_MAX_CALLS 256	 /* lookups in flight; one more fails -EAGAIN */
#define RPC_MAX_RESOLVING 64	 /* host names being resolved; one more fails -EAGAIN */
#define DP_RPC_F_VIRT_ADDR 1u	 /* targets are virtual addresses, not offsets */
#define DP_RPC_F_SAME_HOST 2u	 /* host_id and local_path are set (samehost.h) */
/* The export is GPU memory its owner could not register on its rails (no
 * FI_HMEM there; with --stage-host, host memory standing in for it): the
 * keys mean nothing, and transfers to it through the fabric fail with
 * -ENOTSUP, not -ENOENT (the owner does not stage for its peers); a
 * service of the same host maps it instead (samehost.h). */
#define DP_RPC_F_GPU_UNREGISTERED 4u
/* With DP_RPC_F_GPU_UNREGISTERED: the owner stages it for its peers
 * through its own bounce buffers (stage.c, struct dp_stage_req below):
 * `base` is the export's staging id and every rail's key its secret,
 * which a request must carry. Without this flag, -ENOTSUP as above. */
#define DP_RPC_F_OWNER_STAGES 8u
/* An engine session's port answered (session.h): `va` and `member` are
 * set when the answer describes one of its registrations; its answer to
 * "@" (is this a session?) describes the first, if any, and says in
 * `members` how many there are ("@#<i>" asks for the i-th). */
#define DP_RPC_F_SESSION 16u
#define DP_RPC_F_ALL                                                                               \
	(DP_RPC_F_VIRT_ADDR | DP_RPC_F_SAME_HOST | DP_RPC_F_GPU_UNREGISTERED |                     \
	 DP_RPC_F_OWNER_STAGES | DP_RPC_F_SESSION)
#define DP_RPC_Q_SAME_HOST 1u /* request: the asker is on this host, send the memory */

struct dp_rpc_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len; /* payload bytes after this header */
	uint32_t reserved;
};

/* The server speaks first: a fresh nonce. */
struct dp_rpc_challenge {
	uint8_t nonce[DP_AUTH_NONCE];
};

/* One notification: the export by name, and what its owner is told; in a
 * request it is followed by its msg_len bytes, then zeros up to a multiple
 * of 8 (DP_RPC_NOTIFY_ENTRY_LEN). */
struct dp_rpc_notify_entry {
	char segment[DP_NAME_MAX];
	char sender_name[DP_NAME_MAX]; /* DP_NOTIFY_F_MSG: NUL-terminated; else zeros */
	uint64_t value, offset, len;
	uint32_t sender;  /* the writer's client id on its service (same host) */
	uint32_t flags;	  /* DP_NOTIFY_F_FABRIC or DP_NOTIFY_F_SAME_HOST, and what
			   * it carries: DP_NOTIFY_F_MSG, _READ, _ALONE */
	uint32_t msg_len; /* DP_NOTIFY_F_MSG: 0..DP_NOTIFY_MSG_MAX; else 0 */
	uint32_t reserved;
};
#define DP_RPC_NOTIFY_ENTRY_LEN(msg_len)                                                           \
	(sizeof(struct dp_rpc_notify_entry) + (((size_t)(msg_len) + 7) & ~(size_t)7))

/* On the wire the header's len is offsetof(data) + bytes: a request is as
 * long as its entries. mac = HMAC(fleet key, "dp-rpc notify", server
 * nonce, nonce, count, bytes, data[0, bytes)). */
struct dp_rpc_notify {
	uint8_t nonce[DP_AUTH_NONCE];
	uint8_t mac[DP_AUTH_MAC];
	uint32_t count; /* 1..DP_RPC_NOTIFY_MAX entries */
	uint32_t bytes; /* of data[] they fill, exactly */
	uint8_t data[DP_RPC_NOTIFY_BYTES];
};
/* The shortest and longest requests' len. */
#define DP_RPC_NOTIFY_LEN_MIN                                                                      \
	(offsetof(struct dp_rpc_notify, data) + sizeof(struct dp_rpc_notify_entry))
#define DP_RPC_NOTIFY_LEN_MAX sizeof(struct dp_rpc_notify)

struct dp_rpc_rail {
	uint32_t addr_len;
	uint32_t reserved;
	uint64_t key;
	uint8_t addr[DP_FABRIC_ADDR_MAX];
};

/* mac = HMAC(fleet key, "dp-rpc lookup", server nonce, nonce, every byte
 * before `nonce`). flags: DP_RPC_Q_*; host_id: the asker's (samehost.h);
 * server_name and rail[]: the asker and its fabric addresses (keys 0),
 * which the server inserts into its address vectors, so that providers
 * whose target must know its initiator (efa-direct) can be used. */
struct dp_rpc_lookup {
	char name[DP_NAME_MAX];
	uint32_t flags;
	uint32_t reserved;
	uint8_t host_id[DP_HOST_ID_LEN];
	char server_name[DP_NAME_MAX];
	uint32_t nrails;
	uint32_t reserved2;
	struct dp_rpc_rail rail[DP_MAX_RAILS];
	uint8_t nonce[DP_AUTH_NONCE];
	uint8_t mac[DP_AUTH_MAC];
};

/* On the wire a reply is followed by its MAC: HMAC(fleet key, "dp-rpc
 * reply", the lookup's nonce, the server's nonce, the reply), so a reply is
 * believed only from a holder of the key, for this lookup alone. The
 * cluster directory stores replies without it (directory.c). */
struct dp_rpc_lookup_reply {
	int32_t status;
	uint32_t access;
	uint64_t len;
	uint64_t base;
	uint32_t nrails;
	uint32_t flags;
	char server_name[DP_NAME_MAX];
	struct dp_rpc_rail rail[DP_MAX_RAILS];
	/* DP_RPC_F_SAME_HOST: the server's host (its boot id) and the Unix
	 * socket a service of that host asks again on (DP_RPC_Q_SAME_HOST) to
	 * be given the memory itself (samehost.h). */
	uint8_t host_id[DP_HOST_ID_LEN];
	char local_path[DP_SUN_PATH_MAX];
	struct dp_samehost_desc same; /* only in a reply to DP_RPC_Q_SAME_HOST */
	/* DP_RPC_F_SESSION: where the registration starts in the session's
	 * process, and the export of the server (its server_name) that
	 * stands for it. */
	uint64_t va;
	char member[DP_NAME_MAX];
	uint32_t members; /* the answer to "@": how many registrations */
	uint32_t reserved3;
};

/*
 * Owner staging, over the fabric itself (FI_MSG on the rails, stage.c): an
 * initiator asks the owner of a DP_RPC_F_OWNER_STAGES export to move one
 * slice between the export and the initiator's own bounce buffer, which it
 * registered for remote access. The owner receives on its first poller's
 * endpoints and does the RMA itself, into or out of its own bounce buffer
 * (WRITE: it reads the initiator's buffer, then copies into the export;
 * READ: it copies out of the export, then writes the initiator's buffer),
 * then writes a struct dp_stage_status (seq, status) to status_addr.
 * Addresses are what the provider addresses on the initiator's buffer (its
 * virtual address, or the offset in its registration); rail[]: the
 * initiator's first poller's addresses and its buffer's keys per rail.
 */
#define DP_STAGE_MAGIC 0x54535044u /* "DPST" */
#define DP_STAGE_VERSION 1u
struct dp_stage_req {
	uint32_t magic;
	uint16_t version;
	uint16_t opcode; /* DP_OP_WRITE (into the export) or DP_OP_READ */
	uint32_t export_id;
	uint32_t nrails;
	uint64_t secret;
	uint64_t seg_off, len;
	uint64_t seq; /* never 0: echoed in the status */
	uint64_t buf_addr, status_addr;
	struct dp_rpc_rail rail[DP_MAX_RAILS];
};

struct dp_stage_status {
	uint64_t seq;
	int32_t status; /* 0 or -errno */
	/* DP_STAGE_CHECK(seq, status): the initiator believes the word only
	 * whole (the provider may land it in pieces). */
	uint32_t check;
};
#define DP_STAGE_CHECK(seq, status)                                                                \
	((uint32_t)(seq) ^ (uint32_t)((seq) >> 32) ^ (uint32_t)(status) ^ 0xa5a5a5a5u)

/* The control loop's epoll set, for the connections and lookups below,
 * and its timer that runs rpc_sweep(): armed here for every deadline set,
 * and for after the batch when something was closed. */
struct ev_timer;
void rpc_start(int epfd, struct ev_timer *deadlines);

/* Server side: the listening socket (updates cfg.rpc_port and
 * cfg.server_name when the port was 0), and the handler of its readiness:
 * accepts what is pending, each connection served from the loop. An
 * engine session's port (session.h) is served by the same code: its
 * lookups are answered by session_fill_reply(). */
int rpc_listen(void);
int rpc_listen_port(uint16_t port);
void rpc_accept(int lfd, uint16_t session_port);

/* Ms until the next deadline of a connection or lookup (-1: none), and
 * the sweep the deadlines' timer runs: ends what is past its deadline and
 * frees what was closed. */
int rpc_timeout_ms(void);
void rpc_sweep(void);
/* At exit: closes the connections; lookups in flight end -ECANCELED. */
void rpc_shutdown(void);

/* The description of an export (one with fabric registrations, or GPU
 * memory the rails could not register: DP_RPC_F_GPU_UNREGISTERED) as a
 * lookup reply: what the RPC port answers and what the cluster directory
 * publishes (directory.c). 0 or -EIO. */
int rpc_segment_record(const struct segment *s, struct dp_rpc_lookup_reply *r);

/* Checks a reply as received: 0, the peer's negative status, or -EBADMSG. */
int rpc_reply_check(const struct dp_rpc_hdr *h, const struct dp_rpc_lookup_reply *r);

/*
 * Client side: asks `peer` ("host:port", optionally followed by "@rail")
 * for segment `name`, without waiting. 0: `done` will be called exactly
 * once, from the loop (never from inside this call), with 0 and the reply,
 * or -EHOSTUNREACH, -ETIMEDOUT (DP_RPC_TIMEOUT_MS after the start),
 * -EBADMSG, -ECANCELED (rpc_shutdown) or the peer's status; fds: none
 * over TCP. Or at once:
 * -EINVAL (not host:port), -EHOSTUNREACH, -EAGAIN (RPC_MAX_CALLS in
 * flight), -ENOMEM. A host that is a literal IPv4 address costs nothing;
 * a name is resolved without waiting (getaddrinfo() on a thread of its
 * own, within the same deadline: -EHOSTUNREACH when it does not resolve;
 * -EAGAIN with RPC_MAX_RESOLVING names being resolved), and when it names
 * this service (an address of this host, with our RPC port) `done` gets
 * RPC_LOOKUP_SELF instead of a reply: the caller resolves locally.
 */
#define RPC_LOOKUP_SELF 1
typedef void (*rpc_done_fn)(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds,
			    unsigned nfds);
int rpc_lookup_start(const char *peer, const char *name, rpc_done_fn done, void *arg);
/* The same over a same-host peer's Unix socket `path` (a reply's
 * local_path), asking for the memory (DP_RPC_Q_SAME_HOST): `done` gets the
 * fds that came with the reply (its own to close or keep; none on error). */
int rpc_lookup_local_start(const char *path, const char *peer, const char *name, rpc_done_fn done,
			   void *arg);

/* The same shape for a batch of notifications to `peer` (the server name
 * "host:port" of the service that exports their segments), `n` entries
 * filling `bytes` of `data` as in struct dp_rpc_notify: `done` gets 0
 * once the peer took them (delivered or dropped there), or the error; the
 * reply is not passed. */
int rpc_notify_start(const char *peer, const void *data, uint32_t bytes, unsigned n,
		     rpc_done_fn done, void *arg);

/* True when `peer` names this service: its server name, or its RPC port
 * on a loopback address, 0.0.0.0 or an address of this host given as a
 * literal IPv4 address (a host name is never resolved here: see
 * RPC_LOOKUP_SELF). */
bool rpc_is_self(const char *peer);
/* The port of `peer` ("host:port") when its host is this one (the server
 * name's host, or a literal IPv4 address of this host or loopback), else
 * -1; a host name is not resolved. */
int rpc_self_port(const char *peer);

#endif /* DP_RPC_H */
