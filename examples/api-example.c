/* api-example.c - the example of docs/api.md: export a segment, WRITE into it
 * through the service, READ it back, check the bytes. */
#include <stdio.h>
#include <string.h>

#include "dataplane.h"

int main(int argc, char **argv)
{
	const char *sock = argc > 1 ? argv[1] : NULL; /* NULL: the default socket */
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d[2];
	struct dp_cqe cqe[2];
	char *src, *dst;
	int rc, src_region, dst_region, seg, done = 0;

	if ((rc = dp_connect(sock, "api-example", &c)) < 0) {
		fprintf(stderr, "connect: %s\n", dp_strerror(rc));
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
