/* SPDX-License-Identifier: MIT */
/*
 * gpu-bench - GPU copies through a running dataplaned, side by side with the
 * raw CUDA runtime doing the same copy on the same GPU in this process
 * (docs/benchmarks.md, "Targets"):
 *   P8  device -> device WRITE, 64 MiB .. 1 GiB   vs cudaMemcpyAsync D2D  (>= 0.95x)
 *   P9  host <-> device WRITE, pinned, 64 MiB    vs cudaMemcpyAsync H2D/D2H (>= 0.95x)
 *   P10 4 KiB device -> device, submit to completion seen, one outstanding
 *       vs cudaMemcpyAsync + cudaEventRecord + cudaEventSynchronize (p50 <= raw + 3 us)
 *   P12 device -> device WRITE into a GPU segment exported through ANOTHER
 *       service of this host (--peer-socket, --peer), 4 MiB ..
 *       1 GiB, vs cudaMemcpyAsync D2D (>= 0.8x at 64 MiB and above); and a
 *       4 KiB one, p50, against the same transfer inside one service (<=
 *       1.5x). The path the completions took is printed (same host, or the
 *       fabric when the services run with --no-same-host).
 *   file  1 GiB file -> device READ through the service's staging pipeline
 *       (io_uring into pinned buffers, cudaMemcpyAsync out of them) vs the
 *       same pipeline written in-process: pread() into one of 4 pinned 1 MiB
 *       buffers while cudaMemcpyAsync drains the others. O_DIRECT for both
 *       where the file system takes it. No target in docs/benchmarks.md; >= 0.9x is
 *       the bar we hold it to (as P11's against fio).
 * Both sides are timed the same way: wall clock from the call to the
 * completion seen by this thread. GB/s counts bytes copied (1 GB = 1e9 B).
 * Buffers hold non-zero data; every timed run's bytes are checked after.
 *
 * pages: a batch of N GPU pages (4/16/64/256 KiB x 4096/4096/2048/
 *       1024) at scattered indices, --depth in flight (256), through one service and
 *       (with --peer-socket and --peer) into another service's export of this
 *       host, against raw per-page cudaMemcpyAsync, cudaMemcpyBatchAsync, the
 *       service's page kernel launched here, and one contiguous copy of the
 *       same bytes (the ratio); host <-> GPU pinned pages beside their raw
 *       per-page peer. Targets: 16 KiB >= 0.5x, 4 KiB >= 0.25x contiguous.
 *
 * P13: GPU -> a host segment of another service over tcp through
 *       host staging (the stage engine; the service runs with --no-hmem),
 *       against the same WRITEs from host memory (pinned by the service when
 *       it has a GPU); target >= 0.9x. Needs --peer HOST:PORT and
 *       --peer-socket PATH (tools/bench-gpu.sh BIN p13 starts both
 *       services). Without a GPU the host column alone runs.
 *
 * usage: gpu-bench [--socket PATH] [--cpu N] [--service-cpu N] [--device N]
 *                  [--quick] [--depth N] [--file PATH] [--no-peers] [--json]
 *                  [--peer-socket PATH --peer HOST:PORT]
 *                  [p8|p9|p10|p12|p13|vmm|pages|file|all|probe]
 * Before the results: the placement (tools/bench-report.h), a cache-line
 * ping-pong between --cpu and --service-cpu (the service's poller).
 * --no-peers runs and prints nothing of the raw CUDA side (the file run's
 * bytes are then checked against the file); --json prints one JSON object
 * with every figure on stdout, the text on stderr.
 * Exit: 0 every run completed and verified (targets missed are reported, not
 * fatal), 1 a failure, 2 usage, 77 no CUDA (build or device).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"
#include "clock.h"
#include "dataplane.h"
#include "dp_tool.h"

static const char *sock_path, *file_path = "/var/tmp/dp-gpu-bench.file";
static const char *target_sock, *target_peer; /* P12: the other service */
static int client_cpu = 0, service_cpu = -1, device = 0;
static bool quick, with_peers = true;
/* pages: descriptors in flight, and the queue's depth when above 256. */
static unsigned pages_depth = 256;

static bool json;

static const struct dp_tool_flag flags[] = {
	DP_TOOL_FLAG_SOCKET(&sock_path),
	DP_TOOL_FLAG_CPU(&client_cpu),
	{.name = "service-cpu",
	 .arg = "N",
	 .num = &service_cpu,
	 .help = "the service's poller CPU, for the placement figure (a\n"
		 "cache-line ping-pong with --cpu, printed first; default 1,\n"
		 "or 0 when --cpu is not 0)"},
	{.name = "device", .arg = "N", .num = &device, .help = "CUDA device (default 0)"},
	{.name = "quick", .on = &quick, .help = "fewer sizes and repetitions"},
	{.name = "depth",
	 .arg = "N",
	 .uns = &pages_depth,
	 .help = "pages: descriptors in flight, a power of two 32 .. the\n"
		 "service's --max-depth (default 256; a serving engine's\n"
		 "layer of pages is 512 or more)"},
	{.name = "file",
	 .arg = "PATH",
	 .str = &file_path,
	 .help = "the file of the file -> GPU run (default /var/tmp/dp-gpu-bench.file)"},
	{.name = "no-peers",
	 .off = &with_peers,
	 .help = "our side only: the raw CUDA runs are not made and nothing\n"
		 "of them printed"},
	DP_TOOL_FLAG_JSON(&json),
	{.name = "peer-socket", .arg = "PATH", .str = &target_sock, .help = ""},
	{.name = "peer",
	 .arg = "HOST:PORT",
	 .str = &target_peer,
	 .help = "p12, p13: another dataplaned (its control socket, and its\n"
		 "server name as ours reaches it), which exports the target"},
	DP_TOOL_FLAG_HELP,
	DP_TOOL_FLAG_VERSION,
	{0},
};

static const struct dp_tool_cli cli = {
	.prog = "gpu-bench",
	.head = "usage: gpu-bench [--socket PATH] [--cpu N] [--service-cpu N] [--device N] "
		"[--quick]\n"
		"                 [--depth N] [--file PATH] [--no-peers] [--json] "
		"[--peer-socket PATH --peer HOST:PORT]\n"
		"                 [p8|p9|p10|p12|p13|vmm|pages|file|all|probe]\n"
		"GPU copies through dataplaned against the raw CUDA runtime on the same GPU\n"
		"(P8-P10, file -> GPU; default all).\n",
	.tail = "Exit codes: 0 every run completed and verified, 1 a failure, 2 bad usage,\n"
		"77 no CUDA (build or device).\n",
	.col = 18,
	.flags = flags,
};

/* The flags; returns the benchmark to run, exits on --help, --version and
 * bad usage (2). */
static const char *parse_args(int argc, char **argv)
{
	int first = dp_tool_parse(&cli, argc, argv);
	const char *what = first < argc ? argv[first] : "all";

	if (argc - first > 1 ||
	    (strcmp(what, "p8") && strcmp(what, "p9") && strcmp(what, "p10") &&
	     strcmp(what, "p12") && strcmp(what, "p13") && strcmp(what, "file") &&
	     strcmp(what, "vmm") && strcmp(what, "pages") && strcmp(what, "all") &&
	     strcmp(what, "probe"))) {
		fprintf(stderr, "gpu-bench: unknown benchmark '%s'\n", argv[argc - 1]);
		dp_tool_try_help("gpu-bench");
	}
	if ((!strcmp(what, "p12") || !strcmp(what, "p13") || !strcmp(what, "vmm")) &&
	    (!target_sock || !target_peer)) {
		fprintf(stderr, "gpu-bench: %s needs --peer-socket and --peer\n", what);
		exit(2);
	}
	if (pages_depth < 32 || pages_depth & (pages_depth - 1)) {
		fprintf(stderr, "gpu-bench: --depth must be a power of two, 32 or more\n");
		exit(2);
	}
	if (service_cpu < 0)
		service_cpu = bench_default_service_cpu(client_cpu);
	/* Flags parsed: the text goes to stderr from here on with --json. */
	if (json)
		report_json_begin();
	report_start("gpu-bench", what, with_peers);
	report_bool("quick", quick);
	report_num("depth", pages_depth);
	return what;
}

/* Exit 77 (no CUDA), saying why in the JSON too. */
static int skip(const char *why)
{
	fprintf(stderr, "gpu-bench: %s\n", why);
	report_str("skipped", why);
	report_close();
	return 77;
}

#ifndef DP_HAVE_CUDA

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	return skip("built without CUDA (make bench-gpu builds with CUDA=1)");
}

#else

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "gpu_pages.h"

#define MiB (1ull << 20)

static struct dp_client *cl;
static struct dp_queue *q;
static cudaStream_t raw_stream;
static cudaEvent_t raw_ev;

static void die(const char *what, int rc)
{
	fprintf(stderr, "gpu-bench: %s: %s\n", what, dp_strerror(rc));
	exit(1);
}

static void ck(cudaError_t err, const char *what)
{
	if (err != cudaSuccess) {
		fprintf(stderr, "gpu-bench: %s: %s\n", what, cudaGetErrorString(err));
		exit(1);
	}
}

static const char *verdict(bool ok)
{
	return ok ? "PASS" : "MISS";
}

/* Non-zero, position-dependent bytes. */
static void fill_random(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
}

