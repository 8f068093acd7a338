/* SPDX-License-Identifier: MIT */
/*
 * directory.c - segment records in Redis (directory.h, docs/cluster.md).
 *
 * One thread of its own, the directory thread, owns everything below: the
 * connections, the records and the watches, with an epoll set of its own
 * (event.h handlers: its timer, its sockets, and the eventfd of its request
 * queue). The control thread never waits on Redis: directory_publish(),
 * directory_lookup() and directory_withdraw() put a request on that queue
 * and return; the answers (and invalidations) come back, in the order the
 * thread produced them, on a second queue whose eventfd is in the control
 * loop, and are handed to their callbacks there (on_done_event). While the
 * thread is not connected (`up` false), exports and lookups fail at once.
 * A request waits behind the one in progress, at most one command timeout.
 *
 * Two connections. `cmd` carries commands, each synchronous with a 500 ms
 * timeout (several at once are pipelined). `sub` is in subscribe mode and
 * is read from the directory thread's epoll loop: it carries invalidations of
 * the names this service looked up, on two channels per name: one the
 * owner publishes to when it deletes or replaces a record, and the key's
 * keyspace channel, on which Redis reports the record's expiry (when
 * keyspace notifications can be enabled).
 *
 * Every write is one of three Lua scripts, so that "whose record is this"
 * and the change are one atomic step: publish (create, or replace our
 * own), refresh (extend the TTL of our own, same generation) and delete
 * (our own, same generation). A record is a hash: owner (the server
 * name), gen (the export's generation) and rec (the lookup reply, exactly
 * as the peer protocol sends it, header included).
 *
 * States: DOWN (a timer for the next attempt, jittered exponential
 * backoff), CONNECTING (both sockets in a non-blocking connect, in the
 * epoll set, with a deadline) and UP. A failed command or a closed socket
 * drops both connections at once. While not UP, exports and lookups fail
 * at once with -EHOSTUNREACH; segments already open are not affected. On
 * each connect the service republishes its records, deletes those it
 * withdrew while Redis was unreachable, and forgets its cached lookups,
 * whose invalidations it may have missed.
 */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "auth.h"
#include "clock.h"
#include "directory.h"
#include "event.h"
#include "net.h"
#include "session.h"

#define KEY_PREFIX "dataplane:seg:"
#define BACKOFF_MIN_MS 100u
#define BACKOFF_MAX_MS 2000u

enum { CMD, SUB };
enum dir_state { DIR_DOWN, DIR_CONNECTING, DIR_UP };
enum script { S_PUBLISH, S_REFRESH, S_DELETE, NSCRIPTS };

/* The scripts read fields with HGET, lookups with HMGET: a lookup is then
 * told apart from a heartbeat in Redis's command statistics.
 * KEYS[1] the record; ARGV: owner, gen, rec, ttl ms, invalidation channel,
 * mac. 1 when published, 0 when another service holds the name. */
static const char publish_lua[] =
	"local cur = {redis.call('HGET', KEYS[1], 'owner'), redis.call('HGET', KEYS[1], 'gen')}\n"
	"if cur[1] and cur[1] ~= ARGV[1] then return 0 end\n"
	"redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'gen', ARGV[2], 'rec', ARGV[3], 'mac', "
	"ARGV[6])\n"
	"redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"
	"if cur[2] and cur[2] ~= ARGV[2] then redis.call('PUBLISH', ARGV[5], 'replaced') end\n"
	"return 1\n";
/* ARGV: owner, gen, ttl ms. 1 refreshed, 0 gone, -1 no longer ours. */
static const char refresh_lua[] =
	"local cur = {redis.call('HGET', KEYS[1], 'owner'), redis.call('HGET', KEYS[1], 'gen')}\n"
	"if not cur[1] then return 0 end\n"
	"if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return -1 end\n"
	"redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
	"return 1\n";
/* ARGV: owner, gen, invalidation channel. 1 deleted, 0 not ours. */
static const char delete_lua[] =
	"local cur = {redis.call('HGET', KEYS[1], 'owner'), redis.call('HGET', KEYS[1], 'gen')}\n"
	"if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 0 end\n"
	"redis.call('DEL', KEYS[1])\n"
	"redis.call('PUBLISH', ARGV[3], 'deleted')\n"
	"return 1\n";
static const char *const scripts[NSCRIPTS] = {publish_lua, refresh_lua, delete_lua};

/* The value of a record's `rec` field: a peer protocol reply message. */
struct dir_record {
	struct dp_rpc_hdr h;
	struct dp_rpc_lookup_reply r;
};

/* A record this service published (or withdrew while unreachable). */
struct own_rec {
	char name[DP_NAME_MAX];
	char gen[24];
	struct dir_record rec;
	uint8_t mac[DP_AUTH_MAC]; /* auth_mac of record_parts() */
	bool lost;		  /* another service holds the name now */
	bool pending;		  /* in the pipeline being sent */
	long long result;
	uint64_t withdrawn_ms;
	struct own_rec *next;
};

/* A name whose invalidations `sub` is subscribed to. */
struct watch {
	char name[DP_NAME_MAX];
	struct watch *next;
};

static struct {
	bool on;
	char host[256];
	char port[8];
	char user[128];
	char password[256];
	bool auth;
	int db;
	unsigned ttl_s;
	char shown[512];	  /* the URL as logged: password masked */
	char inval_prefix[64];	  /* "dataplane:inval:<db>:" */
	char keyspace_prefix[64]; /* "__keyspace@<db>__:dataplane:seg:" */
} conf = {.ttl_s = DP_DIRECTORY_TTL_S};

/*
 * A request to the directory thread, and its answer on the way back: one
 * object, handed over whole with each queue. An invalidation is an answer
 * nobody asked for (REQ_INVALIDATE, name "" for "everything").
 */
enum req_type { REQ_PUBLISH, REQ_WITHDRAW, REQ_LOOKUP, REQ_STOP, REQ_INVALIDATE };

