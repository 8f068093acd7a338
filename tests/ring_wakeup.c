/* ring_wakeup.c - NEED_WAKEUP handshake: a consumer that sleeps on an eventfd after every entry never misses one. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#define WAKE_CYCLES (1000ull * 1000)
/* A sleeping consumer that sees nothing for this long has lost a wake-up:
 * the producer only ever waits for the consumer's acknowledgement. */
#define SLEEP_TIMEOUT_MS 5000
#define DEEP_SLEEP_NS 5000.0

struct wake_entry {
	uint64_t seq;
	uint64_t pad[7];
};

/*
 * How the producer times each publish against the consumer's way to sleep.
 * PUBLISH_AT_ONCE races the consumer's prepare_sleep(); the other two wait
 * until it has asked for a doorbell, and PUBLISH_ASLEEP waits on until it
 * has decided to sleep and then DEEP_SLEEP_NS more, so that it is blocked
 * in poll() (with membarrier, the barrier alone can take longer than that).
 */
enum publish_timing { PUBLISH_AT_ONCE, PUBLISH_AFTER_FLAG, PUBLISH_ASLEEP, PUBLISH_MODES };

struct wake_test {
	struct dp_ring prod __attribute__((aligned(128)));
	struct dp_ring cons __attribute__((aligned(128)));
	/* Entries the consumer has taken: the producer publishes entry i
	 * only once this reads i, so each cycle starts from an empty ring. */
	uint64_t acked __attribute__((aligned(128)));
	/* Entries taken + 1 when the consumer decided to sleep for the next. */
	uint64_t asleep __attribute__((aligned(128)));
	int stop __attribute__((aligned(128)));
	int db[2]; /* doorbell: the consumer's end, the producer's end */
	uint64_t cycles;
	bool light; /* a light producer; the consumer arms with membarrier */

	/* Consumer's results. */
	uint64_t slept;	    /* prepare_sleep() said yes and a doorbell came */
	uint64_t raced;	    /* prepare_sleep() found an entry and said no */
	uint64_t bad_seq;   /* entries out of order */
	uint64_t lost_wake; /* slept SLEEP_TIMEOUT_MS with an entry waiting */
	int cons_err;
	long cons_nvcsw; /* voluntary context switches: real sleeps in the kernel */

	/* Producer's results. */
	uint64_t rung;
	int prod_err;
};

static bool wait_until(struct wake_test *t, bool (*cond)(struct wake_test *, uint64_t), uint64_t i)
{
	uint32_t rounds = 0;
	double start = 0;

	while (!cond(t, i)) {
		if (__atomic_load_n(&t->stop, __ATOMIC_RELAXED))
			return false;
		ring_test_spin(&rounds);
		if (rounds % 65536 == 1) {
			double now = ring_test_now();

			if (rounds == 1)
				start = now;
			else if (now - start > 2.0 * SLEEP_TIMEOUT_MS / 1000)
				return false;
		}
	}
	return true;
}

static bool consumer_acked(struct wake_test *t, uint64_t i)
{
	return __atomic_load_n(&t->acked, __ATOMIC_ACQUIRE) == i;
}

static bool consumer_wants_doorbell(struct wake_test *t, uint64_t i)
{
	(void)i;
	return __atomic_load_n(&t->cons.hdr->flags, __ATOMIC_RELAXED) & DP_RING_NEED_WAKEUP;
}

static bool consumer_asleep(struct wake_test *t, uint64_t i)
{
	return __atomic_load_n(&t->asleep, __ATOMIC_RELAXED) == i + 1;
}

