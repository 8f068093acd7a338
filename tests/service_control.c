/* service_control.c - malformed control messages on a raw socket get the documented error reply, three strikes disconnect, others keep being served. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dp_proto.h"
#include "helpers.h"
#include "net.h"

TestSuite(service_control, .fini = svc_teardown);

/* ---- a raw control connection ---- */

/* Sends one packet of `len` bytes with `nfds` fds attached. */
static void raw_send(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	struct iovec iov = {(void *)buf, len};
	int rc = dp_net_send_fds(fd, &iov, 1, fds, nfds, 0);

	cr_assert_eq(rc, 0, "sendmsg: %s", strerror(-rc));
}

/* A header (len = the payload's size unless `hdr_len` >= 0) + payload. */
static void send_msg_ex(int fd, uint32_t magic, uint16_t version, uint16_t type, uint32_t seq,
			const void *payload, size_t plen, long hdr_len, const int *fds, int nfds)
{
	char buf[8192];
	struct dp_msg_hdr h = {.magic = magic,
			       .version = version,
			       .type = type,
			       .len = hdr_len >= 0 ? (uint32_t)hdr_len : (uint32_t)plen,
			       .seq = seq};

	cr_assert_leq(sizeof(h) + plen, sizeof(buf));
	memcpy(buf, &h, sizeof(h));
	if (plen)
		memcpy(buf + sizeof(h), payload, plen);
	raw_send(fd, buf, sizeof(h) + plen, fds, nfds);
}

static void send_msg(int fd, uint16_t type, uint32_t seq, const void *payload, size_t plen,
		     const int *fds, int nfds)
{
	send_msg_ex(fd, DP_PROTO_MAGIC, DP_PROTO_VERSION, type, seq, payload, plen, -1, fds, nfds);
}

struct reply {
	struct dp_msg_hdr hdr;
	int32_t status;
	size_t len; /* payload bytes */
	_Alignas(8) char payload[DP_MSG_MAX];
	int nfds;
};

/* Reads one packet; returns its size, 0 at EOF, -errno (-EAGAIN: 3 s passed).
 * The fds a reply carried are counted and closed. */
static ssize_t raw_recv(int fd, struct reply *r)
{
	_Alignas(8) char buf[DP_MSG_MAX + 64];
	int fds[8], nfds = 0;
	ssize_t n = dp_net_recv_fds(fd, buf, sizeof(buf), fds, 8, &nfds, 0);

	if (n < 0)
		return n;
	memset(r, 0, sizeof(*r));
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	r->nfds = nfds;
	if (n >= (ssize_t)sizeof(r->hdr)) {
		memcpy(&r->hdr, buf, sizeof(r->hdr));
		r->len = (size_t)n - sizeof(r->hdr);
		memcpy(r->payload, buf + sizeof(r->hdr), r->len);
		if (r->len >= sizeof(int32_t))
			memcpy(&r->status, r->payload, sizeof(int32_t));
	}
	return n;
}

/*
 * Reads one reply and checks it: a well-formed header carrying `type` with
 * the reply bit and `seq`, a payload of `plen` bytes starting with `status`.
 */
static void expect_reply_len(int fd, uint16_t type, uint32_t seq, int32_t status, size_t plen,
			     const char *what)
{
	struct reply r;
	ssize_t n = raw_recv(fd, &r);

	cr_assert_gt(n, 0, "%s: no reply (%s)", what, n ? strerror((int)-n) : "EOF");
	cr_assert_eq(r.hdr.magic, DP_PROTO_MAGIC, "%s: reply magic", what);
	cr_assert_eq(r.hdr.version, DP_PROTO_VERSION, "%s: reply version", what);
	cr_assert_eq(r.hdr.type, (uint16_t)(type | DP_MSG_REPLY), "%s: reply type %#x, want %#x",
		     what, r.hdr.type, type | DP_MSG_REPLY);
	cr_assert_eq(r.hdr.seq, seq, "%s: reply seq %u, want %u", what, r.hdr.seq, seq);
	cr_assert_eq(r.hdr.len, r.len, "%s: reply length field", what);
	cr_assert_eq(r.status, status, "%s: status %d (%s), want %d (%s)", what, r.status,
		     strerror(-r.status), status, strerror(-status));
	cr_assert_eq(r.len, plen, "%s: reply payload %zu bytes, want %zu", what, r.len, plen);
	cr_assert_eq(r.nfds, 0, "%s: an error reply carries no fds", what);
}

