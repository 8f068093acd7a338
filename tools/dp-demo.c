/* SPDX-License-Identifier: MIT */
/*
 * dp-demo - what `make run` shows: one client exports a segment, a second
 * client writes into it and reads it back through the service, checks every
 * byte, and prints latency and bandwidth.
 * usage: dp-demo [SOCKET]   exit 0 when every byte came back right, 1 on a
 * failure, 2 on bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dataplane.h"
#include "dp_tool.h"

#define MiB (1u << 20)

static int check(int rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "dp-demo: %s: %s\n", what, dp_strerror(rc));
		exit(1);
	}
	return rc;
}

/* One descriptor, waited for; returns the completion status. */
static int run1(struct dp_queue *q, struct dp_desc *d)
{
	struct dp_cqe cqe;

	check(dp_submit(q, d, 1) == 1 ? 0 : -11, "submit");
	while (!check(dp_poll(q, &cqe, 1), "poll"))
		;
	return cqe.status;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void usage(void)
{
	printf("usage: dp-demo [SOCKET]\n"
	       "Exports a 64 MiB segment from one client, writes into it and reads it back\n"
	       "from a second one through dataplaned, checks every byte, and prints\n"
	       "latency and bandwidth.\n"
	       "  SOCKET        the service's control socket (default $DP_SOCKET, else\n"
	       "                $XDG_RUNTIME_DIR/dataplane/dataplane.sock, else\n"
	       "                /run/dataplane/dataplane.sock)\n"
	       "  -h, --help    this text\n"
	       "  --version     print the version and exit\n"
	       "Exit codes: 0 every byte came back right, 1 a failure, 2 bad usage.\n");
}

/* Exits 2 on anything but [SOCKET], --help or --version. */
static const char *parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'h':
			usage();
			exit(0);
		case 'V':
			dp_tool_version("dp-demo");
			exit(0);
		default:
			fprintf(stderr, "Try 'dp-demo --help'.\n");
			exit(2);
		}
	}
	if (argc - optind > 1) {
		fprintf(stderr, "dp-demo: unexpected argument '%s'\nTry 'dp-demo --help'.\n",
			argv[optind + 1]);
		exit(2);
	}
	return optind < argc ? argv[optind] : NULL;
}

int main(int argc, char **argv)
{
	const char *sock = parse_args(argc, argv);
	const uint64_t sizes[] = {1, 4096, MiB, 64 * MiB};
	static uint64_t lat[20000];
	struct dp_client *owner, *user;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *seg_mem, *buf;
	int seg_region, buf_region, seg, rc;
	uint64_t t0;

	rc = dp_connect(sock, "demo-owner", &owner);
	if (rc < 0) {
		dp_tool_connect_error("dp-demo", sock, rc);
		return 1;
	}
	check(dp_connect(sock, "demo-user", &user), "connect");
	printf("connected to dataplaned %s\n", dp_server_name(user));
	seg_region = check(dp_alloc(owner, 64 * MiB, DP_ALLOC_HUGE, (void **)&seg_mem), "alloc");
	check(dp_segment_export(owner, seg_region, "demo/kv-cache", DP_ACCESS_RW), "export");
	printf("client 'demo-owner' exported segment 'demo/kv-cache' (64 MiB, read-write)\n");

	buf_region = check(dp_alloc(user, 128 * MiB, DP_ALLOC_HUGE, (void **)&buf), "alloc");
	seg = check(dp_segment_open(user, NULL, "demo/kv-cache", DP_ACCESS_RW), "open");
	check(dp_queue_create(user, 64, &q), "queue");
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t len = sizes[i];

		for (uint64_t j = 0; j < len; j++)
			buf[j] = (uint8_t)(j * 7 + i + 1);
		memset(buf + 64 * MiB, 0, len);
		dp_prep_write(&d, buf_region, 0, seg, 0, len, i);
		check(run1(q, &d), "write");
		dp_prep_read(&d, buf_region, 64 * MiB, seg, 0, len, i);
		check(run1(q, &d), "read");
		if (memcmp(buf, buf + 64 * MiB, len) || memcmp(buf, seg_mem, len)) {
			fprintf(stderr, "dp-demo: %llu bytes came back wrong\n",
				(unsigned long long)len);
			return 1;
		}
		printf("  write + read back %9llu bytes: verified\n", (unsigned long long)len);
	}
	for (unsigned i = 0; i < 20000; i++) {
		dp_prep_write(&d, buf_region, 0, seg, 0, 64, i);
		t0 = dp_now_ns();
		check(run1(q, &d), "write");
		lat[i] = dp_now_ns() - t0;
	}
	qsort(lat, 20000, sizeof(lat[0]), cmp);
	printf("latency, 64 B WRITE submit -> completion: p50 %.2f us, p99 %.2f us\n",
	       lat[10000] / 1e3, lat[19800] / 1e3);
	dp_prep_write(&d, buf_region, 0, seg, 0, 64 * MiB, 1);
	t0 = dp_now_ns();
	for (int i = 0; i < 8; i++)
		check(run1(q, &d), "write");
	printf("bandwidth, 64 MiB WRITEs: %.2f GB/s\n",
	       8.0 * 64 * MiB / (double)(dp_now_ns() - t0));
	dp_close(user);
	dp_close(owner);
	printf("demo ok\n");
	return 0;
}
