/* fuzz_desc.c - libFuzzer target: descriptors a hostile client wrote into its SQ, drained and validated by the poller's own code (poller.c, built in). Every descriptor gets exactly one completion, and every copy that passes validation lies inside its two regions. */
#include <stdlib.h>

#include "../../dataplane/poller.c"

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
void copy_engine_submit(struct poller *p, const struct copy_req *req)
{
	(void)p;
	if (!(inside(req->ra, req->src, req->len) || inside(req->rb, req->src, req->len)) ||
	    !(inside(req->ra, req->dst, req->len) || inside(req->rb, req->dst, req->len)))
		abort();
	handed++;
	queue_complete(req->q, req->user_data, 0, req->len, DP_CQE_F_LOCAL);
}

void fabric_submit(struct poller *p, struct queue *qq, const struct dp_desc *d,
		   struct region *local, struct segment *seg)
{
	(void)p;
	if (!seg->remote || d->len > local->len || d->local_off > local->len - d->len ||
	    d->len > seg->remote->len || d->target_off > seg->remote->len - d->len)
		abort();
	handed++;
	queue_complete(qq, d->user_data, 0, d->len, DP_CQE_F_FABRIC);
}

void fileio_submit(struct poller *p, struct queue *qq, const struct dp_desc *d,
		   struct region *local, struct region *target)
{
	(void)p;
	(void)qq;
	(void)d;
	(void)local;
	(void)target;
	abort(); /* no file regions here */
}

static void setup(void)
{
	struct dp_ring_pair pair;

	cfg.no_stats = true;
	control_wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	q = calloc(1, sizeof(*q));
	if (dp_ring_pair_create(&pair, "fuzz", 64, sizeof(struct dp_desc), 64,
				sizeof(struct dp_cqe), 0))
		abort();
	q->pair = pair;
	q->client = &cl;
	q->depth = 64;
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

		queue_drain_sq(&po, q);
		queue_flush_cq(q);
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

/* The rest of the service, which poller.c refers to but this target never
 * reaches: the queue has no stats block and no engine has work. */
struct dp_config cfg;
atomic_int dp_stopping;
int control_wake_efd = -1;
void dp_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}
void client_put(struct client *c)
{
	(void)c;
}
int copy_engine_progress(struct poller *p)
{
	(void)p;
	return 0;
}
bool copy_engine_busy(const struct poller *p)
{
	(void)p;
	return false;
}
void copy_engine_free(struct poller *p)
{
	(void)p;
}
int fabric_progress(struct poller *p)
{
	(void)p;
	return 0;
}
bool fabric_busy(const struct poller *p)
{
	(void)p;
	return false;
}
int fabric_wait_fds(struct poller *p, int *fds, int max)
{
	(void)p;
	(void)fds;
	(void)max;
	return 0;
}
int fabric_trywait(struct poller *p)
{
	(void)p;
	return 0;
}
int fabric_sleep_cap_ms(void)
{
	return 0;
}
void fabric_cancel_all(struct poller *p)
{
	(void)p;
}
int fileio_progress(struct poller *p)
{
	(void)p;
	return 0;
}
bool fileio_busy(const struct poller *p)
{
	(void)p;
	return false;
}
void fileio_cancel_all(struct poller *p)
{
	(void)p;
}
void stats_queue_attach(struct queue *qq)
{
	(void)qq;
}
void stats_queue_retire(struct queue *qq)
{
	(void)qq;
}
void stats_tsc_recalibrate(struct stats_poller *sp, uint64_t t, uint64_t tsc)
{
	(void)sp;
	(void)t;
	(void)tsc;
}
void stats_runs_end(struct stats_poller *sp, uint64_t t)
{
	(void)sp;
	(void)t;
}
void stats_run_close(struct queue *qq, uint64_t done)
{
	(void)qq;
	(void)done;
}
void stats_run_switch(struct queue *qq, uint64_t submit_ns, uint32_t flags)
{
	(void)qq;
	(void)submit_ns;
	(void)flags;
}
void stats_publish(struct poller *p)
{
	(void)p;
}
void stats_publish_poller(struct stats_poller *sp)
{
	(void)sp;
}
