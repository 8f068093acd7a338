/* SPDX-License-Identifier: MIT */
/*
 * dp_ring.h - single-producer single-consumer ring in shared memory.
 *
 * Two processes that do not trust each other share a ring: one produces, the
 * other consumes. Each side keeps its own index and a cached copy of the
 * other side's index in private memory (struct dp_ring) and only ever writes
 * its own index to the shared header. Indices are free-running 32-bit
 * counters; the slot of index i is i & (entries - 1).
 *
 * Fast path, in the DPDK shape: reserve (or peek) -> copy entries -> commit
 * (or release). Every memory-ordering edge is named where it happens; the
 * pairs are listed in docs/ring.md.
 *
 * A side never follows an index that makes no sense: if the other side's
 * index says more than `entries` are in flight, the call returns -EPROTO and
 * the caller treats the peer as broken.
 *
 * A ring may carry a sequence word in each entry (dp_ring_format_seq): the
 * producer publishes entry i by storing i there, and the consumer polls
 * that word in the slot it reads anyway instead of the tail, so an entry
 * costs the consumer one cache-line transfer instead of two (the tail's
 * line, then the slot's). The tail is still published, for the sleep
 * handshake's producer side and for observers.
 */
#ifndef DP_RING_H
#define DP_RING_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DP_RING_MAGIC 0x474e5244u      /* "DRNG" */
#define DP_RING_PAIR_MAGIC 0x50515044u /* "DPQP" */
/* 2: the header's seq_off (sequence words in the entries) */
#define DP_RING_ABI_VERSION 2u
/* Two cache lines: keeps the adjacent-line prefetcher from coupling the
 * producer's and consumer's indices. */
#define DP_RING_ALIGN 128u
#define DP_RING_MAX_ENTRIES (1u << 20)
#define DP_RING_MAX_ENTRY_SIZE 1024u
/* seq_off of a ring without sequence words. */
#define DP_RING_NO_SEQ UINT32_MAX

/* hdr->flags bits, written by the consumer only. */
#define DP_RING_NEED_WAKEUP 1u

/*
 * The shared header, at the start of each ring. Ownership:
 *   magic .. ring_bytes : written once by the creator, read-only afterwards
 *   tail                : producer only
 *   head, flags         : consumer only
 */
struct dp_ring_hdr {
	uint32_t magic;
	uint16_t abi_version;
	uint16_t hdr_size;
	uint32_t entry_size;
	uint32_t entries;
	uint64_t entries_off; /* from the start of this header */
	uint64_t ring_bytes;  /* header + entries */
	uint32_t seq_off;     /* the sequence word's offset in an entry, or DP_RING_NO_SEQ */
	uint8_t pad0[DP_RING_ALIGN - 36];
	uint32_t tail;
	uint8_t pad1[DP_RING_ALIGN - 4];
	uint32_t head;
	uint8_t pad2[DP_RING_ALIGN - 4];
	uint32_t flags;
	uint8_t pad3[DP_RING_ALIGN - 4];
};
_Static_assert(sizeof(struct dp_ring_hdr) == 4 * DP_RING_ALIGN, "ring header layout");
_Static_assert(offsetof(struct dp_ring_hdr, tail) == 1 * DP_RING_ALIGN, "tail line");
_Static_assert(offsetof(struct dp_ring_hdr, head) == 2 * DP_RING_ALIGN, "head line");
_Static_assert(offsetof(struct dp_ring_hdr, flags) == 3 * DP_RING_ALIGN, "flags line");

/* Header of a queue pair: one memfd holding an SQ and a CQ. */
struct dp_ring_pair_hdr {
	uint32_t magic;
	uint16_t abi_version;
	uint16_t hdr_size;
	uint64_t map_size;
	uint64_t sq_off;
	uint64_t cq_off;
};

/* One side's private view of a ring. Never placed in shared memory. */
struct dp_ring {
	struct dp_ring_hdr *hdr;
	uint8_t *slots;
	uint32_t mask;
	uint32_t entry_size;
	uint32_t seq_off; /* validated; DP_RING_NO_SEQ: none */
	uint32_t local;	  /* ours: tail for a producer, head for a consumer */
	uint32_t cached;  /* theirs, as last loaded (a seq consumer: ready up to) */
	/* A producer's: 1 when its consumer arms NEED_WAKEUP with the
	 * asymmetric barrier (dp_ring_prepare_sleep_asym), so that
	 * dp_ring_needs_wakeup needs no fence here (dp_ring_set_light). */
	uint32_t light;
};