static void *gpu_random(size_t len, uint64_t seed)
{
	size_t chunk = len < 64 * MiB ? len : 64 * MiB;
	uint8_t *h = malloc(chunk);
	void *d;

	if (!h)
		die("malloc", -ENOMEM);
	ck(cudaMalloc(&d, len), "cudaMalloc");
	for (size_t off = 0; off < len; off += chunk) {
		fill_random(h, chunk, seed + off);
		ck(cudaMemcpy((uint8_t *)d + off, h, chunk, cudaMemcpyHostToDevice), "fill");
	}
	/* The service copies in another process: what we wrote must be done
	 * (from pageable memory cudaMemcpy may return before its DMA is). */
	ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	free(h);
	return d;
}

static void zero(void *d, size_t len)
{
	ck(cudaMemset(d, 0, len), "cudaMemset");
	ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

/* Exports @region under @name and opens it. */
static int segment(int region, const char *name)
{
	int rc = dp_segment_export(cl, region, name, DP_ACCESS_RW);

	if (rc)
		die("dp_segment_export", rc);
	rc = dp_segment_open(cl, NULL, name, DP_ACCESS_RW);
	if (rc < 0)
		die("dp_segment_open", rc);
	return rc;
}

static int reg_gpu(void *p, size_t len)
{
	int r = dp_register_cuda(cl, p, len);

	if (r < 0)
		die("dp_register_cuda", r);
	return r;
}

/* The flags the last WRITE completed with (P12 prints the path). */
static uint32_t last_flags;

/* One WRITE through the service, busy-polled to its completion; ns. Inside
 * one service it must be the local GPU path. */
static uint64_t ours_any(int region, uint64_t loff, int seg, uint64_t toff, uint64_t len)
{
	static uint64_t ud;
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t ns;
	int rc;

	dp_prep_write(&d, region, loff, seg, toff, len, ++ud);
	if ((rc = dp_tool_run_one(q, &d, -1, &cqe, &ns)))
		die("WRITE", rc);
	last_flags = cqe.flags;
	return ns;
}

static uint64_t ours(int region, uint64_t loff, int seg, uint64_t toff, uint64_t len)
{
	uint64_t ns = ours_any(region, loff, seg, toff, len);

	if (last_flags != (DP_CQE_F_LOCAL | DP_CQE_F_GPU))
		die("completion without DP_CQE_F_GPU", -EBADMSG);
	return ns;
}

static const char *path_name(uint32_t f)
{
	return f & DP_CQE_F_SAME_HOST ? "same host (IPC handle)"
	       : f & DP_CQE_F_FABRIC  ? "fabric"
	       : f & DP_CQE_F_LOCAL   ? "local"
				      : "?";
}

/* The same copy by the CUDA runtime in this process; ns. */
static uint64_t raw(void *dst, const void *src, uint64_t len)
{
	uint64_t t0 = dp_now_ns();

	ck(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, raw_stream), "cudaMemcpyAsync");
	ck(cudaEventRecord(raw_ev, raw_stream), "cudaEventRecord");
	ck(cudaEventSynchronize(raw_ev), "cudaEventSynchronize");
	return dp_now_ns() - t0;
}

static void verify_gpu(const void *a, const void *b, size_t len, const char *what)
{
	uint8_t *ha = malloc(len), *hb = malloc(len);

	if (!ha || !hb)
		die("malloc", -ENOMEM);
	ck(cudaMemcpy(ha, a, len, cudaMemcpyDefault), "verify copy");
	ck(cudaMemcpy(hb, b, len, cudaMemcpyDefault), "verify copy");
	if (memcmp(ha, hb, len)) {
		fprintf(stderr, "gpu-bench: DATA MISMATCH after %s\n", what);
		exit(1);
	}
	free(ha);
	free(hb);
}

static double median_gbs(uint64_t *ns, unsigned n, uint64_t len)
{
	qsort(ns, n, sizeof(*ns), cmp_u64);
	return (double)len / (double)ns[n / 2];
}

/* A device -> device run: WRITEs from region rs (at src) into segment seg
 * (at dst), both buffers span bytes. */
struct d2d {
	uint64_t (*write)(int region, uint64_t loff, int seg, uint64_t toff, uint64_t len);
	int rs, seg;
	void *src, *dst;
	uint64_t span;
	unsigned reps;
	bool raw; /* the raw copies beside ours */
	const char *what;
};

/* One size of a device -> device run: x->reps WRITEs of len through the
 * service, then as many raw copies (with x->raw), and the bytes checked;
 * the medians in GB/s in *o and *r. */
static void d2d_size(const struct d2d *x, uint64_t len, double *o, double *r)
{
	uint64_t t_ours[16], t_raw[16];

	/* Each side in a block after a warm-up: the GPU switches between the
	 * service's context and ours at a cost of about 150 us, which
	 * alternating copies would pay every time. Offsets rotate through the
	 * buffers: nothing stays in L2. */
	x->write(x->rs, 0, x->seg, 0, len);
	for (unsigned i = 0; i < x->reps; i++) {
		uint64_t off = (i % (x->span / len)) * len;

		t_ours[i] = x->write(x->rs, off, x->seg, off, len);
	}
	if (x->raw)
		raw(x->dst, x->src, len);
	for (unsigned i = 0; x->raw && i < x->reps; i++) {
		uint64_t off = (i % (x->span / len)) * len;

		t_raw[i] = raw((uint8_t *)x->dst + off, (uint8_t *)x->src + off, len);
	}
	zero(x->dst, len);
	x->write(x->rs, 0, x->seg, 0, len);
	verify_gpu(x->dst, x->src, len, x->what);
	*o = median_gbs(t_ours, x->reps, len);
	if (x->raw)
		*r = median_gbs(t_raw, x->reps, len);
}

static void bench_p8(void)
{
	const uint64_t max = 1024 * MiB;
	unsigned reps = quick ? 3 : 10;
	struct d2d x = {.write = ours, .span = max, .reps = reps, .raw = with_peers, .what = "P8"};
	int rd;
	bool all = true;

	x.src = gpu_random(max, 1);
	ck(cudaMalloc(&x.dst, max), "cudaMalloc");
	zero(x.dst, max);
	x.rs = reg_gpu(x.src, max);
	rd = reg_gpu(x.dst, max);
	x.seg = segment(rd, "p8-dst");
	printf("P8 GPU loopback, device -> device WRITE, GB/s (median of %u)\n", reps);
	if (with_peers)
		printf("  %9s %10s %10s %7s\n", "size", "dataplane", "raw", "ratio");
	else
		printf("  %9s %10s\n", "size", "dataplane");
	report_obj("p8");
	report_str("what", "P8: GPU loopback, device -> device WRITE");
	report_u64("reps", reps);
	if (with_peers)
		report_str("peer", "cudaMemcpyAsync D2D + cudaEventRecord + cudaEventSynchronize");
	report_arr("sizes");
	for (uint64_t len = 64 * MiB; len <= max; len *= 2) {
		double o, r;

		d2d_size(&x, len, &o, &r);
		report_obj(NULL);
		report_u64("size", len);
		report_num("gb_per_s", o);
		if (!with_peers) {
			printf("  %5llu MiB %10.1f\n", (unsigned long long)(len / MiB), o);
			report_end();
			continue;
		}
		all &= o >= 0.95 * r;
		printf("  %5llu MiB %10.1f %10.1f %6.3fx  %s\n", (unsigned long long)(len / MiB), o,
		       r, o / r, verdict(o >= 0.95 * r));
		report_num("raw_gb_per_s", r);
		report_num("ratio", o / r);
		report_bool("pass", o >= 0.95 * r);
		report_end();
	}
	report_end();
	if (with_peers) {
		printf("  target >= 0.95x raw cudaMemcpyAsync: %s\n", verdict(all));
		report_str("target", ">= 0.95x");
		report_bool("pass", all);
	}
	report_end();
	dp_free(cl, x.rs);
	dp_free(cl, rd);
	dp_segment_close(cl, x.seg);
	ck(cudaFree(x.src), "cudaFree");
	ck(cudaFree(x.dst), "cudaFree");
}

/* One direction of P9: its line and its JSON object. */
static void p9_line(const char *dir, const char *key, uint64_t *t_ours, uint64_t *t_raw,
		    unsigned reps, uint64_t len)
{
	double o = median_gbs(t_ours, reps, len), r;

	report_obj(key);
	report_num("gb_per_s", o);
	if (with_peers) {
		r = median_gbs(t_raw, reps, len);
		printf("  %s  dataplane %6.1f  raw %6.1f  ratio %6.3fx  target >= 0.95x  %s\n", dir,
		       o, r, o / r, verdict(o >= 0.95 * r));
		report_num("raw_gb_per_s", r);
		report_num("ratio", o / r);
		report_bool("pass", o >= 0.95 * r);
	} else {
		printf("  %s  dataplane %6.1f\n", dir, o);
	}
	report_end();
}

