/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-vm.c - memory the caller already has, registered with
 * dp_register_mem, against shared regions (dp_alloc):
 *   vm         WRITEs from registered memory (read by the service with
 *              process_vm_readv) vs from a dp_alloc region (memcpy), into
 *              the same export: 64 KiB .. 256 MiB and 64 B latency, and the
 *              ratio
 *   vm-target  WRITEs into another service's export (--peer, --peer-socket)
 *              of registered memory vs of a dp_alloc region, 1 .. 64 MiB,
 *              and the ratio (tools/bench-vmtarget.sh: same host, and tcp
 *              between namespaces)
 * The two kinds alternate, so that drift hurts both alike.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "dp-bench.h"

enum { REPS = 5, SIZES = 16 };

/* ---- vm ---- */

enum { SHARED = 0, VM = 1 };

/* vm's figures: GB/s from each kind and of the client's own memcpy at
 * 64 KiB, 256 KiB, ... (nsz sizes, up to top), 64 B p50 and p99 (us). */
struct vm_run {
	uint64_t top;
	unsigned nsz, n;
	uint8_t *vm, *copy; /* registered (vreg): the source's bytes; a memcpy target */
	int vreg;
	double med[2][SIZES], mc[SIZES], p50[2], p99[2];
};

static void vm_bandwidth(struct vm_run *v, struct bench *b)
{
	uint64_t len = 64 * 1024, total = 0, done = 0;
	double bw[2][REPS];
	struct progress pg;

	for (unsigned k = 0; k < v->nsz; k++, len *= 4)
		total += 2 * REPS * len;
	progress_start(&pg, "vm bandwidth (bytes)", total);
	len = 64 * 1024;
	for (unsigned k = 0; k < v->nsz; k++, len *= 4) {
		for (unsigned r = 0; r < REPS; r++)
			for (int w = 0; w < 2; w++) {
				int from = (r + w) % 2 ? VM : SHARED;
				uint64_t ns = write_from(b, from == VM ? v->vreg : b->src, 0, len,
							 r, -1, "vm WRITE");

				bw[from][r] = (double)len / (double)ns;
				done += len;
				progress_update(&pg, done);
			}
		for (int w = 0; w < 2; w++)
			v->med[w][k] = bench_median(bw[w], REPS);
		memset(b->dstp, 0, len);
		write_from(b, v->vreg, 0, len, 99, -1, "vm WRITE");
		if (memcmp(v->vm, b->dstp, len))
			die("vm: DATA MISMATCH", -EBADMSG);
		/* The client's own single-thread memcpy of the same bytes. */
		v->mc[k] = memcpy_gbps(v->copy, v->vm, len, REPS, NULL, NULL);
	}
	progress_end(&pg);
}

/* 64 B, one outstanding: shared and registered in blocks, one after the
 * other. */
static void vm_latency(struct vm_run *v, struct bench *b, uint64_t *lat)
{
	for (int w = 0; w < 2; w++) {
		latency_run(b, w == VM ? v->vreg : b->src, v->n, -1, "vm WRITE", NULL, lat);
		v->p50[w] = lat[v->n / 2] / 1e3;
		v->p99[w] = lat[v->n * 99 / 100] / 1e3;
	}
	if (memcmp(v->vm, b->dstp, 4096))
		die("vm: DATA MISMATCH (64 B)", -EBADMSG);
}

static void vm_print(const struct vm_run *v)
{
	uint64_t len = 64 * 1024;

	printf("vm: WRITEs from memory the caller already has (dp_register_mem: "
	       "process_vm_readv in the service) vs from a shared region (dp_alloc: memcpy), "
	       "into the same host export (GB/s, median of %u)\n",
	       REPS);
	report_obj("vm_run");
	print_ours_cpus();
	report_end();
	printf("  %10s %10s %10s %8s %12s\n", "size", "shared", "registered", "ratio",
	       "client memcpy");
	report_arr("vm_bandwidth");
	for (unsigned k = 0; k < v->nsz; k++, len *= 4) {
		printf("  %6llu KiB %10.2f %10.2f %7.2fx %12.2f\n", (unsigned long long)(len >> 10),
		       v->med[SHARED][k], v->med[VM][k], v->med[VM][k] / v->med[SHARED][k],
		       v->mc[k]);
		report_obj(NULL);
		report_u64("size", len);
		report_num("shared_gb_per_s", v->med[SHARED][k]);
		report_num("registered_gb_per_s", v->med[VM][k]);
		report_num("ratio", v->med[VM][k] / v->med[SHARED][k]);
		report_num("client_memcpy_gb_per_s", v->mc[k]);
		report_end();
	}
	report_end();
	printf("  64 B WRITE, one outstanding (%u samples each): shared p50 %.2f us p99 %.2f us; "
	       "registered p50 %.2f us p99 %.2f us; ratio p50 %.2fx\n",
	       v->n, v->p50[SHARED], v->p99[SHARED], v->p50[VM], v->p99[VM],
	       v->p50[VM] / v->p50[SHARED]);
	report_obj("vm_latency");
	report_u64("samples", v->n);
	report_num("shared_p50_us", v->p50[SHARED]);
	report_num("shared_p99_us", v->p99[SHARED]);
	report_num("registered_p50_us", v->p50[VM]);
	report_num("registered_p99_us", v->p99[VM]);
	report_num("ratio_p50", v->p50[VM] / v->p50[SHARED]);
	report_end();
}

