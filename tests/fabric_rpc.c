/* fabric_rpc.c - the peer protocol under hostile input: malformed, truncated, trickled or absent requests to a service's RPC port, and hostile replies from a fake peer to dp_segment_open; nothing crashes or hangs, the service keeps serving. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "dp_stats.h"
#include "helpers.h"

TestSuite(fabric_rpc, .fini = fab_teardown, .timeout = 60);

/* The wire format of dataplane/control/rpc.h, restated here so that a change to it
 * is a conscious one: every peer of a running cluster speaks it. */
#define RPC_MAGIC 0x50525044u
#define RPC_VERSION 4u
#define RPC_LOOKUP 1u
#define RPC_CHALLENGE 2u
#define RPC_REPLY 0x8000u

struct rpc_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;
	uint32_t reserved;
};

struct rpc_rail {
	uint32_t addr_len;
	uint32_t reserved;
	uint64_t key;
	uint8_t addr[128];
};

struct rpc_lookup {
	char name[64];
	uint32_t flags; /* 1: same host (the Unix socket only) */
	uint32_t reserved;
	uint8_t host_id[16];  /* the asker's boot id */
	char server_name[64]; /* the asker */
	uint32_t nrails;      /* its fabric addresses */
	uint32_t reserved2;
	struct rpc_rail rail[8];
	uint8_t nonce[32];
	/* HMAC(key, "dp-rpc lookup\0", server nonce, nonce, every byte before nonce) */
	uint8_t mac[32];
};

struct rpc_challenge_msg {
	struct rpc_hdr h;
	uint8_t nonce[32];
};

struct rpc_reply {
	int32_t status;
	uint32_t access;
	uint64_t len;
	uint64_t base;
	uint32_t nrails;
	uint32_t flags;
	char server_name[64];
	struct rpc_rail rail[8];
	uint8_t host_id[16];
	char local_path[108];
	uint8_t same[144]; /* the same-host description */
	uint64_t va;	   /* an engine session's answer: where the registration starts */
	char member[64];   /* and the export that stands for it */
	uint32_t members;  /* its answer to "@": how many registrations */
	uint32_t reserved3;
};

struct rpc_req_msg {
	struct rpc_hdr h;
	struct rpc_lookup req;
};

struct rpc_reply_msg {
	struct rpc_hdr h;
	struct rpc_reply r;
	uint8_t mac[32]; /* HMAC(key, "dp-rpc reply\0", lookup nonce, server nonce, r) */
};

_Static_assert(sizeof(struct rpc_hdr) == 16, "header");
_Static_assert(sizeof(struct rpc_reply) == 1600, "reply");
_Static_assert(sizeof(struct rpc_lookup) == 1376, "lookup");

/* The fleet key the services of these tests use (their user's default,
 * made by whichever starts first), and one that is not it. */
static void key_load(void)
{
	char err[512];

	cr_assert_eq(auth_init(NULL, err, sizeof(err)), 0, "%s", err);
}

static void sign(struct rpc_req_msg *m, const uint8_t server_nonce[32])
{
	struct auth_part parts[3] = {{server_nonce, 32},
				     {m->req.nonce, 32},
				     {&m->req, offsetof(struct rpc_lookup, nonce)}};

	auth_nonce(m->req.nonce);
	auth_mac("dp-rpc lookup", parts, 3, m->req.mac);
}

static void reply_sign(struct rpc_reply_msg *rep, const struct rpc_req_msg *req,
		       const uint8_t server_nonce[32])
{
	struct auth_part parts[3] = {
		{req->req.nonce, 32}, {server_nonce, 32}, {&rep->r, sizeof(rep->r)}};

	auth_mac("dp-rpc reply", parts, 3, rep->mac);
}

static bool reply_signed(const struct rpc_reply_msg *rep, const struct rpc_req_msg *req,
			 const uint8_t server_nonce[32])
{
	struct auth_part parts[3] = {
		{req->req.nonce, 32}, {server_nonce, 32}, {&rep->r, sizeof(rep->r)}};

	return auth_check("dp-rpc reply", parts, 3, rep->mac);
}

#define EXPORT_LEN (1u << 20)

static int rpc_connect(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect to port %d: %s",
		     port, strerror(errno));
	return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
	cr_assert_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len, "send: %s", strerror(errno));
}

/* Reads up to len bytes until EOF or timeout; returns the count, or -1 on
 * a reset connection. */
static ssize_t recv_until_eof(int fd, void *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
	size_t got = 0;

	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int left = (int)(((int64_t)deadline - (int64_t)now_ns()) / 1000000);
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, left) <= 0)
			return (ssize_t)got;
		n = recv(fd, (char *)buf + got, len - got, 0);
		if (n < 0)
			return got ? (ssize_t)got : -1;
		if (n == 0 || (got += (size_t)n) == len)
			return (ssize_t)got;
	}
}

