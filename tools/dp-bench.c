/* SPDX-License-Identifier: MIT */
/*
 * dp-bench - load generator for a running dataplaned, measured side by side
 * with its peers in the same run (docs/benchmarks.md, "Targets"; man/dp-bench.1).
 * This file is its command line: one table of options, from which
 * getopt_long's options and --help are both made, and one table of the
 * benchmarks (dp-bench.h says which file holds each), run by name.
 *
 * Peers run with no service of ours alive: with --dataplaned, each of P3..P5
 * starts its own service (poller pinned to --service-cpu), runs ours, stops
 * the service, then runs its peer on the same CPUs. Before each peer, /proc
 * is checked for dataplaned processes and their pollers' CPUs and the result
 * printed; against a service of someone else's (--socket without
 * --dataplaned) the check says whether its pollers sat on the peer's CPUs.
 * Every run prints the placement first: a cache-line ping-pong between --cpu
 * and --service-cpu. Every transfer's bytes are checked after the timed
 * runs.
 *
 * Long runs show a progress line on stderr; --json prints the results as one
 * JSON document on stdout (the text goes to stderr); --no-peers runs and
 * prints nothing of the peers; --plot draws the latency CDF and throughput
 * over time with gnuplot.
 * Exit: 0 when every run completed and verified, 1 on a failure, 2 on usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp-bench.h"
#include "dp_tool.h"

struct bench_opts opt = {
	.service_cpu = -1,
	.peers = true,
	.max_size = 1024 * MiB,
	.depth = 256,
	.idle_queues = 1000,
	.spin_us = 1000000,
};

/* ---- the options that are more than a value to store ---- */

static void set_max_size(const char *a)
{
	opt.max_size = strtoull(a, NULL, 0);
	if (opt.max_size < MiB) {
		fprintf(stderr, "dp-bench: --max-size below 1 MiB\n");
		exit(2);
	}
}

static void set_seconds(const char *a)
{
	opt.seconds = atof(a);
	if (!(opt.seconds > 0 && opt.seconds <= 600)) {
		fprintf(stderr, "dp-bench: --seconds wants (0, 600]\n");
		exit(2);
	}
}

static void set_depth(const char *a)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(a, &end, 10);
	/* Above the service's --max-depth: its EINVAL, at the queue. */
	opt.depth = errno || *end || v > (1ul << 20) ? 0 : (uint32_t)v;
	if (opt.depth < 32 || (opt.depth & (opt.depth - 1))) {
		fprintf(stderr, "dp-bench: --depth wants a power of two, 32 .. 1048576\n");
		exit(2);
	}
}

static void set_json(const char *a)
{
	(void)a;
	report_json_begin();
}

static void usage(void);

static void show_help(const char *a)
{
	(void)a;
	usage();
	exit(0);
}

static void show_version(const char *a)
{
	(void)a;
	dp_tool_version("dp-bench");
	exit(0);
}

/* ---- the options ---- */

enum opt_kind {
	OPT_STR,   /* the argument, in the const char * at `to` */
	OPT_INT,   /* atoi's, in the int at `to` */
	OPT_UINT,  /* atoi's, in the unsigned at `to`, within [min, max] unless max is 0 */
	OPT_TRUE,  /* the bool at `to` set */
	OPT_FALSE, /* the bool at `to` cleared */
	OPT_CALL,  /* call(the argument) */
};

/*
 * Every option: getopt_long's table and the --help text are both made from
 * this one, in this order. In help, '\n' starts a continuation line.
 */
