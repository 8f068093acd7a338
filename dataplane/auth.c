/* SPDX-License-Identifier: MIT */
/*
 * auth.c - the fleet key and HMAC-SHA256 over it (auth.h).
 *
 * SHA-256 is FIPS 180-4, written out here so that the service needs no
 * crypto library; HMAC is RFC 2104. auth_init() checks both against RFC 4231
 * test case 2 before the key is used, so a miscompiled digest stops the
 * service instead of locking every peer out.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"

/* ---- SHA-256 ---- */

struct sha256 {
	uint32_t h[8];
	uint64_t bytes;
	uint8_t buf[64];
	size_t fill;
};

static const uint32_t K256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void sha256_block(struct sha256 *s, const uint8_t *p)
{
	uint32_t w[64], v[8];

	for (unsigned i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (unsigned i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	memcpy(v, s->h, sizeof(v));
	for (unsigned i = 0; i < 64; i++) {
		uint32_t e = v[4], a = v[0];
		uint32_t t1 = v[7] + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
			      ((e & v[5]) ^ (~e & v[6])) + K256[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
			      ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));

		memmove(&v[1], &v[0], 7 * sizeof(v[0]));
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (unsigned i = 0; i < 8; i++)
		s->h[i] += v[i];
}

static void sha256_init(struct sha256 *s)
{
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
				       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

	memcpy(s->h, iv, sizeof(iv));
	s->bytes = 0;
	s->fill = 0;
}

static void sha256_update(struct sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	while (len) {
		size_t n = 64 - s->fill < len ? 64 - s->fill : len;

		memcpy(s->buf + s->fill, p, n);
		s->fill += n;
		p += n;
		len -= n;
		if (s->fill == 64) {
			sha256_block(s, s->buf);
			s->fill = 0;
		}
	}
}

static void sha256_final(struct sha256 *s, uint8_t out[32])
{
	uint64_t bits = s->bytes * 8;
	uint8_t pad = 0x80, len[8];

	sha256_update(s, &pad, 1);
	pad = 0;
	while (s->fill != 56)
		sha256_update(s, &pad, 1);
	for (unsigned i = 0; i < 8; i++)
		len[i] = (uint8_t)(bits >> (56 - 8 * i));
	sha256_update(s, len, 8);
	for (unsigned i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

/* ---- HMAC (RFC 2104) ---- */

void hmac_sha256(const void *key, size_t klen, const struct auth_part *parts, unsigned n,
		 uint8_t out[32])
{
	uint8_t k[64] = {0}, pad[64], inner[32];
	struct sha256 s;

	if (klen > 64) {
		sha256_init(&s);
		sha256_update(&s, key, klen);
		sha256_final(&s, k);
	} else {
		memcpy(k, key, klen);
	}
	for (unsigned i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	sha256_init(&s);
	sha256_update(&s, pad, 64);
	for (unsigned i = 0; i < n; i++)
		sha256_update(&s, parts[i].p, parts[i].len);
	sha256_final(&s, inner);
	for (unsigned i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	sha256_init(&s);
	sha256_update(&s, pad, 64);
	sha256_update(&s, inner, sizeof(inner));
	sha256_final(&s, out);
}

/* RFC 4231 test cases 2 (a short key, a message in two parts) and 6 (a
 * key longer than the block, hashed first). */
static bool hmac_selftest(void)
{
	static const uint8_t want2[32] = {
		0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
		0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
		0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43,
	};
	static const uint8_t want6[32] = {
		0x60, 0xe4, 0x31, 0x59, 0x1e, 0xe0, 0xb6, 0x7f, 0x0d, 0x8a, 0x26,
		0xaa, 0xcb, 0xf5, 0xb7, 0x7f, 0x8e, 0x0b, 0xc6, 0x21, 0x37, 0x28,
		0xc5, 0x14, 0x05, 0x46, 0x04, 0x0f, 0x0e, 0xe3, 0x7f, 0x54,
	};
	static const char msg6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
	struct auth_part two[2] = {{"what do ya want ", 16}, {"for nothing?", 12}};
	struct auth_part six = {msg6, sizeof(msg6) - 1};
	uint8_t key6[131], got2[32], got6[32];

	memset(key6, 0xaa, sizeof(key6));
	hmac_sha256("Jefe", 4, two, 2, got2);
	hmac_sha256(key6, sizeof(key6), &six, 1, got6);
	return !memcmp(got2, want2, 32) && !memcmp(got6, want6, 32);
}

/* ---- the fleet key ---- */

static uint8_t fleet_key[DP_AUTH_KEY_MAX];
static size_t fleet_key_len; /* 0: no key; every MAC fails (no peer trusted) */
static char key_path[DP_AUTH_PATH_MAX];

const char *auth_path(void)
{
	return key_path;
}

int auth_default_path(char *out, size_t len)
{
	const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	int n;

	if (geteuid() == 0)
		n = snprintf(out, len, "/var/lib/dataplane/peer.key");
	else if (state && state[0] == '/')
		n = snprintf(out, len, "%s/dataplane/peer.key", state);
	else if (home && home[0] == '/')
		n = snprintf(out, len, "%s/.local/state/dataplane/peer.key", home);
	else
		return -ENOENT;
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* mkdir -p of the key's directory, each level made 0700. */
static int make_dirs(const char *path)
{
	char dir[DP_AUTH_PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", path);
	for (char *p = dir + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

/* A new key file: 32 random bytes as 64 hex digits, written to a private
 * temporary file and linked into place, so two services starting at once
 * agree on one key (the second link fails with EEXIST and reads the first). */
static int key_create(const char *path)
{
	char tmp[DP_AUTH_PATH_MAX + 16], hex[66];
	uint8_t raw[32];
	int fd, rc = 0;

	if ((rc = make_dirs(path)) < 0)
		return rc;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid()) >= sizeof(tmp))
		return -ENAMETOOLONG;
	auth_nonce(raw);
	for (unsigned i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	hex[64] = '\n';
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, hex, 65) != 65 || fsync(fd) < 0)
		rc = -EIO;
	close(fd);
	if (!rc && link(tmp, path) < 0 && errno != EEXIST)
		rc = -errno;
	unlink(tmp);
	return rc;
}

static int key_load(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	ssize_t n;

	if (fd < 0) {
		snprintf(err, errlen, "peer key %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, errlen, "peer key %s: not a regular file", path);
		return -EINVAL;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 077)) {
		close(fd);
		snprintf(err, errlen,
			 "peer key %s: must belong to uid %u and be mode 0600 or stricter (it is "
			 "uid %u, mode %04o): anyone who can read it is trusted as a peer",
			 path, (unsigned)geteuid(), (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	n = read(fd, fleet_key, sizeof(fleet_key));
	close(fd);
	while (n > 0 && (fleet_key[n - 1] == '\n' || fleet_key[n - 1] == '\r' ||
			 fleet_key[n - 1] == ' ' || fleet_key[n - 1] == '\t'))
		n--;
	if (n < DP_AUTH_KEY_MIN) {
		snprintf(err, errlen, "peer key %s: %zd bytes; a key has %d to %d", path,
			 n < 0 ? 0 : n, DP_AUTH_KEY_MIN, DP_AUTH_KEY_MAX);
		return -EINVAL;
	}
	fleet_key_len = (size_t)n;
	return 0;
}

int auth_init(const char *path, char *err, size_t errlen)
{
	char def[DP_AUTH_PATH_MAX];
	bool is_default = !path || !path[0];
	int rc;

	if (!hmac_selftest()) {
		snprintf(err, errlen, "HMAC-SHA256 fails its known-answer test");
		return -EIO;
	}
	if (is_default) {
		if ((rc = auth_default_path(def, sizeof(def))) < 0) {
			snprintf(err, errlen,
				 "no default peer key path (no HOME): give --peer-key FILE");
			return rc;
		}
		path = def;
	}
	if (strlen(path) >= sizeof(key_path)) {
		snprintf(err, errlen, "peer key path too long (max %zu bytes)",
			 sizeof(key_path) - 1);
		return -ENAMETOOLONG;
	}
	if (is_default && access(path, F_OK) < 0 && (rc = key_create(path)) < 0) {
		snprintf(err, errlen, "cannot create the peer key %s: %s", path, strerror(-rc));
		return rc;
	}
	if ((rc = key_load(path, err, errlen)) < 0)
		return rc;
	snprintf(key_path, sizeof(key_path), "%s", path);
	return 0;
}

void auth_nonce(uint8_t out[DP_AUTH_NONCE])
{
	size_t got = 0;

	while (got < DP_AUTH_NONCE) {
		ssize_t n = getrandom(out + got, DP_AUTH_NONCE - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			abort(); /* no entropy at all: nothing safe to do */
		}
		got += (size_t)n;
	}
}

void auth_mac(const char *label, const struct auth_part *parts, unsigned n,
	      uint8_t out[DP_AUTH_MAC])
{
	struct auth_part all[8];

	if (!fleet_key_len) {
		auth_nonce(out); /* proves nothing to anyone */
		return;
	}
	if (n > 7)
		abort();
	all[0] = (struct auth_part){label, strlen(label) + 1};
	memcpy(&all[1], parts, n * sizeof(*parts));
	hmac_sha256(fleet_key, fleet_key_len, all, n + 1, out);
}

bool auth_check(const char *label, const struct auth_part *parts, unsigned n,
		const uint8_t mac[DP_AUTH_MAC])
{
	uint8_t want[DP_AUTH_MAC];
	uint8_t diff = 0;

	if (!fleet_key_len)
		return false;
	auth_mac(label, parts, n, want);
	for (unsigned i = 0; i < DP_AUTH_MAC; i++)
		diff |= want[i] ^ mac[i];
	return diff == 0;
}