struct dp_ring_pair {
	void *base;
	size_t map_size;
	int fd;
	struct dp_ring sq;
	struct dp_ring cq;
};

enum dp_ring_role { DP_RING_PRODUCER, DP_RING_CONSUMER };

/* ---- cold path: ring.c ---- */

/* Bytes a ring of `entries` x `entry_size` needs, header included. */
size_t dp_ring_bytes(uint32_t entries, uint32_t entry_size);
/* Lays out a ring in `mem` (DP_RING_ALIGN-aligned, dp_ring_bytes() long)
 * with both indices at `start`. -EINVAL for a bad geometry. The _seq form
 * gives each entry a sequence word at `seq_off` (4-aligned, inside the
 * entry; DP_RING_NO_SEQ for none), owned by the ring. */
int dp_ring_format(void *mem, size_t len, uint32_t entries, uint32_t entry_size, uint32_t start);
int dp_ring_format_seq(void *mem, size_t len, uint32_t entries, uint32_t entry_size,
		       uint32_t seq_off, uint32_t start);
/* Checks every header field of a ring at `off` inside a mapping of `map_len`
 * bytes: -EBADMSG wrong magic, -EPROTONOSUPPORT wrong version, -EMSGSIZE
 * wrong entry size or sequence word (not the caller's), -EINVAL bad count,
 * -ERANGE offsets beyond the mapping. dp_ring_validate expects no sequence
 * word. */
int dp_ring_validate(const void *map, size_t map_len, uint64_t off, uint32_t entry_size);
int dp_ring_validate_seq(const void *map, size_t map_len, uint64_t off, uint32_t entry_size,
			 uint32_t seq_off);
/* Binds a private view to a validated header. The creator binds before the
 * memory is shared; an attaching side reads the current indices once here
 * and gets -EPROTO when they are inconsistent. */
int dp_ring_bind(struct dp_ring *r, struct dp_ring_hdr *hdr, enum dp_ring_role role);

/* Creates a memfd holding an SQ and a CQ, formatted with indices at `start`,
 * mapped and bound for the creator's roles (SQ consumer, CQ producer). */
int dp_ring_pair_create(struct dp_ring_pair *p, const char *name, uint32_t sq_entries,
			uint32_t sq_esize, uint32_t cq_entries, uint32_t cq_esize, uint32_t start);
/* Maps a pair from `fd` (the fd is kept; closed by dp_ring_pair_close) and
 * validates every field; binds the attacher's roles (SQ producer, CQ
 * consumer). Entry sizes must be the ones the caller expects. */
int dp_ring_pair_attach(struct dp_ring_pair *p, int fd, uint32_t sq_esize, uint32_t cq_esize);
/* The same with sequence words at sq_seq and cq_seq (DP_RING_NO_SEQ: none);
 * an attacher must expect the ones the creator chose. */
struct dp_ring_layout {
	uint32_t entries; /* ignored by attach */
	uint32_t entry_size;
	uint32_t seq_off;
};
int dp_ring_pair_create_seq(struct dp_ring_pair *p, const char *name,
			    const struct dp_ring_layout *sq, const struct dp_ring_layout *cq,
			    uint32_t start);
int dp_ring_pair_attach_seq(struct dp_ring_pair *p, int fd, const struct dp_ring_layout *sq,
			    const struct dp_ring_layout *cq);
void dp_ring_pair_close(struct dp_ring_pair *p);

/*
 * Doorbells: a SOCK_DGRAM socketpair per direction, each side holding only
 * its own end (docs/ring.md). dp_doorbell_pair() makes one: fds[0] for the
 * creator, fds[1] for the peer. dp_doorbell_ring() sends one datagram and
 * never blocks (a full buffer means the peer has rings to read: success).
 * dp_doorbell_drain() reads what is pending, at most DP_DOORBELL_BATCH *
 * DP_DOORBELL_ROUNDS datagrams, never blocking; returns how many.
 */
#define DP_DOORBELL_BATCH 16
#define DP_DOORBELL_ROUNDS 4
int dp_doorbell_pair(int fds[2]);
int dp_doorbell_ring(int fd);
uint64_t dp_doorbell_drain(int fd);

