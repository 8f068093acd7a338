/* fault_inject.c - faults injected inside dataplaned (make faults, DP_FAULTS): fabric posts that return -FI_EAGAIN or fail and CQ error entries over tcp (one rail and two), io_uring submissions that fail and completions with -EIO/-EAGAIN on a file region; every descriptor completes exactly once, successes carry the right bytes, failures only documented errnos, the service survives and counted its faults. Skips unless dataplaned was built with FAULTS=1. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void fault_teardown(void)
{
	unsetenv("DP_FAULTS");
	fab_teardown();
	file_teardown();
}

TestSuite(fault_inject, .fini = fault_teardown, .timeout = 60);

#define SLOT (256u * 1024) /* bytes of region per descriptor in flight */
#define WINDOW 32	   /* descriptors in flight */

/* The test's own generator: the same descriptors on every run. */
static uint64_t rnd_state = 0x243f6a8885a308d3ull;

/* A length and an offset inside a slot: a quarter small, the rest up to a
 * slot; half of them 4 KiB-aligned (the direct path of files). */
static void shape(uint64_t *off, uint64_t *len)
{
	uint64_t l = xorshift64s(&rnd_state) % 4 ? 1 + xorshift64s(&rnd_state) % SLOT
						 : 1 + xorshift64s(&rnd_state) % 4096;
	uint64_t o = xorshift64s(&rnd_state) % (SLOT - l + 1);

	if (xorshift64s(&rnd_state) % 2) {
		l = (l + 4095) & ~4095ull;
		o = (xorshift64s(&rnd_state) % ((SLOT - l) / 4096 + 1)) * 4096;
	}
	*off = o;
	*len = l;
}

/* Every descriptor has completed: nothing more may come. */
static void no_more_completions(struct dp_queue *q)
{
	struct dp_cqe extra;
	int k = dp_wait(q, &extra, 1, 200);

	cr_assert_eq(k, 0, "a completion after the last one (user_data %llu)",
		     k > 0 ? (unsigned long long)extra.user_data : 0ull);
}

/* What happened to each descriptor. */
struct tally {
	unsigned done, ok, eio, ehostunreach, econnreset, reopens;
	uint64_t bytes;
};

/* ---- the fabric: A (faults on) reads and writes B's exported memory ---- */

struct fab_desc {
	uint8_t opcode;
	bool done;
	int seg;
	unsigned slot;
	uint64_t off, len;
};

/* Waits for completions (at least one within 20 s) and returns how many. */
static int wait_some(struct dp_queue *q, struct dp_cqe *cqes, const struct tally *t, unsigned ndesc)
{
	int k = dp_wait(q, cqes, WINDOW, 20000);

	cr_assert_gt(k, 0, "no completion in 20 s (%u of %u done): %s", t->done, ndesc,
		     k ? dp_strerror(k) : "timeout");
	return k;
}

/* The descriptor completion @c answers: one that was submitted (user_data
 * below @next) and not answered before; marked done. */
static struct fab_desc *answered(struct fab_desc *ops, uint64_t next, const struct dp_cqe *c,
				 struct tally *t)
{
	struct fab_desc *o;

	cr_assert_lt(c->user_data, next, "completion for %llu, never submitted",
		     (unsigned long long)c->user_data);
	o = &ops[c->user_data];
	cr_assert_not(o->done, "descriptor %llu completed twice", (unsigned long long)c->user_data);
	o->done = true;
	t->done++;
	return o;
}

/* A second interface for a second tcp rail, or NULL. */
static const char *second_nic(void)
{
	static char name[IF_NAMESIZE];
	struct ifaddrs *ifs, *i;

	name[0] = 0;
	if (getifaddrs(&ifs))
		return NULL;
	for (i = ifs; i && !name[0]; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    (i->ifa_flags & (IFF_UP | IFF_RUNNING)) == (IFF_UP | IFF_RUNNING) &&
		    !(i->ifa_flags & IFF_LOOPBACK))
			snprintf(name, sizeof(name), "%s", i->ifa_name);
	freeifaddrs(ifs);
	return name[0] ? name : NULL;
}

