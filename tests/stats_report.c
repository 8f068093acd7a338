/* SPDX-License-Identifier: MIT */
/* stats_report.c - a known load through two queues; ring-stat's JSON, Prometheus and table report exactly it, and keep it across detach. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataplane.h"
#include "dp_client_pvt.h"
#include "dp_stats.h"
#include "helpers.h"

#define BUF (64u * 1024)
#define N_WRITE 1000u /* queue 0: 64 B WRITEs */
#define N_BADF 7u     /* queue 0: unknown region id -> EBADF */
#define N_READ 300u   /* queue 1: 4 KiB READs */
#define N_INVAL 5u    /* queue 1: unknown opcode -> EINVAL */
#define N_FAULT 3u    /* queue 1: past the segment's end -> EFAULT */
#define N_NOP 10u

static char region[64];
static int sidx; /* index of "--stats" in the flags, for tests that need the name */

static void start(void)
{
	const char *args[] = {"--provider", "none", "--stats", NULL, NULL};

	snprintf(region, sizeof(region), "%s", test_region_name());
	args[3] = region;
	sidx = 2;
	start_svc(&svc, args);
}

static void teardown(void)
{
	svc_kill(&svc);
	shm_unlink(region);
}

/* Runs every descriptor (run_batch); counts completions by status. */
static void run_all(struct dp_queue *q, const struct dp_desc *d, unsigned n, unsigned *ok,
		    unsigned *by_errno /* [256] */)
{
	struct dp_cqe *out = calloc(n, sizeof(*out));

	cr_assert(out);
	run_batch(q, d, n, out, 30000);
	for (unsigned i = 0; i < n; i++) {
		if (out[i].status == 0)
			(*ok)++;
		else
			by_errno[-out[i].status & 255]++;
	}
	free(out);
}

static struct jv *sample_until(const char *const *args, bool (*pred)(const struct jv *));

/* Both queues of the load with nothing waiting either way: the client
 * reaped every completion, and the CQ column says so. */
static bool rings_empty(const struct jv *s)
{
	for (unsigned i = 0; i < 2; i++) {
		const struct jv *q = json_queue(s, getpid(), i);

		if (!q || json_u64(q, "sq_depth") || json_u64(q, "cq_depth"))
			return false;
	}
	return true;
}

/* Every descriptor so far counted in the region. A poller publishes once it
 * has been idle a few microseconds (or before it sleeps); on a loaded
 * machine its thread may not run for a while after the client's last
 * completion, so a reader waits for that instead of taking the first
 * sample. */
static uint64_t want_total;

static bool all_published(const struct jv *s)
{
	return json_u64(s, "totals.submitted") == want_total &&
	       json_u64(s, "totals.completed") + json_u64(s, "totals.failed") == want_total;
}

static void wait_published(uint64_t total)
{
	const char *args[] = {"--stats", region, "--json", NULL};

	want_total = total;
	json_free(sample_until(args, all_published));
}

struct load {
	struct dp_client *c;
	struct dp_queue *q[2];
	int src, dst, seg;
};

