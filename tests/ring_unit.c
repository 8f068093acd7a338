/* ring_unit.c - single-threaded ring behaviour: capacity, wrap-around, batches, validation, corrupt peers. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#define ESIZE 64u

/* Every word of an entry depends on its sequence number, so an entry read
 * from the wrong slot or half-overwritten does not pass entry_matches(). */
static void entry_fill(void *entry, uint32_t esize, uint64_t seq)
{
	uint64_t *w = entry;

	for (uint32_t i = 0; i < esize / 8; i++)
		w[i] = i ? (seq + 1) * 0x9E3779B97F4A7C15ull + i : seq;
}

/* A ring's sequence word (seq_off, not DP_RING_NO_SEQ) is the ring's,
 * not the entry's: not compared. */
static bool entry_matches(const void *entry, uint32_t esize, uint64_t seq, uint32_t seq_off)
{
	uint64_t want[DP_RING_MAX_ENTRY_SIZE / 8];

	entry_fill(want, esize, seq);
	if (seq_off != DP_RING_NO_SEQ)
		memcpy((uint8_t *)want + seq_off, (const uint8_t *)entry + seq_off, 4);
	return memcmp(entry, want, esize) == 0;
}

/* Enqueues `n` entries numbered from *seq with one bulk or burst call. */
static int put(struct dp_ring *r, uint64_t *seq, uint32_t n, bool bulk)
{
	uint8_t buf[64 * 1024];
	int k;

	cr_assert_leq(n * r->entry_size, sizeof(buf));
	for (uint32_t i = 0; i < n; i++)
		entry_fill(buf + i * r->entry_size, r->entry_size, *seq + i);
	k = bulk ? dp_ring_enqueue_bulk(r, buf, n) : dp_ring_enqueue_burst(r, buf, n);
	if (k > 0)
		*seq += (uint32_t)k;
	return k;
}

/* Dequeues up to `n` entries and checks that they are numbered from *seq. */
static int get(struct dp_ring *r, uint64_t *seq, uint32_t n, bool bulk)
{
	uint8_t buf[64 * 1024];
	int k;

	cr_assert_leq(n * r->entry_size, sizeof(buf));
	k = bulk ? dp_ring_dequeue_bulk(r, buf, n) : dp_ring_dequeue_burst(r, buf, n);
	for (int i = 0; i < k; i++) {
		cr_assert(entry_matches(buf + i * r->entry_size, r->entry_size, *seq, r->seq_off),
			  "entry %d of a batch of %d: expected seq %lu", i, k, (unsigned long)*seq);
		++*seq;
	}
	return k;
}

static uint32_t shared_tail(const struct dp_ring *r)
{
	return __atomic_load_n(&r->hdr->tail, __ATOMIC_RELAXED);
}

static uint32_t shared_head(const struct dp_ring *r)
{
	return __atomic_load_n(&r->hdr->head, __ATOMIC_RELAXED);
}

Test(ring_unit, layout_and_sizes, .timeout = 10)
{
	struct dp_ring_pair p;

	cr_assert_eq(dp_ring_bytes(16, 64), 512 + 16 * 64);
	cr_assert_eq(dp_ring_bytes(1, 8), 640, "header + one 8-byte entry, rounded to 128");
	cr_assert_eq(sizeof(struct dp_ring_pair_hdr), 32);

	cr_assert_eq(dp_ring_pair_create(&p, "unit", 16, 64, 32, 32, 0), 0);
	const struct dp_ring_pair_hdr *ph = p.base;
	cr_assert_eq(ph->magic, DP_RING_PAIR_MAGIC);
	cr_assert_eq(ph->sq_off, DP_RING_ALIGN);
	cr_assert_eq(ph->cq_off, DP_RING_ALIGN + dp_ring_bytes(16, 64));
	cr_assert_eq(ph->map_size % (uint64_t)sysconf(_SC_PAGESIZE), 0);
	cr_assert_geq(ph->map_size, ph->cq_off + dp_ring_bytes(32, 32));
	cr_assert_eq(p.map_size, ph->map_size);
	cr_assert_eq((uint8_t *)p.sq.hdr, (uint8_t *)p.base + ph->sq_off);
	cr_assert_eq(p.sq.hdr->entries_off, sizeof(struct dp_ring_hdr));
	cr_assert_eq(p.sq.hdr->ring_bytes, dp_ring_bytes(16, 64));
	cr_assert_eq(dp_ring_size(&p.sq), 16);
	cr_assert_eq(dp_ring_size(&p.cq), 32);
	dp_ring_pair_close(&p);
	cr_assert_eq(p.fd, -1);
	cr_assert_null(p.base);
}

static void empty_and_full(uint32_t seq_off)
{
	struct dp_ring prod, cons;
	uint64_t wseq = 0, rseq = 0;
	uint8_t entry[ESIZE];
	uint32_t idx;
	void *mem = ring_test_new_seq(8, ESIZE, seq_off, 0, &prod, &cons);

	cr_assert_not_null(mem);
	cr_assert_eq(dp_ring_count(&cons), 0);
	cr_assert_eq(dp_ring_dequeue(&cons, entry), 0, "empty ring yields nothing");
	cr_assert_eq(get(&cons, &rseq, 8, false), 0);
	cr_assert_eq(dp_ring_peek(&cons, 1, &idx), 0);
	cr_assert_eq(dp_ring_peek_bulk(&cons, 1, &idx), 0);

	for (int i = 0; i < 8; i++)
		cr_assert_eq(put(&prod, &wseq, 1, true), 1, "slot %d of 8", i);
	cr_assert_eq(dp_ring_count(&cons), 8);
	cr_assert_eq(shared_tail(&prod) - shared_head(&prod), 8);
	cr_assert_eq(put(&prod, &wseq, 1, true), 0, "full ring takes no bulk entry");
	cr_assert_eq(put(&prod, &wseq, 4, false), 0, "full ring takes no burst entry");
	cr_assert_eq(dp_ring_reserve(&prod, 1, &idx), 0);
	cr_assert_eq(shared_tail(&prod), 8, "a refused enqueue publishes nothing");

	cr_assert_eq(get(&cons, &rseq, 1, true), 1);
	cr_assert_eq(put(&prod, &wseq, 1, true), 1, "one freed slot is reusable");
	cr_assert_eq(put(&prod, &wseq, 1, true), 0);
	cr_assert_eq(get(&cons, &rseq, 8, true), 8);
	cr_assert_eq(dp_ring_count(&cons), 0);
	cr_assert_eq(get(&cons, &rseq, 1, false), 0);
	cr_assert_eq(rseq, 9);
	free(mem);
}