static void fabric_run(const char *nics, const char *slice, const char *faults, unsigned ndesc)
{
	const char *args[] = {"--provider", "tcp",     "--server-name",
			      "127.0.0.1",  "--slice", slice,
			      "--nics",	    nics,      NULL};
	const uint64_t rlen = (uint64_t)WINDOW * SLOT;
	struct fab_desc *ops = calloc(ndesc, sizeof(*ops));
	unsigned free_slots[WINDOW], nfree = WINDOW, next = 0, rails;
	unsigned users[1024] = {0}; /* descriptors out per segment handle */
	struct tally t = {0};
	struct seg_pair sp;
	struct injected inj;
	char peer_b[64];
	double cpu;

	cr_assert_not_null(ops);
	for (unsigned i = 0; i < WINDOW; i++)
		free_slots[i] = i;
	if (!nics)
		args[6] = NULL;
	start_svc(&fab_svc[1], args);
	setenv("DP_FAULTS", faults, 1);
	start_svc(&fab_svc[0], args);
	unsetenv("DP_FAULTS");
	rails = svc_rails(&fab_svc[0]);
	if (nics && rails != 2)
		cr_skip_test("the tcp provider offers %u of the rails %s", rails, nics);
	cr_assert_eq(rails, nics ? 2 : 1, "%u rails, want %u", rails, nics ? 2 : 1);
	snprintf(peer_b, sizeof(peer_b), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
	seg_pair_open(&sp, &fab_svc[0], &fab_svc[1], peer_b, "fault-tgt", rlen, 64);

	while (t.done < ndesc) {
		struct dp_desc d[WINDOW];
		struct dp_cqe cqes[WINDOW];
		unsigned n = 0;
		int k;

		for (; nfree && next < ndesc; next++, n++) {
			struct fab_desc *o = &ops[next];
			uint64_t at;

			o->slot = free_slots[--nfree];
			o->opcode = xorshift64s(&rnd_state) % 2 ? DP_OP_WRITE : DP_OP_READ;
			o->seg = sp.seg;
			shape(&o->off, &o->len);
			at = (uint64_t)o->slot * SLOT + o->off;
			if (o->opcode == DP_OP_WRITE) {
				pattern_fill(sp.loc + at, o->len, next);
				memset(sp.tgt + at, 0, o->len);
				dp_prep_write(&d[n], sp.lreg, at, sp.seg, at, o->len, next);
			} else {
				pattern_fill(sp.tgt + at, o->len, next);
				memset(sp.loc + at, 0, o->len);
				dp_prep_read(&d[n], sp.lreg, at, sp.seg, at, o->len, next);
			}
			users[sp.seg]++;
		}
		submit_all(sp.q, d, n, 10000);
		k = wait_some(sp.q, cqes, &t, ndesc);
		for (int j = 0; j < k; j++) {
			struct dp_cqe *c = &cqes[j];
			struct fab_desc *o = answered(ops, next, c, &t);
			uint64_t at;

			at = (uint64_t)o->slot * SLOT + o->off;
			/* Refused before routing (-ECONNRESET): no path flag. */
			cr_assert(c->flags & DP_CQE_F_FABRIC || c->status == -ECONNRESET,
				  "descriptor %llu: %s, flags %#x",
				  (unsigned long long)c->user_data, dp_strerror(c->status),
				  c->flags);
			if (!c->status) {
				const uint8_t *p =
					o->opcode == DP_OP_WRITE ? sp.tgt + at : sp.loc + at;
				int64_t bad = pattern_check(p, o->len, c->user_data);

				cr_assert_eq(
					c->bytes, o->len, "descriptor %llu: %llu bytes of %llu",
					(unsigned long long)c->user_data,
					(unsigned long long)c->bytes, (unsigned long long)o->len);
				cr_assert_eq(bad, -1, "%s %llu of %llu B: first wrong byte at %lld",
					     o->opcode == DP_OP_WRITE ? "WRITE" : "READ",
					     (unsigned long long)c->user_data,
					     (unsigned long long)o->len, (long long)bad);
				t.ok++;
				t.bytes += o->len;
			} else {
				cr_assert_eq(c->bytes, 0, "a failure reports %llu bytes",
					     (unsigned long long)c->bytes);
				/* An injected failure that outlived its
				 * probes (fabric.c, slice_failed): -EIO, and
				 * the peer is taken for lost: the descriptors
				 * after it fail fast with -EHOSTUNREACH until
				 * the segment is opened again, which drops the
				 * old handle's segment (-ECONNRESET for what
				 * still names it). The suite's rates never
				 * get there (below). */
				if (c->status == -EIO)
					t.eio++;
				else if (c->status == -EHOSTUNREACH)
					t.ehostunreach++;
				else if (c->status == -ECONNRESET && o->seg != sp.seg)
					t.econnreset++;
				else
					cr_assert_fail(
						"descriptor %llu: %s, not a documented fabric "
						"failure",
						(unsigned long long)c->user_data,
						dp_strerror(c->status));
				if (o->seg == sp.seg && c->status != -ECONNRESET) {
					sp.seg = open_segment(sp.ci, peer_b, "fault-tgt",
							      DP_ACCESS_RW);
					t.reopens++;
				}
			}
			if (!--users[o->seg] && o->seg != sp.seg)
				cr_assert_eq(dp_segment_close(sp.ci, o->seg), 0);
			free_slots[nfree++] = o->slot;
		}
	}
	no_more_completions(sp.q);
	/* Nothing left behind: an op kept after its completion would keep
	 * the poller from ever sleeping. */
	cpu = cpu_share(fab_svc[0].pid, 300);
	cr_assert_lt(cpu, 0.5, "the idle service uses %.0f%% of a CPU", cpu * 100);
	dp_close(sp.ci);
	dp_close(sp.ct);
	inj = stop_and_count(&fab_svc[0]);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0, "the target service did not exit cleanly");
	cr_log_info("fabric, %u rail(s), DP_FAULTS=%s: %u descriptors, %u ok (%llu MiB verified), "
		    "%u -EIO, %u -EHOSTUNREACH, %u -ECONNRESET, %u reopens; injected "
		    "fi_post_eagain=%llu fi_post_fail=%llu fi_cq_err=%llu; lost 0",
		    rails, faults, t.done, t.ok, (unsigned long long)(t.bytes >> 20), t.eio,
		    t.ehostunreach, t.econnreset, t.reopens, inj.eagain, inj.post_fail, inj.cq_err);
	cr_assert_eq(t.ok + t.eio + t.ehostunreach + t.econnreset, ndesc);
	cr_assert_gt(inj.eagain, 0, "no -FI_EAGAIN injected: is injection working?");
	cr_assert_gt(inj.post_fail, 0, "no post failure injected: is injection working?");
	cr_assert_gt(inj.cq_err, 0, "no CQ error injected: is injection working?");
	/* Only an injected hard fault fails a slice here. */
	cr_assert_leq(t.eio, inj.post_fail + inj.cq_err, "%u -EIO from %llu hard faults", t.eio,
		      inj.post_fail + inj.cq_err);
	/* A slice that failed on every rail holds its transfer while the
	 * peer, alive, says the segment stands; then it goes out again. To
	 * fail, a transfer must fail that way four times running. */
	cr_assert_eq(t.ok, ndesc, "%u of %u succeeded: a transient fault failed a transfer", t.ok,
		     ndesc);
	free(ops);
}