static void bench_p9(void)
{
	const uint64_t len = 64 * MiB;
	unsigned reps = quick ? 5 : 20;
	uint64_t t_ours[32], t_raw[32];
	uint8_t *host;
	void *g;
	int rh, rg, seg_h, seg_g;

	rh = dp_alloc(cl, len, DP_ALLOC_HUGE, (void **)&host);
	if (rh < 0)
		die("dp_alloc", rh);
	fill_random(host, len, 2);
	/* The raw side pins the very pages the service pinned. */
	ck(cudaHostRegister(host, len, cudaHostRegisterPortable), "cudaHostRegister");
	g = gpu_random(len, 3);
	rg = reg_gpu(g, len);
	seg_h = segment(rh, "p9-host");
	seg_g = segment(rg, "p9-gpu");
	printf("P9 GPU loopback, host <-> device WRITE, pinned, 64 MiB, GB/s (median of %u)\n",
	       reps);
	report_obj("p9");
	report_str("what", "P9: GPU loopback, host <-> device WRITE, pinned");
	report_u64("size", len);
	report_u64("reps", reps);
	if (with_peers) {
		report_str("peer", "cudaMemcpyAsync + cudaEventRecord + cudaEventSynchronize, "
				   "the same pinned pages");
		report_str("target", ">= 0.95x");
	}

	/* Device -> host first: the host buffer then holds the GPU's bytes,
	 * and host -> device writes them back unchanged. */
	ours(rg, 0, seg_h, 0, len);
	for (unsigned i = 0; i < reps; i++)
		t_ours[i] = ours(rg, 0, seg_h, 0, len);
	if (with_peers)
		raw(host, g, len);
	for (unsigned i = 0; with_peers && i < reps; i++)
		t_raw[i] = raw(host, g, len);
	memset(host, 0, len);
	ours(rg, 0, seg_h, 0, len);
	verify_gpu(host, g, len, "P9 device -> host");
	p9_line("device -> host", "device_to_host", t_ours, t_raw, reps, len);

	fill_random(host, len, 4);
	ours(rh, 0, seg_g, 0, len);
	for (unsigned i = 0; i < reps; i++)
		t_ours[i] = ours(rh, 0, seg_g, 0, len);
	if (with_peers)
		raw(g, host, len);
	for (unsigned i = 0; with_peers && i < reps; i++)
		t_raw[i] = raw(g, host, len);
	zero(g, len);
	ours(rh, 0, seg_g, 0, len);
	verify_gpu(g, host, len, "P9 host -> device");
	p9_line("host -> device", "host_to_device", t_ours, t_raw, reps, len);
	report_end();
	dp_segment_close(cl, seg_h);
	dp_segment_close(cl, seg_g);
	dp_free(cl, rg);
	cudaHostUnregister(host);
	dp_free(cl, rh);
	ck(cudaFree(g), "cudaFree");
}

/* A file of @len random bytes at file_path (kept between runs when it
 * already has that size); the page cache is dropped where we may. */
static int bench_file(uint64_t len)
{
	int fd = open(file_path, O_RDWR | O_CREAT, 0600);
	struct stat st;

	if (fd < 0 || fstat(fd, &st))
		die(file_path, -errno);
	if ((uint64_t)st.st_size != len) {
		uint8_t *buf = malloc(64 * MiB);

		if (!buf || ftruncate(fd, 0))
			die("file", -ENOMEM);
		for (uint64_t off = 0; off < len; off += 64 * MiB) {
			fill_random(buf, 64 * MiB, 9 + off);
			if (pwrite(fd, buf, 64 * MiB, (off_t)off) != (ssize_t)(64 * MiB))
				die("pwrite", -errno);
		}
		free(buf);
		fsync(fd);
	}
	return fd;
}

static void drop_cache(int fd)
{
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

/* --no-peers: @len bytes at @g must be the file's (read back through @fd). */
static void verify_gpu_file(const void *g, int fd, uint64_t len)
{
	uint8_t *hf = malloc(64 * MiB), *hg = malloc(64 * MiB);

	if (!hf || !hg)
		die("malloc", -ENOMEM);
	for (uint64_t off = 0; off < len; off += 64 * MiB) {
		uint64_t n = len - off < 64 * MiB ? len - off : 64 * MiB;

		if (pread(fd, hf, n, (off_t)off) != (ssize_t)n)
			die("pread", -errno);
		ck(cudaMemcpy(hg, (const uint8_t *)g + off, n, cudaMemcpyDeviceToHost),
		   "verify copy");
		if (memcmp(hf, hg, n)) {
			fprintf(stderr, "gpu-bench: DATA MISMATCH after file -> GPU\n");
			exit(1);
		}
	}
	free(hf);
	free(hg);
}

/* The in-process pipeline: pread() (O_DIRECT when it works) into pinned
 * buffer i while the copies of the others run; ns. */
static uint64_t raw_file(int dfd, void *g, uint64_t len, uint8_t **bufs, cudaEvent_t *ev,
			 unsigned nb)
{
	const uint64_t slice = MiB;
	uint64_t t0 = dp_now_ns();
	unsigned i = 0;

	for (uint64_t off = 0; off < len; off += slice, i = (i + 1) % nb) {
		ck(cudaEventSynchronize(ev[i]), "cudaEventSynchronize");
		if (pread(dfd, bufs[i], slice, (off_t)off) != (ssize_t)slice)
			die("pread", -errno);
		ck(cudaMemcpyAsync((uint8_t *)g + off, bufs[i], slice, cudaMemcpyHostToDevice,
				   raw_stream),
		   "cudaMemcpyAsync");
		ck(cudaEventRecord(ev[i], raw_stream), "cudaEventRecord");
	}
	ck(cudaStreamSynchronize(raw_stream), "cudaStreamSynchronize");
	return dp_now_ns() - t0;
}

static void bench_file_gpu(void)
{
	const uint64_t len = quick ? 256 * MiB : 1024 * MiB;
	const unsigned nb = 4, reps = quick ? 3 : 5;
	uint64_t t_ours[8], t_raw[8];
	uint8_t *bufs[4];
	cudaEvent_t ev[4];
	struct dp_desc d;
	struct dp_cqe cqe;
	int fd, dfd, rf, seg, rg;
	bool direct;
	void *g, *g2;
	double o, r;

	fd = bench_file(len);
	dfd = open(file_path, O_RDONLY | O_DIRECT);
	direct = dfd >= 0;
	if (!direct)
		dfd = open(file_path, O_RDONLY);
	for (unsigned i = 0; i < nb; i++) {
		ck(cudaHostAlloc((void **)&bufs[i], MiB, cudaHostAllocPortable), "cudaHostAlloc");
		ck(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming), "cudaEventCreate");
		ck(cudaEventRecord(ev[i], raw_stream), "cudaEventRecord");
	}
	ck(cudaMalloc(&g, len), "cudaMalloc");
	ck(cudaMalloc(&g2, len), "cudaMalloc");
	rf = dp_register_file(cl, fd, 0, len, DP_ACCESS_READ);
	if (rf < 0)
		die("dp_register_file", rf);
	seg = dp_segment_export(cl, rf, "file-gpu", DP_ACCESS_READ);
	if (seg)
		die("dp_segment_export", seg);
	seg = dp_segment_open(cl, NULL, "file-gpu", DP_ACCESS_READ);
	if (seg < 0)
		die("dp_segment_open", seg);
	rg = reg_gpu(g, len);
	printf("file -> GPU READ, %llu MiB, 1 MiB slices, %s, page cache dropped before each "
	       "run, GB/s (median of %u)\n",
	       (unsigned long long)(len >> 20), direct ? "O_DIRECT" : "buffered", reps);
	for (unsigned k = 0; k < reps; k++) {
		int rc;

		drop_cache(fd);
		dp_prep_read(&d, rg, 0, seg, 0, len, k + 1);
		t_ours[k] = dp_now_ns();
		if ((rc = dp_submit(q, &d, 1)) != 1)
			die("dp_submit", rc < 0 ? rc : -EAGAIN);
		while ((rc = dp_poll(q, &cqe, 1)) == 0)
			;
		t_ours[k] = dp_now_ns() - t_ours[k];
		if (rc < 0 || cqe.status || cqe.bytes != len)
			die("file -> GPU completion", rc < 0 ? rc : cqe.status ? cqe.status : -EIO);
		if (!with_peers)
			continue;
		drop_cache(fd);
		t_raw[k] = raw_file(dfd, g2, len, bufs, ev, nb);
	}
	if (with_peers)
		verify_gpu(g, g2, len, "file -> GPU");
	else
		verify_gpu_file(g, fd, len);
	o = median_gbs(t_ours, reps, len);
	report_obj("file");
	report_str("what", "file -> GPU READ, 1 MiB slices, page cache dropped before each run");
	report_u64("size", len);
	report_bool("direct", direct);
	report_u64("reps", reps);
	report_num("gb_per_s", o);
	if (with_peers) {
		r = median_gbs(t_raw, reps, len);
		printf("  file -> device  dataplane %6.2f  in-process %6.2f  ratio %6.3fx  target "
		       ">= 0.9x  %s\n",
		       o, r, o / r, verdict(o >= 0.9 * r));
		report_str("peer", "in-process pread() into 4 pinned 1 MiB buffers + "
				   "cudaMemcpyAsync");
		report_num("in_process_gb_per_s", r);
		report_num("ratio", o / r);
		report_str("target", ">= 0.9x");
		report_bool("pass", o >= 0.9 * r);
	} else {
		printf("  file -> device  dataplane %6.2f\n", o);
	}
	report_end();
	dp_segment_close(cl, seg);
	dp_free(cl, rf);
	dp_free(cl, rg);
	for (unsigned i = 0; i < nb; i++) {
		cudaFreeHost(bufs[i]);
		cudaEventDestroy(ev[i]);
	}
	ck(cudaFree(g), "cudaFree");
	ck(cudaFree(g2), "cudaFree");
	close(dfd);
	close(fd);
}

