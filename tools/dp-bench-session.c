/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-session.c - engine sessions, the way serving engines reach each
 * other's memory:
 *   session  first contact with a fresh engine session (dp_session_open +
 *            the first 4 KiB WRITE) vs the same memory's named export
 *            (dp_segment_open + the first WRITE), and a warm WRITE
 *            (tools/bench-session.sh: one service, two of one host, two
 *            namespaces)
 *   serving  KV pages as SGLang moves them, one batch by the decode's
 *            addresses, vs memcpy in one process (tools/bench-serving.py)
 * The session is a client of --peer-socket's service, or of --socket's
 * without a peer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dp-bench.h"

/* The service the sessions' owners are clients of. */
static const char *target_socket(void)
{
	return opt.peer_sock ? opt.peer_sock : opt.socket;
}

/* ---- session: first contact with an engine session ---- */

/*
 * A client of the target service makes a fresh session with 1 MiB of its
 * own memory; a client of --socket's service opens it (dp_session_open: one
 * question to the session's port) and writes 4 KiB into it (the first
 * WRITE to a registration). Side by side, the same through a named export
 * (dp_segment_open of the peer's server name + the first WRITE), and a
 * WRITE once warm. Medians and maxima of REPS fresh sessions.
 */
enum { REPS = 21 };
/* The figures of each session, in session_print's order. */
enum { OPEN, FIRST, TOTAL, WARM, WARM_MEM, NAMED, NAMED_FIRST, N };

struct session_run {
	struct dp_client *c;
	struct dp_queue *q;
	int src;
	double v[N][REPS];		/* ns */
	uint32_t flags, mflags, nflags; /* the completions': session, its mem, named */
};

/* One fresh session: its owner, its memory (a dp_alloc region, mapped or
 * registered with the fabric, also exported by name; and memory of the
 * process's own, registered). */
struct session_target {
	struct dp_client *t;
	uint8_t *shm, *mem;
	int sreg;
	char exp[64];
};

static void session_target_open(struct session_target *st)
{
	int rc;

	snprintf(st->exp, sizeof(st->exp), "%s", segment_name("dp-bench-first"));
	st->t = bench_connect(target_socket(), "dp-bench-session");
	bench_session_create(st->t);
	st->sreg = bench_alloc(st->t, MiB, 0, &st->shm, "alloc (session)");
	st->mem = aligned_alloc(4096, MiB);
	if (!st->mem)
		die("malloc", -ENOMEM);
	memset(st->mem, 0, MiB);
	bench_register(st->t, st->mem, MiB, "dp_register_mem");
	if ((rc = dp_segment_export(st->t, st->sreg, st->exp, DP_ACCESS_RW)) < 0)
		die("export", rc);
}

/* One 4 KiB WRITE through handle `seg` at address `va`, submit to
 * completion (busy-polled), in ns; its completion's flags in *flags. */
static uint64_t session_write_ns(struct session_run *s, int seg, uint64_t va, uint32_t *flags)
{
	struct dp_desc d;

	dp_prep_write(&d, s->src, 0, seg, va, 4096, 1);
	return run_desc(s->q, &d, -1, "session WRITE", flags);
}

/* The fastest of 32 WRITEs at each of the session's two memories. */
static void session_warm(struct session_run *s, unsigned r, int seg,
			 const struct session_target *st)
{
	uint64_t warm = ~0ull, warm_mem = ~0ull;

	for (unsigned k = 0; k < 32; k++) {
		uint64_t off = 4096 * (k % 200);
		uint64_t a = session_write_ns(s, seg, (uintptr_t)st->shm + off, &s->flags);
		uint64_t m = session_write_ns(s, seg, (uintptr_t)st->mem + off, &s->mflags);

		warm = a < warm ? a : warm;
		warm_mem = m < warm_mem ? m : warm_mem;
	}
	s->v[WARM][r] = (double)warm;
	s->v[WARM_MEM][r] = (double)warm_mem;
}

