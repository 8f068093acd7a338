/* fabric_async.c - the control plane never waits on the network (nothing on the control thread waits on a peer): two services in two network namespaces open each other's segments at the same moment, 20 rounds, without a timeout; a stopped peer delays neither opens to a healthy peer nor a new client's dp_connect, and a client that leaves while its open waits is no harm; 80 silent TCP connections to the RPC port leave local control calls fast and real lookups answered; a service opens its own export through its own address (0.0.0.0, 127.0.0.1, localhost). */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define SEG_LEN (1u << 20)

static const char *const tcp_args[] = {"--provider", "tcp", "--server-name", "127.0.0.1", NULL};

/* ---- namespaces (as tests/fabric_netns.c: one veth pair) ---- */

static struct {
	char ns[2][32];
	char veth[2][16];
	char ip[2][16];
} net;

TestSuite(fabric_async, .fini = netns_teardown, .timeout = 90);

/* Namespaces dpyA-PID and dpyB-PID joined by a veth pair on 10.79.X.0/24;
 * false (nothing made) where they cannot be made. */
static bool netns_setup(void)
{
	unsigned id = (unsigned)getpid() % 100000, x = (unsigned)getpid() % 250 + 1;

	if (geteuid() != 0 || run_sh("command -v ip"))
		return false;
	for (unsigned i = 0; i < 2; i++) {
		snprintf(net.ns[i], sizeof(net.ns[i]), "dpy%c-%u", "AB"[i], id);
		if (netns_add(net.ns[i]))
			return false;
		snprintf(net.veth[i], sizeof(net.veth[i]), "dpy%c-%u", "ab"[i], id);
		snprintf(net.ip[i], sizeof(net.ip[i]), "10.79.%u.%u", x, i + 1);
	}
	if (run_sh("ip link add %s type veth peer name %s", net.veth[0], net.veth[1]))
		return false;
	for (unsigned i = 0; i < 2; i++) {
		cr_assert_eq(run_sh("ip link set %s netns %s", net.veth[i], net.ns[i]), 0);
		cr_assert_eq(
			netns_sh(net.ns[i], "ip addr add %s/24 dev %s", net.ip[i], net.veth[i]), 0);
		cr_assert_eq(netns_sh(net.ns[i], "ip link set %s up", net.veth[i]), 0);
	}
	return true;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double ms_since(uint64_t t0)
{
	return (double)(now_ns() - t0) / 1e6;
}

/* ---- mutual opens ---- */

struct opener {
	pthread_t thread;
	struct dp_client *c;
	const char *peer, *name;
	pthread_barrier_t *go;
	unsigned rounds;
	int rc[20];
	double ms[20];
};

/* Each round: wait for the other side, open its segment, close it again. */
static void *opener_main(void *arg)
{
	struct opener *o = arg;

	for (unsigned r = 0; r < o->rounds; r++) {
		uint64_t t0;

		pthread_barrier_wait(o->go);
		t0 = now_ns();
		o->rc[r] = dp_segment_open(o->c, o->peer, o->name, DP_ACCESS_RW);
		o->ms[r] = ms_since(t0);
		if (o->rc[r] >= 0)
			dp_segment_close(o->c, o->rc[r]);
	}
	return NULL;
}

Test(fabric_async, mutual_opens_never_time_out)
{
	static pthread_barrier_t go;
	struct opener o[2];
	char peer[2][64];
	uint8_t *mem[2];
	int reg[2];
	bool ns = netns_setup();

	/* In two namespaces where they can be made (as two hosts would be),
	 * else both on loopback: the same control threads either way. */
	for (unsigned i = 0; i < 2; i++) {
		const char *prefix[3];
		char enter[64];
		const char *args[] = {"--provider",
				      "tcp",
				      "--server-name",
				      ns ? net.ip[i] : "127.0.0.1",
				      "--nics",
				      net.veth[i],
				      NULL};

		if (ns) {
			netns_prefix(net.ns[i], enter, prefix);
			start_svc_in(&fab_svc[i], prefix, args);
		} else {
			start_svc(&fab_svc[i], tcp_args);
		}
	}
	cr_assert_eq(pthread_barrier_init(&go, NULL, 2), 0);
	for (unsigned i = 0; i < 2; i++) {
		memset(&o[i], 0, sizeof(o[i]));
		o[i].c = connect_client(&fab_svc[i], i ? "decode" : "prefill");
		reg[i] = alloc_region(o[i].c, SEG_LEN, &mem[i]);
		export_segment(o[i].c, reg[i], i ? "kv-decode" : "kv-prefill", DP_ACCESS_RW);
		snprintf(peer[i], sizeof(peer[i]), "%s", dp_server_name(o[i].c));
	}
	/* Each opens the other's, at the same moment, 20 times. */
	for (unsigned i = 0; i < 2; i++) {
		o[i].peer = peer[1 - i];
		o[i].name = i ? "kv-prefill" : "kv-decode";
		o[i].go = &go;
		o[i].rounds = 20;
		cr_assert_eq(pthread_create(&o[i].thread, NULL, opener_main, &o[i]), 0);
	}
	for (unsigned i = 0; i < 2; i++)
		pthread_join(o[i].thread, NULL);
	for (unsigned r = 0; r < 20; r++)
		for (unsigned i = 0; i < 2; i++)
			cr_assert_geq(o[i].rc[r], 0, "round %u: %s opening %s: %s after %.0f ms", r,
				      i ? "decode" : "prefill", o[i].peer, dp_strerror(o[i].rc[r]),
				      o[i].ms[r]);
	/* And the handles move bytes: one WRITE each way. */
	for (unsigned i = 0; i < 2; i++) {
		struct dp_queue *q = make_queue(o[i].c, 8);
		int seg = open_segment(o[i].c, o[i].peer, o[i].name, DP_ACCESS_RW), src;
		uint8_t *p;
		struct dp_desc d;

		src = alloc_region(o[i].c, 65536, &p);
		pattern_fill(p, 65536, 40 + i);
		dp_prep_write(&d, src, 0, seg, 0, 65536, 1);
		run_ok(q, &d, DP_CQE_F_FABRIC, 10000);
		cr_assert_eq(pattern_check(mem[1 - i], 65536, 40 + i), -1);
		dp_queue_destroy(q);
	}
	for (unsigned i = 0; i < 2; i++)
		dp_close(o[i].c);
	pthread_barrier_destroy(&go);
	for (unsigned i = 0; i < 2; i++)
		stop_svc(&fab_svc[i]);
}

/* ---- a stopped peer ---- */

struct stalled_open {
	pthread_t thread;
	struct dp_client *c;
	const char *peer;
	int rc;
	double ms;
};

static void *stalled_main(void *arg)
{
	struct stalled_open *s = arg;
	uint64_t t0 = now_ns();

	s->rc = dp_segment_open(s->c, s->peer, "frozen", DP_ACCESS_READ);
	s->ms = ms_since(t0);
	return NULL;
}

Test(fabric_async, stopped_peer_delays_no_one_else)
{
	struct stalled_open st[3];
	struct dp_client *healthy_owner, *asker, *late;
	char frozen_peer[64], healthy_peer[64];
	uint8_t *mem;
	uint64_t t0;
	double open_ms, connect_ms;
	pid_t leaver;
	int seg, rc;

	/* 0 asks; 1 is healthy; 2 is stopped. */
	for (unsigned i = 0; i < 3; i++)
		start_svc(&fab_svc[i], tcp_args);
	healthy_owner = connect_client(&fab_svc[1], "owner");
	export_segment(healthy_owner, alloc_region(healthy_owner, SEG_LEN, &mem), "healthy",
		       DP_ACCESS_RW);
	snprintf(healthy_peer, sizeof(healthy_peer), "%s", dp_server_name(healthy_owner));
	{
		struct dp_client *c = connect_client(&fab_svc[2], "soon-frozen");

		snprintf(frozen_peer, sizeof(frozen_peer), "%s", dp_server_name(c));
		dp_close(c);
	}
	asker = connect_client(&fab_svc[0], "asker");
	kill(fab_svc[2].pid, SIGSTOP);
	wait_stopped(fab_svc[2].pid);

	/* A client that leaves while its open to the stopped peer waits:
	 * the answer (a timeout) must find it gone, and harm nothing. */
	leaver = fork();
	cr_assert_geq(leaver, 0);
	if (leaver == 0) {
		struct dp_client *c = NULL;

		if (dp_connect(fab_svc[0].sock, "leaver", &c))
			_exit(1);
		dp_segment_open(c, frozen_peer, "frozen", DP_ACCESS_READ);
		_exit(0);
	}
	/* Three clients open on the stopped peer (one lookup in flight, or
	 * several: either way none may serialise the others). */
	for (unsigned i = 0; i < 3; i++) {
		st[i].c = connect_client(&fab_svc[0], "stuck");
		st[i].peer = frozen_peer;
		cr_assert_eq(pthread_create(&st[i].thread, NULL, stalled_main, &st[i]), 0);
	}
	sleep_ms(200);
	kill(leaver, SIGKILL);
	waitpid(leaver, NULL, 0);

	/* Meanwhile: an open to the healthy peer, and a new client. */
	t0 = now_ns();
	seg = dp_segment_open(asker, healthy_peer, "healthy", DP_ACCESS_RW);
	open_ms = ms_since(t0);
	cr_assert_geq(seg, 0, "open to the healthy peer: %s after %.0f ms", dp_strerror(seg),
		      open_ms);
	t0 = now_ns();
	rc = dp_connect(fab_svc[0].sock, "late", &late);
	connect_ms = ms_since(t0);
	cr_assert_eq(rc, 0, "a new client's dp_connect: %s after %.0f ms", dp_strerror(rc),
		     connect_ms);
	cr_log_info("stopped peer: an open to a healthy peer %.1f ms, a new dp_connect %.1f ms, "
		    "while 3 opens wait on the stopped one",
		    open_ms, connect_ms);
	cr_assert_lt(open_ms, 1000, "an open to a healthy peer took %.0f ms", open_ms);
	cr_assert_lt(connect_ms, 1000, "a new client's dp_connect took %.0f ms", connect_ms);

	/* The opens on the stopped peer each end at their own deadline
	 * (2 s), not one after the other (2, 4, 6 s). */
	for (unsigned i = 0; i < 3; i++) {
		pthread_join(st[i].thread, NULL);
		cr_assert_eq(st[i].rc, -ETIMEDOUT, "open on the stopped peer: %s",
			     dp_strerror(st[i].rc));
		cr_assert_lt(st[i].ms, 3500, "open %u on the stopped peer took %.0f ms", i,
			     st[i].ms);
	}
	kill(fab_svc[2].pid, SIGCONT);
	dp_segment_close(asker, seg);
	for (unsigned i = 0; i < 3; i++)
		dp_close(st[i].c);
	dp_close(late);
	dp_close(asker);
	dp_close(healthy_owner);
	for (unsigned i = 0; i < 3; i++)
		stop_svc(&fab_svc[i]);
}

/* ---- slowloris on the RPC port ---- */

#define SILENT 80

static struct {
	pthread_t thread;
	atomic_bool stop;
	int port;
	int fd[SILENT];
	atomic_ulong opened;
} loris;

static int loris_connect(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)loris.port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	if (fd >= 0)
		atomic_fetch_add(&loris.opened, 1);
	return fd;
}

