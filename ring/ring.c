/* SPDX-License-Identifier: MIT */
/* ring.c - cold paths of the ring: layout, validation, queue pairs, doorbells. */

#include "dp_ring.h"

#include <errno.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <fcntl.h>
#include <linux/membarrier.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAIR_HDR_BYTES DP_RING_ALIGN

static bool is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

size_t dp_ring_bytes(uint32_t entries, uint32_t entry_size)
{
	return align_up(sizeof(struct dp_ring_hdr) + (size_t)entries * entry_size, DP_RING_ALIGN);
}

static int check_geometry(uint32_t entries, uint32_t entry_size)
{
	if (!is_pow2(entries) || entries > DP_RING_MAX_ENTRIES)
		return -EINVAL;
	if (entry_size == 0 || entry_size > DP_RING_MAX_ENTRY_SIZE || entry_size % 8)
		return -EINVAL;
	return 0;
}

static bool seq_off_ok(uint32_t seq_off, uint32_t entry_size)
{
	return seq_off == DP_RING_NO_SEQ || (seq_off % 4 == 0 && seq_off <= entry_size - 4);
}

int dp_ring_format(void *mem, size_t len, uint32_t entries, uint32_t entry_size, uint32_t start)
{
	return dp_ring_format_seq(mem, len, entries, entry_size, DP_RING_NO_SEQ, start);
}

int dp_ring_format_seq(void *mem, size_t len, uint32_t entries, uint32_t entry_size,
		       uint32_t seq_off, uint32_t start)
{
	struct dp_ring_hdr *h = mem;
	int rc = check_geometry(entries, entry_size);

	if (rc)
		return rc;
	if (!seq_off_ok(seq_off, entry_size))
		return -EINVAL;
	if ((uintptr_t)mem % DP_RING_ALIGN || len < dp_ring_bytes(entries, entry_size))
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	h->magic = DP_RING_MAGIC;
	h->abi_version = DP_RING_ABI_VERSION;
	h->hdr_size = sizeof(*h);
	h->entry_size = entry_size;
	h->entries = entries;
	h->entries_off = sizeof(*h);
	h->ring_bytes = dp_ring_bytes(entries, entry_size);
	h->seq_off = seq_off;
	h->tail = start;
	h->head = start;
	/* Each word holds the index a lap before the first one the consumer
	 * will look for in its slot: nothing is ready. */
	if (seq_off != DP_RING_NO_SEQ)
		for (uint32_t k = 0; k < entries; k++) {
			uint32_t idx = start + k;
			uint8_t *slot = (uint8_t *)mem + h->entries_off +
					(size_t)(idx & (entries - 1)) * entry_size;
			uint32_t old = dp_ring_seq_value(idx - entries);

			memcpy(slot + seq_off, &old, sizeof(old));
		}
	return 0;
}

int dp_ring_validate(const void *map, size_t map_len, uint64_t off, uint32_t entry_size)
{
	return dp_ring_validate_seq(map, map_len, off, entry_size, DP_RING_NO_SEQ);
}

int dp_ring_validate_seq(const void *map, size_t map_len, uint64_t off, uint32_t entry_size,
			 uint32_t seq_off)
{
	const struct dp_ring_hdr *h;
	uint64_t end;

	if (off % DP_RING_ALIGN || off > map_len || map_len - off < sizeof(*h))
		return -ERANGE;
	h = (const struct dp_ring_hdr *)((const uint8_t *)map + off);
	if (h->magic != DP_RING_MAGIC)
		return -EBADMSG;
	if (h->abi_version != DP_RING_ABI_VERSION || h->hdr_size != sizeof(*h))
		return -EPROTONOSUPPORT;
	if (h->entry_size != entry_size || h->seq_off != seq_off)
		return -EMSGSIZE;
	if (check_geometry(h->entries, h->entry_size) || !seq_off_ok(h->seq_off, h->entry_size))
		return -EINVAL;
	/* Entries must follow the header, be aligned, and end inside the
	 * mapping. All terms are bounded (entries <= 2^20, size <= 2^10), so
	 * only entries_off and ring_bytes need overflow care. */
	if (h->entries_off < sizeof(*h) || h->entries_off % DP_RING_ALIGN ||
	    h->entries_off > map_len)
		return -ERANGE;
	end = h->entries_off + (uint64_t)h->entries * h->entry_size;
	if (h->ring_bytes < end || h->ring_bytes > map_len - off)
		return -ERANGE;
	return 0;
}

