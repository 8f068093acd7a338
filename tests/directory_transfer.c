/* directory_transfer.c - two dataplaned and one Redis: a segment exported on one is opened by name alone on the other, bytes move both ways through the fabric, lookups are cached, and an unexport reaches the opener (with WRITEs in flight to it and to another name of the owner, only its handle dies); without --directory nothing changes; the password never reaches a log. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "helpers.h"

TestSuite(directory_transfer, .fini = dir_teardown, .timeout = 60);

#define SEG "kv/layer17/shard3"
#define LEN (4 * MiB)

Test(directory_transfer, open_by_name_on_another_service)
{
	char owner[64], name_a[64];
	struct dp_client *ca, *cb, *cb2;
	uint8_t *tgt, *loc;
	int treg, lreg, seg, seg2, self;
	struct dp_queue *qa, *qb;
	struct dp_desc d;
	long hmget0;
	long long pttl;
	uint64_t t0;

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 2, NULL);
	dir_svc_start(1, dir_redis.url, 2, NULL);
	dir_server_name(0, name_a, sizeof(name_a));
	ca = connect_client(&fab_svc[0], "owner");
	cb = connect_client(&fab_svc[1], "opener");

	/* The record: owned by A, with a TTL of at most 2 s. */
	treg = alloc_region(ca, LEN, &tgt);
	memset(tgt, 0x5a, LEN);
	export_segment(ca, treg, SEG, DP_ACCESS_RW);
	dir_hget(&dir_redis, DIR_KEY(SEG), "owner", owner, sizeof(owner));
	cr_assert_str_eq(owner, name_a, "record owner '%s', want A (%s)", owner, name_a);
	pttl = dir_int(&dir_redis, "PTTL %s", DIR_KEY(SEG));
	cr_assert(pttl > 0 && pttl <= 2000, "record TTL %lld ms, want (0, 2000]", pttl);

	/* B opens it by name alone and writes into A's memory. B's own
	 * server name as the peer means the same as NULL (docs/api.md). */
	lreg = alloc_region(cb, LEN, &loc);
	seg = dp_segment_open(cb, dp_server_name(cb), SEG, DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "open by B's own name: %s", dp_strerror(seg));
	cr_assert_eq(dp_segment_close(cb, seg), 0);
	seg = open_segment(cb, NULL, SEG, DP_ACCESS_RW);
	qb = make_queue(cb, 16);
	pattern_fill(loc, MiB, 1);
	dp_prep_write(&d, lreg, 0, seg, 4096, MiB, 1);
	run_ok(qb, &d, DP_CQE_F_FABRIC, 15000);
	fab_check(tgt + 4096, MiB, 1, tgt, tgt + LEN, 0x5a, "WRITE by name");
	/* ... and reads A's memory back. */
	pattern_fill(tgt + 2 * MiB, MiB, 2);
	memset(loc, 0, LEN);
	dp_prep_read(&d, lreg, 8192, seg, 2 * MiB, MiB, 2);
	run_ok(qb, &d, DP_CQE_F_FABRIC, 15000);
	fab_check(loc + 8192, MiB, 2, loc, loc + LEN, 0, "READ by name");

	/* A second open of the name on B is served from B's cache: Redis
	 * sees no lookup (HMGET) for it. */
	hmget0 = dir_calls(&dir_redis, "hmget");
	cb2 = connect_client(&fab_svc[1], "opener-2");
	seg2 = open_segment(cb2, NULL, SEG, DP_ACCESS_READ);
	cr_assert_geq(seg2, 0);
	cr_assert_eq(dir_calls(&dir_redis, "hmget"), hmget0, "a cached name was looked up again");

	/* On A itself the name resolves to the local export: a local copy. */
	self = open_segment(ca, NULL, SEG, DP_ACCESS_RW);
	qa = make_queue(ca, 16);
	dp_prep_read(&d, treg, 3 * MiB, self, 2 * MiB, MiB, 3);
	run_ok(qa, &d, DP_CQE_F_LOCAL, 15000);
	cr_assert_eq(pattern_check(tgt + 3 * MiB, MiB, 2), -1, "local copy by name");

	/* The heartbeat keeps the record past its TTL. */
	sleep_ms(3000);
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY(SEG)), 1,
		     "record expired although its owner lives");

	/* Unexport: the record goes at once, B's open segment fails from the
	 * invalidation on, and a new open by name finds nothing. */
	dp_segment_close(ca, self);
	cr_assert_eq(dp_segment_unexport(ca, SEG), 0);
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY(SEG)), 0, "record left behind");
	t0 = now_ns();
	for (;;) {
		int st;

		dp_prep_read(&d, lreg, 0, seg, 0, 4096, 4);
		st = run_wait(qb, &d, 15000).status;
		if (st == -ECONNRESET)
			break;
		cr_assert_lt(dir_ms_since(t0), 3000,
			     "open segment still usable 3 s after unexport "
			     "(last status %s)",
			     dp_strerror(st));
		sleep_ms(20);
	}
	cr_assert(svc_log_has(&fab_svc[1], "record of '" SEG "' deleted"),
		  "B did not log the invalidation");
	cr_assert_eq(dp_segment_open(cb, NULL, SEG, DP_ACCESS_RW), -ENOENT);

	dp_close(cb2);
	dp_close(cb);
	dp_close(ca);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

