/* SPDX-License-Identifier: MIT */
/*
 * options.c - dataplaned's command line: one table of flags (name, field,
 * type, range, default), from which getopt_long's options, the parsing and
 * --help are all made. A flag's default is what its field holds before the
 * flags are read (config.c, the fabric's and the file engine's
 * configuration, directory.h), so no default is written here. A flag sets
 * what it configures wherever that lives, so this file depends on every
 * folder, as main does. See options.h.
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

/* ---- the flags ---- */

static const char *cpus_arg;		/* --cpus, parsed once --pollers is known */
static char peer_key[DP_AUTH_PATH_MAX]; /* --peer-key; "": auth_init's default */
/* What other folders keep behind a call: handed over once all flags are read. */
static unsigned directory_ttl = DP_DIRECTORY_TTL_S;
static bool no_same_host;
static char same_host_socket[DP_SUN_PATH_MAX];

enum flag_type {
	F_UINT,	 /* unsigned */
	F_INT,	 /* int */
	F_SIZE,	 /* size_t */
	F_U64,	 /* uint64_t */
	F_BOOL,	 /* bool, set by the flag alone */
	F_TEXT,	 /* char[]: a path or a name, not empty, at most `max` bytes */
	F_WORD,	 /* char[]: one of `words` */
	F_LEVEL, /* int: the index of one of `words` */
	F_CALL,	 /* anything else: call(arg) */
};

/*
 * One flag. Its field holds the default until the flag is given, so that
 * --help prints what the configuration starts with (config.c, the engines'
 * and the directory's configurations); `deflt` says it in words where the
 * field cannot (a value derived at start-up, a path from the environment).
 */
struct flag {
	const char *name;
	const char *arg; /* what --help calls the argument; NULL: the flag takes none */
	enum flag_type type;
	void *field;
	/* Numbers: the range, in the flag's unit; F_TEXT: max is the longest. */
	unsigned long min, max;
	unsigned shift;		  /* numbers: the field holds the value << shift (GiB: 30) */
	unsigned long align;	  /* numbers: a multiple of this (0: any) */
	const char *reject;	  /* F_TEXT: characters it may not hold */
	const char *bad;	  /* F_TEXT: what the error says after "--<flag> ARG: " */
	const char *const *words; /* F_WORD, F_LEVEL: the values, NULL-terminated */
	void (*call)(const char *arg);
	bool tests; /* a test option: in the man page, not in --help */
	const char *help;
	const char *deflt; /* the default in words; NULL: the field's value */
};

/* The field's type is checked against the flag's: a mismatch does not compile. */
#define FIELD(T, f) .field = _Generic(&(f), T * : &(f))
#define UINT(f, lo, hi) .type = F_UINT, FIELD(unsigned, f), .min = (lo), .max = (hi)
#define INT(f, lo, hi) .type = F_INT, FIELD(int, f), .min = (lo), .max = (hi)
#define SIZE(f, lo, hi) .type = F_SIZE, FIELD(size_t, f), .min = (lo), .max = (hi)
#define U64(f, lo, hi) .type = F_U64, FIELD(uint64_t, f), .min = (lo), .max = (hi)
#define BOOL(f) .type = F_BOOL, FIELD(bool, f)
#define TEXT(f, len, why) .type = F_TEXT, .field = (f), .max = (len), .bad = (why)
#define WORD(f, w) .type = F_WORD, .field = (f), .max = sizeof(f) - 1, .words = (w)
#define LEVEL(f, w) .type = F_LEVEL, FIELD(int, f), .words = (w)
#define CALL(fn) .type = F_CALL, .call = (fn)

static const char *const providers[] = {"efa",	   "efa-direct", "tcp",	 "shm",
					"sockets", "auto",	 "none", NULL};
static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};

static void set_cpus(const char *a)
{
	cpus_arg = a;
}

static void set_directory(const char *a)
{
	/* The URL is not echoed: it may hold a password. */
	if (directory_configure(a))
		die_usage("%s: want redis://[user:password@]host[:port][/db]", "--directory");
}

static void show_help(const char *a);

static void show_version(const char *a)
{
	(void)a;
	printf("dataplaned (dataplane) %s\n", DP_VERSION_STRING);
	exit(0);
}