static void bench_p10(void)
{
	const uint64_t len = 4096, span = 256 * len;
	unsigned n = quick ? 5000 : 50000;
	uint64_t *t_ours = malloc(n * sizeof(*t_ours)), *t_raw = malloc(n * sizeof(*t_raw));
	void *src, *dst;
	int rs, rd, seg;
	double o50, r50;

	if (!t_ours || !t_raw)
		die("malloc", -ENOMEM);
	src = gpu_random(span, 5);
	ck(cudaMalloc(&dst, span), "cudaMalloc");
	zero(dst, span);
	rs = reg_gpu(src, span);
	rd = reg_gpu(dst, span);
	seg = segment(rd, "p10-dst");
	for (unsigned i = 0; i < n / 10; i++) {
		ours(rs, (i % 256) * len, seg, (i % 256) * len, len);
		if (with_peers)
			raw((uint8_t *)dst + (i % 256) * len, (uint8_t *)src + (i % 256) * len,
			    len);
	}
	/* Alternating blocks, so that drift in clocks or load hits both. */
	for (unsigned b = 0; b < n; b += 1000) {
		for (unsigned i = b; i < b + 1000 && i < n; i++)
			t_ours[i] = ours(rs, (i % 256) * len, seg, (i % 256) * len, len);
		for (unsigned i = b; with_peers && i < b + 1000 && i < n; i++)
			t_raw[i] = raw((uint8_t *)dst + (i % 256) * len,
				       (uint8_t *)src + (i % 256) * len, len);
	}
	zero(dst, span);
	for (unsigned i = 0; i < 256; i++)
		ours(rs, i * len, seg, i * len, len);
	verify_gpu(dst, src, span, "P10");
	qsort(t_ours, n, sizeof(*t_ours), cmp_u64);
	o50 = t_ours[n / 2] / 1e3;
	printf("P10 GPU small transfer, 4 KiB device -> device, submit to completion (%u "
	       "samples)\n",
	       n);
	printf("  dataplane  p50 %6.2f us  p99 %6.2f us  p999 %6.2f us\n", o50,
	       t_ours[n * 99 / 100] / 1e3, t_ours[n * 999 / 1000] / 1e3);
	report_obj("p10");
	report_str("what", "P10: 4 KiB device -> device, one outstanding, submit to completion");
	report_u64("samples", n);
	report_num("p50_us", o50);
	report_num("p99_us", t_ours[n * 99 / 100] / 1e3);
	report_num("p999_us", t_ours[n * 999 / 1000] / 1e3);
	if (with_peers) {
		qsort(t_raw, n, sizeof(*t_raw), cmp_u64);
		r50 = t_raw[n / 2] / 1e3;
		printf("  raw        p50 %6.2f us  p99 %6.2f us  p999 %6.2f us  (cudaMemcpyAsync "
		       "+ cudaEventRecord + cudaEventSynchronize)\n",
		       r50, t_raw[n * 99 / 100] / 1e3, t_raw[n * 999 / 1000] / 1e3);
		printf("  p50 difference %+.2f us   target <= raw + 3 us   %s\n", o50 - r50,
		       verdict(o50 <= r50 + 3.0));
		report_str("peer", "cudaMemcpyAsync + cudaEventRecord + cudaEventSynchronize");
		report_num("raw_p50_us", r50);
		report_num("raw_p99_us", t_raw[n * 99 / 100] / 1e3);
		report_num("raw_p999_us", t_raw[n * 999 / 1000] / 1e3);
		report_num("p50_difference_us", o50 - r50);
		report_str("target", "<= raw + 3 us");
		report_bool("pass", o50 <= r50 + 3.0);
	}
	report_end();
	dp_segment_close(cl, seg);
	dp_free(cl, rs);
	dp_free(cl, rd);
	ck(cudaFree(src), "cudaFree");
	ck(cudaFree(dst), "cudaFree");
	free(t_ours);
	free(t_raw);
}

/* 4 KiB WRITEs src -> seg, one outstanding: the p50 in us (n samples,
 * after a warm-up), the sorted samples left in t. */
static double small_p50(int rs, int seg, uint64_t *t, unsigned n)
{
	const uint64_t len = 4096;

	for (unsigned i = 0; i < n / 10; i++)
		ours_any(rs, (i % 256) * len, seg, (i % 256) * len, len);
	for (unsigned i = 0; i < n; i++)
		t[i] = ours_any(rs, (i % 256) * len, seg, (i % 256) * len, len);
	qsort(t, n, sizeof(*t), cmp_u64);
	return t[n / 2] / 1e3;
}

/* P12's destination: dst registered and exported by client tc of the other
 * service, and opened here through it; the segment. */
static int p12_target(struct dp_client *tc, void *dst, uint64_t len)
{
	int rd = dp_register_cuda(tc, dst, len), rc, seg;

	if (rd < 0)
		die("dp_register_cuda (target service)", rd);
	if ((rc = dp_segment_export(tc, rd, "p12-dst", DP_ACCESS_RW)))
		die("dp_segment_export (target service)", rc);
	seg = dp_segment_open(cl, target_peer, "p12-dst", DP_ACCESS_RW);
	if (seg < 0)
		die("dp_segment_open (the other service's export)", seg);
	return seg;
}

/* P12's 4 KiB WRITEs from rs: into segment seg, across services, against
 * the same inside this one; n samples each. */
static void p12_small(int rs, int seg, unsigned n)
{
	uint64_t *t_small = malloc(n * sizeof(uint64_t));
	double small, local_small;
	void *ldst = NULL;
	int rl, lseg;

	if (!t_small)
		die("malloc", -ENOMEM);
	ck(cudaMalloc(&ldst, 256 * 4096), "cudaMalloc");
	rl = reg_gpu(ldst, 256 * 4096);
	lseg = segment(rl, "p12-local");
	local_small = small_p50(rs, lseg, t_small, n);
	small = small_p50(rs, seg, t_small, n);
	printf("  4 KiB p50: across services %.2f us (p99 %.2f), inside one service %.2f us: "
	       "%.2fx  target <= 1.5x  %s\n",
	       small, t_small[n * 99 / 100] / 1e3, local_small, small / local_small,
	       verdict(small <= 1.5 * local_small));
	report_num("small_p50_us", small);
	report_num("small_p99_us", t_small[n * 99 / 100] / 1e3);
	report_num("local_small_p50_us", local_small);
	report_num("small_ratio", small / local_small);
	report_bool("small_pass", small <= 1.5 * local_small);
	dp_segment_close(cl, lseg);
	dp_free(cl, rl);
	ck(cudaFree(ldst), "cudaFree");
	free(t_small);
}

/*
 * P12: GPU -> GPU into another service's export on this host. A second
 * client of the target service registers and exports the destination; this
 * client opens it by the target's name and WRITEs into it.
 */
static void bench_p12(void)
{
	const uint64_t max = 1024 * MiB;
	unsigned reps = quick ? 3 : 10;
	struct d2d x = {.write = ours_any, .span = max, .reps = reps, .raw = true, .what = "P12"};
	struct dp_client *tc;
	bool all = true;
	int rc;

	if ((rc = dp_connect(target_sock, "gpu-bench-target", &tc)) < 0) {
		dp_tool_connect_error("gpu-bench", target_sock, rc);
		exit(1);
	}
	x.src = gpu_random(max, 12);
	ck(cudaMalloc(&x.dst, max), "cudaMalloc");
	zero(x.dst, max);
	x.rs = reg_gpu(x.src, max);
	x.seg = p12_target(tc, x.dst, max);
	ours_any(x.rs, 0, x.seg, 0, 4096);
	printf("P12 GPU -> GPU across services of this host (%s), device -> device WRITE, GB/s "
	       "(median of %u)\n",
	       path_name(last_flags), reps);
	printf("  %9s %10s %10s %7s\n", "size", "dataplane", "raw", "ratio");
	report_obj("p12");
	report_str("what", "P12: GPU -> GPU WRITE into another service's export, same host");
	report_str("path", path_name(last_flags));
	report_u64("reps", reps);
	report_str("peer", "cudaMemcpyAsync D2D + cudaEventRecord + cudaEventSynchronize");
	report_arr("sizes");
	for (uint64_t len = 4 * MiB; len <= max; len *= 4) {
		double o, r;
		bool gated = len >= 64 * MiB;

		d2d_size(&x, len, &o, &r);
		if (gated)
			all &= o >= 0.8 * r;
		printf("  %5llu MiB %10.1f %10.1f %6.3fx  %s\n", (unsigned long long)(len / MiB), o,
		       r, o / r, gated ? verdict(o >= 0.8 * r) : "(not gated)");
		report_obj(NULL);
		report_u64("size", len);
		report_num("gb_per_s", o);
		report_num("raw_gb_per_s", r);
		report_num("ratio", o / r);
		report_end();
	}
	report_end();
	printf("  target >= 0.8x raw cudaMemcpyAsync at 64 MiB and above: %s\n", verdict(all));
	report_str("target", ">= 0.8x at 64 MiB and above");
	report_bool("pass", all);
	p12_small(x.rs, x.seg, quick ? 5000 : 20000);
	report_end();
	dp_segment_close(cl, x.seg);
	dp_free(cl, x.rs);
	dp_close(tc);
	ck(cudaFree(x.src), "cudaFree");
	ck(cudaFree(x.dst), "cudaFree");
}

