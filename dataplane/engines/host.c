/* SPDX-License-Identifier: MIT */
/*
 * host.c - the host engine: memcpy between two host regions of this
 * service. Copies up to --inline-max run at once, in submit; larger ones
 * are queued and advanced round robin, one --copy-chunk at a time, so one big
 * copy does not stall the other queues of the poller.
 *
 * Copies of --stripe-min bytes or more are also shared out: the owning
 * poller offers the copy on its stripe slot, and pollers with nothing of
 * their own to do (engine.help) claim --copy-chunk stripes of it, copy them and
 * count them done. The owner completes the copy once every byte is done.
 * Copies that large stream their stores past the cache (stream_copy), as
 * one large memcpy() does; chunked through memcpy they would not, and ran
 * at two thirds of its speed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __x86_64__
#include <immintrin.h>
#endif

#include "engine.h"
#include "notif.h"
#include "oplist.h"
#include "stats.h"
#include "xfer_op.h"

#ifdef DP_TSAN
/* libtsan's (GCC 12's <sanitizer/tsan_interface.h> does not declare them). */
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#endif

/* Steps per poller loop: with the default 256 KiB chunk a loop spends about
 * 1 MiB of memcpy (tens of microseconds) before it looks at the SQs again. */
#define STEPS_PER_LOOP 4

/* Copies from this size stream their stores: the destination would not
 * stay in the caches anyway, and reading it in first (a cached store's
 * read for ownership) is a third more memory traffic. */
#define STREAM_MIN (4u << 20)

/* A copy larger than inline_max, not finished yet. */
struct copy_op {
	struct op_node node; /* first: its host_poller's list */
	struct xfer_op o;    /* the descriptor, its references (o.len: the bytes) */
	uint8_t *dst;
	const uint8_t *src;
	uint64_t done;
	bool stream;   /* stream_copy: len >= STREAM_MIN, no overlap */
	bool backward; /* dst overlaps src from above: chunks from the end */
	bool striped;  /* offered on its poller's stripe slot */
};

/*
 * A poller's stripe slot: the one copy it offers to idle pollers. seq is
 * odd while a copy is offered. A helper reads seq, joins (helpers++), and
 * reads seq again: only if it has not changed may it read the rest and
 * claim stripes (next), adding what it copied to done. The owner withdraws
 * the offer (seq even) once done == len, and rewrites the slot for another
 * copy only when no helper is inside. All of it sequentially consistent:
 * the helper's join and second read against the owner's withdrawal and
 * its read of helpers. The copy's regions stay mapped until done == len
 * (the owner's references), and no helper touches them after adding to it.
 */
struct stripe_slot {
	atomic_uint seq;
	atomic_uint helpers;
	atomic_uint_fast64_t next; /* offset of the next stripe to claim */
	atomic_uint_fast64_t done; /* bytes copied, by anyone */
	uint8_t *dst;
	const uint8_t *src;
	uint64_t len;
} __attribute__((aligned(64)));

static struct stripe_slot slots[DP_MAX_POLLERS];

/* A poller's pending copies (p->eng[ENGINE_host]), and spare ops. */
struct host_poller {
	struct op_list ops; /* first: oplist.h's op_engine_* calls */
};

/*
 * Moves n bytes of client memory. Descriptors on different queues run on
 * different pollers, unordered: a client that has two of them write the
 * same bytes at once races on its own memory, as two DMA engines would, and
 * what lands is its affair (each descriptor still moves its bytes and
 * completes once). The client's own accesses happen in another process,
 * out of TSan's sight, so the TSan build (make tsan) checks none of these
 * bytes, only the service's state: reporting and then suppressing every
 * racy word of such copies cost seconds per GiB there.
 */