struct dir_req {
	enum req_type type;
	char name[DP_NAME_MAX];
	struct dir_record rec; /* REQ_PUBLISH: the record to publish */
	int rc;		       /* the answer */
	struct dp_rpc_lookup_reply reply;
	bool kill;   /* REQ_INVALIDATE */
	bool answer; /* REQ_WITHDRAW: answered (done) */
	/* The control thread's alone: */
	directory_done_fn done;
	void *arg;
	bool cancelled;
	struct dir_req *next;	       /* in a queue */
	struct dir_req *oprev, *onext; /* in the control thread's list of those in flight */
};

/* A queue between the threads: FIFO, a mutex, an eventfd for the reader. */
struct req_queue {
	pthread_mutex_t lock;
	struct dir_req *head, **tail;
	int efd;
};

/* What the control thread keeps: the answers' queue is read in its loop. */
static struct {
	int epfd;
	struct ev_handler done_ev; /* fd: answers.efd */
	struct dir_req *inflight;  /* asked, not answered yet */
	pthread_t thread;
	bool running;
	directory_invalidate_fn invalidate;
} ctlside = {.epfd = -1, .done_ev.fd = -1};

static struct req_queue requests = {PTHREAD_MUTEX_INITIALIZER, NULL, &requests.head, -1};
static struct req_queue answers = {PTHREAD_MUTEX_INITIALIZER, NULL, &answers.head, -1};
static struct dir_req stop_req = {.type = REQ_STOP};

/* Connected: the one thing the control thread reads of the thread's state
 * (to fail exports and lookups at once while it is not). */
static atomic_bool dir_up;

/* The directory thread's: */
static struct {
	enum dir_state state;
	int epfd;		  /* its own epoll set */
	struct ev_handler req_ev; /* fd: requests.efd */
	bool stop;
	bool first_done;	   /* the first connection attempt ended (UP or DOWN) */
	struct ev_handler timer;   /* the timerfd */
	struct ev_handler sock[2]; /* CONNECTING: the sockets; UP: the contexts' */
	bool connected[2];
	redisContext *ctx[2];
	uint64_t due_ms; /* DOWN: next attempt; CONNECTING: give up; UP: heartbeat */
	unsigned backoff_ms;
	bool quiet; /* this outage was logged */
	bool expiry_events;
	char sha[NSCRIPTS][48];
	struct own_rec *own, *graves;
	struct watch *watches;
	uint64_t last_gen;
	unsigned seed;
} dir = {.epfd = -1, .req_ev.fd = -1, .timer.fd = -1, .sock = {{.fd = -1}, {.fd = -1}}};

/* The first connection attempt, for directory_start() to wait on. */
static pthread_mutex_t first_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t first_cond = PTHREAD_COND_INITIALIZER;

/* ---- the queues ---- */

static void queue_put(struct req_queue *q, struct dir_req *r)
{
	uint64_t one = 1;

	r->next = NULL;
	pthread_mutex_lock(&q->lock);
	*q->tail = r;
	q->tail = &r->next;
	pthread_mutex_unlock(&q->lock);
	/* Cannot block: an eventfd counter is far from overflowing. */
	(void)!write(q->efd, &one, sizeof(one));
}

/* Everything queued, oldest first. */
static struct dir_req *queue_take(struct req_queue *q)
{
	struct dir_req *all;
	uint64_t n;

	(void)!read(q->efd, &n, sizeof(n));
	pthread_mutex_lock(&q->lock);
	all = q->head;
	q->head = NULL;
	q->tail = &q->head;
	pthread_mutex_unlock(&q->lock);
	return all;
}

/* From the directory thread: a name's record is gone or replaced (kill),
 * or everything may have changed (name NULL, a reconnect). */
static void post_invalidate(const char *name, bool kill)
{
	struct dir_req *r = calloc(1, sizeof(*r));

	if (!r) {
		log_err("directory: out of memory: an invalidation of '%s' is lost",
			name ? name : "(all)");
		return;
	}
	r->type = REQ_INVALIDATE;
	snprintf(r->name, sizeof(r->name), "%s", name ? name : "");
	r->kill = kill;
	queue_put(&answers, r);
}

/* ---- configuration ---- */

static int hexval(int c)
{
	return isdigit(c) ? c - '0' : tolower(c) - 'a' + 10;
}

/* Copies src[0..n) into dst, %XX decoded. */
static int pct_decode(char *dst, size_t cap, const char *src, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)src[i];

		if (c == '%') {
			if (i + 2 >= n || !isxdigit((unsigned char)src[i + 1]) ||
			    !isxdigit((unsigned char)src[i + 2]))
				return -EINVAL;
			c = hexval((unsigned char)src[i + 1]) * 16 +
			    hexval((unsigned char)src[i + 2]);
			i += 2;
		}
		if (!c || o + 1 >= cap)
			return -EINVAL;
		dst[o++] = (char)c;
	}
	dst[o] = 0;
	return 0;
}

static bool all_digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return n > 0 && n < 8;
}