/* Two rails: a slice that fails is posted again on the other one, and
 * one that failed on both after a probe of its segment. 16 KiB slices, so that a
 * descriptor has up to 16 and one of them can fail for good while another
 * waits on the retry list (such an op used to end in -ETIMEDOUT and stay
 * on the poller's list: fabric.c, op_finished_posting). */
Test(fault_inject, fabric_tcp_two_rails)
{
	static char nics[IF_NAMESIZE + 4];
	const char *nic;

	need_fault_build();
	nic = second_nic();
	if (!nic)
		cr_skip_test("no interface but lo for a second tcp rail");
	snprintf(nics, sizeof(nics), "lo,%s", nic);
	fabric_run(nics, "16384", "fi_post_eagain=0.1,fi_post_fail=0.03,fi_cq_err=0.03,seed=5",
		   3000);
}

/* One rail: a hard fault holds its transfer for a probe of the segment,
 * which the live peer answers: posted again. */
Test(fault_inject, fabric_tcp_one_rail)
{
	need_fault_build();
	fabric_run(NULL, "65536", "fi_post_eagain=0.05,fi_post_fail=0.005,fi_cq_err=0.005,seed=2",
		   2000);
}

/* Every post fails: the first WRITE is held for three probes of its
 * segment, which the live peer answers each time (10 + 20 + 40 ms of
 * waits), then fails -EIO and takes the peer for lost; the next fails
 * -EHOSTUNREACH at once, without a probe. */