/* ---- hot path ---- */

static inline uint32_t dp_ring_size(const struct dp_ring *r)
{
	return r->mask + 1;
}

static inline void *dp_ring_slot(const struct dp_ring *r, uint32_t idx)
{
	return r->slots + (size_t)(idx & r->mask) * r->entry_size;
}

/*
 * A side's private view, for statistics: what its last reserve or peek saw
 * of the other side, loading nothing shared. It lags the shared indices by
 * whatever the other side did since; it is never more than the ring.
 */

/* Producer: slots committed and not yet seen released by the consumer. */
static inline uint32_t dp_ring_used_cached(const struct dp_ring *r)
{
	return r->local - r->cached;
}

/* Consumer: entries seen published and not yet released. */
static inline uint32_t dp_ring_avail_cached(const struct dp_ring *r)
{
	return r->cached - r->local;
}

/*
 * Step 1 for both sides, one helper in the shape of DPDK's shared
 * __rte_ring_move_prod_head/__rte_ring_move_cons_head: up to `n` entries
 * from *idx on are ours to use, counted as `capacity + theirs - ours`. A
 * producer passes the ring size and the consumer's head (free slots =
 * size - (tail - head)); a consumer passes 0 and the producer's tail
 * (readable entries = tail - head). The other side's index is loaded only
 * when the cached copy says fewer than `n`. Returns the count (burst: as
 * many as there are; bulk: n or 0), or -EPROTO when the other side's index
 * is not within one ring of ours: a corrupt or hostile peer, never followed.
 */
static inline int dp_ring__move(struct dp_ring *r, uint32_t n, uint32_t *idx, int bulk,
				uint32_t capacity, const uint32_t *theirs)
{
	uint32_t entries = capacity + r->cached - r->local;

	*idx = r->local;
	if (entries < n) {
		/* Acquire: pairs with the other side's release of its index
		 * (#1/#2 and #3/#4 in docs/ring.md). A consumer reads slots
		 * only after they are fully written; a producer overwrites
		 * slots only after the consumer's reads of them are done. */
		uint32_t other = __atomic_load_n(theirs, __ATOMIC_ACQUIRE);

		entries = capacity + other - r->local;
		/* A bogus index is never cached: the next call would count
		 * more entries than the ring has from it and read or write
		 * past the slots. In unsigned arithmetic "more than a ring"
		 * covers both ways of being wrong on either side: too far
		 * ahead of our index, or behind it. */
		if (entries > r->mask + 1)
			return -EPROTO;
		r->cached = other;
		if (entries < n) {
			if (bulk)
				return 0;
			n = entries;
		}
	}
	return (int)n;
}

/*
 * A ring with sequence words: the word of index idx's slot, and the value
 * that publishes entry idx there. It is odd, so a word that holds 0 (what
 * an entry's own field in that place normally is) never publishes
 * anything, and it keeps 31 bits of the index: the entry of the same slot
 * a lap earlier (at most 2^20 indices back) has another value.
 */
static inline uint32_t *dp_ring__seqw(const struct dp_ring *r, uint32_t idx)
{
	return (uint32_t *)((uint8_t *)dp_ring_slot(r, idx) + r->seq_off);
}

static inline uint32_t dp_ring_seq_value(uint32_t idx)
{
	return idx << 1 | 1;
}

static inline int dp_ring__ready(const struct dp_ring *r, uint32_t idx)
{
	/* Acquire: pairs with the release of the word in dp_ring_commit()
	 * (#1s/#2s in docs/ring.md): the entry's other bytes are read after
	 * it is seen. */
	return __atomic_load_n(dp_ring__seqw(r, idx), __ATOMIC_ACQUIRE) == dp_ring_seq_value(idx);
}

/*
 * Consumer step 1 on a ring with sequence words: entries from our head on
 * whose word holds their value. An empty ring costs one load, of the line
 * the producer writes last. A commit writes all its entries' bytes, then
 * their words in index order but the first, whose word comes last
 * (dp_ring__publish): so the first entry's word being there means its
 * whole commit is, and any word being there means the bytes of every
 * entry up to it are. Once the first is there, the last one wanted being
 * there means all are: a full burst costs two loads. Else they go one by
 * one, to the first word not there. The burst check may take the first
 * entry of a commit whose word is still being stored: its bytes are there,
 * and the copy out reads its word only as a value nobody uses
 * (dp_ring_copy_out). A producer that publishes out of order, or words
 * that were never its entries, hurts only its own entries: the consumer
 * copies each entry before acting on it, and never reads more than a ring
 * from its own head. The producer's tail is never read here.
 */
