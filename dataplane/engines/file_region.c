/* SPDX-License-Identifier: MIT */
/*
 * file_region.c - file regions (file.h): a client's fd or a path opened
 * beneath --file-root, checked against the access asked for, a second fd
 * for direct I/O where the file takes it, registered-file slots in every
 * ring, and the close at the region's last reference. The io_uring engine
 * that moves their bytes is file.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "file.h"
#include "file_internal.h"

static int root_fd = -1;
pthread_mutex_t file_slot_lock = PTHREAD_MUTEX_INITIALIZER;
static bool slot_used[FILE_SLOTS];

/* ---- --file-root (main thread, from file_init and file_fini) ---- */

int file_root_open(void)
{
	int rc;

	if (file_cfg.root[0]) {
		root_fd = open(file_cfg.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (root_fd < 0) {
			rc = -errno;
			log_err("--file-root %s: %s", file_cfg.root, strerror(errno));
			return rc;
		}
	}
	return 0;
}

void file_root_close(void)
{
	if (root_fd >= 0)
		close(root_fd);
	root_fd = -1;
}

/* ---- regions (control thread) ---- */

/*
 * Puts @fd into slot i of every ring's file table; -1 when no slot is left
 * or a ring refuses (the region then uses the plain fd). Rings belong to
 * pollers, but registration is a system call on the ring fd that the
 * kernel serialises against submission (the ring is not SINGLE_ISSUER).
 */
static int slot_get(int fd)
{
	int slot = -1, none = -1;
	unsigned r;

	if (!file_fixed_files || fd < 0)
		return -1;
	pthread_mutex_lock(&file_slot_lock);
	for (int i = 0; i < FILE_SLOTS && slot < 0; i++)
		if (!slot_used[i]) {
			slot_used[i] = true;
			slot = i;
		}
	pthread_mutex_unlock(&file_slot_lock);
	if (slot < 0)
		return -1;
	for (r = 0; r < file_nrings; r++)
		if (io_uring_register_files_update(&file_rings[r]->ring, (unsigned)slot, &fd, 1) !=
		    1)
			break;
	if (r == file_nrings)
		return slot;
	while (r--)
		io_uring_register_files_update(&file_rings[r]->ring, (unsigned)slot, &none, 1);
	pthread_mutex_lock(&file_slot_lock);
	slot_used[slot] = false;
	pthread_mutex_unlock(&file_slot_lock);
	return -1;
}

static void slot_put(int slot)
{
	int none = -1;

	if (slot < 0)
		return;
	for (unsigned r = 0; r < file_nrings; r++)
		io_uring_register_files_update(&file_rings[r]->ring, (unsigned)slot, &none, 1);
	pthread_mutex_lock(&file_slot_lock);
	slot_used[slot] = false;
	pthread_mutex_unlock(&file_slot_lock);
}

/* The same open file, opened again through its /proc link: same inode,
 * our own file description (its flags are ours to choose). */
static int reopen(int fd, int flags)
{
	char path[32];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fd = open(path, flags | O_CLOEXEC | O_NOCTTY);
	return fd < 0 ? -errno : fd;
}

/* @path beneath --file-root: the kernel refuses every step out of it
 * ("..", absolute paths and symlinks, /proc magic links) with EXDEV/ELOOP. */
static int open_beneath(const char *path, int acc)
{
	struct open_how how = {.flags = (uint64_t)(acc | O_CLOEXEC | O_NOCTTY | O_NONBLOCK),
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	int fd, fl;

	if (root_fd < 0)
		return -EPERM;
	fd = (int)syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
	if (fd < 0) {
		switch (errno) {
		case EXDEV:
		case ELOOP:
			return -EPERM;
		case ENOSYS:
			return -ENOTSUP; /* no openat2 (Linux < 5.6): no safe resolution */
		case EISDIR:
			return -EINVAL;
		default:
			return -errno;
		}
	}
	/* O_NONBLOCK kept a FIFO from blocking the open; io_uring would turn
	 * it into EAGAIN for every read of a regular file. */
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

/* Direct I/O alignment of the file, and whether it takes direct I/O. */
static void dio_probe(struct file_region *f, int fd, const struct stat *st)
{
	f->off_align = f->mem_align = 4096;
#ifdef STATX_DIOALIGN
	struct statx sx;

	if (!statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) && sx.stx_mask & STATX_DIOALIGN) {
		if (!sx.stx_dio_offset_align && f->dfd >= 0) {
			close(f->dfd);
			f->dfd = -1;
		}
		if (!sx.stx_dio_offset_align)
			return;
		f->off_align = sx.stx_dio_offset_align;
		f->mem_align = sx.stx_dio_mem_align ? sx.stx_dio_mem_align : 1;
		return;
	}
#endif
	if (S_ISBLK(st->st_mode)) {
		int ss;

		if (!ioctl(fd, BLKSSZGET, &ss) && ss > 0)
			f->off_align = f->mem_align = (uint32_t)ss;
	}
}

/*
 * Whether open file @fd (its flags @fl) can be a region of @access from
 * @offset: its mode allows the access (-EPERM), and it is a regular file
 * or a block device holding the range, or a writable regular file that
 * may grow to it (-EINVAL). *@len 0 becomes the rest of the file.
 */
static int file_check(int fd, int fl, unsigned access, uint64_t offset, uint64_t *len,
		      struct stat *st)
{
	uint64_t size;

	if (fl < 0 || fl & O_PATH)
		return -EPERM;
	if (((access & DP_ACCESS_READ) && (fl & O_ACCMODE) == O_WRONLY) ||
	    ((access & DP_ACCESS_WRITE) && (fl & O_ACCMODE) == O_RDONLY))
		return -EPERM;
	if (fstat(fd, st) < 0)
		return -EINVAL;
	if (S_ISREG(st->st_mode))
		size = (uint64_t)st->st_size;
	else if (!S_ISBLK(st->st_mode) || ioctl(fd, BLKGETSIZE64, &size) < 0)
		return -EINVAL;
	if (!*len) {
		if (offset >= size)
			return -EINVAL;
		*len = size - offset;
	}
	/* A writable regular file may grow; anything else must already hold
	 * the range. Offsets stay below 2^63 (off_t). */
	if (offset > (uint64_t)INT64_MAX || *len > (uint64_t)INT64_MAX - offset)
		return -EINVAL;
	if ((access == DP_ACCESS_READ || S_ISBLK(st->st_mode)) && offset + *len > size)
		return -EINVAL;
	/* O_APPEND would make every write land at the end, whatever its offset. */
	if ((access & DP_ACCESS_WRITE) && (fl & O_APPEND))
		return -EINVAL;
	return 0;
}

/*
 * The region's fds, from *@fd (flags @fl, taken over): a buffered,
 * blocking one of our own in *@fd, and f->dfd for direct I/O (opened with
 * @acc) unless @buffered or the file takes none (-1). 0, or -EINVAL with
 * *@fd left for the caller to close.
 */
static int file_fds(struct file_region *f, int *fd, int fl, int acc, bool buffered)
{
	f->dfd = -1;
	if (fl & (O_DIRECT | O_NONBLOCK)) {
		/* The client's description is shared with it: we never change
		 * its flags, we open our own buffered, blocking one. */
		int b = reopen(*fd, acc);

		if (b < 0)
			return -EINVAL;
		if (fl & O_DIRECT)
			f->dfd = *fd;
		else
			close(*fd);
		*fd = b;
	}
	if (buffered && f->dfd >= 0) {
		close(f->dfd);
		f->dfd = -1;
	} else if (f->dfd < 0 && !buffered) {
		f->dfd = reopen(*fd, acc | O_DIRECT);
		if (f->dfd < 0)
			f->dfd = -1;
	}
	return 0;
}

static void log_opened(const struct region *reg, const struct file_region *f, const char *path)
{
	char shown[DP_PATH_MAX];

	/* The path is the client's: no control characters into our log. */
	snprintf(shown, sizeof(shown), "%s", path ? path : "client fd");
	for (char *p = shown; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	log_debug("file region: %s, %llu bytes at %llu, %s, direct I/O %s (align %u/%u), "
		  "%s files",
		  shown, (unsigned long long)reg->len, (unsigned long long)reg->file_off,
		  f->access == DP_ACCESS_RW ? "rw" : "ro", f->dfd >= 0 ? "yes" : "no", f->off_align,
		  f->mem_align, f->slot >= 0 ? "registered" : "plain");
}

/*
 * Builds a file region from @fd (taken over: closed on failure too) or, when
 * @fd is -1, from @path opened beneath --file-root. @len 0 means "to the
 * end of the file"; @flags is the access mode, with DP_FILE_BUFFERED for
 * no O_DIRECT. Fills @reg's kind, fd, file_off, len and eng[ENGINE_file].
 * The access mode, or: -EINVAL bad access, range or file type (only regular
 * files and block devices), -EPERM the fd's mode does not allow the access
 * or the path leaves --file-root (or there is none), -ENOENT no such path,
 * -ENOTSUP no io_uring.
 */
static int file_region_open(struct region *reg, int fd, const char *path, uint64_t offset,
			    uint64_t len, unsigned flags)
{
	unsigned access = flags & ~DP_FILE_BUFFERED;
	int acc = access == DP_ACCESS_RW ? O_RDWR : O_RDONLY, fl, rc;
	struct file_region *f = NULL;
	struct stat st;

	if (access != DP_ACCESS_READ && access != DP_ACCESS_RW) {
		rc = -EINVAL;
		goto err;
	}
	if (!file_nrings) {
		rc = -ENOTSUP;
		goto err;
	}
	if (fd < 0 && (fd = open_beneath(path, acc)) < 0) {
		rc = fd;
		goto err;
	}
	fl = fcntl(fd, F_GETFL);
	rc = file_check(fd, fl, access, offset, &len, &st);
	if (rc)
		goto err;
	f = calloc(1, sizeof(*f));
	rc = f ? file_fds(f, &fd, fl, acc, flags & DP_FILE_BUFFERED) : -ENOMEM;
	if (rc)
		goto err;
	f->access = access;
	dio_probe(f, fd, &st);
	f->slot = slot_get(fd);
	f->dslot = slot_get(f->dfd);
	reg->kind = REGION_FILE;
	reg->fd = fd;
	reg->file_off = offset;
	reg->len = len;
	reg->eng[ENGINE_file] = f;
	log_opened(reg, f, path);
	return (int)access;
err:
	if (fd >= 0)
		close(fd);
	free(f);
	return rc;
}

/* DP_MSG_REGION_REGISTER_FILE: a file the client passed. */
static int file_region_by_fd(struct region *reg, struct client *c, const void *payload, int *fds,
			     unsigned nfds)
{
	const struct dp_msg_region_file *req = payload;

	(void)c;
	(void)nfds; /* one: ctlmsg.c saw it come */
	return file_region_open(reg, fds[0], NULL, req->offset, req->len, req->access);
}

/* DP_MSG_REGION_OPEN_PATH: a path the service opens beneath --file-root. */
static int file_region_by_path(struct region *reg, struct client *c, const void *payload,
			       int *no_fds, unsigned nfds)
{
	const struct dp_msg_region_path *req = payload;

	(void)c;
	(void)no_fds;
	(void)nfds;
	return file_region_open(reg, -1, req->path, req->file.offset, req->file.len,
				req->file.access);
}

const struct engine_region_msg file_region_msgs[] = {
	{DP_MSG_REGION_REGISTER_FILE, "file", file_region_by_fd},
	{DP_MSG_REGION_OPEN_PATH, "file", file_region_by_path},
	{0},
};

void file_region_close(struct region *reg)
{
	struct file_region *f = reg->eng[ENGINE_file];

	log_debug("file region closed: %llu direct I/Os (%llu bytes), %llu buffered (%llu bytes), "
		  "%llu through fixed buffers",
		  (unsigned long long)atomic_load(&f->direct_ios),
		  (unsigned long long)atomic_load(&f->direct_bytes),
		  (unsigned long long)atomic_load(&f->buffered_ios),
		  (unsigned long long)atomic_load(&f->buffered_bytes),
		  (unsigned long long)atomic_load(&f->fixed_ios));
	slot_put(f->slot);
	slot_put(f->dslot);
	if (f->dfd >= 0)
		close(f->dfd);
	close(reg->fd);
	free(f);
}
