/* SPDX-License-Identifier: MIT */
/*
 * file-bench - P11 (docs/benchmarks.md, "Targets"): a file read into host memory
 * through a running dataplaned, side by side with fio on the same file in
 * the same run:
 *   direct    READ descriptors of --bs bytes, --qd in flight, the service's
 *             O_DIRECT path  vs  fio --ioengine=io_uring --direct=1
 *   buffered  the same through the page cache, warm (DP_FILE_BUFFERED)
 *             vs  fio --ioengine=io_uring --direct=0 --invalidate=0
 * Runs alternate (ours, fio, ours, ...); medians are reported. After every
 * timed run of ours the whole buffer is checked against the file's pattern
 * (the buffer is poisoned before each run).
 *
 * usage: file-bench --socket PATH --file PATH [--size BYTES] [--bs BYTES]
 *                   [--qd N] [--reps N] [--cpu N] [--service-cpu N]
 *                   [--fio-cpu N] [--no-peers] [--json] [--reuse]
 *                   [direct|buffered|all]
 * --reuse reads into qd buffers of --bs bytes, reused (fio's memory
 * footprint) instead of into one buffer the size of the file (P11's).
 * Before the results: the placement (tools/bench-report.h), a cache-line
 * ping-pong between --cpu and --service-cpu (the service's poller).
 * --no-peers (or --no-fio) runs and prints nothing of fio; --json prints
 * one JSON object with every figure on stdout, the text on stderr.
 * The file is created (patterned, --size bytes) when it is missing or of
 * another size. Exit: 0 when every run completed and verified, 1 on a
 * failure, 2 on usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"
#include "clock.h"
#include "dataplane.h"
#include "dp_tool.h"

#define MiB (1ull << 20)
#define MAX_REPS 31

static const char *sock_path, *file_path;
static uint64_t size = 1024 * MiB, bs = MiB;
static unsigned qd = 32, reps = 7;
static int client_cpu = 0, service_cpu = -1, fio_cpu = -1;
static bool with_fio = true, reuse;

static void die(const char *what, int rc)
{
	fprintf(stderr, "file-bench: %s: %s\n", what, rc < 0 ? dp_strerror(rc) : strerror(errno));
	exit(1);
}

/* The file's content: 64-bit word i is a hash of i. */
static uint64_t word(uint64_t i)
{
	uint64_t x = i + 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void file_prepare(void)
{
	struct stat st;
	uint64_t *buf;
	int fd;

	if (!stat(file_path, &st) && (uint64_t)st.st_size == size)
		return;
	printf("writing %s (%llu MiB)...\n", file_path, (unsigned long long)(size / MiB));
	fflush(stdout);
	fd = open(file_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	buf = malloc(16 * MiB);
	if (fd < 0 || !buf)
		die(file_path, 0);
	for (uint64_t off = 0; off < size; off += 16 * MiB) {
		uint64_t n = size - off < 16 * MiB ? size - off : 16 * MiB;

		for (uint64_t i = 0; i < n / 8; i++)
			buf[i] = word(off / 8 + i);
		if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
			die("write", 0);
	}
	if (fsync(fd))
		die("fsync", 0);
	free(buf);
	close(fd);
}

/* @len bytes at @p must be the file's bytes from @off on. */
static bool verify(const uint8_t *p, uint64_t off, uint64_t len)
{
	const uint64_t *w = (const uint64_t *)p;

	for (uint64_t i = 0; i < len / 8; i++)
		if (w[i] != word(off / 8 + i)) {
			fprintf(stderr, "file-bench: byte %llu differs from the file\n",
				(unsigned long long)(off + i * 8));
			return false;
		}
	return true;
}

struct ours {
	struct dp_client *c;
	struct dp_queue *q;
	int host, seg;
	uint8_t *mem;
};

/*
 * One timed READ of the whole file: --bs descriptors, --qd in flight, each
 * into its own place in the buffer, or (--reuse) into one of qd slots that
 * is reused once its READ completed, as fio reuses its qd buffers. Returns
 * GB/s, 0 on a failed or wrong transfer.
 */
static double ours_run(struct ours *o)
{
	uint64_t n = size / bs, next = 0, done = 0, t0, t1, last[4096];
	unsigned free_slots[4096], nfree = qd;
	struct dp_cqe cqe[64];
	struct dp_desc d;

	for (unsigned i = 0; i < qd; i++)
		free_slots[i] = qd - 1 - i;
	memset(o->mem, 0xff, reuse ? qd * bs : size);
	t0 = dp_now_ns();
	while (done < n) {
		while (next < n && next - done < qd) {
			uint64_t slot = reuse ? free_slots[nfree - 1] : next;

			dp_prep_read(&d, o->host, slot * bs, o->seg, next * bs, bs, slot);
			if (dp_submit(o->q, &d, 1) != 1)
				break;
			if (reuse) {
				nfree--;
				last[slot] = next;
			}
			next++;
		}
		int k = dp_wait(o->q, cqe, 64, 10000);

		if (k <= 0) {
			fprintf(stderr, "file-bench: no completion in 10 s (%d)\n", k);
			return 0;
		}
		for (int i = 0; i < k; i++) {
			if (cqe[i].status || cqe[i].bytes != bs) {
				fprintf(stderr, "file-bench: READ: %s\n",
					dp_strerror(cqe[i].status));
				return 0;
			}
			if (reuse)
				free_slots[nfree++] = (unsigned)cqe[i].user_data;
		}
		done += (uint64_t)k;
	}
	t1 = dp_now_ns();
	if (!reuse && !verify(o->mem, 0, size))
		return 0;
	for (unsigned i = 0; reuse && i < qd && i < n; i++)
		if (!verify(o->mem + i * bs, last[i] * bs, bs))
			return 0;
	return (double)size / (double)(t1 - t0);
}

/* fio on the same file; its read bandwidth in GB/s, 0 on failure. */
static double fio_run(bool direct)
{
	char cmd[1024], line[512], cpus[32] = "";
	double bw = 0;
	FILE *f;

	if (fio_cpu >= 0)
		snprintf(cpus, sizeof(cpus), "--cpus_allowed=%d", fio_cpu);
	snprintf(cmd, sizeof(cmd),
		 "fio --name=p11 --filename=%s --ioengine=io_uring --direct=%d --bs=%llu "
		 "--iodepth=%u --rw=read --size=%llu --invalidate=%d %s --output-format=json "
		 "2>/dev/null",
		 file_path, direct, (unsigned long long)bs, qd, (unsigned long long)size,
		 direct ? 1 : 0, cpus);
	f = popen(cmd, "r");
	if (!f)
		return 0;
	/* The first "bw_bytes" of the JSON is the read direction's. */
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "\"bw_bytes\"");

		if (p && !bw && (p = strchr(p, ':')))
			bw = strtod(p + 1, NULL) / 1e9;
	}
	if (pclose(f))
		return 0;
	return bw;
}