Test(ring_unit, empty_and_full, .timeout = 10)
{
	empty_and_full(DP_RING_NO_SEQ);
}

/* With sequence words, which the consumer polls instead of the tail. */
Test(ring_unit, empty_and_full_seq, .timeout = 10)
{
	empty_and_full(20);
}

static void single_slot_ring(uint32_t seq_off)
{
	struct dp_ring prod, cons;
	uint64_t wseq = 0, rseq = 0;
	void *mem = ring_test_new_seq(1, 8, seq_off, UINT32_MAX, &prod, &cons);

	cr_assert_not_null(mem);
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(put(&prod, &wseq, 2, false), 1);
		cr_assert_eq(put(&prod, &wseq, 1, true), 0);
		cr_assert_eq(get(&cons, &rseq, 2, false), 1);
		cr_assert_eq(get(&cons, &rseq, 1, true), 0);
	}
	free(mem);
}

Test(ring_unit, single_slot_ring, .timeout = 10)
{
	single_slot_ring(DP_RING_NO_SEQ);
}

/* With sequence words, which the consumer polls instead of the tail. */
Test(ring_unit, single_slot_ring_seq, .timeout = 10)
{
	single_slot_ring(4);
}

/* Free-running indices cross 2^32: fullness, emptiness and order must not
 * notice. */
static void wrap_around_2_32(uint32_t seq_off)
{
	static const uint32_t starts[] = {0xFFFFFFF0u, 0xFFFFFFFFu, 0xFFFFFFF9u, 0x7FFFFFFFu};

	for (size_t s = 0; s < sizeof(starts) / sizeof(starts[0]); s++) {
		struct dp_ring prod, cons;
		uint64_t wseq = 0, rseq = 0;
		bool wrapped = false;
		void *mem = ring_test_new_seq(16, ESIZE, seq_off, starts[s], &prod, &cons);

		cr_assert_not_null(mem);
		cr_assert_eq(shared_tail(&prod), starts[s]);
		/* Fill across the wrap: tail ends below head numerically. */
		cr_assert_eq(put(&prod, &wseq, 16, true), 16);
		cr_assert_eq(shared_tail(&prod), starts[s] + 16u);
		cr_assert_eq(dp_ring_count(&cons), 16);
		cr_assert_eq(put(&prod, &wseq, 1, false), 0, "full across the wrap");
		cr_assert_eq(get(&cons, &rseq, 16, true), 16);
		cr_assert_eq(get(&cons, &rseq, 1, false), 0, "empty across the wrap");

		for (uint32_t i = 0; rseq < 1000; i++) {
			uint32_t n = 1 + i % 16;

			cr_assert_eq(put(&prod, &wseq, n, i & 1), (int)n);
			cr_assert_eq(get(&cons, &rseq, n, !(i & 1)), (int)n);
			wrapped |= shared_tail(&prod) < starts[s];
		}
		cr_assert(wrapped || starts[s] == 0x7FFFFFFFu, "the run crossed 2^32");
		free(mem);
	}
}

Test(ring_unit, wrap_around_2_32, .timeout = 10)
{
	wrap_around_2_32(DP_RING_NO_SEQ);
}

/* With sequence words, which the consumer polls instead of the tail. */
Test(ring_unit, wrap_around_2_32_seq, .timeout = 10)
{
	wrap_around_2_32(20);
}

/* Every batch size at every slot offset, so both the one-piece and the
 * split (wrapping) copy run. */
static void batch_sizes_every_offset(uint32_t seq_off)
{
	static const uint32_t sizes[] = {1, 2, 16, 256};

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t entries = sizes[s];
		struct dp_ring prod, cons;
		uint64_t wseq = 0, rseq = 0;
		void *mem = ring_test_new_seq(entries, ESIZE, seq_off, 0, &prod, &cons);

		cr_assert_not_null(mem);
		/* Every offset of the small rings, a spread of the big one. */
		uint32_t step = entries <= 16 ? 1 : 37;

		for (uint32_t off = 0; off < entries; off += step) {
			/* Move both indices to slot `off`. */
			while ((shared_tail(&prod) & (entries - 1)) != off) {
				cr_assert_eq(put(&prod, &wseq, 1, true), 1);
				cr_assert_eq(get(&cons, &rseq, 1, true), 1);
			}
			for (uint32_t n = 1; n <= entries; n++) {
				uint32_t tail = shared_tail(&prod);

				cr_assert_eq(put(&prod, &wseq, n, true), (int)n, "bulk %u at %u", n,
					     off);
				cr_assert_eq(shared_tail(&prod), tail + n);
				cr_assert_eq(get(&cons, &rseq, n, true), (int)n);
				cr_assert_eq(put(&prod, &wseq, n, false), (int)n, "burst %u at %u",
					     n, off);
				cr_assert_eq(get(&cons, &rseq, n, false), (int)n);
				cr_assert_eq(shared_head(&cons), tail + 2 * n);
			}
		}
		/* More than the ring holds: bulk never fits, burst fills it. */
		cr_assert_eq(put(&prod, &wseq, entries + 1, true), 0);
		cr_assert_eq(put(&prod, &wseq, entries + 1, false), (int)entries);
		cr_assert_eq(get(&cons, &rseq, entries + 1, true), 0);
		cr_assert_eq(get(&cons, &rseq, entries + 1, false), (int)entries);
		cr_assert_eq(wseq, rseq);
		free(mem);
	}
}