#ifdef __x86_64__
/*
 * Streaming copies: unaligned loads, aligned non-temporal stores, a fence
 * at the end so the bytes are ordered before whatever publishes them.
 * Like glibc's own large memcpy they go through STREAM_WAYS pages at once,
 * a few lines of each in turn, with a prefetch of each page's next lines:
 * the L2 streamer follows a stream only within its 4 KiB page, and one
 * page after another kept too few lines in flight for one core to reach
 * memcpy's rate (0.8x of it in P5; 1.0x with four pages). Eight
 * pages, and whole-line stores where the CPU has AVX-512, gained 5-10%
 * more on the reference host (docs/benchmarks.md).
 */
#define STREAM_PAGE 4096u
#define STREAM_WAYS 8u
#define STREAM_PREFETCH 256u /* bytes ahead in each page */

__attribute__((target("avx512f"))) static inline void stream_block_avx512(uint8_t *d,
									  const uint8_t *s)
{
	__m512i a = _mm512_loadu_si512((const void *)s);
	__m512i b = _mm512_loadu_si512((const void *)(s + 64));

	_mm512_stream_si512((void *)d, a);
	_mm512_stream_si512((void *)(d + 64), b);
}

__attribute__((target("avx2"))) static inline void stream_block_avx2(uint8_t *d, const uint8_t *s)
{
	__m256i a = _mm256_loadu_si256((const __m256i *)s);
	__m256i b = _mm256_loadu_si256((const __m256i *)(s + 32));
	__m256i c = _mm256_loadu_si256((const __m256i *)(s + 64));
	__m256i e = _mm256_loadu_si256((const __m256i *)(s + 96));

	_mm256_stream_si256((__m256i *)d, a);
	_mm256_stream_si256((__m256i *)(d + 32), b);
	_mm256_stream_si256((__m256i *)(d + 64), c);
	_mm256_stream_si256((__m256i *)(d + 96), e);
}

static inline void stream_block_sse2(uint8_t *d, const uint8_t *s)
{
	for (unsigned i = 0; i < 128; i += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(s + i));
		__m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));

		_mm_stream_si128((__m128i *)(d + i), a);
		_mm_stream_si128((__m128i *)(d + i + 16), b);
		_mm_stream_si128((__m128i *)(d + i + 32), c);
		_mm_stream_si128((__m128i *)(d + i + 48), e);
	}
}

/* The loop of all three: `block` moves 128 B to a line-aligned destination. */
#define STREAM_COPY_BODY(block)                                                                    \
	do {                                                                                       \
		size_t head = (64 - ((uintptr_t)d & 63)) & 63;                                     \
                                                                                                   \
		if (head > n)                                                                      \
			head = n;                                                                  \
		memcpy(d, s, head);                                                                \
		d += head, s += head, n -= head;                                                   \
		for (; n >= STREAM_WAYS * STREAM_PAGE; n -= STREAM_WAYS * STREAM_PAGE,             \
						       d += STREAM_WAYS * STREAM_PAGE,             \
						       s += STREAM_WAYS * STREAM_PAGE) {           \
			for (unsigned o = 0; o < STREAM_PAGE; o += 128) {                          \
				for (unsigned w = 0; w < STREAM_WAYS; w++) {                       \
					const uint8_t *sw = s + w * STREAM_PAGE + o;               \
                                                                                                   \
					_mm_prefetch((const char *)sw + STREAM_PREFETCH,           \
						     _MM_HINT_T0);                                 \
					_mm_prefetch((const char *)sw + STREAM_PREFETCH + 64,      \
						     _MM_HINT_T0);                                 \
					block(d + w * STREAM_PAGE + o, sw);                        \
				}                                                                  \
			}                                                                          \
		}                                                                                  \
		for (; n >= 128; n -= 128, d += 128, s += 128)                                     \
			block(d, s);                                                               \
		memcpy(d, s, n);                                                                   \
		_mm_sfence();                                                                      \
	} while (0)

__attribute__((target("avx512f"))) static void stream_copy_avx512(uint8_t *d, const uint8_t *s,
								  uint64_t n)
{
	STREAM_COPY_BODY(stream_block_avx512);
}

