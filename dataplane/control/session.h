/* SPDX-License-Identifier: MIT */
/*
 * session.h - engine sessions: a client's memory, addressed as the client's
 * own virtual addresses, reachable from anywhere in the fleet by the name
 * "host:port" (docs/api.md "Engine sessions"; the Mooncake/NIXL model, where
 * an engine is a session and remote memory is the peer's own pointer).
 *
 * Owner side (control thread). dp_session_create makes the service listen
 * on one more TCP port for that client; the port speaks the peer protocol
 * (rpc_server.c, with the fleet key) and answers only questions about that
 * client's registrations. Each region the client adds at its address
 * (SESSION_ADD: dp_alloc, dp_register_mem, dp_register_cuda do it for it)
 * becomes a member: an export of the region under a name of its own
 * ("#<port>/<n>", which no client can ask for and the directory never
 * sees), so that every path an export has (this service, another service
 * of this host, the fabric, notifications) serves the member as it is. A
 * lookup of "@<va>+<len>" on the session's port is answered with the
 * export that holds that range, as the RPC port answers a lookup by name,
 * plus where the registration starts (DP_RPC_F_SESSION); "@" alone asks
 * whether the port is a session.
 *
 * Initiator side. dp_session_open gives a handle (a seg_handle whose
 * `sess` is set) once the port said it is a session. Its descriptors carry
 * a virtual address of the session's process as target_off: pollers look
 * it up in the handle's map (members sorted by address, published RCU
 * style) and go on with the member's segment and offset, as for any
 * segment. An address no member holds is a miss: the descriptor is held by
 * the `session` engine while the control thread asks the session's port
 * for that range (one round trip per registration first touched, then
 * none), and runs again once the answer is in; a second miss is -EFAULT.
 * When the session's client goes, its port closes: the next question is
 * refused and every later descriptor fails -ECONNRESET at once.
 */
#ifndef DP_SESSION_H
#define DP_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "dp_internal.h"

/* Member export names start with this byte, which segment names cannot. */
#define SESSION_MEMBER_MARK '#'

/* desc_resolve: no member holds the range (yet): hold the descriptor. */
#define SESSION_MISS 1

struct session_cli;
struct dp_rpc_lookup_reply;
struct dp_msg_session_reply;

/* The control loop's epoll set, for the sessions' listening sockets and
 * the pollers' questions' wake-up: 0 or -errno (logged). */
int session_start(int epfd);

/* ---- owner side (control thread) ---- */

/* Client c's session on TCP port `port` (0: any): 0 with the reply filled,
 * -EEXIST (c has one), -EADDRINUSE, -EINVAL (no peer RPC), -ENOMEM. */
int session_create(struct client *c, unsigned port, struct dp_msg_session_reply *r);
/* Region `region` of c is at `addr` in c's process: 0, -ENOTCONN (no
 * session), -EBADF (no such region), -EINVAL (a file region, or a range
 * that wraps), -EEXIST (overlaps a member), -ENOSPC, -ENOMEM. */
int session_add(struct client *c, uint32_t region, uint64_t addr);
/* Region reg of c goes (its exports are killed by the caller). */
void session_region_gone(struct client *c, const struct region *reg);
/* c goes: its port closes. */
void session_client_gone(struct client *c);
/* rpc_server.c: the answer of session port `port` to lookup `name`. */
void session_fill_reply(uint16_t port, const char *name, struct dp_rpc_lookup_reply *r);
/* Is this member's export name one the directory must not publish? */
static inline bool session_member_name(const char *name)
{
	return name[0] == SESSION_MEMBER_MARK;
}

/* ---- initiator side ---- */

/* A handle's session `name` ("host:port"): 0 with a new session_cli in
 * *out (the caller's reference) for a session of this service (nothing
 * asked on the network, now or later); else `name`'s port is asked whether
 * it is a session, without waiting: SEGMENT_PENDING (segments.h), and
 * fn(arg, rc, s) is called once from the loop: 0 and a new session_cli,
 * or -ENOENT (the port is not a session's), -EHOSTUNREACH, -ETIMEDOUT,
 * -EACCES, ... Or at once: -EINVAL (not host:port), -EAGAIN, -ENOMEM. */
typedef void (*session_opened_fn)(void *arg, int rc, struct session_cli *s);
int session_open(const char *name, struct session_cli **out, session_opened_fn fn, void *arg);
/* Control thread: a live member of s (the first the map holds), or NULL
 * (none known, or the session is gone): where a notification sent alone
 * to the session goes. */
struct segment *session_any_member(struct session_cli *s);
/* Control thread: asks the session again for its first registration
 * (a handle opened before the session had any): 0 at once for a session
 * of this service (its whole table read again), else SEGMENT_PENDING and
 * fn(arg) from the loop once the answer is in (or not: ask
 * session_any_member()); -ECONNRESET (gone), -EBUSY (one already
 * waits), -ENOMEM. */
int session_refresh(struct session_cli *s, void (*fn)(void *arg), void *arg);
/* The handle that held the reference closed (after its grace period). */
void session_close(struct session_cli *s);
/* At exit, the pollers stopped. */
void sessions_cleanup(void);

/* Pollers: the member of s holding [va, va + len): 0 with *seg and *off;
 * -ECONNRESET (the session is gone), -EHOSTUNREACH, or SESSION_MISS (ask:
 * session_hold), or, with `final`, the miss's errno (-EFAULT). */
int session_translate(struct session_cli *s, uint64_t va, uint64_t len, bool final,
		      struct segment **seg, uint64_t *off);
/* Holds descriptor d of q (a miss of s) until the control thread has asked
 * s's port; then it runs again (desc_process_held). */
void session_hold(struct poller *p, struct queue *q, const struct dp_desc *d,
		  struct session_cli *s);

/* poller.c: runs a held descriptor again; a miss now completes it. */
void desc_process_held(struct poller *p, struct queue *q, const struct dp_desc *d);

#endif /* DP_SESSION_H */