Test(ring_unit, batch_sizes_every_offset, .timeout = 20)
{
	batch_sizes_every_offset(DP_RING_NO_SEQ);
}

/* With sequence words, which the consumer polls instead of the tail. */
Test(ring_unit, batch_sizes_every_offset_seq, .timeout = 20)
{
	batch_sizes_every_offset(60);
}

/* Fills n reserved entries of r from idx (sequence numbers from seq) and
 * stores their words by hand, as dp_submit does, but the first `skip`. */
static void fill_and_publish(struct dp_ring *r, uint32_t idx, uint32_t n, uint32_t skip,
			     uint64_t seq)
{
	for (uint32_t i = 0; i < n; i++)
		entry_fill(dp_ring_slot(r, idx + i), r->entry_size, seq + i);
	for (uint32_t i = skip; i < n; i++)
		__atomic_store_n((uint32_t *)((uint8_t *)dp_ring_slot(r, idx + i) + r->seq_off),
				 dp_ring_seq_value(idx + i), __ATOMIC_RELEASE);
}

/*
 * Sequence words: where they may be, that the consumer goes by them and
 * never by the tail, that nothing is published before dp_ring_commit()
 * stores them, and that a forged word never takes a consumer more than a
 * ring from its head.
 */
Test(ring_unit, sequence_words, .timeout = 10)
{
	const size_t len = dp_ring_bytes(16, ESIZE);
	uint8_t *mem = aligned_alloc(DP_RING_ALIGN, len), entry[ESIZE];
	struct dp_ring prod, cons;
	uint64_t wseq = 0, rseq = 0;
	uint32_t idx, w;

	cr_assert_not_null(mem);
	cr_assert_eq(dp_ring_format_seq(mem, len, 16, ESIZE, 2, 0), -EINVAL, "misaligned word");
	cr_assert_eq(dp_ring_format_seq(mem, len, 16, ESIZE, ESIZE - 2, 0), -EINVAL);
	cr_assert_eq(dp_ring_format_seq(mem, len, 16, ESIZE, ESIZE, 0), -EINVAL, "past the entry");
	cr_assert_eq(dp_ring_format_seq(mem, len, 16, ESIZE, ESIZE - 4, 0), 0);
	cr_assert_eq(dp_ring_validate_seq(mem, len, 0, ESIZE, ESIZE - 4), 0);
	cr_assert_eq(dp_ring_validate(mem, len, 0, ESIZE), -EMSGSIZE, "a word not expected");
	cr_assert_eq(dp_ring_validate_seq(mem, len, 0, ESIZE, 0), -EMSGSIZE, "another word");
	((struct dp_ring_hdr *)mem)->seq_off = 2;
	cr_assert_eq(dp_ring_validate_seq(mem, len, 0, ESIZE, 2), -EINVAL, "a bad word expected");

	/* Start near 2^32, the word in the middle of the entry. */
	cr_assert_eq(dp_ring_format_seq(mem, len, 16, ESIZE, 20, 0xFFFFFFF8u), 0);
	cr_assert_eq(dp_ring_bind(&prod, (void *)mem, DP_RING_PRODUCER), 0);
	cr_assert_eq(dp_ring_bind(&cons, (void *)mem, DP_RING_CONSUMER), 0);
	cr_assert_eq(dp_ring_peek(&cons, 16, &idx), 0, "a fresh ring publishes nothing");

	/* An entry whose bytes hold the publishing value where the word is:
	 * copied in, still not published; committed, it is, and the
	 * consumer's copy carries the word. */
	cr_assert_eq(dp_ring_reserve(&prod, 1, &idx), 1);
	memset(entry, 0xab, sizeof(entry));
	w = dp_ring_seq_value(idx);
	memcpy(entry + 20, &w, 4);
	dp_ring_copy_in(&prod, idx, entry, 1);
	cr_assert_eq(dp_ring_peek(&cons, 1, &idx), 0, "published by copy_in");
	dp_ring_commit(&prod, 1);
	cr_assert_eq(dp_ring_dequeue(&cons, entry), 1);
	memcpy(&w, entry + 20, 4);
	cr_assert_eq(w, dp_ring_seq_value(0xFFFFFFF8u));
	cr_assert_eq(entry[19], 0xab);
	cr_assert_eq(entry[24], 0xab);

	/* The tail means nothing to this consumer, in range or not. */
	__atomic_store_n(&prod.hdr->tail, prod.local + 5, __ATOMIC_RELEASE);
	cr_assert_eq(dp_ring_peek(&cons, 16, &idx), 0, "went by the tail");
	__atomic_store_n(&prod.hdr->tail, prod.local + 0x80000000u, __ATOMIC_RELEASE);
	cr_assert_eq(dp_ring_peek(&cons, 16, &idx), 0, "a tail out of range is not -EPROTO");
	cr_assert_eq(put(&prod, &wseq, 3, true), 3);
	cr_assert_eq(dp_ring_count(&cons), 3, "commit still moves the tail, for observers");
	cr_assert_eq(get(&cons, &rseq, 16, false), 3);

	/* Words published without the tail: the consumer finds them, and a
	 * sleeper does not sleep on them. */
	cr_assert_eq(dp_ring_reserve(&prod, 2, &idx), 2);
	fill_and_publish(&prod, idx, 2, 0, wseq);
	cr_assert_eq(dp_ring_prepare_sleep(&cons), 0, "slept on a published entry");
	cr_assert_eq(get(&cons, &rseq, 16, false), 2);
	dp_ring_commit_tail(&prod, 2);
	wseq += 2;
	cr_assert_eq(dp_ring_prepare_sleep(&cons), 1);
	dp_ring_finish_sleep(&cons);

	/* A commit stores its first word last: with the others there and
	 * not it, nothing is taken; with it, all are. */
	cr_assert_eq(dp_ring_reserve(&prod, 3, &idx), 3);
	fill_and_publish(&prod, idx, 3, 1, wseq);
	cr_assert_eq(dp_ring_peek(&cons, 16, &w), 0, "took a commit before its first word");
	dp_ring_commit(&prod, 3);
	wseq += 3;
	cr_assert_eq(get(&cons, &rseq, 16, false), 3);

	/* Every word forged, this lap's and the next: the consumer takes one
	 * ring at most, whatever it asks for. */
	for (uint32_t i = 0; i < 32; i++)
		__atomic_store_n((uint32_t *)((uint8_t *)dp_ring_slot(&cons, cons.local + i) + 20),
				 dp_ring_seq_value(cons.local + (i & 15)), __ATOMIC_RELEASE);
	cr_assert_eq(dp_ring_peek(&cons, 64, &idx), 16);
	free(mem);
}

