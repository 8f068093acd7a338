/* api-example.c - the example of docs/api.md: export a segment, WRITE into it
 * through the service, READ it back, check the bytes.
 * usage: api-example [SOCKET]; exit 0 ok, 1 failure, 2 bad usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane.h"
#include "dp_version.h"

/* The socket dp_connect(sock, ...) tries (docs/api.md). */
static const char *socket_tried(const char *sock, char *buf, size_t len)
{
	const char *env = getenv("DP_SOCKET"), *xdg = getenv("XDG_RUNTIME_DIR");

	if (sock)
		return sock;
	if (env && *env)
		return env;
	if (xdg && *xdg) {
		snprintf(buf, len, "%s/dataplane/dataplane.sock", xdg);
		return buf;
	}
	return "/run/dataplane/dataplane.sock";
}

int main(int argc, char **argv)
{
	const char *sock = argc > 1 ? argv[1] : NULL; /* NULL: the default socket */
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d[2];
	struct dp_cqe cqe[2];
	char *src, *dst;
	int rc, src_region, dst_region, seg, done = 0;

	if (sock && (!strcmp(sock, "--help") || !strcmp(sock, "-h"))) {
		printf("usage: api-example [SOCKET]\n"
		       "  SOCKET     dataplaned's control socket (default $DP_SOCKET, else\n"
		       "             $XDG_RUNTIME_DIR/dataplane/dataplane.sock, else\n"
		       "             /run/dataplane/dataplane.sock)\n"
		       "  -h, --help this text\n"
		       "  --version  print the version and exit\n");
		return 0;
	}
	if (sock && !strcmp(sock, "--version")) {
		printf("api-example (dataplane) %s\n", DP_VERSION_STRING);
		return 0;
	}
	if (argc > 2 || (sock && sock[0] == '-')) {
		fprintf(stderr, "api-example: %s '%s'\nTry 'api-example --help'.\n",
			sock[0] == '-' ? "unknown option" : "unexpected argument",
			sock[0] == '-' ? sock : argv[2]);
		return 2;
	}
	if ((rc = dp_connect(sock, "api-example", &c)) < 0) {
		char buf[256];

		fprintf(stderr, "api-example: cannot connect to %s: %s%s%s\n",
			socket_tried(sock, buf, sizeof(buf)),
			rc == -ECONNREFUSED || rc == -ENOENT ? "no dataplaned is listening there ("
							     : "",
			dp_strerror(rc), rc == -ECONNREFUSED || rc == -ENOENT ? ")" : "");
		return 1;
	}
	src_region = dp_alloc(c, 4096, 0, (void **)&src);
	dst_region = dp_alloc(c, 4096, 0, (void **)&dst);
	if (src_region < 0 || dst_region < 0 || (rc = dp_queue_create(c, 0, &q)) < 0 ||
	    (rc = dp_segment_export(c, dst_region, "example", DP_ACCESS_RW)) < 0 ||
	    (seg = dp_segment_open(c, NULL, "example", DP_ACCESS_RW)) < 0) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	strcpy(src, "hello, dataplane");
	dp_prep_write(&d[0], src_region, 0, seg, 100, 17, 1);	/* src[0..17) -> seg[100..) */
	dp_prep_read(&d[1], src_region, 2048, seg, 100, 17, 2); /* seg[100..) -> src[2048..) */
	if (dp_submit(q, &d[0], 1) != 1 || dp_wait(q, cqe, 1, 1000) != 1 || cqe[0].status ||
	    dp_submit(q, &d[1], 1) != 1 || dp_wait(q, &cqe[1], 1, 1000) != 1 || cqe[1].status) {
		fprintf(stderr, "transfer failed\n");
		return 1;
	}
	done = !strcmp(dst + 100, "hello, dataplane") && !strcmp(src + 2048, "hello, dataplane");
	printf("%s: %s\n", done ? "ok" : "MISMATCH", src + 2048);
	dp_close(c);
	return done ? 0 : 1;
}
