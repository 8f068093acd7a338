/* SPDX-License-Identifier: MIT */
/*
 * _dataplane.h - what the files of the extension share (_dataplane.c says
 * what it is): the objects' structs and types, the errors it raises, the
 * conversions of arguments, and each object's calls the others make. Every
 * name here is the extension's alone: it is built with -fvisibility=hidden.
 */
#ifndef DP_PY_DATAPLANE_H
#define DP_PY_DATAPLANE_H

#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "clock.h"
#include "dataplane.h"
#include "dp_client_pvt.h"
#include "dp_ring.h"
#include "dp_version.h"

#define SLICE_MS 200 /* a sleeping call looks at signals this often */

/* ---- objects ---- */

struct client;

/* Everything a client made, on a list of it, so that closing the client
 * can check the regions' views and mark the rest closed. Borrowed links:
 * an object unlinks itself when it goes. */
struct link {
	struct link *prev, *next;
};

typedef struct client {
	PyObject_HEAD struct dp_client *c;
	unsigned busy; /* calls of it or its queues running without the GIL */
	struct link regions, queues, segments;
	PyObject *weaklist;
} Client;

typedef struct {
	PyObject_HEAD struct link link;
	Client *client; /* strong; NULL once closed */
	int id;
	int kind; /* REGION_* */
	void *addr;
	uint64_t size;
	Py_ssize_t exports; /* buffer views alive */
	/* Client.alloc memory: our own mapping (taken from libclient), unmapped
	 * only when this object goes, so that a consumer holding a reference
	 * instead of a buffer view (torch.frombuffer) never sees it vanish. */
	void *map;
	size_t map_len;
	PyObject *owner; /* what keeps the memory alive (a CUDA tensor), or NULL */
	PyObject *weaklist;
} Region;

enum { REGION_HOST = 0, REGION_CUDA, REGION_FD, REGION_FILE, REGION_MEM };

typedef struct {
	PyObject_HEAD struct link link;
	Client *client;
	int handle;
	PyObject *name, *peer;
	PyObject *weaklist;
} Segment;

typedef struct {
	PyObject_HEAD struct link link;
	Client *client;
	struct dp_queue *q;
	struct dp_ring_pair *pair;
	int cq_fd;
	uint32_t depth;
	bool busy, armed;
	struct dp_cqe *cqes; /* depth entries */
	PyObject *weaklist;
} Queue;

typedef struct {
	PyObject_HEAD struct dp_desc *d;
	Py_ssize_t n;
} Batch;

extern PyTypeObject *client_type, *region_type, *segment_type, *queue_type, *batch_type;
#define CONTAINER(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

static inline void link_init(struct link *head)
{
	head->prev = head->next = head;
}

static inline void link_add(struct link *head, struct link *l)
{
	l->next = head->next;
	l->prev = head;
	head->next->prev = l;
	head->next = l;
}

static inline void link_del(struct link *l)
{
	if (l->next) {
		l->prev->next = l->next;
		l->next->prev = l->prev;
	}
	l->prev = l->next = NULL;
}

static inline void free_self(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	f(self);
	Py_DECREF(tp);
}

/* ---- _dataplane.c: errors ---- */

extern PyTypeObject *completion_type;
extern PyObject *transfer_error;
extern PyObject *busy_error;
extern PyObject *in_use_error;
PyObject *error_class(int err);
PyObject *raise_text(PyObject *cls, int err, const char *text);
PyObject *raise_dp(int rc);
PyObject *raise_closed(const char *what);
PyObject *enter_self(PyObject *self, PyObject *unused);

/* ---- args.c ---- */

int get_u64(PyObject *o, uint64_t *out, const char *what);
int u64_conv(PyObject *o, void *out);
int get_u32(PyObject *o, uint32_t *out, const char *what);
int client_check(Client *c);
int region_id(PyObject *o, uint32_t *out);
int segment_handle(PyObject *o, uint32_t *out);
int get_opcode(PyObject *o, uint8_t *out);
int get_access(PyObject *o, unsigned *out);
int timeout_ms(PyObject *o, int64_t *ms);

/* ---- the objects' files ---- */

Region *region_make(Client *c, int id, int kind, void *addr, uint64_t size, PyObject *owner);
void region_detach(Region *r);
extern PyType_Spec region_spec;
PyObject *segment_wrap(Client *c, int h, PyObject *namo, PyObject *peero);
void segment_detach(Segment *s);
extern PyType_Spec segment_spec;
Batch *batch_from_list(PyObject *ops, uint8_t op);
extern PyType_Spec batch_spec;
extern PyStructSequence_Desc completion_desc;
int queue_detach(Queue *q, bool destroy);
extern PyType_Spec queue_spec;
extern PyType_Spec client_spec;

/* notify.c: methods of Client */
PyObject *client_notify_open(PyObject *self, PyObject *args, PyObject *kw);
PyObject *client_notify_take(PyObject *self, PyObject *args);
PyObject *client_notify_recv(PyObject *self, PyObject *args);
PyObject *client_notify_send(PyObject *self, PyObject *args);
PyObject *client_notify_fileno(PyObject *self, PyObject *unused);

/* Control calls release the GIL: a call may wait up to $DP_CTL_TIMEOUT_MS. */
#define CONTROL(c, expr)                                                                           \
	({                                                                                         \
		PyThreadState *ts__;                                                               \
		int rc__;                                                                          \
		(c)->busy++;                                                                       \
		ts__ = PyEval_SaveThread();                                                        \
		rc__ = (expr);                                                                     \
		PyEval_RestoreThread(ts__);                                                        \
		(c)->busy--;                                                                       \
		rc__;                                                                              \
	})

#endif /* DP_PY_DATAPLANE_H */