int directory_configure(const char *url)
{
	const char *p, *end, *slash, *at, *hend, *q;
	const char *env = getenv("DP_DIRECTORY_PASSWORD");
	bool v6 = false;
	long port = 6379, db = 0;

	memset(conf.user, 0, sizeof(conf.user));
	memset(conf.password, 0, sizeof(conf.password));
	conf.auth = false;
	if (strncmp(url, "redis://", 8))
		return -EINVAL;
	p = url + 8;
	slash = strchr(p, '/');
	end = slash ? slash : p + strlen(p);
	at = memrchr(p, '@', (size_t)(end - p));
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));

		if (pct_decode(conf.user, sizeof(conf.user), p, (size_t)((colon ? colon : at) - p)))
			return -EINVAL;
		if (colon) {
			if (pct_decode(conf.password, sizeof(conf.password), colon + 1,
				       (size_t)(at - colon - 1)))
				return -EINVAL;
			conf.auth = true;
		}
		p = at + 1;
	}
	if (*p == '[') {
		q = memchr(p, ']', (size_t)(end - p));
		if (!q)
			return -EINVAL;
		p++;
		hend = q++;
		v6 = true;
	} else {
		hend = memchr(p, ':', (size_t)(end - p));
		if (!hend)
			hend = end;
		q = hend;
	}
	if (hend == p || (size_t)(hend - p) >= sizeof(conf.host))
		return -EINVAL;
	memcpy(conf.host, p, (size_t)(hend - p));
	conf.host[hend - p] = 0;
	if (q < end) {
		if (*q != ':' || !all_digits(q + 1, (size_t)(end - q - 1)))
			return -EINVAL;
		port = strtol(q + 1, NULL, 10);
		if (port < 1 || port > 65535)
			return -EINVAL;
	}
	if (slash && slash[1]) {
		if (!all_digits(slash + 1, strlen(slash + 1)))
			return -EINVAL;
		db = strtol(slash + 1, NULL, 10);
	}
	/* A password kept off the command line (and out of `ps`). */
	if (!conf.auth && env && *env) {
		if (strlen(env) >= sizeof(conf.password))
			return -EINVAL;
		strcpy(conf.password, env);
		conf.auth = true;
	}
	if (conf.user[0] && !conf.auth)
		return -EINVAL;
	snprintf(conf.port, sizeof(conf.port), "%ld", port);
	conf.db = (int)db;
	snprintf(conf.shown, sizeof(conf.shown), "redis://%s%s%s%s%s%s:%ld/%d", conf.user,
		 conf.auth ? ":***" : "", conf.user[0] || conf.auth ? "@" : "", v6 ? "[" : "",
		 conf.host, v6 ? "]" : "", port, conf.db);
	snprintf(conf.inval_prefix, sizeof(conf.inval_prefix), "dataplane:inval:%d:", conf.db);
	snprintf(conf.keyspace_prefix, sizeof(conf.keyspace_prefix), "__keyspace@%d__:%s", conf.db,
		 KEY_PREFIX);
	conf.on = true;
	return 0;
}

void directory_set_ttl(unsigned ttl_s)
{
	conf.ttl_s = ttl_s;
}

bool directory_enabled(void)
{
	return conf.on;
}

/* ---- connection ---- */

static void arm_timer(void)
{
	struct itimerspec its = {{0, 0}, {0, 0}};
	uint64_t now = dp_now_ms(), d = dir.due_ms > now ? dir.due_ms - now : 1;

	its.it_value.tv_sec = (time_t)(d / 1000);
	its.it_value.tv_nsec = (long)(d % 1000) * 1000000;
	timerfd_settime(dir.timer.fd, 0, &its, NULL);
}

static void watches_free(void)
{
	while (dir.watches) {
		struct watch *w = dir.watches;

		dir.watches = w->next;
		free(w);
	}
}

static void conn_close(void)
{
	for (int i = 0; i < 2; i++) {
		/* Failures are logged; the fd is closed right after. */
		if (dir.sock[i].fd >= 0)
			ev_del(dir.epfd, &dir.sock[i], "a directory socket");
		if (dir.ctx[i])
			redisFree(dir.ctx[i]); /* closes the fd */
		else if (dir.sock[i].fd >= 0)
			close(dir.sock[i].fd);
		dir.ctx[i] = NULL;
		dir.sock[i].fd = -1;
		dir.connected[i] = false;
	}
	/* Subscriptions die with the connection. */
	watches_free();
}

/* Drops both connections and schedules the next attempt. Logged at warn
 * once per outage, the retries at debug. */
static void conn_down(const char *why)
{
	unsigned b = dir.backoff_ms;

	if (!dir.quiet)
		log_warn("directory %s: %s; exports and lookups by name fail until it is back%s",
			 conf.shown, why,
			 dir.state == DIR_UP ? " (open segments are not affected)" : "");
	else
		log_debug("directory %s: %s", conf.shown, why);
	dir.quiet = true;
	conn_close();
	dir.state = DIR_DOWN;
	atomic_store(&dir_up, false);
	/* Jitter: a fleet that lost its Redis does not come back in step. */
	dir.due_ms = dp_now_ms() + b / 2 + (unsigned)rand_r(&dir.seed) % (b / 2 + 1);
	dir.backoff_ms = b * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b * 2;
	arm_timer();
}

/* A connection failed mid-command: drop both, and say how. */
static int conn_lost(int which)
{
	int e = errno; /* first thing: hiredis leaves the failed call's errno */
	redisContext *c = dir.ctx[which];
	bool timeout = c->err == REDIS_ERR_IO && (e == EAGAIN || e == EWOULDBLOCK);
	char why[160];

#ifdef REDIS_ERR_TIMEOUT
	timeout |= c->err == REDIS_ERR_TIMEOUT;
#endif
	snprintf(why, sizeof(why), "%s", c->errstr[0] ? c->errstr : "connection lost");
	if (timeout)
		snprintf(why, sizeof(why), "timed out");
	conn_down(why);
	return timeout ? -ETIMEDOUT : -EHOSTUNREACH;
}

static void conn_start(void)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
	int one = 1, rc;

	rc = getaddrinfo(conf.host, conf.port, &hints, &ai);
	if (rc) {
		char why[300];

		snprintf(why, sizeof(why), "%s: %s", conf.host, gai_strerror(rc));
		conn_down(why);
		return;
	}
	for (int i = 0; i < 2; i++) {
		int fd = dp_net_socket(ai->ai_family, SOCK_STREAM);

		rc = fd;
		if (fd >= 0) {
			rc = dp_net_connect_start(fd, ai->ai_addr, ai->ai_addrlen);
			if (rc && rc != -EINPROGRESS) {
				close(fd);
				fd = -1;
			}
		}
		if (fd < 0) {
			freeaddrinfo(ai);
			conn_down(strerror(-rc));
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		dir.sock[i].fd = fd;
		if (ev_add(dir.epfd, &dir.sock[i], EPOLLOUT, "a directory socket")) {
			close(fd);
			dir.sock[i].fd = -1;
			freeaddrinfo(ai);
			conn_down("cannot watch the socket (epoll)");
			return;
		}
	}
	freeaddrinfo(ai);
	dir.state = DIR_CONNECTING;
	dir.due_ms = dp_now_ms() + DP_DIRECTORY_TIMEOUT_MS;
	arm_timer();
}

/* ---- commands ---- */

