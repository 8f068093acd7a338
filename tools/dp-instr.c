/* SPDX-License-Identifier: MIT */
/*
 * dp-instr - the client of `make bench-instr` (tools/bench-instr.sh): 64 B
 * local WRITEs at batch 32 in a shape whose instruction counts are the same
 * from run to run.
 *
 *   service: keeps the queue full, as dp-bench's P4 loop does (submit 32
 *            whenever credit allows, reap what is there), so that every
 *            poller loop drains a full burst. Run against a service under
 *            callgrind; the poller thread's count over --count descriptors
 *            (exactly) is the service side.
 *   client:  per batch, dp_submit() of 32 prepared descriptors, then waits
 *            until the CQ holds all 32 (reading the ring's tail itself,
 *            outside libclient), then one dp_poll() of 32. Every libclient
 *            call does the work of a full batch and none comes back empty,
 *            so callgrind --toggle-collect on dp_submit/dp_poll/dp_wait
 *            counts exactly submit + reap of --count descriptors, none of
 *            this program's own loop (descriptor preparation included: that
 *            is the caller's). Run under callgrind against a service that
 *            spins (--spin-us large): a sleeping poller would make
 *            dp_submit ring its doorbell, a system call, in some batches.
 *
 * usage: dp-instr --socket PATH [--count N] [--depth N] service|client
 * --depth: the queue's (256): a deeper one lets the service side ride out
 * the moments the client is not scheduled (the service runs under callgrind,
 * tens of times slower than the client).
 * Prints "descriptors N" on stdout. Exit 0, 1 on a failure, 2 on usage.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane.h"
#include "dp_client_pvt.h"
#include "dp_ring.h"

#define BATCH 32
#define LEN 4096

static void die(const char *what, int rc)
{
	fprintf(stderr, "dp-instr: %s: %s\n", what, dp_strerror(rc));
	exit(1);
}

static void prep(struct dp_desc *d, int src, int seg, uint64_t from, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		dp_prep_write(&d[i], src, ((from + i) % 64) * 64, seg, ((from + i) % 64) * 64, 64,
			      from + i);
}

static void check(const struct dp_cqe *cqe, int k)
{
	for (int i = 0; i < k; i++)
		if (cqe[i].status)
			die("completion", cqe[i].status);
}

/* dp-bench's P4 loop: the SQ never runs dry. */
static void run_service(struct dp_queue *q, int src, int seg, uint64_t total)
{
	struct dp_desc d[BATCH];
	struct dp_cqe cqe[256];
	uint64_t sent = 0, done = 0;

	while (done < total) {
		if (sent < total) {
			unsigned n = total - sent < BATCH ? (unsigned)(total - sent) : BATCH;
			int k;

			prep(d, src, seg, sent, n);
			k = dp_submit(q, d, n);
			if (k < 0)
				die("submit", k);
			sent += (uint64_t)k;
		}
		int k = dp_poll(q, cqe, 256);
		if (k < 0)
			die("poll", k);
		check(cqe, k);
		done += (uint64_t)k;
	}
}

/* One full batch per dp_submit and per dp_poll. */
static void run_client(struct dp_queue *q, int src, int seg, uint64_t total)
{
	struct dp_desc d[BATCH];
	struct dp_cqe cqe[BATCH];
	struct dp_ring_pair *pair;
	int efd, k;

	if ((k = dp__queue_ring(q, &pair, &efd)) < 0)
		die("queue ring", k);
	for (uint64_t sent = 0; sent < total; sent += BATCH) {
		prep(d, src, seg, sent, BATCH);
		if ((k = dp_submit(q, d, BATCH)) != BATCH)
			die("submit (short)", k < 0 ? k : -EAGAIN);
		while (__atomic_load_n(&pair->cq.hdr->tail, __ATOMIC_ACQUIRE) - pair->cq.local <
		       BATCH)
			;
		if ((k = dp_poll(q, cqe, BATCH)) != BATCH)
			die("poll (short)", k < 0 ? k : -EAGAIN);
		check(cqe, k);
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"socket", required_argument, 0, 's'},
					     {"count", required_argument, 0, 'n'},
					     {"depth", required_argument, 0, 'd'},
					     {0, 0, 0, 0}};
	const char *sock = NULL, *name = "dp-instr";
	uint64_t total = 1000000;
	uint32_t depth = 256;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *srcp, *dstp;
	int o, rc, src, dst, seg;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 's')
			sock = optarg;
		else if (o == 'n')
			total = strtoull(optarg, NULL, 0);
		else if (o == 'd')
			depth = (uint32_t)strtoul(optarg, NULL, 0);
		else
			goto usage;
	}
	if (optind != argc - 1 || !total || total % BATCH ||
	    (strcmp(argv[optind], "service") && strcmp(argv[optind], "client")))
		goto usage;
	if ((rc = dp_connect(sock, name, &c)) < 0)
		die("connect", rc);
	if ((rc = dp_queue_create(c, depth, &q)) < 0)
		die("queue", rc);
	if ((src = dp_alloc(c, LEN, 0, (void **)&srcp)) < 0)
		die("alloc", src);
	if ((dst = dp_alloc(c, LEN, 0, (void **)&dstp)) < 0)
		die("alloc", dst);
	if ((rc = dp_segment_export(c, dst, name, DP_ACCESS_RW)) < 0)
		die("export", rc);
	if ((seg = dp_segment_open(c, NULL, name, DP_ACCESS_RW)) < 0)
		die("open", seg);
	for (unsigned i = 0; i < LEN; i++)
		srcp[i] = (uint8_t)(i * 131 + 7);
	if (!strcmp(argv[optind], "service"))
		run_service(q, src, seg, total);
	else
		run_client(q, src, seg, total);
	if (memcmp(srcp, dstp, LEN)) {
		fprintf(stderr, "dp-instr: the segment does not hold the source's bytes\n");
		return 1;
	}
	printf("descriptors %llu\n", (unsigned long long)total);
	dp_close(c);
	return 0;
usage:
	fprintf(stderr,
		"usage: dp-instr --socket PATH [--count N (a multiple of %d)] "
		"service|client\n",
		BATCH);
	return 2;
}
