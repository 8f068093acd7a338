/* service_names.c - segment names outside the documented set are -EINVAL from the library and, sent raw, from the service; the edge cases inside it work; errors a person can act on (an unsealable memfd, a path outside --file-root) come with their own errno and a dp_last_error() text that names the call and the cause. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "dp_proto.h"
#include "helpers.h"

TestSuite(service_names, .fini = svc_teardown);

/* Outside the set: control characters, ESC, newline, DEL, space, non-ASCII,
 * other punctuation, empty / "." / ".." components, a leading or trailing
 * '/', and 64 bytes (one over DP_SEGMENT_NAME_MAX). */
static const char *const bad_names[] = {
	"",
	"a\nb",
	"\x1b[31mred",
	"tab\there",
	"bell\a",
	"del\x7f",
	"a b",
	"caf\xc3\xa9",
	"semi;colon",
	"star*",
	"pct%s",
	"..",
	".",
	"a/..",
	"../a",
	"a/../b",
	"a/./b",
	"/abs",
	"trail/",
	"a//b",
	"/",
	"back\\slash",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
};

/* Inside it, each an edge of some rule. */
static const char *const good_names[] = {
	"a",
	"Z9",
	"...",
	".hidden",
	"a..b",
	"weights/0",
	"demo/kv-cache",
	"host:port_like.name-1",
	"a/.b/c../d",
	"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.",
};

static void printable(const char *s, char *out, size_t cap)
{
	size_t k = 0;

	for (; *s && k + 5 < cap; s++)
		k += (size_t)snprintf(
			out + k, cap - k,
			(unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f ? "%c" : "\\x%02x",
			(unsigned char)*s);
	out[k] = 0;
}

Test(service_names, library_refuses_names_outside_the_set, .timeout = 20)
{
	struct dp_client *c;
	char shown[300];
	uint8_t *p;
	int r, rc;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "names");
	r = alloc_region(c, 4096, &p);
	for (unsigned i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		printable(bad_names[i], shown, sizeof(shown));
		rc = dp_segment_export(c, r, bad_names[i], DP_ACCESS_RW);
		cr_assert_eq(rc, -EINVAL, "export '%s': %d (%s)", shown, rc, dp_strerror(rc));
		cr_assert_not_null(strstr(dp_last_error(), "dp_segment_export: bad name"),
				   "export '%s': last error '%s'", shown, dp_last_error());
		rc = dp_segment_open(c, NULL, bad_names[i], DP_ACCESS_READ);
		cr_assert_eq(rc, -EINVAL, "open '%s': %d (%s)", shown, rc, dp_strerror(rc));
		cr_assert_not_null(strstr(dp_last_error(), "dp_segment_open: bad name"),
				   "open '%s': last error '%s'", shown, dp_last_error());
		rc = dp_segment_unexport(c, bad_names[i]);
		cr_assert_eq(rc, -EINVAL, "unexport '%s': %d (%s)", shown, rc, dp_strerror(rc));
	}
	rc = dp_segment_export(c, r, NULL, DP_ACCESS_RW);
	cr_assert_eq(rc, -EINVAL, "export of a NULL name: %d", rc);
	/* Nothing was exported by any of that. */
	cr_assert_eq(dp_segment_open(c, NULL, "a", DP_ACCESS_READ), -ENOENT);
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);
}

Test(service_names, edge_names_inside_the_set_work, .timeout = 20)
{
	struct dp_client *c;
	uint8_t *p;
	int r, rc, h;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "names");
	r = alloc_region(c, 4096, &p);
	for (unsigned i = 0; i < sizeof(good_names) / sizeof(good_names[0]); i++) {
		cr_assert_leq(strlen(good_names[i]), DP_SEGMENT_NAME_MAX);
		rc = dp_segment_export(c, r, good_names[i], DP_ACCESS_RW);
		cr_assert_eq(rc, 0, "export '%s': %s", good_names[i], dp_last_error());
		h = dp_segment_open(c, NULL, good_names[i], DP_ACCESS_RW);
		cr_assert_geq(h, 0, "open '%s': %s", good_names[i], dp_last_error());
		cr_assert_eq(dp_segment_close(c, h), 0);
		rc = dp_segment_unexport(c, good_names[i]);
		cr_assert_eq(rc, 0, "unexport '%s': %s", good_names[i], dp_last_error());
	}
	/* 63 bytes is the longest. */
	cr_assert_eq(strlen(good_names[sizeof(good_names) / sizeof(good_names[0]) - 1]),
		     DP_SEGMENT_NAME_MAX);
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);
}