Test(ring_unit, partial_batches, .timeout = 10)
{
	struct dp_ring prod, cons;
	uint64_t wseq = 0, rseq = 0;
	void *mem = ring_test_new(16, ESIZE, 0, &prod, &cons);

	cr_assert_not_null(mem);
	cr_assert_eq(put(&prod, &wseq, 13, true), 13);
	cr_assert_eq(put(&prod, &wseq, 10, false), 3, "burst takes what fits");
	cr_assert_eq(wseq, 16);
	cr_assert_eq(put(&prod, &wseq, 1, true), 0);
	cr_assert_eq(get(&cons, &rseq, 17, true), 0, "bulk larger than the contents");
	cr_assert_eq(shared_head(&cons), 0, "a refused bulk consumes nothing");
	cr_assert_eq(get(&cons, &rseq, 5, false), 5);
	cr_assert_eq(get(&cons, &rseq, 12, true), 0);
	cr_assert_eq(put(&prod, &wseq, 7, false), 5, "burst after a partial drain");
	cr_assert_eq(get(&cons, &rseq, 100, false), 16, "burst returns what is there");
	cr_assert_eq(rseq, wseq);
	free(mem);
}

/* The three-step API: nothing is visible before commit, nothing freed
 * before release, and a reserve without commit hands out the same slots. */
Test(ring_unit, reserve_commit_peek_release, .timeout = 10)
{
	struct dp_ring prod, cons;
	uint32_t idx, idx2, ridx;
	void *mem = ring_test_new(8, ESIZE, 100, &prod, &cons);

	cr_assert_not_null(mem);
	cr_assert_eq(dp_ring_reserve(&prod, 5, &idx), 5);
	cr_assert_eq(idx, 100);
	cr_assert_eq(dp_ring_reserve(&prod, 5, &idx2), 5);
	cr_assert_eq(idx2, idx, "reserve alone does not advance");
	for (uint32_t i = 0; i < 5; i++)
		entry_fill(dp_ring_slot(&prod, idx + i), ESIZE, i);
	cr_assert_eq(dp_ring_peek(&cons, 8, &ridx), 0, "uncommitted entries are invisible");
	dp_ring_commit(&prod, 5);
	cr_assert_eq(shared_tail(&prod), 105);

	cr_assert_eq(dp_ring_peek_bulk(&cons, 6, &ridx), 0);
	cr_assert_eq(dp_ring_peek(&cons, 8, &ridx), 5);
	cr_assert_eq(ridx, 100);
	for (uint32_t i = 0; i < 5; i++)
		cr_assert(entry_matches(dp_ring_slot(&cons, ridx + i), ESIZE, i, DP_RING_NO_SEQ));
	dp_ring_release(&cons, 2);
	cr_assert_eq(shared_head(&cons), 102);
	cr_assert_eq(dp_ring_reserve_bulk(&prod, 6, &idx), 0, "3 free slots, not 6");
	cr_assert_eq(dp_ring_reserve(&prod, 6, &idx), 5);
	cr_assert_eq(idx, 105);
	cr_assert_eq(dp_ring_peek(&cons, 8, &ridx), 3);
	cr_assert_eq(ridx, 102);
	free(mem);
}

Test(ring_unit, format_rejects_bad_geometry, .timeout = 10)
{
	size_t len = dp_ring_bytes(16, ESIZE) + DP_RING_ALIGN;
	uint8_t *mem = aligned_alloc(DP_RING_ALIGN, len);

	cr_assert_not_null(mem);
	cr_assert_eq(dp_ring_format(mem, len, 0, ESIZE, 0), -EINVAL);
	cr_assert_eq(dp_ring_format(mem, len, 12, ESIZE, 0), -EINVAL);
	cr_assert_eq(dp_ring_format(mem, len, DP_RING_MAX_ENTRIES * 2, 8, 0), -EINVAL);
	cr_assert_eq(dp_ring_format(mem, len, 16, 0, 0), -EINVAL);
	cr_assert_eq(dp_ring_format(mem, len, 16, 12, 0), -EINVAL,
		     "entry size not a multiple of 8");
	cr_assert_eq(dp_ring_format(mem, len, 4, DP_RING_MAX_ENTRY_SIZE + 8, 0), -EINVAL);
	cr_assert_eq(dp_ring_format(mem + 64, len - 64, 16, ESIZE, 0), -EINVAL, "misaligned");
	cr_assert_eq(dp_ring_format(mem, dp_ring_bytes(16, ESIZE) - 1, 16, ESIZE, 0), -EINVAL);
	cr_assert_eq(dp_ring_format(mem, dp_ring_bytes(16, ESIZE), 16, ESIZE, 0), 0);
	free(mem);

	mem = aligned_alloc(DP_RING_ALIGN, dp_ring_bytes(DP_RING_MAX_ENTRIES, 8));
	cr_assert_not_null(mem);
	cr_assert_eq(dp_ring_format(mem, dp_ring_bytes(DP_RING_MAX_ENTRIES, 8), DP_RING_MAX_ENTRIES,
				    8, 0),
		     0, "the largest ring is accepted");
	free(mem);
}

/*
 * dp_ring_validate() against one corruption per case. The ring sits at
 * RING_OFF inside a mapping with SPARE bytes after it.
 */
#define RING_OFF 128u
#define SPARE 256u

struct hdr_case {
	const char *what;
	void (*corrupt)(struct dp_ring_hdr *h);
	uint32_t expect_esize;
	int err;
};