/*
 * Every flag, in the order of --help: getopt_long's table, the parsing, the
 * ranges and the defaults --help prints all come from this one. In help,
 * '\n' starts a continuation line.
 */
static const struct flag flags[] = {
	{"socket", "PATH",
	 TEXT(cfg.socket_path, sizeof(cfg.socket_path) - 1, "path empty or too long"),
	 .help = "control socket",
	 .deflt = "$XDG_RUNTIME_DIR/dataplane/dataplane.sock,\nelse /run/dataplane/dataplane.sock"},
	{"pollers", "N", UINT(cfg.pollers, 1, DP_MAX_POLLERS), .help = "polling threads"},
	{"cpus", "LIST", CALL(set_cpus),
	 .help = "pin poller i to the i-th CPU of LIST, e.g. 2,3 or 2-5",
	 .deflt = "the highest CPUs the process may use"},
	{"spin-us", "N", UINT(cfg.spin_us, 0, 10000000),
	 .help = "busy-poll this long before sleeping on doorbells"},
	{"max-clients", "N", UINT(cfg.max_clients, 1, 65536),
	 .help = "clients served at once; beyond, dp_connect fails with EUSERS"},
	{"max-clients-per-uid", "N", UINT(cfg.max_clients_per_uid, 1, 65536),
	 .help = "connections one uid may hold, HELLO or not;\n"
		 "beyond, dp_connect fails with EDQUOT",
	 .deflt = "half of --max-clients"},
	{"max-mapped-gb-per-uid", "N", U64(cfg.max_mapped_per_uid, 1, 131072), .shift = 30,
	 .help = "GiB of client memory the service maps for one\n"
		 "uid's clients together (dp_alloc, dp_register_fd); beyond, EDQUOT"},
	{"max-clients-per-process", "N", UINT(cfg.max_clients_per_process, 1, 65536),
	 .help = "connections one process (SO_PEERCRED pid)\n"
		 "may hold, HELLO or not; beyond, dp_connect fails with EMFILE; no\n"
		 "other process is refused for it",
	 .deflt = "an eighth of --max-clients-per-uid, at least 4"},
	{"max-connecting-per-process", "N", UINT(cfg.max_connecting_per_process, 1, 65536),
	 .help = "connections one process may have open\n"
		 "without HELLO; one more hangs up on its oldest silent one"},
	{"max-mapped-gb-per-process", "N", U64(cfg.max_mapped_per_process, 1, 131072), .shift = 30,
	 .help = "GiB of client memory the service maps for\n"
		 "one process's clients together; beyond, EFBIG",
	 .deflt = "a quarter of --max-mapped-gb-per-uid"},
	{"hello-timeout-ms", "N", UINT(cfg.hello_timeout_ms, 1, 3600000),
	 .help = "a connection without HELLO after N ms is dropped"},
	{"max-queues", "N", UINT(cfg.max_queues, 1, DP_MAX_QUEUES),
	 .help = "queue pairs per client"},
	{"queue-depth", "N", UINT(cfg.queue_depth, 1, DP_RING_MAX_ENTRIES),
	 .help = "default entries per ring, a power of two, at most --max-depth"},
	{"max-depth", "N", UINT(cfg.max_depth, 1, DP_RING_MAX_ENTRIES),
	 .help = "largest depth a client may ask for, a power of two"},
	{"copy-chunk", "BYTES", SIZE(cfg.chunk, 4096, 1ul << 30),
	 .help = "local copy step; larger copies are interleaved"},
	{"inline-max", "BYTES", SIZE(cfg.inline_max, 0, 1ul << 30),
	 .help = "host copies up to this size run at once, in submit, larger\n"
		 "ones a --copy-chunk step per loop; at most --copy-chunk"},
	{"stripe-min", "BYTES", SIZE(cfg.stripe_min, 0, 1ul << 40),
	 .help = "host copies of this size or more are shared out in --copy-chunk\n"
		 "stripes with pollers that are idle; 0: never"},
	{"rpc-port", "N", INT(cfg.rpc_port, 0, 65535),
	 .help = "TCP port peers reach this service on; 0 = pick"},
	{"peer-key", "FILE",
	 TEXT(peer_key, sizeof(peer_key) - 1, "want a file path below 256 bytes"),
	 .help = "fleet key: peers are trusted only if they hold the same one;\n"
		 "mode 0600, this user's, made when missing",
	 .deflt = "/var/lib/dataplane/peer.key for root,\n"
		  "else ~/.local/state/dataplane/peer.key"},
	{"server-name", "HOST", TEXT(cfg.server_host, 48, "want a host name or address"),
	 .reject = ":@/ ", .help = "host part of this service's name HOST:PORT",
	 .deflt = "hostname"},
	{"same-host-socket", "PATH",
	 TEXT(same_host_socket, sizeof(same_host_socket) - 1, "want a path shorter than 108 bytes"),
	 .help = "Unix socket on which services of this host are given exported\n"
		 "memory directly",
	 .deflt = "the socket path + \".peer\""},
	{"no-same-host", NULL, BOOL(no_same_host),
	 .help = "services of this host go through the fabric like any other"},
	{"provider", "P", WORD(fab_cfg.provider, providers),
	 .help = "fabric provider (auto: efa, else tcp; none: local transfers only)"},
	{"nics", "LIST", TEXT(fab_cfg.nics, sizeof(fab_cfg.nics) - 1, "empty or too long"),
	 .help = "fabric domains (NICs) to use as rails, comma-separated, or auto\n"
		 "(efa: every device; others: the first)"},
	{"slice", "BYTES", SIZE(fab_cfg.slice, 4096, 1ul << 30),
	 .help = "fabric transfers go in slices of this size"},
	{"fabric-timeout-ms", "N", UINT(fab_cfg.timeout_ms, 1, 3600000),
	 .help = "a fabric transfer with no slice done for this long fails\n"
		 "with ETIMEDOUT"},
	{"no-hmem", NULL, BOOL(fab_cfg.no_hmem),
	 .help = "open rails without FI_HMEM: GPU memory goes over the fabric\n"
		 "through host staging",
	 .deflt = "FI_HMEM where the provider has it"},
	{"stage-bufs", "N", UINT(fab_cfg.stage_bufs, 0, 64),
	 .help = "host staging of GPU memory over rails without FI_HMEM, ours and our\n"
		 "exports' for peers: N bounce buffers of --slice bytes per poller;\n"
		 "0: off, such transfers fail with ENOTSUP"},
	{"stage-host", NULL, BOOL(fab_cfg.stage_host), .tests = true,
	 .help = "host memory stands in for GPU memory the rails cannot register:\n"
		 "staged through memcpy, its exports staged for peers"},
	{"file-root", "DIR", TEXT(file_cfg.root, sizeof(file_cfg.root) - 1, "empty or too long"),
	 .help = "dp_open_file paths are opened beneath DIR",
	 .deflt = "none, dp_open_file is refused"},
	{"io-depth", "N", UINT(file_cfg.depth, 1, 4096),
	 .help = "file I/O: reads/writes in flight per poller"},
	{"io-slice", "BYTES", SIZE(file_cfg.slice, 4096, 1ul << 30), .align = 4096,
	 .help = "file I/O: bytes per read/write"},
	{"staging", "BYTES", SIZE(file_cfg.staging, 0, 1ul << 40),
	 .help = "file I/O: pinned staging pool for GPU targets"},
	{"max-pinned-mb", "N", SIZE(file_cfg.max_pinned, 0, 1ul << 20), .shift = 20,
	 .help = "file I/O: host memory a client may have pinned as io_uring fixed\n"
		 "buffers, in 16 MiB windows; beyond it, plain reads and writes;\n"
		 "0: no fixed buffers"},
	{"directory", "URL", CALL(set_directory),
	 .help = "cluster directory redis://[user:password@]host[:port][/db]:\n"
		 "exports are published there, unknown names looked up there;\n"
		 "password also from $DP_DIRECTORY_PASSWORD",
	 .deflt = "none"},
	{"directory-ttl", "S", UINT(directory_ttl, 1, 86400),
	 .help = "records expire S seconds after their owner stops"},
	{"stats", "NAME",
	 TEXT(cfg.stats_name, sizeof(cfg.stats_name) - 1,
	      "want a name without '/', under 64 bytes"),
	 .reject = "/", .help = "name of the shared-memory stats region in /dev/shm",
	 .deflt = "dataplane-HASH, derived from the socket path"},
	{"no-stats", NULL, BOOL(cfg.no_stats),
	 .help = "no stats region (and no counting for it on the data path)"},
	{"no-membarrier", NULL, BOOL(cfg.no_membarrier),
	 .help = "clients fence after every dp_submit, and pollers before they\n"
		 "sleep or park queues, instead of pollers arming their sleep with\n"
		 "membarrier(2)",
	 .deflt = "membarrier where the kernel has it"},
	{"log-level", "LEVEL", LEVEL(dp_log_level, log_levels), .help = "how much to log"},
	{"help", NULL, CALL(show_help), .help = "this text"},
	{"version", NULL, CALL(show_version), .help = "print the version and exit"},
};