static inline int dp_ring__scan(struct dp_ring *r, uint32_t n, uint32_t *idx, int bulk)
{
	uint32_t local = r->local, have = r->cached - local;

	*idx = local;
	if (have < n) {
		/* Private copies: the acquire loads would make the compiler
		 * reload every field of *r after each. */
		const struct dp_ring v = *r;
		uint32_t want = n <= v.mask ? n : v.mask + 1;

		while (have < want && dp_ring__ready(&v, local + have)) {
			if (++have == 1 && want > 2 && dp_ring__ready(&v, local + want - 1)) {
				have = want;
				break;
			}
		}
		r->cached = local + have;
		if (have < n) {
			if (bulk)
				return 0;
			n = have;
		}
	}
	return (int)n;
}

/* Producer, step 1: reserve up to `n` slots starting at *idx (burst: as
 * many as fit; bulk: n or 0), or -EPROTO for a head out of range. */
static inline int dp_ring_reserve(struct dp_ring *r, uint32_t n, uint32_t *idx)
{
	return dp_ring__move(r, n, idx, 0, dp_ring_size(r), &r->hdr->head);
}

static inline int dp_ring_reserve_bulk(struct dp_ring *r, uint32_t n, uint32_t *idx)
{
	return dp_ring__move(r, n, idx, 1, dp_ring_size(r), &r->hdr->head);
}

/*
 * Producer, staging entries one at a time ahead of one commit (the
 * service's completions): 1 and in *slot the slot of the entry `k` places
 * after the last commit, k being how many are staged already; 0 when the
 * ring has no room for k + 1 entries or the consumer's head is out of
 * range. The head is loaded only when the cached one says full; the test
 * before the reserve keeps the common case to one compare and a constant
 * result (tools/bench-instr.sh counts it). dp_ring_commit(r, k + 1)
 * publishes them.
 */
static inline int dp_ring_stage(struct dp_ring *r, uint32_t k, void **slot)
{
	uint32_t idx;

	if (dp_ring_size(r) - dp_ring_used_cached(r) <= k &&
	    dp_ring_reserve_bulk(r, k + 1, &idx) != (int)k + 1)
		return 0;
	*slot = dp_ring_slot(r, r->local + k);
	return 1;
}

/* The sequence words of the n entries from index i on, in index order, in
 * at most two runs of slots (before and after the wrap). */
static inline void dp_ring__publish_run(const struct dp_ring *r, uint32_t i, uint32_t n)
{
	/* Private copies: each release store would make the compiler reload
	 * every field of *r after it. */
	const uint32_t es = r->entry_size, first = r->mask + 1 - (i & r->mask);
	uint32_t v = dp_ring_seq_value(i), k = n < first ? n : first;
	uint8_t *w = (uint8_t *)dp_ring__seqw(r, i);

	for (;;) {
		/* Release: pairs with the acquire in dp_ring__ready(). The
		 * entry's other bytes are visible before its word. Two a
		 * turn, still in index order: a loop of one costs five
		 * instructions a word (tools/bench-instr.sh). */
		for (; k >= 2; k -= 2, w += 2 * es, v += 4) {
			__atomic_store_n((uint32_t *)w, v, __ATOMIC_RELEASE);
			__atomic_store_n((uint32_t *)(w + es), v + 2, __ATOMIC_RELEASE);
		}
		if (k) {
			__atomic_store_n((uint32_t *)w, v, __ATOMIC_RELEASE);
			v += 2;
		}
		if (n <= first)
			return;
		w = r->slots + r->seq_off;
		k = n - first;
		n = first;
	}
}

/*
 * The words of the n entries from the producer's index on: in index order
 * but the first, whose word comes last. A consumer that caught up polls
 * that word (dp_ring__scan), so it finds the whole commit at once instead
 * of chasing the stores one by one.
 */
