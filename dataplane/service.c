/* SPDX-License-Identifier: MIT */
/*
 * service.c - dataplaned's entry point: flags, start-up, shutdown, and the
 * lifetime rules shared by the control thread and the pollers (reference
 * counts and quiescent-state-based reclamation).
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
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "directory.h"
#include "dp_internal.h"
#include "fabric.h"
#include "fault.h"
#include "fileio.h"
#include "gpu.h"
#include "rpc.h"
#include "stats.h"

struct dp_config cfg;
atomic_int dp_stopping;
int control_wake_efd = -1;

/*
 * Waits until every poller has passed a quiescent point (the top of its
 * loop, or asleep) since the call began: after it, no poller holds a table
 * pointer that was unpublished before the call.
 */
void qsbr_synchronize(void)
{
	unsigned long snap[DP_MAX_POLLERS];

	for (unsigned i = 0; i < cfg.pollers; i++)
		snap[i] = atomic_load(&pollers[i].qs);
	for (unsigned i = 0; i < cfg.pollers; i++) {
		/* seq_cst loads: pair with the poller's seq_cst increment of
		 * qs and its store of sleeping. */
		while (atomic_load(&pollers[i].qs) == snap[i] && !atomic_load(&pollers[i].sleeping))
			usleep(20);
	}
}

void region_put(struct region *r)
{
	if (atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	switch (r->kind) {
	case REGION_HOST:
		fabric_region_deregister(r);
		gpu_host_unregister(r);
		fileio_host_release(r);
		munmap(r->map, r->map_len);
		break;
	case REGION_CUDA:
		fabric_region_deregister(r);
		gpu_region_close(r);
		break;
	case REGION_FILE:
		fileio_region_close(r);
		break;
	}
	free(r);
}

void segment_put(struct segment *s)
{
	if (atomic_fetch_sub(&s->refs, 1) == 1) {
		free(s->remote);
		free(s);
	}
}

void client_put(struct client *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		free(c);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dataplaned [options]\n"
		"  --socket PATH        control socket (default "
		"$XDG_RUNTIME_DIR/dataplane/dataplane.sock,\n"
		"                       else /run/dataplane/dataplane.sock)\n"
		"  --pollers N          polling threads (default 1, at most %d)\n"
		"  --cpus LIST          pin poller i to the i-th CPU of LIST, e.g. 2,3 or 2-5\n"
		"                       (default: the highest CPUs the process may use)\n"
		"  --spin-us N          busy-poll this long before sleeping on doorbells (default "
		"50)\n"
		"  --max-clients N      clients served at once (default 256)\n"
		"  --max-queues N       queue pairs per client (default %d)\n"
		"  --queue-depth N      default entries per ring, power of two (default 256)\n"
		"  --max-depth N        largest depth a client may ask for (default 4096)\n"
		"  --copy-chunk BYTES   local copy step; larger copies are interleaved (default "
		"262144)\n"
		"  --rpc-port N         TCP port peers reach this service on; 0 = pick (default "
		"0)\n"
		"  --server-name HOST   host part of this service's name HOST:PORT (default: "
		"hostname)\n"
		"  --provider P         fabric provider: efa, tcp, shm, sockets, auto (efa, else "
		"tcp)\n"
		"                       or none (local transfers only) (default auto)\n"
		"  --nics LIST          fabric domains (NICs) to use as rails, comma-separated, or "
		"auto\n"
		"                       (efa: every device; others: the first) (default auto)\n"
		"  --slice BYTES        fabric transfers go in slices of this size (default "
		"1048576)\n"
		"  --fabric-timeout-ms N  a transfer to a peer fails with ETIMEDOUT after this "
		"(default 5000)\n"
		"  --file-root DIR      dp_open_file paths are opened beneath DIR (default: none, "
		"refused)\n"
		"  --io-depth N         file I/O: reads/writes in flight per poller (default 32)\n"
		"  --io-slice BYTES     file I/O: bytes per read/write, a multiple of 4096 "
		"(default 1048576)\n"
		"  --staging BYTES      file I/O: pinned staging pool for GPU targets (default "
		"67108864)\n"
		"  --directory URL      cluster directory "
		"redis://[user:password@]host[:port][/db]:\n"
		"                       exports are published there, unknown names looked up "
		"there\n"
		"                       (password also from $DP_DIRECTORY_PASSWORD) (default: "
		"none)\n"
		"  --directory-ttl S    records expire S seconds after their owner stops (default "
		"10)\n"
		"  --stats NAME         name of the shared-memory stats region in /dev/shm\n"
		"                       (default dataplane-HASH, derived from the socket path)\n"
		"  --no-stats           no stats region (and no counting for it on the data path)\n"
		"  --log-level LEVEL    error, warn, info or debug (default info)\n"
		"  --help               this text\n"
		"Exit codes: 0 clean shutdown (SIGTERM/SIGINT), 1 start-up failure, 2 bad usage.\n",
		DP_MAX_POLLERS, DP_MAX_QUEUES);
	fault_usage(f);
}

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

