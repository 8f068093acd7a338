/* SPDX-License-Identifier: MIT */
/*
 * options.c - dataplaned's command line: one table of flags, from which
 * getopt_long's options and --help are both made. A flag sets what it
 * configures wherever that lives (struct dp_config, the fabric's and the
 * file engine's configuration, the directory, same-host serving), so this
 * file depends on every folder, as main does. See options.h.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "directory.h"
#include "dp_version.h"
#include "dp_internal.h"
#include "fabric.h"
#include "fault.h"
#include "file.h"
#include "options.h"
#include "samehost.h"

static void usage(FILE *f);

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "dataplaned: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'dataplaned --help'.\n");
	exit(2);
}

static unsigned long parse_num(const char *flag, const char *s, unsigned long min,
			       unsigned long max)
{
	char *end;
	unsigned long v;

	errno = 0;
	if (!isdigit((unsigned char)*s))
		die_usage("%s wants a number", flag);
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max) {
		fprintf(stderr, "dataplaned: %s %s: out of range [%lu, %lu]\n", flag, s, min, max);
		exit(2);
	}
	return v;
}

/* "0,2-3" -> cpus[]; every CPU must be one this process may run on. */
static unsigned parse_cpus(const char *s, int *cpus, const cpu_set_t *allowed)
{
	unsigned n = 0;
	const char *p = s;

	while (*p) {
		char *end;
		long a, b;

		if (!isdigit((unsigned char)*p))
			die_usage("--cpus %s: expected a list like 0,2-3", s);
		a = b = strtol(p, &end, 10);
		if (*end == '-') {
			if (!isdigit((unsigned char)end[1]))
				die_usage("--cpus %s: expected a list like 0,2-3", s);
			b = strtol(end + 1, &end, 10);
		}
		if (*end && *end != ',')
			die_usage("--cpus %s: expected a list like 0,2-3", s);
		if (b < a || b >= CPU_SETSIZE)
			die_usage("--cpus %s: bad range", s);
		for (long c = a; c <= b; c++) {
			if (!CPU_ISSET(c, allowed)) {
				fprintf(stderr,
					"dataplaned: --cpus: cpu %ld does not exist or is not "
					"allowed\n",
					c);
				exit(2);
			}
			if (n == DP_MAX_POLLERS)
				die_usage("--cpus %s: too many CPUs", s);
			cpus[n++] = (int)c;
		}
		p = *end ? end + 1 : end;
	}
	if (!n)
		die_usage("--cpus %s: empty list", s);
	return n;
}

static void default_socket_path(char *out, size_t len)
{
	const char *env = getenv("XDG_RUNTIME_DIR");

	if (env && *env)
		snprintf(out, len, "%s/dataplane/dataplane.sock", env);
	else
		snprintf(out, len, "/run/dataplane/dataplane.sock");
}

/* ---- the flags: one handler each, called with the flag's argument ---- */

static const char *cpus_arg; /* --cpus, parsed once --pollers is known */

static void set_socket(const char *a)
{
	if (strlen(a) >= sizeof(cfg.socket_path) || !*a)
		die_usage("--socket %s: path empty or too long", a);
	strcpy(cfg.socket_path, a);
}

static void set_pollers(const char *a)
{
	cfg.pollers = (unsigned)parse_num("--pollers", a, 1, DP_MAX_POLLERS);
}

static void set_cpus(const char *a)
{
	cpus_arg = a;
}

static void set_spin(const char *a)
{
	cfg.spin_us = (unsigned)parse_num("--spin-us", a, 0, 10000000);
}

static void set_max_clients(const char *a)
{
	cfg.max_clients = (unsigned)parse_num("--max-clients", a, 1, 65536);
}

static void set_max_clients_per_uid(const char *a)
{
	cfg.max_clients_per_uid = (unsigned)parse_num("--max-clients-per-uid", a, 1, 65536);
}