/*
 * vmm: GPU memory from a virtual-memory allocator (cuMemCreate +
 * cuMemMap in pieces side by side, as PyTorch's expandable segments grow)
 * vs cudaMalloc memory, both registered by a client of another service of
 * this host in its engine session and written there by address through
 * dp_session_open: device -> device WRITEs, 4 MiB .. 256 MiB, GB/s, the
 * ratio, and raw cudaMemcpyAsync of the same bytes.
 */
typedef CUresult (*cu_fn)();
static cu_fn cu(const char *name)
{
	enum cudaDriverEntryPointQueryResult qr;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &qr) ||
	    qr != cudaDriverEntryPointSuccess) {
		fprintf(stderr, "gpu-bench: no driver entry point %s\n", name);
		exit(1);
	}
	return (cu_fn)fn;
}

static void *vmm_map(size_t piece, unsigned n)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;

	if (((CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))cu(
		    "cuMemAddressReserve"))(&va, piece * n, 0, 0, 0))
		die("cuMemAddressReserve", -ENOMEM);
	for (unsigned i = 0; i < n; i++) {
		if (((CUresult(*)(CUmemGenericAllocationHandle *, size_t,
				  const CUmemAllocationProp *,
				  unsigned long long))cu("cuMemCreate"))(&h, piece, &prop, 0) ||
		    ((CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
				  unsigned long long))cu("cuMemMap"))(va + i * piece, piece, 0, h,
								      0))
			die("cuMemCreate/cuMemMap", -ENOMEM);
	}
	if (((CUresult(*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))cu(
		    "cuMemSetAccess"))(va, piece * n, &a, 1))
		die("cuMemSetAccess", -EINVAL);
	return (void *)(uintptr_t)va;
}

static void bench_vmm(void)
{
	const size_t piece = 64 * MiB;
	const uint64_t max = 4 * piece;
	unsigned reps = quick ? 3 : 10;
	uint64_t t[2][16], t_raw[16];
	struct dp_client *tc;
	void *src, *dst[2];
	int rs, seg, rc;
	const char *names[2] = {"cudaMalloc", "VMM (4 pieces)"};

	if ((rc = dp_connect(target_sock, "gpu-bench-session", &tc)) < 0) {
		dp_tool_connect_error("gpu-bench", target_sock, rc);
		exit(1);
	}
	if ((rc = dp_session_create(tc, 0)) < 0)
		die("dp_session_create", rc);
	src = gpu_random(max, 33);
	rs = reg_gpu(src, max);
	ck(cudaMalloc(&dst[0], max), "cudaMalloc");
	dst[1] = vmm_map(piece, 4);
	for (int k = 0; k < 2; k++) {
		zero(dst[k], max);
		if ((rc = dp_register_cuda(tc, dst[k], max)) < 0) {
			fprintf(stderr, "gpu-bench: dp_register_cuda (%s): %s\n", names[k],
				dp_last_error());
			exit(1);
		}
	}
	seg = dp_session_open(cl, dp_session_name(tc), DP_ACCESS_RW);
	if (seg < 0) {
		fprintf(stderr, "gpu-bench: dp_session_open: %s\n", dp_last_error());
		exit(1);
	}
	ours_any(rs, 0, seg, (uintptr_t)dst[0], 4096);
	ours_any(rs, 0, seg, (uintptr_t)dst[1], 4096);
	printf("vmm: GPU -> GPU WRITEs into another service's client's session (%s): cudaMalloc "
	       "vs VMM memory, GB/s (median of %u), raw cudaMemcpyAsync D2D beside\n",
	       path_name(last_flags), reps);
	printf("  %9s %10s %10s %7s %10s\n", "size", "cudaMalloc", "VMM", "ratio", "raw");
	report_obj("vmm");
	report_str("path", path_name(last_flags));
	report_arr("sizes");
	for (uint64_t len = 4 * MiB; len <= max; len *= 4) {
		double g[2], r;

		for (unsigned i = 0; i < reps; i++)
			for (int k = 0; k < 2; k++) {
				int w = (i + (unsigned)k) % 2;
				uint64_t off = (i * 4099 * 4096) % (max - len + 1) & ~4095ull;

				t[w][i] = ours_any(rs, off, seg, (uintptr_t)dst[w] + off, len);
			}
		for (unsigned i = 0; i < reps; i++)
			t_raw[i] = raw(dst[0], src, len);
		for (int k = 0; k < 2; k++) {
			zero(dst[k], len);
			ours_any(rs, 0, seg, (uintptr_t)dst[k], len);
			verify_gpu(dst[k], src, len, names[k]);
			g[k] = median_gbs(t[k], reps, len);
		}
		r = median_gbs(t_raw, reps, len);
		printf("  %5llu MiB %10.1f %10.1f %6.3fx %10.1f\n", (unsigned long long)(len / MiB),
		       g[0], g[1], g[1] / g[0], r);
		report_obj(NULL);
		report_u64("size", len);
		report_num("cudamalloc_gb_per_s", g[0]);
		report_num("vmm_gb_per_s", g[1]);
		report_num("ratio", g[1] / g[0]);
		report_num("raw_gb_per_s", r);
		report_end();
	}
	report_end();
	report_end();
	dp_segment_close(cl, seg);
	dp_free(cl, rs);
	dp_close(tc);
	ck(cudaFree(src), "cudaFree");
	ck(cudaFree(dst[0]), "cudaFree");
}

/*
 * The probe's first part: a 4 KiB D2D copy alone, and issued 50 us after a
 * 1 GiB copy on another stream (greatest or least priority) or on the same
 * stream; the median of 9 each.
 */