#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

/* "efa, tcp or none" */
static void words_list(const char *const *w, char *out, size_t len)
{
	size_t n = 0;

	*out = 0;
	for (unsigned i = 0; w[i] && n < len; i++)
		n += (size_t)snprintf(out + n, len - n, "%s%s", i ? (w[i + 1] ? ", " : " or ") : "",
				      w[i]);
}

static void die_flag(const struct flag *fl, const char *a, const char *why)
{
	fprintf(stderr, "dataplaned: --%s %s: %s\nTry 'dataplaned --help'.\n", fl->name, a, why);
	exit(2);
}

static void set_number(const struct flag *fl, const char *a)
{
	char name[64], why[48];
	unsigned long v;

	snprintf(name, sizeof(name), "--%s", fl->name);
	v = parse_num(name, a, fl->min, fl->max);
	if (fl->align && v % fl->align) {
		snprintf(why, sizeof(why), "want a multiple of %lu", fl->align);
		die_flag(fl, a, why);
	}
	switch (fl->type) {
	case F_UINT:
		*(unsigned *)fl->field = (unsigned)v << fl->shift;
		break;
	case F_INT:
		*(int *)fl->field = (int)v << fl->shift;
		break;
	case F_SIZE:
		*(size_t *)fl->field = (size_t)v << fl->shift;
		break;
	default:
		*(uint64_t *)fl->field = (uint64_t)v << fl->shift;
		break;
	}
}