int dp_ring_bind(struct dp_ring *r, struct dp_ring_hdr *hdr, enum dp_ring_role role)
{
	uint32_t tail = __atomic_load_n(&hdr->tail, __ATOMIC_ACQUIRE);
	uint32_t head = __atomic_load_n(&hdr->head, __ATOMIC_ACQUIRE);
	uint32_t entries = hdr->entries;

	if (tail - head > entries)
		return -EPROTO;
	r->hdr = hdr;
	r->slots = (uint8_t *)hdr + hdr->entries_off;
	r->mask = entries - 1;
	r->entry_size = hdr->entry_size;
	r->seq_off = hdr->seq_off;
	r->local = role == DP_RING_PRODUCER ? tail : head;
	/* Theirs: the producer's tail for a consumer, but one of sequence
	 * words finds its entries in the slots, from its own head. */
	r->cached = role == DP_RING_CONSUMER && r->seq_off == DP_RING_NO_SEQ ? tail : head;
	r->light = 0; /* dp_ring_set_light */
	return 0;
}

int dp_ring_pair_create(struct dp_ring_pair *p, const char *name, uint32_t sq_entries,
			uint32_t sq_esize, uint32_t cq_entries, uint32_t cq_esize, uint32_t start)
{
	struct dp_ring_layout sq = {sq_entries, sq_esize, DP_RING_NO_SEQ};
	struct dp_ring_layout cq = {cq_entries, cq_esize, DP_RING_NO_SEQ};

	return dp_ring_pair_create_seq(p, name, &sq, &cq, start);
}

int dp_ring_pair_create_seq(struct dp_ring_pair *p, const char *name,
			    const struct dp_ring_layout *sq, const struct dp_ring_layout *cq,
			    uint32_t start)
{
	struct dp_ring_pair_hdr *ph;
	size_t sq_bytes, cq_bytes, total;
	int rc, fd;
	void *base;

	if ((rc = check_geometry(sq->entries, sq->entry_size)) ||
	    (rc = check_geometry(cq->entries, cq->entry_size)))
		return rc;
	if (!seq_off_ok(sq->seq_off, sq->entry_size) || !seq_off_ok(cq->seq_off, cq->entry_size))
		return -EINVAL;
	sq_bytes = dp_ring_bytes(sq->entries, sq->entry_size);
	cq_bytes = dp_ring_bytes(cq->entries, cq->entry_size);
	total = align_up(PAIR_HDR_BYTES + sq_bytes + cq_bytes, (size_t)sysconf(_SC_PAGESIZE));

	fd = memfd_create(name ? name : "dp-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)total) < 0) {
		rc = -errno;
		goto err_fd;
	}
	/* The size is fixed for good: a peer cannot shrink the file under our
	 * mapping and turn a ring access into SIGBUS. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		rc = -errno;
		goto err_fd;
	}
	base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		goto err_fd;
	}
	ph = base;
	ph->magic = DP_RING_PAIR_MAGIC;
	ph->abi_version = DP_RING_ABI_VERSION;
	ph->hdr_size = sizeof(*ph);
	ph->map_size = total;
	ph->sq_off = PAIR_HDR_BYTES;
	ph->cq_off = PAIR_HDR_BYTES + sq_bytes;
	dp_ring_format_seq((uint8_t *)base + ph->sq_off, sq_bytes, sq->entries, sq->entry_size,
			   sq->seq_off, start);
	dp_ring_format_seq((uint8_t *)base + ph->cq_off, cq_bytes, cq->entries, cq->entry_size,
			   cq->seq_off, start);

	p->base = base;
	p->map_size = total;
	p->fd = fd;
	/* Bound before anyone else can see the memory: nothing read here
	 * comes from an untrusted peer. */
	dp_ring_bind(&p->sq, (struct dp_ring_hdr *)((uint8_t *)base + ph->sq_off),
		     DP_RING_CONSUMER);
	dp_ring_bind(&p->cq, (struct dp_ring_hdr *)((uint8_t *)base + ph->cq_off),
		     DP_RING_PRODUCER);
	return 0;
err_fd:
	close(fd);
	return rc;
}

int dp_ring_pair_attach(struct dp_ring_pair *p, int fd, uint32_t sq_esize, uint32_t cq_esize)
{
	struct dp_ring_layout sq = {0, sq_esize, DP_RING_NO_SEQ};
	struct dp_ring_layout cq = {0, cq_esize, DP_RING_NO_SEQ};

	return dp_ring_pair_attach_seq(p, fd, &sq, &cq);
}

