/* SPDX-License-Identifier: MIT */
/* fixture.h - real dataplaned processes for the integration suites. */
#ifndef DP_TEST_FIXTURE_H
#define DP_TEST_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct svc {
	pid_t pid;
	char dir[64];	/* private temp dir, removed by svc_stop */
	char sock[108]; /* control socket path */
	char log[128];	/* the service's stderr */
};

/* Starts build/dataplaned (found through $DP_BUILD) with a private socket and
 * the extra flags given (NULL-terminated), and waits until it accepts
 * clients. Returns 0 or -errno; on failure the log is printed. */
int svc_start(struct svc *s, const char *const *extra_args);
/* The same, run under a command prefix (NULL-terminated, at most 16 words),
 * e.g. {"ip", "netns", "exec", "ns1", NULL}; the prefix must exec the
 * service in place (same pid). */
int svc_start_in(struct svc *s, const char *const *prefix, const char *const *extra_args);
/* SIGTERM, waits up to 10 s; returns the exit status (or -1 if it had to be
 * killed, 128+sig if it died by a signal). Removes the temp dir. */
int svc_stop(struct svc *s);
/* SIGKILL and reap, for crash tests. */
void svc_kill(struct svc *s);
/* Path of a binary in the build tree ($DP_BUILD/name). */
const char *build_path(const char *name);
/* Whether the service's log (so far) has a line containing @what. */
bool svc_log_has(const struct svc *s, const char *what);
/* Open fds and mapped bytes of a process, from /proc. */
int proc_fd_count(pid_t pid);
long proc_mapped_kib(pid_t pid);
/* Deterministic pattern byte for (seed, offset). */
static inline uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (off >> 3) * 0xbf58476d1ce4e5b9ull;
	return (uint8_t)((x >> 29) + off);
}
void pattern_fill(void *buf, uint64_t len, uint64_t seed);
/* Offset of the first mismatch, or -1 when buf holds the pattern. */
int64_t pattern_check(const void *buf, uint64_t len, uint64_t seed);

#endif