static void expect_reply(int fd, uint16_t type, uint32_t seq, int32_t status, const char *what)
{
	expect_reply_len(fd, type, seq, status, sizeof(struct dp_msg_status), what);
}

/* The service hung up: EOF, and nothing else arrives before it. */
static void expect_hangup(int fd, const char *what)
{
	struct reply r;
	ssize_t n = raw_recv(fd, &r);

	cr_assert_eq(n, 0, "%s: expected a hang-up, got %s", what,
		     n > 0 ? "a packet" : strerror((int)-n));
	close(fd);
}

static void raw_hello(int fd)
{
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION, .pid = (uint32_t)getpid()};

	snprintf(h.name, sizeof(h.name), "raw");
	send_msg(fd, DP_MSG_HELLO, 1, &h, sizeof(h), NULL, 0);
	expect_reply_len(fd, DP_MSG_HELLO, 1, 0, sizeof(struct dp_msg_hello_reply), "HELLO");
}

/* A well-formed request that fails harmlessly (closing an unknown segment
 * handle): proves the connection is still served after HELLO. */
static void ping(int fd)
{
	struct dp_msg_id req = {.id = 777};

	send_msg(fd, DP_MSG_SEGMENT_CLOSE, 4242, &req, sizeof(req), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_CLOSE, 4242, -EBADF, "ping");
}

/* ---- a well-behaved client beside the raw ones ---- */

/* One verified round trip: the service is serving the bystander. */
static void probe_check(struct probe *b)
{
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t seed = 5000 + ++b->n;

	pattern_fill(b->src, 65536, seed);
	dp_prep_write(&d, b->rs, 0, b->seg, 0, 65536, seed);
	cqe = run_wait(b->q, &d, 5000);
	cr_assert_eq(cqe.status, 0, "bystander: %s", dp_strerror(cqe.status));
	cr_assert_eq(pattern_check(b->dst, 65536, seed), -1, "bystander's bytes");
}

static void probe_stop(struct probe *b)
{
	probe_check(b);
	dp_close(b->c);
}

/* The service's open fds come back to `base` once it has dropped the raw
 * connections (it learns of each asynchronously). */
static void expect_fds_back(int base)
{
	uint64_t deadline = now_ns() + 3000000000ull;
	int n;

	while ((n = proc_fd_count(svc.pid)) != base && now_ns() < deadline)
		sleep_ms(10);
	cr_assert_eq(n, base, "dataplaned has %d fds, %d before: fds leaked", n, base);
}

/* ---- one kind of malformed message per test ---- */

