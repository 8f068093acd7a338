/* SPDX-License-Identifier: MIT */
/*
 * rpc.c - the peer protocol over TCP (see rpc.h). The control thread serves
 * lookups; a request that does not arrive whole within the timeout is
 * dropped, so a slow or hostile peer costs at most that much time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "net.h"
#include "rpc.h"
#include "segments.h"

#define SERVE_TIMEOUT_MS 200

int rpc_listen(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_ANY),
				 .sin_port = htons((uint16_t)cfg.rpc_port)};
	socklen_t len = sizeof(sa);
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	cfg.rpc_port = ntohs(sa.sin_port);
	snprintf(cfg.server_name, sizeof(cfg.server_name), "%.48s:%d", cfg.server_host,
		 cfg.rpc_port);
	log_info("peer RPC on TCP port %d; server name %s", cfg.rpc_port, cfg.server_name);
	return fd;
}

int rpc_segment_record(const struct segment *s, struct dp_rpc_lookup_reply *r)
{
	memcpy(r->server_name, cfg.server_name, sizeof(r->server_name));
	r->access = s->access;
	r->len = s->region->len;
	r->base = fabric_virt_addr() ? (uint64_t)(uintptr_t)s->region->base : 0;
	r->flags = fabric_virt_addr() ? DP_RPC_F_VIRT_ADDR : 0;
	r->nrails = fabric_nrails();
	for (unsigned i = 0; i < r->nrails; i++) {
		size_t len = DP_FABRIC_ADDR_MAX;

		if (fabric_rail_addr(i, r->rail[i].addr, &len)) {
			r->status = -EIO;
			return -EIO;
		}
		r->rail[i].addr_len = (uint32_t)len;
		r->rail[i].key = s->fab_keys[i];
	}
	return 0;
}

static void fill_reply(const struct dp_rpc_lookup *req, struct dp_rpc_lookup_reply *r)
{
	struct segment *s;

	memcpy(r->server_name, cfg.server_name, sizeof(r->server_name));
	if (strnlen(req->name, sizeof(req->name)) == sizeof(req->name) || !req->name[0]) {
		r->status = -EINVAL;
		return;
	}
	s = export_find(req->name);
	/* Only exports with fabric registrations are reachable: a region's
	 * own (local-access) registration never leaves the service. */
	if (!s || !s->eng[ENGINE_fabric]) {
		r->status = -ENOENT;
		return;
	}
	rpc_segment_record(s, r);
}

void rpc_serve(int lfd)
{
	struct {
		struct dp_rpc_hdr h;
		struct dp_rpc_lookup req;
	} in;
	struct {
		struct dp_rpc_hdr h;
		struct dp_rpc_lookup_reply r;
	} out;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	uint64_t deadline = dp_now_ns() + SERVE_TIMEOUT_MS * 1000000ull;

	if (fd < 0)
		return;
	memset(&out, 0, sizeof(out));
	out.h = (struct dp_rpc_hdr){.magic = DP_RPC_MAGIC,
				    .version = DP_RPC_VERSION,
				    .type = DP_RPC_LOOKUP | DP_RPC_REPLY,
				    .len = sizeof(out.r)};
	if (dp_net_read_full(fd, &in.h, sizeof(in.h), deadline)) {
		close(fd);
		return;
	}
	if (in.h.magic != DP_RPC_MAGIC)
		out.r.status = -EBADMSG;
	else if (in.h.version != DP_RPC_VERSION)
		out.r.status = -EPROTONOSUPPORT;
	else if (in.h.type != DP_RPC_LOOKUP || in.h.len != sizeof(in.req))
		out.r.status = -EBADMSG;
	else if (dp_net_read_full(fd, &in.req, sizeof(in.req), deadline))
		out.r.status = -EBADMSG;
	else
		fill_reply(&in.req, &out.r);
	if (out.r.status)
		log_debug("peer RPC: request refused: %s", strerror(-out.r.status));
	dp_net_write_full(fd, &out, sizeof(out), deadline);
	close(fd);
}

