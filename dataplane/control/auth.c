/* SPDX-License-Identifier: MIT */
/*
 * auth.c - the fleet key and HMAC-SHA256 over it (auth.h).
 *
 * HMAC-SHA256 (RFC 2104) comes from OpenSSL's libcrypto (EVP_MAC), and MACs
 * are compared with CRYPTO_memcmp (constant time). auth_init() checks it
 * against RFC 4231 test cases 2 and 6 before the key is used, so a broken
 * library stops the service instead of locking every peer out.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "auth.h"

/* ---- HMAC-SHA256: OpenSSL's libcrypto (EVP_MAC) ---- */

void hmac_sha256(const void *key, size_t klen, const struct auth_part *parts, unsigned n,
		 uint8_t out[32])
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end()};
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	size_t len = 0;
	int ok = ctx && EVP_MAC_init(ctx, key, klen, params);

	for (unsigned i = 0; ok && i < n; i++)
		ok = EVP_MAC_update(ctx, parts[i].p, parts[i].len);
	ok = ok && EVP_MAC_final(ctx, out, &len, 32) && len == 32;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	/* A MAC that could not be made proves nothing: random bytes, which
	 * no peer's check accepts (and the start-up test fails). */
	if (!ok)
		auth_nonce(out);
}

/* RFC 4231 test cases 2 (a short key, a message in two parts) and 6 (a
 * key longer than the block, hashed first). */
bool auth_selftest(void)
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
	return !CRYPTO_memcmp(got2, want2, 32) && !CRYPTO_memcmp(got6, want6, 32);
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

	if (!auth_selftest()) {
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

	if (!fleet_key_len)
		return false;
	auth_mac(label, parts, n, want);
	return CRYPTO_memcmp(want, mac, DP_AUTH_MAC) == 0;
}