/* Keeps SILENT connections open that never send a byte: each one the
 * service closes is made again at once. */
static void *loris_main(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < SILENT; i++)
		loris.fd[i] = loris_connect();
	while (!atomic_load(&loris.stop)) {
		struct pollfd pfd[SILENT];

		for (unsigned i = 0; i < SILENT; i++)
			pfd[i] = (struct pollfd){.fd = loris.fd[i], .events = POLLIN};
		if (poll(pfd, SILENT, 20) <= 0)
			continue;
		for (unsigned i = 0; i < SILENT; i++)
			if (pfd[i].revents) {
				close(loris.fd[i]);
				loris.fd[i] = loris_connect();
			}
	}
	for (unsigned i = 0; i < SILENT; i++)
		if (loris.fd[i] >= 0)
			close(loris.fd[i]);
	return NULL;
}

Test(fabric_async, silent_rpc_connections_do_not_slow_the_service)
{
	struct dp_client *owner, *remote;
	double lat[60], worst = 0;
	char peer[64];
	uint8_t *mem;
	int fds_before, fds_peak = 0;

	start_svc(&fab_svc[0], tcp_args);
	start_svc(&fab_svc[1], tcp_args);
	owner = connect_client(&fab_svc[0], "owner");
	export_segment(owner, alloc_region(owner, SEG_LEN, &mem), "loris-seg", DP_ACCESS_RW);
	snprintf(peer, sizeof(peer), "%s", dp_server_name(owner));
	remote = connect_client(&fab_svc[1], "remote");
	fds_before = proc_fd_count(fab_svc[0].pid);

	loris.port = fab_rpc_port(&fab_svc[0]);
	atomic_store(&loris.stop, false);
	atomic_store(&loris.opened, 0);
	cr_assert_eq(pthread_create(&loris.thread, NULL, loris_main, NULL), 0);
	sleep_ms(300);

	/* Local control calls: an open and a close of the local export,
	 * 60 of them over ~1.5 s. */
	for (unsigned i = 0; i < 60; i++) {
		uint64_t t0 = now_ns();
		int seg = dp_segment_open(owner, NULL, "loris-seg", DP_ACCESS_READ);

		cr_assert_geq(seg, 0, "local open under slowloris: %s", dp_strerror(seg));
		cr_assert_eq(dp_segment_close(owner, seg), 0);
		lat[i] = ms_since(t0);
		if (lat[i] > worst)
			worst = lat[i];
		if (i % 10 == 0) {
			int n = proc_fd_count(fab_svc[0].pid);

			fds_peak = n > fds_peak ? n : fds_peak;
		}
		sleep_ms(25);
	}
	/* Real lookups from another service get through. */
	for (unsigned i = 0; i < 3; i++) {
		uint64_t t0 = now_ns();
		int seg = dp_segment_open(remote, peer, "loris-seg", DP_ACCESS_RW);

		cr_assert_geq(seg, 0, "lookup %u under slowloris: %s after %.0f ms", i,
			      dp_strerror(seg), ms_since(t0));
		dp_segment_close(remote, seg);
	}
	atomic_store(&loris.stop, true);
	pthread_join(loris.thread, NULL);

	qsort(lat, 60, sizeof(lat[0]), cmp_double);
	cr_log_info("slowloris: %lu connections made; control call p50 %.2f ms p95 %.2f ms max "
		    "%.2f ms; service fds %d -> peak %d",
		    atomic_load(&loris.opened), lat[30], lat[57], worst, fds_before, fds_peak);
	/* Before, each silent connection held the control thread 200 ms,
	 * one after the other: p95 ~190 ms, lookups timed out. */
	cr_assert_lt(lat[57], 50, "control call p95 %.1f ms under slowloris", lat[57]);
	cr_assert_lt(worst, 250, "a control call took %.1f ms under slowloris", worst);
	/* At most 64 of them are held at once. */
	cr_assert_leq(fds_peak, fds_before + 64 + 4, "service fds %d (baseline %d)", fds_peak,
		      fds_before);
	dp_close(remote);
	dp_close(owner);
	stop_svc(&fab_svc[0]);
	stop_svc(&fab_svc[1]);
}