static void set_max_clients_per_process(const char *a)
{
	cfg.max_clients_per_process = (unsigned)parse_num("--max-clients-per-process", a, 1, 65536);
}

static void set_max_connecting_per_process(const char *a)
{
	cfg.max_connecting_per_process =
		(unsigned)parse_num("--max-connecting-per-process", a, 1, 65536);
}

static void set_max_mapped_per_process(const char *a)
{
	cfg.max_mapped_per_process =
		(uint64_t)parse_num("--max-mapped-gb-per-process", a, 1, 131072) << 30;
}

static void set_max_mapped(const char *a)
{
	cfg.max_mapped_per_uid = (uint64_t)parse_num("--max-mapped-gb-per-uid", a, 1, 131072) << 30;
}

static void set_hello_timeout(const char *a)
{
	cfg.hello_timeout_ms = (unsigned)parse_num("--hello-timeout-ms", a, 1, 3600000);
}

static void set_max_queues(const char *a)
{
	cfg.max_queues = (unsigned)parse_num("--max-queues", a, 1, DP_MAX_QUEUES);
}

static void set_queue_depth(const char *a)
{
	cfg.queue_depth = (unsigned)parse_num("--queue-depth", a, 1, DP_RING_MAX_ENTRIES);
}

static void set_max_depth(const char *a)
{
	cfg.max_depth = (unsigned)parse_num("--max-depth", a, 1, DP_RING_MAX_ENTRIES);
}

static void set_chunk(const char *a)
{
	cfg.chunk = parse_num("--copy-chunk", a, 4096, 1ul << 30);
}

static void set_stripe_min(const char *a)
{
	cfg.stripe_min = parse_num("--stripe-min", a, 0, 1ul << 40);
}

static void set_rpc_port(const char *a)
{
	cfg.rpc_port = (int)parse_num("--rpc-port", a, 0, 65535);
}

static char peer_key[DP_AUTH_PATH_MAX]; /* --peer-key; "": the default */

static void set_peer_key(const char *a)
{
	if (!*a || strlen(a) >= sizeof(peer_key))
		die_usage("--peer-key %s: want a file path below 256 bytes", a);
	snprintf(peer_key, sizeof(peer_key), "%s", a);
}

static void set_server_name(const char *a)
{
	if (!*a || strlen(a) > 48 || strpbrk(a, ":@/ "))
		die_usage("--server-name %s: want a host name or address", a);
	strcpy(cfg.server_host, a);
}

static void set_provider(const char *a)
{
	static const char *const provs[] = {"efa",     "efa-direct", "tcp", "shm",
					    "sockets", "auto",	     "none"};
	bool ok = false;

	for (unsigned i = 0; i < sizeof(provs) / sizeof(provs[0]); i++)
		ok |= !strcmp(a, provs[i]);
	if (!ok)
		die_usage("--provider %s: want efa, efa-direct, tcp, shm, sockets, auto or none",
			  a);
	snprintf(fab_cfg.provider, sizeof(fab_cfg.provider), "%s", a);
}

static void set_nics(const char *a)
{
	if (!*a || strlen(a) >= sizeof(fab_cfg.nics))
		die_usage("--nics %s: empty or too long", a);
	strcpy(fab_cfg.nics, a);
}

static void set_slice(const char *a)
{
	fab_cfg.slice = parse_num("--slice", a, 4096, 1ul << 30);
}

static void set_fabric_timeout(const char *a)
{
	fab_cfg.timeout_ms = (unsigned)parse_num("--fabric-timeout-ms", a, 1, 3600000);
}

static void set_no_hmem(const char *a)
{
	(void)a;
	fab_cfg.no_hmem = true;
}

static void set_stage_bufs(const char *a)
{
	fab_cfg.stage_bufs = (unsigned)parse_num("--stage-bufs", a, 0, 64);
}

