/* ring_stress.c - two pinned threads, then two processes, stream stamped entries; nothing lost, duplicated or torn. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define STRESS_ENTRIES (50ull * 1000 * 1000)
#define MAX_BURST 64u
#define STALL_SECONDS 10.0

/* One 64-byte entry: a sequence number, a payload derived from it and a
 * checksum of the payload. A lost or duplicated entry breaks the sequence;
 * a torn one (read while being overwritten) breaks the checksum or the
 * payload. On a ring with sequence words, `word` is the ring's. */
#define NPAY 5
struct stress_entry {
	uint64_t seq;
	uint64_t payload[NPAY];
	uint32_t word;
	uint32_t zero;
	uint64_t checksum;
};
#define STRESS_SEQ_OFF offsetof(struct stress_entry, word)
_Static_assert(sizeof(struct stress_entry) == 64, "64-byte entries");

static uint64_t payload_word(uint64_t seq, unsigned k)
{
	return (seq + 1) * 0x9E3779B97F4A7C15ull ^ (k + 1) * 0xD1B54A32D192ED03ull;
}

static uint64_t payload_checksum(const struct stress_entry *e)
{
	uint64_t c = 0xcbf29ce484222325ull ^ e->seq;

	for (unsigned k = 0; k < NPAY; k++)
		c = (c ^ e->payload[k]) * 0x100000001b3ull;
	return c;
}

static void stamp(struct stress_entry *e, uint64_t seq)
{
	e->seq = seq;
	for (unsigned k = 0; k < NPAY; k++)
		e->payload[k] = payload_word(seq, k);
	e->checksum = payload_checksum(e);
}

enum batch_mode { BATCH_BURST, BATCH_BULK, BATCH_IN_PLACE };

/* The sending half of a stream: entries 0..count-1 in random batches, each
 * batch through a random API (burst, bulk, or reserve/commit in place). */
struct stream_tx {
	struct dp_ring *r;
	uint64_t next; /* first entry of the current batch */
	uint64_t count;
	uint64_t rng;
	uint32_t batch, placed;
	enum batch_mode mode;
	struct stress_entry buf[MAX_BURST];
} __attribute__((aligned(DP_RING_ALIGN))); /* apart from the other thread's state */

struct stream_rx {
	struct dp_ring *r;
	uint64_t expected, received, count, rng;
	uint64_t lost, duplicated, torn;
	uint64_t first_bad; /* sequence number of the first bad entry */
	int err;
	struct stress_entry buf[MAX_BURST];
} __attribute__((aligned(DP_RING_ALIGN)));

static bool tx_done(const struct stream_tx *tx)
{
	return tx->placed == tx->batch && tx->next + tx->batch == tx->count;
}

/* Returns the entries moved by this step (0: ring full or done), or -EPROTO. */
static int tx_step(struct stream_tx *tx)
{
	struct stress_entry *src = tx->buf + tx->placed;
	uint32_t want, idx;
	int k;

	if (tx_done(tx))
		return 0;
	if (tx->placed == tx->batch) {
		tx->next += tx->batch;
		uint64_t r = xorshift64s(&tx->rng);
		tx->batch = 1 + (uint32_t)(r % MAX_BURST);
		if (tx->batch > tx->count - tx->next)
			tx->batch = (uint32_t)(tx->count - tx->next);
		tx->placed = 0;
		tx->mode = (enum batch_mode)((r >> 32) % 3);
		if (tx->mode != BATCH_IN_PLACE)
			for (uint32_t i = 0; i < tx->batch; i++)
				stamp(&tx->buf[i], tx->next + i);
		src = tx->buf;
	}
	want = tx->batch - tx->placed;
	switch (tx->mode) {
	case BATCH_BURST:
		k = dp_ring_enqueue_burst(tx->r, src, want);
		break;
	case BATCH_BULK:
		/* All or nothing, so never more than the ring holds. */
		if (want > dp_ring_size(tx->r))
			want = dp_ring_size(tx->r);
		k = dp_ring_enqueue_bulk(tx->r, src, want);
		break;
	default:
		k = dp_ring_reserve(tx->r, want, &idx);
		for (int i = 0; i < k; i++)
			stamp(dp_ring_slot(tx->r, idx + (uint32_t)i),
			      tx->next + tx->placed + (uint32_t)i);
		if (k > 0)
			dp_ring_commit(tx->r, (uint32_t)k);
		break;
	}
	if (k > 0)
		tx->placed += (uint32_t)k;
	return k;
}