/* One command on `cmd`; NULL after the connection was dropped (*err). */
static redisReply *command(int argc, const char **argv, int *err)
{
	redisReply *r = redisCommandArgv(dir.ctx[CMD], argc, argv, NULL);

	if (!r)
		*err = conn_lost(CMD);
	return r;
}

/* A command whose reply must be +OK; false after dropping the connection. */
static bool command_ok(int which, int argc, const char **argv, const char *what)
{
	redisReply *r = redisCommandArgv(dir.ctx[which], argc, argv, NULL);
	char why[300];

	if (!r) {
		conn_lost(which);
		return false;
	}
	if (r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK")) {
		freeReplyObject(r);
		return true;
	}
	/* Redis's error text, never the arguments (a password). */
	snprintf(why, sizeof(why), "%s refused: %.200s", what,
		 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	freeReplyObject(r);
	conn_down(why);
	return false;
}

static void key_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s%s", KEY_PREFIX, name);
}

/*
 * A record's `mac` field: HMAC-SHA256 under the fleet key of its name and
 * the fields an opener acts on. A record is believed only with it, so a
 * service of another fleet that shares the Redis (or anyone who can write
 * there without the key) gets -EACCES, as from the peer's RPC port
 * (docs/cluster.md).
 */
static void record_parts(struct auth_part p[4], const char *name, const char *owner,
			 const char *gen, const struct dir_record *rec)
{
	p[0] = (struct auth_part){name, strlen(name) + 1};
	p[1] = (struct auth_part){owner, strlen(owner) + 1};
	p[2] = (struct auth_part){gen, strlen(gen) + 1};
	p[3] = (struct auth_part){rec, sizeof(*rec)};
}

#define RECORD_LABEL "dataplane directory record"

/* Appends one script call for `o` to the `cmd` pipeline. */
static int script_append(enum script s, const struct own_rec *o)
{
	char key[DP_NAME_MAX + 32], chan[DP_NAME_MAX + 64], ttl[24];
	const char *argv[10] = {"EVALSHA", dir.sha[s], "1", key, cfg.server_name, o->gen};
	size_t lens[10];
	int argc = 6;

	key_of(key, sizeof(key), o->name);
	snprintf(chan, sizeof(chan), "%s%s", conf.inval_prefix, o->name);
	snprintf(ttl, sizeof(ttl), "%u", conf.ttl_s * 1000u);
	switch (s) {
	case S_PUBLISH:
		argv[argc] = (const char *)&o->rec;
		lens[argc++] = sizeof(o->rec);
		argv[argc++] = ttl;
		argv[argc++] = chan;
		argv[argc] = (const char *)o->mac;
		lens[argc++] = sizeof(o->mac);
		break;
	case S_REFRESH:
		argv[argc++] = ttl;
		break;
	default:
		argv[argc++] = chan;
		break;
	}
	for (int i = 0; i < argc; i++)
		if (!(s == S_PUBLISH && (i == 6 || i == 9)))
			lens[i] = strlen(argv[i]);
	return redisAppendCommandArgv(dir.ctx[CMD], argc, argv, lens);
}

/*
 * Runs script `s` for every record of `list` marked pending, in one
 * pipeline, and leaves each integer result in `result`. 0, or -errno after
 * the connection was dropped (an error reply drops it too: a read-only
 * replica, a Redis still loading, a flushed script cache).
 */
static int pipeline(struct own_rec *list, enum script s)
{
	struct own_rec *o;
	redisReply *r;
	char why[300];

	for (o = list; o; o = o->next)
		if (o->pending && script_append(s, o) != REDIS_OK)
			return conn_lost(CMD);
	for (o = list; o; o = o->next) {
		if (!o->pending)
			continue;
		if (redisGetReply(dir.ctx[CMD], (void **)&r) != REDIS_OK)
			return conn_lost(CMD);
		if (r->type != REDIS_REPLY_INTEGER) {
			snprintf(why, sizeof(why), "script refused: %.200s",
				 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
			freeReplyObject(r);
			conn_down(why);
			return -EHOSTUNREACH;
		}
		o->result = r->integer;
		o->pending = false;
		freeReplyObject(r);
	}
	return 0;
}

static void record_lost(struct own_rec *o)
{
	o->lost = true;
	log_warn("directory: '%s' is held by another service now (this one could not refresh "
		 "it in time); it stays exported here but is no longer found by name",
		 o->name);
}

/* Publishes every record not lost; marks those another service took. */
static int republish(void)
{
	unsigned n = 0;
	int rc;

	for (struct own_rec *o = dir.own; o; o = o->next) {
		o->pending = !o->lost;
		n += o->pending;
	}
	rc = pipeline(dir.own, S_PUBLISH);
	if (rc)
		return rc;
	for (struct own_rec *o = dir.own; o; o = o->next)
		if (!o->lost && o->result != 1)
			record_lost(o);
	if (n)
		log_info("directory: %u record(s) published", n);
	return 0;
}

static void heartbeat(void)
{
	bool missing = false;

	for (struct own_rec *o = dir.own; o; o = o->next)
		o->pending = !o->lost;
	if (pipeline(dir.own, S_REFRESH))
		return;
	for (struct own_rec *o = dir.own; o; o = o->next) {
		if (o->lost)
			continue;
		if (o->result == 0) {
			/* Expired (a stalled heartbeat) or lost with Redis's data. */
			o->pending = missing = true;
			log_info("directory: record of '%s' was gone; publishing it again",
				 o->name);
		} else if (o->result < 0) {
			record_lost(o);
		}
	}
	if (missing && !pipeline(dir.own, S_PUBLISH))
		for (struct own_rec *o = dir.own; o; o = o->next)
			if (!o->lost && o->result == 0)
				record_lost(o);
}

/* Deletes what was withdrawn while Redis was unreachable and has not
 * expired yet (still ours: the script compares owner and generation). */
static void bury_graves(void)
{
	struct own_rec *o, **pp = &dir.graves;
	uint64_t now = dp_now_ms();

	while ((o = *pp)) {
		if (now - o->withdrawn_ms > conf.ttl_s * 1000ull) {
			*pp = o->next;
			free(o);
			continue;
		}
		o->pending = true;
		pp = &o->next;
	}
	if (pipeline(dir.graves, S_DELETE))
		return;
	while ((o = dir.graves)) {
		dir.graves = o->next;
		free(o);
	}
}

/* Expired records reach us only with keyspace notifications for expiry
 * ('K' and 'x'); added to what the server has, never taken away. */
static void keyspace_events(void)
{
	const char *get[3] = {"CONFIG", "GET", "notify-keyspace-events"};
	const char *set[4] = {"CONFIG", "SET", "notify-keyspace-events", NULL};
	char want[64];
	redisReply *r;
	int err;
	bool k, x;

	dir.expiry_events = false;
	r = command(3, get, &err);
	if (!r)
		return;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[1]->type != REDIS_REPLY_STRING) {
		freeReplyObject(r);
		return;
	}
	k = strchr(r->element[1]->str, 'K');
	x = strchr(r->element[1]->str, 'x') || strchr(r->element[1]->str, 'A');
	snprintf(want, sizeof(want), "%.40s%s%s", r->element[1]->str, k ? "" : "K", x ? "" : "x");
	freeReplyObject(r);
	if (k && x) {
		dir.expiry_events = true;
		return;
	}
	set[3] = want;
	r = command(4, set, &err);
	if (!r)
		return;
	dir.expiry_events = r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
}