static void parse_args(int argc, char **argv)
{
	enum {
		O_SOCKET = 256,
		O_POLLERS,
		O_CPUS,
		O_SPIN,
		O_MAXCL,
		O_MAXQ,
		O_DEPTH,
		O_MAXDEPTH,
		O_CHUNK,
		O_RPC,
		O_STATS,
		O_NOSTATS,
		O_LOG,
		O_HELP,
		O_HOST,
		O_PROV,
		O_NICS,
		O_SLICE,
		O_FTIMEOUT,
		O_FROOT,
		O_IODEPTH,
		O_IOSLICE,
		O_STAGING,
		O_DIR,
		O_DIRTTL
	};
	static const struct option opts[] = {
		{"socket", required_argument, 0, O_SOCKET},
		{"pollers", required_argument, 0, O_POLLERS},
		{"cpus", required_argument, 0, O_CPUS},
		{"spin-us", required_argument, 0, O_SPIN},
		{"max-clients", required_argument, 0, O_MAXCL},
		{"max-queues", required_argument, 0, O_MAXQ},
		{"queue-depth", required_argument, 0, O_DEPTH},
		{"max-depth", required_argument, 0, O_MAXDEPTH},
		{"copy-chunk", required_argument, 0, O_CHUNK},
		{"rpc-port", required_argument, 0, O_RPC},
		{"stats", required_argument, 0, O_STATS},
		{"no-stats", no_argument, 0, O_NOSTATS},
		{"log-level", required_argument, 0, O_LOG},
		{"help", no_argument, 0, O_HELP},
		{"server-name", required_argument, 0, O_HOST},
		{"provider", required_argument, 0, O_PROV},
		{"nics", required_argument, 0, O_NICS},
		{"slice", required_argument, 0, O_SLICE},
		{"fabric-timeout-ms", required_argument, 0, O_FTIMEOUT},
		{"file-root", required_argument, 0, O_FROOT},
		{"io-depth", required_argument, 0, O_IODEPTH},
		{"io-slice", required_argument, 0, O_IOSLICE},
		{"staging", required_argument, 0, O_STAGING},
		{"directory", required_argument, 0, O_DIR},
		{"directory-ttl", required_argument, 0, O_DIRTTL},
		{0, 0, 0, 0},
	};
	static const char *const levels[] = {"error", "warn", "info", "debug"};
	const char *cpus_arg = NULL;
	unsigned ncpus = 0;
	cpu_set_t allowed;
	int c;

	cfg.pollers = 1;
	cfg.spin_us = 50;
	cfg.max_clients = 256;
	cfg.max_queues = DP_MAX_QUEUES;
	cfg.queue_depth = 256;
	cfg.max_depth = 4096;
	cfg.chunk = 256 * 1024;
	cfg.inline_max = 64 * 1024;
	default_socket_path(cfg.socket_path, sizeof(cfg.socket_path));

	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case O_SOCKET:
			if (strlen(optarg) >= sizeof(cfg.socket_path) || !*optarg)
				die_usage("--socket %s: path empty or too long", optarg);
			strcpy(cfg.socket_path, optarg);
			break;
		case O_POLLERS:
			cfg.pollers = (unsigned)parse_num("--pollers", optarg, 1, DP_MAX_POLLERS);
			break;
		case O_CPUS:
			cpus_arg = optarg;
			break;
		case O_SPIN:
			cfg.spin_us = (unsigned)parse_num("--spin-us", optarg, 0, 10000000);
			break;
		case O_MAXCL:
			cfg.max_clients = (unsigned)parse_num("--max-clients", optarg, 1, 65536);
			break;
		case O_MAXQ:
			cfg.max_queues =
				(unsigned)parse_num("--max-queues", optarg, 1, DP_MAX_QUEUES);
			break;
		case O_DEPTH:
			cfg.queue_depth = (unsigned)parse_num("--queue-depth", optarg, 1,
							      DP_RING_MAX_ENTRIES);
			break;
		case O_MAXDEPTH:
			cfg.max_depth =
				(unsigned)parse_num("--max-depth", optarg, 1, DP_RING_MAX_ENTRIES);
			break;
		case O_CHUNK:
			cfg.chunk = parse_num("--copy-chunk", optarg, 4096, 1ul << 30);
			break;
		case O_RPC:
			cfg.rpc_port = (int)parse_num("--rpc-port", optarg, 0, 65535);
			break;
		case O_STATS:
			if (strlen(optarg) >= sizeof(cfg.stats_name) || !*optarg ||
			    strchr(optarg, '/'))
				die_usage("--stats %s: want a name without '/', under 64 bytes",
					  optarg);
			strcpy(cfg.stats_name, optarg);
			break;
		case O_NOSTATS:
			cfg.no_stats = true;
			break;
		case O_LOG:
			dp_log_level = -1;
			for (int i = 0; i < 4; i++)
				if (!strcmp(optarg, levels[i]))
					dp_log_level = i;
			if (dp_log_level < 0)
				die_usage("--log-level %s: want error, warn, info or debug",
					  optarg);
			break;
		case O_HELP:
			usage(stdout);
			exit(0);
		case O_HOST:
			if (!*optarg || strlen(optarg) > 48 || strpbrk(optarg, ":@/ "))
				die_usage("--server-name %s: want a host name or address", optarg);
			strcpy(cfg.server_host, optarg);
			break;
		case O_PROV: {
			static const char *const provs[] = {"efa",     "tcp",  "shm",
							    "sockets", "auto", "none"};
			bool ok = false;

			for (unsigned i = 0; i < 6; i++)
				ok |= !strcmp(optarg, provs[i]);
			if (!ok)
				die_usage(
					"--provider %s: want efa, tcp, shm, sockets, auto or none",
					optarg);
			snprintf(fab_cfg.provider, sizeof(fab_cfg.provider), "%s", optarg);
			break;
		}
		case O_NICS:
			if (!*optarg || strlen(optarg) >= sizeof(fab_cfg.nics))
				die_usage("--nics %s: empty or too long", optarg);
			strcpy(fab_cfg.nics, optarg);
			break;
		case O_SLICE:
			fab_cfg.slice = parse_num("--slice", optarg, 4096, 1ul << 30);
			break;
		case O_FTIMEOUT:
			fab_cfg.timeout_ms =
				(unsigned)parse_num("--fabric-timeout-ms", optarg, 1, 3600000);
			break;
		case O_FROOT:
			if (!*optarg || strlen(optarg) >= sizeof(fio_cfg.root))
				die_usage("--file-root %s: empty or too long", optarg);
			strcpy(fio_cfg.root, optarg);
			break;
		case O_IODEPTH:
			fio_cfg.depth = (unsigned)parse_num("--io-depth", optarg, 1, 4096);
			break;
		case O_IOSLICE:
			fio_cfg.slice = parse_num("--io-slice", optarg, 4096, 1ul << 30);
			if (fio_cfg.slice % 4096)
				die_usage("--io-slice %s: want a multiple of 4096", optarg);
			break;
		case O_STAGING:
			fio_cfg.staging = parse_num("--staging", optarg, 0, 1ul << 40);
			break;
		case O_DIR:
			/* The URL is not echoed: it may hold a password. */
			if (directory_configure(optarg))
				die_usage("%s: want redis://[user:password@]host[:port][/db]",
					  "--directory");
			break;
		case O_DIRTTL:
			directory_set_ttl((unsigned)parse_num("--directory-ttl", optarg, 1, 86400));
			break;
		default:
			die_usage("unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s'", argv[optind]);
	if (cfg.queue_depth & (cfg.queue_depth - 1) || cfg.max_depth & (cfg.max_depth - 1))
		die_usage("%s: queue depths must be powers of two", "--queue-depth/--max-depth");
	if (cfg.queue_depth > cfg.max_depth)
		die_usage("%s: --queue-depth exceeds --max-depth", "--queue-depth");
	if (cfg.inline_max > cfg.chunk)
		cfg.inline_max = cfg.chunk;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		CPU_ZERO(&allowed);
	for (unsigned i = 0; i < DP_MAX_POLLERS; i++)
		cfg.cpus[i] = -1;
	if (cpus_arg) {
		ncpus = parse_cpus(cpus_arg, cfg.cpus, &allowed);
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
	snprintf(cfg.server_name, sizeof(cfg.server_name), "%.48s:%d", cfg.server_host,
		 cfg.rpc_port);
}

int main(int argc, char **argv)
{
	sigset_t sigs;
	int rc, rpc_fd;

	parse_args(argc, argv);
	fault_init();
	/* SIGTERM/SIGINT reach the control thread through a signalfd; every
	 * other thread inherits the blocked mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	control_wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (control_wake_efd < 0) {
		log_err("eventfd: %s", strerror(errno));
		return 1;
	}
	rpc_fd = rpc_listen();
	if (rpc_fd < 0) {
		log_err("peer RPC port %d: %s", cfg.rpc_port, strerror(-rpc_fd));
		return 1;
	}
	log_info("starting: server %s, %u poller(s), queue depth %u, spin %u us", cfg.server_name,
		 cfg.pollers, cfg.queue_depth, cfg.spin_us);
	rc = stats_init();
	if (rc) {
		log_err("stats region: %s (or run with --no-stats)", strerror(-rc));
		return 1;
	}
	gpu_init();
	rc = fabric_init();
	if (rc) {
		log_err("fabric: %s (use --provider none for local transfers only)", strerror(-rc));
		return 1;
	}
	rc = fileio_init();
	if (rc) {
		log_err("file I/O: %s", strerror(-rc));
		return 1;
	}
	rc = pollers_start();
	if (rc) {
		log_err("cannot start pollers: %s", strerror(-rc));
		return 1;
	}
	rc = control_run(rpc_fd);
	pollers_free();
	fabric_fini();
	fileio_fini();
	stats_fini();
	if (rc) {
		log_err("stopped: %s", strerror(-rc));
		return 1;
	}
	log_info("stopped cleanly");
	return 0;
}