void bench_vm(void)
{
	struct vm_run v = {.top = opt.max_size < 256 * MiB ? opt.max_size : 256 * MiB,
			   .n = opt.quick ? 20000 : 100000};
	uint64_t *lat = malloc(sizeof(*lat) * v.n);
	struct bench b;

	for (uint64_t len = 64 * 1024; len <= v.top && v.nsz < SIZES; len *= 4)
		v.nsz++;
	v.vm = malloc(v.top);
	v.copy = malloc(v.top);
	if (!lat || !v.vm || !v.copy)
		die("malloc", -ENOMEM);
	ours_begin();
	bench_open(&b, v.top);
	memcpy(v.vm, b.srcp, v.top); /* the same bytes as the shared source */
	memset(v.copy, 0, v.top);
	v.vreg = bench_register(b.c, v.vm, v.top, "dp_register_mem");
	vm_bandwidth(&v, &b);
	vm_latency(&v, &b, lat);
	bench_close(&b);
	ours_end();
	vm_print(&v);
	free(lat);
	free(v.vm);
	free(v.copy);
}

/* ---- vm-target ---- */

#define VMT_LEN (64 * MiB)
#define VMT_DEPTH 8
#define VMT_SIZES 4

enum { ALLOC = 0, REG = 1 };

/*
 * The same WRITEs from a dp_alloc region of ours (--socket) into two exports
 * of the other service (--peer, --peer-socket), both made by a client of
 * ours there and both VMT_LEN bytes: memory it registered with
 * dp_register_mem (the other service reaches it through the client's
 * process: same host, its pidfd; over the fabric, the owner's staging) and
 * a dp_alloc region (mapped, or registered with the fabric). Sizes 1 MiB ..
 * 64 MiB, VMT_DEPTH in flight, the two alternating, median of REPS.
 */
struct vmt_run {
	struct bench b; /* the dp_alloc export is its segment */
	uint8_t *tgt[2];
	int seg[2];
	uint32_t path[2];
	double med[2][VMT_SIZES];
	double kb[2]; /* the kernel's bound: memcpy, process_vm_writev (GB/s) */
	struct peer_check chk;
};

/*
 * What the registered column can reach at most on this machine: the same
 * bytes in this process, in the service's default slices (--copy-chunk,
 * 256 KiB), written with process_vm_writev into a child's 4 KiB-page
 * memory (what the service does for registered memory on this host) and
 * with memcpy into a shared mapping with transparent huge pages (what it
 * does for a dp_alloc export). GB/s, median of REPS, into kb[]; 0 where
 * the machine refused.
 */
enum { KB_LEN = 64 * MiB, KB_SLICE = 256 * 1024 };

static double kb_pass(uint8_t *dst, const uint8_t *src, pid_t child)
{
	uint64_t t0 = dp_now_ns();

	for (uint64_t o = 0; o < KB_LEN; o += KB_SLICE) {
		struct iovec l = {(void *)(src + o), KB_SLICE}, r = {dst + o, KB_SLICE};

		if (!child)
			memcpy(dst + o, src + o, KB_SLICE);
		else if (process_vm_writev(child, &l, 1, &r, 1, 0) != KB_SLICE)
			return 0;
	}
	return (double)KB_LEN / (double)(dp_now_ns() - t0);
}

