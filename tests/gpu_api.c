/* SPDX-License-Identifier: MIT */
/* gpu_api.c - GPU registration where there is no GPU (or no CUDA), and the
 * service's checks of REGION_REGISTER_CUDA messages. Runs on every machine. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dataplane.h"
#include "dp_proto.h"
#include "helpers.h"

TestSuite(gpu_api, .fini = svc_teardown, .timeout = 60);

static void raw_hello(int fd)
{
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION, .pid = (uint32_t)getpid()};

	strcpy(h.name, "gpu-raw");
	cr_assert_eq(raw_call(fd, DP_MSG_HELLO, &h, sizeof(h), NULL), 0);
}

/* dp_register_cuda on memory that is not GPU memory: ENOTSUP without CUDA,
 * ENODEV without a device, EINVAL with one; never a crash, and the client
 * and service go on working. */
Test(gpu_api, RegisterCudaWithoutGpuMemory)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	struct dp_cqe cqe;
	char host[4096];
	int want, r, rc;
	void *p;

#ifndef DP_HAVE_CUDA
	want = -ENOTSUP;
#else
	want = gpu_count() > 0 ? -EINVAL : -ENODEV;
#endif
	cr_assert_eq(svc_start(&svc, local_only), 0);
	cr_assert_eq(dp_connect(svc.sock, "gpu-api", &c), 0);
	r = dp_register_cuda(c, host, sizeof(host));
	cr_assert_eq(r, want, "dp_register_cuda: %d (%s), want %d", r, dp_strerror(r), want);
	cr_assert_eq(dp_register_cuda(c, NULL, 4096), -EINVAL);
	cr_assert_str_neq(dp_strerror(-ENODEV), "");
	cr_assert_eq(dp_queue_create(c, 0, &q), 0);
	r = dp_alloc(c, 4096, 0, &p);
	cr_assert_geq(r, 0);
	cr_assert_eq(dp_segment_export(c, r, "host", DP_ACCESS_RW), 0);
	rc = dp_segment_open(c, NULL, "host", DP_ACCESS_RW);
	cr_assert_geq(rc, 0);
	dp_prep_write(&d, r, 0, rc, 2048, 1024, 5);
	cr_assert_eq(dp_submit(q, &d, 1), 1);
	cr_assert_eq(dp_wait(q, &cqe, 1, 10000), 1);
	cr_assert_eq(cqe.status, 0);
	cr_assert_eq(cqe.flags, DP_CQE_F_LOCAL, "a host copy does not take the GPU path");
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);
}

/* The service's checks: size, reserved field, zero length, a device it
 * does not have, a handle that is not one; one strike for the malformed
 * message only, and the connection stays usable. */
Test(gpu_api, RegisterCudaMessageChecks)
{
	struct dp_msg_region_register_cuda m;
	struct dp_msg_id id = {.id = 999};
	int fd, rc;

	cr_assert_eq(svc_start(&svc, local_only), 0);
	fd = raw_connect(svc.sock, 10);
	raw_hello(fd);
	memset(&m, 0, sizeof(m));
	m.len = 4096;
	memset(m.uuid, 0xff, sizeof(m.uuid));
	rc = raw_call(fd, DP_MSG_REGION_REGISTER_CUDA, &m, sizeof(m) - 8, NULL);
	cr_assert_eq(rc, -EBADMSG, "short message: %d", rc);
	m.reserved = 1;
	rc = raw_call(fd, DP_MSG_REGION_REGISTER_CUDA, &m, sizeof(m), NULL);
	cr_assert_eq(rc, -EINVAL, "reserved field: %d", rc);
	m.reserved = 0;
	m.len = 0;
	rc = raw_call(fd, DP_MSG_REGION_REGISTER_CUDA, &m, sizeof(m), NULL);
	cr_assert_eq(rc, -EINVAL, "zero length: %d", rc);
	m.len = 4096;
	rc = raw_call(fd, DP_MSG_REGION_REGISTER_CUDA, &m, sizeof(m), NULL);
	cr_assert_eq(rc, -ENODEV, "unknown device: %d", rc);
#ifdef DP_HAVE_CUDA
	if (gpu_count() > 0) {
		struct cudaDeviceProp prop;

		cr_assert_eq(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
		memcpy(m.uuid, prop.uuid.bytes, sizeof(m.uuid));
		memset(m.handle, 0x5a, sizeof(m.handle));
		rc = raw_call(fd, DP_MSG_REGION_REGISTER_CUDA, &m, sizeof(m), NULL);
		cr_assert_eq(rc, -EINVAL, "a handle that is not one: %d", rc);
	}
#endif
	/* Still connected, one strike down: an ordinary error reply. */
	cr_assert_eq(raw_call(fd, DP_MSG_QUEUE_DESTROY, &id, sizeof(id), NULL), -EBADF);
	close(fd);
	cr_assert_eq(svc_stop(&svc), 0);
}