/* The known load: queue 0 and queue 1 of client "stats-a". */
static void drive(struct load *l)
{
	static struct dp_desc d0[N_WRITE + N_BADF], d1[N_READ + N_INVAL + N_FAULT];
	unsigned ok = 0, by_errno[256] = {0};
	void *sp, *dp;
	int rc;

	rc = dp_connect(svc.sock, "stats-a", &l->c);
	cr_assert_eq(rc, 0, "dp_connect: %s", dp_strerror(rc));
	for (int i = 0; i < 2; i++) {
		rc = dp_queue_create(l->c, 64, &l->q[i]);
		cr_assert_eq(rc, 0, "dp_queue_create: %s", dp_strerror(rc));
	}
	l->src = dp_alloc(l->c, BUF, 0, &sp);
	l->dst = dp_alloc(l->c, BUF, 0, &dp);
	cr_assert(l->src >= 0 && l->dst >= 0, "dp_alloc");
	cr_assert_eq(dp_segment_export(l->c, l->dst, "stats-dst", DP_ACCESS_RW), 0);
	l->seg = dp_segment_open(l->c, NULL, "stats-dst", DP_ACCESS_RW);
	cr_assert_geq(l->seg, 0, "dp_segment_open: %s", dp_strerror(l->seg));
	pattern_fill(sp, BUF, 1);

	for (unsigned i = 0; i < N_WRITE; i++)
		dp_prep_write(&d0[i], l->src, (i * 64) % BUF, l->seg, (i * 64) % BUF, 64, i);
	for (unsigned i = 0; i < N_BADF; i++)
		dp_prep_write(&d0[N_WRITE + i], 999, 0, l->seg, 0, 64, 1000000 + i);
	run_all(l->q[0], d0, N_WRITE + N_BADF, &ok, by_errno);
	cr_assert_eq(ok, N_WRITE);
	cr_assert_eq(by_errno[EBADF], N_BADF);

	ok = 0;
	memset(by_errno, 0, sizeof(by_errno));
	for (unsigned i = 0; i < N_READ; i++)
		dp_prep_read(&d1[i], l->src, (i % 16) * 4096, l->seg, (i % 16) * 4096, 4096, i);
	for (unsigned i = 0; i < N_INVAL; i++) {
		dp_prep_write(&d1[N_READ + i], l->src, 0, l->seg, 0, 64, 2000000 + i);
		d1[N_READ + i].opcode = 9;
	}
	for (unsigned i = 0; i < N_FAULT; i++)
		dp_prep_write(&d1[N_READ + N_INVAL + i], l->src, 0, l->seg, BUF - 100, 4096,
			      3000000 + i);
	run_all(l->q[1], d1, N_READ + N_INVAL + N_FAULT, &ok, by_errno);
	cr_assert_eq(ok, N_READ);
	cr_assert_eq(by_errno[EINVAL], N_INVAL);
	cr_assert_eq(by_errno[EFAULT], N_FAULT);
	wait_published(N_WRITE + N_BADF + N_READ + N_INVAL + N_FAULT);
}

static void check_queue(const struct jv *q, uint64_t ok, uint64_t failed, uint64_t bytes)
{
	uint64_t count = json_u64(q, "latency_ns.count");

	cr_assert_eq(json_u64(q, "submitted"), ok + failed, "submitted %llu, want %llu",
		     (unsigned long long)json_u64(q, "submitted"),
		     (unsigned long long)(ok + failed));
	cr_assert_eq(json_u64(q, "completed"), ok);
	cr_assert_eq(json_u64(q, "failed"), failed);
	cr_assert_eq(json_u64(q, "bytes"), bytes, "bytes %llu, want %llu",
		     (unsigned long long)json_u64(q, "bytes"), (unsigned long long)bytes);
	cr_assert_eq(json_u64(q, "in_flight"), 0);
	cr_assert_eq(json_u64(q, "latency_unstamped"), 0);
	cr_assert_eq(count, ok + failed, "histogram count %llu, want completed + failed = %llu",
		     (unsigned long long)count, (unsigned long long)(ok + failed));
	cr_assert(json_u64(q, "latency_ns.p50") > 0);
	cr_assert(json_u64(q, "latency_ns.p50") <= json_u64(q, "latency_ns.p99"));
	cr_assert(json_u64(q, "latency_ns.p99") <= json_u64(q, "latency_ns.max"));
}

/* Polls ring-stat until pred holds (5 s at most). */
static struct jv *sample_until(const char *const *args, bool (*pred)(const struct jv *))
{
	for (int i = 0; i < 100; i++) {
		struct jv *s = ring_stat_json(args);

		if (pred(s))
			return s;
		json_free(s);
		usleep(50000);
	}
	cr_assert_fail("ring-stat never showed the expected state");
	return NULL;
}