static inline void dp_ring__publish(const struct dp_ring *r, uint32_t n)
{
	if (n > 1)
		dp_ring__publish_run(r, r->local + 1, n - 1);
	/* Release: the other words, and every entry's bytes, before it. */
	__atomic_store_n(dp_ring__seqw(r, r->local), dp_ring_seq_value(r->local), __ATOMIC_RELEASE);
}

/*
 * Producer, step 3 when the caller published each entry itself, as
 * dp_ring__publish() does: storing dp_ring_seq_value(idx) into its word
 * with release order, after every entry's other bytes, in index order but
 * the first entry's last (dp_submit does, in the pass that writes the
 * slots): the tail only.
 */
static inline void dp_ring_commit_tail(struct dp_ring *r, uint32_t n)
{
	r->local += n;
	/* Release: pairs with the acquire of tail in dp_ring_peek(). The
	 * entries written into the slots are visible before the new tail. */
	__atomic_store_n(&r->hdr->tail, r->local, __ATOMIC_RELEASE);
}

/* Producer, step 3: publish `n` reserved slots. */
static inline void dp_ring_commit(struct dp_ring *r, uint32_t n)
{
	if (r->seq_off != DP_RING_NO_SEQ)
		dp_ring__publish(r, n);
	dp_ring_commit_tail(r, n);
}

/* Consumer, step 1: up to `n` entries are readable from *idx on (burst:
 * what is there; bulk: n or 0), or -EPROTO for a tail out of range. */
static inline int dp_ring_peek(struct dp_ring *r, uint32_t n, uint32_t *idx)
{
	if (r->seq_off != DP_RING_NO_SEQ)
		return dp_ring__scan(r, n, idx, 0);
	return dp_ring__move(r, n, idx, 0, 0, &r->hdr->tail);
}

static inline int dp_ring_peek_bulk(struct dp_ring *r, uint32_t n, uint32_t *idx)
{
	if (r->seq_off != DP_RING_NO_SEQ)
		return dp_ring__scan(r, n, idx, 1);
	return dp_ring__move(r, n, idx, 1, 0, &r->hdr->tail);
}

/* Consumer, step 3: hand `n` read slots back to the producer. */
static inline void dp_ring_release(struct dp_ring *r, uint32_t n)
{
	r->local += n;
	/* Release: pairs with the acquire of head in dp_ring_reserve(). Our
	 * reads of the slots complete before the producer may reuse them. */
	__atomic_store_n(&r->hdr->head, r->local, __ATOMIC_RELEASE);
}

/*
 * A hint, no step of the protocol: the CPU starts fetching the n slots
 * from idx (a consumer's next burst) while the consumer works on the
 * burst it holds, so the next peek and copy out wait less for the
 * producer's lines. A slot not yet written is fetched for nothing and
 * read again later; nothing is read from them here. One prefetch per
 * 64-byte line the slots cover (the SQ's slots are one line each), never
 * more than the ring.
 */
static inline void dp_ring_prefetch(const struct dp_ring *r, uint32_t idx, uint32_t n)
{
	const size_t es = r->entry_size;
	const uint8_t *p = dp_ring_slot(r, idx), *wrap = r->slots + (size_t)(r->mask + 1) * es;
	const uint8_t *end = p + (size_t)(n <= r->mask ? n : r->mask + 1) * es;

	if (end > wrap) {
		for (const uint8_t *s = r->slots; s < r->slots + (size_t)(end - wrap); s += 64)
			__builtin_prefetch(s, 0, 3);
		end = wrap;
	}
	/* By 64-byte line, four a turn: a loop of one costs three
	 * instructions a line. */
	for (; p + 256 <= end; p += 256) {
		__builtin_prefetch(p, 0, 3);
		__builtin_prefetch(p + 64, 0, 3);
		__builtin_prefetch(p + 128, 0, 3);
		__builtin_prefetch(p + 192, 0, 3);
	}
	for (; p < end; p += 64)
		__builtin_prefetch(p, 0, 3);
}

/* Whether the CPU has PREFETCHW (x86-64: CPUID 0x80000001 ECX bit 8), read
 * once when the program starts (ring.c). */
extern int dp_ring_have_prefetchw;

/*
 * A producer's hint, no step of the protocol: the CPU starts fetching the
 * lines of slots idx+1 .. idx+n-1 for writing (x86-64: PREFETCHW where the
 * CPU has it, else nothing; elsewhere the compiler's write prefetch), so
 * that its stores there find them owned instead of waiting, one after
 * another, for the consumer's copies to be invalidated. The line of slot idx is left alone: a consumer of sequence
 * words polls it until the producer publishes it, and taking it away would
 * only make both sides wait. The caller must own the slots (reserved, or
 * room it knows of): a line the consumer still reads would be pulled from
 * under it. At most the ring less one slot.
 */