static void probe_small_after_big(void)
{
	static const char *const names[] = {"alone", "other stream, greatest priority",
					    "other stream, least priority", "same stream"};
	const uint64_t big = 1024 * MiB, small = 4096;
	cudaStream_t s_hi, s_lo, s_big;
	cudaEvent_t ev_big, ev_small;
	void *bsrc, *bdst, *ssrc, *sdst;
	int least, greatest;

	ck(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priority range");
	ck(cudaStreamCreateWithPriority(&s_hi, cudaStreamNonBlocking, greatest), "stream");
	ck(cudaStreamCreateWithPriority(&s_lo, cudaStreamNonBlocking, least), "stream");
	ck(cudaStreamCreateWithPriority(&s_big, cudaStreamNonBlocking, least), "stream");
	ck(cudaEventCreateWithFlags(&ev_big, cudaEventDisableTiming), "event");
	ck(cudaEventCreateWithFlags(&ev_small, cudaEventDisableTiming), "event");
	bsrc = gpu_random(big, 7);
	ck(cudaMalloc(&bdst, big), "cudaMalloc");
	ssrc = gpu_random(small, 8);
	ck(cudaMalloc(&sdst, small), "cudaMalloc");
	printf("probe: 4 KiB D2D latency (us, median of 9), a 1 GiB D2D copy started 50 us "
	       "before\n");
	report_arr("small_after_big");
	for (int mode = 0; mode < 4; mode++) {
		cudaStream_t s = mode == 1 ? s_hi : mode == 2 ? s_lo : s_big;
		uint64_t t[9], tbig[9];

		for (int r = 0; r < 9; r++) {
			uint64_t t0, tb = dp_now_ns(), end;

			if (mode) {
				ck(cudaMemcpyAsync(bdst, bsrc, big, cudaMemcpyDefault, s_big),
				   "big");
				ck(cudaEventRecord(ev_big, s_big), "record");
				end = dp_now_ns() + 50000;
				while (dp_now_ns() < end)
					;
			}
			t0 = dp_now_ns();
			ck(cudaMemcpyAsync(sdst, ssrc, small, cudaMemcpyDefault, s), "small");
			ck(cudaEventRecord(ev_small, s), "record");
			ck(cudaEventSynchronize(ev_small), "sync");
			t[r] = dp_now_ns() - t0;
			ck(cudaEventSynchronize(ev_big), "sync");
			tbig[r] = dp_now_ns() - tb;
		}
		qsort(t, 9, sizeof(t[0]), cmp_u64);
		qsort(tbig, 9, sizeof(tbig[0]), cmp_u64);
		printf("  %-34s %9.1f   (1 GiB copy %.1f us)\n", names[mode], t[4] / 1e3,
		       mode ? tbig[4] / 1e3 : 0.0);
		report_obj(NULL);
		report_str("mode", names[mode]);
		report_num("small_us", t[4] / 1e3);
		report_num("big_us", mode ? tbig[4] / 1e3 : 0.0 / 0.0);
		report_end();
	}
	report_end();
	cudaFree(bsrc);
	cudaFree(bdst);
	cudaFree(ssrc);
	cudaFree(sdst);
}

/* The probe's second part: what one large raw copy costs, timed four ways
 * (64 MiB, us, the median of 9). */
static void probe_copy_64mib(void)
{
	const uint64_t big = 1024 * MiB, len = 64 * MiB;
	uint64_t t[4][9], t0;
	void *bsrc, *bdst;

	bsrc = gpu_random(big, 9);
	ck(cudaMalloc(&bdst, big), "cudaMalloc");
	zero(bdst, big);
	raw(bdst, bsrc, len);
	for (int r = 0; r < 9; r++) {
		uint64_t off = (uint64_t)(r % 16) * len;

		t[0][r] = raw((uint8_t *)bdst + off, (uint8_t *)bsrc + off, len);
		t[1][r] = raw(bdst, bsrc, len);
		t0 = dp_now_ns();
		for (int k = 0; k < 10; k++)
			ck(cudaMemcpyAsync(bdst, bsrc, len, cudaMemcpyDefault, raw_stream), "copy");
		ck(cudaStreamSynchronize(raw_stream), "sync");
		t[2][r] = (dp_now_ns() - t0) / 10;
	}
	ck(cudaMemset(bsrc, 0x5a, big), "cudaMemset");
	ck(cudaDeviceSynchronize(), "sync");
	for (int r = 0; r < 9; r++)
		t[3][r] = raw(bdst, bsrc, len);
	for (int i = 0; i < 4; i++)
		qsort(t[i], 9, sizeof(t[i][0]), cmp_u64);
	printf("probe: one 64 MiB D2D cudaMemcpyAsync, us (median of 9): random data, "
	       "rotating "
	       "offsets %.1f; same offset %.1f; 10 back to back, per copy %.1f; constant "
	       "data %.1f\n",
	       t[0][4] / 1e3, t[1][4] / 1e3, t[2][4] / 1e3, t[3][4] / 1e3);
	report_obj("copy_64mib_us");
	report_num("random_rotating_offsets", t[0][4] / 1e3);
	report_num("same_offset", t[1][4] / 1e3);
	report_num("back_to_back_per_copy", t[2][4] / 1e3);
	report_num("constant_data", t[3][4] / 1e3);
	report_end();
	cudaFree(bsrc);
	cudaFree(bdst);
}

/*
 * Not a target, a probe of the hardware under the engine's design: how long
 * a 4 KiB device -> device cudaMemcpyAsync takes alone, and issued 50 us
 * after a 1 GiB copy on another stream (greatest or least priority) or on
 * the same stream. The engine relies on the other-stream case.
 */
static void bench_probe(void)
{
	report_obj("probe");
	probe_small_after_big();
	probe_copy_64mib();
	report_end();
}

/* ---- P13: GPU -> remote host through staging vs host -> remote host ---- */

#define P13_SPAN (256 * MiB)
#define P13_DEPTH 4

/* @total WRITEs of @len from @src (rotating over P13_SPAN) to @seg, up to
 * P13_DEPTH outstanding; GB/s. The completions' flags go to *flags. */
static double p13_stream(int src, int seg, uint64_t len, unsigned total, uint32_t *flags)
{
	const char *what = "P13 WRITE";
	double gbps;
	int rc = dp_tool_write_stream(q, src, seg, len, P13_SPAN, total, P13_DEPTH, 30000, &gbps,
				      flags, &what);

	if (rc)
		die(what, rc);
	return gbps;
}

/* Median GB/s of @reps streams of @len WRITEs (a warm-up first). */
static double p13_measure(int src, int seg, uint64_t len, unsigned reps, uint32_t *flags)
{
	unsigned total = (unsigned)((quick ? 256 * MiB : 1024 * MiB) / len);
	double r[16];

	if (total < 4)
		total = 4;
	p13_stream(src, seg, len, total / 4, flags);
	for (unsigned i = 0; i < reps; i++)
		r[i] = p13_stream(src, seg, len, total, flags);
	for (unsigned i = 1; i < reps; i++)
		for (unsigned j = i; j > 0 && r[j - 1] > r[j]; j--) {
			double t = r[j];

			r[j] = r[j - 1];
			r[j - 1] = t;
		}
	return r[reps / 2];
}

/* The segment's bytes (P13_SPAN at @tgt) after a last full pass from @src
 * must be @want's (host memory, or a GPU buffer when @gpu). */
static void p13_verify(int src, int seg, uint8_t *tgt, const void *want, bool gpu)
{
	uint8_t *h = (uint8_t *)want;
	uint32_t flags;

	memset(tgt, 0, P13_SPAN);
	p13_stream(src, seg, 64 * MiB, P13_SPAN / (64 * MiB), &flags);
	if (gpu) {
		h = malloc(P13_SPAN);
		if (!h)
			die("malloc", -ENOMEM);
		ck(cudaMemcpy(h, want, P13_SPAN, cudaMemcpyDeviceToHost), "verify copy");
	}
	if (memcmp(tgt, h, P13_SPAN)) {
		fprintf(stderr, "gpu-bench: DATA MISMATCH after P13 (%s)\n", gpu ? "GPU" : "host");
		exit(1);
	}
	if (gpu)
		free(h);
}

static void bench_p13(bool have_gpu)
{
	static const uint64_t sizes[] = {4 * MiB, 64 * MiB};
	unsigned reps = quick ? 3 : 5;
	struct dp_client *pc;
	uint8_t *host, *tgt;
	void *g = NULL;
	int rh, rg = -1, rt, seg, rc;
	bool all = true;

	if ((rc = dp_connect(target_sock, "gpu-bench-target", &pc)) < 0) {
		dp_tool_connect_error("gpu-bench", target_sock, rc);
		exit(1);
	}
	if ((rt = dp_alloc(pc, P13_SPAN, 0, (void **)&tgt)) < 0)
		die("dp_alloc (target)", rt);
	if ((rc = dp_segment_export(pc, rt, "p13-dst", DP_ACCESS_RW)) < 0)
		die("dp_segment_export (target)", rc);
	if ((seg = dp_segment_open(cl, target_peer, "p13-dst", DP_ACCESS_RW)) < 0)
		die("dp_segment_open through --peer", seg);
	if ((rh = dp_alloc(cl, P13_SPAN, 0, (void **)&host)) < 0)
		die("dp_alloc", rh);
	fill_random(host, P13_SPAN, 13);
	if (have_gpu) {
		g = gpu_random(P13_SPAN, 14);
		rg = reg_gpu(g, P13_SPAN);
	}
	printf("P13 WRITE to a host segment of another service (%s) over the fabric, %u "
	       "outstanding, GB/s (median of %u)\n",
	       target_peer, P13_DEPTH, reps);
	printf("  %9s %12s %14s %7s\n", "size", "host memory", "GPU, staged", "ratio");
	report_obj("p13");
	report_str("what", "P13: GPU -> remote host through host staging vs host -> remote host");
	report_str("target_peer", target_peer);
	report_u64("depth", P13_DEPTH);
	report_u64("reps", reps);
	report_str("target", ">= 0.9x");
	report_arr("sizes");
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t fh = 0, fg = 0;
		double h = p13_measure(rh, seg, sizes[i], reps, &fh), gb;

		if (fh & DP_CQE_F_GPU)
			die("host WRITE reported DP_CQE_F_GPU", -EBADMSG);
		report_obj(NULL);
		report_u64("size", sizes[i]);
		report_num("host_gb_per_s", h);
		if (!have_gpu) {
			printf("  %5llu MiB %12.3f %14s %7s\n",
			       (unsigned long long)(sizes[i] / MiB), h, "no GPU", "-");
			report_end();
			continue;
		}
		gb = p13_measure(rg, seg, sizes[i], reps, &fg);
		if ((fg & (DP_CQE_F_FABRIC | DP_CQE_F_GPU)) != (DP_CQE_F_FABRIC | DP_CQE_F_GPU))
			die("GPU WRITE without DP_CQE_F_FABRIC | DP_CQE_F_GPU", -EBADMSG);
		all &= gb >= 0.9 * h;
		printf("  %5llu MiB %12.3f %14.3f %6.3fx  %s\n",
		       (unsigned long long)(sizes[i] / MiB), h, gb, gb / h, verdict(gb >= 0.9 * h));
		report_num("gpu_staged_gb_per_s", gb);
		report_num("ratio", gb / h);
		report_bool("pass", gb >= 0.9 * h);
		report_end();
	}
	report_end();
	p13_verify(rh, seg, tgt, host, false);
	if (have_gpu) {
		p13_verify(rg, seg, tgt, g, true);
		printf("  target >= 0.9x the host-memory figure: %s\n", verdict(all));
		report_bool("pass", all);
	} else {
		printf("  GPU column: skipped (no CUDA device %d here)\n", device);
		report_str("gpu_skipped", "no CUDA device");
	}
	report_end();
	dp_segment_close(cl, seg);
	dp_free(cl, rh);
	if (have_gpu) {
		dp_free(cl, rg);
		ck(cudaFree(g), "cudaFree");
	}
	dp_close(pc);
}

/* P13 where there is no GPU: the host column alone. */
static int p13_host_only(void)
{
	int rc;

	report_obj("cpus");
	report_num("client", client_cpu);
	report_num("service", service_cpu);
	report_end();
	bench_place_and_pin(client_cpu, service_cpu);
	if ((rc = dp_connect(sock_path, "gpu-bench", &cl)) < 0) {
		dp_tool_connect_error("gpu-bench", sock_path, rc);
		exit(1);
	}
	if ((rc = dp_queue_create(cl, 256, &q)) < 0)
		die("dp_queue_create", rc);
	bench_p13(false);
	dp_close(cl);
	report_close();
	return 0;
}

/* ---- pages: a batch of N scattered pages, --depth in flight ---- */

#define PAGES_DEPTH pages_depth

/* A fixed permutation of [0, n): page i of the batch goes from source page
 * i to destination page perm[i]. */
