/* SPDX-License-Identifier: MIT */
/* notify_local.c - notifications (DP_DESC_F_NOTIFY) between clients of one
 * dataplaned: each arrives after its WRITE's bytes, in the order of one
 * queue's inline WRITEs, with its fields; a full ring drops and counts
 * without slowing the writer; an owner that is gone or never opened a ring
 * hurts nobody; the event-loop fd; the errors; registered memory
 * (dp_register_mem) on either side. */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(notify_local, .fini = svc_teardown, .timeout = 60);

/* The service's notification counters, summed over its pollers, once
 * they reach at least `want_total` (delivered + dropped) or 5 s pass. */
static void notify_counts(uint64_t want_total, uint64_t *delivered, uint64_t *dropped)
{
	const struct dp_stats_header *h = stats_map(&svc);
	uint64_t deadline = now_ns() + 5000000000ull;

	for (;;) {
		*delivered = *dropped = 0;
		for (unsigned i = 0; i < h->npollers; i++) {
			const struct dp_stats_poller *p = poller_block(h, i);

			*delivered += __atomic_load_n(&p->notify_delivered, __ATOMIC_RELAXED);
			*dropped += __atomic_load_n(&p->notify_dropped, __ATOMIC_RELAXED);
		}
		if (*delivered + *dropped >= want_total || now_ns() > deadline)
			break;
		sleep_ms(2);
	}
	stats_unmap(h);
}

/* A completion of a local WRITE that moved its bytes. */
static void cqe_ok(struct dp_cqe c, uint64_t user_data, uint64_t bytes)
{
	cr_assert_eq(c.user_data, user_data);
	cr_assert_eq(c.status, 0, "WRITE %llu: %s", (unsigned long long)user_data,
		     dp_strerror(c.status));
	cr_assert_eq(c.bytes, bytes);
	cr_assert_eq(c.flags, DP_CQE_F_LOCAL);
}

/* The owner exports `len` bytes as "kv" and opens a ring of `entries`;
 * the writer (another client) has a region of `len` and the segment. */
struct pair {
	struct dp_client *owner, *writer;
	struct dp_queue *q;
	uint8_t *tgt, *src;
	int treg, sreg, seg;
};

static void pair_open(struct pair *p, size_t len, uint32_t entries, uint32_t depth)
{
	p->owner = connect_client(&svc, "owner");
	p->treg = alloc_region(p->owner, len, &p->tgt);
	export_segment(p->owner, p->treg, "kv", DP_ACCESS_RW);
	if (entries)
		cr_assert_eq(dp_notify_open(p->owner, entries), 0, "%s", dp_last_error());
	p->writer = connect_client(&svc, "writer");
	p->q = make_queue(p->writer, depth);
	p->sreg = alloc_region(p->writer, len, &p->src);
	p->seg = open_segment(p->writer, NULL, "kv", DP_ACCESS_RW);
}

/* Slot i of the data test: where, how long (inline and chunked copies). */
static uint64_t slot_len(unsigned i)
{
	return i % 4 == 3 ? (1u << 20) : 64u << (i % 4); /* 64 B .. 256 B, 1 MiB */
}

#define SLOTS 64
#define SLOT_SPAN (1u << 20)

struct writer_arg {
	struct pair *p;
	atomic_int failed;
};

/* Writes every slot (a pattern of its own) with a notification of its
 * index, one at a time with up to 8 in flight, on another thread (its own
 * client and queue: the bytes travel through the service). */
static void *writer_main(void *arg)
{
	struct writer_arg *w = arg;
	struct pair *p = w->p;
	struct dp_cqe cqes[8];
	unsigned sent = 0, done = 0;

	for (unsigned i = 0; i < SLOTS; i++)
		pattern_fill(p->src + (uint64_t)i * SLOT_SPAN, slot_len(i), 1000 + i);
	while (done < SLOTS) {
		while (sent < SLOTS && sent - done < 8) {
			struct dp_desc d;
			uint64_t off = (uint64_t)sent * SLOT_SPAN;

			dp_prep_write_notify(&d, p->sreg, off, p->seg, off, slot_len(sent), sent,
					     sent);
			if (dp_submit(p->q, &d, 1) != 1)
				break;
			sent++;
		}
		int k = dp_wait(p->q, cqes, 8, 5000);

		if (k <= 0) {
			atomic_store(&w->failed, 1);
			return NULL;
		}
		for (int j = 0; j < k; j++)
			if (cqes[j].status)
				atomic_store(&w->failed, 1);
		done += (unsigned)k;
	}
	return NULL;
}