static void c_magic(struct dp_ring_hdr *h)
{
	h->magic ^= 1;
}
static void c_version(struct dp_ring_hdr *h)
{
	h->abi_version = DP_RING_ABI_VERSION + 1;
}
static void c_version0(struct dp_ring_hdr *h)
{
	h->abi_version = 0;
}
static void c_hdr_size(struct dp_ring_hdr *h)
{
	h->hdr_size = sizeof(*h) + DP_RING_ALIGN;
}
static void c_esize(struct dp_ring_hdr *h)
{
	h->entry_size = ESIZE / 2;
}
static void c_esize_odd(struct dp_ring_hdr *h)
{
	h->entry_size = 12;
}
static void c_esize_huge(struct dp_ring_hdr *h)
{
	h->entry_size = 2 * DP_RING_MAX_ENTRY_SIZE;
}
static void c_entries0(struct dp_ring_hdr *h)
{
	h->entries = 0;
}
static void c_entries_npow2(struct dp_ring_hdr *h)
{
	h->entries = 24;
}
static void c_entries_huge(struct dp_ring_hdr *h)
{
	h->entries = DP_RING_MAX_ENTRIES * 2;
}
static void c_entries_past_ring(struct dp_ring_hdr *h)
{
	h->entries = 32; /* ring_bytes still covers 16 */
}
static void c_off_in_hdr(struct dp_ring_hdr *h)
{
	h->entries_off = 64;
}
static void c_off_misaligned(struct dp_ring_hdr *h)
{
	h->entries_off = sizeof(*h) + 8;
}
static void c_off_beyond(struct dp_ring_hdr *h)
{
	h->entries_off = h->ring_bytes + SPARE + 2 * DP_RING_ALIGN;
}
static void c_off_overflow(struct dp_ring_hdr *h)
{
	h->entries_off = UINT64_MAX & ~(uint64_t)(DP_RING_ALIGN - 1);
}
static void c_off_shifted(struct dp_ring_hdr *h)
{
	h->entries_off += DP_RING_ALIGN; /* entries now end past ring_bytes */
}
static void c_ring_bytes_short(struct dp_ring_hdr *h)
{
	h->ring_bytes -= 8;
}
static void c_ring_bytes_beyond(struct dp_ring_hdr *h)
{
	h->ring_bytes += SPARE + 8;
}
static void c_ring_bytes_max(struct dp_ring_hdr *h)
{
	h->ring_bytes = UINT64_MAX;
}
static void c_none(struct dp_ring_hdr *h)
{
	(void)h;
}
static void c_ring_bytes_to_end(struct dp_ring_hdr *h)
{
	h->ring_bytes += SPARE; /* ends exactly at the mapping's end: fine */
}

Test(ring_unit, validate_every_field, .timeout = 10)
{
	static const struct hdr_case cases[] = {
		{"intact", c_none, ESIZE, 0},
		{"ring_bytes up to the end of the mapping", c_ring_bytes_to_end, ESIZE, 0},
		{"magic", c_magic, ESIZE, -EBADMSG},
		{"abi_version + 1", c_version, ESIZE, -EPROTONOSUPPORT},
		{"abi_version 0", c_version0, ESIZE, -EPROTONOSUPPORT},
		{"hdr_size", c_hdr_size, ESIZE, -EPROTONOSUPPORT},
		{"entry_size differs from the expected one", c_esize, ESIZE, -EMSGSIZE},
		{"caller expects another entry size", c_none, ESIZE * 2, -EMSGSIZE},
		{"entry_size not a multiple of 8", c_esize_odd, 12, -EINVAL},
		{"entry_size over the maximum", c_esize_huge, 2 * DP_RING_MAX_ENTRY_SIZE, -EINVAL},
		{"entries 0", c_entries0, ESIZE, -EINVAL},
		{"entries not a power of two", c_entries_npow2, ESIZE, -EINVAL},
		{"entries over the maximum", c_entries_huge, ESIZE, -EINVAL},
		{"entries past ring_bytes", c_entries_past_ring, ESIZE, -ERANGE},
		{"entries_off inside the header", c_off_in_hdr, ESIZE, -ERANGE},
		{"entries_off misaligned", c_off_misaligned, ESIZE, -ERANGE},
		{"entries_off beyond the mapping", c_off_beyond, ESIZE, -ERANGE},
		{"entries_off near 2^64", c_off_overflow, ESIZE, -ERANGE},
		{"entries_off pushes entries past ring_bytes", c_off_shifted, ESIZE, -ERANGE},
		{"ring_bytes shorter than the entries", c_ring_bytes_short, ESIZE, -ERANGE},
		{"ring_bytes beyond the mapping", c_ring_bytes_beyond, ESIZE, -ERANGE},
		{"ring_bytes 2^64 - 1", c_ring_bytes_max, ESIZE, -ERANGE},
	};
	size_t ring_len = dp_ring_bytes(16, ESIZE);
	size_t map_len = RING_OFF + ring_len + SPARE;
	uint8_t *map = aligned_alloc(DP_RING_ALIGN, map_len);
	struct dp_ring_hdr *h = (struct dp_ring_hdr *)(map + RING_OFF);

	cr_assert_not_null(map);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_assert_eq(dp_ring_format(h, ring_len, 16, ESIZE, 0), 0);
		cases[i].corrupt(h);
		cr_expect_eq(dp_ring_validate(map, map_len, RING_OFF, cases[i].expect_esize),
			     cases[i].err, "%s: expected %d", cases[i].what, cases[i].err);
	}

	/* Where the header itself sits. */
	cr_assert_eq(dp_ring_format(h, ring_len, 16, ESIZE, 0), 0);
	cr_expect_eq(dp_ring_validate(map, map_len, RING_OFF + 64, ESIZE), -ERANGE, "misaligned");
	cr_expect_eq(dp_ring_validate(map, map_len, map_len + DP_RING_ALIGN, ESIZE), -ERANGE);
	cr_expect_eq(
		dp_ring_validate(map, map_len, UINT64_MAX & ~(uint64_t)(DP_RING_ALIGN - 1), ESIZE),
		-ERANGE);
	cr_expect_eq(dp_ring_validate(map, RING_OFF + sizeof(*h) - 1, RING_OFF, ESIZE), -ERANGE,
		     "header cut by the end of the mapping");
	cr_expect_eq(dp_ring_validate(map, RING_OFF + ring_len - 1, RING_OFF, ESIZE), -ERANGE,
		     "entries cut by the end of the mapping");
	cr_expect_eq(dp_ring_validate(map, RING_OFF + ring_len, RING_OFF, ESIZE), 0);
	free(map);
}