static void tx_init(struct stream_tx *tx, struct dp_ring *r, uint64_t count, uint64_t seed)
{
	memset(tx, 0, sizeof(*tx));
	tx->r = r;
	tx->count = count;
	tx->rng = seed;
}

static void rx_check(struct stream_rx *rx, const struct stress_entry *e)
{
	bool intact = e->checksum == payload_checksum(e);

	for (unsigned k = 0; intact && k < NPAY; k++)
		intact = e->payload[k] == payload_word(e->seq, k);
	if (e->seq != rx->expected || !intact) {
		if (!rx->lost && !rx->duplicated && !rx->torn)
			rx->first_bad = rx->expected;
		if (!intact)
			rx->torn++;
		else if (e->seq > rx->expected)
			rx->lost += e->seq - rx->expected;
		else
			rx->duplicated++;
	}
	/* Resynchronise on an intact entry so one fault is counted once. */
	rx->expected = intact ? e->seq + 1 : rx->expected + 1;
	rx->received++;
}

/* Returns the entries taken by this step (0: ring empty or done), or -EPROTO. */
static int rx_step(struct stream_rx *rx)
{
	uint64_t r;
	uint32_t n, idx;
	int k;

	if (rx->received == rx->count)
		return 0;
	r = xorshift64s(&rx->rng);
	n = 1 + (uint32_t)(r % MAX_BURST);
	if (n > rx->count - rx->received)
		n = (uint32_t)(rx->count - rx->received);
	switch ((enum batch_mode)((r >> 32) % 3)) {
	case BATCH_BURST:
		k = dp_ring_dequeue_burst(rx->r, rx->buf, n);
		break;
	case BATCH_BULK:
		if (n > dp_ring_size(rx->r))
			n = dp_ring_size(rx->r);
		k = dp_ring_dequeue_bulk(rx->r, rx->buf, n);
		break;
	default:
		k = dp_ring_peek(rx->r, n, &idx);
		for (int i = 0; i < k; i++)
			rx_check(rx, dp_ring_slot(rx->r, idx + (uint32_t)i));
		if (k > 0)
			dp_ring_release(rx->r, (uint32_t)k);
		return k;
	}
	for (int i = 0; i < k; i++)
		rx_check(rx, &rx->buf[i]);
	return k;
}

static void rx_init(struct stream_rx *rx, struct dp_ring *r, uint64_t count, uint64_t seed)
{
	memset(rx, 0, sizeof(*rx));
	rx->r = r;
	rx->count = count;
	rx->rng = seed;
}

/* Watches for a stream that stops moving (a lost entry leaves the receiver
 * waiting forever): -ETIMEDOUT after STALL_SECONDS without progress. */
struct stall_watch {
	uint32_t idle;
	double since;
};

static int stall_check(struct stall_watch *w, bool progressed)
{
	if (progressed) {
		w->idle = 0;
		return 0;
	}
	ring_test_spin(&w->idle);
	if (w->idle % 65536 == 1) {
		double now = ring_test_now();

		if (w->idle == 1)
			w->since = now;
		else if (now - w->since > STALL_SECONDS)
			return -ETIMEDOUT;
	}
	return 0;
}

/* ---- two threads ---- */

struct thread_arg {
	int cpu;
	int err;
	void *stream;
};

static void *tx_thread(void *p)
{
	struct thread_arg *a = p;
	struct stall_watch w = {0};
	int k = 0;

	ring_test_pin(a->cpu);
	while (!tx_done(a->stream)) {
		k = tx_step(a->stream);
		if (k < 0 || (a->err = stall_check(&w, k > 0)))
			break;
	}
	if (k < 0)
		a->err = k;
	return NULL;
}

static void *rx_thread(void *p)
{
	struct thread_arg *a = p;
	struct stream_rx *rx = a->stream;
	struct stall_watch w = {0};
	int k = 0;

	ring_test_pin(a->cpu);
	while (rx->received < rx->count) {
		k = rx_step(rx);
		if (k < 0 || (a->err = stall_check(&w, k > 0)))
			break;
	}
	if (k < 0)
		a->err = k;
	return NULL;
}