__attribute__((target("avx2"))) static void stream_copy_avx2(uint8_t *d, const uint8_t *s,
							     uint64_t n)
{
	STREAM_COPY_BODY(stream_block_avx2);
}

static void stream_copy_sse2(uint8_t *d, const uint8_t *s, uint64_t n)
{
	STREAM_COPY_BODY(stream_block_sse2);
}

static void (*stream_copy)(uint8_t *d, const uint8_t *s, uint64_t n) = stream_copy_sse2;
#else
static void stream_copy(uint8_t *d, const uint8_t *s, uint64_t n)
{
	memcpy(d, s, n);
	atomic_thread_fence(memory_order_release);
}
#endif

/*
 * Moves n bytes of client memory. Descriptors on different queues run on
 * different pollers, unordered: a client that has two of them write the
 * same bytes at once races on its own memory, as two DMA engines would, and
 * what lands is its affair (each descriptor still moves its bytes and
 * completes once). The client's own accesses happen in another process,
 * out of TSan's sight, so the TSan build (make tsan) checks none of these
 * bytes, only the service's state: reporting and then suppressing every
 * racy word of such copies cost seconds per GiB there. `stream`: the
 * ranges do not overlap, and the stores may stream (STREAM_MIN).
 */
static void client_bytes_copy(uint8_t *dst, const uint8_t *src, uint64_t n, bool stream)
{
#ifdef DP_TSAN
	__tsan_ignore_thread_begin();
#endif
	/* memmove: a region written onto itself (its own export) may
	 * overlap; the same cost as memcpy where it does not. */
	if (stream)
		stream_copy(dst, src, n);
	else
		memmove(dst, src, n);
#ifdef DP_TSAN
	__tsan_ignore_thread_end();
#endif
}

static bool overlap(const uint8_t *a, const uint8_t *b, uint64_t n)
{
	return a < b + n && b < a + n;
}

/* Claims and copies one stripe of the copy offered on `s`: the bytes
 * copied, 0 when every stripe is taken. */
static uint64_t stripe_take(struct stripe_slot *s)
{
	uint64_t off = atomic_fetch_add(&s->next, cfg.chunk), n;

	if (off >= s->len)
		return 0;
	n = s->len - off < cfg.chunk ? s->len - off : cfg.chunk;
	client_bytes_copy(s->dst + off, s->src + off, n, true);
	atomic_fetch_add(&s->done, n);
	return n;
}

/* engine.help: one stripe of the first copy on offer. */
static int host_help(struct poller *p)
{
	for (unsigned i = 0; i < cfg.pollers; i++) {
		struct stripe_slot *s = &slots[i];
		unsigned seq = atomic_load(&s->seq);
		uint64_t n = 0;

		if (!(seq & 1) || i == p->idx)
			continue;
		atomic_fetch_add(&s->helpers, 1);
		if (atomic_load(&s->seq) == seq)
			n = stripe_take(s);
		atomic_fetch_sub(&s->helpers, 1);
		if (n) {
			stats_stripe_helped(p, n);
			return 1;
		}
	}
	return 0;
}

/* Offers op on p's slot, if the slot is free: true when offered. */
static bool stripe_offer(struct poller *p, struct copy_op *op)
{
	struct stripe_slot *s = &slots[p->idx];

	if ((atomic_load(&s->seq) & 1) || atomic_load(&s->helpers))
		return false;
	s->dst = op->dst;
	s->src = op->src;
	s->len = op->o.len;
	atomic_store(&s->next, 0);
	atomic_store(&s->done, 0);
	atomic_fetch_add(&s->seq, 1); /* odd: on offer */
	op->striped = true;
	engine_help_offer();
	return true;
}

/* The owner's step on its offered copy: a stripe of its own; true once
 * every byte is done (the offer withdrawn). */
