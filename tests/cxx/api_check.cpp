// SPDX-License-Identifier: MIT
// api_check.cpp - dataplane.h from C++: the whole client API used once
// (connect, alloc, register_mem, export, open, dp_prep_write / dp_prep_read,
// submit, wait, stats, dp_strerror / dp_last_error). tools/check-header.sh compiles and
// links it with every C++ standard; it runs the transfer only when a service
// answers (usage: api_check [SOCKET]); with none it says so and exits 0.
// Exit 0 ok or no service, 1 a failure.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dataplane.h"

namespace
{

int fail(const char *what, int rc)
{
	std::fprintf(stderr, "api_check: %s: %s [%s]\n", what, dp_strerror(rc), dp_last_error());
	return 1;
}

} // namespace

int main(int argc, char **argv)
{
	const char *sock = argc > 1 ? argv[1] : NULL;
	struct dp_client *c = NULL;
	struct dp_queue *q = NULL;
	struct dp_desc d[2];
	struct dp_cqe cqe[2];
	struct dp_queue_stats st;
	void *src = NULL, *dst = NULL;
	int rc, src_region, dst_region, seg;

	// The inline helpers fill every field.
	dp_prep_write(&d[0], 1, 2, 3, 4, 5, 6);
	dp_prep_read(&d[1], 1, 2, 3, 4, 5, 6);
	if (d[0].opcode != DP_OP_WRITE || d[1].opcode != DP_OP_READ || d[0].len != 5 ||
	    d[1].user_data != 6 || d[0].notify || d[1].flags)
		return fail("dp_prep_write / dp_prep_read", -EINVAL);

	rc = dp_connect(sock, "api_check.cpp", &c);
	if (rc == -ENOENT || rc == -ECONNREFUSED) {
		std::printf("api_check: no service (%s); compiled and linked only\n",
			    dp_last_error());
		return 0;
	}
	if (rc < 0)
		return fail("dp_connect", rc);
	if ((src_region = dp_alloc(c, 4096, 0, &src)) < 0)
		return fail("dp_alloc", src_region);
	if ((dst_region = dp_alloc(c, 4096, 0, &dst)) < 0)
		return fail("dp_alloc", dst_region);
	if ((rc = dp_queue_create(c, 0, &q)) < 0)
		return fail("dp_queue_create", rc);
	if ((rc = dp_segment_export(c, dst_region, "api-check/cxx", DP_ACCESS_RW)) < 0)
		return fail("dp_segment_export", rc);
	if ((seg = dp_segment_open(c, NULL, "api-check/cxx", DP_ACCESS_RW)) < 0)
		return fail("dp_segment_open", seg);
	std::memcpy(src, "hello from C++", 15);
	dp_prep_write(&d[0], src_region, 0, seg, 64, 15, 1);
	dp_prep_read(&d[1], src_region, 1024, seg, 64, 15, 2);
	for (int i = 0; i < 2; i++) {
		if ((rc = dp_submit(q, &d[i], 1)) != 1)
			return fail("dp_submit", rc < 0 ? rc : -EAGAIN);
		if ((rc = dp_wait(q, &cqe[i], 1, 5000)) != 1)
			return fail("dp_wait", rc < 0 ? rc : -ETIMEDOUT);
		if (cqe[i].status)
			return fail("completion", cqe[i].status);
	}
	if (std::strcmp(static_cast<char *>(dst) + 64, "hello from C++") ||
	    std::strcmp(static_cast<char *>(src) + 1024, "hello from C++"))
		return fail("bytes", -EIO);
	// Memory of this process, not shared: dp_register_mem.
	static char mine[64] = "hello from C++ memory";
	int mem_region = dp_register_mem(c, mine, sizeof(mine));
	if (mem_region < 0)
		return fail("dp_register_mem", mem_region);
	dp_prep_write(&d[0], mem_region, 0, seg, 2048, sizeof(mine), 3);
	if ((rc = dp_submit(q, &d[0], 1)) != 1)
		return fail("dp_submit", rc < 0 ? rc : -EAGAIN);
	if ((rc = dp_wait(q, &cqe[0], 1, 5000)) != 1)
		return fail("dp_wait", rc < 0 ? rc : -ETIMEDOUT);
	if (cqe[0].status)
		return fail("completion from dp_register_mem memory", cqe[0].status);
	if (std::strcmp(static_cast<char *>(dst) + 2048, mine))
		return fail("bytes from dp_register_mem memory", -EIO);
	if ((rc = dp_free(c, mem_region)) < 0)
		return fail("dp_free", rc);
	if ((rc = dp_queue_stats(q, &st)) < 0 || st.completed != 3)
		return fail("dp_queue_stats", rc < 0 ? rc : -EIO);
	std::printf("api_check: ok, two transfers through %s\n", dp_server_name(c));
	dp_segment_close(c, seg);
	dp_segment_unexport(c, "api-check/cxx");
	dp_queue_destroy(q);
	dp_close(c);
	return 0;
}
