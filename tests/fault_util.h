/* SPDX-License-Identifier: MIT */
/* fault_util.h - helpers of the suites that run a fault-injection build of
 * dataplaned (make faults; docs/reliability.md): skip unless the service
 * is one, and read what it injected from its exit report. */
#ifndef DP_TEST_FAULT_UTIL_H
#define DP_TEST_FAULT_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"

/* Only a fault-injection build documents DP_FAULTS in its --help. */
static inline void need_fault_build(void)
{
	char cmd[512], line[256];
	bool found = false;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "'%s' --help 2>&1", build_path("dataplaned"));
	f = popen(cmd, "r");
	cr_assert_not_null(f, "popen %s", cmd);
	while (fgets(line, sizeof(line), f))
		found |= strstr(line, "DP_FAULTS") != NULL;
	pclose(f);
	if (!found)
		cr_skip_test("%s was built without fault injection (make faults builds one with "
			     "FAULTS=1)",
			     build_path("dataplaned"));
}

/* The exit report of a fault-injection build ("faults injected: site=N ..."). */
struct injected {
	unsigned long long eagain, post_fail, cq_err, submit, eio, uring_eagain, cuda;
};

/* Stops the service (it must exit 0) and returns what it injected, read
 * from its log through an fd kept open while svc_stop removes the file. */
static inline struct injected stop_and_count(struct svc *s)
{
	struct injected n = {0};
	char line[1024];
	bool found = false;
	FILE *f = fopen(s->log, "r");
	int rc;

	cr_assert_not_null(f, "%s: %s", s->log, strerror(errno));
	rc = svc_stop(s);
	cr_assert_eq(rc, 0, "dataplaned exit status %d, want 0", rc);
	rewind(f);
	while (!found && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "faults injected: ");

		found = p && sscanf(p,
				    "faults injected: fi_post_eagain=%llu fi_post_fail=%llu "
				    "fi_cq_err=%llu uring_submit=%llu uring_eio=%llu "
				    "uring_eagain=%llu cuda=%llu",
				    &n.eagain, &n.post_fail, &n.cq_err, &n.submit, &n.eio,
				    &n.uring_eagain, &n.cuda) == 7;
	}
	fclose(f);
	cr_assert(found, "no 'faults injected:' line in the service's log");
	return n;
}

#endif /* DP_TEST_FAULT_UTIL_H */