static const struct option_row {
	const char *name;
	const char *arg; /* what --help calls the argument; NULL: none */
	enum opt_kind kind;
	void *to; /* where it stores */
	void (*call)(const char *arg);
	unsigned min, max; /* OPT_UINT */
	const char *help;
} options[] = {
	{"socket", "PATH", OPT_STR, &opt.socket, NULL, 0, 0,
	 "the service to measure (default dp_connect's:\n"
	 "$DP_SOCKET, else $XDG_RUNTIME_DIR/dataplane/\n"
	 "dataplane.sock, else /run/dataplane/dataplane.sock)"},
	{"dataplaned", "PATH", OPT_STR, &opt.dataplaned, NULL, 0, 0,
	 "start services of our own from this binary: for each\n"
	 "of latency, rate and bandwidth when there is no\n"
	 "--socket (stopped before its peer runs on the same\n"
	 "CPUs), and for overhead, scale, idle-queues, stripe"},
	{"cpu", "N", OPT_INT, &opt.cpu, NULL, 0, 0, "the client's CPU (default 0)"},
	{"service-cpu", "N", OPT_INT, &opt.service_cpu, NULL, 0, 0,
	 "the CPU of the poller of a service of our own and of\n"
	 "fi_pingpong's server (default 1, 0 on one CPU)"},
	{"quick", NULL, OPT_TRUE, &opt.quick, NULL, 0, 0, "fewer samples: a short run"},
	{"max-size", "BYTES", OPT_CALL, NULL, set_max_size, 0, 0,
	 "the largest WRITE of bandwidth, vm and stripe, at\n"
	 "least 1 MiB (default 1073741824)"},
	{"no-peers", NULL, OPT_FALSE, &opt.peers, NULL, 0, 0, "run and print nothing of the peers"},
	{"json", NULL, OPT_CALL, NULL, set_json, 0, 0,
	 "one JSON object on stdout (the text goes to stderr)"},
	{"plot", "FILE.png", OPT_STR, &opt.plot, NULL, 0, 0,
	 "draw the latency CDF and throughput over time (scale:\n"
	 "rate and p99 against N) with gnuplot"},
	{"rounds", "N", OPT_UINT, &opt.rounds, NULL, 1, OVERHEAD_ROUNDS_MAX,
	 "overhead: rounds of stats on and off (default 7, 3\n"
	 "with --quick)"},
	{"depth", "N", OPT_CALL, NULL, set_depth, 0, 0,
	 "the depth of the queue each benchmark measures\n"
	 "through, fabric and bypass aside (256): a power of\n"
	 "two, 32 .. the service's --max-depth (default 256)"},
	{"peer", "HOST:PORT", OPT_STR, &opt.peer_addr, NULL, 0, 0,
	 "another service, as ours reaches it: fabric, bypass\n"
	 "and vm-target write there; session and serving open\n"
	 "a session there"},
	{"peer-socket", "PATH", OPT_STR, &opt.peer_sock, NULL, 0, 0,
	 "that service's control socket (dp-bench is a client\n"
	 "of both)"},
	{"busy-poll", NULL, OPT_TRUE, &opt.busy_poll, NULL, 0, 0,
	 "fabric, bypass: the client spins on its CQ instead of\n"
	 "sleeping in dp_wait (give it a CPU of its own, --cpu)"},
	{"serving-alloc", NULL, OPT_TRUE, &opt.serving_alloc, NULL, 0, 0,
	 "serving: the KV buffers are dp_alloc regions, not\n"
	 "the engines' own memory (dp_register_mem)"},
	{"pollers", "LIST", OPT_STR, &opt.pollers, NULL, 0, 0,
	 "scale, stripe: the N to run (default 1,2,4,.. while\n"
	 "the CPU lists allow; scale: 2 on shared CPUs where\n"
	 "only 1 fits; stripe: up to 4)"},
	{"service-cpus", "LIST", OPT_STR, &opt.service_cpus, NULL, 0, 0,
	 "scale, idle-queues, stripe: the pollers' CPUs, e.g.\n"
	 "8-15 (default the upper half of the CPUs)"},
	{"client-cpus", "LIST", OPT_STR, &opt.client_cpus, NULL, 0, 0,
	 "scale, idle-queues, stripe: the clients' CPUs, e.g.\n"
	 "0-7 (default the lower half)"},
	{"seconds", "S", OPT_CALL, NULL, set_seconds, 0, 0,
	 "scale, idle-queues: how long each rate runs (default\n"
	 "3, 1 with --quick)"},
	{"idle-queues", "N", OPT_UINT, &opt.idle_queues, NULL, 1, 65536,
	 "idle-queues: how many are open (default 1000)"},
	{"spin-us", "N", OPT_UINT, &opt.spin_us, NULL, 0, 0,
	 "the --spin-us of services of our own (default\n"
	 "1000000: they never sleep during a run);\n"
	 "idle-queues measures once it has ended"},
	{"help", NULL, OPT_CALL, NULL, show_help, 0, 0, "this text"},
	{"version", NULL, OPT_CALL, NULL, show_version, 0, 0, "print the version and exit"},
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* ---- the benchmarks, in the order --help lists them ---- */

static void bench_all(void)
{
	bench_latency();
	bench_rate();
	bench_bandwidth();
	if (opt.dataplaned)
		bench_overhead();
}

/* `check`: only the check for dataplaned pollers on the two CPUs, for
 * scripts that run a peer of their own (bench-fabric.sh). */
static void bench_check(void)
{
	int cpus[2] = {opt.cpu, opt.service_cpu};

	report_str("tool", "dp-bench");
	peer_check(cpus, opt.cpu == opt.service_cpu ? 1 : 2);
	report_close();
}

static const struct bench_entry benches[] = {
	{"all", bench_all, "latency, rate, bandwidth (and overhead with --dataplaned)"},
	{"latency", bench_latency, "P3: 64 B local WRITE, one outstanding, vs fi_pingpong"},
	{"rate", bench_rate, "P4: 64 B local WRITEs, batch 32, vs io_uring NOPs"},
	{"bandwidth", bench_bandwidth, "P5: local WRITEs of 1 MiB .. --max-size vs memcpy"},
	{"overhead", bench_overhead, "P3, P4 with the stats region on vs off (--dataplaned)"},
	{"notify", bench_notify, "64 B WRITE + notification vs a plain 64 B WRITE"},
	{"fabric", bench_fabric, "P6, P7: WRITEs to another service's segment (--peer)"},
	{"bypass", bench_bypass, "the same to this service's segment and to the other's"},
	{"vm", bench_vm, "WRITEs from dp_register_mem memory vs from dp_alloc's"},
	{"vm-target", bench_vm_target, "WRITEs into the other's export of the two (--peer)"},
	{"session", bench_session, "first contact with a fresh engine session vs by name"},
	{"serving", bench_serving, "KV pages through an engine session vs memcpy"},
	{"scale", bench_scale, "N pollers, N clients: P4 rate vs N x N=1's (--dataplaned)"},
	{"idle-queues", bench_idle_queues, "P4 with and without idle queues open (--dataplaned)"},
	{"stripe", bench_stripe, "a 1 GiB WRITE on N pollers vs memcpy (--dataplaned)"},
	{"placement", NULL, "only the cache-line ping-pong every run prints first"},
	{"check", bench_check, "only the check for dataplaned pollers on the CPUs"},
};

#define NBENCHES (sizeof(benches) / sizeof(benches[0]))

/* ---- --help ---- */

/* The rows of --help: the name from column 2, its help from `col`, at
 * least two spaces apart; '\n' in help starts a continuation line. */
static void help_row(const char *name, const char *arg, const char *help, int col)
{
	int n = printf("  %s%s%s", name, arg ? " " : "", arg ? arg : "");

	printf("%*s", n + 2 > col ? 2 : col - n, "");
	for (const char *nl; (nl = strchr(help, '\n')); help = nl + 1)
		printf("%.*s\n%*s", (int)(nl - help), help, col, "");
	printf("%s\n", help);
}

static void usage(void)
{
	char flag[32];

	printf("usage: dp-bench [options] [benchmark]\n");
	for (size_t i = 0; i < NOPTIONS; i++) {
		snprintf(flag, sizeof(flag), "--%s", options[i].name);
		help_row(flag, options[i].arg, options[i].help, 24);
	}
	printf("benchmarks:\n");
	for (size_t i = 0; i < NBENCHES; i++)
		help_row(benches[i].name, NULL, benches[i].help, 16);
	printf("Exit: 0 when every run completed and verified, 1 on a failure, 2 on usage.\n");
}

/* ---- parsing ---- */

static void option_set(const struct option_row *o, const char *a)
{
	switch (o->kind) {
	case OPT_STR:
		*(const char **)o->to = a;
		break;
	case OPT_INT:
		*(int *)o->to = atoi(a);
		break;
	case OPT_UINT:
		*(unsigned *)o->to = (unsigned)atoi(a);
		if (o->max && (*(unsigned *)o->to < o->min || *(unsigned *)o->to > o->max)) {
			fprintf(stderr, "dp-bench: --%s wants %u..%u\n", o->name, o->min, o->max);
			exit(2);
		}
		break;
	case OPT_TRUE:
	case OPT_FALSE:
		*(bool *)o->to = o->kind == OPT_TRUE;
		break;
	case OPT_CALL:
		o->call(a);
		break;
	}
}

static const struct bench_entry *find_bench(const char *what)
{
	for (size_t i = 0; i < NBENCHES; i++)
		if (!strcmp(what, benches[i].name))
			return &benches[i];
	fprintf(stderr, "dp-bench: unknown benchmark '%s'\nTry 'dp-bench --help'.\n", what);
	exit(2);
}

/* The options into opt; returns the benchmark to run, exits on --help,
 * --version and bad usage (2). */
static const struct bench_entry *parse_args(int argc, char **argv)
{
	static struct option longopts[NOPTIONS + 1];
	const struct bench_entry *b;
	int c;

	for (size_t i = 0; i < NOPTIONS; i++)
		longopts[i] = (struct option){options[i].name,
					      options[i].arg ? required_argument : no_argument,
					      NULL, 256 + (int)i};
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c < 256 || c >= 256 + (int)NOPTIONS) {
			fprintf(stderr, "Try 'dp-bench --help'.\n");
			exit(2);
		}
		option_set(&options[c - 256], optarg);
	}
	b = find_bench(optind < argc ? argv[optind] : "all");
	if (opt.service_cpu < 0)
		opt.service_cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
	opt.own_service = opt.dataplaned && !opt.socket;
	if (!opt.seconds)
		opt.seconds = opt.quick ? 1 : 3;
	return b;
}

int main(int argc, char **argv)
{
	const struct bench_entry *b = parse_args(argc, argv);

	/* The check runs alone: no report's opening, no placement. */
	if (b->run == bench_check) {
		bench_check();
		return 0;
	}
	report_start("dp-bench", b->name, opt.peers);
	report_obj("cpus");
	report_num("client", opt.cpu);
	report_num("service", opt.service_cpu);
	report_end();
	/* Before any service of ours starts, on the CPUs the runs use. */
	bench_place_and_pin(opt.cpu, opt.service_cpu);
	if (b->run)
		b->run();
	report_close();
	if (opt.plot && plot_write(opt.plot))
		return 1;
	if (opt.plot)
		fprintf(stderr, "dp-bench: wrote %s\n", opt.plot);
	return 0;
}
