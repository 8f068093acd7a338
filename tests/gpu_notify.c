/* SPDX-License-Identifier: MIT */
/* gpu_notify.c - notifications (DP_DESC_F_NOTIFY) of WRITEs into an
 * exported GPU segment through one service (the prefill -> decode KV
 * case): the owner reads the GPU bytes back the moment it sees each
 * notification and finds them all there, host -> GPU and GPU -> GPU, 4 KiB
 * to 16 MiB, eight in flight. */
#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_notify, .fini = svc_teardown, .timeout = 120);

#define SLOTS 32
#define SPAN (16 * MiB)

static uint64_t slot_len(unsigned i)
{
	return (4096ull << (i % 4 * 4)) > SPAN ? SPAN : 4096ull << (i % 4 * 4); /* 4K..16M */
}

static void notify_into_gpu(bool from_gpu)
{
	struct dp_client *owner, *writer;
	struct dp_notification n[8];
	struct dp_cqe cqes[8];
	struct dp_queue *q;
	unsigned sent = 0, done = 0, seen = 0;
	bool got[SLOTS] = {0};
	void *dst, *src;
	int rd, rs, seg;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	owner = connect_client(&svc, "decode");
	rd = gpu_region(owner, (size_t)SLOTS * SPAN, -1, &dst);
	export_segment(owner, rd, "kv", DP_ACCESS_RW);
	cr_assert_eq(dp_notify_open(owner, 64), 0, "%s", dp_last_error());
	writer = connect_client(&svc, "prefill");
	q = make_queue(writer, 8);
	if (from_gpu)
		rs = gpu_region(writer, (size_t)SLOTS * SPAN, 7, &src);
	else {
		rs = alloc_region(writer, (size_t)SLOTS * SPAN, &src);
		pattern_fill(src, (size_t)SLOTS * SPAN, 7);
	}
	seg = open_segment(writer, NULL, "kv", DP_ACCESS_RW);
	while (seen < SLOTS) {
		int k;

		while (sent < SLOTS && sent - done < 8) {
			struct dp_desc d;
			uint64_t off = (uint64_t)sent * SPAN;

			dp_prep_write_notify(&d, rs, off, seg, off, slot_len(sent), sent, sent);
			cr_assert_eq(dp_submit(q, &d, 1), 1);
			sent++;
		}
		k = dp_poll(q, cqes, 8);
		cr_assert_geq(k, 0);
		for (int j = 0; j < k; j++) {
			cr_assert_eq(cqes[j].status, 0, "%s", dp_strerror(cqes[j].status));
			cr_assert_eq(cqes[j].flags, GPU_FLAGS);
		}
		done += (unsigned)k;
		k = dp_notify_poll(owner, n, 8);
		cr_assert_geq(k, 0);
		for (int j = 0; j < k; j++) {
			unsigned i = (unsigned)n[j].value;

			cr_assert_lt(i, SLOTS);
			cr_assert(!got[i]);
			got[i] = true;
			cr_assert_eq(n[j].len, slot_len(i));
			cr_assert_eq(n[j].offset, (uint64_t)i * SPAN);
			cr_assert_eq(n[j].flags, DP_NOTIFY_F_LOCAL);
			/* The bytes, read from the GPU now: all there. */
			gpu_expect((uint8_t *)dst + n[j].offset, n[j].len, 7, n[j].offset,
				   "notified slot");
			seen++;
		}
	}
	dp_close(writer);
	dp_close(owner);
	CK(cudaFree(dst));
	if (from_gpu)
		CK(cudaFree(src));
	stop_svc(&svc);
}

Test(gpu_notify, host_to_gpu)
{
	notify_into_gpu(false);
}

Test(gpu_notify, gpu_to_gpu)
{
	notify_into_gpu(true);
}

#endif