/* The flag `fl` was given with `a` (NULL for a flag without argument). */
static void flag_set(const struct flag *fl, const char *a)
{
	char want[128] = "want ";
	size_t len;

	switch (fl->type) {
	case F_BOOL:
		*(bool *)fl->field = true;
		return;
	case F_CALL:
		fl->call(a);
		return;
	case F_TEXT:
		len = strlen(a);
		if (!len || len > fl->max || (fl->reject && strpbrk(a, fl->reject)))
			die_flag(fl, a, fl->bad);
		memcpy(fl->field, a, len + 1);
		return;
	case F_WORD:
	case F_LEVEL:
		for (int i = 0; fl->words[i]; i++) {
			if (strcmp(a, fl->words[i]))
				continue;
			if (fl->type == F_LEVEL)
				*(int *)fl->field = i;
			else
				snprintf(fl->field, fl->max + 1, "%s", a);
			return;
		}
		words_list(fl->words, want + 5, sizeof(want) - 5);
		die_flag(fl, a, want);
		return;
	default:
		set_number(fl, a);
	}
}

/* A range's end as the man page writes it: 2^30 rather than 1073741824. */
static int num_str(unsigned long v, char *out, size_t len)
{
	if (v >= 1ul << 20 && !(v & (v - 1)))
		return snprintf(out, len, "2^%d", __builtin_ctzl(v));
	return snprintf(out, len, "%lu", v);
}

static unsigned long field_value(const struct flag *fl)
{
	switch (fl->type) {
	case F_UINT:
		return *(const unsigned *)fl->field >> fl->shift;
	case F_INT:
		return (unsigned long)*(const int *)fl->field >> fl->shift;
	case F_SIZE:
		return *(const size_t *)fl->field >> fl->shift;
	default:
		return *(const uint64_t *)fl->field >> fl->shift;
	}
}