/* ---- the service checks names itself (a client need not use libclient) ---- */

Test(service_names, service_refuses_raw_names_outside_the_set, .timeout = 20)
{
	struct dp_msg_hello hello = {.abi_version = DP_ABI_VERSION, .pid = (uint32_t)getpid()};
	struct dp_msg_segment_export ex;
	struct dp_msg_segment_open op;
	struct dp_msg_segment_name un;
	char shown[300];
	int fd;

	start_svc(&svc, local_only);
	fd = raw_connect(svc.sock, 3);
	snprintf(hello.name, sizeof(hello.name), "raw-names");
	cr_assert_eq(raw_call(fd, DP_MSG_HELLO, &hello, sizeof(hello), NULL), 0);
	for (unsigned i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		printable(bad_names[i], shown, sizeof(shown));
		memset(&ex, 0, sizeof(ex));
		memset(&op, 0, sizeof(op));
		memset(&un, 0, sizeof(un));
		/* The 64-byte name fills its field with no NUL. */
		memcpy(ex.name, bad_names[i], strnlen(bad_names[i], sizeof(ex.name)));
		memcpy(op.name, ex.name, sizeof(op.name));
		memcpy(un.name, ex.name, sizeof(un.name));
		ex.access = DP_ACCESS_RW;
		op.access = DP_ACCESS_READ;
		cr_assert_eq(raw_call(fd, DP_MSG_SEGMENT_EXPORT, &ex, sizeof(ex), NULL), -EINVAL,
			     "raw export '%s'", shown);
		cr_assert_eq(raw_call(fd, DP_MSG_SEGMENT_OPEN, &op, sizeof(op), NULL), -EINVAL,
			     "raw open '%s'", shown);
		cr_assert_eq(raw_call(fd, DP_MSG_SEGMENT_UNEXPORT, &un, sizeof(un), NULL), -EINVAL,
			     "raw unexport '%s'", shown);
	}
	/* A good name gets past the check to the handler: region 0 was never
	 * registered (-EBADF), nothing is exported under it (-ENOENT). */
	memset(&ex, 0, sizeof(ex));
	snprintf(ex.name, sizeof(ex.name), "weights/0");
	ex.access = DP_ACCESS_RW;
	cr_assert_eq(raw_call(fd, DP_MSG_SEGMENT_EXPORT, &ex, sizeof(ex), NULL), -EBADF);
	memset(&op, 0, sizeof(op));
	snprintf(op.name, sizeof(op.name), "weights/0");
	op.access = DP_ACCESS_READ;
	cr_assert_eq(raw_call(fd, DP_MSG_SEGMENT_OPEN, &op, sizeof(op), NULL), -ENOENT);
	/* None of those was malformed: the client is still served. */
	cr_assert_eq(raw_call(fd, DP_MSG_SEGMENT_UNEXPORT, op.name, sizeof(un), NULL), -ENOENT);
	close(fd);
	cr_assert_eq(svc_stop(&svc), 0);
}

/* ---- errors with text that fits the call ---- */

TestSuite(service_errtext, .fini = svc_teardown);

