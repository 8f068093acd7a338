/* SPDX-License-Identifier: MIT */
/*
 * fuzz_desc.c - libFuzzer target: descriptors a hostile client wrote into
 * its SQ, drained, validated and routed by the real poller (poller.c and
 * stats.c linked in, driven one loop at a time by poller_run_once) into test
 * engines registered under the real engines' names (engine.h). Every
 * descriptor gets exactly one completion, every transfer that reaches an
 * engine passes validation: both ends inside their regions, the fabric's
 * inside the remote segment.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "dp_internal.h"
#include "engine.h"
#include "notif.h"
#include "fabric.h"
#include "session.h"

#define NREG 4
#define RLEN 4096u

static struct client cl;
static struct queue *q;
static struct poller po;
static struct region regs[NREG];
static struct segment segs[3];
static struct seg_handle handles[3];
static struct remote_seg remote = {.len = 2 * RLEN, .access = DP_ACCESS_RW};
static uint8_t mem[NREG][RLEN];
static unsigned handed; /* descriptors an engine took */

static bool inside(const struct region *r, const uint8_t *p, uint64_t len)
{
	return p >= r->base && len <= r->len && (uint64_t)(p - r->base) <= r->len - len;
}

/* A copy that passed validation: both ends inside the two regions. */
static void memory_submit(struct poller *p, const struct xfer *x)
{
	(void)p;
	if (!(inside(x->ra, x->src, x->len) || inside(x->rb, x->src, x->len)) ||
	    !(inside(x->ra, x->dst, x->len) || inside(x->rb, x->dst, x->len)) ||
	    x->len != x->d->len)
		abort();
	handed++;
	queue_complete(x->q, x->user_data, 0, x->len, DP_CQE_F_LOCAL);
}

static void fabric_test_submit(struct poller *p, const struct xfer *x)
{
	const struct dp_desc *d = x->d;

	(void)p;
	if (x->rb || !x->seg->remote || d->len > x->ra->len || d->local_off > x->ra->len - d->len ||
	    d->len > x->seg->remote->len || d->target_off > x->seg->remote->len - d->len)
		abort();
	handed++;
	queue_complete(x->q, x->user_data, 0, d->len, DP_CQE_F_FABRIC);
}

static void never_submit(struct poller *p, const struct xfer *x)
{
	(void)p;
	(void)x;
	abort(); /* no file, GPU or VM regions here */
}

/* The test engines, under the names route() sends to. */
const struct engine host_engine = {.name = "host-test", .submit = memory_submit};
const struct engine gpu_engine = {.name = "gpu-test", .submit = never_submit};
const struct engine file_engine = {.name = "file-test", .submit = never_submit};
const struct engine fabric_engine = {.name = "fabric-test", .submit = fabric_test_submit};
const struct engine samehost_engine = {.name = "samehost-test"};
/* Its host regions have no fabric registration: route() stages them. */
const struct engine stage_engine = {.name = "stage-test", .submit = fabric_test_submit};
const struct engine vm_engine = {.name = "vm-test", .submit = never_submit};
const struct engine session_engine = {.name = "session-test"};
#define ENGINE(name) [ENGINE_##name] = &name##_engine,
const struct engine *const engines[DP_ENGINES] = {
#include "engines.def"
};
#undef ENGINE