/* What --help adds to a flag's text, from its entry and from its field as
 * the configuration starts: the values it takes and the default. Made
 * before any flag is read, so that "--pollers 4 --help" still says 1. */
static char flag_more[NFLAGS][160];

static void describe(const struct flag *fl, char *out, size_t len)
{
	char lo[24], hi[24];
	int n = 0;

	*out = 0;
	switch (fl->type) {
	case F_UINT:
	case F_INT:
	case F_SIZE:
	case F_U64:
		num_str(fl->min, lo, sizeof(lo));
		num_str(fl->max, hi, sizeof(hi));
		n = snprintf(out, len, "%s to %s%s", lo, hi, fl->align ? ", a multiple of " : "");
		if (fl->align)
			n += num_str(fl->align, out + n, len - (size_t)n);
		if (!fl->deflt)
			snprintf(out + n, len - (size_t)n, "; default %lu", field_value(fl));
		break;
	case F_WORD:
	case F_LEVEL:
		words_list(fl->words, out, len);
		n = (int)strlen(out);
		snprintf(out + n, len - (size_t)n, "; default %s",
			 fl->type == F_WORD ? (const char *)fl->field
					    : fl->words[*(const int *)fl->field]);
		return;
	default:
		break;
	}
	if (fl->deflt) {
		n = (int)strlen(out);
		snprintf(out + n, len - (size_t)n, "%sdefault: %s", n ? "; " : "", fl->deflt);
	}
}

#define HELP_COL 23   /* where the help text starts */
#define HELP_WIDTH 90 /* where a line of it had better end */

/* Prints text from the help column on, '\n' as a continuation line. */
static void help_lines(FILE *f, const char *h)
{
	for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
		fprintf(f, "%.*s\n%*s", (int)(nl - h), h, HELP_COL, "");
	fprintf(f, "%s", h);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: dataplaned [options]\n");
	for (size_t i = 0; i < NFLAGS; i++) {
		const char *h = flags[i].help, *last = strrchr(h, '\n');
		const char *more = flag_more[i];
		int n, col;

		if (flags[i].tests)
			continue;
		n = fprintf(f, "  --%s%s%s", flags[i].name, flags[i].arg ? " " : "",
			    flags[i].arg ? flags[i].arg : "");
		/* At least two spaces between the flag and its text. */
		fprintf(f, "%*s", n + 2 > HELP_COL ? 2 : HELP_COL - n, "");
		help_lines(f, h);
		if (*more) {
			const char *more_nl = strchr(more, '\n');

			col = last ? HELP_COL + (int)strlen(last + 1)
				   : (n + 2 > HELP_COL ? n + 2 : HELP_COL) + (int)strlen(h);
			col += 2 + (int)(more_nl ? (size_t)(more_nl - more) : strlen(more));
			if (col > HELP_WIDTH)
				fprintf(f, "\n%*s(", HELP_COL, "");
			else
				fprintf(f, " (");
			help_lines(f, more);
			fprintf(f, ")");
		}
		fprintf(f, "\n");
	}
	fprintf(f, "Exit codes: 0 clean shutdown (SIGTERM/SIGINT), 1 start-up failure, 2 bad "
		   "usage.\n");
	fault_usage(f);
}

static void show_help(const char *a)
{
	(void)a;
	usage(stdout);
	exit(0);
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
	directory_set_ttl(directory_ttl);
	samehost_configure(no_same_host, same_host_socket[0] ? same_host_socket : NULL);
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

	for (size_t i = 0; i < NFLAGS; i++) {
		opts[i] = (struct option){flags[i].name,
					  flags[i].arg ? required_argument : no_argument, NULL,
					  256 + (int)i};
		describe(&flags[i], flag_more[i], sizeof(flag_more[i]));
	}
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c < 256 || c >= 256 + (int)NFLAGS)
			die_usage("unknown or incomplete option '%s'", argv[optind - 1]);
		flag_set(&flags[c - 256], optarg);
	}
	if (optind < argc)
		die_usage("unexpected argument '%s'", argv[optind]);
	finish_args();
}

const char *options_peer_key(void)
{
	return peer_key;
}