/* A's client unexports one of two names B has open by name, with WRITEs
 * to both in flight: the record's deletion and the owner's revoked key race
 * to B, and either way only that name's handle dies (-ECONNRESET); the
 * other's WRITEs all succeed, with no re-open (docs/reliability.md, "Fabric
 * failures": the failed transfers ask A's RPC port, not the directory). */
Test(directory_transfer, unexport_of_one_name_in_flight)
{
	enum { DEPTH = 32, L = 64 * 1024 };
	unsigned sent = 0, reaped = 0, inflight = 0, kept_ok = 0, gone_reset = 0;
	struct dp_client *ca, *cb;
	uint8_t *tgt, *kept, *loc;
	int lreg, sg, sk;
	struct dp_queue *q;
	uint64_t t_unexport = 0;

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 2, NULL);
	dir_svc_start(1, dir_redis.url, 2, NULL);
	ca = connect_client(&fab_svc[0], "owner");
	cb = connect_client(&fab_svc[1], "opener");
	export_segment(ca, alloc_region(ca, MiB, &tgt), "kv/gone", DP_ACCESS_RW);
	export_segment(ca, alloc_region(ca, MiB, &kept), "kv/kept", DP_ACCESS_RW);
	lreg = alloc_region(cb, MiB, &loc);
	pattern_fill(loc, MiB, 9);
	sg = open_segment(cb, NULL, "kv/gone", DP_ACCESS_RW);
	sk = open_segment(cb, NULL, "kv/kept", DP_ACCESS_RW);
	q = make_queue(cb, 2 * DEPTH);
	while (!t_unexport || dir_ms_since(t_unexport) < 300 || reaped < sent) {
		struct dp_cqe cqe[DEPTH];
		struct dp_desc d;
		int k;

		if (!t_unexport && reaped >= 64) {
			cr_assert_eq(dp_segment_unexport(ca, "kv/gone"), 0);
			t_unexport = now_ns();
		}
		while (inflight < DEPTH && (!t_unexport || dir_ms_since(t_unexport) < 300)) {
			/* Even user_data: "kv/gone"; odd: "kv/kept". */
			dp_prep_write(&d, lreg, 0, sent % 2 ? sk : sg, (sent / 2 % 16) * L, L,
				      sent);
			if (dp_submit(q, &d, 1) != 1)
				break;
			sent++;
			inflight++;
		}
		k = dp_wait(q, cqe, DEPTH, 100);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			int st = cqe[i].status;

			if (cqe[i].user_data % 2) {
				cr_assert_eq(st, 0, "WRITE %llu to the kept name: %s",
					     (unsigned long long)cqe[i].user_data, dp_strerror(st));
				kept_ok++;
			} else if (st) {
				cr_assert(t_unexport, "WRITE %llu failed before the unexport: %s",
					  (unsigned long long)cqe[i].user_data, dp_strerror(st));
				cr_assert_eq(st, -ECONNRESET,
					     "WRITE %llu to the unexported name: %s",
					     (unsigned long long)cqe[i].user_data, dp_strerror(st));
				gone_reset++;
			}
		}
		reaped += (unsigned)k;
		inflight -= (unsigned)k;
		cr_assert(!t_unexport || dir_ms_since(t_unexport) < 20000,
			  "%u WRITEs unanswered 20 s after the unexport", sent - reaped);
	}
	cr_log_info("%u WRITEs: %u to the kept name ok, %u to the unexported -ECONNRESET", sent,
		    kept_ok, gone_reset);
	cr_assert_gt(gone_reset, 0, "no WRITE met the unexport");
	cr_assert_gt(kept_ok, 64, "the kept name's stream stopped");
	cr_assert_eq(pattern_check(kept, L, 9), -1);
	dp_close(cb);
	dp_close(ca);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