static void stream_between_threads(uint32_t entries, uint32_t start, uint64_t count,
				   uint32_t seq_off)
{
	/* Each thread writes its view on every call: one cache line each. */
	struct dp_ring prod __attribute__((aligned(DP_RING_ALIGN)));
	struct dp_ring cons __attribute__((aligned(DP_RING_ALIGN)));
	void *mem = ring_test_new_seq(entries, sizeof(struct stress_entry), seq_off, start, &prod,
				      &cons);
	struct stream_tx *tx = aligned_alloc(DP_RING_ALIGN, sizeof(*tx));
	struct stream_rx *rx = aligned_alloc(DP_RING_ALIGN, sizeof(*rx));
	struct thread_arg ta = {.cpu = 0}, ra = {.cpu = 1};
	pthread_t tt, rt;
	double t0;

	cr_assert(mem && tx && rx);
	tx_init(tx, &prod, count, 0x1234567ull);
	rx_init(rx, &cons, count, 0x89abcdefull);
	ta.stream = tx;
	ra.stream = rx;
	t0 = ring_test_now();
	cr_assert_eq(pthread_create(&rt, NULL, rx_thread, &ra), 0);
	cr_assert_eq(pthread_create(&tt, NULL, tx_thread, &ta), 0);
	pthread_join(tt, NULL);
	pthread_join(rt, NULL);
	cr_log_info("%lu entries through a %u-slot ring in %.2f s", (unsigned long)count, entries,
		    ring_test_now() - t0);

	cr_assert_eq(ta.err, 0, "producer: %s", strerror(-ta.err));
	cr_assert_eq(ra.err, 0, "consumer: %s", strerror(-ra.err));
	cr_assert_eq(rx->lost, 0, "lost %lu, first at seq %lu", (unsigned long)rx->lost,
		     (unsigned long)rx->first_bad);
	cr_assert_eq(rx->duplicated, 0, "duplicated %lu, first at seq %lu",
		     (unsigned long)rx->duplicated, (unsigned long)rx->first_bad);
	cr_assert_eq(rx->torn, 0, "torn %lu, first at seq %lu", (unsigned long)rx->torn,
		     (unsigned long)rx->first_bad);
	cr_assert_eq(rx->received, count);
	cr_assert_eq(rx->expected, count);
	cr_assert_eq(prod.hdr->tail, start + (uint32_t)count);
	cr_assert_eq(cons.hdr->head, start + (uint32_t)count);
	free(tx);
	free(rx);
	free(mem);
}

Test(ring_stress, two_threads, .timeout = 120)
{
	/* Starts just below 2^32 so the indices wrap early in the run. */
	stream_between_threads(1024, 0xFFFFF000u, ring_test_scaled(STRESS_ENTRIES), DP_RING_NO_SEQ);
}

/* The same with sequence words, as the service's queues have: the consumer
 * finds entries by their words, never by the tail. */
Test(ring_stress, two_threads_seq, .timeout = 120)
{
	stream_between_threads(1024, 0xFFFFF000u, ring_test_scaled(STRESS_ENTRIES), STRESS_SEQ_OFF);
}

/* A ring smaller than a burst: full and empty every few entries, so the
 * cached indices are reloaded all the time. */
Test(ring_stress, two_threads_tiny_ring, .timeout = 120)
{
	stream_between_threads(8, 0xFFFFFFF0u, ring_test_scaled(STRESS_ENTRIES / 10),
			       DP_RING_NO_SEQ);
}

Test(ring_stress, two_threads_tiny_ring_seq, .timeout = 120)
{
	stream_between_threads(8, 0xFFFFFFF0u, ring_test_scaled(STRESS_ENTRIES / 10),
			       STRESS_SEQ_OFF);
}

/* ---- two processes ---- */

enum child_exit { CHILD_OK, CHILD_ATTACH, CHILD_DATA, CHILD_EPROTO, CHILD_STALL };

/*
 * One process's side of a queue pair: sends `count` entries on `out` and
 * receives `count` on `in`, interleaving the two so that each process is one
 * thread. Returns 0, -EPROTO or -ETIMEDOUT; data errors are left in *rx.
 */
static int duplex(struct dp_ring *out, struct dp_ring *in, uint64_t count, uint64_t seed,
		  struct stream_rx *rx)
{
	struct stream_tx *tx = aligned_alloc(DP_RING_ALIGN, sizeof(*tx));
	struct stall_watch w = {0};
	int err = 0;