static void session_rep(struct session_run *s, unsigned r)
{
	struct session_target st;
	uint64_t t0;
	int seg, nseg;

	session_target_open(&st);
	t0 = dp_now_ns();
	seg = dp_session_open(s->c, dp_session_name(st.t), DP_ACCESS_RW);
	if (seg < 0)
		die_last(NULL);
	s->v[OPEN][r] = (double)(dp_now_ns() - t0);
	s->v[FIRST][r] = (double)session_write_ns(s, seg, (uintptr_t)st.shm + 8192, &s->flags);
	s->v[TOTAL][r] = s->v[OPEN][r] + s->v[FIRST][r];
	session_warm(s, r, seg, &st);
	/* The named path: the same dp_alloc region, exported by name. */
	t0 = dp_now_ns();
	nseg = dp_segment_open(s->c, opt.peer_sock ? opt.peer_addr : NULL, st.exp, DP_ACCESS_RW);
	if (nseg < 0)
		die_last("open by name");
	s->v[NAMED][r] = (double)(dp_now_ns() - t0);
	s->v[NAMED_FIRST][r] = (double)session_write_ns(s, nseg, 0, &s->nflags);
	s->v[NAMED][r] += s->v[NAMED_FIRST][r];
	if (st.shm[8192] != 0x5a || st.shm[0] != 0x5a || st.mem[0] != 0x5a)
		die("session: DATA MISMATCH", -EBADMSG);
	dp_segment_close(s->c, seg);
	dp_segment_close(s->c, nseg);
	dp_close(st.t);
	free(st.mem);
}

static void session_print(struct session_run *s)
{
	static const char *const names[N] = {
		"session open",	   "first WRITE",	 "open + first WRITE", "warm WRITE",
		"warm WRITE, mem", "named open + first", "named first WRITE"};
	const char *target = opt.peer_sock ? opt.peer_addr : "this service";

	printf("session: first contact with a fresh engine session (%s), 4 KiB WRITEs into its "
	       "dp_alloc memory, busy-polled, %u sessions (us)\n",
	       target, REPS);
	printf("  paths: session %s (its dp_register_mem memory: %s), named export %s; "
	       "CPUs: client %d\n",
	       path_desc(s->flags), path_desc(s->mflags), path_desc(s->nflags), opt.cpu);
	report_obj("session");
	report_str("target", target);
	report_str("path", path_desc(s->flags));
	report_num("client_cpu", opt.cpu);
	printf("  %-22s %10s %10s\n", "", "p50", "max");
	for (unsigned k = 0; k < N; k++) {
		double p50 = bench_median(s->v[k], REPS);
		char key[64];

		printf("  %-22s %10.1f %10.1f\n", names[k], p50 / 1e3, s->v[k][REPS - 1] / 1e3);
		snprintf(key, sizeof(key), "%s_p50_us", names[k]);
		for (char *p = key; *p; p++)
			if (*p == ' ' || *p == '+' || *p == ',')
				*p = '_';
		report_num(key, p50 / 1e3);
	}
	printf("  first contact (open + first WRITE) / named open + first: %.2fx\n",
	       s->v[TOTAL][REPS / 2] / s->v[NAMED][REPS / 2]);
	report_num("ratio_to_named", s->v[TOTAL][REPS / 2] / s->v[NAMED][REPS / 2]);
	report_end();
}

void bench_session(void)
{
	struct session_run s = {0};
	uint8_t *srcp;

	s.c = bench_connect(opt.socket, "dp-bench");
	s.q = bench_queue(s.c, 64);
	s.src = bench_alloc(s.c, 4096, 0, &srcp, "alloc");
	memset(srcp, 0x5a, 4096);
	for (unsigned r = 0; r < REPS; r++)
		session_rep(&s, r);
	dp_close(s.c);
	session_print(&s);
}

/* ---- serving: KV pages the way serving engines move them ---- */