/* The owner checks the bytes the moment it sees each notification: they
 * are all there (a notification sent before its data, or before the last
 * chunk of a 1 MiB copy, would find zeros). */
Test(notify_local, data_before_notification)
{
	struct writer_arg w = {0};
	struct dp_notification n[8];
	bool seen[SLOTS] = {0};
	unsigned got = 0;
	pthread_t t;
	struct pair p;

	start_svc(&svc, local_only);
	pair_open(&p, (size_t)SLOTS * SLOT_SPAN, 256, 64);
	w.p = &p;
	cr_assert_eq(pthread_create(&t, NULL, writer_main, &w), 0);
	while (got < SLOTS) {
		int k = dp_notify_wait(p.owner, n, 8, 5000);

		cr_assert_gt(k, 0, "notification %u: %s", got, k ? dp_last_error() : "timeout");
		for (int j = 0; j < k; j++) {
			unsigned i = (unsigned)n[j].value;

			cr_assert_lt(i, SLOTS);
			cr_assert(!seen[i], "notification %u twice", i);
			seen[i] = true;
			cr_assert_eq(n[j].offset, (uint64_t)i * SLOT_SPAN);
			cr_assert_eq(n[j].len, slot_len(i));
			cr_assert_eq(n[j].flags, DP_NOTIFY_F_LOCAL);
			cr_assert_eq(n[j].dropped, 0);
			cr_assert_neq(n[j].sender, 0);
			cr_assert_str_eq(n[j].segment, "kv");
			cr_assert_eq(pattern_check(p.tgt + n[j].offset, n[j].len, 1000 + i), -1,
				     "slot %u (%llu bytes): notified before its bytes", i,
				     (unsigned long long)n[j].len);
			got++;
		}
	}
	pthread_join(t, NULL);
	cr_assert_eq(atomic_load(&w.failed), 0, "a WRITE failed");
	cr_assert_eq(dp_notify_poll(p.owner, n, 8), 0, "more notifications than WRITEs");
	dp_close(p.writer);
	dp_close(p.owner);
}

/* One queue's inline WRITEs (the documented case: each is copied in
 * submit) notify in submission order; the completions follow the same
 * order; the ring is reused across its wrap. */
Test(notify_local, order_of_one_queue)
{
	enum { N = 1024, BATCH = 32 };
	struct dp_notification n[BATCH];
	struct dp_cqe cqes[BATCH];
	struct dp_desc d[BATCH];
	unsigned next = 0;
	struct pair p;

	start_svc(&svc, local_only);
	pair_open(&p, 4096, 64, 64);
	pattern_fill(p.src, 64, 3);
	for (unsigned base = 0; base < N; base += BATCH) {
		for (unsigned i = 0; i < BATCH; i++)
			dp_prep_write_notify(&d[i], p.sreg, 0, p.seg, (base + i) % 64, 8, base + i,
					     0xabc00000ull + base + i);
		submit_all(p.q, d, BATCH, 5000);
		reap(p.q, cqes, BATCH, 5000);
		for (unsigned i = 0; i < BATCH; i++)
			cqe_ok(cqes[i], base + i, 8);
		for (unsigned got = 0; got < BATCH;) {
			int k = dp_notify_wait(p.owner, n, BATCH - got, 5000);

			cr_assert_gt(k, 0, "%s", k ? dp_last_error() : "timeout");
			for (int j = 0; j < k; j++, next++) {
				cr_assert_eq(n[j].value, 0xabc00000ull + next, "out of order");
				cr_assert_eq(n[j].offset, next % 64);
			}
			got += (unsigned)k;
		}
	}
	cr_assert_eq(next, N);
	dp_close(p.writer);
	dp_close(p.owner);
}

/* An owner that never reads: its ring of 4 fills, the rest are dropped and
 * counted, and the writer's WRITEs all complete as usual, promptly. The
 * next notification after the owner reads says how many it lost. */