	if (!tx)
		return -ENOMEM;
	tx_init(tx, out, count, seed);
	rx_init(rx, in, count, seed ^ 0xfeedull);
	while (!err && (!tx_done(tx) || rx->received < rx->count)) {
		int sent = tx_done(tx) ? 0 : tx_step(tx);
		int got = rx_step(rx);

		if (sent < 0 || got < 0)
			err = sent < 0 ? sent : got;
		else
			err = stall_check(&w, sent > 0 || got > 0);
	}
	free(tx);
	return err;
}

static int child_main(int fd, uint64_t count, const struct dp_ring_layout *l)
{
	struct dp_ring_pair p;
	struct stream_rx *rx = aligned_alloc(DP_RING_ALIGN, sizeof(*rx));
	int err;

	/* Die with the parent: a failed assertion there must not leave us spinning. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	ring_test_pin(1);
	if (!rx || dp_ring_pair_attach_seq(&p, fd, l, l))
		return CHILD_ATTACH;
	/* The attacher produces on the SQ and consumes the CQ. */
	err = duplex(&p.sq, &p.cq, count, 0xc0ffeeull, rx);
	if (err == -EPROTO)
		return CHILD_EPROTO;
	if (err)
		return CHILD_STALL;
	if (rx->lost || rx->duplicated || rx->torn || rx->expected != count)
		return CHILD_DATA;
	dp_ring_pair_close(&p);
	return CHILD_OK;
}

/* The pair's memfd crosses fork() (CLOEXEC only matters at exec) and the
 * child maps it again with dp_ring_pair_attach(), as a client would after
 * receiving it over SCM_RIGHTS. Under TSan each process is checked on its
 * own: TSan cannot see the other side's accesses, so the two-thread tests
 * are the ones that check the ordering there. */
static void two_processes(uint32_t seq_off)
{
	struct dp_ring_layout l = {1024, sizeof(struct stress_entry), seq_off};
	uint64_t count = ring_test_scaled(STRESS_ENTRIES);
	struct dp_ring_pair p;
	struct stream_rx *rx = aligned_alloc(DP_RING_ALIGN, sizeof(*rx));
	int status, err;
	pid_t child;
	double t0;

	cr_assert_not_null(rx);
	cr_assert_eq(dp_ring_pair_create_seq(&p, "stress", &l, &l, 0xFFFFF000u), 0);
	t0 = ring_test_now();
	child = fork();
	cr_assert_geq(child, 0);
	if (child == 0)
		_exit(child_main(p.fd, count, &l));

	ring_test_pin(0);
	/* The creator consumes the SQ and produces on the CQ. */
	err = duplex(&p.cq, &p.sq, count, 0xc0ffeeull, rx);
	if (err)
		kill(child, SIGKILL);
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_log_info("%lu entries each way between two processes in %.2f s", (unsigned long)count,
		    ring_test_now() - t0);

	cr_assert_eq(err, 0, "parent: %s", strerror(-err));
	cr_assert(WIFEXITED(status), "child killed by signal %d", WTERMSIG(status));
	cr_assert_eq(WEXITSTATUS(status), CHILD_OK,
		     "child exit %d (1 attach, 2 data, 3 EPROTO, 4 stall)", WEXITSTATUS(status));
	cr_assert_eq(rx->lost, 0, "lost %lu from seq %lu", (unsigned long)rx->lost,
		     (unsigned long)rx->first_bad);
	cr_assert_eq(rx->duplicated, 0, "duplicated %lu", (unsigned long)rx->duplicated);
	cr_assert_eq(rx->torn, 0, "torn %lu", (unsigned long)rx->torn);
	cr_assert_eq(rx->expected, count);
	cr_assert_eq(p.sq.hdr->tail, 0xFFFFF000u + (uint32_t)count);
	cr_assert_eq(p.cq.hdr->head, 0xFFFFF000u + (uint32_t)count);
	free(rx);
	dp_ring_pair_close(&p);
}

Test(ring_stress, two_processes, .timeout = 120)
{
	two_processes(DP_RING_NO_SEQ);
}

Test(ring_stress, two_processes_seq, .timeout = 120)
{
	two_processes(STRESS_SEQ_OFF);
}