/*
 * An SGLang-shaped transfer: LAYERS x (K, V) x PAGES pages of PAGE bytes,
 * from a prefill's KV buffers (one registration per layer and K/V) to a
 * decode's, at scattered page indices (a fixed permutation), by the
 * decode's addresses through its engine session (--peer-socket: the decode
 * is a client of that service, else of this one), all pages in one batch of
 * descriptors kept within the queue's depth; beside it, the same pages
 * memcpy'd in this process. Prints the time, GB/s, and ns per descriptor
 * (--json for tools/bench-serving.py).
 */
#define SRV_LAYERS 32
#define SRV_PAGES 512
#define SRV_PAGE (16 * 1024)
#define SRV_REPS 5
#define SRV_NBUF (2 * SRV_LAYERS)
#define SRV_BUF ((uint64_t)SRV_PAGES * SRV_PAGE)
#define SRV_N (SRV_NBUF * SRV_PAGES) /* descriptors */

struct serving {
	struct dp_client *c, *t; /* the prefill, the decode */
	struct dp_queue *q;
	uint8_t *src[SRV_NBUF], *dst[SRV_NBUF];
	int reg[SRV_NBUF];
	unsigned perm[SRV_PAGES];
	struct dp_desc *d;
	uint32_t flags;
	double ours[SRV_REPS], peer[SRV_REPS]; /* ns */
};

/* The engines' own memory (as serving engines register their KV buffers),
 * or shared regions with --serving-alloc; every source page marked. */
static void serving_buffers(struct serving *s)
{
	for (unsigned b = 0; b < SRV_NBUF; b++) {
		if (opt.serving_alloc) {
			s->reg[b] = bench_alloc(s->c, SRV_BUF, 0, &s->src[b], "alloc (prefill)");
			bench_alloc(s->t, SRV_BUF, 0, &s->dst[b], "alloc (decode)");
		} else {
			if (posix_memalign((void **)&s->src[b], 4096, SRV_BUF) ||
			    posix_memalign((void **)&s->dst[b], 4096, SRV_BUF))
				die("malloc", -ENOMEM);
			s->reg[b] = bench_register(s->c, s->src[b], SRV_BUF,
						   "dp_register_mem (prefill)");
			bench_register(s->t, s->dst[b], SRV_BUF, "dp_register_mem (decode)");
		}
		for (uint64_t i = 0; i < SRV_BUF; i += 4096)
			s->src[b][i] = (uint8_t)(b * 7 + i / 4096);
		memset(s->dst[b], 0, SRV_BUF);
	}
}

/* Page i of buffer b goes to page perm[i] of the decode's buffer b: a fixed
 * shuffle. */
static void serving_descs(struct serving *s, int seg)
{
	uint64_t seed = 42;

	for (unsigned i = 0; i < SRV_PAGES; i++)
		s->perm[i] = i;
	for (unsigned i = SRV_PAGES - 1; i > 0; i--) {
		unsigned j;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		j = (unsigned)(seed >> 33) % (i + 1);
		unsigned x = s->perm[i];
		s->perm[i] = s->perm[j];
		s->perm[j] = x;
	}
	for (unsigned b = 0, k = 0; b < SRV_NBUF; b++)
		for (unsigned i = 0; i < SRV_PAGES; i++, k++)
			dp_prep_write(&s->d[k], s->reg[b], (uint64_t)i * SRV_PAGE, seg,
				      (uint64_t)(uintptr_t)s->dst[b] +
					      (uint64_t)s->perm[i] * SRV_PAGE,
				      SRV_PAGE, k);
}

/* All the descriptors, kept within the queue's depth: ns. */
static uint64_t serving_pass(struct serving *s)
{
	struct dp_cqe cqe[256];
	unsigned sent = 0, done = 0;
	uint64_t t0 = dp_now_ns();

	while (done < SRV_N) {
		int k;

		if (sent < SRV_N) {
			k = dp_submit(s->q, s->d + sent, SRV_N - sent);
			if (k < 0)
				die("submit", k);
			sent += (unsigned)k;
		}
		k = dp_poll(s->q, cqe, 256);
		if (k < 0)
			die("poll", k);
		for (int i = 0; i < k; i++) {
			if (cqe[i].status)
				die("serving WRITE", cqe[i].status);
			s->flags = cqe[i].flags;
		}
		done += (unsigned)k;
	}
	return dp_now_ns() - t0;
}