/* ---- its own address ---- */

Test(fabric_async, open_through_own_address)
{
	struct dp_client *c;
	struct dp_queue *q;
	char peer[64];
	uint8_t *mem, *src;
	int port, reg, sreg;

	start_svc(&fab_svc[0], tcp_args);
	port = fab_rpc_port(&fab_svc[0]);
	c = connect_client(&fab_svc[0], "self");
	reg = alloc_region(c, SEG_LEN, &mem);
	export_segment(c, reg, "mine", DP_ACCESS_RW);
	sreg = alloc_region(c, 4096, &src);
	q = make_queue(c, 8);
	{
		const char *hosts[] = {"0.0.0.0", "127.0.0.1", "127.0.0.2", "localhost"};

		for (unsigned i = 0; i < 4; i++) {
			uint64_t t0 = now_ns();
			struct dp_desc d;
			int seg;

			snprintf(peer, sizeof(peer), "%s:%d", hosts[i], port);
			seg = dp_segment_open(c, peer, "mine", DP_ACCESS_RW);
			cr_assert_geq(seg, 0, "open of %s: %s after %.0f ms", peer,
				      dp_strerror(seg), ms_since(t0));
			cr_assert_lt(ms_since(t0), 1000, "open of %s took %.0f ms", peer,
				     ms_since(t0));
			/* Its own export: the local path. */
			pattern_fill(src, 4096, 60 + i);
			dp_prep_write(&d, sreg, 0, seg, 0, 4096, i);
			run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
			cr_assert_eq(pattern_check(mem, 4096, 60 + i), -1);
			dp_segment_close(c, seg);
		}
	}
	dp_queue_destroy(q);
	dp_close(c);
	stop_svc(&fab_svc[0]);
}