Test(service_control, truncated_header, .timeout = 20)
{
	struct dp_msg_hdr h = {.magic = DP_PROTO_MAGIC,
			       .version = DP_PROTO_VERSION,
			       .type = DP_MSG_HELLO,
			       .seq = 9};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	/* Too short to be a header: the reply can only say type 0, seq 0. */
	raw_send(fd, &h, 8, NULL, 0);
	expect_reply(fd, 0, 0, -EBADMSG, "8-byte packet");
	ping(fd);
	raw_send(fd, &h, sizeof(h) - 1, NULL, 0);
	expect_reply(fd, 0, 0, -EBADMSG, "15-byte packet");
	ping(fd);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

Test(service_control, wrong_magic, .timeout = 20)
{
	struct dp_msg_queue_create qc = {0};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	send_msg_ex(fd, 0x4c504445u, DP_PROTO_VERSION, DP_MSG_QUEUE_CREATE, 41, &qc, sizeof(qc), -1,
		    NULL, 0);
	expect_reply(fd, DP_MSG_QUEUE_CREATE, 41, -EBADMSG, "wrong magic");
	send_msg_ex(fd, 0, 0, 0, 0, NULL, 0, -1, NULL, 0);
	expect_reply(fd, 0, 0, -EBADMSG, "all-zero header");
	ping(fd);
	probe_check(&b);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

/* Another protocol version cannot be talked to: one reply, then hang-up. */
Test(service_control, wrong_protocol_version, .timeout = 20)
{
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION};
	struct dp_msg_queue_create qc = {0};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	send_msg_ex(fd, DP_PROTO_MAGIC, DP_PROTO_VERSION + 1, DP_MSG_HELLO, 3, &h, sizeof(h), -1,
		    NULL, 0);
	expect_reply(fd, DP_MSG_HELLO, 3, -EPROTONOSUPPORT, "version 2 HELLO");
	expect_hangup(fd, "after a wrong version");
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	send_msg_ex(fd, DP_PROTO_MAGIC, 0, DP_MSG_QUEUE_CREATE, 4, &qc, sizeof(qc), -1, NULL, 0);
	expect_reply(fd, DP_MSG_QUEUE_CREATE, 4, -EPROTONOSUPPORT, "version 0 after HELLO");
	expect_hangup(fd, "after a wrong version");
	probe_stop(&b);
	stop_svc(&svc);
}

Test(service_control, length_field_not_matching, .timeout = 20)
{
	struct dp_msg_queue_create qc = {0};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	send_msg_ex(fd, DP_PROTO_MAGIC, DP_PROTO_VERSION, DP_MSG_QUEUE_CREATE, 5, &qc, sizeof(qc),
		    sizeof(qc) + 4, NULL, 0);
	expect_reply(fd, DP_MSG_QUEUE_CREATE, 5, -EBADMSG, "len says more than sent");
	send_msg_ex(fd, DP_PROTO_MAGIC, DP_PROTO_VERSION, DP_MSG_QUEUE_CREATE, 6, &qc, sizeof(qc),
		    sizeof(qc) - 4, NULL, 0);
	expect_reply(fd, DP_MSG_QUEUE_CREATE, 6, -EBADMSG, "len says less than sent");
	ping(fd);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

Test(service_control, unknown_type, .timeout = 20)
{
	struct dp_msg_id id = {0};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	send_msg(fd, 0x7fff, 7, &id, sizeof(id), NULL, 0);
	expect_reply(fd, 0x7fff, 7, -EOPNOTSUPP, "type 0x7fff");
	/* A "reply" sent to the service is no request it knows either. */
	send_msg(fd, DP_MSG_SEGMENT_CLOSE | DP_MSG_REPLY, 8, &id, sizeof(id), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_CLOSE | DP_MSG_REPLY, 8, -EOPNOTSUPP, "a reply type");
	ping(fd);
	close(fd);
	/* Type 0 is nobody's, before HELLO too. */
	fd = raw_connect(svc.sock, 3);
	send_msg(fd, 0, 9, NULL, 0, NULL, 0);
	expect_reply(fd, 0, 9, -EOPNOTSUPP, "type 0");
	raw_hello(fd);
	ping(fd);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

Test(service_control, oversized_packet, .timeout = 20)
{
	static char big[4096];
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	/* The header is fine; the packet is longer than any message may be. */
	send_msg(fd, DP_MSG_SEGMENT_OPEN, 10, big, DP_MSG_MAX + 100 - sizeof(struct dp_msg_hdr),
		 NULL, 0);
	expect_reply(fd, 0, 0, -EMSGSIZE, "612-byte packet");
	send_msg(fd, DP_MSG_SEGMENT_OPEN, 11, big, sizeof(big), NULL, 0);
	expect_reply(fd, 0, 0, -EMSGSIZE, "4 KiB packet");
	ping(fd);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

Test(service_control, request_before_hello, .timeout = 20)
{
	struct dp_msg_queue_create qc = {0};
	struct dp_msg_id id = {.id = 1};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	send_msg(fd, DP_MSG_QUEUE_CREATE, 12, &qc, sizeof(qc), NULL, 0);
	expect_reply(fd, DP_MSG_QUEUE_CREATE, 12, -EPROTO, "QUEUE_CREATE before HELLO");
	send_msg(fd, DP_MSG_SEGMENT_CLOSE, 13, &id, sizeof(id), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_CLOSE, 13, -EPROTO, "SEGMENT_CLOSE before HELLO");
	/* Two strikes: HELLO still works, and then so does everything else. */
	raw_hello(fd);
	send_msg(fd, DP_MSG_QUEUE_CREATE, 14, &qc, sizeof(qc), NULL, 0);
	{
		struct reply r;

		cr_assert_gt(raw_recv(fd, &r), 0);
		cr_assert_eq(r.hdr.type, DP_MSG_QUEUE_CREATE | DP_MSG_REPLY);
		cr_assert_eq(r.status, 0, "QUEUE_CREATE after HELLO: %s", strerror(-r.status));
		cr_assert_eq(r.nfds, 3, "a queue comes with its memfd and two doorbells");
	}
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

Test(service_control, payload_of_wrong_size, .timeout = 20)
{
	char pad[sizeof(struct dp_msg_segment_open) + 8] = {0};
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	send_msg(fd, DP_MSG_HELLO, 15, &h, sizeof(h) - 1, NULL, 0);
	expect_reply(fd, DP_MSG_HELLO, 15, -EBADMSG, "short HELLO");
	raw_hello(fd);
	send_msg(fd, DP_MSG_QUEUE_CREATE, 16, pad, 4, NULL, 0);
	expect_reply(fd, DP_MSG_QUEUE_CREATE, 16, -EBADMSG, "4-byte QUEUE_CREATE");
	ping(fd);
	close(fd);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	send_msg(fd, DP_MSG_SEGMENT_OPEN, 17, pad, sizeof(pad), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_OPEN, 17, -EBADMSG, "long SEGMENT_OPEN");
	send_msg(fd, DP_MSG_REGION_FREE, 18, pad, 0, NULL, 0);
	expect_reply(fd, DP_MSG_REGION_FREE, 18, -EBADMSG, "empty REGION_FREE");
	ping(fd);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

/* A memfd of `len` bytes, sealable or not. */
static int make_memfd(size_t len, bool sealable)
{
	int fd = memfd_create("raw", MFD_CLOEXEC | (sealable ? MFD_ALLOW_SEALING : 0));

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	return fd;
}

static void register_with(int fd, uint32_t seq, uint64_t off, uint64_t len, const int *fds,
			  int nfds, int32_t status, const char *what)
{
	struct dp_msg_region_register req = {.offset = off, .len = len};

	send_msg(fd, DP_MSG_REGION_REGISTER, seq, &req, sizeof(req), fds, nfds);
	expect_reply(fd, DP_MSG_REGION_REGISTER, seq, status, what);
}

/* None of these is malformed (no strike), none of them leaks a passed fd. */
Test(service_control, region_register_needs_one_sealable_memfd, .timeout = 20)
{
	char path[160];
	struct probe b;
	int fd, base, m1, m2, pfd[2], sv[2], devnull, file, shm = -1, unsealable;
	int many[DP_CUDA_VMM_MAX_PIECES + 1];

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	base = proc_fd_count(svc.pid);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	m1 = make_memfd(65536, true);
	m2 = make_memfd(65536, true);
	cr_assert_eq(pipe(pfd), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	devnull = open("/dev/null", O_RDWR);
	cr_assert_geq(devnull, 0);
	snprintf(path, sizeof(path), "%s/regular-file", svc.dir);
	file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(file, 0);
	cr_assert_eq(ftruncate(file, 65536), 0);
	unsealable = make_memfd(65536, false);

	register_with(fd, 20, 0, 4096, NULL, 0, -EBADF, "no fd");
	register_with(fd, 21, 0, 4096, (int[]){m1, m2}, 2, -EBADF, "two fds");
	register_with(fd, 22, 0, 4096, &pfd[0], 1, -EINVAL, "a pipe");
	register_with(fd, 23, 0, 4096, &sv[0], 1, -EINVAL, "a socket");
	register_with(fd, 24, 0, 4096, &devnull, 1, -EINVAL, "/dev/null");
	register_with(fd, 25, 0, 4096, &file, 1, -EINVAL, "a regular file on disk");
	register_with(fd, 26, 0, 4096, &unsealable, 1, -EPERM, "a memfd without sealing");
	/* A file on tmpfs is shmem too, but created sealed against seals. */
	snprintf(path, sizeof(path), "/dev/shm/dp-test-%d", (int)getpid());
	shm = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (shm >= 0) {
		unlink(path);
		cr_assert_eq(ftruncate(shm, 65536), 0);
		register_with(fd, 27, 0, 4096, &shm, 1, -EPERM, "a /dev/shm file");
	}
	register_with(fd, 28, 0, 65537, &m1, 1, -EINVAL, "longer than the memfd");
	register_with(fd, 29, 65536, 1, &m1, 1, -EINVAL, "offset at the end");
	register_with(fd, 30, ~0ull - 100, 4096, &m1, 1, -EINVAL, "offset + len overflows");
	register_with(fd, 31, 0, 0, &m1, 1, -EINVAL, "zero length");
	ping(fd); /* still connected: none of those was a strike */
	/* Fds where the type expects none are closed. */
	send_msg(fd, DP_MSG_SEGMENT_CLOSE, 32, &(struct dp_msg_id){.id = 5},
		 sizeof(struct dp_msg_id), (int[]){m1, m2, devnull}, 3);
	expect_reply(fd, DP_MSG_SEGMENT_CLOSE, 32, -EBADF, "SEGMENT_CLOSE with fds");
	/* More fds than any message carries (a VMM registration's one per
	 * piece): truncated, hence malformed. */
	for (unsigned i = 0; i < DP_CUDA_VMM_MAX_PIECES + 1; i++)
		many[i] = m1;
	send_msg(fd, DP_MSG_REGION_REGISTER, 33,
		 &(struct dp_msg_region_register){.offset = 0, .len = 4096},
		 sizeof(struct dp_msg_region_register), many, DP_CUDA_VMM_MAX_PIECES + 1);
	{
		struct reply r;

		cr_assert_gt(raw_recv(fd, &r), 0);
		cr_assert_eq(r.status, -EMSGSIZE, "33 fds: %s", strerror(-r.status));
		cr_assert(r.hdr.type & DP_MSG_REPLY);
	}
	/* And the real thing works on the same connection. */
	send_msg(fd, DP_MSG_REGION_REGISTER, 34,
		 &(struct dp_msg_region_register){.offset = 4096, .len = 8192},
		 sizeof(struct dp_msg_region_register), &m1, 1);
	expect_reply_len(fd, DP_MSG_REGION_REGISTER, 34, 0, sizeof(struct dp_msg_id_reply),
			 "a sealable memfd");
	probe_check(&b);
	close(fd);
	expect_fds_back(base);
	close(m1);
	close(m2);
	close(pfd[0]);
	close(pfd[1]);
	close(sv[0]);
	close(sv[1]);
	close(devnull);
	close(file);
	close(unsealable);
	if (shm >= 0)
		close(shm);
	probe_stop(&b);
	stop_svc(&svc);
}

/* Strings are checked inside their fixed-size fields. */
Test(service_control, unterminated_names, .timeout = 20)
{
	struct dp_msg_segment_export ex = {.access = DP_ACCESS_RW};
	struct dp_msg_segment_open op = {.access = DP_ACCESS_READ};
	struct dp_msg_segment_name un;
	struct dp_msg_id_reply idr;
	struct probe b;
	struct reply r;
	char name63[64];
	int fd, m;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	m = make_memfd(65536, true);
	send_msg(fd, DP_MSG_REGION_REGISTER, 40,
		 &(struct dp_msg_region_register){.offset = 0, .len = 65536},
		 sizeof(struct dp_msg_region_register), &m, 1);
	cr_assert_gt(raw_recv(fd, &r), 0);
	cr_assert_eq(r.status, 0);
	memcpy(&idr, r.payload, sizeof(idr));
	ex.region = idr.id;

	memset(ex.name, 'a', sizeof(ex.name));
	send_msg(fd, DP_MSG_SEGMENT_EXPORT, 41, &ex, sizeof(ex), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_EXPORT, 41, -EINVAL, "export, unterminated name");
	memset(ex.name, 0, sizeof(ex.name));
	send_msg(fd, DP_MSG_SEGMENT_EXPORT, 42, &ex, sizeof(ex), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_EXPORT, 42, -EINVAL, "export, empty name");
	memset(op.name, 'b', sizeof(op.name));
	send_msg(fd, DP_MSG_SEGMENT_OPEN, 43, &op, sizeof(op), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_OPEN, 43, -EINVAL, "open, unterminated name");
	snprintf(op.name, sizeof(op.name), "bystander");
	memset(op.peer, 'c', sizeof(op.peer));
	send_msg(fd, DP_MSG_SEGMENT_OPEN, 44, &op, sizeof(op), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_OPEN, 44, -EINVAL, "open, unterminated peer");
	memset(un.name, 'd', sizeof(un.name));
	send_msg(fd, DP_MSG_SEGMENT_UNEXPORT, 45, &un, sizeof(un), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_UNEXPORT, 45, -EINVAL, "unexport, unterminated name");
	ping(fd);
	/* Nothing was half-registered; the longest legal name works. */
	memset(name63, 'a', 63);
	name63[63] = 0;
	cr_assert_eq(dp_segment_open(b.c, NULL, name63, DP_ACCESS_READ), -ENOENT);
	memcpy(ex.name, name63, sizeof(ex.name));
	send_msg(fd, DP_MSG_SEGMENT_EXPORT, 46, &ex, sizeof(ex), NULL, 0);
	expect_reply(fd, DP_MSG_SEGMENT_EXPORT, 46, 0, "export, 63-byte name");
	cr_assert_geq(dp_segment_open(b.c, NULL, name63, DP_ACCESS_READ), 0);
	close(m);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

Test(service_control, hello_with_wrong_abi, .timeout = 20)
{
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION + 1, .pid = (uint32_t)getpid()};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	send_msg(fd, DP_MSG_HELLO, 50, &h, sizeof(h), NULL, 0);
	expect_reply_len(fd, DP_MSG_HELLO, 50, -EPROTONOSUPPORT, sizeof(struct dp_msg_hello_reply),
			 "HELLO with ABI 2");
	expect_hangup(fd, "after an ABI mismatch");
	fd = raw_connect(svc.sock, 3);
	h.abi_version = 0;
	send_msg(fd, DP_MSG_HELLO, 51, &h, sizeof(h), NULL, 0);
	expect_reply_len(fd, DP_MSG_HELLO, 51, -EPROTONOSUPPORT, sizeof(struct dp_msg_hello_reply),
			 "HELLO with ABI 0");
	expect_hangup(fd, "after an ABI mismatch");
	probe_stop(&b);
	stop_svc(&svc);
}

/* Three malformed messages, of any kinds, and the client is gone; the
 * third still gets its reply first. */
Test(service_control, third_malformed_message_disconnects, .timeout = 20)
{
	struct dp_msg_hdr h = {.magic = DP_PROTO_MAGIC};
	struct dp_msg_queue_create qc = {0};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	raw_send(fd, &h, 4, NULL, 0);
	expect_reply(fd, 0, 0, -EBADMSG, "strike 1: truncated");
	ping(fd);
	probe_check(&b);
	send_msg(fd, 0x7ffe, 60, NULL, 0, NULL, 0);
	expect_reply(fd, 0x7ffe, 60, -EOPNOTSUPP, "strike 2: unknown type");
	ping(fd);
	probe_check(&b);
	send_msg(fd, DP_MSG_QUEUE_CREATE, 61, &qc, 2, NULL, 0);
	expect_reply(fd, DP_MSG_QUEUE_CREATE, 61, -EBADMSG, "strike 3: short payload");
	expect_hangup(fd, "after the third strike");
	probe_check(&b);

	/* Strikes before HELLO count the same. */
	fd = raw_connect(svc.sock, 3);
	for (uint32_t i = 0; i < 3; i++) {
		send_msg(fd, DP_MSG_QUEUE_CREATE, 70 + i, &qc, sizeof(qc), NULL, 0);
		expect_reply(fd, DP_MSG_QUEUE_CREATE, 70 + i, -EPROTO, "before HELLO");
	}
	expect_hangup(fd, "after three requests before HELLO");
	probe_stop(&b);
	stop_svc(&svc);
}

/* Well-formed requests that fail are not strikes, however many. */
Test(service_control, failed_requests_are_not_strikes, .timeout = 20)
{
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION};
	struct dp_msg_queue_create qc = {.depth = 3};
	struct probe b;
	int fd;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	fd = raw_connect(svc.sock, 3);
	raw_hello(fd);
	for (int i = 0; i < 10; i++) {
		ping(fd);
		send_msg(fd, DP_MSG_QUEUE_CREATE, 80, &qc, sizeof(qc), NULL, 0);
		expect_reply(fd, DP_MSG_QUEUE_CREATE, 80, -EINVAL, "depth 3");
		send_msg(fd, DP_MSG_HELLO, 81, &h, sizeof(h), NULL, 0);
		expect_reply(fd, DP_MSG_HELLO, 81, -EALREADY, "second HELLO");
	}
	ping(fd);
	close(fd);
	probe_stop(&b);
	stop_svc(&svc);
}

/*
 * Many connections sending garbage, half of it behind a valid header, some
 * with fds attached: every packet gets an error reply until the third
 * strike hangs up, the service never dies, the bystander is served
 * throughout, and the service's fds come back to where they were.
 */
Test(service_control, garbage_from_many_clients, .timeout = 40)
{
	enum { CONNS = 40 };
	struct probe b;
	uint64_t s = 0x1234567;
	int base, m, status;

	start_svc(&svc, local_only);
	probe_start(&b, &svc, 65536);
	base = proc_fd_count(svc.pid);
	m = make_memfd(4096, true);
	for (int c = 0; c < CONNS; c++) {
		int fd = raw_connect(svc.sock, 3), strikes = 0;

		if (c & 1)
			raw_hello(fd);
		while (strikes < 3) {
			_Alignas(8) char buf[700];
			size_t len = 1 + xorshift64s(&s) % sizeof(buf);
			struct reply r;
			ssize_t n;

			for (size_t i = 0; i < len; i++)
				buf[i] = (char)xorshift64s(&s);
			if (len >= sizeof(struct dp_msg_hdr) && xorshift64s(&s) % 2) {
				/* A valid header around a random type and payload. */
				struct dp_msg_hdr h = {.magic = DP_PROTO_MAGIC,
						       .version = DP_PROTO_VERSION,
						       .type = (uint16_t)(xorshift64s(&s) % 16),
						       .len = (uint32_t)(len - sizeof(h)),
						       .seq = (uint32_t)c};

				if (h.type == DP_MSG_HELLO)
					h.type = 0x7fff;
				memcpy(buf, &h, sizeof(h));
			}
			raw_send(fd, buf, len, &m, xorshift64s(&s) % 4 == 0);
			n = raw_recv(fd, &r);
			cr_assert_gt(n, 0, "connection %d: no reply to garbage (%s)", c,
				     n ? strerror((int)-n) : "EOF");
			cr_assert(r.hdr.magic == DP_PROTO_MAGIC && r.hdr.type & DP_MSG_REPLY,
				  "connection %d: not a reply", c);
			if (r.status == -EBADMSG || r.status == -EMSGSIZE ||
			    r.status == -EOPNOTSUPP || r.status == -EPROTO ||
			    r.status == -EPROTONOSUPPORT)
				strikes = r.status == -EPROTONOSUPPORT ? 3 : strikes + 1;
			else
				cr_assert_lt(r.status, 0, "garbage accepted (type %#x)",
					     r.hdr.type);
		}
		expect_hangup(fd, "garbage, third strike");
		cr_assert_eq(waitpid(svc.pid, &status, WNOHANG), 0, "dataplaned died");
		if (c % 8 == 7)
			probe_check(&b);
	}
	close(m);
	expect_fds_back(base);
	probe_stop(&b);
	stop_svc(&svc);
}