static inline void dp_ring_prefetch_write(const struct dp_ring *r, uint32_t idx, uint32_t n)
{
	const size_t es = r->entry_size, size = (size_t)(r->mask + 1) * es;
	const size_t off = (size_t)(idx & r->mask) * es;
	size_t line = (off & ~(size_t)63) + 64, end;

	if (!dp_ring_have_prefetchw)
		return;
	end = off + (size_t)(n <= r->mask ? n : r->mask) * es;
	for (; line < end; line += 64) {
		const uint8_t *p = r->slots + (line < size ? line : line - size);

#if defined(__x86_64__)
		__asm__ volatile("prefetchw %0" ::"m"(*p));
#else
		__builtin_prefetch(p, 1, 3);
#endif
	}
}

/*
 * A producer's n entries of es bytes into the slots. A burst of 64 B
 * (descriptors) or 32 B (completions) entries goes one by one, each a copy
 * of known size, inlined, as dp_submit() and the poller's completions do:
 * one memcpy() of a burst of 32 descriptors (2 KiB) ran P1 at 0.76-0.89x
 * rte_ring on the dev machine, entry by entry going in 1.12-1.15x (in and
 * out 1.17-1.23x; on the H200, in and out, 1.03-1.25x against 0.64-0.93x:
 * docs/benchmarks.md, "Ring"). A single entry, and a consumer's copy out,
 * stay one memcpy(): with a single entry inlined in and out, P2's round
 * trip was 12% slower on the H200, and entry by entry out cost the
 * poller's drain 6 instructions per descriptor.
 */
static inline void dp_ring__copy(void *dst, const void *src, uint32_t n, size_t es)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	if (n > 1 && es == 64)
		for (uint32_t i = 0; i < n; i++)
			memcpy(d + 64 * (size_t)i, s + 64 * (size_t)i, 64);
	else if (n > 1 && es == 32)
		for (uint32_t i = 0; i < n; i++)
			memcpy(d + 32 * (size_t)i, s + 32 * (size_t)i, 32);
	else
		memcpy(d, s, n * es);
}

/*
 * The same into a ring with sequence words: every byte but the word, which
 * keeps its old value (not ready) until dp_ring_commit() stores the index.
 * Copying it too would let a source whose word happened to equal the index
 * publish the entry half written. A word in an entry's last 4 bytes leaves
 * one copy of known size per 64 B or 32 B entry.
 */
static inline void dp_ring__copy_seq(void *dst, const void *src, uint32_t n, size_t es, size_t so)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	for (uint32_t i = 0; i < n; i++, d += es, s += es) {
		if (es == 64 && so == 60) {
			memcpy(d, s, 60);
		} else if (es == 32 && so == 28) {
			memcpy(d, s, 28);
		} else {
			memcpy(d, s, so);
			memcpy(d + so + 4, s + so + 4, es - so - 4);
		}
	}
}

static inline void dp_ring__copy_in(const struct dp_ring *r, void *dst, const void *src, uint32_t n)
{
	if (r->seq_off != DP_RING_NO_SEQ)
		dp_ring__copy_seq(dst, src, n, r->entry_size, r->seq_off);
	else
		dp_ring__copy(dst, src, n, r->entry_size);
}

/* Step 2 for whole batches: copy between private memory and the slots, in
 * at most two pieces (before and after the wrap). */
static inline void dp_ring_copy_in(struct dp_ring *r, uint32_t idx, const void *src, uint32_t n)
{
	uint32_t first = dp_ring_size(r) - (idx & r->mask);

	if (first >= n) {
		dp_ring__copy_in(r, dp_ring_slot(r, idx), src, n);
		return;
	}
	dp_ring__copy_in(r, dp_ring_slot(r, idx), src, first);
	dp_ring__copy_in(r, r->slots, (const uint8_t *)src + (size_t)first * r->entry_size,
			 n - first);
}