static struct rpc_req_msg lookup_msg(const char *name)
{
	struct rpc_req_msg m;

	memset(&m, 0, sizeof(m));
	m.h = (struct rpc_hdr){.magic = RPC_MAGIC,
			       .version = RPC_VERSION,
			       .type = RPC_LOOKUP,
			       .len = sizeof(m.req)};
	snprintf(m.req.name, sizeof(m.req.name), "%s", name);
	return m;
}

/* Reads the challenge a service sends first: its nonce. */
static void read_challenge(int fd, uint8_t nonce[32])
{
	struct rpc_challenge_msg ch;

	cr_assert_eq(recv_until_eof(fd, &ch, sizeof(ch), 2000), (ssize_t)sizeof(ch),
		     "no challenge");
	cr_assert_eq(ch.h.magic, RPC_MAGIC);
	cr_assert_eq(ch.h.version, RPC_VERSION);
	cr_assert_eq(ch.h.type, RPC_CHALLENGE);
	cr_assert_eq(ch.h.len, 32);
	memcpy(nonce, ch.nonce, 32);
}

enum how { SIGNED, UNSIGNED, REPLAYED };

/* Sends `len` bytes of `msg` (a whole request signed for this connection's
 * challenge, or as it is, or with the MAC of an earlier connection) and
 * returns the status of the reply; a reply must be a whole, well-formed
 * one, and a reply to a whole request proves the key. */
static int32_t request_as(int port, const void *msg, size_t len, struct rpc_reply_msg *out,
			  enum how how)
{
	static struct rpc_req_msg last; /* the last request signed */
	struct rpc_req_msg m;
	struct rpc_reply_msg rep;
	uint8_t nonce[32];
	int fd = rpc_connect(port);
	ssize_t n;

	key_load();
	read_challenge(fd, nonce);
	memcpy(&m, msg, len < sizeof(m) ? len : sizeof(m));
	if (len == sizeof(m) && how == SIGNED) {
		sign(&m, nonce);
		last = m;
	}
	if (len == sizeof(m) && how == REPLAYED)
		m = last;
	send_all(fd, len <= sizeof(m) ? (const void *)&m : msg, len);
	n = recv_until_eof(fd, &rep, sizeof(rep), 2000);
	close(fd);
	cr_assert_eq(n, (ssize_t)sizeof(rep), "reply of %zd bytes, want %zu", n, sizeof(rep));
	cr_assert_eq(rep.h.magic, RPC_MAGIC);
	cr_assert_eq(rep.h.version, RPC_VERSION);
	cr_assert_eq(rep.h.type, RPC_LOOKUP | RPC_REPLY);
	cr_assert_eq(rep.h.len, sizeof(rep.r) + 32);
	if (len == sizeof(m) && how == SIGNED && rep.r.status != -EBADMSG &&
	    rep.r.status != -EPROTONOSUPPORT)
		cr_assert(reply_signed(&rep, &m, nonce), "the reply does not prove the key");
	if (out)
		*out = rep;
	return rep.r.status;
}

static int32_t request_status(int port, const void *msg, size_t len, struct rpc_reply_msg *out)
{
	return request_as(port, msg, len, out, SIGNED);
}

/* A service with one export ("rpc-seg") and a client of it. */
struct target {
	struct dp_client *c;
	int port, region;
	uint8_t *mem;
};

static void target_start(struct svc *s, struct target *t, const char *const *more)
{
	const char *args[16] = {"--provider", "tcp", "--server-name", "127.0.0.1"};
	unsigned n = 4;

	for (; more && *more; more++)
		args[n++] = *more;
	args[n] = NULL;
	start_svc(s, args);
	t->port = fab_rpc_port(s);
	t->c = connect_client(s, "target");
	t->region = alloc_region(t->c, EXPORT_LEN, &t->mem);
	export_segment(t->c, t->region, "rpc-seg", DP_ACCESS_RW);
}

/* The service still answers a lookup and still moves bytes locally. */
static void still_serving(const struct svc *s, struct target *t)
{
	struct rpc_req_msg m = lookup_msg("rpc-seg");
	struct dp_queue *q = make_queue(t->c, 8);
	int seg, src;
	uint8_t *srcp;
	struct dp_desc d;

	cr_assert(kill(s->pid, 0) == 0, "the service died");
	cr_assert_eq(request_status(t->port, &m, sizeof(m), NULL), 0, "lookup after the abuse");
	src = alloc_region(t->c, 4096, &srcp);
	seg = open_segment(t->c, NULL, "rpc-seg", DP_ACCESS_RW);
	pattern_fill(srcp, 4096, 31);
	dp_prep_write(&d, src, 0, seg, 0, 4096, 1);
	run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(pattern_check(t->mem, 4096, 31), -1);
	dp_segment_close(t->c, seg);
	dp_free(t->c, src);
	dp_queue_destroy(q);
}