static void kernel_bound(double kb[2])
{
	uint8_t *src =
		mmap(NULL, KB_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *shm =
		mmap(NULL, KB_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint8_t *own = NULL;
	double bw[2][REPS];
	int go[2] = {-1, -1};
	pid_t child = -1;
	char c = 0;

	kb[0] = kb[1] = 0;
	if (src == MAP_FAILED || shm == MAP_FAILED || posix_memalign((void **)&own, 4096, KB_LEN) ||
	    pipe(go))
		goto out;
	madvise(src, KB_LEN, MADV_HUGEPAGE);
	madvise(shm, KB_LEN, MADV_HUGEPAGE);
	memset(src, 0x5a, KB_LEN);
	memset(shm, 0, KB_LEN);
	/* The child touches its copy of own after the fork: pages of its own,
	 * none shared copy-on-write with ours. */
	child = fork();
	if (child == 0) {
		memset(own, 0, KB_LEN);
		if (write(go[1], &c, 1) == 1)
			pause();
		_exit(0);
	}
	if (child < 0 || read(go[0], &c, 1) != 1)
		goto out;
	for (unsigned r = 0; r < REPS; r++) {
		bw[0][r] = kb_pass(shm, src, 0);
		bw[1][r] = kb_pass(own, src, child);
	}
	kb[0] = bench_median(bw[0], REPS);
	kb[1] = bench_median(bw[1], REPS);
out:
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	for (int i = 0; i < 2; i++)
		if (go[i] >= 0)
			close(go[i]);
	free(own);
	if (src != MAP_FAILED)
		munmap(src, KB_LEN);
	if (shm != MAP_FAILED)
		munmap(shm, KB_LEN);
}

static void vmt_open(struct vmt_run *v)
{
	struct bench_spec spec = {
		.len = VMT_LEN, .depth = 256, .peer = true, .name = "dp-bench-vmt-alloc"};
	int reg;

	bench_open_spec(&v->b, &spec);
	v->tgt[ALLOC] = v->b.dstp;
	v->seg[ALLOC] = v->b.seg;
	if (posix_memalign((void **)&v->tgt[REG], 4096, VMT_LEN))
		die("malloc", -ENOMEM);
	memset(v->tgt[REG], 0, VMT_LEN);
	reg = bench_register(v->b.tc, v->tgt[REG], VMT_LEN, "dp_register_mem");
	v->seg[REG] = bench_export_open(&v->b, reg, "dp-bench-vmt-mem");
}

static void vmt_measure(struct vmt_run *v)
{
	uint64_t bytes = opt.quick ? 128 * MiB : 512 * MiB;
	double bw[2][REPS];

	for (unsigned k = 0; k < VMT_SIZES; k++) {
		uint64_t len = MiB << (2 * k);
		unsigned total = (unsigned)(bytes / len) < 8 ? 8 : (unsigned)(bytes / len);

		for (unsigned r = 0; r < REPS; r++)
			for (int i = 0; i < 2; i++) {
				int w = (r + i) % 2 ? REG : ALLOC;

				bw[w][r] = write_stream(&v->b, v->seg[w], len, total, VMT_DEPTH,
							30000, &v->path[w], "vm-target WRITE");
			}
		for (int w = 0; w < 2; w++)
			v->med[w][k] = bench_median(bw[w], REPS);
	}
	/* The bytes of a last full pass, in both. */
	for (int w = 0; w < 2; w++) {
		memset(v->tgt[w], 0, VMT_LEN);
		write_stream(&v->b, v->seg[w], 4 * MiB, VMT_LEN / (4 * MiB), VMT_DEPTH, 30000,
			     &v->path[w], "vm-target WRITE");
		if (memcmp(v->tgt[w], v->b.srcp, VMT_LEN))
			die(w == REG ? "vm-target: DATA MISMATCH (registered)"
				     : "vm-target: DATA MISMATCH (dp_alloc)",
			    -EBADMSG);
	}
}

static void vmt_print(const struct vmt_run *v)
{
	printf("vm-target: WRITEs from a dp_alloc region into another service's export (%s) of "
	       "dp_register_mem memory vs of a dp_alloc region, %u in flight (GB/s, median of "
	       "%u)\n",
	       opt.peer_addr, VMT_DEPTH, REPS);
	printf("  paths: registered %s, dp_alloc %s\n", path_desc(v->path[REG]),
	       path_desc(v->path[ALLOC]));
	printf("  CPUs: client %d; services: %s\n", opt.cpu, v->chk.desc);
	report_obj("vm_target");
	report_str("peer_addr", opt.peer_addr);
	report_str("registered_path", path_desc(v->path[REG]));
	report_str("alloc_path", path_desc(v->path[ALLOC]));
	report_num("client_cpu", opt.cpu);
	report_str("services", v->chk.desc);
	printf("  %10s %10s %10s %8s\n", "size", "dp_alloc", "registered", "ratio");
	report_arr("bandwidth");
	for (unsigned k = 0; k < VMT_SIZES; k++) {
		uint64_t len = MiB << (2 * k);
		double ratio = v->med[REG][k] / v->med[ALLOC][k];

		printf("  %6llu MiB %10.3f %10.3f %7.2fx%s\n", (unsigned long long)(len >> 20),
		       v->med[ALLOC][k], v->med[REG][k], ratio,
		       ratio >= 0.8 ? "" : "   (target >= 0.8x: MISS)");
		report_obj(NULL);
		report_u64("size", len);
		report_num("alloc_gb_per_s", v->med[ALLOC][k]);
		report_num("registered_gb_per_s", v->med[REG][k]);
		report_num("ratio", ratio);
		report_end();
	}
	report_end();
	if (v->kb[0] > 0 && v->kb[1] > 0) {
		printf("  kernel bound, this process on CPU %d, 64 MiB in 256 KiB slices: memcpy "
		       "into "
		       "a huge-page shared mapping %.3f, process_vm_writev into another process's "
		       "4 KiB pages %.3f GB/s: %.2fx\n",
		       opt.cpu, v->kb[0], v->kb[1], v->kb[1] / v->kb[0]);
		report_num("bound_memcpy_gb_per_s", v->kb[0]);
		report_num("bound_process_vm_writev_gb_per_s", v->kb[1]);
	}
	report_end();
}

void bench_vm_target(void)
{
	struct vmt_run v = {0};

	need_peer();
	vmt_open(&v);
	vmt_measure(&v);
	peer_check_take(&v.chk, &opt.cpu, 1);
	bench_close(&v.b);
	free(v.tgt[REG]);
	kernel_bound(v.kb);
	vmt_print(&v);
}
