/* session.c - engine sessions: a client's own memory by its virtual addresses under "host:port", opened from a client of the same service (and the client itself: DP_CQE_F_LOCAL), from another service of this host (DP_CQE_F_SAME_HOST) and through the fabric (DP_CQE_F_FABRIC); translation at the edges of registrations; a session whose client left fails at once; names that are not sessions are refused with the name in the error. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(service_session, .fini = svc_teardown, .timeout = 120);

#define GUARD 0x5a

/* One descriptor through session handle `seg`, at address `va` of the
 * session's process. */
static struct dp_cqe run_va(struct dp_queue *q, bool write, int lreg, uint64_t loff, int seg,
			    const void *va, uint64_t len, uint64_t id)
{
	return run1(q, write, lreg, loff, seg, (uint64_t)(uintptr_t)va, len, id, 30000);
}

static void expect_ok(struct dp_cqe c, uint64_t len, uint32_t path, const char *what)
{
	cr_assert_eq(c.status, 0, "%s: %s (%s)", what, dp_strerror(c.status), dp_last_error());
	cr_assert_eq(c.bytes, len, "%s: %llu bytes", what, (unsigned long long)c.bytes);
	cr_assert_eq(c.flags & (DP_CQE_F_LOCAL | DP_CQE_F_SAME_HOST | DP_CQE_F_FABRIC), path,
		     "%s: flags %#x, want %#x", what, c.flags, path);
}

/* The owner's memory: a dp_alloc region and memory of its own
 * (dp_register_mem), side by side in its session. */
struct owner {
	struct dp_client *c;
	uint8_t *shm, *own;
	uint64_t shm_len, own_len;
	int shm_reg, own_reg;
	char name[64];
};

static void owner_make(struct owner *o, struct dp_client *c, uint64_t shm_len, uint64_t own_len)
{
	int port;

	memset(o, 0, sizeof(*o));
	o->c = c;
	o->shm_len = shm_len;
	o->own_len = own_len;
	/* One before the session, one after: both join. */
	o->shm_reg = alloc_region(c, shm_len, &o->shm);
	port = dp_session_create(c, 0);
	cr_assert_gt(port, 0, "dp_session_create: %s", dp_last_error());
	snprintf(o->name, sizeof(o->name), "%s", dp_session_name(c));
	cr_assert(strstr(o->name, ":") && atoi(strrchr(o->name, ':') + 1) == port, "name %s",
		  o->name);
	/* A page no registration holds after it (kept mapped, inaccessible,
	 * so that nothing else lands there): one byte past is outside. */
	o->own = mmap(NULL, own_len + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		      0);
	cr_assert_neq(o->own, MAP_FAILED);
	cr_assert_eq(mprotect(o->own + own_len, 4096, PROT_NONE), 0);
	o->own_reg = dp_register_mem(c, o->own, own_len);
	cr_assert_geq(o->own_reg, 0, "dp_register_mem: %s", dp_last_error());
	memset(o->shm, GUARD, shm_len);
	memset(o->own, GUARD, own_len);
}

/* WRITE then READ back through session handle `seg` at every shape, into
 * both of the owner's registrations: bytes checked, guards untouched. */
static void move_both(struct dp_queue *q, int lreg, uint8_t *loc, uint64_t llen, int seg,
		      struct owner *o, uint32_t path)
{
	static const uint64_t lens[] = {1, 4096, 65537, MiB, 64 * MiB};

	for (unsigned k = 0; k < 2; k++) {
		uint8_t *t = k ? o->own : o->shm;
		uint64_t tlen = k ? o->own_len : o->shm_len;

		for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			uint64_t len = lens[i], to = len < tlen - 64 ? 17 : 0, lo = 3;

			if (len > tlen || len + lo > llen)
				continue;
			guard_fill(t, tlen, to, len);
			pattern_fill(loc + lo, len, 10 + i);
			expect_ok(run_va(q, true, lreg, lo, seg, t + to, len, 100 + i), len, path,
				  k ? "WRITE into registered memory"
				    : "WRITE into dp_alloc memory");
			fab_check(t + to, len, 10 + i, t, t + tlen, GUARD, "WRITE");
			pattern_fill(t + to, len, 20 + i);
			guard_fill(loc, llen, lo, len);
			expect_ok(run_va(q, false, lreg, lo, seg, t + to, len, 200 + i), len, path,
				  k ? "READ of registered memory" : "READ of dp_alloc memory");
			fab_check(loc + lo, len, 20 + i, loc, loc + llen, GUARD, "READ");
		}
	}
}

