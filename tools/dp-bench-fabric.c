/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-fabric.c - WRITEs to a segment of another service (--peer
 * HOST:PORT --peer-socket PATH; docs/benchmarks.md, "Targets"):
 *   fabric  P6 4 MiB WRITEs and P7 64 B WRITEs through the fabric; the
 *           peers' figures come from tools/bench-fabric.sh, which runs them
 *           between the same namespaces
 *   bypass  the same transfers to a segment of this service (the
 *           self-loopback bypass) and to one of another service of the host
 * dp-bench exports the target at the other service and checks the bytes in
 * its own mapping.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp-bench.h"

struct fabric_fig {
	double bw1, bwn; /* GB/s: 4 MiB WRITEs, one and FABRIC_DEPTH outstanding */
	double p50, p99; /* us: 64 B WRITE, one outstanding */
	uint32_t path;	 /* DP_CQE_F_* the completions reported */
};

#define FABRIC_LEN (64 * MiB)
#define FABRIC_XFER (4 * MiB)
#define FABRIC_DEPTH 8

/* The client sleeps on its doorbell (dp_wait): on a 2-core machine it
 * shares a CPU with the initiating service's poller. With a CPU of its own
 * (--busy-poll) it spins as fi_pingpong does. */
static int fabric_wait_ms(void)
{
	return opt.busy_poll ? -1 : 10000;
}

/* Runs `total` 4 MiB WRITEs with up to `depth` in flight, rotating over the
 * region; returns GB/s. */
static double fabric_stream(struct bench *b, unsigned depth, unsigned total, uint32_t *path)
{
	return write_stream(b, b->seg, FABRIC_XFER, total, depth, 10000, path, "fabric WRITE");
}

/* One measurement: the target exported by the other service and opened
 * through --peer, or (local) exported by ours and opened as ours. */
static void fabric_measure(bool local, struct fabric_fig *f)
{
	struct bench_spec spec = {
		.len = FABRIC_LEN, .depth = 256, .peer = !local, .name = "dp-bench-fabric"};
	unsigned n = opt.quick ? 2000 : 20000, total = opt.quick ? 64 : 256;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	struct bench b;

	if (!lat)
		die("malloc", -ENOMEM);
	bench_open_spec(&b, &spec);
	fabric_stream(&b, FABRIC_DEPTH, total / 8, &f->path); /* warm-up */
	f->bw1 = fabric_stream(&b, 1, total / 2, &f->path);
	f->bwn = fabric_stream(&b, FABRIC_DEPTH, total, &f->path);
	latency_run(&b, b.src, n, fabric_wait_ms(), "fabric WRITE", NULL, lat);
	f->p50 = lat[n / 2] / 1e3;
	f->p99 = lat[n * 99 / 100] / 1e3;
	free(lat);

	/* The timed bytes are not checked one by one; a last full pass is. */
	memset(b.dstp, 0, FABRIC_LEN);
	for (uint64_t off = 0; off < FABRIC_LEN; off += FABRIC_XFER)
		write_from(&b, b.src, off, FABRIC_XFER, off, fabric_wait_ms(), "fabric WRITE");
	verify(&b, FABRIC_LEN);
	bench_close(&b);
}

void bench_fabric(void)
{
	struct fabric_fig f;

	need_peer();
	fabric_measure(false, &f);
	printf("fabric: %s via %s, completions on the %s path; the client on CPU %d %s\n",
	       opt.socket ? opt.socket : "default", opt.peer_addr, path_name(f.path), opt.cpu,
	       opt.busy_poll ? "busy-polls its CQ" : "sleeps in dp_wait");
	printf("P6 dataplane 4 MiB WRITE: 1 outstanding %.3f GB/s, %u outstanding %.3f GB/s\n",
	       f.bw1, FABRIC_DEPTH, f.bwn);
	printf("P7 dataplane 64 B WRITE, one outstanding: p50 %.2f us, p99 %.2f us (a full round "
	       "trip: complete once the target holds the bytes)\n",
	       f.p50, f.p99);
	report_obj("fabric");
	report_str("peer_addr", opt.peer_addr);
	report_str("path", path_name(f.path));
	report_num("gb_per_s_1_outstanding", f.bw1);
	report_num("gb_per_s_8_outstanding", f.bwn);
	report_num("p50_us", f.p50);
	report_num("p99_us", f.p99);
	report_str("latency_figure", "round trip");
	report_bool("client_busy_polls", opt.busy_poll);
	report_end();
}

void bench_bypass(void)
{
	struct fabric_fig l, r;

	need_peer();
	fabric_measure(true, &l);
	fabric_measure(false, &r);
	printf("bypass: same host, same transfers; local = a segment of this service, "
	       "fabric = of another service (%s)\n",
	       opt.peer_addr);
	printf("  %-34s %12s %12s %8s\n", "", "local", "fabric", "saves");
	printf("  %-34s %12.3f %12.3f %7.1fx\n", "4 MiB WRITE, 1 outstanding, GB/s", l.bw1, r.bw1,
	       l.bw1 / r.bw1);
	printf("  %-34s %12.3f %12.3f %7.1fx\n", "4 MiB WRITE, 8 outstanding, GB/s", l.bwn, r.bwn,
	       l.bwn / r.bwn);
	printf("  %-34s %12.2f %12.2f %7.1fx\n", "64 B WRITE p50, us", l.p50, r.p50, r.p50 / l.p50);
	printf("  %-34s %12.2f %12.2f %7.1fx\n", "64 B WRITE p99, us", l.p99, r.p99, r.p99 / l.p99);
	printf("  paths reported: %s, %s\n", path_name(l.path), path_name(r.path));
	report_obj("bypass");
	report_str("peer_addr", opt.peer_addr);
	for (int i = 0; i < 2; i++) {
		const struct fabric_fig *f = i ? &r : &l;

		report_obj(i ? "fabric" : "local");
		report_str("path", path_name(f->path));
		report_num("gb_per_s_1_outstanding", f->bw1);
		report_num("gb_per_s_8_outstanding", f->bwn);
		report_num("p50_us", f->p50);
		report_num("p99_us", f->p99);
		report_end();
	}
	report_end();
}