static unsigned *pages_perm(unsigned n)
{
	unsigned *p = malloc(n * sizeof(*p));
	uint64_t x = 0x2545f4914f6cdd1dull;

	if (!p)
		die("malloc", -ENOMEM);
	for (unsigned i = 0; i < n; i++)
		p[i] = i;
	for (unsigned i = n - 1; i > 0; i--) {
		unsigned j, t;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		j = (unsigned)(x % (i + 1));
		t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
	return p;
}

/* The raw peers' scratch: cudaMemcpyBatchAsync's arrays and the page
 * kernel's table, for batches of up to 4096 pages. */
struct pages_scratch {
	struct gpu_page *tab;
	void **dsts, **srcs;
	size_t *sizes;
};

/* One page size's run: the batch, its buffers, and the regions and segments
 * over them. */
struct pages_run {
	unsigned n;	      /* pages in the batch */
	uint64_t size, len;   /* a page, the batch */
	unsigned *perm;	      /* source page i goes to destination page perm[i] */
	uint8_t *src, *dst;   /* GPU memory */
	uint8_t *hsrc, *hdst; /* host regions of ours */
	int rs, rd, seg;      /* src's and dst's regions, dst's segment */
	int rhs, rhd, hseg;   /* hsrc's and hdst's regions, hdst's segment */
	struct dp_client *tc; /* a client of the other service, or NULL */
	int trd, tseg;	      /* dst registered there, its export opened here */
	const struct pages_scratch *sc;
};

/* The batch through the service: N WRITEs (region rs's page i -> segment
 * seg's page perm[i]), up to PAGES_DEPTH in flight; ns. */
static uint64_t pages_ours(const struct pages_run *p, int rs, int seg, uint32_t *flags)
{
	struct dp_cqe cqe[64];
	unsigned sent = 0, done = 0, n = p->n;
	uint64_t t0 = dp_now_ns();

	while (done < n) {
		while (sent < n && sent - done < PAGES_DEPTH) {
			struct dp_desc d[32];
			unsigned k = 0;
			int rc;

			for (; k < 32 && sent + k < n && sent + k - done < PAGES_DEPTH; k++) {
				unsigned i = sent + k;

				dp_prep_write(&d[k], rs, (uint64_t)i * p->size, seg,
					      (uint64_t)p->perm[i] * p->size, p->size, i);
			}
			rc = dp_submit(q, d, k);
			if (rc < 0)
				die("dp_submit", rc);
			sent += (unsigned)rc;
			if ((unsigned)rc < k)
				break;
		}
		int k = dp_poll(q, cqe, 64);

		if (k < 0)
			die("dp_poll", k);
		for (int i = 0; i < k; i++) {
			if (cqe[i].status)
				die("page WRITE", cqe[i].status);
			*flags = cqe[i].flags;
		}
		done += (unsigned)k;
	}
	return dp_now_ns() - t0;
}

/* Destination page perm[i] holds source page i, every byte. */
static void pages_verify(const struct pages_run *p, const void *src, const void *dst,
			 const char *what)
{
	uint8_t *hs = malloc(p->len), *hd = malloc(p->len);

	if (!hs || !hd)
		die("malloc", -ENOMEM);
	ck(cudaMemcpy(hs, src, p->len, cudaMemcpyDefault), "verify copy");
	ck(cudaMemcpy(hd, dst, p->len, cudaMemcpyDefault), "verify copy");
	for (unsigned i = 0; i < p->n; i++)
		if (memcmp(hs + (uint64_t)i * p->size, hd + (uint64_t)p->perm[i] * p->size,
			   p->size)) {
			fprintf(stderr, "gpu-bench: DATA MISMATCH after %s (page %u)\n", what, i);
			exit(1);
		}
	free(hs);
	free(hd);
}

enum { PG_RAW, PG_BATCH, PG_KERNEL, PG_CONTIG };

/* One in-process peer run of the batch on raw_stream; ns (0: not here). */
static uint64_t pages_raw(const struct pages_run *p, int how, uint8_t *src, uint8_t *dst)
{
	const uint64_t size = p->size;
	const unsigned n = p->n, *perm = p->perm;
	uint64_t t0 = dp_now_ns();

	switch (how) {
	case PG_RAW:
		for (unsigned i = 0; i < n; i++)
			ck(cudaMemcpyAsync(dst + (uint64_t)perm[i] * size, src + (uint64_t)i * size,
					   size, cudaMemcpyDefault, raw_stream),
			   "cudaMemcpyAsync");
		break;
	case PG_BATCH: {
#if CUDART_VERSION >= 12080
		struct cudaMemcpyAttributes attr = {.srcAccessOrder =
							    cudaMemcpySrcAccessOrderStream};
		size_t idx = 0;

		for (unsigned i = 0; i < n; i++) {
			p->sc->dsts[i] = dst + (uint64_t)perm[i] * size;
			p->sc->srcs[i] = src + (uint64_t)i * size;
			p->sc->sizes[i] = size;
		}
		t0 = dp_now_ns();
		if (cudaMemcpyBatchAsync(p->sc->dsts, (const void *const *)p->sc->srcs,
					 p->sc->sizes, n, &attr, &idx, 1,
					 raw_stream) != cudaSuccess) {
			cudaGetLastError();
			return 0;
		}
#else
		return 0;
#endif
		break;
	}
	case PG_KERNEL:
		for (unsigned i = 0; i < n; i++)
			p->sc->tab[i] = (struct gpu_page){
				.src = (uintptr_t)(src + (uint64_t)i * size),
				.dst = (uintptr_t)(dst + (uint64_t)perm[i] * size),
				.len = size};
		ck(gpu_pages_launch(p->sc->tab, n, raw_stream), "gpu_pages_launch");
		break;
	default:
		ck(cudaMemcpyAsync(dst, src, size * n, cudaMemcpyDefault, raw_stream),
		   "cudaMemcpyAsync");
	}
	ck(cudaEventRecord(raw_ev, raw_stream), "cudaEventRecord");
	ck(cudaEventSynchronize(raw_ev), "cudaEventSynchronize");
	return dp_now_ns() - t0;
}

static double pages_median(uint64_t *ns, unsigned reps, uint64_t bytes)
{
	return ns[0] ? median_gbs(ns, reps, bytes) : 0.0;
}

static void pages_row(const char *what, double gbs, double contig, const char *key)
{
	if (gbs > 0)
		printf("    %-44s %9.1f GB/s   %.3fx contiguous\n", what, gbs, gbs / contig);
	else
		printf("    %-44s       n/a\n", what);
	report_num(key, gbs);
}

/* Where a round's figure goes: round 0 is the warm-up, kept in slot 7,
 * past those the medians read (reps <= 5). */
static unsigned pages_slot(unsigned round)
{
	return round ? round - 1 : 7;
}

/* The buffers, regions and segments of the run of @n pages of @size, the
 * @index-th size; with @tc, dst exported by the other service too. */
static void pages_open(struct pages_run *p, unsigned index, uint64_t size, unsigned n,
		       struct dp_client *tc, const struct pages_scratch *sc)
{
	char name[32];
	int rc;

	*p = (struct pages_run){
		.n = n, .size = size, .len = size * n, .tc = tc, .trd = -1, .tseg = -1, .sc = sc};
	p->perm = pages_perm(n);
	p->src = gpu_random(p->len, 35 + index);
	ck(cudaMalloc((void **)&p->dst, p->len), "cudaMalloc");
	zero(p->dst, p->len);
	p->rs = reg_gpu(p->src, p->len);
	p->rd = reg_gpu(p->dst, p->len);
	snprintf(name, sizeof(name), "pages-%u", index);
	p->seg = segment(p->rd, name);
	if (tc) {
		p->trd = dp_register_cuda(tc, p->dst, p->len);
		if (p->trd < 0)
			die("dp_register_cuda (the other service)", p->trd);
		snprintf(name, sizeof(name), "pages-t-%u", index);
		if ((rc = dp_segment_export(tc, p->trd, name, DP_ACCESS_RW)))
			die("dp_segment_export (the other service)", rc);
		p->tseg = dp_segment_open(cl, target_peer, name, DP_ACCESS_RW);
		if (p->tseg < 0)
			die("dp_segment_open (the other service's export)", p->tseg);
	}
	/* Host pages: a region of ours (pinned by the service) and a
	 * cudaHostAlloc buffer for the raw peer. */
	p->rhs = dp_alloc(cl, p->len, 0, (void **)&p->hsrc);
	if (p->rhs < 0)
		die("dp_alloc", p->rhs);
	fill_random(p->hsrc, p->len, 77 + index);
	p->rhd = dp_alloc(cl, p->len, 0, (void **)&p->hdst);
	if (p->rhd < 0)
		die("dp_alloc", p->rhd);
	snprintf(name, sizeof(name), "pages-h-%u", index);
	p->hseg = segment(p->rhd, name);
}

static void pages_close(struct pages_run *p)
{
	dp_free(cl, p->rhd);
	dp_free(cl, p->rhs);
	dp_free(cl, p->rd);
	dp_free(cl, p->rs);
	if (p->tc)
		dp_free(p->tc, p->trd);
	ck(cudaFree(p->src), "cudaFree");
	ck(cudaFree(p->dst), "cudaFree");
	free(p->perm);
}

/*
 * The GPU -> GPU columns: ours through one service (t[0]) and into the other
 * service's export (t[1]), the four raw peers (t[2 + PG_*]); and ours host
 * -> GPU (t[6]): our host region's pages into the GPU segment. A warm-up
 * round, then reps timed ones, each column in a block of its own (no
 * context switch per copy), every run's bytes checked. The path of the
 * two-service completions in *tfl.
 */
static void pages_gpu_rounds(const struct pages_run *p, unsigned reps, uint64_t t[7][8],
			     uint32_t *tfl)
{
	uint32_t fl = 0;

	for (unsigned r = 0; r < reps + 1; r++) {
		unsigned k = pages_slot(r);

		zero(p->dst, p->len);
		t[0][k] = pages_ours(p, p->rs, p->seg, &fl);
		pages_verify(p, p->src, p->dst, "dataplane pages");
		if (p->tc) {
			zero(p->dst, p->len);
			t[1][k] = pages_ours(p, p->rs, p->tseg, tfl);
			pages_verify(p, p->src, p->dst, "dataplane pages, two services");
		}
		for (int how = PG_RAW; how <= PG_CONTIG; how++) {
			uint64_t ns;

			zero(p->dst, p->len);
			ns = pages_raw(p, how, p->src, p->dst);
			if (how != PG_CONTIG && ns)
				pages_verify(p, p->src, p->dst, "raw pages");
			t[2 + how][k] = ns;
		}
		zero(p->dst, p->len);
		t[6][k] = pages_ours(p, p->rhs, p->seg, &fl);
		pages_verify(p, p->hsrc, p->dst, "host -> GPU pages");
	}
}

/* The GPU -> GPU rows, against one contiguous copy of the same bytes (that
 * figure returned). */
static double pages_gpu_report(const struct pages_run *p, unsigned reps, uint64_t t[7][8],
			       uint32_t tfl)
{
	double contig = pages_median(t[5], reps, p->len);

	printf("  %llu KiB x %u (%llu MiB), GPU -> GPU:\n", (unsigned long long)p->size >> 10, p->n,
	       (unsigned long long)p->len >> 20);
	report_num("page_bytes", (double)p->size);
	report_num("pages", p->n);
	pages_row("dataplane, one service", pages_median(t[0], reps, p->len), contig,
		  "dataplane_gb_s");
	if (p->tc) {
		char w[64];

		snprintf(w, sizeof(w), "dataplane, two services (%s)", path_name(tfl));
		pages_row(w, pages_median(t[1], reps, p->len), contig, "two_services_gb_s");
	} else {
		pages_row("dataplane, two services (no --peer-socket)", 0, contig,
			  "two_services_gb_s");
	}
	pages_row("raw cudaMemcpyAsync per page", pages_median(t[2], reps, p->len), contig,
		  "raw_per_page_gb_s");
	pages_row("cudaMemcpyBatchAsync", pages_median(t[3], reps, p->len), contig,
		  "memcpy_batch_gb_s");
	pages_row("gather kernel in-process (gpu_pages.cu)", pages_median(t[4], reps, p->len),
		  contig, "kernel_gb_s");
	pages_row("one contiguous cudaMemcpyAsync", contig, contig, "contiguous_gb_s");
	printf("    targets: 16 KiB >= 0.5x, 4 KiB >= 0.25x contiguous: %s\n",
	       p->size == 16384	 ? verdict(pages_median(t[0], reps, p->len) >= 0.5 * contig)
	       : p->size == 4096 ? verdict(pages_median(t[0], reps, p->len) >= 0.25 * contig)
				 : "(no target at this size)");
	return contig;
}

/*
 * Host pages, pinned, both directions: ours GPU -> host (the GPU region's
 * pages into the host segment), and the raw per-page peer from and into
 * cudaHostAlloc memory; with ours host -> GPU (t_h2d, of the GPU rounds)
 * beside them.
 */
static void pages_host(const struct pages_run *p, unsigned reps, uint64_t *t_h2d, double contig)
{
	uint64_t th[4][8] = {{0}};
	uint32_t fl = 0;
	uint8_t *pin;

	ck(cudaHostAlloc((void **)&pin, p->len, cudaHostAllocPortable), "cudaHostAlloc");
	memcpy(pin, p->hsrc, p->len);
	for (unsigned r = 0; r < reps + 1; r++) {
		unsigned k = pages_slot(r);

		memset(p->hdst, 0, p->len);
		/* GPU -> host: READs of the GPU segment's page perm[i] into our
		 * host page i = WRITEs of it from the GPU source: the source is
		 * the GPU region, the target the host segment. */
		th[1][k] = pages_ours(p, p->rs, p->hseg, &fl);
		pages_verify(p, p->src, p->hdst, "GPU -> host pages");
		zero(p->dst, p->len);
		th[2][k] = pages_raw(p, PG_RAW, pin, p->dst);
		pages_verify(p, pin, p->dst, "raw host -> GPU pages");
		memset(pin, 0, p->len);
		th[3][k] = pages_raw(p, PG_RAW, p->src, pin);
		pages_verify(p, p->src, pin, "raw GPU -> host pages");
		memcpy(pin, p->hsrc, p->len);
	}
	printf("  %llu KiB x %u, host memory (pinned) <-> GPU:\n",
	       (unsigned long long)p->size >> 10, p->n);
	pages_row("dataplane host -> GPU", pages_median(t_h2d, reps, p->len), contig,
		  "h2d_dataplane_gb_s");
	pages_row("raw cudaMemcpyAsync per page host -> GPU", pages_median(th[2], reps, p->len),
		  contig, "h2d_raw_per_page_gb_s");
	pages_row("dataplane GPU -> host", pages_median(th[1], reps, p->len), contig,
		  "d2h_dataplane_gb_s");
	pages_row("raw cudaMemcpyAsync per page GPU -> host", pages_median(th[3], reps, p->len),
		  contig, "d2h_raw_per_page_gb_s");
	cudaFreeHost(pin);
}

static void bench_pages(void)
{
	static const uint64_t sizes[] = {4096, 16384, 65536, 262144};
	static const unsigned counts[] = {4096, 4096, 2048, 1024};
	const unsigned reps = quick ? 3 : 5;
	struct dp_client *tc = NULL;
	struct pages_scratch sc;
	int rc;

	if (target_sock && target_peer &&
	    (rc = dp_connect(target_sock, "gpu-bench-pages", &tc)) < 0)
		die("dp_connect (the other service)", rc);
	ck(cudaHostAlloc((void **)&sc.tab, 4096 * sizeof(*sc.tab), cudaHostAllocMapped),
	   "cudaHostAlloc");
	sc.dsts = malloc(4096 * sizeof(*sc.dsts));
	sc.srcs = malloc(4096 * sizeof(*sc.srcs));
	sc.sizes = malloc(4096 * sizeof(*sc.sizes));
	if (!sc.dsts || !sc.srcs || !sc.sizes)
		die("malloc", -ENOMEM);
	printf("pages: a batch of N pages at scattered indices (a fixed permutation), %u in "
	       "flight, GB/s median of %u, every run's bytes checked\n",
	       PAGES_DEPTH, reps);
	report_arr("pages");
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct pages_run p;
		uint64_t t[7][8] = {{0}};
		uint32_t tfl = 0;
		double contig;

		pages_open(&p, s, sizes[s], counts[s], tc, &sc);
		pages_gpu_rounds(&p, reps, t, &tfl);
		report_obj(NULL);
		contig = pages_gpu_report(&p, reps, t, tfl);
		pages_host(&p, reps, t[6], contig);
		report_end();
		pages_close(&p);
	}
	report_end();
	cudaFreeHost(sc.tab);
	free(sc.dsts);
	free(sc.srcs);
	free(sc.sizes);
	if (tc)
		dp_close(tc);
}