static bool one_queue_left(const struct jv *s)
{
	return json_get(s, "queues")->n == 1;
}

/* The client gone and what it held released: its regions go at the end of
 * a grace period of the pollers, after the client itself. */
static bool no_clients(const struct jv *s)
{
	return json_u64(s, "service.clients") == 0 && json_get(s, "queues")->n == 0 &&
	       json_u64(s, "service.regions") == 0;
}

Test(stats_report, exact_counts_two_queues, .fini = teardown, .timeout = 60)
{
	const char *args[] = {"--stats", NULL, "--json", NULL};
	const uint64_t total = N_WRITE + N_BADF + N_READ + N_INVAL + N_FAULT;
	const uint64_t bytes = N_WRITE * 64ull + N_READ * 4096ull;
	struct load l;
	struct jv *s;
	const struct jv *q0, *q1, *p0;
	struct stat st;
	char path[128];
	uint64_t clients0; /* connections so far (the fixture's readiness probe is one) */

	start();
	args[1] = region;
	drive(&l);

	s = ring_stat_json(args);
	q0 = json_queue(s, getpid(), 0);
	q1 = json_queue(s, getpid(), 1);
	cr_assert(q0 && q1, "both queues listed");
	check_queue(q0, N_WRITE, N_BADF, N_WRITE * 64ull);
	check_queue(q1, N_READ, N_INVAL + N_FAULT, N_READ * 4096ull);
	cr_assert_eq(json_u64(q0, "failed_by.ebadf"), N_BADF);
	cr_assert_eq(json_u64(q1, "failed_by.einval"), N_INVAL);
	cr_assert_eq(json_u64(q1, "failed_by.efault"), N_FAULT);
	cr_assert_eq(json_u64(q0, "failed_by.einval"), 0);
	cr_assert_eq(json_u64(q0, "local_copies"), N_WRITE);
	cr_assert_eq(json_u64(q0, "depth"), 64);
	cr_assert_str_eq(json_get(q0, "client")->str, "stats-a");
	cr_assert_eq(json_u64(s, "totals.submitted"), total);
	cr_assert_eq(json_u64(s, "totals.completed"), N_WRITE + N_READ);
	cr_assert_eq(json_u64(s, "totals.failed"), N_BADF + N_INVAL + N_FAULT);
	cr_assert_eq(json_u64(s, "totals.bytes"), bytes);
	cr_assert_eq(json_u64(s, "service.clients"), 1);
	cr_assert_eq(json_u64(s, "service.queues"), 2);
	cr_assert_eq(json_u64(s, "service.regions"), 2);
	cr_assert_eq(json_u64(s, "service.registered_bytes"), 2ull * BUF);
	cr_assert_eq(json_u64(s, "service.segments"), 1);
	cr_assert_eq(json_u64(s, "service.pid"), (uint64_t)svc.pid);
	clients0 = json_u64(s, "service.clients_total");
	cr_assert_geq(clients0, 1);
	p0 = json_get(s, "pollers")->items[0];
	cr_assert_eq(json_u64(p0, "descriptors"), total);
	cr_assert_eq(json_u64(p0, "queues"), 2);
	cr_assert_eq(json_u64(p0, "paths.host.completions"), N_WRITE + N_READ);
	cr_assert_eq(json_u64(p0, "paths.host.bytes"), bytes);
	cr_assert(json_u64(p0, "busy_loops") > 0 &&
		  json_u64(p0, "loops") >= json_u64(p0, "busy_loops"));
	json_free(s);
	/* Every completion was reaped: CQ 0, not what the poller last saw of
	 * the client's head when it ran short of room (1000 mod 64 here). */
	json_free(sample_until(args, rings_empty));

	/* Read-only for everyone but the owner's group. */
	snprintf(path, sizeof(path), "/dev/shm/%s", region);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0640, "mode %o", st.st_mode & 0777);

	/* A destroyed queue's figures move to its poller's retired totals. */
	cr_assert_eq(dp_queue_destroy(l.q[0]), 0);
	s = sample_until(args, one_queue_left);
	cr_assert_null(json_queue(s, getpid(), 0));
	p0 = json_get(s, "pollers")->items[0];
	cr_assert_eq(json_u64(p0, "retired.queues"), 1);
	cr_assert_eq(json_u64(p0, "retired.submitted"), N_WRITE + N_BADF);
	cr_assert_eq(json_u64(p0, "retired.completed"), N_WRITE);
	cr_assert_eq(json_u64(p0, "retired.bytes"), N_WRITE * 64ull);
	cr_assert_eq(json_u64(p0, "retired.latency_count"), N_WRITE + N_BADF);
	cr_assert_eq(json_u64(s, "totals.submitted"), total);
	cr_assert_eq(json_u64(s, "totals.bytes"), bytes);
	cr_assert_eq(json_u64(s, "service.queues"), 1);
	json_free(s);

	/* Detach: gauges drop, totals keep growing from where they were. */
	dp_close(l.c);
	s = sample_until(args, no_clients);
	cr_assert_eq(json_u64(s, "service.regions"), 0);
	cr_assert_eq(json_u64(s, "service.registered_bytes"), 0);
	cr_assert_eq(json_u64(s, "service.segments"), 0);
	cr_assert_eq(json_u64(s, "service.queues"), 0);
	cr_assert_eq(json_u64(s, "service.clients_total"), clients0);
	cr_assert_eq(json_u64(s, "service.queues_total"), 2);
	cr_assert_eq(json_u64(s, "service.queues_retired"), 2);
	cr_assert_eq(json_u64(s, "totals.submitted"), total);
	cr_assert_eq(json_u64(s, "totals.completed"), N_WRITE + N_READ);
	cr_assert_eq(json_u64(s, "totals.bytes"), bytes);
	json_free(s);

	/* A new client's queue (a recycled or fresh block) starts from zero. */
	{
		struct dp_client *c;
		struct dp_queue *q;
		struct dp_desc d[N_NOP];
		unsigned ok = 0, by_errno[256] = {0};

		cr_assert_eq(dp_connect(svc.sock, "stats-b", &c), 0);
		cr_assert_eq(dp_queue_create(c, 0, &q), 0);
		for (unsigned i = 0; i < N_NOP; i++)
			d[i] = (struct dp_desc){.opcode = DP_OP_NOP, .user_data = i};
		run_all(q, d, N_NOP, &ok, by_errno);
		cr_assert_eq(ok, N_NOP);
		wait_published(total + N_NOP);
		s = ring_stat_json(args);
		q0 = json_queue(s, getpid(), 0);
		cr_assert(q0, "the new queue is listed");
		cr_assert_str_eq(json_get(q0, "client")->str, "stats-b");
		cr_assert_eq(json_u64(q0, "submitted"), N_NOP);
		cr_assert_eq(json_u64(q0, "completed"), N_NOP);
		cr_assert_eq(json_u64(q0, "bytes"), 0);
		cr_assert_eq(json_u64(q0, "latency_ns.count"), N_NOP);
		cr_assert(json_u64(q0, "generation") >= 1);
		cr_assert_eq(json_u64(s, "totals.submitted"), total + N_NOP);
		cr_assert_eq(json_u64(s, "service.clients_total"), clients0 + 1);
		json_free(s);
		dp_close(c);
	}
	cr_assert_eq(svc_stop(&svc), 0);
	cr_assert_neq(access(path, F_OK), 0, "the region is removed at a clean stop");
}