static void set_stage_host(const char *a)
{
	(void)a;
	fab_cfg.stage_host = true;
}

static void set_file_root(const char *a)
{
	if (!*a || strlen(a) >= sizeof(fio_cfg.root))
		die_usage("--file-root %s: empty or too long", a);
	strcpy(fio_cfg.root, a);
}

static void set_io_depth(const char *a)
{
	fio_cfg.depth = (unsigned)parse_num("--io-depth", a, 1, 4096);
}

static void set_io_slice(const char *a)
{
	fio_cfg.slice = parse_num("--io-slice", a, 4096, 1ul << 30);
	if (fio_cfg.slice % 4096)
		die_usage("--io-slice %s: want a multiple of 4096", a);
}

static void set_staging(const char *a)
{
	fio_cfg.staging = parse_num("--staging", a, 0, 1ul << 40);
}

static void set_max_pinned(const char *a)
{
	fio_cfg.max_pinned = parse_num("--max-pinned-mb", a, 0, 1ul << 20) << 20;
}

static void set_directory(const char *a)
{
	/* The URL is not echoed: it may hold a password. */
	if (directory_configure(a))
		die_usage("%s: want redis://[user:password@]host[:port][/db]", "--directory");
}

static void set_directory_ttl(const char *a)
{
	directory_set_ttl((unsigned)parse_num("--directory-ttl", a, 1, 86400));
}

static void set_stats(const char *a)
{
	if (strlen(a) >= sizeof(cfg.stats_name) || !*a || strchr(a, '/'))
		die_usage("--stats %s: want a name without '/', under 64 bytes", a);
	strcpy(cfg.stats_name, a);
}

static void set_no_stats(const char *a)
{
	(void)a;
	cfg.no_stats = true;
}

static void set_no_membarrier(const char *a)
{
	(void)a;
	cfg.no_membarrier = true;
}

static void set_no_same_host(const char *a)
{
	(void)a;
	samehost_configure(true, NULL);
}

static void set_same_host_socket(const char *a)
{
	if (!*a || strlen(a) >= DP_SUN_PATH_MAX)
		die_usage("--same-host-socket %s: want a path shorter than 108 bytes", a);
	samehost_configure(false, a);
}

static void set_log_level(const char *a)
{
	static const char *const levels[] = {"error", "warn", "info", "debug"};

	dp_log_level = -1;
	for (int i = 0; i < 4; i++)
		if (!strcmp(a, levels[i]))
			dp_log_level = i;
	if (dp_log_level < 0)
		die_usage("--log-level %s: want error, warn, info or debug", a);
}

static void show_help(const char *a)
{
	(void)a;
	usage(stdout);
	exit(0);
}

static void show_version(const char *a)
{
	(void)a;
	printf("dataplaned (dataplane) %s\n", DP_VERSION_STRING);
	exit(0);
}

#define STR_(x) #x
#define STR(x) STR_(x)

/*
 * Every flag: getopt_long's table and the --help text are both made from
 * this one, in this order. In help, '\n' starts a continuation line.
 */