/* Queue pair: attach with a private copy of the fd; put the mapping back
 * after each corruption. */
static int attach_dup(const struct dp_ring_pair *creator, uint32_t sq_esize, uint32_t cq_esize)
{
	struct dp_ring_pair p = {.fd = -1};
	int fd = dup(creator->fd);
	int rc;

	cr_assert_geq(fd, 0);
	rc = dp_ring_pair_attach(&p, fd, sq_esize, cq_esize);
	if (rc)
		close(fd);
	else
		dp_ring_pair_close(&p);
	return rc;
}

static int attach_fd(int fd)
{
	struct dp_ring_pair p = {.fd = -1};
	int rc = dp_ring_pair_attach(&p, fd, ESIZE, 32);

	if (!rc)
		dp_ring_pair_close(&p);
	return rc;
}

Test(ring_unit, pair_attach_validates, .timeout = 10)
{
	struct dp_ring_pair c;
	uint8_t *saved;

	cr_assert_eq(dp_ring_pair_create(&c, "unit", 16, ESIZE, 16, 32, 0), 0);
	struct dp_ring_pair_hdr *ph = c.base;
	uint8_t *base = c.base;
	struct dp_ring_hdr *sq = (void *)(base + ph->sq_off);
	struct dp_ring_hdr *cq = (void *)(base + ph->cq_off);
	uint64_t sq_off = ph->sq_off, cq_off = ph->cq_off, map_size = ph->map_size;

	saved = malloc(c.map_size);
	cr_assert_not_null(saved);
	memcpy(saved, base, c.map_size);
#define RESTORE() memcpy(base, saved, c.map_size)

	cr_assert_eq(attach_dup(&c, ESIZE, 32), 0, "an intact pair attaches");

	ph->magic ^= 1;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EBADMSG, "pair magic");
	RESTORE();
	ph->abi_version++;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EPROTONOSUPPORT, "pair abi_version");
	RESTORE();
	ph->hdr_size = 64;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EPROTONOSUPPORT, "pair hdr_size");
	RESTORE();
	ph->map_size = map_size + 4096;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "map_size larger than the file");
	RESTORE();
	ph->map_size = map_size - 4096;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "map_size smaller than the file");
	RESTORE();
	ph->sq_off = map_size;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "sq_off at the end of the file");
	RESTORE();
	ph->cq_off = map_size + 4096;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "cq_off beyond the file");
	RESTORE();
	ph->sq_off = UINT64_MAX & ~(uint64_t)(DP_RING_ALIGN - 1);
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "sq_off near 2^64");
	RESTORE();
	ph->cq_off = cq_off + 8;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "cq_off misaligned");
	RESTORE();
	ph->sq_off = 0;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EBADMSG, "sq_off on the pair header");
	RESTORE();

	/* Overlaps: the same ring twice, and well-formed rings placed inside
	 * each other's entries, in both orders. */
	ph->cq_off = sq_off;
	cr_expect_eq(attach_dup(&c, ESIZE, ESIZE), -ERANGE, "cq_off == sq_off");
	RESTORE();
	cr_assert_eq(dp_ring_format(base + sq_off + 512, 1024, 16, 32, 0), 0);
	ph->cq_off = sq_off + 512;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "CQ inside the SQ");
	RESTORE();
	cr_assert_eq(dp_ring_format(base + cq_off + 512, dp_ring_bytes(16, ESIZE), 16, ESIZE, 0),
		     0);
	ph->sq_off = cq_off + 512;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "SQ inside the CQ");
	RESTORE();

	/* Ring headers, through the pair. */
	sq->magic = 0;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EBADMSG, "SQ magic");
	RESTORE();
	cq->abi_version = 7;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EPROTONOSUPPORT, "CQ abi_version");
	RESTORE();
	cr_expect_eq(attach_dup(&c, 32, 32), -EMSGSIZE, "SQ entry size");
	cr_expect_eq(attach_dup(&c, ESIZE, ESIZE), -EMSGSIZE, "CQ entry size");
	sq->entries = 3;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EINVAL, "SQ entries");
	RESTORE();
	cq->ring_bytes = map_size;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -ERANGE, "CQ ring_bytes");
	RESTORE();

	/* Indices an attacher must not follow. */
	sq->tail = sq->head + 17;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EPROTO, "SQ tail more than a ring ahead");
	RESTORE();
	cq->head = cq->tail + 1;
	cr_expect_eq(attach_dup(&c, ESIZE, 32), -EPROTO, "CQ head ahead of tail");
	RESTORE();

	cr_assert_eq(memcmp(base, saved, c.map_size), 0);
	cr_assert_eq(attach_dup(&c, ESIZE, 32), 0, "attaches again once restored");
#undef RESTORE
	free(saved);
	dp_ring_pair_close(&c);
}