static void *producer(void *p)
{
	struct wake_test *t = p;
	struct wake_entry e = {0};
	uint64_t rng = 0x5eed;

	ring_test_pin(0);
	for (uint64_t i = 0; i < t->cycles; i++) {
		enum publish_timing timing = xorshift64s(&rng) % PUBLISH_MODES;
		int rc;

		if (!wait_until(t, consumer_acked, i)) {
			t->prod_err = -ETIMEDOUT;
			break;
		}
		if (timing != PUBLISH_AT_ONCE && !wait_until(t, consumer_wants_doorbell, i)) {
			t->prod_err = -ETIMEDOUT;
			break;
		}
		if (timing == PUBLISH_ASLEEP) {
			double start;

			if (!wait_until(t, consumer_asleep, i)) {
				t->prod_err = -ETIMEDOUT;
				break;
			}
			start = ring_test_now();

			while ((ring_test_now() - start) * 1e9 < DEEP_SLEEP_NS)
				ring_test_relax();
		}
		e.seq = i;
		rc = dp_ring_enqueue(&t->prod, &e);
		if (rc != 1) {
			t->prod_err = rc < 0 ? rc : -ENOSPC;
			break;
		}
		if (dp_ring_needs_wakeup(&t->prod)) {
			t->rung++;
			if ((rc = dp_doorbell_ring(t->db[1]))) {
				t->prod_err = rc;
				break;
			}
		}
	}
	if (t->prod_err)
		__atomic_store_n(&t->stop, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* Goes to sleep whenever the ring is empty, which is after every entry. */
static void *consumer(void *p)
{
	struct wake_test *t = p;
	struct wake_entry e;
	struct rusage ru;
	uint64_t expected = 0;

	ring_test_pin(1);
	while (expected < t->cycles && !__atomic_load_n(&t->stop, __ATOMIC_RELAXED)) {
		struct pollfd pfd = {.fd = t->db[0], .events = POLLIN};
		int rc = dp_ring_dequeue(&t->cons, &e);

		if (rc < 0) {
			t->cons_err = rc;
			break;
		}
		if (rc == 1) {
			t->bad_seq += e.seq != expected;
			expected++;
			__atomic_store_n(&t->acked, expected, __ATOMIC_RELEASE);
			continue;
		}
		/* Doorbells rung for an entry the consumer took without
		 * sleeping (a producer that saw the flag of a raced sleep)
		 * would end the next sleep at once: gone before it arms. */
		dp_doorbell_drain(t->db[0]);
		if (!(t->light ? dp_ring_prepare_sleep_asym(&t->cons)
			       : dp_ring_prepare_sleep(&t->cons))) {
			t->raced++;
			continue;
		}
		__atomic_store_n(&t->asleep, expected + 1, __ATOMIC_RELAXED);
		rc = poll(&pfd, 1, SLEEP_TIMEOUT_MS);
		if (rc == 0) {
			/* Nothing rang. An entry waiting now is a lost wake-up. */
			t->lost_wake += dp_ring_count(&t->cons) > 0;
			t->cons_err = -ETIMEDOUT;
			break;
		}
		if (rc < 0) {
			if (errno != EINTR) {
				t->cons_err = -errno;
				break;
			}
		} else {
			dp_doorbell_drain(t->db[0]);
			t->slept++;
		}
		dp_ring_finish_sleep(&t->cons);
	}
	if (t->cons_err)
		__atomic_store_n(&t->stop, 1, __ATOMIC_RELAXED);
	if (getrusage(RUSAGE_THREAD, &ru) == 0)
		t->cons_nvcsw = ru.ru_nvcsw;
	return NULL;
}

/* A million cycles take 15-20 s on a quiet two-vCPU VM and up to 100 s on a
 * loaded one (each real sleep costs a wake-up through the scheduler). */
static void sleep_wake_cycles(uint32_t seq_off, bool light)
{
	struct wake_test *t = aligned_alloc(DP_RING_ALIGN, sizeof(*t));
	void *mem;
	pthread_t pt, ct;
	double t0, secs;

	cr_assert_not_null(t);
	memset(t, 0, sizeof(*t));
	t->cycles = ring_test_scaled(WAKE_CYCLES);
	mem = ring_test_new_seq(8, sizeof(struct wake_entry), seq_off, 0xFFFFFF00u, &t->prod,
				&t->cons);
	cr_assert_not_null(mem);
	if (light) {
		/* The client's SQ: no fence after its commit (docs/ring.md,
		 * "Light producers"). */
		if (!dp_ring_asym_available())
			cr_skip_test("no membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) here");
		cr_assert_eq(dp_ring_light_register(), 0);
		dp_ring_set_light(&t->prod);
		t->light = true;
	}
	/* The service's doorbell: a socketpair, never blocking. */
	cr_assert_eq(dp_doorbell_pair(t->db), 0);

	t0 = ring_test_now();
	cr_assert_eq(pthread_create(&ct, NULL, consumer, t), 0);
	cr_assert_eq(pthread_create(&pt, NULL, producer, t), 0);
	pthread_join(pt, NULL);
	pthread_join(ct, NULL);
	secs = ring_test_now() - t0;
	cr_log_info("%lu cycles in %.2f s (%.2f us each): slept %lu, raced %lu, doorbells %lu, "
		    "consumer context switches %ld",
		    (unsigned long)t->cycles, secs, secs * 1e6 / (double)t->cycles,
		    (unsigned long)t->slept, (unsigned long)t->raced, (unsigned long)t->rung,
		    t->cons_nvcsw);

	cr_assert_eq(t->lost_wake, 0, "lost wake-up after %lu cycles", (unsigned long)t->acked);
	cr_assert_eq(t->cons_err, 0, "consumer: %s after %lu cycles", strerror(-t->cons_err),
		     (unsigned long)t->acked);
	cr_assert_eq(t->prod_err, 0, "producer: %s after %lu cycles", strerror(-t->prod_err),
		     (unsigned long)t->acked);
	cr_assert_eq(t->bad_seq, 0);
	cr_assert_eq(t->acked, t->cycles);
	/* The sleep path must really have been taken: a third of the cycles
	 * publish only once the consumer has decided to sleep, and another
	 * third once it has asked for a doorbell (with membarrier most of
	 * those find the entry in their check, and do not sleep). */
	cr_assert_geq(t->slept, t->cycles / 4, "slept only %lu times", (unsigned long)t->slept);
	cr_assert_geq(t->rung, t->slept, "every sleep was ended by a doorbell");
	close(t->db[0]);
	close(t->db[1]);
	free(mem);
	free(t);
}

Test(ring_wakeup, sleep_wake_cycles, .timeout = 300)
{
	sleep_wake_cycles(DP_RING_NO_SEQ, false);
}

/* With sequence words the consumer's check before sleeping is the next
 * entry's word, not the tail (the word in the last 4 bytes: pad[6]'s high
 * half is the ring's). */
Test(ring_wakeup, sleep_wake_cycles_seq, .timeout = 300)
{
	sleep_wake_cycles(60, false);
}

/* The SQ as a client and the service's pollers use it where the kernel has
 * membarrier: the producer skips its fence, the consumer's barrier is
 * membarrier's. */
Test(ring_wakeup, sleep_wake_cycles_light, .timeout = 300)
{
	sleep_wake_cycles(60, true);
}
