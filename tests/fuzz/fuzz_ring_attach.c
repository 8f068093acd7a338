/* fuzz_ring_attach.c - libFuzzer target: a queue-pair memfd whose bytes a hostile peer chose. dp_ring_pair_attach() either refuses it or binds rings whose every slot lies inside the mapping, and the hot path on them never leaves it, whatever the indices say. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dp_ring.h"

static void exercise(struct dp_ring_pair *p, const uint8_t *data, size_t size)
{
	uint8_t buf[8 * DP_RING_MAX_ENTRY_SIZE];
	uint32_t idx;
	int k;

	/* Producer side of the SQ, consumer side of the CQ: as a client. */
	for (unsigned round = 0; round < 4; round++) {
		uint32_t n = size > round ? data[size - 1 - round] % 9 : 1;

		k = dp_ring_reserve(&p->sq, n, &idx);
		if (k > 0) {
			memset(buf, (int)round, (size_t)k * p->sq.entry_size);
			dp_ring_copy_in(&p->sq, idx, buf, (uint32_t)k);
			dp_ring_commit(&p->sq, (uint32_t)k);
		}
		k = dp_ring_dequeue_burst(&p->cq, buf, n);
		if (k > 8)
			abort();
		(void)dp_ring_count(&p->cq);
		(void)dp_ring_needs_wakeup(&p->sq);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Entry sizes and sequence words of SQ and CQ: the queues' (dp_proto.h),
	 * then rings without words. */
	static const struct dp_ring_layout layouts[][2] = {
		{{0, 64, 20}, {0, 32, 28}},
		{{0, 64, DP_RING_NO_SEQ}, {0, 32, DP_RING_NO_SEQ}},
		{{0, 8, DP_RING_NO_SEQ}, {0, 8, DP_RING_NO_SEQ}},
		{{0, 1024, DP_RING_NO_SEQ}, {0, 16, DP_RING_NO_SEQ}},
	};
	struct dp_ring_pair p;
	size_t len = size < 64 ? 4096 : (size + 4095) & ~(size_t)4095;
	int fd;

	if (size > (1u << 20))
		return 0;
	fd = memfd_create("fuzz-ring", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
		abort();
	if (size && pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	for (unsigned i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		memset(&p, 0, sizeof(p));
		if (dp_ring_pair_attach_seq(&p, fd, &layouts[i][0], &layouts[i][1]) == 0) {
			/* Every slot of both rings lies inside the mapping. */
			uint8_t *end = (uint8_t *)p.base + p.map_size;

			if ((uint8_t *)dp_ring_slot(&p.sq, p.sq.mask) + p.sq.entry_size > end ||
			    (uint8_t *)dp_ring_slot(&p.cq, p.cq.mask) + p.cq.entry_size > end)
				abort();
			exercise(&p, data, size);
			p.fd = -1; /* the fd is ours, closed below */
			dp_ring_pair_close(&p);
		}
		/* The header checks alone, at each offset a pair could name. */
		if (size >= 8) {
			uint64_t off;

			memcpy(&off, data, sizeof(off));
			(void)dp_ring_validate_seq(data, size, off % (size + 1),
						   layouts[i][0].entry_size, layouts[i][0].seq_off);
		}
	}
	close(fd);
	return 0;
}