int dp_ring_pair_attach_seq(struct dp_ring_pair *p, int fd, const struct dp_ring_layout *sql,
			    const struct dp_ring_layout *cql)
{
	struct dp_ring_pair_hdr ph;
	struct stat st;
	uint8_t *base;
	int rc;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)PAIR_HDR_BYTES)
		return -EINVAL;
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	memcpy(&ph, base, sizeof(ph));
	rc = -EBADMSG;
	if (ph.magic != DP_RING_PAIR_MAGIC)
		goto err;
	rc = -EPROTONOSUPPORT;
	if (ph.abi_version != DP_RING_ABI_VERSION || ph.hdr_size != sizeof(ph))
		goto err;
	rc = -ERANGE;
	if (ph.map_size != (uint64_t)st.st_size)
		goto err;
	if ((rc = dp_ring_validate_seq(base, ph.map_size, ph.sq_off, sql->entry_size,
				       sql->seq_off)) ||
	    (rc = dp_ring_validate_seq(base, ph.map_size, ph.cq_off, cql->entry_size,
				       cql->seq_off)))
		goto err;
	{
		const struct dp_ring_hdr *sq = (const void *)(base + ph.sq_off);
		const struct dp_ring_hdr *cq = (const void *)(base + ph.cq_off);
		/* The two rings must not overlap each other or the pair header. */
		rc = -ERANGE;
		if (ph.sq_off < PAIR_HDR_BYTES || ph.cq_off < PAIR_HDR_BYTES)
			goto err;
		if (ph.sq_off < ph.cq_off ? ph.sq_off + sq->ring_bytes > ph.cq_off
					  : ph.cq_off + cq->ring_bytes > ph.sq_off)
			goto err;
	}
	if ((rc = dp_ring_bind(&p->sq, (void *)(base + ph.sq_off), DP_RING_PRODUCER)) ||
	    (rc = dp_ring_bind(&p->cq, (void *)(base + ph.cq_off), DP_RING_CONSUMER)))
		goto err;
	p->base = base;
	p->map_size = ph.map_size;
	p->fd = fd;
	return 0;
err:
	munmap(base, (size_t)st.st_size);
	return rc;
}

void dp_ring_pair_close(struct dp_ring_pair *p)
{
	if (p->base)
		munmap(p->base, p->map_size);
	if (p->fd >= 0)
		close(p->fd);
	p->base = NULL;
	p->fd = -1;
}

/*
 * Doorbells are the two ends of a SOCK_DGRAM socketpair, one per direction:
 * each side holds only its own end, a socket of its own (an eventfd passed
 * with SCM_RIGHTS would be one file description, its O_NONBLOCK shared with
 * the peer). Every call is non-blocking by its flags, whatever the fd's
 * flags are, and no signal (SIGPIPE) can come of it.
 */
int dp_doorbell_pair(int fds[2])
{
	int small = 1; /* the kernel rounds it up to its minimum */

	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) < 0)
		return -errno;
	/* A few unread rings are as good as many: keep what a sleeping or
	 * absent peer leaves queued small. */
	(void)setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	(void)setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	return 0;
}

int dp_doorbell_ring(int fd)
{
	char one = 1;

	/* EAGAIN: rings the peer has not read fill the buffer; it wakes
	 * anyway. */
	if (send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

uint64_t dp_doorbell_drain(int fd)
{
	struct mmsghdr m[DP_DOORBELL_BATCH];
	uint64_t got = 0;
	int n;

	/* No buffers: each datagram is consumed whole, whatever its size, and
	 * anything it carried (SCM_RIGHTS) is discarded by the kernel. A
	 * flooding peer gets a bounded drain; the fd stays readable, so a
	 * level-triggered waiter comes back for the rest. */
	for (int round = 0; round < DP_DOORBELL_ROUNDS; round++) {
		memset(m, 0, sizeof(m));
		n = recvmmsg(fd, m, DP_DOORBELL_BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			break;
		got += (uint64_t)n;
		if (n < DP_DOORBELL_BATCH)
			break;
	}
	return got;
}

/*
 * Light producers (dp_ring.h, docs/ring.md): membarrier's global expedited
 * command makes every running thread of every process registered for it
 * execute a full memory barrier before it returns; a thread not running
 * then passes one when it is next scheduled.
 */
static int membarrier(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0, 0) < 0 ? -errno : 0;
}

int dp_ring_asym_available(void)
{
	long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

	return cmds >= 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
	       (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
}

int dp_ring_asym_barrier(void)
{
	return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
}

int dp_ring_light_register(void)
{
	return membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
}

/* dp_ring_prefetch_write's test. Elsewhere the compiler's write prefetch
 * (__builtin_prefetch) is the instruction, and it is always there. */
int dp_ring_have_prefetchw =
#if defined(__x86_64__)
	0;

__attribute__((constructor)) static void ring_cpu_features(void)
{
	unsigned a, b, c, d;

	if (__get_cpuid(0x80000001u, &a, &b, &c, &d))
		dp_ring_have_prefetchw = !!(c & (1u << 8));
}
#else
	1;
#endif