/* Notifications through a session handle reach the session's client, with
 * bytes and the sender's session name: on a WRITE, on a READ, alone. */
static void notify_through(struct dp_client *a, struct dp_queue *q, int lreg, uint8_t *loc, int seg,
			   struct owner *o, uint32_t nflag)
{
	char sender[DP_NOTIFY_SENDER_MAX], buf[DP_NOTIFY_MSG_MAX];
	struct dp_notification n;
	struct dp_desc d;
	const char *msgs[3] = {"kv-ready:req-17", "read-done:req-17", "lease:req-17"};

	if (!dp_session_name(a)[0])
		cr_assert_gt(dp_session_create(a, 0), 0, "initiator's session: %s",
			     dp_last_error());
	cr_assert_eq(dp_notify_open(o->c, 0), 0);
	pattern_fill(loc, 4096, 60);
	dp_prep_write_msg(&d, lreg, 0, seg, (uint64_t)(uintptr_t)o->shm + 4096, 4096, 1, msgs[0],
			  strlen(msgs[0]));
	cr_assert_eq(run_wait(q, &d, 30000).status, 0, "WRITE with bytes");
	dp_prep_read_msg(&d, lreg, 0, seg, (uint64_t)(uintptr_t)o->shm + 8192, 4096, 2, msgs[1],
			 strlen(msgs[1]));
	cr_assert_eq(run_wait(q, &d, 30000).status, 0, "READ with bytes");
	cr_assert_eq(dp_notify_send(a, seg, msgs[2], strlen(msgs[2])), 0, "alone: %s",
		     dp_last_error());
	for (unsigned i = 0; i < 3; i++) {
		cr_assert_eq(dp_notify_recv(o->c, &n, sender, buf, sizeof(buf), 10000), 1,
			     "notification %u: %s", i, dp_last_error());
		cr_assert_eq(n.msg_len, strlen(msgs[i]),
			     "notification %u: msg_len %u flags %#x value %llu", i, n.msg_len,
			     n.flags, (unsigned long long)n.value);
		cr_assert(!memcmp(buf, msgs[i], n.msg_len), "notification %u: %.*s", i,
			  (int)n.msg_len, buf);
		cr_assert_str_eq(sender, dp_session_name(a), "the sender is named by its session");
		cr_assert_str_eq(n.segment, o->name, "the segment is the owner's session");
		if (i < 2)
			cr_assert_eq(n.offset, (uint64_t)(uintptr_t)o->shm + 4096 * (i + 1),
				     "notification %u: the offset is the address", i);
		cr_assert(n.flags & nflag, "notification %u: flags %#x, want %#x", i, n.flags,
			  nflag);
	}
	cr_assert_eq(pattern_check(o->shm + 4096, 4096, 60), -1, "the WRITE's bytes");
}