/*
 * A consumer's copy of n entries, one memcpy() (entry by entry cost the
 * poller's drain 6 instructions per descriptor: dp_ring__copy). On a ring
 * with sequence words it carries the word as the ring had it, not the
 * entry's own field; the caller ignores it (the service ignores reserved1,
 * dp_poll() hands reserved out as 0). It may be the word of a commit's
 * first entry being stored while it is copied (dp_ring__scan): the copy's
 * word is then unspecified (memcpy may even read it in pieces). Formally a
 * data race, on bytes whose value is never used; the service's copies of
 * SQ slots race with their client anyway, which may rewrite a slot at any
 * time. A ThreadSanitizer build copies around the word and loads it
 * atomically, so that its check covers every other byte.
 */
static inline void dp_ring__copy_out(const struct dp_ring *r, void *dst, const void *src,
				     uint32_t n)
{
#ifdef DP_TSAN
	if (r->seq_off != DP_RING_NO_SEQ) {
		const size_t es = r->entry_size, so = r->seq_off;
		uint8_t *d = dst;
		const uint8_t *s = src;

		for (uint32_t i = 0; i < n; i++, d += es, s += es) {
			uint32_t w = __atomic_load_n((const uint32_t *)(s + so), __ATOMIC_RELAXED);

			memcpy(d, s, so);
			memcpy(d + so, &w, sizeof(w));
			memcpy(d + so + 4, s + so + 4, es - so - 4);
		}
		return;
	}
#endif
	memcpy(dst, src, (size_t)n * r->entry_size);
}

/* Step 2 for the consumer: see dp_ring_copy_in. */
static inline void dp_ring_copy_out(const struct dp_ring *r, uint32_t idx, void *dst, uint32_t n)
{
	uint32_t first = dp_ring_size(r) - (idx & r->mask);
	size_t es = r->entry_size;

	if (first >= n) {
		dp_ring__copy_out(r, dst, dp_ring_slot(r, idx), n);
		return;
	}
	dp_ring__copy_out(r, dst, dp_ring_slot(r, idx), first);
	dp_ring__copy_out(r, (uint8_t *)dst + first * es, r->slots, n - first);
}

/* Burst and bulk enqueue/dequeue built on the three steps. Return the count
 * moved or -EPROTO. */
static inline int dp_ring_enqueue_burst(struct dp_ring *r, const void *src, uint32_t n)
{
	uint32_t idx;
	int k = dp_ring_reserve(r, n, &idx);

	if (k > 0) {
		dp_ring_copy_in(r, idx, src, (uint32_t)k);
		dp_ring_commit(r, (uint32_t)k);
	}
	return k;
}

static inline int dp_ring_enqueue_bulk(struct dp_ring *r, const void *src, uint32_t n)
{
	uint32_t idx;
	int k = dp_ring_reserve_bulk(r, n, &idx);

	if (k > 0) {
		dp_ring_copy_in(r, idx, src, (uint32_t)k);
		dp_ring_commit(r, (uint32_t)k);
	}
	return k;
}

static inline int dp_ring_dequeue_burst(struct dp_ring *r, void *dst, uint32_t n)
{
	uint32_t idx;
	int k = dp_ring_peek(r, n, &idx);

	if (k > 0) {
		dp_ring_copy_out(r, idx, dst, (uint32_t)k);
		dp_ring_release(r, (uint32_t)k);
	}
	return k;
}

static inline int dp_ring_dequeue_bulk(struct dp_ring *r, void *dst, uint32_t n)
{
	uint32_t idx;
	int k = dp_ring_peek_bulk(r, n, &idx);

	if (k > 0) {
		dp_ring_copy_out(r, idx, dst, (uint32_t)k);
		dp_ring_release(r, (uint32_t)k);
	}
	return k;
}

static inline int dp_ring_enqueue(struct dp_ring *r, const void *entry)
{
	return dp_ring_enqueue_bulk(r, entry, 1);
}

static inline int dp_ring_dequeue(struct dp_ring *r, void *entry)
{
	return dp_ring_dequeue_bulk(r, entry, 1);
}

/* Entries a consumer could read now (reloads the producer's tail). */
static inline uint32_t dp_ring_count(struct dp_ring *r)
{
	uint32_t t = __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE);
	uint32_t n = t - __atomic_load_n(&r->hdr->head, __ATOMIC_ACQUIRE);

	return n > dp_ring_size(r) ? dp_ring_size(r) : n;
}