/* ---- the MAC ---- */

static void hex_to(const char *hex, uint8_t *out)
{
	for (unsigned i = 0; hex[2 * i]; i++)
		cr_assert_eq(sscanf(hex + 2 * i, "%2hhx", &out[i]), 1);
}

/* The service's HMAC-SHA256 (OpenSSL's libcrypto under auth.c) gives the
 * RFC 4231 answers (test cases 1-4, 6 and 7; 5 is a truncated MAC), also
 * with the message in pieces, and its start-up self-test passes. */
Test(fabric_rpc, hmac_sha256_meets_rfc_4231)
{
	static const char msg6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
	static const char msg7[] =
		"This is a test using a larger than block-size key and a larger than block-size "
		"data. The key needs to be hashed before being used by the HMAC algorithm.";
	uint8_t k1[20], k3[20], k4[25], d3[50], d4[50], k6[131], got[32], want[32];
	struct {
		const void *key;
		size_t klen;
		const void *data;
		size_t dlen;
		const char *mac;
	} tc[] = {
		{k1, 20, "Hi There", 8,
		 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{"Jefe", 4, "what do ya want for nothing?", 28,
		 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{k3, 20, d3, 50,
		 "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
		{k4, 25, d4, 50,
		 "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
		{k6, 131, msg6, sizeof(msg6) - 1,
		 "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
		{k6, 131, msg7, sizeof(msg7) - 1,
		 "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	};

	memset(k1, 0x0b, sizeof(k1));
	memset(k3, 0xaa, sizeof(k3));
	memset(d3, 0xdd, sizeof(d3));
	for (unsigned i = 0; i < sizeof(k4); i++)
		k4[i] = (uint8_t)(i + 1);
	memset(d4, 0xcd, sizeof(d4));
	memset(k6, 0xaa, sizeof(k6));
	for (unsigned i = 0; i < sizeof(tc) / sizeof(tc[0]); i++) {
		/* Whole, then cut in three (one piece empty). */
		struct auth_part one = {tc[i].data, tc[i].dlen};
		struct auth_part three[3] = {{tc[i].data, 3},
					     {(const char *)tc[i].data + 3, 0},
					     {(const char *)tc[i].data + 3, tc[i].dlen - 3}};

		hex_to(tc[i].mac, want);
		hmac_sha256(tc[i].key, tc[i].klen, &one, 1, got);
		cr_assert_arr_eq(got, want, 32, "RFC 4231 case %u", i < 4 ? i + 1 : i + 2);
		hmac_sha256(tc[i].key, tc[i].klen, three, 3, got);
		cr_assert_arr_eq(got, want, 32, "RFC 4231 case %u in pieces",
				 i < 4 ? i + 1 : i + 2);
	}
	cr_assert(auth_selftest());
}

/* auth_check takes the MAC of its input and nothing else: one flipped bit
 * anywhere, in the MAC, the input or the label, fails. */
Test(fabric_rpc, auth_check_refuses_any_other_mac)
{
	uint8_t nonce[32], mac[DP_AUTH_MAC];
	struct auth_part part = {nonce, sizeof(nonce)};

	key_load();
	auth_nonce(nonce);
	auth_mac("dp-test", &part, 1, mac);
	cr_assert(auth_check("dp-test", &part, 1, mac));
	cr_assert_not(auth_check("dp-tesT", &part, 1, mac));
	for (unsigned bit = 0; bit < 8 * DP_AUTH_MAC; bit += 37) {
		mac[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		cr_assert_not(auth_check("dp-test", &part, 1, mac), "bit %u of the MAC", bit);
		mac[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	nonce[31] ^= 1;
	cr_assert_not(auth_check("dp-test", &part, 1, mac));
}

/* ---- requests ---- */

Test(fabric_rpc, well_formed_lookup_describes_the_export)
{
	struct rpc_req_msg m = lookup_msg("rpc-seg");
	struct rpc_reply_msg rep;
	struct target t;

	target_start(&fab_svc[0], &t, NULL);
	cr_assert_eq(request_status(t.port, &m, sizeof(m), &rep), 0);
	cr_assert_eq(rep.r.len, EXPORT_LEN);
	cr_assert_eq(rep.r.access, DP_ACCESS_RW);
	cr_assert_geq(rep.r.nrails, 1);
	cr_assert_leq(rep.r.nrails, 8);
	cr_assert_gt(rep.r.rail[0].addr_len, 0);
	cr_assert_str_eq(rep.r.server_name, dp_server_name(t.c));
	m = lookup_msg("no-such-export");
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), -ENOENT);
	dp_close(t.c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

Test(fabric_rpc, malformed_requests_get_an_error_reply)
{
	struct rpc_req_msg m;
	struct target t;
	int fds_before;

	target_start(&fab_svc[0], &t, NULL);
	fds_before = proc_fd_count(fab_svc[0].pid);

	m = lookup_msg("rpc-seg");
	m.h.magic = 0x12345678;
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), -EBADMSG, "bad magic");
	m = lookup_msg("rpc-seg");
	m.h.version = 1;
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), -EPROTONOSUPPORT, "version 1");
	m = lookup_msg("rpc-seg");
	m.h.type = 7;
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), -EBADMSG, "unknown type");
	m = lookup_msg("rpc-seg");
	m.h.type = RPC_LOOKUP | RPC_REPLY;
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), -EBADMSG, "a reply as request");
	/* Lengths: the header alone, claiming a gigabyte or almost nothing. */
	m = lookup_msg("rpc-seg");
	m.h.len = 1u << 30;
	cr_assert_eq(request_status(t.port, &m.h, sizeof(m.h), NULL), -EBADMSG, "oversized len");
	m.h.len = 0xffffffffu;
	cr_assert_eq(request_status(t.port, &m.h, sizeof(m.h), NULL), -EBADMSG, "len 2^32-1");
	m.h.len = 4;
	cr_assert_eq(request_status(t.port, &m, sizeof(m.h) + 4, NULL), -EBADMSG, "short len");
	/* Names: without a NUL inside the field, and empty. */
	m = lookup_msg("");
	memset(m.req.name, 'A', sizeof(m.req.name));
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), -EINVAL, "name without NUL");
	m = lookup_msg("");
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), -EINVAL, "empty name");
	/* A payload shorter than the header says, then the end: an error
	 * reply or a closed connection, never a hang. */
	{
		int fd = rpc_connect(t.port);
		char buf[sizeof(struct rpc_reply_msg)];
		uint64_t t0 = now_ns();

		m = lookup_msg("rpc-seg");
		send_all(fd, &m, sizeof(m.h) + 10);
		shutdown(fd, SHUT_WR);
		recv_until_eof(fd, buf, sizeof(buf), 3000);
		cr_assert_lt(now_ns() - t0, 1000000000ull, "a truncated payload held for >1 s");
		close(fd);
	}
	/* Junk: 64 KiB of it. */
	{
		static uint8_t junk[65536];
		int fd = rpc_connect(t.port);
		char buf[sizeof(struct rpc_reply_msg)];

		pattern_fill(junk, sizeof(junk), 3);
		(void)!send(fd, junk, sizeof(junk), MSG_NOSIGNAL | MSG_DONTWAIT);
		recv_until_eof(fd, buf, sizeof(buf), 2000);
		close(fd);
	}
	still_serving(&fab_svc[0], &t);
	sleep_ms(100);
	cr_assert_eq(proc_fd_count(fab_svc[0].pid), fds_before, "the service leaked sockets");
	dp_close(t.c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

/* Trust: a lookup is answered only to a holder of the fleet key, for the
 * challenge of its own connection; a service with another key is a
 * stranger both ways (without the key check, another local user's service
 * read root's export through 127.0.0.1). */
Test(fabric_rpc, lookups_need_the_fleet_key)
{
	static const char *const other_key_args[] = {
		"--provider", "tcp",	    "--server-name",
		"127.0.0.1",  "--peer-key", "/tmp/dp-rpc-other.key",
		NULL};
	struct rpc_req_msg m = lookup_msg("rpc-seg");
	struct rpc_reply_msg rep;
	struct dp_client *c;
	struct target t;
	char peer[64];
	FILE *f;
	int rc;

	target_start(&fab_svc[0], &t, NULL);
	/* Signed for its own challenge: described. */
	cr_assert_eq(request_as(t.port, &m, sizeof(m), &rep, SIGNED), 0);
	/* No MAC, or the MAC of an earlier connection's challenge (a
	 * replay): refused, and nothing of the export in the reply. */
	rc = request_as(t.port, &m, sizeof(m), &rep, UNSIGNED);
	cr_assert_eq(rc, -EACCES, "unsigned lookup: %d", rc);
	cr_assert(rep.r.len == 0 && rep.r.nrails == 0 && rep.r.rail[0].key == 0,
		  "a refused lookup carried the export's description");
	rc = request_as(t.port, &m, sizeof(m), &rep, REPLAYED);
	cr_assert_eq(rc, -EACCES, "replayed lookup: %d", rc);
	cr_assert(rep.r.len == 0 && rep.r.nrails == 0 && rep.r.rail[0].key == 0,
		  "a replayed lookup carried the export's description");

	/* A service with another key: refused there and refusing here. */
	f = fopen("/tmp/dp-rpc-other.key", "w");
	cr_assert_not_null(f);
	fprintf(f, "another-fleet-0123456789abcdef\n");
	fclose(f);
	cr_assert_eq(chmod("/tmp/dp-rpc-other.key", 0600), 0);
	start_svc(&fab_svc[1], other_key_args);
	c = connect_client(&fab_svc[1], "stranger");
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", t.port);
	rc = dp_segment_open(c, peer, "rpc-seg", DP_ACCESS_READ);
	cr_assert_eq(rc, -EACCES, "open from another fleet: %d (%s)", rc, dp_strerror(rc));
	{
		uint8_t *p2;
		int r2 = alloc_region(c, 4096, &p2);

		export_segment(c, r2, "stranger-seg", DP_ACCESS_RW);
		snprintf(peer, sizeof(peer), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
		rc = dp_segment_open(t.c, peer, "stranger-seg", DP_ACCESS_READ);
		cr_assert_eq(rc, -EACCES, "open of another fleet's export: %d (%s)", rc,
			     dp_strerror(rc));
	}
	dp_close(c);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);

	/* A key others may read is refused at start: whoever reads it would
	 * be trusted. */
	cr_assert_eq(chmod("/tmp/dp-rpc-other.key", 0644), 0);
	cr_assert_neq(svc_start(&fab_svc[1], other_key_args), 0,
		      "a service started with a world-readable key");
	unlink("/tmp/dp-rpc-other.key");
	still_serving(&fab_svc[0], &t);
	dp_close(t.c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

/* How long the service keeps a connection that sends `prefix` and then
 * nothing (or one byte per `trickle_ms` of the rest, when > 0). */
static double held_ms(int port, const void *prefix, size_t len, unsigned trickle_ms,
		      const void *rest, size_t rest_len)
{
	int fd = rpc_connect(port);
	uint64_t t0 = now_ns();
	char buf[sizeof(struct rpc_reply_msg)];
	size_t sent = 0;

	if (len)
		send_all(fd, prefix, len);
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = poll(&pfd, 1, trickle_ms ? (int)trickle_ms : 5000);

		if (r > 0) {
			/* EOF, a reset, or a reply (then EOF). */
			if (recv(fd, buf, sizeof(buf), 0) <= 0)
				break;
			continue;
		}
		if (!trickle_ms || sent == rest_len ||
		    send(fd, (const char *)rest + sent, 1, MSG_NOSIGNAL) != 1)
			break;
		sent++;
		if (now_ns() - t0 > 10000000000ull)
			break;
	}
	close(fd);
	return (double)(now_ns() - t0) / 1e6;
}

Test(fabric_rpc, silent_truncated_or_trickling_peers_are_dropped)
{
	struct rpc_req_msg m = lookup_msg("rpc-seg");
	struct target t;
	double ms;

	target_start(&fab_svc[0], &t, NULL);
	/* Connect and say nothing. */
	ms = held_ms(t.port, NULL, 0, 0, NULL, 0);
	cr_assert_lt(ms, 1000, "a silent peer was held %.0f ms", ms);
	/* Half a header, then silence. */
	ms = held_ms(t.port, &m, 8, 0, NULL, 0);
	cr_assert_lt(ms, 1000, "half a header was held %.0f ms", ms);
	/* A whole header, then silence. */
	ms = held_ms(t.port, &m, sizeof(m.h), 0, NULL, 0);
	cr_assert_lt(ms, 1000, "a header without payload was held %.0f ms", ms);
	/* A request trickled one byte per 100 ms: the limit is on the
	 * whole request, not on each read. */
	ms = held_ms(t.port, NULL, 0, 100, &m, sizeof(m));
	cr_assert_lt(ms, 1000, "a trickling peer was held %.0f ms", ms);
	still_serving(&fab_svc[0], &t);
	dp_close(t.c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

/* ---- replies: a fake peer ---- */

enum fake_mode { FAKE_REPLY, FAKE_TRUNCATE, FAKE_SILENT, FAKE_TRICKLE };

/* A TCP server answering each lookup with `reply` as configured. */
static struct fake {
	int lfd, port;
	pthread_t thread;
	pthread_mutex_t lock;
	enum fake_mode mode;
	size_t trunc; /* FAKE_TRUNCATE: bytes of the reply sent */
	bool bad_mac; /* the reply's MAC proves no key */
	struct rpc_reply_msg reply;
	atomic_bool stop;
} fake;

static void *fake_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct rpc_challenge_msg ch = {.h = {.magic = RPC_MAGIC,
						     .version = RPC_VERSION,
						     .type = RPC_CHALLENGE,
						     .len = 32}};
		struct rpc_req_msg req;
		struct rpc_reply_msg rep;
		enum fake_mode mode;
		size_t trunc;
		bool bad_mac;
		int fd = accept(fake.lfd, NULL, NULL);

		if (fd < 0)
			return NULL;
		if (atomic_load(&fake.stop)) {
			close(fd);
			return NULL;
		}
		pthread_mutex_lock(&fake.lock);
		rep = fake.reply;
		mode = fake.mode;
		trunc = fake.trunc;
		bad_mac = fake.bad_mac;
		pthread_mutex_unlock(&fake.lock);
		/* The fake holds the fleet key: its replies pass the MAC check
		 * and meet the field checks, unless bad_mac. */
		auth_nonce(ch.nonce);
		(void)!send(fd, &ch, sizeof(ch), MSG_NOSIGNAL);
		recv_until_eof(fd, &req, sizeof(req), 1000);
		reply_sign(&rep, &req, ch.nonce);
		if (bad_mac)
			rep.mac[7] ^= 0x10;
		switch (mode) {
		case FAKE_REPLY:
			(void)!send(fd, &rep, sizeof(rep), MSG_NOSIGNAL);
			break;
		case FAKE_TRUNCATE:
			(void)!send(fd, &rep, trunc, MSG_NOSIGNAL);
			break;
		case FAKE_SILENT:
			sleep_ms(3000);
			break;
		case FAKE_TRICKLE:
			/* A byte per 50 ms: the whole reply would take a minute. */
			for (size_t i = 0; i < sizeof(rep) && !atomic_load(&fake.stop); i++) {
				if (send(fd, (char *)&rep + i, 1, MSG_NOSIGNAL) != 1)
					break;
				sleep_ms(50);
			}
			break;
		}
		close(fd);
	}
}

static void fake_start(void)
{
	key_load();
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);

	atomic_store(&fake.stop, false);
	fake.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fake.lfd, 0);
	cr_assert_eq(bind(fake.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fake.lfd, 8), 0);
	cr_assert_eq(getsockname(fake.lfd, (struct sockaddr *)&sa, &len), 0);
	fake.port = ntohs(sa.sin_port);
	pthread_mutex_init(&fake.lock, NULL);
	cr_assert_eq(pthread_create(&fake.thread, NULL, fake_main, NULL), 0);
}