/* The peer's command line as the output shows it. */
static void fio_command(bool direct, char *buf, size_t len)
{
	int n = snprintf(buf, len,
			 "fio --name=p11 --filename=%s --ioengine=io_uring --direct=%d --bs=%llu "
			 "--iodepth=%u --rw=read --size=%llu --invalidate=%d",
			 file_path, direct, (unsigned long long)bs, qd, (unsigned long long)size,
			 direct ? 1 : 0);

	if (fio_cpu >= 0 && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, " --cpus_allowed=%d", fio_cpu);
}

static void report_runs(const char *key, const double *v)
{
	report_arr(key);
	for (unsigned r = 0; r < reps; r++)
		report_num(NULL, v[r]);
	report_end();
}

static bool bench(const char *mode, bool direct)
{
	double ours[MAX_REPS], fio[MAX_REPS], ours_runs[MAX_REPS], fio_runs[MAX_REPS], om, fm;
	char cmd[1024];
	struct ours o = {0};
	int fd, rf, rc;

	if ((rc = dp_connect(sock_path, "file-bench", &o.c)) < 0) {
		dp_tool_connect_error("file-bench", sock_path, rc);
		exit(1);
	}
	if ((rc = dp_queue_create(o.c, qd < 64 ? 64 : qd, &o.q)) < 0)
		die("queue", rc);
	if ((o.host = dp_alloc(o.c, size, DP_ALLOC_HUGE, (void **)&o.mem)) < 0)
		die("alloc", o.host);
	fd = open(file_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(file_path, 0);
	rf = dp_register_file(o.c, fd, 0, size, DP_ACCESS_READ | (direct ? 0 : DP_FILE_BUFFERED));
	if (rf < 0)
		die("dp_register_file", rf);
	close(fd);
	if ((rc = dp_segment_export(o.c, rf, "file-bench", DP_ACCESS_READ)) < 0)
		die("export", rc);
	if ((o.seg = dp_segment_open(o.c, NULL, "file-bench", DP_ACCESS_READ)) < 0)
		die("open", o.seg);
	/* Warm-up: the service's page tables for the buffer and, buffered,
	 * the page cache (fio then runs with --invalidate=0). */
	if (ours_run(&o) == 0)
		return false;
	for (unsigned r = 0; r < reps; r++) {
		ours[r] = ours_run(&o);
		if (ours[r] == 0)
			return false;
		fio[r] = with_fio ? fio_run(direct) : 0;
		if (with_fio && fio[r] == 0) {
			fprintf(stderr, "file-bench: fio failed (is it installed?)\n");
			return false;
		}
	}
	memcpy(ours_runs, ours, sizeof(ours));
	memcpy(fio_runs, fio, sizeof(fio));
	om = bench_median(ours, reps);
	/* bench_median() sorted them: [0] and [reps - 1] are the extremes. */
	printf("P11 %-8s ours %6.2f GB/s (%.2f..%.2f)", mode, om, ours[0], ours[reps - 1]);
	report_obj(mode);
	report_str("what", direct ? "P11: file -> host memory READ, O_DIRECT"
				  : "P11: file -> host memory READ, buffered (warm page cache)");
	report_num("gb_per_s", om);
	report_num("gb_per_s_min", ours[0]);
	report_num("gb_per_s_max", ours[reps - 1]);
	report_runs("gb_per_s_runs", ours_runs);
	if (with_fio) {
		fm = bench_median(fio, reps);
		fio_command(direct, cmd, sizeof(cmd));
		printf("   fio %6.2f GB/s (%.2f..%.2f)   ratio %5.2fx   target >= 0.90x  %s\n"
		       "  fio: %s\n",
		       fm, fio[0], fio[reps - 1], om / fm, om >= 0.9 * fm ? "ok" : "BELOW", cmd);
		report_str("peer", cmd);
		report_num("peer_cpu", fio_cpu);
		report_num("fio_gb_per_s", fm);
		report_num("fio_gb_per_s_min", fio[0]);
		report_num("fio_gb_per_s_max", fio[reps - 1]);
		report_runs("fio_gb_per_s_runs", fio_runs);
		report_num("ratio", om / fm);
		report_str("target", ">= 0.90x");
		report_bool("pass", om >= 0.9 * fm);
	} else {
		printf("\n");
	}
	report_end();
	dp_close(o.c);
	return true;
}

static bool json;

static const struct dp_tool_flag flags[] = {
	DP_TOOL_FLAG_SOCKET(&sock_path),
	{.name = "file",
	 .arg = "PATH",
	 .str = &file_path,
	 .help = "the file to read; created (patterned) when missing or of\n"
		 "another size"},
	{.name = "size",
	 .arg = "BYTES",
	 .u64 = &size,
	 .help = "file size, a multiple of --bs and of 4096 (default 1 GiB)"},
	{.name = "bs", .arg = "BYTES", .u64 = &bs, .help = "bytes per READ (default 1 MiB)"},
	{.name = "qd", .arg = "N", .uns = &qd, .help = "READs in flight, 1..4096 (default 32)"},
	{.name = "reps",
	 .arg = "N",
	 .uns = &reps,
	 .help = "timed runs of each side, 1..31; medians reported (default 7)"},
	DP_TOOL_FLAG_CPU(&client_cpu),
	{.name = "service-cpu",
	 .arg = "N",
	 .num = &service_cpu,
	 .help = "the service's poller CPU, for the placement figure (a\n"
		 "cache-line ping-pong with --cpu, printed first; default\n"
		 "--fio-cpu when given, else 1, or 0 when --cpu is not 0)"},
	{.name = "fio-cpu",
	 .arg = "N",
	 .num = &fio_cpu,
	 .help = "pin fio to CPU N (default: not pinned)"},
	{.name = "no-peers",
	 .off = &with_fio,
	 .help = "our side only: fio is not run and nothing of it printed"},
	{.name = "no-fio", .off = &with_fio, .help = "the same as --no-peers"},
	DP_TOOL_FLAG_JSON(&json),
	{.name = "reuse",
	 .on = &reuse,
	 .help = "read into qd reused buffers of --bs bytes (fio's footprint)\n"
		 "instead of one buffer the size of the file"},
	DP_TOOL_FLAG_HELP,
	DP_TOOL_FLAG_VERSION,
	{0},
};

static const struct dp_tool_cli cli = {
	.prog = "file-bench",
	.head = "usage: file-bench [--socket PATH] --file PATH [options] [direct|buffered|all]\n"
		"P11: a file read into host memory through dataplaned, against fio on the same\n"
		"file (direct: O_DIRECT; buffered: through the warm page cache; default all).\n",
	.tail = "Exit codes: 0 every run completed and verified, 1 a failure, 2 bad usage.\n",
	.col = 18,
	.flags = flags,
};

/* The flags into the globals; returns the benchmark to run, exits on
 * --help, --version and bad usage (2). */
static const char *parse_args(int argc, char **argv)
{
	int first = dp_tool_parse(&cli, argc, argv);
	const char *what = first < argc ? argv[first] : "all";

	if (argc - first > 1 || !file_path || !bs || size % bs || size % 4096 || !qd || qd > 4096 ||
	    !reps || reps > MAX_REPS ||
	    (strcmp(what, "direct") && strcmp(what, "buffered") && strcmp(what, "all"))) {
		fprintf(stderr, "file-bench: want --file, --size a multiple of --bs and of 4096, "
				"--qd 1..4096, --reps 1..31, and direct|buffered|all\n");
		dp_tool_try_help("file-bench");
	}
	/* Flags parsed: the text goes to stderr from here on with --json. */
	if (json)
		report_json_begin();
	if (service_cpu < 0)
		service_cpu = fio_cpu >= 0 ? fio_cpu : bench_default_service_cpu(client_cpu);
	return what;
}

/* The run's settings, in the JSON document. */
static void report_settings(const char *what)
{
	report_start("file-bench", what, with_fio);
	report_str("file", file_path);
	report_u64("file_bytes", size);
	report_u64("bs", bs);
	report_u64("qd", qd);
	report_u64("reps", reps);
	report_bool("reuse", reuse);
	report_obj("cpus");
	report_num("client", client_cpu);
	report_num("service", service_cpu);
	if (with_fio)
		report_num("fio", fio_cpu);
	report_end();
}

int main(int argc, char **argv)
{
	const char *what = parse_args(argc, argv);
	bool ok = true;

	report_settings(what);
	/* Before this client pins itself, on the CPUs ours uses. */
	bench_place_and_pin(client_cpu, service_cpu);
	file_prepare();
	printf("P11: %llu MiB file %s, %llu KiB READs, %u in flight, median of %u, into %s\n",
	       (unsigned long long)(size / MiB), file_path, (unsigned long long)(bs / 1024), qd,
	       reps,
	       reuse ? "qd reused buffers (fio's footprint)" : "a buffer the size of the file");
	if (strcmp(what, "buffered"))
		ok &= bench("direct", true);
	if (ok && strcmp(what, "direct"))
		ok &= bench("buffered", false);
	report_bool("ok", ok);
	report_close();
	return ok ? 0 : 1;
}