int main(int argc, char **argv)
{
	const char *what = parse_args(argc, argv);
	struct cudaDeviceProp prop;
	int n = 0, drv = 0, rt = 0, rc;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= device) {
		char why[64];

		if (!strcmp(what, "p13"))
			return p13_host_only();
		snprintf(why, sizeof(why), "no CUDA device %d here", device);
		return skip(why);
	}
	report_obj("cpus");
	report_num("client", client_cpu);
	report_num("service", service_cpu);
	report_end();
	/* Before this client pins itself, on the CPUs ours uses. */
	bench_place_and_pin(client_cpu, service_cpu);
	ck(cudaSetDevice(device), "cudaSetDevice");
	ck(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	printf("gpu-bench: device %d %s, driver %d, runtime %d; client on CPU %d\n", device,
	       prop.name, drv, rt, client_cpu);
	report_obj("device");
	report_num("index", device);
	report_str("name", prop.name);
	report_num("driver", drv);
	report_num("runtime", rt);
	report_end();
	ck(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking), "cudaStreamCreate");
	ck(cudaEventCreateWithFlags(&raw_ev, cudaEventDisableTiming), "cudaEventCreate");
	if ((rc = dp_connect(sock_path, "gpu-bench", &cl)) < 0) {
		dp_tool_connect_error("gpu-bench", sock_path, rc);
		exit(1);
	}
	if ((rc = dp_queue_create(cl, pages_depth > 256 ? pages_depth : 256, &q)) < 0)
		die("dp_queue_create", rc);
	if (!strcmp(what, "p8") || !strcmp(what, "all"))
		bench_p8();
	if (!strcmp(what, "p9") || !strcmp(what, "all"))
		bench_p9();
	if (!strcmp(what, "p10") || !strcmp(what, "all"))
		bench_p10();
	if (!strcmp(what, "p12"))
		bench_p12();
	if (!strcmp(what, "file") || !strcmp(what, "all"))
		bench_file_gpu();
	if (!strcmp(what, "probe"))
		bench_probe();
	if (!strcmp(what, "p13"))
		bench_p13(true);
	if (!strcmp(what, "vmm"))
		bench_vmm();
	if (!strcmp(what, "pages"))
		bench_pages();
	dp_close(cl);
	report_close();
	return 0;
}

#endif /* DP_HAVE_CUDA */