static void fake_stop(void)
{
	atomic_store(&fake.stop, true);
	shutdown(fake.lfd, SHUT_RDWR);
	close(fake.lfd);
	pthread_join(fake.thread, NULL);
}

static void fake_set(enum fake_mode mode, const struct rpc_reply_msg *rep, size_t trunc)
{
	pthread_mutex_lock(&fake.lock);
	fake.bad_mac = false;
	fake.mode = mode;
	fake.reply = *rep;
	fake.trunc = trunc;
	pthread_mutex_unlock(&fake.lock);
}

/* dp_segment_open through the real service A, answered by the fake peer:
 * the result and how long it took. */
static int fake_open(struct dp_client *c, const struct rpc_reply_msg *rep, enum fake_mode mode,
		     size_t trunc, double *ms)
{
	static unsigned fake_opens;
	char peer[64], name[32];
	uint64_t t0;
	int rc;

	fake_set(mode, rep, trunc);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", fake.port);
	t0 = now_ns();
	/* A new name each time: a name once resolved is answered from the
	 * cache, without asking the peer. */
	snprintf(name, sizeof(name), "case-%u", fake_opens++);
	rc = dp_segment_open(c, peer, name, DP_ACCESS_READ);
	if (ms)
		*ms = (double)(now_ns() - t0) / 1e6;
	return rc;
}

