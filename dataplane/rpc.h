/* SPDX-License-Identifier: MIT */
/*
 * rpc.h - the peer protocol: how one dataplaned asks another, over TCP, for
 * the description of a segment it exports. One request and one reply per
 * connection, fixed sizes, every field checked on both ends.
 */
#ifndef DP_RPC_H
#define DP_RPC_H

#include <stdint.h>

#include "fabric.h"

#define DP_RPC_MAGIC 0x50525044u /* "DPRP" */
#define DP_RPC_VERSION 1u
#define DP_RPC_LOOKUP 1u
#define DP_RPC_REPLY 0x8000u
#define DP_RPC_TIMEOUT_MS 2000
#define DP_RPC_F_VIRT_ADDR 1u /* targets are virtual addresses, not offsets */

struct dp_rpc_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len; /* payload bytes after this header */
	uint32_t reserved;
};

struct dp_rpc_lookup {
	char name[DP_NAME_MAX];
};

struct dp_rpc_rail {
	uint32_t addr_len;
	uint32_t reserved;
	uint64_t key;
	uint8_t addr[DP_FABRIC_ADDR_MAX];
};

struct dp_rpc_lookup_reply {
	int32_t status;
	uint32_t access;
	uint64_t len;
	uint64_t base;
	uint32_t nrails;
	uint32_t flags;
	char server_name[DP_NAME_MAX];
	struct dp_rpc_rail rail[DP_MAX_RAILS];
};

/* Server side (control thread): the listening socket (updates cfg.rpc_port
 * and cfg.server_name when the port was 0), and one request served. */
int rpc_listen(void);
void rpc_serve(int lfd);

/* The description of an export (one with fabric registrations) as a
 * lookup reply: what the RPC port answers and what the cluster directory
 * publishes (directory.c). 0 or -EIO. */
int rpc_segment_record(const struct segment *s, struct dp_rpc_lookup_reply *r);

/* Checks a reply as received: 0, the peer's negative status, or -EBADMSG. */
int rpc_reply_check(const struct dp_rpc_hdr *h, const struct dp_rpc_lookup_reply *r);

/* Client side: asks `peer` ("host:port", optionally followed by "@rail")
 * for segment `name`. -EHOSTUNREACH, -ETIMEDOUT, -EBADMSG or the peer's
 * status. */
int rpc_lookup(const char *peer, const char *name, struct dp_rpc_lookup_reply *out);

/* True when `peer` names this service. */
bool rpc_is_self(const char *peer);

#endif /* DP_RPC_H */