/*
 * Latency runs across stamps: the fast path times a burst whose first and
 * last descriptors carry one stamp from that stamp, and otherwise each
 * descriptor from its own (poller.c, fast_run). Raw pushes hand the poller
 * whole bursts of 32 with the stamps chosen here: half of the odd rounds'
 * descriptors 200 ms old, the rest 1 ms. Every completion is timed once,
 * and the old ones from their own stamp: p99 is about 200 ms, p50 far less.
 */
Test(stats_report, every_completion_timed_from_its_own_stamp, .fini = teardown, .timeout = 60)
{
	enum { N = 32, ROUNDS = 8, OLD_NS = 200000000, NEW_NS = 1000000 };
	const char *args[] = {"--stats", NULL, "--json", NULL};
	struct dp_ring_pair *pair;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d[N];
	struct dp_cqe cqe[N];
	const struct jv *q0;
	struct jv *s;
	int efd, src, dst, seg;
	void *sp, *dp;

	start();
	args[1] = region;
	cr_assert_eq(dp_connect(svc.sock, "stamps", &c), 0);
	cr_assert_eq(dp_queue_create(c, 64, &q), 0);
	cr_assert_eq(dp__queue_ring(q, &pair, &efd), 0);
	src = dp_alloc(c, BUF, 0, &sp);
	dst = dp_alloc(c, BUF, 0, &dp);
	cr_assert(src >= 0 && dst >= 0, "dp_alloc");
	cr_assert_eq(dp_segment_export(c, dst, "stamps-dst", DP_ACCESS_RW), 0);
	seg = dp_segment_open(c, NULL, "stamps-dst", DP_ACCESS_RW);
	cr_assert_geq(seg, 0);
	for (unsigned r = 0; r < ROUNDS; r++) {
		uint64_t now = now_ns();
		uint32_t idx;

		for (unsigned i = 0; i < N; i++) {
			dp_prep_write(&d[i], src, i * 64, seg, i * 64, 64, r * N + i);
			d[i].submit_ns = now - (r % 2 && i < N / 2 ? OLD_NS : NEW_NS);
		}
		cr_assert_eq(dp_ring_reserve_bulk(&pair->sq, N, &idx), N);
		dp_ring_copy_in(&pair->sq, idx, d, N);
		dp_ring_commit(&pair->sq, N);
		dp_doorbell_ring(efd);
		reap(q, cqe, N, 5000);
		for (unsigned i = 0; i < N; i++)
			cr_assert_eq(cqe[i].status, 0, "%s", dp_strerror(cqe[i].status));
	}
	wait_published(ROUNDS * N);
	s = ring_stat_json(args);
	q0 = json_queue(s, getpid(), 0);
	cr_assert(q0, "the queue is listed");
	check_queue(q0, ROUNDS * N, 0, ROUNDS * N * 64ull);
	/* A percentile is its bucket's middle (buckets are at most 3.1% wide). */
	cr_assert_geq(json_u64(q0, "latency_ns.p99"), OLD_NS - OLD_NS / 16, "p99 %llu ns",
		      (unsigned long long)json_u64(q0, "latency_ns.p99"));
	cr_assert_lt(json_u64(q0, "latency_ns.p50"), OLD_NS / 2, "p50 %llu ns",
		     (unsigned long long)json_u64(q0, "latency_ns.p50"));
	json_free(s);
	dp_close(c);
}

