/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-common.c - the set-up every dp-bench benchmark starts from (a
 * client of the service, its queue, a source region and a segment to write
 * into, here or at another service) and the WRITE loops the benchmarks time
 * through it, one thread's memcpy, and the words the reports share. See
 * dp-bench.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "dp-bench.h"
#include "dp_tool.h"

/* ---- failing ---- */

void die(const char *what, int rc)
{
	fprintf(stderr, "dp-bench: %s: %s\n", what, dp_strerror(rc));
	exit(1);
}

/* A dp_connect that failed: which socket, and why (dp_tool.h). */
__attribute__((noreturn)) static void die_connect(const char *path, int rc)
{
	dp_tool_connect_error("dp-bench", path, rc);
	exit(1);
}

void die_last(const char *what)
{
	if (what)
		fprintf(stderr, "dp-bench: %s: %s\n", what, dp_last_error());
	else
		fprintf(stderr, "dp-bench: %s\n", dp_last_error());
	exit(1);
}

void need_dataplaned(const char *bench, const char *what)
{
	if (!opt.dataplaned) {
		fprintf(stderr, "dp-bench: %s needs --dataplaned PATH (it starts %s)\n", bench,
			what);
		exit(2);
	}
}

void need_peer(void)
{
	if (!opt.peer_addr || !opt.peer_sock) {
		fprintf(stderr, "dp-bench: fabric and bypass need --peer HOST:PORT and "
				"--peer-socket PATH\n");
		exit(2);
	}
}

/* ---- set-up ---- */

const char *segment_name(const char *what)
{
	static char name[64];
	static unsigned n;

	snprintf(name, sizeof(name), "%s-%d-%u", what, (int)getpid(), n++);
	return name;
}

struct dp_client *bench_connect(const char *path, const char *name)
{
	struct dp_client *c;
	int rc;

	if ((rc = dp_connect(path, name, &c)) < 0)
		die_connect(path, rc);
	return c;
}

struct dp_queue *bench_queue(struct dp_client *c, uint32_t depth)
{
	struct dp_queue *q;
	int rc;

	if ((rc = dp_queue_create(c, depth, &q)) < 0)
		die("queue", rc);
	return q;
}

int bench_alloc(struct dp_client *c, uint64_t len, unsigned flags, uint8_t **p, const char *what)
{
	int region = dp_alloc(c, len, flags, (void **)p);

	if (region < 0)
		die(what, region);
	return region;
}

int bench_register(struct dp_client *c, void *p, uint64_t len, const char *what)
{
	int region = dp_register_mem(c, p, len);

	if (region < 0)
		die_last(what);
	return region;
}

void bench_session_create(struct dp_client *c)
{
	int rc = dp_session_create(c, 0);

	if (rc < 0)
		die("dp_session_create", rc);
}

void bench_fill(uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 131 + 7);
}

int bench_export_open(struct bench *b, int region, const char *prefix)
{
	const char *name = segment_name(prefix);
	int rc, seg;

	if ((rc = dp_segment_export(b->tc ? b->tc : b->c, region, name, DP_ACCESS_RW)) < 0)
		die("export", rc);
	seg = dp_segment_open(b->c, b->tc ? opt.peer_addr : NULL, name, DP_ACCESS_RW);
	if (seg < 0)
		die(b->tc ? "open through --peer" : "open", seg);
	return seg;
}

void bench_open_spec(struct bench *b, const struct bench_spec *s)
{
	b->len = s->len;
	b->c = bench_connect(opt.socket, "dp-bench");
	b->tc = s->peer ? bench_connect(opt.peer_sock, "dp-bench-target") : NULL;
	b->q = bench_queue(b->c, s->depth);
	b->src = bench_alloc(b->c, s->len, s->alloc, &b->srcp, "alloc");
	b->dst = bench_alloc(b->tc ? b->tc : b->c, s->len, s->alloc, &b->dstp, "alloc");
	b->seg = bench_export_open(b, b->dst, s->name);
	bench_fill(b->srcp, s->len);
}

void bench_open(struct bench *b, uint64_t len)
{
	struct bench_spec s = {
		.len = len, .depth = opt.depth, .alloc = DP_ALLOC_HUGE, .name = "dp-bench"};

	bench_open_spec(b, &s);
	memset(b->dstp, 0, len);
}

void bench_close(struct bench *b)
{
	dp_close(b->c);
	if (b->tc)
		dp_close(b->tc);
}