static bool one_of(int rc, int a, int b)
{
	return rc == a || rc == b;
}

/* Ways to bend a good reply, and what dp_segment_open must answer. */
static const struct {
	const char *what;
	int want, or_want;
} cases[] = {
	{"bad magic", -EBADMSG, -EBADMSG},
	{"bad version", -EBADMSG, -EBADMSG},
	{"not a reply", -EBADMSG, -EBADMSG},
	{"header len one too many", -EBADMSG, -EBADMSG},
	{"header len 2^32-1", -EBADMSG, -EBADMSG},
	{"nrails 0", -EBADMSG, -EBADMSG},
	{"nrails 99", -EBADMSG, -EBADMSG},
	{"addr_len 2^31", -EBADMSG, -EBADMSG},
	{"addr_len 0", -EBADMSG, -EBADMSG},
	{"addr_len 129", -EBADMSG, -EBADMSG},
	/* Addresses the provider cannot take: the peer is unreachable. */
	{"addr_len 3", -EHOSTUNREACH, -EINVAL},
	{"bogus address bytes", -EHOSTUNREACH, -EINVAL},
	{"status > 0", -EBADMSG, -EBADMSG},
	{"status < -4095", -EBADMSG, -EBADMSG},
	{"status -ENOENT", -ENOENT, -ENOENT},
	{"access 7", -EBADMSG, -EBADMSG},
	{"access 0", -EBADMSG, -EBADMSG},
	{"len 0", -EBADMSG, -EBADMSG},
	{"base + len overflows", -EBADMSG, -EBADMSG},
	{"unknown flag", -EBADMSG, -EBADMSG},
	{"server name without NUL", -EBADMSG, -EBADMSG},
	/* A peer's status is its answer: passed on, never held against the
	 * client (as a malformed message of its own would be). */
	{"status -EPROTONOSUPPORT", -EPROTONOSUPPORT, -EPROTONOSUPPORT},
};

