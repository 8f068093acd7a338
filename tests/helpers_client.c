/* SPDX-License-Identifier: MIT */
/*
 * helpers_client.c - one client's calls, checked: connect, queues,
 * regions, segments; descriptors submitted and reaped to completion, one
 * or a batch; a control connection without libclient (raw_call).
 */
#include <sys/un.h>

#include "dp_proto.h"
#include "helpers.h"
#include "net.h"

struct dp_client *connect_client(const struct svc *s, const char *name)
{
	struct dp_client *c = NULL;
	int rc = dp_connect(s->sock, name, &c);

	cr_assert_eq(rc, 0, "dp_connect(%s): %s", name, dp_strerror(rc));
	return c;
}

struct dp_queue *make_queue(struct dp_client *c, uint32_t depth)
{
	struct dp_queue *q = NULL;
	int rc = dp_queue_create(c, depth, &q);

	cr_assert_eq(rc, 0, "dp_queue_create(%u): %s", depth, dp_strerror(rc));
	return q;
}

int alloc_region(struct dp_client *c, size_t len, void *addr)
{
	int r = dp_alloc(c, len, 0, (void **)addr);

	cr_assert_geq(r, 0, "dp_alloc(%zu): %s", len, dp_strerror(r));
	return r;
}

void export_segment(struct dp_client *c, int region, const char *name, unsigned access)
{
	int rc = dp_segment_export(c, region, name, access);

	cr_assert_eq(rc, 0, "dp_segment_export(%s): %s", name, dp_strerror(rc));
}

int open_segment(struct dp_client *c, const char *peer, const char *name, unsigned access)
{
	int seg = dp_segment_open(c, peer, name, access);

	cr_assert_geq(seg, 0, "dp_segment_open(%s, %s): %s", peer ? peer : "(self)", name,
		      dp_strerror(seg));
	return seg;
}

int export_open(struct dp_client *c, int region, const char *name, unsigned access,
		unsigned open_access)
{
	export_segment(c, region, name, access);
	return open_segment(c, NULL, name, open_access);
}

int raw_connect(const char *sock, int timeout_s)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = timeout_s};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
		     strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

int raw_call_with_fds(int fd, uint16_t type, const void *payload, size_t len, const int *fds,
		      int nfds, uint32_t *id)
{
	static uint32_t seq;
	struct dp_msg_hdr hdr = {.magic = DP_PROTO_MAGIC,
				 .version = DP_PROTO_VERSION,
				 .type = type,
				 .len = (uint32_t)len,
				 .seq = ++seq};
	struct iovec iov[2] = {{&hdr, sizeof(hdr)}, {(void *)payload, len}};
	struct dp_msg_id_reply r = {0};
	_Alignas(8) char buf[DP_MSG_MAX];
	ssize_t n;
	int rc;

	cr_assert_leq(len, sizeof(buf) - sizeof(hdr));
	rc = dp_net_send_fds(fd, iov, 2, fds, nfds, 0);
	cr_assert_eq(rc, 0, "request of type %u: %s", type, strerror(-rc));
	n = recv(fd, buf, sizeof(buf), 0);
	cr_assert_geq(n, (ssize_t)(sizeof(hdr) + sizeof(r.status)), "reply to type %u: %zd", type,
		      n);
	memcpy(&hdr, buf, sizeof(hdr));
	cr_assert_eq(hdr.type, type | DP_MSG_REPLY);
	cr_assert_eq(hdr.seq, seq);
	memcpy(&r, buf + sizeof(hdr),
	       (size_t)n - sizeof(hdr) < sizeof(r) ? (size_t)n - sizeof(hdr) : sizeof(r));
	if (id)
		*id = r.id;
	return r.status;
}

int raw_call(int fd, uint16_t type, const void *payload, size_t len, uint32_t *id)
{
	return raw_call_with_fds(fd, type, payload, len, NULL, 0, id);
}

void submit_all(struct dp_queue *q, const struct dp_desc *d, unsigned n, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (unsigned done = 0; done < n;) {
		int k = dp_submit(q, d + done, n - done);

		cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
		done += (unsigned)k;
		if (!k) {
			cr_assert_lt(now_ns(), deadline, "dp_submit accepted nothing for %d ms",
				     timeout_ms);
			sched_yield();
		}
	}
}