Test(ring_unit, pair_attach_rejects_bad_fds, .timeout = 10)
{
	int pipefd[2], efd, fd, dirfd;
	static const uint8_t zeros[4096];

	cr_assert_eq(attach_fd(-1), -EBADF);

	efd = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(efd, 0);
	cr_expect_eq(attach_fd(efd), -EINVAL, "an eventfd");
	close(efd);

	cr_assert_eq(pipe(pipefd), 0);
	cr_expect_eq(attach_fd(pipefd[0]), -EINVAL, "a pipe");
	close(pipefd[0]);
	close(pipefd[1]);

	dirfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(dirfd, 0);
	cr_expect_eq(attach_fd(dirfd), -EINVAL, "a directory");
	close(dirfd);

	fd = memfd_create("unit-small", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_expect_eq(attach_fd(fd), -EINVAL, "an empty file");
	cr_assert_eq(ftruncate(fd, 64), 0);
	cr_expect_eq(attach_fd(fd), -EINVAL, "smaller than the pair header");
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(write(fd, zeros, sizeof(zeros)), (ssize_t)sizeof(zeros));
	cr_expect_eq(attach_fd(fd), -EBADMSG, "a page of zeros");
	close(fd);
}

Test(ring_unit, pair_memfd_sealed, .timeout = 10)
{
	struct dp_ring_pair p;
	struct stat st;
	int seals;

	cr_assert_eq(dp_ring_pair_create(&p, "unit", 64, ESIZE, 64, ESIZE, 0), 0);
	cr_assert_eq(ftruncate(p.fd, (off_t)p.map_size - 4096), -1, "shrinking must fail");
	cr_assert_eq(errno, EPERM);
	cr_assert_eq(ftruncate(p.fd, 0), -1);
	cr_assert_eq(ftruncate(p.fd, (off_t)p.map_size + 4096), -1, "growing must fail");
	cr_assert_eq(errno, EPERM);
	seals = fcntl(p.fd, F_GET_SEALS);
	cr_assert_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
		     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	cr_assert_eq(fcntl(p.fd, F_ADD_SEALS, F_SEAL_WRITE), -1, "the seal set is final");
	cr_assert_eq(fstat(p.fd, &st), 0);
	cr_assert_eq((uint64_t)st.st_size, p.map_size);
	cr_assert(fcntl(p.fd, F_GETFD) & FD_CLOEXEC);
	dp_ring_pair_close(&p);
}

/* Two mappings of one memfd in one process: SQ from attacher to creator,
 * CQ back, across 2^32. */
Test(ring_unit, pair_round_trip_through_two_mappings, .timeout = 10)
{
	struct dp_ring_pair c, a = {.fd = -1};
	uint64_t sq_w = 0, sq_r = 0, cq_w = 0, cq_r = 0;

	cr_assert_eq(dp_ring_pair_create(&c, "unit", 16, ESIZE, 32, 32, 0xFFFFFFF0u), 0);
	int fd = dup(c.fd);
	cr_assert_eq(dp_ring_pair_attach(&a, fd, ESIZE, 32), 0);
	cr_assert_neq(a.base, c.base);
	for (uint32_t i = 0; i < 200; i++) {
		uint32_t n = 1 + i % 16;

		cr_assert_eq(put(&a.sq, &sq_w, n, true), (int)n);
		cr_assert_eq(get(&c.sq, &sq_r, n, true), (int)n);
		cr_assert_eq(put(&c.cq, &cq_w, n, false), (int)n);
		cr_assert_eq(get(&a.cq, &cq_r, n, false), (int)n);
	}
	cr_assert_lt(a.sq.hdr->tail, 0xFFFFFFF0u, "indices wrapped");
	dp_ring_pair_close(&a);
	dp_ring_pair_close(&c);
}

/* A producer that moves its tail where it makes no sense: the consumer
 * reports -EPROTO on its next load and consumes nothing. */
Test(ring_unit, corrupt_tail_gives_eproto, .timeout = 10)
{
	struct dp_ring prod, cons;
	uint64_t wseq = 0, rseq = 0;
	uint32_t idx;
	void *mem = ring_test_new(16, ESIZE, 0xFFFFFFF8u, &prod, &cons);
	static const uint32_t bad_tail_delta[] = {17, 0x80000000u, UINT32_MAX /* behind head */};

	cr_assert_not_null(mem);
	for (size_t i = 0; i < sizeof(bad_tail_delta) / sizeof(bad_tail_delta[0]); i++) {
		cr_assert_eq(put(&prod, &wseq, 3, true), 3);
		cr_assert_eq(get(&cons, &rseq, 3, true), 3);
		uint32_t head = shared_head(&cons);

		__atomic_store_n(&prod.hdr->tail, head + bad_tail_delta[i], __ATOMIC_RELEASE);
		cr_expect_eq(dp_ring_peek(&cons, 1, &idx), -EPROTO, "tail = head + %#x",
			     bad_tail_delta[i]);
		cr_expect_eq(dp_ring_peek_bulk(&cons, 1, &idx), -EPROTO);
		cr_expect_eq(get(&cons, &rseq, 16, false), -EPROTO);
		cr_expect_eq(get(&cons, &rseq, 1, true), -EPROTO, "still refused on the next call");
		cr_expect_eq(shared_head(&cons), head, "nothing consumed");
		cr_expect_leq(dp_ring_count(&cons), 16, "count is clamped to the ring");
		/* Put the honest tail back: the consumer resumes. */
		__atomic_store_n(&prod.hdr->tail, prod.local, __ATOMIC_RELEASE);
		cr_assert_eq(get(&cons, &rseq, 1, false), 0);
	}
	free(mem);
}

/* A consumer that moves its head where it makes no sense: the producer
 * reports -EPROTO when it next needs the head, on every later call too, and
 * never writes past the ring. */
Test(ring_unit, corrupt_head_gives_eproto, .timeout = 10)
{
	static const uint32_t bad_head_delta[] = {1, 100, 0x80000000u, (uint32_t)-17};
	/* More entries than the ring holds, to catch a reserve that believes a
	 * bogus head. */
	static uint8_t big[200 * ESIZE];

	for (size_t i = 0; i < sizeof(bad_head_delta) / sizeof(bad_head_delta[0]); i++) {
		struct dp_ring prod, cons;
		uint64_t wseq = 0;
		uint32_t idx;
		void *mem = ring_test_new(16, ESIZE, 0xFFFFFFFAu, &prod, &cons);

		cr_assert_not_null(mem);
		cr_assert_eq(put(&prod, &wseq, 16, true), 16, "fill: the next reserve loads head");
		uint32_t tail = shared_tail(&prod);

		__atomic_store_n(&cons.hdr->head, tail + bad_head_delta[i], __ATOMIC_RELEASE);
		cr_expect_eq(dp_ring_reserve(&prod, 1, &idx), -EPROTO, "head = tail + %#x",
			     bad_head_delta[i]);
		cr_expect_eq(dp_ring_reserve(&prod, 1, &idx), -EPROTO, "and again");
		cr_expect_eq(dp_ring_reserve_bulk(&prod, 1, &idx), -EPROTO);
		cr_expect_eq(dp_ring_enqueue_burst(&prod, big, 200), -EPROTO);
		cr_expect_eq(dp_ring_enqueue_bulk(&prod, big, 16), -EPROTO);
		cr_expect_eq(shared_tail(&prod), tail, "nothing published");
		free(mem);
	}
}

Test(ring_unit, bind_checks_indices, .timeout = 10)
{
	struct dp_ring r;
	size_t len = dp_ring_bytes(16, ESIZE);
	struct dp_ring_hdr *h = aligned_alloc(DP_RING_ALIGN, len);

	cr_assert_not_null(h);
	cr_assert_eq(dp_ring_format(h, len, 16, ESIZE, 0xFFFFFFF8u), 0);
	h->tail = 0x00000008u; /* 16 in flight across the wrap: full, legal */
	cr_assert_eq(dp_ring_bind(&r, h, DP_RING_PRODUCER), 0);
	cr_assert_eq(r.local, 8);
	cr_assert_eq(r.cached, 0xFFFFFFF8u);
	cr_assert_eq(dp_ring_bind(&r, h, DP_RING_CONSUMER), 0);
	cr_assert_eq(r.local, 0xFFFFFFF8u);
	cr_assert_eq(r.cached, 8);

	h->tail = 0x00000009u;
	cr_expect_eq(dp_ring_bind(&r, h, DP_RING_PRODUCER), -EPROTO, "17 in flight");
	cr_expect_eq(dp_ring_bind(&r, h, DP_RING_CONSUMER), -EPROTO);
	h->tail = 0xFFFFFFF7u;
	cr_expect_eq(dp_ring_bind(&r, h, DP_RING_PRODUCER), -EPROTO, "tail behind head");
	cr_expect_eq(dp_ring_bind(&r, h, DP_RING_CONSUMER), -EPROTO);
	free(h);
}

Test(ring_unit, doorbell_counts, .timeout = 10)
{
	int db[2], fl;
	char big[4096] = {0};
	uint64_t n;

	cr_assert_eq(dp_doorbell_pair(db), 0);
	cr_assert_eq(dp_doorbell_drain(db[0]), 0, "nothing pending");
	for (int i = 0; i < 3; i++)
		cr_assert_eq(dp_doorbell_ring(db[1]), 0);
	cr_assert_eq(dp_doorbell_drain(db[0]), 3);
	cr_assert_eq(dp_doorbell_drain(db[0]), 0);
	/* Both directions. */
	cr_assert_eq(dp_doorbell_ring(db[0]), 0);
	cr_assert_eq(dp_doorbell_drain(db[1]), 1);
	/* A peer that cleared O_NONBLOCK on its end and never reads: ringing
	 * it never blocks, a full buffer is success (it has rings to read). */
	fl = fcntl(db[1], F_GETFL);
	cr_assert_eq(fcntl(db[1], F_SETFL, fl & ~O_NONBLOCK), 0);
	fl = fcntl(db[0], F_GETFL);
	cr_assert_eq(fcntl(db[0], F_SETFL, fl & ~O_NONBLOCK), 0, "even on our own end");
	for (int i = 0; i < 100000; i++)
		cr_assert_eq(dp_doorbell_ring(db[0]), 0);
	cr_assert_gt(dp_doorbell_drain(db[1]), 0);
	/* Draining never blocks, is bounded, and swallows any datagram. */
	while (dp_doorbell_drain(db[1]))
		;
	cr_assert_eq(dp_doorbell_drain(db[1]), 0, "empty, blocking flags: returns at once");
	for (int i = 0; i < DP_DOORBELL_BATCH * DP_DOORBELL_ROUNDS + 10; i++)
		if (send(db[1], big, i & 1 ? sizeof(big) : 1, MSG_DONTWAIT) < 0)
			break;
	n = dp_doorbell_drain(db[0]);
	cr_assert_gt(n, 0);
	cr_assert_leq(n, DP_DOORBELL_BATCH * DP_DOORBELL_ROUNDS);
	close(db[1]);
	/* The peer gone: ringing is an error, never a signal (SIGPIPE). */
	cr_assert_lt(dp_doorbell_ring(db[0]), 0);
	close(db[0]);
	cr_assert_eq(dp_doorbell_ring(db[0]), -EBADF);
}

/* The NEED_WAKEUP flag as each side sees it, one step at a time. */
Test(ring_unit, need_wakeup_flag, .timeout = 10)
{
	struct dp_ring prod, cons;
	uint64_t wseq = 0, rseq = 0;
	void *mem = ring_test_new(8, ESIZE, 0, &prod, &cons);

	cr_assert_not_null(mem);
	cr_assert_eq(dp_ring_needs_wakeup(&prod), 0, "a polling consumer needs no doorbell");
	cr_assert_eq(dp_ring_prepare_sleep(&cons), 1, "empty: may sleep");
	cr_assert_eq(cons.hdr->flags, DP_RING_NEED_WAKEUP);
	cr_assert_eq(put(&prod, &wseq, 1, true), 1);
	cr_assert_eq(dp_ring_needs_wakeup(&prod), 1);
	dp_ring_finish_sleep(&cons);
	cr_assert_eq(cons.hdr->flags, 0);
	cr_assert_eq(dp_ring_needs_wakeup(&prod), 0);
	cr_assert_eq(dp_ring_prepare_sleep(&cons), 0, "an entry is waiting: do not sleep");
	cr_assert_eq(cons.hdr->flags, 0, "and do not ask for a doorbell");
	cr_assert_eq(get(&cons, &rseq, 1, true), 1);
	cr_assert_eq(dp_ring_prepare_sleep(&cons), 1);
	free(mem);
}