static void bend(unsigned i, struct rpc_reply_msg *x)
{
	switch (i) {
	case 0:
		x->h.magic ^= 1;
		break;
	case 1:
		x->h.version = 9;
		break;
	case 2:
		x->h.type = RPC_LOOKUP;
		break;
	case 3:
		x->h.len = sizeof(x->r) + 32 + 1;
		break;
	case 4:
		x->h.len = 0xffffffffu;
		break;
	case 5:
		x->r.nrails = 0;
		break;
	case 6:
		x->r.nrails = 99;
		break;
	case 7:
		x->r.rail[0].addr_len = 0x80000000u;
		break;
	case 8:
		x->r.rail[0].addr_len = 0;
		break;
	case 9:
		x->r.rail[0].addr_len = 129;
		break;
	case 10:
		x->r.rail[0].addr_len = 3;
		break;
	case 11:
		memset(x->r.rail[0].addr, 0xee, sizeof(x->r.rail[0].addr));
		break;
	case 12:
		x->r.status = 5;
		break;
	case 13:
		x->r.status = -100000;
		break;
	case 14:
		x->r.status = -ENOENT;
		break;
	case 15:
		x->r.access = 7;
		break;
	case 16:
		x->r.access = 0;
		break;
	case 17:
		x->r.len = 0;
		break;
	case 18:
		x->r.base = UINT64_MAX - 10;
		x->r.len = 4096;
		break;
	case 19:
		x->r.flags |= 0x80;
		break;
	case 20:
		memset(x->r.server_name, 'x', sizeof(x->r.server_name));
		break;
	case 21:
		x->r.status = -EPROTONOSUPPORT;
		break;
	}
}