void verify(const struct bench *b, uint64_t len)
{
	if (memcmp(b->srcp, b->dstp, len)) {
		fprintf(stderr, "dp-bench: DATA MISMATCH after the timed run\n");
		exit(1);
	}
}

/* ---- WRITEs ---- */

uint64_t run_desc(struct dp_queue *q, const struct dp_desc *d, int wait_ms, const char *what,
		  uint32_t *flags)
{
	struct dp_cqe cqe;
	uint64_t ns;
	int rc;

	if ((rc = dp_tool_run_one(q, d, wait_ms, &cqe, &ns)))
		die(what, rc);
	if (flags)
		*flags = cqe.flags;
	return ns;
}

uint64_t write_from(struct bench *b, int region, uint64_t off, uint64_t len, uint64_t ud,
		    int wait_ms, const char *what)
{
	struct dp_desc d;

	dp_prep_write(&d, region, off, b->seg, off, len, ud);
	return run_desc(b->q, &d, wait_ms, what, NULL);
}

uint64_t one_write(struct bench *b, uint64_t off, uint64_t len, uint64_t ud)
{
	return write_from(b, b->src, off, len, ud, -1, "WRITE");
}

void latency_run(struct bench *b, int region, unsigned n, int wait_ms, const char *what,
		 const char *label, uint64_t *lat)
{
	struct progress pg;

	for (unsigned i = 0; i < n / 10; i++)
		write_from(b, region, 0, 64, i, wait_ms, what);
	if (label)
		progress_start(&pg, label, n);
	for (unsigned i = 0; i < n; i++) {
		lat[i] = write_from(b, region, (i % 64) * 64, 64, i, wait_ms, what);
		if (label)
			progress_update(&pg, i + 1);
	}
	if (label)
		progress_end(&pg);
	qsort(lat, n, sizeof(*lat), cmp_u64);
}

double write_stream(struct bench *b, int seg, uint64_t len, unsigned total, unsigned depth,
		    int wait_ms, uint32_t *path, const char *what)
{
	double gbps;
	int rc = dp_tool_write_stream(b->q, b->src, seg, len, b->len, total, depth, wait_ms, &gbps,
				      path, &what);

	if (rc)
		die(what, rc);
	return gbps;
}

double write_rate(struct bench *b, unsigned batch, uint64_t total, uint64_t ns, struct progress *pg)
{
	struct dp_desc d[64];
	struct dp_cqe cqe[256];
	uint64_t t0 = dp_now_ns(), end = t0 + ns, sent = 0, done = 0;
	bool open = true;

	while (open || done < sent) {
		if (open) {
			unsigned n = total - sent < batch ? (unsigned)(total - sent) : batch;

			for (unsigned i = 0; i < n; i++)
				dp_prep_write(&d[i], b->src, ((sent + i) % 64) * 64, b->seg,
					      ((sent + i) % 64) * 64, 64, sent + i);
			int k = dp_submit(b->q, d, n);
			if (k < 0)
				die("submit", k);
			sent += (uint64_t)k;
			if (sent == total || (ns && !(sent & 1023) && dp_now_ns() >= end))
				open = false;
		}
		int k = dp_poll(b->q, cqe, 256);
		if (k < 0)
			die("poll", k);
		for (int i = 0; i < k; i++)
			if (cqe[i].status)
				die("completion", cqe[i].status);
		done += (uint64_t)k;
		if (pg && k)
			progress_update(pg, done);
	}
	return (double)done / (double)(dp_now_ns() - t0) * 1e9;
}

/* ---- memcpy ---- */

double memcpy_gbps(uint8_t *dst, const uint8_t *src, uint64_t len, unsigned reps,
		   struct progress *pg, uint64_t *done)
{
	double r[16];

	if (reps > 16)
		reps = 16;
	for (unsigned k = 0; k < reps; k++) {
		uint64_t t0 = dp_now_ns();

		memcpy(dst, src, len);
		r[k] = (double)len / (double)(dp_now_ns() - t0);
		if (pg) {
			*done += len;
			progress_update(pg, *done);
		}
	}
	return bench_median(r, reps);
}

/* ---- words ---- */

const char *verdict(bool ok)
{
	return ok ? "PASS" : "MISS";
}

const char *path_name(uint32_t flags)
{
	return flags & DP_CQE_F_FABRIC ? "fabric" : flags & DP_CQE_F_LOCAL ? "local" : "?";
}

const char *path_desc(uint32_t flags)
{
	return flags & DP_CQE_F_SAME_HOST ? "same host" : path_name(flags);
}