/* Without --directory a service neither publishes nor looks up: the peer
 * string works as before, a bare name is this service's only. */
Test(directory_transfer, without_directory_nothing_changes)
{
	char peer_a[64];
	struct dp_client *ca, *cb;
	uint8_t *tgt, *loc;
	int treg, lreg, seg;
	struct dp_queue *q;
	struct dp_desc d;

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 2, NULL);
	dir_svc_start(1, NULL, 0, NULL);
	dir_server_name(0, peer_a, sizeof(peer_a));
	ca = connect_client(&fab_svc[0], "owner");
	cb = connect_client(&fab_svc[1], "opener");
	treg = alloc_region(ca, MiB, &tgt);
	export_segment(ca, treg, "plain", DP_ACCESS_RW);
	cr_assert_eq(dp_segment_open(cb, NULL, "plain", DP_ACCESS_RW), -ENOENT);
	seg = open_segment(cb, peer_a, "plain", DP_ACCESS_RW);
	lreg = alloc_region(cb, MiB, &loc);
	pattern_fill(loc, MiB, 7);
	q = make_queue(cb, 16);
	dp_prep_write(&d, lreg, 0, seg, 0, MiB, 1);
	run_ok(q, &d, DP_CQE_F_FABRIC, 15000);
	cr_assert_eq(pattern_check(tgt, MiB, 7), -1);
	cr_assert_not(svc_log_has(&fab_svc[1], "directory"), "B mentions a directory");
	dp_close(cb);
	dp_close(ca);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

#define PASSWORD "pw-Secret-42"

static void assert_log_clean(unsigned i)
{
	cr_assert_not(svc_log_has(&fab_svc[i], PASSWORD), "service %u logged the password", i);
	cr_assert(svc_log_has(&fab_svc[i], ":***@127.0.0.1"), "service %u: no masked URL", i);
}

/* A password-protected Redis: the right password works (in the URL or in
 * $DP_DIRECTORY_PASSWORD), a wrong one fails exports cleanly, and no log
 * line holds it. */