Test(service_errtext, memfd_without_sealing_is_eperm, .timeout = 20)
{
	struct dp_client *c;
	int fd, rc, ok;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "errtext");
	fd = memfd_create("no-seals", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 65536), 0);
	rc = dp_register_fd(c, fd, 0, 65536);
	cr_assert_eq(rc, -EPERM, "unsealable memfd: %d (%s)", rc, dp_strerror(rc));
	cr_assert_not_null(strstr(dp_last_error(), "dp_register_fd"), "%s", dp_last_error());
	cr_assert_not_null(strstr(dp_last_error(), "MFD_ALLOW_SEALING"), "%s", dp_last_error());
	cr_assert_not_null(strstr(dp_last_error(), "(EPERM)"), "%s", dp_last_error());
	/* A successful call leaves the text alone, like errno. */
	close(fd);
	fd = memfd_create("seals", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 65536), 0);
	ok = dp_register_fd(c, fd, 0, 65536);
	cr_assert_geq(ok, 0, "sealable memfd: %s", dp_last_error());
	cr_assert_not_null(strstr(dp_last_error(), "MFD_ALLOW_SEALING"));
	/* And the fd that is no memfd at all stays -EINVAL. */
	rc = dp_register_fd(c, STDIN_FILENO, 0, 1);
	cr_assert_eq(rc, -EINVAL, "stdin: %d (%s)", rc, dp_strerror(rc));
	cr_assert_not_null(strstr(dp_last_error(), "not a memfd"), "%s", dp_last_error());
	close(fd);
	cr_assert_eq(dp_free(c, ok), 0);
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);
}

/* The text of a path outside --file-root speaks of --file-root, never of a
 * segment's export (the errno is -EPERM either way, docs/files.md). */
static void expect_outside_root(struct dp_client *c, const char *path)
{
	int rc = dp_open_file(c, path, 0, 0, DP_ACCESS_READ);

	if (rc == -ENOTSUP)
		cr_skip_test("the service has no io_uring here");
	cr_assert_eq(rc, -EPERM, "'%s': %d (%s)", path, rc, dp_strerror(rc));
	cr_assert_not_null(strstr(dp_last_error(), "dp_open_file: the path is outside the "
						   "service's --file-root"),
			   "'%s': %s", path, dp_last_error());
	cr_assert_null(strstr(dp_last_error(), "export"), "'%s': %s", path, dp_last_error());
}

Test(service_errtext, open_file_outside_file_root_says_so, .timeout = 30)
{
	const char *flags[] = {"--provider", "none", "--file-root", NULL, NULL};
	char root[64] = "/tmp/dp-names-root-XXXXXX", inside[96];
	struct dp_client *c;
	int fd, rc;

	/* Without --file-root every path is outside. */
	start_svc(&svc, local_only);
	c = connect_client(&svc, "errtext");
	expect_outside_root(c, "anything");
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);

	cr_assert_not_null(mkdtemp(root));
	snprintf(inside, sizeof(inside), "%s/inside", root);
	fd = open(inside, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	close(fd);
	flags[3] = root;
	start_svc(&svc, flags);
	c = connect_client(&svc, "errtext");
	expect_outside_root(c, "../outside");
	expect_outside_root(c, "/etc/passwd");
	rc = dp_open_file(c, "missing", 0, 0, DP_ACCESS_READ);
	cr_assert_eq(rc, -ENOENT, "missing: %d", rc);
	cr_assert_not_null(strstr(dp_last_error(), "dp_open_file: no such file"), "%s",
			   dp_last_error());
	rc = dp_open_file(c, "inside", 0, 0, DP_ACCESS_READ);
	cr_assert_geq(rc, 0, "inside: %s", dp_last_error());
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);
	unlink(inside);
	rmdir(root);
}

/* dp_strerror() is the same for every call, so its -EPERM text must not
 * claim one call's cause. */
Test(service_errtext, strerror_eperm_is_not_one_calls_cause)
{
	const char *t = dp_strerror(-EPERM);

	cr_assert_not_null(strstr(t, "export"), "%s", t);
	cr_assert_not_null(strstr(t, "--file-root"), "%s", t);
	cr_assert_not_null(strstr(t, "sealing"), "%s", t);
}