void reap(struct dp_queue *q, struct dp_cqe *out, unsigned n, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (unsigned got = 0; got < n;) {
		uint64_t t = now_ns();
		int k;

		cr_assert_lt(t, deadline, "%u of %u completions after %d ms", got, n, timeout_ms);
		k = dp_wait(q, out + got, n - got, (int)((deadline - t) / 1000000ull) + 1);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		got += (unsigned)k;
	}
}

/* One descriptor submitted (submit_all's submit_ms) and its completion
 * reaped within ms. */
static struct dp_cqe run_one(struct dp_queue *q, const struct dp_desc *d, int submit_ms, int ms)
{
	struct dp_cqe cqe;

	submit_all(q, d, 1, submit_ms);
	reap(q, &cqe, 1, ms);
	cr_assert_eq(cqe.user_data, d->user_data, "completion for %llu, want %llu",
		     (unsigned long long)cqe.user_data, (unsigned long long)d->user_data);
	return cqe;
}

struct dp_cqe run_wait(struct dp_queue *q, const struct dp_desc *d, int ms)
{
	return run_one(q, d, 5000, ms);
}

struct dp_cqe run1(struct dp_queue *q, bool write, int lreg, uint64_t loff, int seg, uint64_t toff,
		   uint64_t len, uint64_t id, int timeout_ms)
{
	struct dp_desc d;

	if (write)
		dp_prep_write(&d, lreg, loff, seg, toff, len, id);
	else
		dp_prep_read(&d, lreg, loff, seg, toff, len, id);
	return run_wait(q, &d, timeout_ms);
}

void run_ok(struct dp_queue *q, const struct dp_desc *d, uint32_t flag, int timeout_ms)
{
	struct dp_cqe cqe = run_one(q, d, 10000, timeout_ms);

	cr_assert_eq(cqe.status, 0, "%s of %llu B: %s", d->opcode == DP_OP_WRITE ? "WRITE" : "READ",
		     (unsigned long long)d->len, dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, d->len, "bytes %llu, want %llu", (unsigned long long)cqe.bytes,
		     (unsigned long long)d->len);
	cr_assert_eq(cqe.flags & (DP_CQE_F_FABRIC | DP_CQE_F_LOCAL), flag,
		     "completion flags 0x%x, want path 0x%x", cqe.flags, flag);
}

void run_batch(struct dp_queue *q, const struct dp_desc *d, unsigned n, struct dp_cqe *out,
	       int timeout_ms)
{
	unsigned sent = 0, got = 0;
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	unsigned char *seen = calloc(n, 1);
	struct dp_cqe cq[64];

	cr_assert(seen);
	while (got < n) {
		if (sent < n) {
			int k = dp_submit(q, d + sent, n - sent);

			cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
			sent += (unsigned)k;
		}
		int k = dp_wait(q, cq, 64, 100);

		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			uint64_t ud = cq[i].user_data;
			unsigned at = ud < n && d[ud].user_data == ud ? (unsigned)ud : n;

			for (unsigned j = 0; at == n && j < sent; j++)
				if (d[j].user_data == ud)
					at = j;
			cr_assert_lt(at, n, "unknown user_data %llu", (unsigned long long)ud);
			cr_assert(!seen[at], "two completions for descriptor %llu",
				  (unsigned long long)ud);
			seen[at] = 1;
			out[at] = cq[i];
			got++;
		}
		cr_assert_lt(now_ns(), deadline, "%u of %u completions after %d ms", got, n,
			     timeout_ms);
	}
	free(seen);
}

void probe_start(struct probe *p, const struct svc *s, size_t len)
{
	int rd;

	p->c = connect_client(s, "bystander");
	p->rs = alloc_region(p->c, len, &p->src);
	rd = alloc_region(p->c, len, &p->dst);
	p->seg = export_open(p->c, rd, "bystander", DP_ACCESS_RW, DP_ACCESS_RW);
	p->q = make_queue(p->c, 8);
	p->n = 0;
}
