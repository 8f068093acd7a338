/* fuzz_rpc_reply.c - libFuzzer target: rpc_reply_check() on a peer's reply, as
 * received off the wire. Whatever it accepts is safe to use: a status the API
 * knows, known flags, strings that end; then, unless it is an engine
 * session's "yes, a session" (no member named: nothing else is read), an
 * access mode, ranges that do not wrap, rails with sane address lengths (or
 * none, for an export its own host's services reach directly, or a
 * session's member). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dp_internal.h"
#include "rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct {
		struct dp_rpc_hdr h;
		struct dp_rpc_lookup_reply r;
	} m;
	int rc;

	memset(&m, 0, sizeof(m));
	memcpy(&m, data, size < sizeof(m) ? size : sizeof(m));
	rc = rpc_reply_check(&m.h, &m.r);
	if (rc > 0 || rc < -4095)
		abort();
	if (rc == 0) {
		if (m.r.flags & ~DP_RPC_F_ALL ||
		    strnlen(m.r.server_name, sizeof(m.r.server_name)) == sizeof(m.r.server_name))
			abort();
		if (m.r.flags & DP_RPC_F_SESSION) {
			if (strnlen(m.r.member, sizeof(m.r.member)) == sizeof(m.r.member))
				abort();
			if (!m.r.member[0])
				return 0;
			if (m.r.va + m.r.len < m.r.va)
				abort();
		}
		if (m.r.access != DP_ACCESS_READ && m.r.access != DP_ACCESS_RW)
			abort();
		if (!m.r.len || m.r.base + m.r.len < m.r.base)
			abort();
		/* No rails only for an export its host's services reach directly. */
		if (m.r.nrails > DP_MAX_RAILS ||
		    (!m.r.nrails && !(m.r.flags & (DP_RPC_F_SAME_HOST | DP_RPC_F_SESSION))))
			abort();
		if (strnlen(m.r.local_path, sizeof(m.r.local_path)) == sizeof(m.r.local_path))
			abort();
		for (unsigned i = 0; i < m.r.nrails; i++)
			if (!m.r.rail[i].addr_len || m.r.rail[i].addr_len > DP_FABRIC_ADDR_MAX)
				abort();
	}
	return 0;
}

/* The rest of the RPC layer (rpc_server.c, rpc_client.c) is linked but
 * never run here: the service-wide symbols it refers to are stubs (the
 * configuration is core/config.c's). */
void dp_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}
struct segment *export_find(const char *name)
{
	(void)name;
	return NULL;
}
unsigned fabric_nrails(void)
{
	return 0;
}
int fabric_rail_addr(unsigned rail, void *buf, size_t *len)
{
	(void)rail;
	(void)buf;
	(void)len;
	return -1;
}
bool fabric_virt_addr(void)
{
	return false;
}
int notif_receive(const struct dp_rpc_notify *q)
{
	(void)q;
	return 0;
}
bool samehost_enabled(void)
{
	return false;
}
const uint8_t *samehost_id(void)
{
	static const uint8_t id[DP_HOST_ID_LEN];

	return id;
}
const char *samehost_path(void)
{
	return "";
}
void samehost_start(int epfd)
{
	(void)epfd;
}
int samehost_describe(const struct segment *s, struct dp_samehost_desc *d, int *fds, unsigned *nfds)
{
	(void)s;
	(void)d;
	(void)fds;
	*nfds = 0;
	return -ENOTSUP;
}
void segments_peer_learn(const char *name, unsigned nrails, const struct dp_rpc_rail *rail)
{
	(void)name;
	(void)nrails;
	(void)rail;
}
void session_fill_reply(uint16_t port, const char *name, struct dp_rpc_lookup_reply *r)
{
	(void)port;
	(void)name;
	r->status = -ENOENT;
}