/*
 * The NEED_WAKEUP handshake (io_uring SQPOLL's, across processes). This is a
 * store-buffering pattern: the consumer stores flags then loads tail, the
 * producer stores tail then loads flags. Acquire/release cannot order a store
 * before a later load, so each side issues a full fence between the two, and
 * at least one of them sees the other's store: no lost wake-up.
 */

/* GCC's TSan does not model fences and warns (-Wtsan, an error here). The two
 * fences below order only atomic accesses to flags and tail, which TSan
 * checks on their own, and its fence hook still issues the hardware fence. */
#if defined(DP_TSAN) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define DP_RING_TSAN_FENCE_PRAGMAS 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif

/* Consumer: the first half of dp_ring_prepare_sleep, for one who arms
 * several rings and then issues one barrier for all of them. */
static inline void dp_ring_arm(struct dp_ring *r)
{
	__atomic_store_n(&r->hdr->flags, DP_RING_NEED_WAKEUP, __ATOMIC_RELAXED);
}

/* Consumer, after dp_ring_arm and a barrier: 1 when it may sleep, 0 when
 * entries arrived meanwhile (the flag is cleared again). */
static inline int dp_ring_armed_empty(struct dp_ring *r)
{
	if (r->seq_off != DP_RING_NO_SEQ
		    ? dp_ring__ready(r, r->local)
		    : __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE) != r->local) {
		__atomic_store_n(&r->hdr->flags, 0, __ATOMIC_RELAXED);
		return 0;
	}
	return 1;
}

/* The consumer's full fence between dp_ring_arm and dp_ring_armed_empty:
 * pairs with the one in dp_ring_needs_wakeup(). */
static inline void dp_ring_fence(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* Consumer, before sleeping: returns 1 when it may sleep on the doorbell,
 * 0 when entries arrived meanwhile (the flag is cleared again). */
static inline int dp_ring_prepare_sleep(struct dp_ring *r)
{
	dp_ring_arm(r);
	dp_ring_fence();
	return dp_ring_armed_empty(r);
}

/* Consumer, after waking: stop asking for doorbells while polling. */
static inline void dp_ring_finish_sleep(struct dp_ring *r)
{
	__atomic_store_n(&r->hdr->flags, 0, __ATOMIC_RELAXED);
}

/*
 * The asymmetric form (docs/ring.md, "Light producers"): the consumer's
 * barrier is membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which makes
 * every running thread of every registered process execute a full fence;
 * a registered producer (dp_ring_light_register) then needs none after its
 * commit. dp_ring_asym_barrier returns 0, or -errno where the kernel lacks
 * the command or a seccomp filter forbids it (EPERM); after a failure the
 * consumer must not sleep: a light producer may not have seen its flag.
 */
int dp_ring_asym_available(void);
int dp_ring_asym_barrier(void);
int dp_ring_light_register(void);

/* Consumer, before sleeping on a ring whose producer may be light: as
 * dp_ring_prepare_sleep; 0 (and the flag cleared) also when the barrier
 * failed. */
static inline int dp_ring_prepare_sleep_asym(struct dp_ring *r)
{
	dp_ring_arm(r);
	if (dp_ring_asym_barrier()) {
		dp_ring_finish_sleep(r);
		return 0;
	}
	return dp_ring_armed_empty(r);
}

/* Producer: its consumer arms with the asymmetric barrier, and this
 * process is registered for it (dp_ring_light_register returned 0). */
static inline void dp_ring_set_light(struct dp_ring *r)
{
	r->light = 1;
}

/* Producer, after dp_ring_commit(): 1 when the consumer sleeps and the
 * doorbell must be rung. */
static inline int dp_ring_needs_wakeup(const struct dp_ring *r)
{
	/* Full fence: pairs with the one in dp_ring_prepare_sleep(); orders
	 * the tail store of the commit before the flags load. A light
	 * producer's fence is the one the consumer's membarrier makes this
	 * thread execute: only the compiler must keep the order. */
	if (r->light)
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	else
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&r->hdr->flags, __ATOMIC_RELAXED) & DP_RING_NEED_WAKEUP;
}

#ifdef DP_RING_TSAN_FENCE_PRAGMAS
#pragma GCC diagnostic pop
#undef DP_RING_TSAN_FENCE_PRAGMAS
#endif

#endif /* DP_RING_H */