Test(notify_local, full_ring_drops_and_counts)
{
	enum { N = 200 };
	struct dp_notification n[8];
	struct dp_cqe cqes[N];
	struct dp_desc d[N];
	uint64_t delivered, dropped, t0;
	struct pair p;
	int k;

	start_svc(&svc, local_only);
	pair_open(&p, 4096, 4, 256);
	for (unsigned i = 0; i < N; i++)
		dp_prep_write_notify(&d[i], p.sreg, 0, p.seg, 0, 64, i, i);
	t0 = now_ns();
	submit_all(p.q, d, N, 5000);
	reap(p.q, cqes, N, 5000);
	for (unsigned i = 0; i < N; i++)
		cqe_ok(cqes[i], i, 64);
	cr_assert_lt(now_ns() - t0, 3000000000ull, "the writer was held up");
	notify_counts(N, &delivered, &dropped);
	cr_assert_eq(delivered, 4, "delivered %llu", (unsigned long long)delivered);
	cr_assert_eq(dropped, N - 4, "dropped %llu", (unsigned long long)dropped);
	k = dp_notify_poll(p.owner, n, 8);
	cr_assert_eq(k, 4);
	for (int j = 0; j < k; j++) {
		cr_assert_eq(n[j].value, (uint64_t)j);
		cr_assert_eq(n[j].dropped, 0);
	}
	dp_prep_write_notify(&d[0], p.sreg, 0, p.seg, 0, 64, 999, 999);
	run_ok(p.q, &d[0], DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(dp_notify_wait(p.owner, n, 8, 5000), 1);
	cr_assert_eq(n[0].value, 999);
	cr_assert_eq(n[0].dropped, N - 4, "the loss is told");
	dp_close(p.writer);
	dp_close(p.owner);
}

/* Without dp_notify_open the notifications are dropped and counted; the
 * WRITEs move their bytes. */
Test(notify_local, owner_without_ring)
{
	uint64_t delivered, dropped;
	struct dp_desc d;
	struct pair p;

	start_svc(&svc, local_only);
	pair_open(&p, 4096, 0, 8);
	pattern_fill(p.src, 128, 5);
	dp_prep_write_notify(&d, p.sreg, 0, p.seg, 0, 128, 1, 42);
	run_ok(p.q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(pattern_check(p.tgt, 128, 5), -1);
	notify_counts(1, &delivered, &dropped);
	cr_assert_eq(delivered, 0);
	cr_assert_eq(dropped, 1);
	cr_assert_eq(dp_notify_poll(p.owner, NULL, 0), -EBADF);
	dp_close(p.writer);
	dp_close(p.owner);
}

/* The owner dies (a process of its own, killed) while 1 MiB notify WRITEs
 * stream into its export: each completes with 0 or, once the export is
 * gone, -ECONNRESET as any WRITE does; the service lives on. */
Test(notify_local, owner_death)
{
	int ready[2], seg, sreg;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *src;
	unsigned ok = 0, reset = 0;
	pid_t pid;
	char x;

	start_svc(&svc, local_only);
	cr_assert_eq(pipe(ready), 0);
	pid = fork();
	if (!pid) {
		struct dp_client *o;
		uint8_t *mem;
		int r;

		if (dp_connect(svc.sock, "owner", &o) ||
		    (r = dp_alloc(o, 4 << 20, 0, (void **)&mem)) < 0 ||
		    dp_segment_export(o, r, "kv", DP_ACCESS_RW) || dp_notify_open(o, 16))
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(2);
		for (;;)
			pause(); /* reads nothing: its ring fills */
	}
	child_pid = pid;
	cr_assert_eq(read(ready[0], &x, 1), 1);
	c = connect_client(&svc, "writer");
	q = make_queue(c, 16);
	sreg = alloc_region(c, 4 << 20, &src);
	seg = open_segment(c, NULL, "kv", DP_ACCESS_RW);
	for (unsigned i = 0; i < 400; i++) {
		struct dp_desc d;
		struct dp_cqe cqe;

		if (i == 100) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			child_pid = 0;
		}
		dp_prep_write_notify(&d, sreg, 0, seg, (i % 4) << 20, 1 << 20, i, i);
		cqe = run_wait(q, &d, 5000);
		if (cqe.status == 0) {
			cr_assert_eq(reset, 0, "a WRITE succeeded after the export died");
			ok++;
		} else {
			cr_assert_eq(cqe.status, -ECONNRESET, "%s", dp_strerror(cqe.status));
			reset++;
		}
	}
	cr_assert_geq(ok, 100);
	cr_assert_gt(reset, 0, "the owner's death was never seen");
	dp_close(c);
	service_still_serves();
}

/* The event-loop way: the fd reads ready once a notification is there and
 * not after the ring was emptied by dp_notify_poll. */
Test(notify_local, doorbell_fd)
{
	struct dp_notification n[4];
	struct pollfd pfd;
	struct dp_desc d;
	struct pair p;

	start_svc(&svc, local_only);
	pair_open(&p, 4096, 16, 8);
	pfd.fd = dp_notify_fd(p.owner);
	pfd.events = POLLIN;
	cr_assert_geq(pfd.fd, 0);
	cr_assert_eq(dp_notify_poll(p.owner, n, 4), 0);
	cr_assert_eq(poll(&pfd, 1, 0), 0, "ready with nothing there");
	for (unsigned round = 0; round < 3; round++) {
		dp_prep_write_notify(&d, p.sreg, 0, p.seg, 0, 64, round, 100 + round);
		run_ok(p.q, &d, DP_CQE_F_LOCAL, 5000);
		cr_assert_eq(poll(&pfd, 1, 5000), 1, "round %u: no doorbell", round);
		cr_assert_eq(dp_notify_poll(p.owner, n, 4), 1);
		cr_assert_eq(n[0].value, 100 + round);
		cr_assert_eq(dp_notify_poll(p.owner, n, 4), 0);
		cr_assert_eq(poll(&pfd, 1, 0), 0, "round %u: still ready once drained", round);
	}
	dp_close(p.writer);
	dp_close(p.owner);
}

/* Notifications that wait already when the event loop first asks for the
 * fd rang no doorbell (NEED_WAKEUP was not set): the fd reads ready for
 * them all the same, and not once they are taken. */
Test(notify_local, doorbell_fd_with_notifications_waiting)
{
	struct dp_notification n[4];
	struct pollfd pfd = {.events = POLLIN};
	struct dp_desc d;
	struct pair p;

	start_svc(&svc, local_only);
	pair_open(&p, 4096, 16, 8);
	for (unsigned i = 0; i < 2; i++) {
		dp_prep_write_notify(&d, p.sreg, 0, p.seg, 0, 64, i, 200 + i);
		run_ok(p.q, &d, DP_CQE_F_LOCAL, 5000);
	}
	pfd.fd = dp_notify_fd(p.owner);
	cr_assert_geq(pfd.fd, 0);
	cr_assert_eq(poll(&pfd, 1, 1000), 1, "two notifications wait and the fd is not ready");
	cr_assert_eq(dp_notify_poll(p.owner, n, 4), 2);
	cr_assert_eq(n[0].value, 200);
	cr_assert_eq(n[1].value, 201);
	cr_assert_eq(dp_notify_poll(p.owner, n, 4), 0);
	cr_assert_eq(poll(&pfd, 1, 0), 0, "still ready once drained");
	/* And the doorbell still wakes it for the next one. */
	dp_prep_write_notify(&d, p.sreg, 0, p.seg, 0, 64, 9, 209);
	run_ok(p.q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(poll(&pfd, 1, 5000), 1, "no doorbell after the drain");
	cr_assert_eq(dp_notify_poll(p.owner, n, 4), 1);
	cr_assert_eq(n[0].value, 209);
	dp_close(p.writer);
	dp_close(p.owner);
}

/* What is refused, and how. */
Test(notify_local, errors)
{
	struct dp_notification n;
	struct dp_desc d;
	struct dp_cqe cqe;
	struct pair p;

	start_svc(&svc, local_only);
	pair_open(&p, 4096, 0, 8);
	cr_assert_eq(dp_notify_poll(p.owner, &n, 1), -EBADF);
	cr_assert_eq(dp_notify_wait(p.owner, &n, 1, 0), -EBADF);
	cr_assert_eq(dp_notify_fd(p.owner), -EBADF);
	cr_assert_eq(dp_notify_open(p.owner, 3), -EINVAL);
	cr_assert_eq(dp_notify_open(p.owner, 1u << 20), -EINVAL); /* > --max-depth */
	cr_assert_eq(dp_notify_open(p.owner, 8), 0);
	cr_assert_eq(dp_notify_open(p.owner, 8), -EEXIST);
	cr_assert_eq(dp_notify_poll(NULL, &n, 1), -EINVAL);
	/* A notification on a READ. */
	dp_prep_write_notify(&d, p.sreg, 0, p.seg, 0, 64, 1, 7);
	d.opcode = DP_OP_READ;
	cqe = run_wait(p.q, &d, 5000);
	cr_assert_eq(cqe.status, -EINVAL);
	/* A value without the flag; an unknown flag. */
	dp_prep_write(&d, p.sreg, 0, p.seg, 0, 64, 2);
	d.notify = 7;
	cqe = run_wait(p.q, &d, 5000);
	cr_assert_eq(cqe.status, -EINVAL);
	dp_prep_write_notify(&d, p.sreg, 0, p.seg, 0, 64, 3, 7);
	d.flags |= 2;
	cqe = run_wait(p.q, &d, 5000);
	cr_assert_eq(cqe.status, -EINVAL);
	/* Out of range: -EFAULT as for any WRITE, and no notification. */
	dp_prep_write_notify(&d, p.sreg, 0, p.seg, 4000, 200, 4, 7);
	cqe = run_wait(p.q, &d, 5000);
	cr_assert_eq(cqe.status, -EFAULT);
	cr_assert_eq(dp_notify_poll(p.owner, &n, 1), 0);
	/* A notify WRITE of 0 bytes notifies. */
	dp_prep_write_notify(&d, p.sreg, 0, p.seg, 0, 0, 5, 8);
	cqe = run_wait(p.q, &d, 5000);
	cr_assert_eq(cqe.status, 0);
	cr_assert_eq(dp_notify_wait(p.owner, &n, 1, 5000), 1);
	cr_assert_eq(n.value, 8);
	cr_assert_eq(n.len, 0);
	dp_close(p.writer);
	dp_close(p.owner);
}

/* Memory the writer already has (dp_register_mem, the vm engine) carries
 * notifications as host memory does: from such a region into a host
 * export, inline (64 B) and chunked (1 MiB), and from a host region into
 * the export of such a region; each notification after its bytes, before
 * the writer's completion. */
Test(notify_local, registered_memory_notifies)
{
	const uint64_t lens[] = {64, 1u << 20};
	struct dp_notification n;
	struct dp_client *owner2;
	uint8_t *mem, *mem2;
	int mreg, mreg2, seg2;
	struct pair p;

	start_svc(&svc, local_only);
	pair_open(&p, 2u << 20, 16, 8);
	mem = aligned_alloc(4096, 2u << 20);
	cr_assert(mem);
	mreg = dp_register_mem(p.writer, mem, 2u << 20);
	cr_assert_geq(mreg, 0, "%s", dp_last_error());
	for (unsigned i = 0; i < 2; i++) {
		struct dp_desc d;
		struct dp_cqe c;

		pattern_fill(mem, lens[i], 70 + i);
		dp_prep_write_notify(&d, mreg, 0, p.seg, 4096, lens[i], 10 + i, 500 + i);
		cr_assert_eq(dp_submit(p.q, &d, 1), 1);
		cr_assert_eq(dp_wait(p.q, &c, 1, 10000), 1);
		cr_assert_eq(c.status, 0, "registered memory -> host export, %llu B: %s",
			     (unsigned long long)lens[i], dp_strerror(c.status));
		cr_assert_eq(c.flags, DP_CQE_F_LOCAL);
		/* Delivered before the completion: no wait needed. */
		cr_assert_eq(dp_notify_poll(p.owner, &n, 1), 1, "no notification for %llu B",
			     (unsigned long long)lens[i]);
		cr_assert_eq(n.value, 500 + i);
		cr_assert_eq(n.offset, 4096);
		cr_assert_eq(n.len, lens[i]);
		cr_assert_eq(pattern_check(p.tgt + 4096, lens[i], 70 + i), -1);
	}
	/* The other way: a host region into an export of registered memory. */
	owner2 = connect_client(&svc, "owner2");
	mem2 = aligned_alloc(4096, 2u << 20);
	cr_assert(mem2);
	memset(mem2, 0, 2u << 20);
	mreg2 = dp_register_mem(owner2, mem2, 2u << 20);
	cr_assert_geq(mreg2, 0, "%s", dp_last_error());
	export_segment(owner2, mreg2, "kv-mem", DP_ACCESS_RW);
	cr_assert_eq(dp_notify_open(owner2, 16), 0, "%s", dp_last_error());
	seg2 = open_segment(p.writer, NULL, "kv-mem", DP_ACCESS_RW);
	for (unsigned i = 0; i < 2; i++) {
		struct dp_desc d;
		struct dp_cqe c;

		pattern_fill(p.src, lens[i], 80 + i);
		dp_prep_write_notify(&d, p.sreg, 0, seg2, 128, lens[i], 20 + i, 600 + i);
		cr_assert_eq(dp_submit(p.q, &d, 1), 1);
		cr_assert_eq(dp_wait(p.q, &c, 1, 10000), 1);
		cr_assert_eq(c.status, 0, "host -> registered export, %llu B: %s",
			     (unsigned long long)lens[i], dp_strerror(c.status));
		cr_assert_eq(dp_notify_poll(owner2, &n, 1), 1, "no notification for %llu B",
			     (unsigned long long)lens[i]);
		cr_assert_eq(n.value, 600 + i);
		cr_assert_eq(n.offset, 128);
		cr_assert_eq(n.len, lens[i]);
		cr_assert_str_eq(n.segment, "kv-mem");
		cr_assert_eq(pattern_check(mem2 + 128, lens[i], 80 + i), -1);
	}
	dp_close(p.writer);
	dp_close(owner2);
	dp_close(p.owner);
	free(mem);
	free(mem2);
}
