/* SPDX-License-Identifier: MIT */
/* fault.c - $DP_FAULTS, the per-thread generators and the exit report. See fault.h. */
#include "fault.h"

#ifdef DP_FAULT_INJECT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp_internal.h"

static const char *const site_names[FAULT_NSITES] = {
	[FAULT_FI_POST_EAGAIN] = "fi_post_eagain",
	[FAULT_FI_POST_FAIL] = "fi_post_fail",
	[FAULT_FI_CQ_ERR] = "fi_cq_err",
	[FAULT_URING_SUBMIT] = "uring_submit",
	[FAULT_URING_EIO] = "uring_eio",
	[FAULT_URING_EAGAIN] = "uring_eagain",
	[FAULT_CUDA] = "cuda",
};

uint64_t fault_threshold[FAULT_NSITES];
atomic_ullong fault_injected[FAULT_NSITES];
__thread uint64_t fault_rng;
static uint64_t seed;
static atomic_uint threads;

/* splitmix64: spreads (seed, thread number) over the generator's state. */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A thread's first roll: its own stream, reproducible for one seed and one
 * order of first rolls (the poller threads' usually). Never 0 (xorshift's
 * fixed point). */
uint64_t fault_rng_seed(void)
{
	uint64_t x = mix(seed + mix(atomic_fetch_add(&threads, 1) + 1));

	fault_rng = x ? x : 1;
	return fault_rng;
}

static void report(void)
{
	char line[256];
	size_t n = 0;

	for (int i = 0; i < FAULT_NSITES; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=%llu", site_names[i],
				      (unsigned long long)atomic_load(&fault_injected[i]));
	log_warn("faults injected:%s", line);
}

static void bad_spec(const char *spec, const char *what, const char *tok)
{
	fprintf(stderr,
		"dataplaned: DP_FAULTS=\"%s\": %s '%s'; want site=rate,...[,seed=N] with a rate "
		"in [0, 1] and a site among fi_post_eagain, fi_post_fail, fi_cq_err, "
		"uring_submit, uring_eio, uring_eagain, cuda\n",
		spec, what, tok);
	exit(2);
}

void fault_init(void)
{
	const char *spec = getenv("DP_FAULTS");
	char buf[512], *save, *tok, shown[256];
	double rate[FAULT_NSITES] = {0};
	size_t n = 0;
	bool any = false;

	atexit(report);
	if (!spec || !*spec) {
		log_info("fault injection build; DP_FAULTS is not set: no faults");
		return;
	}
	if (strlen(spec) >= sizeof(buf))
		bad_spec(spec, "too long", "");
	strcpy(buf, spec);
	for (tok = buf;; tok = NULL) {
		char *item = strtok_r(tok, ",", &save), *eq, *end;
		int site;

		if (!item)
			break;
		eq = strchr(item, '=');
		if (!eq || eq == item || !eq[1])
			bad_spec(spec, "not name=value:", item);
		*eq = 0;
		errno = 0;
		if (!strcmp(item, "seed")) {
			seed = strtoull(eq + 1, &end, 0);
			if (errno || *end || eq[1] == '-')
				bad_spec(spec, "seed is not an unsigned number:", eq + 1);
			continue;
		}
		for (site = 0; site < FAULT_NSITES && strcmp(item, site_names[site]); site++)
			;
		if (site == FAULT_NSITES)
			bad_spec(spec, "unknown site", item);
		rate[site] = strtod(eq + 1, &end);
		if (errno || *end || !(rate[site] >= 0 && rate[site] <= 1))
			bad_spec(spec, "rate is not a number in [0, 1]:", eq + 1);
	}
	shown[0] = 0;
	for (int i = 0; i < FAULT_NSITES; i++) {
		/* A 53-bit draw below the threshold: exact for rate 1 too. */
		fault_threshold[i] = (uint64_t)(rate[i] * 9007199254740992.0);
		any |= fault_threshold[i] != 0;
		if (fault_threshold[i])
			n += (size_t)snprintf(shown + n, sizeof(shown) - n, " %s=%g", site_names[i],
					      rate[i]);
	}
	if (any)
		log_warn("fault injection on:%s seed=%llu", shown, (unsigned long long)seed);
	else
		log_info("fault injection build; DP_FAULTS sets no rate: no faults");
}

void fault_usage(FILE *f)
{
	fprintf(f, "Fault injection (this build only): DP_FAULTS=site=rate,...[,seed=N], a rate "
		   "in [0, 1] per site:\n"
		   "  fi_post_eagain fi_post_fail fi_cq_err uring_submit uring_eio uring_eagain "
		   "cuda\n"
		   "  (docs/reliability.md); a bad DP_FAULTS exits 2. The counts are logged at "
		   "exit.\n");
}
#endif