static void serving_check(const struct serving *s)
{
	for (unsigned b = 0; b < SRV_NBUF; b++)
		for (unsigned i = 0; i < SRV_PAGES; i++)
			if (s->dst[b][(uint64_t)s->perm[i] * SRV_PAGE] !=
			    s->src[b][(uint64_t)i * SRV_PAGE])
				die("serving: DATA MISMATCH", -EBADMSG);
}

/* The peer: the same pages memcpy'd in this process, REPS times. */
static void serving_memcpy(struct serving *s)
{
	for (unsigned r = 0; r < SRV_REPS; r++) {
		uint64_t t0 = dp_now_ns();

		for (unsigned b = 0; b < SRV_NBUF; b++)
			for (unsigned i = 0; i < SRV_PAGES; i++)
				memcpy(s->dst[b] + (uint64_t)s->perm[i] * SRV_PAGE,
				       s->src[b] + (uint64_t)i * SRV_PAGE, SRV_PAGE);
		s->peer[r] = (double)(dp_now_ns() - t0);
	}
}

static void serving_print(struct serving *s)
{
	const unsigned n = SRV_N;
	double ours = bench_median(s->ours, SRV_REPS), peer = bench_median(s->peer, SRV_REPS);

	printf("serving: %u layers x K,V x %u pages of %u KiB at scattered indices (%u "
	       "descriptors, "
	       "%llu MiB), one batch by the decode's addresses (%s; %s; %s), median of %u\n",
	       SRV_LAYERS, SRV_PAGES, SRV_PAGE / 1024, n,
	       (unsigned long long)(n * (uint64_t)SRV_PAGE >> 20),
	       opt.peer_sock ? opt.peer_addr : "this service", path_desc(s->flags),
	       opt.serving_alloc ? "dp_alloc regions"
				 : "memory of the engines' own, dp_register_mem",
	       SRV_REPS);
	printf("  C API %.2f ms (%.2f GB/s, %.0f ns/descriptor); memcpy in one process %.2f ms "
	       "(%.2f GB/s): %.2fx; CPU %d\n",
	       ours / 1e6, n * (double)SRV_PAGE / ours, ours / n, peer / 1e6,
	       n * (double)SRV_PAGE / peer, peer / ours, opt.cpu);
	report_obj("serving");
	report_num("descriptors", n);
	report_num("page_bytes", SRV_PAGE);
	report_num("c_api_ms", ours / 1e6);
	report_num("memcpy_ms", peer / 1e6);
	report_str("path", path_desc(s->flags));
	report_end();
}

void bench_serving(void)
{
	struct serving s = {0};
	int seg;

	if (!(s.d = malloc(sizeof(*s.d) * SRV_N)))
		die("malloc", -ENOMEM);
	s.c = bench_connect(opt.socket, "dp-bench-prefill");
	s.t = bench_connect(target_socket(), "dp-bench-decode");
	bench_session_create(s.t);
	s.q = bench_queue(s.c, 256);
	serving_buffers(&s);
	if ((seg = dp_session_open(s.c, dp_session_name(s.t), DP_ACCESS_RW)) < 0)
		die_last("dp_session_open");
	serving_descs(&s, seg);
	/* The first pass finds the session's registrations: not timed. */
	serving_pass(&s);
	for (unsigned r = 0; r < SRV_REPS; r++)
		s.ours[r] = (double)serving_pass(&s);
	serving_check(&s);
	serving_memcpy(&s);
	serving_print(&s);
	dp_close(s.c);
	dp_close(s.t);
	if (!opt.serving_alloc)
		for (unsigned b = 0; b < SRV_NBUF; b++) {
			free(s.src[b]);
			free(s.dst[b]);
		}
	free(s.d);
}