/* Labels: name="value" pairs, values with \\, \" and \n escapes only. */
static bool labels_ok(const char *p, const char *end)
{
	while (p < end) {
		if (!(isalpha((unsigned char)*p) || *p == '_'))
			return false;
		while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
			p++;
		if (p + 1 >= end || p[0] != '=' || p[1] != '"')
			return false;
		p += 2;
		while (p < end && *p != '"') {
			if (*p == '\\') {
				if (p + 1 >= end || !strchr("\\\"n", p[1]))
					return false;
				p++;
			}
			p++;
		}
		if (p >= end)
			return false;
		p++;
		if (p < end && *p++ != ',')
			return false;
	}
	return true;
}

Test(stats_report, prometheus_parses, .fini = teardown, .timeout = 60)
{
	const char *args[] = {"--stats", NULL, "--prometheus", NULL};
	char helped[256][96], typed[256][96], types[256][16];
	unsigned nh = 0, nt = 0, samples = 0, completed_seen = 0, file_seen = 0;
	uint64_t last_bucket = 0;
	struct tool_run r;
	struct load l;
	char *save, *line;

	start();
	args[1] = region;
	drive(&l);
	r = ring_stat(args);
	cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
	for (line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[96], family[96];
		const char *p = line, *brace, *sp;
		char *end;
		bool hist_part = false;
		size_t n;

		if (!strncmp(line, "# HELP ", 7)) {
			cr_assert(sscanf(line + 7, "%95s", helped[nh]) == 1 &&
					  strlen(line) > 8 + strlen(helped[nh]),
				  "HELP without text: %s", line);
			cr_assert_lt(++nh, 256u);
			continue;
		}
		if (!strncmp(line, "# TYPE ", 7)) {
			cr_assert(sscanf(line + 7, "%95s %15s", typed[nt], types[nt]) == 2, "%s",
				  line);
			cr_assert(!strcmp(types[nt], "counter") || !strcmp(types[nt], "gauge") ||
					  !strcmp(types[nt], "histogram") ||
					  !strcmp(types[nt], "summary"),
				  "TYPE %s", types[nt]);
			cr_assert_lt(++nt, 256u);
			continue;
		}
		cr_assert_neq(line[0], '#', "stray comment: %s", line);
		/* name{labels} value */
		n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
		cr_assert(n > 0 && n < sizeof(name) && !isdigit((unsigned char)p[0]),
			  "bad name: %s", line);
		memcpy(name, p, n);
		name[n] = 0;
		p += n;
		if (*p == '{') {
			brace = strchr(p, '}');
			cr_assert(brace && labels_ok(p + 1, brace), "bad labels: %s", line);
			p = brace + 1;
		}
		cr_assert_eq(*p, ' ', "no value: %s", line);
		sp = p + 1;
		if (strcmp(sp, "+Inf") && strcmp(sp, "-Inf") && strcmp(sp, "NaN")) {
			strtod(sp, &end);
			cr_assert(end != sp && *end == 0, "bad value: %s", line);
		}
		/* Its family has HELP and TYPE, given before the sample. */
		snprintf(family, sizeof(family), "%s", name);
		for (const char *suf = "_bucket\0_sum\0_count\0"; *suf; suf += strlen(suf) + 1) {
			size_t fl = strlen(family), sl = strlen(suf);

			for (unsigned i = 0; i < nt; i++)
				if (fl > sl && !strcmp(family + fl - sl, suf) &&
				    !strncmp(typed[i], family, fl - sl) && typed[i][fl - sl] == 0 &&
				    !strcmp(types[i], "histogram")) {
					family[fl - sl] = 0;
					hist_part = true;
					break;
				}
			if (hist_part)
				break;
		}
		{
			bool h = false, t = false;

			for (unsigned i = 0; i < nh; i++)
				h |= !strcmp(helped[i], family);
			for (unsigned i = 0; i < nt; i++)
				t |= !strcmp(typed[i], family);
			cr_assert(h && t, "sample of %s without HELP or TYPE before it", family);
		}
		if (!strcmp(name, "dataplane_queue_completed_total") &&
		    strstr(line, "client=\"stats-a\"")) {
			uint64_t want = strstr(line, "queue=\"0\"") ? N_WRITE : N_READ;

			cr_assert_eq(strtoull(sp, NULL, 10), want, "%s", line);
			completed_seen++;
		}
		if (!strcmp(name, "dataplane_file_ios_total") ||
		    !strcmp(name, "dataplane_file_bytes_total")) {
			cr_assert(strstr(line, "mode=\"direct\"") ||
					  strstr(line, "mode=\"buffered\""),
				  "%s", line);
			cr_assert_eq(strtoull(sp, NULL, 10), 0, "host copies are no file I/O: %s",
				     line);
			file_seen++;
		}
		if (!strcmp(name, "dataplane_queue_latency_seconds_bucket") &&
		    strstr(line, "queue=\"0\"")) {
			uint64_t v = strtoull(sp, NULL, 10);

			cr_assert_geq(v, last_bucket, "histogram buckets are cumulative: %s", line);
			last_bucket = v;
			if (strstr(line, "le=\"+Inf\""))
				cr_assert_eq(v, N_WRITE + N_BADF, "%s", line);
		}
		samples++;
	}
	cr_assert_gt(samples, 50u);
	cr_assert_eq(completed_seen, 2u);
	cr_assert_geq(file_seen, 4u, "file I/O families: direct and buffered, slices and bytes");
	cr_assert_eq(nh, nt, "one HELP per TYPE");
	tool_run_free(&r);
	dp_close(l.c);
}