int rpc_reply_check(const struct dp_rpc_hdr *h, const struct dp_rpc_lookup_reply *r)
{
	if (h->magic != DP_RPC_MAGIC || h->version != DP_RPC_VERSION ||
	    h->type != (DP_RPC_LOOKUP | DP_RPC_REPLY) || h->len != sizeof(*r))
		return -EBADMSG;
	if (strnlen(r->server_name, sizeof(r->server_name)) == sizeof(r->server_name))
		return -EBADMSG;
	if (r->status > 0 || r->status < -4095)
		return -EBADMSG;
	if (r->status)
		return r->status;
	if (r->access != DP_ACCESS_READ && r->access != DP_ACCESS_RW)
		return -EBADMSG;
	if (!r->len || r->base + r->len < r->base)
		return -EBADMSG;
	if (!r->nrails || r->nrails > DP_MAX_RAILS || r->flags & ~DP_RPC_F_VIRT_ADDR)
		return -EBADMSG;
	for (unsigned i = 0; i < r->nrails; i++)
		if (!r->rail[i].addr_len || r->rail[i].addr_len > DP_FABRIC_ADDR_MAX)
			return -EBADMSG;
	return 0;
}

/* "host:port[@rail]" -> host, port. */
static int split_peer(const char *peer, char *host, size_t hlen, char *port, size_t plen)
{
	char buf[DP_NAME_MAX], *at, *colon;

	if (snprintf(buf, sizeof(buf), "%s", peer) >= (int)sizeof(buf))
		return -EINVAL;
	at = strchr(buf, '@');
	if (at)
		*at = 0;
	colon = strrchr(buf, ':');
	if (!colon || colon == buf || !colon[1] ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return -EINVAL;
	*colon = 0;
	if (strlen(buf) >= hlen || strlen(colon + 1) >= plen)
		return -EINVAL;
	strcpy(host, buf);
	strcpy(port, colon + 1);
	return 0;
}

static bool addr_is_ours(const struct sockaddr *sa)
{
	struct ifaddrs *ifs, *i;
	bool ours = false;

	if (sa->sa_family == AF_INET &&
	    (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
		return true;
	if (getifaddrs(&ifs))
		return false;
	for (i = ifs; i && !ours; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && sa->sa_family == AF_INET)
			ours = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
			       ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
	freeifaddrs(ifs);
	return ours;
}

bool rpc_is_self(const char *peer)
{
	char host[DP_NAME_MAX], port[16], self[DP_NAME_MAX + 16];
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
	bool self_addr;

	if (split_peer(peer, host, sizeof(host), port, sizeof(port)))
		return false;
	snprintf(self, sizeof(self), "%s:%s", host, port);
	if (!strcmp(self, cfg.server_name))
		return true;
	if (atoi(port) != cfg.rpc_port)
		return false;
	if (getaddrinfo(host, port, &hints, &ai))
		return false;
	self_addr = addr_is_ours(ai->ai_addr);
	freeaddrinfo(ai);
	return self_addr;
}

int rpc_lookup(const char *peer, const char *name, struct dp_rpc_lookup_reply *out)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
	struct {
		struct dp_rpc_hdr h;
		struct dp_rpc_lookup req;
	} msg;
	struct dp_rpc_hdr h;
	char host[DP_NAME_MAX], port[16];
	uint64_t deadline = dp_now_ns() + DP_RPC_TIMEOUT_MS * 1000000ull;
	int fd, rc;

	if (split_peer(peer, host, sizeof(host), port, sizeof(port)))
		return -EINVAL;
	if (getaddrinfo(host, port, &hints, &ai))
		return -EHOSTUNREACH;
	fd = dp_net_socket(AF_INET, SOCK_STREAM);
	if (fd < 0) {
		freeaddrinfo(ai);
		return fd;
	}
	rc = dp_net_connect(fd, ai->ai_addr, ai->ai_addrlen, deadline);
	freeaddrinfo(ai);
	if (rc) {
		close(fd);
		return rc == -ETIMEDOUT ? rc : -EHOSTUNREACH;
	}
	memset(&msg, 0, sizeof(msg));
	msg.h = (struct dp_rpc_hdr){.magic = DP_RPC_MAGIC,
				    .version = DP_RPC_VERSION,
				    .type = DP_RPC_LOOKUP,
				    .len = sizeof(msg.req)};
	snprintf(msg.req.name, sizeof(msg.req.name), "%s", name);
	rc = dp_net_write_full(fd, &msg, sizeof(msg), deadline);
	if (!rc)
		rc = dp_net_read_full(fd, &h, sizeof(h), deadline);
	if (!rc && h.len != sizeof(*out))
		rc = -EBADMSG;
	if (!rc)
		rc = dp_net_read_full(fd, out, sizeof(*out), deadline);
	close(fd);
	if (rc == -ECONNRESET)
		return -EHOSTUNREACH;
	if (rc)
		return rc == -ETIMEDOUT ? rc : -EBADMSG;
	return rpc_reply_check(&h, out);
}