static void setup(void)
{
	struct dp_ring_pair pair;

	cfg.no_stats = true;
	/* Host copies up to half a region take the poller's burst fast path
	 * (real memcpy between the regions, checked by ASan); longer ones go
	 * through desc_process to memory_submit. */
	cfg.inline_max = RLEN / 2;
	control_wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	q = calloc(1, sizeof(*q));
	if (dp_ring_pair_create(&pair, "fuzz", 64, sizeof(struct dp_desc), 64,
				sizeof(struct dp_cqe), 0))
		abort();
	q->pair = pair;
	q->client = &cl;
	q->depth = 64;
	po.queues = q;
	for (unsigned i = 0; i < NREG; i++) {
		regs[i] = (struct region){.id = i,
					  .kind = REGION_HOST,
					  .fd = -1,
					  .base = mem[i],
					  .len = RLEN - 512 * i};
		atomic_store(&cl.regions[i], &regs[i]);
	}
	/* Handles 0: read-write, 1: read-only, 2: another service's segment. */
	segs[0] = (struct segment){.region = &regs[1], .access = DP_ACCESS_RW};
	segs[1] = (struct segment){.region = &regs[2], .access = DP_ACCESS_READ};
	segs[2] = (struct segment){.remote = &remote, .access = DP_ACCESS_RW};
	handles[0] = (struct seg_handle){&segs[0], DP_ACCESS_RW};
	handles[1] = (struct seg_handle){&segs[1], DP_ACCESS_READ};
	handles[2] = (struct seg_handle){&segs[2], DP_ACCESS_RW};
	for (unsigned i = 0; i < 3; i++)
		atomic_store(&cl.segs[i], &handles[i]);
}

/* The client's side of the rings, kept across runs like a real client's. */
static struct dp_ring csq, ccq;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned n = (unsigned)(size / sizeof(struct dp_desc)), got = 0;
	struct dp_cqe cqe[64];

	if (!q) {
		setup();
		dp_ring_bind(&csq, q->pair.sq.hdr, DP_RING_PRODUCER);
		dp_ring_bind(&ccq, q->pair.cq.hdr, DP_RING_CONSUMER);
	}
	if (n > 64)
		n = 64;
	for (unsigned i = 0; i < n; i++) {
		struct dp_desc d;

		memcpy(&d, data + i * sizeof(d), sizeof(d));
		d.user_data = i; /* accounting, below */
		if (dp_ring_enqueue(&csq, &d) != 1)
			abort();
	}
	handed = 0;
	while (got < n) {
		int k;

		poller_run_once(&po);
		if (q->broken)
			abort(); /* descriptors never break a queue, only indices do */
		k = dp_ring_dequeue_burst(&ccq, cqe, 64);
		if (k <= 0)
			abort(); /* a descriptor left without a completion */
		for (int i = 0; i < k; i++)
			if (cqe[i].user_data != got + (unsigned)i ||
			    (cqe[i].status && cqe[i].bytes))
				abort();
		got += (unsigned)k;
	}
	if (dp_ring_dequeue_burst(&ccq, cqe, 64) != 0)
		abort(); /* a second completion */
	return 0;
}

/* The rest of the service that poller.c and stats.c refer to: the queue
 * has no stats block, the regions are static. */
struct dp_config cfg;
atomic_int dp_stopping;
int control_wake_efd = -1;
void region_put(struct region *r)
{
	(void)r;
}
void client_put(struct client *c)
{
	(void)c;
}
/* notif.c's other services (notif_remote.c, samehost.c): the fuzzed
 * segments are this service's. */
void notif_forward(const char *server, const char *segment, struct notif_req *n)
{
	(void)server;
	(void)segment;
	notif_req_release(n);
}
const char *samehost_seg_server(const struct samehost_seg *ss)
{
	(void)ss;
	return "";
}
/* session.c: no handle here is a session's, so neither is ever called. */
int session_translate(struct session_cli *s, uint64_t va, uint64_t len, bool final,
		      struct segment **seg, uint64_t *off)
{
	(void)s;
	(void)va;
	(void)len;
	(void) final;
	(void)seg;
	(void)off;
	abort();
}
void session_hold(struct poller *p, struct queue *q, const struct dp_desc *d, struct session_cli *s)
{
	(void)p;
	(void)q;
	(void)d;
	(void)s;
	abort();
}
/* notif.c's notif_send (the control thread's NOTIFY_SEND): never here. */
struct segment *session_any_member(struct session_cli *s)
{
	(void)s;
	abort();
}