static const struct flag {
	const char *name;
	int has_arg;
	void (*set)(const char *arg);
	const char *arg;  /* what --help calls the argument; NULL: none */
	const char *help; /* "(tests) ...": a test option, in the man page, not in --help */
} flags[] = {
	{"socket", required_argument, set_socket, "PATH",
	 "control socket (default $XDG_RUNTIME_DIR/dataplane/dataplane.sock,\n"
	 "else /run/dataplane/dataplane.sock)"},
	{"pollers", required_argument, set_pollers, "N",
	 "polling threads (default 1, at most " STR(DP_MAX_POLLERS) ")"},
	{"cpus", required_argument, set_cpus, "LIST",
	 "pin poller i to the i-th CPU of LIST, e.g. 2,3 or 2-5\n"
	 "(default: the highest CPUs the process may use)"},
	{"spin-us", required_argument, set_spin, "N",
	 "busy-poll this long before sleeping on doorbells (default 50)"},
	{"max-clients", required_argument, set_max_clients, "N",
	 "clients served at once; beyond, dp_connect fails with EUSERS\n"
	 "(default 256)"},
	{"max-clients-per-uid", required_argument, set_max_clients_per_uid, "N",
	 "connections one uid may hold,\n"
	 "HELLO or not; beyond, dp_connect fails with EDQUOT\n"
	 "(default: half of --max-clients)"},
	{"max-mapped-gb-per-uid", required_argument, set_max_mapped, "N",
	 "GiB of client memory the service\n"
	 "maps for one uid's clients together (dp_alloc, dp_register_fd);\n"
	 "beyond, EDQUOT (default 16384 = 16 TiB, 1/8 of a 47-bit address\n"
	 "space; at most 131072)"},
	{"max-clients-per-process", required_argument, set_max_clients_per_process, "N",
	 "connections one process (SO_PEERCRED pid) may\n"
	 "hold, HELLO or not; beyond, dp_connect fails with EMFILE; no other\n"
	 "process is refused for it (default: an eighth of\n"
	 "--max-clients-per-uid, at least 4)"},
	{"max-connecting-per-process", required_argument, set_max_connecting_per_process, "N",
	 "connections one process may\n"
	 "have open without HELLO; one more hangs up on its oldest silent one\n"
	 "(default 32)"},
	{"max-mapped-gb-per-process", required_argument, set_max_mapped_per_process, "N",
	 "GiB of client memory the service\n"
	 "maps for one process's clients together; beyond, EFBIG (default: a\n"
	 "quarter of --max-mapped-gb-per-uid, 4096 = 4 TiB by default)"},
	{"hello-timeout-ms", required_argument, set_hello_timeout, "N",
	 "a connection without HELLO after\n"
	 "N ms is dropped (default 2000)"},
	{"max-queues", required_argument, set_max_queues, "N",
	 "queue pairs per client (default " STR(DP_MAX_QUEUES) ")"},
	{"queue-depth", required_argument, set_queue_depth, "N",
	 "default entries per ring, power of two (default 256)"},
	{"max-depth", required_argument, set_max_depth, "N",
	 "largest depth a client may ask for (default 4096)"},
	{"copy-chunk", required_argument, set_chunk, "BYTES",
	 "local copy step; larger copies are interleaved (default 262144)"},
	{"stripe-min", required_argument, set_stripe_min, "BYTES",
	 "host copies of this size or more are shared out in --copy-chunk\n"
	 "stripes with pollers that are idle (default 16777216; 0: never)"},
	{"rpc-port", required_argument, set_rpc_port, "N",
	 "TCP port peers reach this service on; 0 = pick (default 0)"},
	{"peer-key", required_argument, set_peer_key, "FILE",
	 "fleet key: peers are trusted only if they hold the same one\n"
	 "(mode 0600, this user's; default /var/lib/dataplane/peer.key for\n"
	 "root, else ~/.local/state/dataplane/peer.key, made when missing)"},
	{"server-name", required_argument, set_server_name, "HOST",
	 "host part of this service's name HOST:PORT (default: hostname)"},
	{"same-host-socket", required_argument, set_same_host_socket, "PATH",
	 "Unix socket on which services of this host are given exported\n"
	 "memory directly (default: the socket path + \".peer\")"},
	{"no-same-host", no_argument, set_no_same_host, NULL,
	 "services of this host go through the fabric like any other"},
	{"provider", required_argument, set_provider, "P",
	 "fabric provider: efa, efa-direct, tcp, shm, sockets, auto (efa,\n"
	 "else tcp)\n"
	 "or none (local transfers only) (default auto)"},
	{"nics", required_argument, set_nics, "LIST",
	 "fabric domains (NICs) to use as rails, comma-separated, or auto\n"
	 "(efa: every device; others: the first) (default auto)"},
	{"slice", required_argument, set_slice, "BYTES",
	 "fabric transfers go in slices of this size (default 1048576)"},
	{"fabric-timeout-ms", required_argument, set_fabric_timeout, "N",
	 "a fabric transfer with no slice done for this long fails with ETIMEDOUT (default 5000)"},
	{"no-hmem", no_argument, set_no_hmem, NULL,
	 "open rails without FI_HMEM: GPU memory goes over the fabric\n"
	 "through host staging (default: FI_HMEM where the provider has it)"},
	{"stage-bufs", required_argument, set_stage_bufs, "N",
	 "host staging of GPU memory over rails without FI_HMEM, ours and our\n"
	 "exports' for peers: N bounce buffers of --slice bytes per poller\n"
	 "(default 4, at most 64; 0: off, such transfers fail with ENOTSUP)"},
	{"stage-host", no_argument, set_stage_host, NULL,
	 "(tests) host memory stands in for GPU memory the rails cannot\n"
	 "register: staged through memcpy, its exports staged for peers"},
	{"file-root", required_argument, set_file_root, "DIR",
	 "dp_open_file paths are opened beneath DIR (default: none, refused)"},
	{"io-depth", required_argument, set_io_depth, "N",
	 "file I/O: reads/writes in flight per poller (default 32)"},
	{"io-slice", required_argument, set_io_slice, "BYTES",
	 "file I/O: bytes per read/write, a multiple of 4096 (default 1048576)"},
	{"staging", required_argument, set_staging, "BYTES",
	 "file I/O: pinned staging pool for GPU targets (default 67108864)"},
	{"max-pinned-mb", required_argument, set_max_pinned, "N",
	 "file I/O: host memory a client may have pinned as io_uring fixed\n"
	 "buffers, in 16 MiB windows; beyond it, plain reads and writes\n"
	 "(default 1024; 0: no fixed buffers)"},
	{"directory", required_argument, set_directory, "URL",
	 "cluster directory redis://[user:password@]host[:port][/db]:\n"
	 "exports are published there, unknown names looked up there\n"
	 "(password also from $DP_DIRECTORY_PASSWORD) (default: none)"},
	{"directory-ttl", required_argument, set_directory_ttl, "S",
	 "records expire S seconds after their owner stops (default 10)"},
	{"stats", required_argument, set_stats, "NAME",
	 "name of the shared-memory stats region in /dev/shm\n"
	 "(default dataplane-HASH, derived from the socket path)"},
	{"no-stats", no_argument, set_no_stats, NULL,
	 "no stats region (and no counting for it on the data path)"},
	{"no-membarrier", no_argument, set_no_membarrier, NULL,
	 "clients fence after every dp_submit, and pollers before they\n"
	 "sleep or park queues, instead of pollers arming their sleep with\n"
	 "membarrier(2) (default: membarrier where the kernel has it)"},
	{"log-level", required_argument, set_log_level, "LEVEL",
	 "error, warn, info or debug (default info)"},
	{"help", no_argument, show_help, NULL, "this text"},
	{"version", no_argument, show_version, NULL, "print the version and exit"},
};