/* Both sockets are connected: authenticate, load the scripts, go UP. */
static void handshake(void)
{
	struct timeval tv = {0, DP_DIRECTORY_TIMEOUT_MS * 1000};
	const char *auth[3] = {"AUTH", conf.user, conf.password};
	const char *auth_legacy[2] = {"AUTH", conf.password};
	const char *load[3] = {"SCRIPT", "LOAD", NULL};
	char db[16];
	const char *select[2] = {"SELECT", db};
	int err;

	for (int i = 0; i < 2; i++) {
		/* Blocking with timeouts: hiredis's synchronous API. */
		int rc = dp_net_set_nonblock(dir.sock[i].fd, false);

		if (rc) {
			conn_down(strerror(-rc));
			return;
		}
		dir.ctx[i] = redisConnectFd(dir.sock[i].fd);
		if (!dir.ctx[i] || dir.ctx[i]->err) {
			conn_down("out of memory");
			return;
		}
		redisSetTimeout(dir.ctx[i], tv);
		redisEnableKeepAlive(dir.ctx[i]);
		/* AUTH user password (Redis 6 ACLs), or the legacy form. */
		if (conf.auth && !command_ok(i, conf.user[0] ? 3 : 2,
					     conf.user[0] ? auth : auth_legacy, "authentication"))
			return;
	}
	snprintf(db, sizeof(db), "%d", conf.db);
	if (conf.db && !command_ok(CMD, 2, select, "SELECT"))
		return;
	for (int s = 0; s < NSCRIPTS; s++) {
		redisReply *r;

		load[2] = scripts[s];
		r = command(3, load, &err);
		if (!r)
			return;
		if (r->type != REDIS_REPLY_STRING || r->len >= sizeof(dir.sha[s])) {
			freeReplyObject(r);
			conn_down("SCRIPT LOAD refused");
			return;
		}
		memcpy(dir.sha[s], r->str, r->len + 1);
		freeReplyObject(r);
	}
	keyspace_events();
	if (!dir.ctx[CMD])
		return;
	dir.state = DIR_UP;
	atomic_store(&dir_up, true);
	dir.backoff_ms = BACKOFF_MIN_MS;
	dir.quiet = false;
	log_info("directory %s: connected%s", conf.shown,
		 dir.expiry_events ? ""
				   : " (keyspace notifications could not be enabled: records that "
				     "expire are noticed by the next failed transfer)");
	post_invalidate(NULL, false);
	bury_graves();
	if (dir.state != DIR_UP || republish())
		return;
	dir.due_ms = dp_now_ms() + conf.ttl_s * 1000u / 3;
	arm_timer();
}

static void connect_done(int i, uint32_t events)
{
	int rc = dp_net_connect_result(dir.sock[i].fd);

	(void)events; /* SO_ERROR says what happened */
	if (rc) {
		conn_down(strerror(-rc));
		return;
	}
	dir.connected[i] = true;
	if (ev_mod(dir.epfd, &dir.sock[i], EPOLLIN | EPOLLRDHUP, "a directory socket")) {
		conn_down("cannot watch the socket (epoll)");
		return;
	}
	if (dir.connected[CMD] && dir.connected[SUB])
		handshake();
}

/* ---- invalidations ---- */

static struct watch *watch_find(const char *name)
{
	for (struct watch *w = dir.watches; w; w = w->next)
		if (!strcmp(w->name, name))
			return w;
	return NULL;
}

static void channels_of(const char *name, char *inval, char *keyspace, size_t len)
{
	snprintf(inval, len, "%s%s", conf.inval_prefix, name);
	snprintf(keyspace, len, "%s%s", conf.keyspace_prefix, name);
}

static void unwatch(const char *name)
{
	char inval[DP_NAME_MAX + 64], keyspace[DP_NAME_MAX + 64];
	const char *argv[3] = {"UNSUBSCRIBE", inval, keyspace};
	struct watch **pp, *w;
	int done = 0;

	for (pp = &dir.watches; (w = *pp); pp = &w->next)
		if (!strcmp(w->name, name))
			break;
	if (!w)
		return;
	*pp = w->next;
	free(w);
	channels_of(name, inval, keyspace, sizeof(inval));
	/* The confirmation is read (and ignored) with the other messages. */
	if (redisAppendCommandArgv(dir.ctx[SUB], 3, argv, NULL) != REDIS_OK)
		goto lost;
	while (!done)
		if (redisBufferWrite(dir.ctx[SUB], &done) != REDIS_OK)
			goto lost;
	return;
lost:
	conn_lost(SUB);
}