Test(stats_report, watch_filter_and_table, .fini = teardown, .timeout = 60)
{
	const char *watch[] = {"--stats", NULL, "--json", "-w", "0.2", "-c", "3", NULL};
	const char *filter[] = {"--stats",   NULL,     "--json", "-q",
				"stats-a:1", "--sort", "ops",	 NULL};
	const char *table[] = {"--stats", NULL, NULL};
	const char *wide[] = {"--stats", NULL, "--wide", NULL};
	const char *colour[] = {"--stats", NULL, "--color", "always", NULL};
	struct tool_run r;
	struct load l;
	const char *p;
	unsigned lines = 0;
	size_t longest = 0;
	struct jv *s;

	start();
	watch[1] = filter[1] = table[1] = wide[1] = colour[1] = region;
	drive(&l);

	/* -w: one object per sample; later samples carry interval rates. */
	r = ring_stat(watch);
	cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
	p = r.out;
	while (*p) {
		const char *end;
		struct jv *v = json_parse(p, &end);

		cr_assert(v && v->t == J_OBJ, "sample %u is not a JSON object", lines);
		cr_assert_eq(json_get(v, "first")->b, lines == 0);
		if (lines) {
			double iv = json_get(v, "interval_s")->num;

			cr_assert(iv > 0.1 && iv < 2, "interval %f", iv);
		}
		json_free(v);
		lines++;
		p = end;
	}
	cr_assert_eq(lines, 3u);
	tool_run_free(&r);

	/* -q CLIENT:ID keeps that queue only. */
	s = ring_stat_json(filter);
	cr_assert_eq(json_get(s, "queues")->n, 1);
	cr_assert_eq(json_u64(json_get(s, "queues")->items[0], "queue"), 1);
	json_free(s);

	/* The default table fits 80 columns and has no colour when piped. */
	r = ring_stat(table);
	cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
	cr_assert_null(strchr(r.out, '\033'), "colour codes in piped output");
	cr_assert(strstr(r.out, "stats-a:0") && strstr(r.out, "stats-a:1"), "%s", r.out);
	for (p = r.out; *p;) {
		size_t n = strcspn(p, "\n");

		cr_assert_leq(n, 80u, "line wider than 80 columns: %.*s", (int)n, p);
		p += n + (p[n] == '\n');
	}
	tool_run_free(&r);
	r = ring_stat(wide);
	cr_assert_eq(r.status, 0);
	for (p = r.out; *p;) {
		size_t n = strcspn(p, "\n");

		longest = n > longest ? n : longest;
		p += n + (p[n] == '\n');
	}
	cr_assert_gt(longest, 80u, "--wide shows more columns");
	tool_run_free(&r);
	r = ring_stat(colour);
	cr_assert_eq(r.status, 0);
	cr_assert_not_null(strchr(r.out, '\033'), "--color always colours");
	tool_run_free(&r);
	dp_close(l.c);
}

