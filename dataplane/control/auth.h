/* SPDX-License-Identifier: MIT */
/*
 * auth.h - who a service trusts as a peer: the holders of its fleet key.
 *
 * A peer lookup is answered only to a peer that proves it holds the same
 * key, and a reply is believed only when it proves the same (rpc_client.c): both
 * sides MAC the other's fresh nonce with HMAC-SHA256 under the key, so a
 * recorded exchange cannot be replayed and a key never crosses the wire.
 * The key is a file readable by the service's user alone (docs/reliability.md,
 * "Trust model"); a service that is given none uses its user's default key
 * file, made on first start, so services of one user on one host trust each
 * other with no set-up and other users' services are strangers.
 */
#ifndef DP_AUTH_H
#define DP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DP_AUTH_NONCE 32
#define DP_AUTH_MAC 32
#define DP_AUTH_KEY_MIN 16 /* bytes of secret in the key file */
#define DP_AUTH_KEY_MAX 1024
#define DP_AUTH_PATH_MAX 256

/* Loads the key from `path` (NULL or "": the default path, created with a
 * fresh random key when missing). Refuses a file that is not a regular
 * file owned by this user, is readable or writable by group or others, or
 * holds fewer than DP_AUTH_KEY_MIN bytes. 0 or -errno, with `err` set;
 * without a key no MAC verifies, so no peer is trusted either way. */
int auth_init(const char *path, char *err, size_t errlen);

/* The key file in use (for the log and --help), "" before auth_init. */
const char *auth_path(void);

/* The default key file of this user: /var/lib/dataplane/peer.key for root,
 * $XDG_STATE_HOME or ~/.local/state /dataplane/peer.key otherwise. */
int auth_default_path(char *out, size_t len);

/* A fresh random nonce (getrandom). */
void auth_nonce(uint8_t out[DP_AUTH_NONCE]);

/* HMAC-SHA256 under the fleet key of: a label (which message this is, so a
 * MAC of one kind never passes as another), then n byte ranges. */
struct auth_part {
	const void *p;
	size_t len;
};
void auth_mac(const char *label, const struct auth_part *parts, unsigned n,
	      uint8_t out[DP_AUTH_MAC]);

/* Whether `mac` is auth_mac() of the same input; constant time. */
bool auth_check(const char *label, const struct auth_part *parts, unsigned n,
		const uint8_t mac[DP_AUTH_MAC]);

/* HMAC-SHA256 with an explicit key, from libcrypto (the primitive under
 * auth_mac). */
void hmac_sha256(const void *key, size_t klen, const struct auth_part *parts, unsigned n,
		 uint8_t out[32]);

/* RFC 4231 test cases 2 and 6 through hmac_sha256(): auth_init() runs it
 * before the key is used, the test suite too. */
bool auth_selftest(void);

#endif /* DP_AUTH_H */
