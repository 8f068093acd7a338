/* SPDX-License-Identifier: MIT */
/*
 * session.c - libclient's engine sessions (docs/api.md "Engine sessions"):
 * this client's memory under a name "host:port", addressed by its virtual
 * addresses (dp_session_create: every region with an address joins it,
 * region.c), and a handle on another client's session (dp_session_open).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

int dp_session_create(struct dp_client *c, unsigned port)
{
	struct dp_msg_session_create req = {.port = port};
	struct dp_msg_session_reply r;
	int rc;

	if (!c)
		return dp__null_arg(C_SESSION_CREATE, -EINVAL);
	if (port > 65535)
		return dp__fail(C_SESSION_CREATE, -EINVAL);
	pthread_mutex_lock(&c->lock);
	rc = dp__rpc(c, DP_MSG_SESSION_CREATE, &req, sizeof(req), -1, &r, sizeof(r), NULL, 0);
	if (!rc && !memchr(r.name, 0, sizeof(r.name)))
		rc = -EBADMSG;
	if (!rc) {
		memcpy(c->session, r.name, sizeof(c->session));
		/* What was registered before joins now; a range that overlaps
		 * one already in stays out (the first registration holds it). */
		for (unsigned i = 0; i < c->naddrs; i++) {
			struct dp_msg_session_add add = {.region = (uint32_t)c->addrs[i].region,
							 .addr = c->addrs[i].addr};

			dp__rpc(c, DP_MSG_SESSION_ADD, &add, sizeof(add), -1, NULL,
				sizeof(struct dp_msg_status), NULL, 0);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc ? dp__fail(C_SESSION_CREATE, rc) : (int)r.port;
}

const char *dp_session_name(const struct dp_client *c)
{
	return c ? c->session : "";
}

int dp_session_open(struct dp_client *c, const char *session, unsigned access)
{
	struct dp_msg_session_open req = {.access = access};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !session)
		return dp__null_arg(C_SESSION_OPEN, -EINVAL);
	if (dp__copy_name(req.session, sizeof(req.session), session, false) || !session[0] ||
	    !strchr(session, ':') || !access || access & ~DP_ACCESS_RW)
		return dp__fail(C_SESSION_OPEN, -EINVAL);
	rc = dp__rpc_locked(c, DP_MSG_SESSION_OPEN, &req, sizeof(req), -1, &r, sizeof(r), NULL, 0);
	if (rc) {
		char text[200];

		const char *why = dp__call_text(C_SESSION_OPEN, rc);

		snprintf(text, sizeof(text), "session '%s': %s", session,
			 why ? why : dp_strerror(rc));
		return dp__fail_text(C_SESSION_OPEN, rc, text);
	}
	return (int)r.id;
}