static bool stripe_step(struct poller *p, struct copy_op *op)
{
	struct stripe_slot *s = &slots[p->idx];

	stripe_take(s);
	if (atomic_load(&s->done) < op->o.len)
		return false;
	atomic_fetch_add(&s->seq, 1); /* even: withdrawn */
	engine_help_withdraw();
	op->striped = false;
	op->done = op->o.len;
	return true;
}

static struct copy_op *op_alloc(struct poller *p)
{
	struct host_poller *h = p->eng[ENGINE_host];
	struct copy_op *op;

	if (!h) {
		h = calloc(1, sizeof(*h));
		if (!h)
			return NULL;
		p->eng[ENGINE_host] = h;
	}
	return op_list_get(&h->ops, sizeof(*op));
}

static void host_submit(struct poller *p, const struct xfer *x)
{
	struct host_poller *h;
	struct copy_op *op;

	x->q->ctr.local_copies++;
	if (x->len <= cfg.inline_max) {
		client_bytes_copy(x->dst, x->src, x->len, false);
		if (x->notify)
			notif_deliver(p, x->seg, x->notify);
		queue_complete_ns(x->q, x->user_data, x->submit_ns, 0, x->len, x->path);
		return;
	}
	op = op_alloc(p);
	if (!op) {
		queue_complete_ns(x->q, x->user_data, x->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	*op = (struct copy_op){.dst = x->dst,
			       .src = x->src,
			       .stream = x->len >= STREAM_MIN && !overlap(x->dst, x->src, x->len),
			       .backward = x->dst > x->src && overlap(x->dst, x->src, x->len)};
	/* The references keep the regions mapped until the last step. */
	xfer_op_keep(&op->o, x, x->path);
	h = p->eng[ENGINE_host];
	op_list_push(&h->ops, &op->node);
	engine_kick(p, ENGINE_host);
}

/* One chunk of a pending copy (host_progress: round robin over them); a
 * copy on offer to the other pollers (stripe_offer) advances by a stripe of
 * its own. True once it is finished. */
static bool host_step(struct op_node *node, void *arg)
{
	struct poller *p = arg;
	struct copy_op *op = (struct copy_op *)node;
	uint64_t n = op->o.len - op->done;

	if (op->striped) {
		stripe_step(p, op);
	} else if (!op->done && op->stream && cfg.stripe_min && op->o.len >= cfg.stripe_min &&
		   cfg.pollers > 1 && stripe_offer(p, op)) {
		stripe_step(p, op);
	} else {
		uint64_t at;

		if (n > cfg.chunk)
			n = cfg.chunk;
		/* A region written onto itself a little further on goes from
		 * the end, or a chunk would overwrite the source of the chunks
		 * after it (memmove's rule). */
		at = op->backward ? op->o.len - op->done - n : op->done;
		client_bytes_copy(op->dst + at, op->src + at, n, op->stream);
		op->done += n;
	}
	if (op->done < op->o.len)
		return false;
	xfer_op_finish(p, &op->o, 0);
	op_list_put(p->eng[ENGINE_host], &op->node);
	return true;
}

static int host_progress(struct poller *p)
{
	return op_engine_progress(p, ENGINE_host, STEPS_PER_LOOP, host_step);
}

static bool host_busy(const struct poller *p)
{
	return op_engine_busy(p, ENGINE_host);
}

/* At shutdown host copies are finished, not cancelled: they need nothing
 * but this thread. */
static void host_cancel_all(struct poller *p)
{
	op_engine_finish_all(p, ENGINE_host, STEPS_PER_LOOP, host_step);
}

static void host_poller_free(struct poller *p)
{
	free(op_engine_take(p, ENGINE_host));
}

/*
 * Quarantine. A peer's RMA WRITE into an export may still be landing when
 * the export's region goes (its owner died, say): closing the registration
 * refuses new ones, but a provider that has taken a message's header goes
 * on copying its payload (libfabric 1.17's tcp did, into memory we had
 * unmapped: the service died; tests/fabric_owner_gone.c). So the mapping of
 * a region registered for remote writes is replaced in place by anonymous
 * memory (no reserve: late bytes land there and cost a page each), and the
 * address range is unmapped only QUARANTINE_NS later, by the control
 * thread: nothing late lands in freed memory, or in a new region mapped at
 * the same address. The client's memfd pages are freed at once.
 */
#define QUARANTINE_NS 1000000000ull

struct quarantined {
	void *map;
	size_t len;
	uint64_t until;
	struct quarantined *next;
};

static pthread_mutex_t quarantine_lock = PTHREAD_MUTEX_INITIALIZER;
static struct quarantined *quarantine_head, **quarantine_tail = &quarantine_head;
static _Atomic int quarantine_efd = -1;

void host_quarantine_wake(int efd)
{
	atomic_store(&quarantine_efd, efd);
}

static void host_quarantine(void *map, size_t len)
{
	struct quarantined *k = malloc(sizeof(*k));
	bool first;
	int efd;

	if (!k ||
	    mmap(map, len, PROT_READ | PROT_WRITE,
		 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
		free(k);
		munmap(map, len);
		return;
	}
	*k = (struct quarantined){.map = map, .len = len, .until = dp_now_ns() + QUARANTINE_NS};
	pthread_mutex_lock(&quarantine_lock);
	first = !quarantine_head;
	*quarantine_tail = k;
	quarantine_tail = &k->next;
	pthread_mutex_unlock(&quarantine_lock);
	/* Later ones are due after it: the sweep that frees it arms itself
	 * for them. */
	if (first && (efd = atomic_load(&quarantine_efd)) >= 0)
		wake_efd_ring(efd);
}

int host_quarantine_sweep(void)
{
	struct quarantined *due = NULL, **tail = &due;
	uint64_t now = dp_now_ns();
	int ms = -1;

	/* Unlinked under the lock, unmapped outside it: a poller dropping
	 * the last reference of a region (host_quarantine) never waits for
	 * a munmap. */
	pthread_mutex_lock(&quarantine_lock);
	while (quarantine_head && (quarantine_head->until <= now || atomic_load(&dp_stopping))) {
		*tail = quarantine_head;
		tail = &quarantine_head->next;
		quarantine_head = quarantine_head->next;
	}
	*tail = NULL;
	if (!quarantine_head)
		quarantine_tail = &quarantine_head;
	else
		ms = (int)((quarantine_head->until - now + 999999) / 1000000);
	pthread_mutex_unlock(&quarantine_lock);
	while (due) {
		struct quarantined *k = due;

		due = k->next;
		munmap(k->map, k->len);
		free(k);
	}
	return ms;
}

/* The mapping of a client's memfd is the region itself: it goes last. */
static void host_region_close(struct region *r)
{
	if (r->kind == REGION_HOST && r->map) {
		if (atomic_load(&r->rma_target))
			host_quarantine(r->map, r->map_len);
		else
			munmap(r->map, r->map_len);
	}
	if (r->kind == REGION_HOST && r->fd >= 0)
		close(r->fd);
}

extern const struct engine_region_msg host_region_msgs[]; /* host_region.c */

static int host_init(void)
{
#ifdef __x86_64__
	__builtin_cpu_init();
	/* avx512f: libgcc checks that the kernel saves the state too. */
	if (__builtin_cpu_supports("avx512f"))
		stream_copy = stream_copy_avx512;
	else if (__builtin_cpu_supports("avx2"))
		stream_copy = stream_copy_avx2;
#endif
	return 0;
}

const struct engine host_engine = {
	.name = "host",
	.init = host_init,
	.submit = host_submit,
	.help = host_help,
	.progress = host_progress,
	.busy = host_busy,
	.cancel_all = host_cancel_all,
	.poller_free = host_poller_free,
	.region_msgs = host_region_msgs,
	.region_close = host_region_close,
};