static bool is_str(const redisReply *r)
{
	return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

/* A message on `sub`: an invalidation of a watched name, or nothing. */
static void dispatch(const redisReply *r)
{
	char name[DP_NAME_MAX];
	const char *ch, *ev;
	size_t n;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || !is_str(r->element[0]) ||
	    !is_str(r->element[1]) || !is_str(r->element[2]) ||
	    strcmp(r->element[0]->str, "message"))
		return;
	ch = r->element[1]->str;
	ev = r->element[2]->str;
	if (!strncmp(ch, conf.inval_prefix, (n = strlen(conf.inval_prefix)))) {
		ch += n;
	} else if (!strncmp(ch, conf.keyspace_prefix, (n = strlen(conf.keyspace_prefix)))) {
		/* Other events (a heartbeat's "expire" where the server
		 * notifies generic commands too) change nothing. */
		if (strcmp(ev, "expired") && strcmp(ev, "del"))
			return;
		ch += n;
	} else {
		return;
	}
	if (strlen(ch) >= sizeof(name) || !watch_find(ch))
		return;
	strcpy(name, ch);
	log_info("directory: record of '%s' %s; segments opened by that name are dropped", name,
		 ev);
	unwatch(name);
	post_invalidate(name, true);
}

/* Dispatches the replies `sub` has already read. */
static void sub_drain(void)
{
	while (dir.state == DIR_UP) {
		redisReply *r = NULL;

		if (redisGetReplyFromReader(dir.ctx[SUB], (void **)&r) != REDIS_OK) {
			conn_lost(SUB);
			return;
		}
		if (!r)
			return;
		dispatch(r);
		freeReplyObject(r);
	}
}

/*
 * Subscribes to a name's invalidations and waits for the confirmation:
 * the record is read only after it, so an invalidation published after
 * that read cannot be missed.
 */
static int watch(const char *name)
{
	char inval[DP_NAME_MAX + 64], keyspace[DP_NAME_MAX + 64];
	const char *argv[3] = {"SUBSCRIBE", inval, keyspace};
	struct watch *w;
	bool confirmed = false;

	if (watch_find(name))
		return 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	snprintf(w->name, sizeof(w->name), "%s", name);
	channels_of(name, inval, keyspace, sizeof(inval));
	if (redisAppendCommandArgv(dir.ctx[SUB], 3, argv, NULL) != REDIS_OK) {
		free(w);
		return conn_lost(SUB);
	}
	while (!confirmed) {
		redisReply *r;

		if (redisGetReply(dir.ctx[SUB], (void **)&r) != REDIS_OK) {
			free(w);
			return conn_lost(SUB);
		}
		/* "subscribe" for the last channel: both are in. */
		confirmed = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
			    is_str(r->element[0]) && !strcmp(r->element[0]->str, "subscribe") &&
			    is_str(r->element[1]) && !strcmp(r->element[1]->str, keyspace);
		dispatch(r);
		freeReplyObject(r);
		if (dir.state != DIR_UP) {
			free(w);
			return -EHOSTUNREACH;
		}
	}
	w->next = dir.watches;
	dir.watches = w;
	sub_drain();
	return dir.state == DIR_UP ? 0 : -EHOSTUNREACH;
}

/* ---- the directory thread ---- */

static void on_timer_event(struct ev_handler *h, uint32_t events);
static void on_sock_event(struct ev_handler *h, uint32_t events);
static void on_request_event(struct ev_handler *h, uint32_t events);

/* The timer: the next connect attempt, a connect that took too long, or
 * the heartbeat. */