Test(fault_inject, fabric_tcp_every_post_fails)
{
	const char *args[] = {"--provider", "tcp", "--server-name", "127.0.0.1", NULL};
	struct seg_pair sp;
	struct dp_desc d;
	struct dp_cqe c;
	char peer_b[64];
	uint64_t t0, ms;

	need_fault_build();
	start_svc(&fab_svc[1], args);
	setenv("DP_FAULTS", "fi_post_fail=1,seed=1", 1);
	start_svc(&fab_svc[0], args);
	unsetenv("DP_FAULTS");
	snprintf(peer_b, sizeof(peer_b), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
	seg_pair_open(&sp, &fab_svc[0], &fab_svc[1], peer_b, "fault-all", 4096, 4);
	dp_prep_write(&d, sp.lreg, 0, sp.seg, 0, 64, 1);
	t0 = now_ns();
	c = run_wait(sp.q, &d, 10000);
	ms = (now_ns() - t0) / 1000000;
	cr_assert_eq(c.status, -EIO, "%s", dp_strerror(c.status));
	cr_assert_geq(ms, 70, "failed after %llu ms: not held for three probes",
		      (unsigned long long)ms);
	dp_prep_write(&d, sp.lreg, 0, sp.seg, 0, 64, 2);
	t0 = now_ns();
	c = run_wait(sp.q, &d, 10000);
	cr_assert_eq(c.status, -EHOSTUNREACH, "%s", dp_strerror(c.status));
	cr_log_info("every post fails: -EIO after %llu ms, then -EHOSTUNREACH after %llu ms",
		    (unsigned long long)ms, (unsigned long long)((now_ns() - t0) / 1000000));
	dp_close(sp.ci);
	dp_close(sp.ct);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

/* ---- io_uring: a file region, read and written by host descriptors ---- */

Test(fault_inject, file_io_uring)
{
	static const char *const flags[] = {"--provider", "none", "--io-slice", "16384",
					    "--io-depth", "16",	  NULL};
	const char *faults = "uring_submit=0.03,uring_eio=0.01,uring_eagain=0.03,seed=3";
	const unsigned ndesc = 3000;
	const uint64_t flen = (uint64_t)WINDOW * SLOT;
	unsigned free_slots[WINDOW], nfree = WINDOW, next = 0;
	struct fab_desc *ops;
	struct tally t = {0};
	struct dp_client *c;
	struct dp_queue *q;
	struct injected inj;
	uint8_t *h, *buf;
	int fd, rf, rh, seg;

	need_fault_build();
	ops = calloc(ndesc, sizeof(*ops));
	buf = malloc(SLOT);
	cr_assert(ops && buf);
	for (unsigned i = 0; i < WINDOW; i++)
		free_slots[i] = i;
	file_dir();
	fd = file_make("faulty", flen, 0, O_RDWR);
	setenv("DP_FAULTS", faults, 1);
	start_svc(&svc, flags);
	unsetenv("DP_FAULTS");
	c = connect_client(&svc, "faulty-files");
	q = make_queue(c, 64);
	rf = dp_register_file(c, fd, 0, flen, DP_ACCESS_RW);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = export_open(c, rf, "faulty", DP_ACCESS_RW, DP_ACCESS_RW);
	rh = alloc_region(c, flen, &h);

	while (t.done < ndesc) {
		struct dp_desc d[WINDOW];
		struct dp_cqe cqes[WINDOW];
		unsigned n = 0;
		int k;

		for (; nfree && next < ndesc; next++, n++) {
			struct fab_desc *o = &ops[next];
			uint64_t at;

			o->slot = free_slots[--nfree];
			o->opcode = xorshift64s(&rnd_state) % 2 ? DP_OP_WRITE : DP_OP_READ;
			shape(&o->off, &o->len);
			at = (uint64_t)o->slot * SLOT + o->off;
			if (o->opcode == DP_OP_WRITE) {
				pattern_fill(h + at, o->len, next);
				dp_prep_write(&d[n], rh, at, seg, at, o->len, next);
			} else {
				/* The file's bytes come from here, not from an
				 * earlier WRITE that may have failed. */
				pattern_fill(buf, o->len, next);
				cr_assert_eq(pwrite(fd, buf, o->len, (off_t)at), (ssize_t)o->len);
				memset(h + at, 0, o->len);
				dp_prep_read(&d[n], rh, at, seg, at, o->len, next);
			}
		}
		submit_all(q, d, n, 5000);
		k = wait_some(q, cqes, &t, ndesc);
		for (int j = 0; j < k; j++) {
			struct dp_cqe *e = &cqes[j];
			struct fab_desc *o = answered(ops, next, e, &t);
			uint64_t at;

			at = (uint64_t)o->slot * SLOT + o->off;
			cr_assert(e->flags & DP_CQE_F_FILE, "flags %#x", e->flags);
			if (!e->status) {
				int64_t bad = o->opcode == DP_OP_WRITE
						      ? file_check(fd, at, o->len, e->user_data)
						      : pattern_check(h + at, o->len, e->user_data);

				cr_assert_eq(
					e->bytes, o->len, "descriptor %llu: %llu bytes of %llu",
					(unsigned long long)e->user_data,
					(unsigned long long)e->bytes, (unsigned long long)o->len);
				cr_assert_eq(bad, -1, "%s %llu of %llu B: first wrong byte at %lld",
					     o->opcode == DP_OP_WRITE ? "WRITE" : "READ",
					     (unsigned long long)e->user_data,
					     (unsigned long long)o->len, (long long)bad);
				t.ok++;
				t.bytes += o->len;
			} else {
				cr_assert_eq(e->status, -EIO, "descriptor %llu: %s, want -EIO",
					     (unsigned long long)e->user_data,
					     dp_strerror(e->status));
				cr_assert_eq(e->bytes, 0, "a failure reports %llu bytes",
					     (unsigned long long)e->bytes);
				t.eio++;
			}
			free_slots[nfree++] = o->slot;
		}
	}
	no_more_completions(q);
	dp_close(c);
	inj = stop_and_count(&svc);
	cr_log_info("io_uring, DP_FAULTS=%s: %u descriptors, %u ok (%llu MiB verified), %u -EIO; "
		    "injected uring_submit=%llu uring_eio=%llu uring_eagain=%llu; lost 0",
		    faults, t.done, t.ok, (unsigned long long)(t.bytes >> 20), t.eio, inj.submit,
		    inj.eio, inj.uring_eagain);
	cr_assert_eq(t.ok + t.eio, ndesc);
	cr_assert_gt(inj.submit, 0, "no submission failure injected: is injection working?");
	cr_assert_gt(inj.eio, 0, "no -EIO injected: is injection working?");
	cr_assert_gt(inj.uring_eagain, 0, "no -EAGAIN injected: is injection working?");
	/* Only an injected -EIO fails a descriptor; the rest are retried. */
	cr_assert_geq(inj.eio, t.eio, "%u -EIO from %llu injected", t.eio, inj.eio);
	cr_assert_gt(t.eio, 0, "no descriptor failed: injected -EIO went nowhere");
	close(fd);
	free(buf);
	free(ops);
}

/* ---- a bad DP_FAULTS: exit 2 at start, with the reason ---- */

Test(fault_inject, bad_spec_exits_2)
{
	static const char *const bad[] = {"fi_post_eagain=2", "nosuch=0.1", "uring_eio",
					  "cuda=0.1,seed=x", "fi_cq_err=-0.5"};

	need_fault_build();
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char cmd[512], out[1024] = "";
		size_t got;
		FILE *f;
		int st;

		snprintf(cmd, sizeof(cmd),
			 "DP_FAULTS='%s' '%s' --socket /nonexistent/dp.sock --provider none 2>&1",
			 bad[i], build_path("dataplaned"));
		f = popen(cmd, "r");
		cr_assert_not_null(f);
		got = fread(out, 1, sizeof(out) - 1, f);
		out[got] = 0;
		st = pclose(f);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2,
			  "DP_FAULTS=%s: status %#x, want exit 2", bad[i], st);
		cr_assert_not_null(strstr(out, "DP_FAULTS"), "DP_FAULTS=%s: message '%s'", bad[i],
				   out);
	}
}