Test(stats_report, default_name_from_socket, .fini = teardown, .timeout = 60)
{
	const char *flags[] = {"--provider", "none", NULL};
	const char *args[] = {"--socket", NULL, "--json", NULL};
	const char *list[] = {"--list", NULL};
	char want[DP_STATS_NAME_MAX];
	struct tool_run r;
	struct jv *s;

	region[0] = 0;
	cr_assert_eq(svc_start(&svc, flags), 0);
	args[1] = svc.sock;
	dp_stats_default_name(svc.sock, want, sizeof(want));
	s = ring_stat_json(args);
	cr_assert_str_eq(json_get(s, "region")->str, want);
	cr_assert_str_eq(json_path(s, "service.socket")->str, svc.sock);
	json_free(s);
	r = ring_stat(list);
	cr_assert_eq(r.status, 0);
	cr_assert(strstr(r.out, want) && strstr(r.out, "running"), "%s", r.out);
	tool_run_free(&r);
}

/* A poller that sleeps at once (--spin-us 0) publishes what it counted
 * before it sleeps, not at its next wake-up. */
Test(stats_report, published_before_sleep, .fini = teardown, .timeout = 60)
{
	const char *flags[] = {"--provider", "none", "--spin-us", "0", "--stats", NULL, NULL};
	const char *args[] = {"--stats", NULL, "--json", NULL};
	struct dp_desc d[50];
	unsigned ok = 0, by_errno[256] = {0};
	struct dp_client *c;
	struct dp_queue *q;
	const struct jv *jq;
	struct jv *s;

	snprintf(region, sizeof(region), "%s", test_region_name());
	flags[5] = args[1] = region;
	cr_assert_eq(svc_start(&svc, flags), 0);
	cr_assert_eq(dp_connect(svc.sock, "sleepy", &c), 0);
	cr_assert_eq(dp_queue_create(c, 0, &q), 0);
	for (unsigned i = 0; i < 50; i++)
		d[i] = (struct dp_desc){.opcode = DP_OP_NOP, .user_data = i};
	run_all(q, d, 50, &ok, by_errno);
	cr_assert_eq(ok, 50u);
	/* Well before the poller's first 200 ms sleep ends. */
	usleep(50000);
	s = ring_stat_json(args);
	jq = json_queue(s, getpid(), 0);
	cr_assert(jq, "queue listed");
	cr_assert_eq(json_u64(jq, "completed"), 50);
	cr_assert_eq(json_u64(jq, "latency_ns.count"), 50);
	json_free(s);
	usleep(300000);
	s = ring_stat_json(args);
	cr_assert_gt(json_u64(json_get(s, "pollers")->items[0], "sleeps"), 0);
	json_free(s);
	dp_close(c);
}

/* -c N without -w: N reports, a second apart (docs/ring-stat.md). */
Test(stats_report, count_without_watch, .fini = teardown, .timeout = 30)
{
	const char *args[] = {"--stats", NULL, "--json", "-c", "2", NULL};
	uint64_t t0;
	struct tool_run r;
	const char *p;
	struct jv *v;
	int n = 0;

	start();
	args[1] = region;
	t0 = now_ns();
	r = ring_stat(args);
	cr_assert_eq(r.status, 0, "ring-stat exit %d: %s", r.status, r.err);
	for (p = r.out; *p;) {
		const char *end;

		v = json_parse(p, &end);
		cr_assert(v && v->t == J_OBJ, "report %d is no JSON object:\n%s", n + 1, p);
		json_free(v);
		n++;
		p = end;
		while (*p == '\n')
			p++;
	}
	cr_assert_eq(n, 2, "%d reports:\n%s", n, r.out);
	cr_assert_geq(now_ns() - t0, 900000000ull, "the two reports were not a second apart");
	tool_run_free(&r);
}