static void on_timer_event(struct ev_handler *h, uint32_t events)
{
	uint64_t ticks;

	(void)events;
	if (read(h->fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
		return;
	if (dp_now_ms() < dir.due_ms) {
		arm_timer();
		return;
	}
	switch (dir.state) {
	case DIR_DOWN:
		conn_start();
		break;
	case DIR_CONNECTING:
		conn_down("connect timed out");
		break;
	case DIR_UP:
		heartbeat();
		if (dir.state == DIR_UP) {
			dir.due_ms = dp_now_ms() + conf.ttl_s * 1000u / 3;
			arm_timer();
		}
		break;
	}
}

/* Either socket. Events of sockets closed earlier in the same epoll batch
 * find the state changed and are ignored. */
static void on_sock_event(struct ev_handler *h, uint32_t events)
{
	int i = h == &dir.sock[CMD] ? CMD : SUB;
	char b;

	if (dir.state == DIR_CONNECTING) {
		if (!dir.connected[i])
			connect_done(i, events);
		return;
	}
	if (dir.state != DIR_UP)
		return;
	/* The sockets block (with timeouts): an event whose bytes a lookup
	 * earlier in this epoll batch has read already must not become a
	 * 500 ms wait and a dropped connection. */
	if (recv(dir.sock[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
	    (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (i == CMD) {
		/* `cmd` is only read inside a command: readable now means
		 * closed (or bytes nobody asked for). */
		conn_down("the server closed the connection");
	} else if (redisBufferRead(dir.ctx[SUB]) != REDIS_OK) {
		conn_lost(SUB);
	} else {
		sub_drain();
	}
}

static int do_publish(struct dir_req *q)
{
	struct auth_part parts[4];
	struct own_rec *o;
	uint64_t gen;
	int rc;

	if (dir.state != DIR_UP)
		return -EHOSTUNREACH;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	snprintf(o->name, sizeof(o->name), "%s", q->name);
	/* The export's generation: microseconds since the epoch, rising
	 * within this process, so that a restarted service (same server
	 * name) replaces its old records visibly. */
	gen = dp_clock_ns(CLOCK_REALTIME) / 1000u;
	if (gen <= dir.last_gen)
		gen = dir.last_gen + 1;
	dir.last_gen = gen;
	snprintf(o->gen, sizeof(o->gen), "%llu", (unsigned long long)gen);
	o->rec = q->rec;
	record_parts(parts, o->name, cfg.server_name, o->gen, &o->rec);
	auth_mac(RECORD_LABEL, parts, 4, o->mac);
	o->pending = true;
	rc = pipeline(o, S_PUBLISH);
	if (!rc && o->result != 1) {
		log_info("directory: '%s' is held by another live service", o->name);
		rc = -EEXIST;
	}
	if (rc) {
		free(o);
		return rc;
	}
	o->next = dir.own;
	dir.own = o;
	log_debug("directory: published '%s' (generation %s)", o->name, o->gen);
	return 0;
}

static void do_withdraw(const char *name)
{
	struct own_rec **pp, *o;

	for (pp = &dir.own; (o = *pp); pp = &o->next)
		if (!strcmp(o->name, name))
			break;
	if (!o)
		return;
	*pp = o->next;
	o->next = NULL;
	if (!o->lost && dir.state == DIR_UP) {
		o->pending = true;
		if (!pipeline(o, S_DELETE)) {
			log_debug("directory: withdrew '%s'", name);
			free(o);
			return;
		}
	}
	if (o->lost) {
		free(o);
		return;
	}
	/* Unreachable: deleted on reconnect, unless it expires first. */
	o->withdrawn_ms = dp_now_ms();
	o->next = dir.graves;
	dir.graves = o;
}

static int do_lookup(const char *name, struct dp_rpc_lookup_reply *out)
{
	char key[DP_NAME_MAX + 32];
	const char *argv[6] = {"HMGET", key, "owner", "gen", "rec", "mac"};
	struct dir_record rec;
	redisReply *r, **e;
	int rc;

	if (dir.state != DIR_UP)
		return -EHOSTUNREACH;
	rc = watch(name);
	if (rc)
		return rc;
	key_of(key, sizeof(key), name);
	r = command(6, argv, &rc);
	if (!r)
		return rc;
	e = r->element;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
		rc = -EBADMSG;
	} else if (e[0]->type == REDIS_REPLY_NIL) {
		rc = -ENOENT;
	} else if (e[0]->type != REDIS_REPLY_STRING || e[1]->type != REDIS_REPLY_STRING ||
		   e[2]->type != REDIS_REPLY_STRING || e[2]->len != sizeof(rec)) {
		rc = -EBADMSG;
	} else {
		/* The checks of a reply from the peer's RPC port, and the
		 * owner field must name the record's server. */
		memcpy(&rec, e[2]->str, sizeof(rec));
		rc = rpc_reply_check(&rec.h, &rec.r) ? -EBADMSG : 0;
		if (!rc && (e[0]->len >= sizeof(rec.r.server_name) ||
			    strcmp(e[0]->str, rec.r.server_name)))
			rc = -EBADMSG;
		/* Signed with our fleet key, or not ours to believe. */
		if (!rc) {
			struct auth_part parts[4];

			record_parts(parts, name, e[0]->str, e[1]->str, &rec);
			if (e[3]->type != REDIS_REPLY_STRING || e[3]->len != DP_AUTH_MAC ||
			    !auth_check(RECORD_LABEL, parts, 4, (const uint8_t *)e[3]->str)) {
				log_warn("directory: the record of '%s' (owner %s) is not signed "
					 "with this service's fleet key; not trusted",
					 name, rec.r.server_name);
				rc = -EACCES;
			}
		}
		if (!rc)
			log_debug("directory: '%s' -> %s (generation %.24s)", name,
				  rec.r.server_name, e[1]->str);
	}
	freeReplyObject(r);
	if (rc == -EBADMSG)
		log_warn("directory: the record of '%s' is malformed; ignored", name);
	/* Nothing is cached for these: no invalidation to wait for. A record
	 * of this service is answered all the same (segments.c resolves it
	 * to the export here, or -ENOENT). */
	if (rc || !strcmp(rec.r.server_name, cfg.server_name)) {
		if (dir.state == DIR_UP)
			unwatch(name);
		if (rc)
			return rc;
	}
	*out = rec.r;
	return 0;
}

/* The requests queued, in order; answers go back on the answers' queue. */
static void on_request_event(struct ev_handler *h, uint32_t events)
{
	struct dir_req *q, *next;

	(void)h;
	(void)events;
	for (q = queue_take(&requests); q; q = next) {
		next = q->next;
		switch (q->type) {
		case REQ_PUBLISH:
			q->rc = do_publish(q);
			queue_put(&answers, q);
			break;
		case REQ_LOOKUP:
			q->rc = do_lookup(q->name, &q->reply);
			queue_put(&answers, q);
			break;
		case REQ_WITHDRAW:
			do_withdraw(q->name);
			if (q->answer)
				queue_put(&answers, q);
			else
				free(q);
			break;
		default: /* REQ_STOP (static), the last one */
			dir.stop = true;
			break;
		}
	}
}

/* Tells directory_start() once the first connection attempt has ended. */
static void first_check(void)
{
	if (dir.first_done || dir.state == DIR_CONNECTING)
		return;
	pthread_mutex_lock(&first_lock);
	dir.first_done = true;
	pthread_cond_signal(&first_cond);
	pthread_mutex_unlock(&first_lock);
}

static void *directory_main(void *arg)
{
	struct epoll_event evs[8];

	(void)arg;
	pthread_setname_np(pthread_self(), "dp-directory");
	conn_start();
	first_check();
	while (!dir.stop) {
		int n = epoll_wait(dir.epfd, evs, 8, -1);

		for (int i = 0; i < n; i++) {
			struct ev_handler *h = evs[i].data.ptr;

			h->on_event(h, evs[i].events);
		}
		first_check();
	}
	/* Normally empty: the exports were withdrawn with their clients. */
	while (dir.own) {
		struct own_rec *o = dir.own;

		dir.own = o->next;
		free(o);
	}
	while (dir.graves) {
		struct own_rec *o = dir.graves;

		dir.graves = o->next;
		free(o);
	}
	conn_close();
	return NULL;
}

/* ---- the control thread's side ---- */

static void inflight_unlink(struct dir_req *q)
{
	if (q->oprev)
		q->oprev->onext = q->onext;
	else
		ctlside.inflight = q->onext;
	if (q->onext)
		q->onext->oprev = q->oprev;
	q->oprev = q->onext = NULL;
}

/* Answers (and invalidations), in the order the directory thread gave
 * them. A callback may ask the directory again: that goes on the other
 * queue. */
static void on_done_event(struct ev_handler *h, uint32_t events)
{
	struct dir_req *q, *next;

	(void)h;
	(void)events;
	for (q = queue_take(&answers); q; q = next) {
		next = q->next;
		if (q->type == REQ_INVALIDATE) {
			if (ctlside.invalidate)
				ctlside.invalidate(q->name[0] ? q->name : NULL, q->kill);
		} else {
			inflight_unlink(q);
			if (!q->cancelled)
				q->done(q->arg, q->rc, q->rc ? NULL : &q->reply);
		}
		free(q);
	}
}

/* A request to the thread, remembered until answered when it has a
 * callback. */
static void ask(struct dir_req *q)
{
	if (q->done) {
		q->onext = ctlside.inflight;
		if (q->onext)
			q->onext->oprev = q;
		ctlside.inflight = q;
	}
	queue_put(&requests, q);
}

static int efd_new(void)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	return fd < 0 ? -errno : fd;
}

int directory_start(int epfd, directory_invalidate_fn invalidate)
{
	struct timespec until;
	int rc;

	if (!conf.on)
		return 0;
	ctlside.epfd = epfd;
	ctlside.invalidate = invalidate;
	dir.backoff_ms = BACKOFF_MIN_MS;
	dir.seed = (unsigned)getpid() ^ (unsigned)dp_now_ms();
	dir.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (dir.epfd < 0)
		return -errno;
	dir.timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (dir.timer.fd < 0)
		return -errno;
	if ((rc = requests.efd = efd_new()) < 0 || (rc = answers.efd = efd_new()) < 0)
		return rc;
	dir.timer.on_event = on_timer_event;
	dir.sock[CMD].on_event = on_sock_event;
	dir.sock[SUB].on_event = on_sock_event;
	dir.req_ev = (struct ev_handler){.fd = requests.efd, .on_event = on_request_event};
	ctlside.done_ev = (struct ev_handler){.fd = answers.efd, .on_event = on_done_event};
	if ((rc = ev_add(dir.epfd, &dir.timer, EPOLLIN, "the directory's timer")) ||
	    (rc = ev_add(dir.epfd, &dir.req_ev, EPOLLIN, "the directory's requests")) ||
	    (rc = ev_add(epfd, &ctlside.done_ev, EPOLLIN, "the directory's answers")))
		return rc;
	log_info("directory %s: records \"%s<name>\", TTL %u s, refreshed every %u ms", conf.shown,
		 KEY_PREFIX, conf.ttl_s, conf.ttl_s * 1000u / 3);
	rc = pthread_create(&ctlside.thread, NULL, directory_main, NULL);
	if (rc)
		return -rc;
	ctlside.running = true;
	/* The first connection is waited for here, before any client is
	 * served, so that an export right after start-up finds it up; at
	 * most 2 s (a host name that resolves slowly is no start-up hang). */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	pthread_mutex_lock(&first_lock);
	while (!dir.first_done)
		if (pthread_cond_timedwait(&first_cond, &first_lock, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&first_lock);
	return 0;
}

void directory_cancel(void)
{
	struct dir_req *q;

	while ((q = ctlside.inflight)) {
		inflight_unlink(q);
		q->cancelled = true;
		/* Published meanwhile, or later: withdrawn after it. */
		if (q->type == REQ_PUBLISH)
			directory_withdraw(q->name, NULL, NULL);
		q->done(q->arg, -ECANCELED, NULL);
	}
}

void directory_stop(void)
{
	struct dir_req *q;

	if (!conf.on)
		return;
	directory_cancel();
	if (ctlside.running) {
		/* After everything asked before it (withdrawals). */
		queue_put(&requests, &stop_req);
		pthread_join(ctlside.thread, NULL);
		ctlside.running = false;
	}
	/* Answers nobody waits for any more. */
	if (answers.efd >= 0)
		for (q = queue_take(&answers); q;) {
			struct dir_req *next = q->next;

			free(q);
			q = next;
		}
	if (ctlside.done_ev.fd >= 0)
		ev_del(ctlside.epfd, &ctlside.done_ev, "the directory's answers");
	if (requests.efd >= 0)
		close(requests.efd);
	if (answers.efd >= 0)
		close(answers.efd);
	if (dir.timer.fd >= 0)
		close(dir.timer.fd);
	if (dir.epfd >= 0)
		close(dir.epfd);
	requests.efd = answers.efd = dir.timer.fd = dir.epfd = ctlside.done_ev.fd = -1;
}

int directory_publish(const struct segment *s, directory_done_fn done, void *arg)
{
	struct dir_req *q;
	int rc;

	/* A session's member is found through its session alone. */
	if (!conf.on || !s->eng[ENGINE_fabric] || session_member_name(s->name))
		return 0;
	if (!atomic_load(&dir_up))
		return -EHOSTUNREACH;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->type = REQ_PUBLISH;
	snprintf(q->name, sizeof(q->name), "%s", s->name);
	q->rec.h = (struct dp_rpc_hdr){.magic = DP_RPC_MAGIC,
				       .version = DP_RPC_VERSION,
				       .type = DP_RPC_LOOKUP | DP_RPC_REPLY,
				       .len = sizeof(q->rec.r)};
	/* Here: the engines' registrations are the control thread's. */
	rc = rpc_segment_record(s, &q->rec.r);
	if (rc) {
		free(q);
		return rc;
	}
	q->done = done;
	q->arg = arg;
	ask(q);
	return DIRECTORY_PENDING;
}

int directory_withdraw(const char *name, directory_done_fn done, void *arg)
{
	struct dir_req *q;

	if (!conf.on || !ctlside.running || session_member_name(name))
		return 0;
	q = calloc(1, sizeof(*q));
	if (!q) {
		log_err("directory: out of memory: the record of '%s' is left to expire", name);
		return 0;
	}
	q->type = REQ_WITHDRAW;
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->answer = done != NULL;
	q->done = done;
	q->arg = arg;
	ask(q);
	return done ? DIRECTORY_PENDING : 0;
}

int directory_lookup(const char *name, directory_done_fn done, void *arg)
{
	struct dir_req *q;

	if (!conf.on)
		return -ENOENT;
	if (!atomic_load(&dir_up))
		return -EHOSTUNREACH;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->type = REQ_LOOKUP;
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->done = done;
	q->arg = arg;
	ask(q);
	return DIRECTORY_PENDING;
}