#define NFLAGS (sizeof(flags) / sizeof(flags[0]))
#define HELP_COL 23 /* where the help text starts */

static void usage(FILE *f)
{
	fprintf(f, "usage: dataplaned [options]\n");
	for (size_t i = 0; i < NFLAGS; i++) {
		const char *h = flags[i].help;
		int n;

		if (!strncmp(h, "(tests)", 7))
			continue;
		n = fprintf(f, "  --%s%s%s", flags[i].name, flags[i].arg ? " " : "",
			    flags[i].arg ? flags[i].arg : "");

		/* At least two spaces between the flag and its text. */
		fprintf(f, "%*s", n + 2 > HELP_COL ? 2 : HELP_COL - n, "");
		for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
			fprintf(f, "%.*s\n%*s", (int)(nl - h), h, HELP_COL, "");
		fprintf(f, "%s\n", h);
	}
	fprintf(f, "Exit codes: 0 clean shutdown (SIGTERM/SIGINT), 1 start-up failure, 2 bad "
		   "usage.\n");
	fault_usage(f);
}

/* What the flags leave to be settled once all are read: the depths, the
 * pollers' CPUs, the server's host name (its port is known once the RPC
 * port listens: config_set_rpc_port). */
static void finish_args(void)
{
	cpu_set_t allowed;

	if (cfg.queue_depth & (cfg.queue_depth - 1) || cfg.max_depth & (cfg.max_depth - 1))
		die_usage("%s: queue depths must be powers of two", "--queue-depth/--max-depth");
	if (cfg.queue_depth > cfg.max_depth)
		die_usage("%s: --queue-depth exceeds --max-depth", "--queue-depth");
	if (cfg.inline_max > cfg.chunk)
		cfg.inline_max = cfg.chunk;
	/* One uid gets half the slots unless told otherwise (and never
	 * fewer than one). */
	if (!cfg.max_clients_per_uid)
		cfg.max_clients_per_uid = cfg.max_clients > 1 ? cfg.max_clients / 2 : 1;
	/* One process gets an eighth of its uid's connections (at least 4,
	 * at most all of them) and a quarter of its mapping quota unless told
	 * otherwise: one process at its limits leaves its uid's other
	 * processes most of theirs (docs/reliability.md, "Limits"). */
	if (!cfg.max_clients_per_process) {
		unsigned least = cfg.max_clients_per_uid < 4 ? cfg.max_clients_per_uid : 4;

		cfg.max_clients_per_process =
			cfg.max_clients_per_uid / 8 > least ? cfg.max_clients_per_uid / 8 : least;
	}
	if (!cfg.max_mapped_per_process)
		cfg.max_mapped_per_process = cfg.max_mapped_per_uid / 4;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		CPU_ZERO(&allowed);
	for (unsigned i = 0; i < DP_MAX_POLLERS; i++)
		cfg.cpus[i] = -1;
	if (cpus_arg) {
		unsigned ncpus = parse_cpus(cpus_arg, cfg.cpus, &allowed);

		if (ncpus < cfg.pollers) {
			fprintf(stderr, "dataplaned: --cpus lists %u CPUs for %u pollers\n", ncpus,
				cfg.pollers);
			exit(2);
		}
	} else {
		/* Pollers take the highest allowed CPUs, leaving CPU 0 (where
		 * interrupts and housekeeping usually land) to the rest. */
		unsigned i = 0;

		for (int cpu = CPU_SETSIZE - 1; cpu >= 0 && i < cfg.pollers; cpu--)
			if (CPU_ISSET(cpu, &allowed))
				cfg.cpus[i++] = cpu;
		while (i < cfg.pollers)
			cfg.cpus[i++] = -1;
	}
	if (!cfg.server_host[0]) {
		char host[64] = "localhost";

		gethostname(host, sizeof(host) - 1);
		host[48] = 0;
		strcpy(cfg.server_host, host);
	}
}

void options_parse(int argc, char **argv)
{
	static struct option opts[NFLAGS + 1];
	int c;

	default_socket_path(cfg.socket_path, sizeof(cfg.socket_path));

	for (size_t i = 0; i < NFLAGS; i++)
		opts[i] = (struct option){flags[i].name, flags[i].has_arg, NULL, 256 + (int)i};
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c < 256 || c >= 256 + (int)NFLAGS)
			die_usage("unknown or incomplete option '%s'", argv[optind - 1]);
		flags[c - 256].set(optarg);
	}
	if (optind < argc)
		die_usage("unexpected argument '%s'", argv[optind]);
	finish_args();
}

const char *options_peer_key(void)
{
	return peer_key;
}