Test(directory_transfer, password_never_logged)
{
	char url[160], bad[160], owner[64];
	struct dp_client *c0, *c1, *c2;
	uint8_t *mem;
	int reg;

	dir_redis_start(&dir_redis, 0, PASSWORD);
	snprintf(url, sizeof(url), "redis://:%s@127.0.0.1:%d/0", PASSWORD, dir_redis.port);
	snprintf(bad, sizeof(bad), "redis://default:wrong-%s@127.0.0.1:%d", PASSWORD,
		 dir_redis.port);
	dir_svc_start(0, url, 5, NULL);
	dir_svc_start(1, bad, 5, NULL);
	setenv("DP_DIRECTORY_PASSWORD", PASSWORD, 1);
	snprintf(bad, sizeof(bad), "redis://127.0.0.1:%d", dir_redis.port);
	dir_svc_start(2, bad, 5, NULL);
	unsetenv("DP_DIRECTORY_PASSWORD");

	c0 = connect_client(&fab_svc[0], "a");
	reg = alloc_region(c0, MiB, &mem);
	export_segment(c0, reg, "guarded", DP_ACCESS_READ);
	dir_hget(&dir_redis, DIR_KEY("guarded"), "owner", owner, sizeof(owner));
	cr_assert_neq(owner[0], 0, "no record published with the password");

	c1 = connect_client(&fab_svc[1], "b");
	reg = alloc_region(c1, MiB, &mem);
	cr_assert_eq(dp_segment_export(c1, reg, "guarded-2", DP_ACCESS_READ), -EHOSTUNREACH,
		     "export with a wrong password");
	cr_assert_eq(dp_segment_open(c1, NULL, "guarded", DP_ACCESS_READ), -EHOSTUNREACH);
	cr_assert(svc_log_has(&fab_svc[1], "authentication refused"));

	c2 = connect_client(&fab_svc[2], "c");
	reg = alloc_region(c2, MiB, &mem);
	export_segment(c2, reg, "guarded-3", DP_ACCESS_READ);
	cr_assert_geq(dp_segment_open(c2, NULL, "guarded", DP_ACCESS_READ), 0);

	dp_close(c0);
	dp_close(c1);
	dp_close(c2);
	for (unsigned i = 0; i < 3; i++) {
		assert_log_clean(i);
		cr_assert_eq(svc_stop(&fab_svc[i]), 0);
	}
}

/* Another fleet sharing the Redis: its services find the record, and
 * believe none of it. Each record carries a MAC under the owner's fleet
 * key; a service of another key gets -EACCES, through the fabric and on
 * this host (where the same-host socket refuses it, and the fabric is not
 * tried instead). A service of the fleet opens the same name. */
Test(directory_transfer, another_fleet_gets_nothing)
{
	static const char key[] = "/tmp/dp-dir-other.key";
	char sock1[64], sock2[64], sock3[64];
	const char *other[] = {"--peer-key", key, NULL, NULL, NULL};
	const char *same0[] = {"--same-host-socket", sock1, NULL};
	const char *fleet[] = {"--same-host-socket", sock3, NULL};
	struct dp_client *ca, *cb, *cc;
	uint8_t *tgt;
	int treg, rc, seg;
	FILE *f = fopen(key, "w");

	cr_assert_not_null(f);
	fprintf(f, "another-fleet-0123456789abcdef\n");
	fclose(f);
	cr_assert_eq(chmod(key, 0600), 0);
	snprintf(sock1, sizeof(sock1), "/tmp/dp-dir-fleet-%d-0.peer", (int)getpid());
	snprintf(sock2, sizeof(sock2), "/tmp/dp-dir-fleet-%d-1.peer", (int)getpid());
	snprintf(sock3, sizeof(sock3), "/tmp/dp-dir-fleet-%d-2.peer", (int)getpid());
	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 5, same0);
	ca = connect_client(&fab_svc[0], "owner");
	treg = alloc_region(ca, MiB, &tgt);
	export_segment(ca, treg, "fleet/kv", DP_ACCESS_RW);
	for (int pass = 0; pass < 2; pass++) {
		/* Pass 0: no same-host socket (the fabric, the record's MAC);
		 * pass 1: one (the same-host exchange's refusal). */
		other[2] = pass ? "--same-host-socket" : NULL;
		other[3] = pass ? sock2 : NULL;
		dir_svc_start(1, dir_redis.url, 5, other);
		cb = connect_client(&fab_svc[1], "stranger");
		rc = dp_segment_open(cb, NULL, "fleet/kv", DP_ACCESS_RW);
		cr_assert_eq(rc, -EACCES, "pass %d: open from another fleet: %d (%s)", pass, rc,
			     dp_strerror(rc));
		dp_close(cb);
		cr_assert_eq(svc_stop(&fab_svc[1]), 0);
	}
	/* The fleet's own service opens it, on this host (mapped). */
	dir_svc_start(2, dir_redis.url, 5, fleet);
	cc = connect_client(&fab_svc[2], "member");
	seg = dp_segment_open(cc, NULL, "fleet/kv", DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "open from the fleet: %s", dp_strerror(seg));
	dp_close(cc);
	dp_close(ca);
	unlink(key);
	cr_assert_eq(svc_stop(&fab_svc[2]), 0);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}