Test(service_session, same_service_by_address_local_path)
{
	struct dp_client *a, *b;
	struct dp_queue *q, *qb;
	struct owner o;
	uint8_t *loc;
	int lreg, seg, self;

	start_svc(&svc, local_only);
	b = connect_client(&svc, "owner");
	a = connect_client(&svc, "initiator");
	owner_make(&o, b, 64 * MiB + 4096, 64 * MiB + 8192);
	lreg = alloc_region(a, 64 * MiB + 4096, &loc);
	q = make_queue(a, 64);
	seg = dp_session_open(a, o.name, DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_session_open(%s): %s", o.name, dp_last_error());
	move_both(q, lreg, loc, 64 * MiB + 4096, seg, &o, DP_CQE_F_LOCAL);
	/* The stats region: one session, its two registrations, one handle,
	 * and no question: the open knew both registrations. One made after
	 * the open is asked about at its first use, once. */
	{
		const struct dp_stats_header *h = stats_map(&svc);
		uint8_t *late = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		cr_assert_eq(h->svc.sessions, 1);
		cr_assert_eq(h->svc.session_members, 2);
		cr_assert_eq(h->svc.session_handles, 1);
		cr_assert_eq(h->svc.session_questions, 0, "questions: %llu",
			     (unsigned long long)h->svc.session_questions);
		cr_assert_geq(dp_register_mem(b, late, 8192), 0);
		for (unsigned i = 0; i < 3; i++)
			expect_ok(run_va(q, true, lreg, 0, seg, late + 100 * i, 64, 40 + i), 64,
				  DP_CQE_F_LOCAL, "a registration made after the open");
		cr_assert_eq(h->svc.session_members, 3);
		cr_assert_eq(h->svc.session_questions, 1, "questions: %llu",
			     (unsigned long long)h->svc.session_questions);
		cr_assert_eq(h->svc.session_question_errors, 0);
		stats_unmap(h);
	}
	notify_through(a, q, lreg, loc, seg, &o, DP_NOTIFY_F_LOCAL);
	/* The owner's own session, from the owner: the local engine too. */
	qb = make_queue(b, 8);
	self = dp_session_open(b, o.name, DP_ACCESS_RW);
	cr_assert_geq(self, 0, "self open: %s", dp_last_error());
	pattern_fill(o.shm, 4096, 7);
	expect_ok(run_va(qb, true, o.shm_reg, 0, self, o.own + 100, 4096, 1), 4096, DP_CQE_F_LOCAL,
		  "self WRITE");
	cr_assert_eq(pattern_check(o.own + 100, 4096, 7), -1, "self WRITE bytes");
	dp_queue_destroy(qb);
	dp_queue_destroy(q);
	dp_close(a);
	dp_close(b);
	stop_svc(&svc);
}

Test(service_session, translation_at_the_edges)
{
	struct dp_client *a, *b;
	struct dp_queue *q;
	struct dp_cqe c;
	uint8_t *loc, *two;
	int lreg, seg, r1, r2, ro;
	struct owner o;
	const uint64_t half = 65536;

	start_svc(&svc, local_only);
	b = connect_client(&svc, "owner");
	a = connect_client(&svc, "initiator");
	owner_make(&o, b, 4 * 4096, 8 * 4096);
	lreg = alloc_region(a, MiB, &loc);
	q = make_queue(a, 16);
	seg = dp_session_open(a, o.name, DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_session_open: %s", dp_last_error());
	/* First and last byte of a registration. */
	expect_ok(run_va(q, true, lreg, 0, seg, o.own, 1, 1), 1, DP_CQE_F_LOCAL, "first byte");
	expect_ok(run_va(q, true, lreg, 0, seg, o.own + o.own_len - 1, 1, 2), 1, DP_CQE_F_LOCAL,
		  "last byte");
	/* One byte past it, and a range that runs past its end. */
	c = run_va(q, true, lreg, 0, seg, o.own + o.own_len, 1, 3);
	cr_assert_eq(c.status, -EFAULT, "one byte past: %s", dp_strerror(c.status));
	c = run_va(q, true, lreg, 0, seg, o.own + o.own_len - 1, 2, 4);
	cr_assert_eq(c.status, -EFAULT, "across the end: %s", dp_strerror(c.status));
	c = run_va(q, false, lreg, 0, seg, (void *)(uintptr_t)4096, 8, 5);
	cr_assert_eq(c.status, -EFAULT, "outside every registration: %s", dp_strerror(c.status));
	/* Two registrations side by side: each works, across them does not. */
	two = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(two, MAP_FAILED);
	r1 = dp_register_mem(b, two, half);
	r2 = dp_register_mem(b, two + half, half);
	cr_assert(r1 >= 0 && r2 >= 0, "two registrations: %s", dp_last_error());
	expect_ok(run_va(q, true, lreg, 0, seg, two + half - 8, 8, 6), 8, DP_CQE_F_LOCAL,
		  "end of the first");
	expect_ok(run_va(q, true, lreg, 0, seg, two + half, 8, 7), 8, DP_CQE_F_LOCAL,
		  "start of the second");
	c = run_va(q, true, lreg, 0, seg, two + half - 4, 8, 8);
	cr_assert_eq(c.status, -EFAULT, "across two registrations: %s", dp_strerror(c.status));
	/* An overlapping registration is refused, and says why. */
	ro = dp_register_mem(b, two + 100, 10);
	cr_assert_eq(ro, -EEXIST, "overlapping registration: %d", ro);
	cr_assert(strstr(dp_last_error(), "session"), "text: %s", dp_last_error());
	/* Unregistered: the next descriptor fails, the other one works. */
	cr_assert_eq(dp_free(b, r1), 0);
	c = run_va(q, true, lreg, 0, seg, two + 8, 8, 9);
	cr_assert_eq(c.status, -EFAULT, "after dp_free: %s", dp_strerror(c.status));
	expect_ok(run_va(q, false, lreg, 0, seg, two + half + 8, 8, 10), 8, DP_CQE_F_LOCAL,
		  "the other still");
	/* A batch mixing both of the owner's first registrations. */
	{
		struct dp_desc d[32];
		struct dp_cqe out[32];

		for (unsigned i = 0; i < 32; i++) {
			uint8_t *t = i & 1 ? o.own + 64 * i : o.shm + 64 * i;

			dp_prep_write(&d[i], lreg, 64 * i, seg, (uint64_t)(uintptr_t)t, 64,
				      500 + i);
			pattern_fill(loc + 64 * i, 64, 40 + i);
		}
		run_batch(q, d, 32, out, 30000);
		for (unsigned i = 0; i < 32; i++) {
			uint8_t *t = i & 1 ? o.own + 64 * i : o.shm + 64 * i;

			expect_ok(out[i], 64, DP_CQE_F_LOCAL, "batch");
			cr_assert_eq(pattern_check(t, 64, 40 + i), -1, "batch %u bytes", i);
		}
	}
	dp_queue_destroy(q);
	dp_close(a);
	dp_close(b);
	stop_svc(&svc);
}

Test(service_session, names_that_are_not_sessions)
{
	char name[64];
	struct dp_client *a;
	int rc, port;

	start_svc(&svc, local_only);
	a = connect_client(&svc, "initiator");
	/* The service's RPC port answers, but is no session. */
	snprintf(name, sizeof(name), "127.0.0.1:%d", fab_rpc_port(&svc));
	rc = dp_session_open(a, name, DP_ACCESS_RW);
	cr_assert_eq(rc, -ENOENT, "the RPC port: %s", dp_strerror(rc));
	cr_assert(strstr(dp_last_error(), name), "text names it: %s", dp_last_error());
	/* Nothing listens there. */
	port = fab_free_port();
	snprintf(name, sizeof(name), "127.0.0.1:%d", port);
	rc = dp_session_open(a, name, DP_ACCESS_RW);
	cr_assert_eq(rc, -EHOSTUNREACH, "a closed port: %s", dp_strerror(rc));
	cr_assert(strstr(dp_last_error(), name), "text names it: %s", dp_last_error());
	cr_assert_eq(dp_session_open(a, "no-port", DP_ACCESS_RW), -EINVAL);
	cr_assert_eq(dp_session_open(a, "host:0", DP_ACCESS_RW), -EINVAL);
	cr_assert_eq(dp_session_open(a, "host:70000", DP_ACCESS_RW), -EINVAL);
	cr_assert_eq(dp_session_create(a, 70000), -EINVAL);
	cr_assert_gt(dp_session_create(a, 0), 0);
	cr_assert_eq(dp_session_create(a, 0), -EEXIST);
	dp_close(a);
	stop_svc(&svc);
}

Test(service_session, owner_gone_fails_at_once)
{
	struct dp_client *a, *b;
	struct dp_queue *q;
	struct owner o;
	struct dp_cqe c;
	uint8_t *loc;
	uint64_t t0;
	int lreg, seg;

	start_svc(&svc, local_only);
	b = connect_client(&svc, "owner");
	a = connect_client(&svc, "initiator");
	owner_make(&o, b, 65536, 65536);
	lreg = alloc_region(a, 65536, &loc);
	q = make_queue(a, 8);
	seg = dp_session_open(a, o.name, DP_ACCESS_RW);
	cr_assert_geq(seg, 0);
	expect_ok(run_va(q, true, lreg, 0, seg, o.shm, 4096, 1), 4096, DP_CQE_F_LOCAL, "before");
	dp_close(b);
	/* The service has seen it go once its session's port is closed. */
	t0 = now_ns();
	for (int h; (h = dp_session_open(a, o.name, DP_ACCESS_RW)) >= 0;) {
		dp_segment_close(a, h);
		cr_assert_lt(now_ns() - t0, 5000000000ull, "the session outlives its client");
		sleep_ms(1);
	}
	t0 = now_ns();
	c = run_va(q, true, lreg, 0, seg, o.shm, 4096, 2);
	cr_assert_eq(c.status, -ECONNRESET, "after the owner left: %s", dp_strerror(c.status));
	cr_assert_lt(now_ns() - t0, 1000000000ull, "at once, not at a timeout");
	/* And stays so; a new open is refused. */
	c = run_va(q, false, lreg, 0, seg, o.own, 4096, 3);
	cr_assert_eq(c.status, -ECONNRESET, "later: %s", dp_strerror(c.status));
	dp_queue_destroy(q);
	dp_close(a);
	stop_svc(&svc);
}

TestSuite(fabric_session, .fini = fab_teardown, .timeout = 120);

/* Two services: A's client reaches B's client's session. */
static void two_services(unsigned flags, const char *const *more, uint32_t path)
{
	const uint64_t llen = 64 * MiB + 4096;
	struct fab_pair p;
	struct dp_queue *q;
	struct owner o;
	uint8_t *loc;
	int lreg, seg;

	fab_pair_start(&p, "tcp", flags, more, more);
	owner_make(&o, p.cb, 64 * MiB + 4096, 64 * MiB + 8192);
	lreg = alloc_region(p.ca, llen, &loc);
	q = make_queue(p.ca, 64);
	seg = dp_session_open(p.ca, o.name, DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_session_open(%s): %s", o.name, dp_last_error());
	/* dp_alloc memory and memory of the owner's own (dp_register_mem). */
	move_both(q, lreg, loc, llen, seg, &o, path);
	notify_through(p.ca, q, lreg, loc, seg, &o,
		       path == DP_CQE_F_SAME_HOST ? DP_NOTIFY_F_SAME_HOST
		       : path == DP_CQE_F_FABRIC  ? DP_NOTIFY_F_FABRIC
						  : DP_NOTIFY_F_LOCAL);
	/* 64 in flight, scattered over the owner's dp_alloc memory. */
	{
		struct dp_desc d[64];
		struct dp_cqe out[64];

		for (unsigned i = 0; i < 64; i++) {
			pattern_fill(loc + i * 65536, 65536, 70 + i);
			dp_prep_write(&d[i], lreg, i * 65536, seg,
				      (uint64_t)(uintptr_t)(o.shm + (63 - i) * 65536), 65536,
				      900 + i);
		}
		run_batch(q, d, 64, out, 30000);
		for (unsigned i = 0; i < 64; i++) {
			expect_ok(out[i], 65536, path, "64 in flight");
			cr_assert_eq(pattern_check(o.shm + (63 - i) * 65536, 65536, 70 + i), -1,
				     "64 in flight: %u", i);
		}
	}
	dp_queue_destroy(q);
	fab_pair_stop(&p);
}

Test(fabric_session, another_service_of_this_host)
{
	two_services(FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, DP_CQE_F_SAME_HOST);
}

Test(fabric_session, another_service_through_the_fabric)
{
	two_services(0, NULL, DP_CQE_F_FABRIC);
}

/* A session's port flooded with connections that say nothing, and with
 * garbage: a bystander's WRITEs keep moving verified bytes throughout, the
 * session still answers its peers afterwards, and the service lives. */
Test(service_session, port_flood_and_garbage_stall_no_bystander)
{
	struct dp_client *a, *b;
	struct dp_queue *q;
	struct bystander by;
	struct owner o;
	uint8_t *loc, junk[1500];
	int lreg, seg, port, fds[300];
	uint64_t t0;

	start_svc(&svc, local_only);
	b = connect_client(&svc, "owner");
	a = connect_client(&svc, "initiator");
	owner_make(&o, b, 65536, 65536);
	port = atoi(strrchr(o.name, ':') + 1);
	bystander_start(&by);
	pattern_fill(junk, sizeof(junk), 5);
	t0 = now_ns();
	for (unsigned round = 0; round < 10; round++)
		for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
			struct sockaddr_in sa = {.sin_family = AF_INET,
						 .sin_port = htons((uint16_t)port),
						 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

			if (round)
				close(fds[i]);
			fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
			cr_assert_geq(fds[i], 0);
			if (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) == 0 && i % 3 == 0)
				(void)!send(fds[i], junk, sizeof(junk),
					    MSG_NOSIGNAL | MSG_DONTWAIT);
		}
	cr_log_info("session port flood: 3000 connections in %.0f ms",
		    (double)(now_ns() - t0) / 1e6);
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		close(fds[i]);
	bystander_finish(&by);
	/* The session still answers. */
	lreg = alloc_region(a, 65536, &loc);
	q = make_queue(a, 8);
	seg = dp_session_open(a, o.name, DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "open after the flood: %s", dp_last_error());
	pattern_fill(loc, 4096, 3);
	expect_ok(run_va(q, true, lreg, 0, seg, o.own + 4096, 4096, 1), 4096, DP_CQE_F_LOCAL,
		  "WRITE after the flood");
	cr_assert_eq(pattern_check(o.own + 4096, 4096, 3), -1);
	dp_queue_destroy(q);
	dp_close(a);
	dp_close(b);
	service_still_serves();
}

/* A notification alone to a session opened before its owner registered
 * anything: the session is asked again, and the owner hears it (this
 * service's session, and another service's of this host). */
static void notify_before_registrations(struct dp_client *a, struct dp_client *b)
{
	char sender[DP_NOTIFY_SENDER_MAX], buf[64];
	struct dp_notification n;
	uint8_t *mem;
	int seg;

	cr_assert_gt(dp_session_create(b, 0), 0);
	cr_assert_eq(dp_notify_open(b, 0), 0);
	seg = dp_session_open(a, dp_session_name(b), DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "open: %s", dp_last_error());
	alloc_region(b, 4096, &mem);
	cr_assert_eq(dp_notify_send(a, seg, "hello", 5), 0, "send: %s", dp_last_error());
	cr_assert_eq(dp_notify_recv(b, &n, sender, buf, sizeof(buf), 10000), 1);
	cr_assert_eq(n.msg_len, 5);
	cr_assert(!memcmp(buf, "hello", 5));
}

Test(service_session, notify_alone_to_a_session_that_had_no_registration)
{
	struct dp_client *a, *b;

	start_svc(&svc, local_only);
	a = connect_client(&svc, "initiator");
	b = connect_client(&svc, "owner");
	notify_before_registrations(a, b);
	dp_close(a);
	dp_close(b);
	stop_svc(&svc);
}

Test(fabric_session, notify_alone_to_a_session_that_had_no_registration)
{
	struct fab_pair p;

	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	notify_before_registrations(p.ca, p.cb);
	fab_pair_stop(&p);
}

/* Many handles' questions at once: eight clients of A open B's session of
 * 300 registrations together (each open asks for every registration), more
 * than the service lets be in flight: all succeed, none -EAGAIN, and each
 * writes into the last registration. */
struct opener {
	pthread_t t;
	struct dp_client *c;
	const char *name;
	uint64_t last;
	int rc;
};

static void *opener_main(void *arg)
{
	struct opener *o = arg;
	struct dp_client *c = o->c;
	struct dp_queue *q;
	struct dp_cqe cqe;
	struct dp_desc d;
	uint8_t *src;
	int seg, reg;

	reg = dp_alloc(c, 4096, 0, (void **)&src);
	seg = dp_session_open(c, o->name, DP_ACCESS_RW);
	if (reg < 0 || seg < 0 || dp_queue_create(c, 8, &q)) {
		o->rc = seg < 0 ? seg : -EINVAL;
		return NULL;
	}
	memset(src, 0x33, 64);
	dp_prep_write(&d, reg, 0, seg, o->last, 64, 1);
	while (dp_submit(q, &d, 1) == 0)
		;
	o->rc = dp_wait(q, &cqe, 1, 30000) == 1 ? cqe.status : -ETIMEDOUT;
	return NULL;
}

Test(fabric_session, many_handles_ask_at_once)
{
	enum { REGS = 300, OPENERS = 8 };
	struct opener o[OPENERS];
	struct fab_pair p;
	uint8_t *mem;

	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	cr_assert_gt(dp_session_create(p.cb, 0), 0);
	mem = mmap(NULL, REGS * 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(mem, MAP_FAILED);
	for (unsigned i = 0; i < REGS; i++)
		cr_assert_geq(dp_register_mem(p.cb, mem + i * 8192, 4096), 0, "registration %u: %s",
			      i, dp_last_error());
	for (unsigned i = 0; i < OPENERS; i++) {
		/* Connected one by one (a process's silent connections are
		 * capped), then opening all at once. */
		o[i] = (struct opener){.c = connect_client(&fab_svc[0], "opener"),
				       .name = dp_session_name(p.cb),
				       .last = (uint64_t)(uintptr_t)mem + (REGS - 1) * 8192 +
					       64 * i};
		cr_assert_eq(pthread_create(&o[i].t, NULL, opener_main, &o[i]), 0);
	}
	for (unsigned i = 0; i < OPENERS; i++) {
		pthread_join(o[i].t, NULL);
		cr_assert_eq(o[i].rc, 0, "opener %u: %s", i, dp_strerror(o[i].rc));
		cr_assert_eq(mem[(REGS - 1) * 8192 + 64 * i], 0x33, "opener %u's bytes", i);
		dp_close(o[i].c);
	}
	fab_pair_stop(&p);
}