Test(fabric_rpc, hostile_replies_are_rejected)
{
	struct rpc_req_msg m = lookup_msg("rpc-seg");
	struct rpc_reply_msg real, r;
	struct dp_client *ca;
	struct target t;
	unsigned i;
	int rc;

	/* B is real: its reply is the template the fake peer bends. A asks. */
	target_start(&fab_svc[1], &t, NULL);
	cr_assert_eq(request_status(t.port, &m, sizeof(m), &real), 0);
	{
		static const char *const a_args[] = {
			"--provider", "tcp", "--server-name", "127.0.0.1", "--fabric-timeout-ms",
			"2000",	      NULL};

		start_svc(&fab_svc[0], a_args);
	}
	ca = connect_client(&fab_svc[0], "asker");
	fake_start();

	/* The template itself is accepted (and says it is B). */
	rc = fake_open(ca, &real, FAKE_REPLY, 0, NULL);
	cr_assert_geq(rc, 0, "the unbent reply: %s", dp_strerror(rc));
	/* The same reply from a peer that cannot prove the fleet key. */
	r = real;
	snprintf(r.r.server_name, sizeof(r.r.server_name), "no-key:1");
	pthread_mutex_lock(&fake.lock);
	fake.mode = FAKE_REPLY;
	fake.reply = r;
	fake.bad_mac = true;
	pthread_mutex_unlock(&fake.lock);
	{
		char peer[64];

		snprintf(peer, sizeof(peer), "127.0.0.1:%d", fake.port);
		rc = dp_segment_open(ca, peer, "keyless", DP_ACCESS_READ);
		cr_assert_eq(rc, -EACCES, "a reply without the key's MAC: %s", dp_strerror(rc));
	}

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		r = real;
		/* Each case is another peer, so no cached answer hides it. */
		snprintf(r.r.server_name, sizeof(r.r.server_name), "fake-%u:1", i);
		bend(i, &r);
		rc = fake_open(ca, &r, FAKE_REPLY, 0, NULL);
		cr_assert(one_of(rc, cases[i].want, cases[i].or_want), "%s: %s, want %s",
			  cases[i].what, dp_strerror(rc), dp_strerror(cases[i].want));
	}
	/* Cut short: after the header, half-way, one byte short. */
	{
		static const size_t cuts[] = {0, 7, sizeof(struct rpc_hdr), 600,
					      sizeof(struct rpc_reply_msg) - 1};

		for (i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
			rc = fake_open(ca, &real, FAKE_TRUNCATE, cuts[i], NULL);
			cr_assert(one_of(rc, -EHOSTUNREACH, -EBADMSG), "reply cut at %zu: %s",
				  cuts[i], dp_strerror(rc));
		}
	}
	/* Silent, and trickling: bounded by the RPC timeout (2 s) in all. */
	{
		double ms;

		rc = fake_open(ca, &real, FAKE_SILENT, 0, &ms);
		cr_assert_eq(rc, -ETIMEDOUT, "silent peer: %s", dp_strerror(rc));
		cr_assert_lt(ms, 3000, "silent peer held the open %.0f ms", ms);
		rc = fake_open(ca, &real, FAKE_TRICKLE, 0, &ms);
		cr_assert_eq(rc, -ETIMEDOUT, "trickling peer: %s", dp_strerror(rc));
		cr_assert_lt(ms, 3000, "trickling peer held the open %.0f ms", ms);
	}
	fake_stop();

	/* A well-formed reply with a bogus key (B's real address): the open
	 * succeeds, the transfer fails cleanly, both services live on. */
	{
		struct dp_queue *q = make_queue(ca, 8);
		struct dp_desc d;
		struct dp_cqe cqe;
		uint8_t *loc;
		int lreg = alloc_region(ca, 65536, &loc), seg;

		fake_start();
		r = real;
		snprintf(r.r.server_name, sizeof(r.r.server_name), "bogus-key:1");
		r.r.rail[0].key ^= 0x5a5a5a5a5a5aull;
		seg = fake_open(ca, &r, FAKE_REPLY, 0, NULL);
		fake_stop();
		cr_assert_geq(seg, 0, "bogus key: %s", dp_strerror(seg));
		pattern_fill(loc, 65536, 5);
		memset(t.mem, 0, 65536);
		dp_prep_write(&d, lreg, 0, seg, 0, 65536, 77);
		submit_all(q, &d, 1, 10000);
		reap(q, &cqe, 1, 5000);
		cr_assert_neq(cqe.status, 0, "a WRITE with a bogus key succeeded");
		for (unsigned k = 0; k < 65536; k++)
			cr_assert_eq(t.mem[k], 0, "a WRITE with a bogus key changed byte %u", k);
		cr_assert(kill(fab_svc[1].pid, 0) == 0, "the target died of a bogus key");
		/* And the real thing still works between them. */
		{
			char peer[64];

			snprintf(peer, sizeof(peer), "127.0.0.1:%d", t.port);
			seg = open_segment(ca, peer, "rpc-seg", DP_ACCESS_RW);
			dp_prep_write(&d, lreg, 0, seg, 0, 65536, 78);
			run_ok(q, &d, DP_CQE_F_FABRIC, 5000);
			cr_assert_eq(pattern_check(t.mem, 65536, 5), -1);
		}
	}
	still_serving(&fab_svc[1], &t);
	dp_close(ca);
	dp_close(t.c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

/* ---- the asker's addresses (efa-direct: a target must know its initiator) ---- */

static uint64_t peers_known(const struct svc *s)
{
	const struct dp_stats_header *h = stats_map(s);
	uint64_t n = __atomic_load_n(&h->svc.peers_known, __ATOMIC_ACQUIRE);

	stats_unmap(h);
	return n;
}

/* A lookup carries the asker's rail addresses: the target inserts them
 * into its address vectors (peers_known), once per asker; addresses that
 * do not look like its provider's, or an unsigned lookup, insert nothing. */
Test(fabric_rpc, askers_addresses_are_learned)
{
	static const char *const tcp_args[] = {"--provider", "tcp", "--server-name", "127.0.0.1",
					       NULL};
	struct rpc_req_msg m = lookup_msg("rpc-seg");
	struct dp_client *c;
	struct target t;
	char peer[64];
	int seg;

	target_start(&fab_svc[0], &t, NULL);
	cr_assert_eq(peers_known(&fab_svc[0]), 0);
	start_svc(&fab_svc[1], tcp_args);
	c = connect_client(&fab_svc[1], "asker");
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", t.port);
	seg = open_segment(c, peer, "rpc-seg", DP_ACCESS_RW);
	cr_assert_eq(peers_known(&fab_svc[1]), 1, "the asker knows the target");
	cr_assert_eq(peers_known(&fab_svc[0]), 1, "the target did not learn its asker");
	/* Again: the same addresses, no new peer. */
	dp_segment_close(c, seg);
	seg = open_segment(c, peer, "rpc-seg", DP_ACCESS_RW);
	cr_assert_eq(peers_known(&fab_svc[0]), 1, "the same asker counted twice");
	/* A signed lookup with an address of the wrong shape (a tcp address
	 * is a sockaddr_in of 16 bytes), and an unsigned one: nothing. */
	snprintf(m.req.server_name, sizeof(m.req.server_name), "forger:1");
	m.req.nrails = 1;
	m.req.rail[0].addr_len = 5;
	memset(m.req.rail[0].addr, 0x7f, 5);
	cr_assert_eq(request_status(t.port, &m, sizeof(m), NULL), 0);
	m.req.rail[0].addr_len = 16;
	cr_assert_eq(request_as(t.port, &m, sizeof(m), NULL, UNSIGNED), -EACCES);
	cr_assert_eq(peers_known(&fab_svc[0]), 1, "a bad or unproven address was inserted");
	still_serving(&fab_svc[0], &t);
	dp_close(c);
	dp_close(t.c);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}
