/* directory_clash.c - who owns a name: exporting a name another live service holds fails with EEXIST; a client's death withdraws its records; a SIGKILLed owner's records expire after the TTL (lookups then fail with ENOENT) and a new owner takes the name; malformed records are refused. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "helpers.h"

TestSuite(directory_clash, .fini = dir_teardown, .timeout = 60);

Test(directory_clash, export_of_a_held_name_is_eexist)
{
	char owner[64], name_a[64], name_b[64];
	struct dp_client *ca, *cb;
	uint8_t *ma, *mb;
	int ra, rb;

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 5, NULL);
	dir_svc_start(1, dir_redis.url, 5, NULL);
	dir_server_name(0, name_a, sizeof(name_a));
	dir_server_name(1, name_b, sizeof(name_b));
	ca = connect_client(&fab_svc[0], "a");
	cb = connect_client(&fab_svc[1], "b");
	ra = alloc_region(ca, MiB, &ma);
	rb = alloc_region(cb, MiB, &mb);

	export_segment(ca, ra, "weights/0", DP_ACCESS_READ);
	cr_assert_eq(dp_segment_export(cb, rb, "weights/0", DP_ACCESS_READ), -EEXIST,
		     "a name held by a live service was exported again");
	dir_hget(&dir_redis, DIR_KEY("weights/0"), "owner", owner, sizeof(owner));
	cr_assert_str_eq(owner, name_a, "the clash overwrote the record");
	/* The refused export left nothing behind on B (an open by B's own
	 * name would find A's through the directory, as NULL does). */
	cr_assert_eq(dp_segment_unexport(cb, "weights/0"), -ENOENT);

	/* A's client dies: its exports and their records go. */
	dp_close(ca);
	for (int i = 0; i < 200 && dir_int(&dir_redis, "EXISTS %s", DIR_KEY("weights/0")); i++)
		sleep_ms(10);
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY("weights/0")), 0,
		     "record of a dead client's export left behind");
	export_segment(cb, rb, "weights/0", DP_ACCESS_READ);
	dir_hget(&dir_redis, DIR_KEY("weights/0"), "owner", owner, sizeof(owner));
	cr_assert_str_eq(owner, name_b);

	/* Shutdown withdraws what is left. */
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY("weights/0")), 0,
		     "record left behind by a clean shutdown");
	dp_close(cb);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

/* Reads `len` bytes of segment `seg` and checks them against `seed`. */
static void read_check(struct dp_client *c, int seg, uint64_t seed)
{
	struct dp_queue *q = make_queue(c, 4);
	struct dp_desc d;
	uint8_t *loc;
	int reg = alloc_region(c, MiB, &loc);

	dp_prep_read(&d, reg, 0, seg, 0, MiB, seed);
	run_ok(q, &d, DP_CQE_F_FABRIC, 15000);
	cr_assert_eq(pattern_check(loc, MiB, seed), -1, "bytes of the wrong owner");
	dp_queue_destroy(q);
	dp_free(c, reg);
}

Test(directory_clash, killed_owner_expires_and_a_new_owner_takes_the_name)
{
	char owner[64], name_c[64];
	struct dp_client *ca, *cb, *cc;
	uint8_t *ma, *mc;
	int ra, rc, seg;
	uint64_t t0;
	long ms;

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 2, NULL);
	dir_svc_start(1, dir_redis.url, 2, NULL);
	ca = connect_client(&fab_svc[0], "a");
	cb = connect_client(&fab_svc[1], "b");
	ra = alloc_region(ca, MiB, &ma);
	pattern_fill(ma, MiB, 1);
	export_segment(ca, ra, "ckpt", DP_ACCESS_READ);
	seg = open_segment(cb, NULL, "ckpt", DP_ACCESS_READ);
	read_check(cb, seg, 1);

	/* SIGKILL: nothing is withdrawn; the record outlives its owner
	 * until the TTL runs out. */
	svc_kill(&fab_svc[0]);
	t0 = now_ns();
	dp_close(ca);
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY("ckpt")), 1,
		     "record gone before its TTL");
	for (;;) {
		int s = dp_segment_open(cb, NULL, "ckpt", DP_ACCESS_READ);

		if (s == -ENOENT)
			break;
		cr_assert_geq(s, 0, "open during expiry: %s", dp_strerror(s));
		dp_segment_close(cb, s);
		cr_assert_lt(dir_ms_since(t0), 5000, "record of a killed owner alive after 5 s");
		sleep_ms(50);
	}
	ms = (long)dir_ms_since(t0);
	/* Refreshed every TTL/3: it lived at least 2/3 of the TTL on. */
	cr_assert_geq(ms, 1000, "record gone %ld ms after the kill, before its TTL", ms);
	cr_assert(svc_log_has(&fab_svc[1], "record of 'ckpt' expired"),
		  "B was not told of the expiry (keyspace notification)");

	/* A new owner takes the name; B finds it there. */
	dir_svc_start(2, dir_redis.url, 2, NULL);
	dir_server_name(2, name_c, sizeof(name_c));
	cc = connect_client(&fab_svc[2], "c");
	rc = alloc_region(cc, MiB, &mc);
	pattern_fill(mc, MiB, 3);
	export_segment(cc, rc, "ckpt", DP_ACCESS_READ);
	dir_hget(&dir_redis, DIR_KEY("ckpt"), "owner", owner, sizeof(owner));
	cr_assert_str_eq(owner, name_c);
	seg = open_segment(cb, NULL, "ckpt", DP_ACCESS_READ);
	read_check(cb, seg, 3);

	dp_close(cb);
	dp_close(cc);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
	cr_assert_eq(svc_stop(&fab_svc[2]), 0);
}

/* Records are data from outside: one that is not a well-formed lookup
 * reply of the service it names is refused like a bad RPC reply. */
Test(directory_clash, malformed_records_are_refused)
{
	struct dp_client *c;
	redisReply *rep;
	char junk[1264];

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 5, NULL);
	c = connect_client(&fab_svc[0], "a");

	rep = dir_cmd(&dir_redis, "HSET %s owner x:1 gen 1 rec short", DIR_KEY("short"));
	freeReplyObject(rep);
	memset(junk, 0xff, sizeof(junk));
	rep = dir_cmd(&dir_redis, "HSET %s owner x:1 gen 1 rec %b", DIR_KEY("junk"), junk,
		      sizeof(junk));
	freeReplyObject(rep);
	rep = dir_cmd(&dir_redis, "SET %s not-a-hash", DIR_KEY("string"));
	freeReplyObject(rep);

	cr_assert_eq(dp_segment_open(c, NULL, "short", DP_ACCESS_READ), -EBADMSG);
	cr_assert_eq(dp_segment_open(c, NULL, "junk", DP_ACCESS_READ), -EBADMSG);
	cr_assert_lt(dp_segment_open(c, NULL, "string", DP_ACCESS_READ), 0);
	cr_assert_eq(dp_segment_open(c, NULL, "absent", DP_ACCESS_READ), -ENOENT);
	/* Still serving, still connected to Redis. */
	cr_assert_eq(dp_segment_open(c, NULL, "absent", DP_ACCESS_READ), -ENOENT);
	dp_close(c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}
