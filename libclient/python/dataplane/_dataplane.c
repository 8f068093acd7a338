/* SPDX-License-Identifier: MIT */
/*
 * _dataplane.c - the C extension under the `dataplane` Python package: the
 * calls of libclient (dataplane.h) as Client, Queue, Region, Segment and
 * Batch objects. Built against the stable ABI (Py_LIMITED_API 3.11: one
 * build loads on 3.11 and later) and linked with libclient statically, so
 * the module needs nothing else at run time (but the CUDA runtime on a CUDA
 * build).
 *
 * What a ctypes binding gets wrong, and this module guards:
 * dp_prep_write/read are filled here in C; every object checks that it and
 * its client are open before any call (a closed one raises ClosedError, no
 * NULL reaches libclient); offsets and lengths are 64-bit, converted with
 * overflow checks; the memory of a region is handed out through the buffer
 * protocol only, and a region (or its client) with views alive refuses to
 * close (RegionInUseError), so no view can dangle. Calls that may sleep
 * (wait, run, and the control calls) release the GIL; an object in such a
 * call cannot be closed by another thread meanwhile (BusyError).
 *
 * The asyncio support needs the queue's CQ doorbell and the ring's
 * NEED_WAKEUP protocol, which dataplane.h does not expose: this module uses
 * libclient's internal dp__queue_ring()/dp__queue_cq_doorbell()
 * (dp_client_pvt.h), which it can because it links the library statically.
 */
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

/* ---- errors ---- */

static PyObject *errno_map;	 /* errno -> class (set by dataplane/__init__.py) */
static PyObject *base_error;	 /* DataplaneError */
static PyObject *closed_error;	 /* ClosedError */
static PyObject *in_use_error;	 /* RegionInUseError */
static PyObject *busy_error;	 /* BusyError */
static PyObject *transfer_error; /* TransferError */
static PyTypeObject *completion_type;

static PyObject *error_class(int err)
{
	PyObject *key, *cls = NULL;

	if (errno_map && (key = PyLong_FromLong(err))) {
		cls = PyDict_GetItemWithError(errno_map, key); /* borrowed */
		Py_DECREF(key);
	}
	PyErr_Clear();
	return cls ? cls : base_error ? base_error : PyExc_OSError;
}

/* Raises the error class of @err (< 0) with @text; returns NULL. */
static PyObject *raise_text(PyObject *cls, int err, const char *text)
{
	PyObject *exc;

	if (!cls)
		cls = error_class(-err);
	exc = PyObject_CallFunction(cls, "is", -err, text);
	if (exc) {
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* Raises for the libclient call that just failed with @rc: its errno and
 * dp_last_error()'s text (read at once: it is this thread's). */
static PyObject *raise_dp(int rc)
{
	const char *t = dp_last_error();

	return raise_text(NULL, rc, t && *t ? t : dp_strerror(rc));
}

static PyObject *raise_closed(const char *what)
{
	char buf[128];

	snprintf(buf, sizeof(buf), "%s is closed", what);
	return raise_text(closed_error, -EBADF, buf);
}

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
static const char *const kind_names[] = {"host", "cuda", "fd", "file", "mem"};

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

static PyTypeObject *client_type, *region_type, *segment_type, *queue_type, *batch_type;

#define CONTAINER(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

static void link_init(struct link *head)
{
	head->prev = head->next = head;
}

static void link_add(struct link *head, struct link *l)
{
	l->next = head->next;
	l->prev = head;
	head->next->prev = l;
	head->next = l;
}

static void link_del(struct link *l)
{
	if (l->next) {
		l->prev->next = l->next;
		l->next->prev = l->prev;
	}
	l->prev = l->next = NULL;
}

static void free_self(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	f(self);
	Py_DECREF(tp);
}

/* ---- argument helpers ---- */

static int get_u64(PyObject *o, uint64_t *out, const char *what)
{
	unsigned long long v;

	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int", what);
		return -1;
	}
	v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Format(PyExc_OverflowError, "%s must be in 0 .. 2**64-1", what);
		return -1;
	}
	*out = v;
	return 0;
}

/* An O& converter: a non-negative 64-bit int, checked (PyArg's "K" would
 * truncate silently: the 4 GiB bug of a ctypes binding). */
static int u64_conv(PyObject *o, void *out)
{
	uint64_t v;

	if (get_u64(o, &v, "offsets and lengths"))
		return 0;
	*(unsigned long long *)out = v;
	return 1;
}

static int get_u32(PyObject *o, uint32_t *out, const char *what)
{
	uint64_t v;

	if (get_u64(o, &v, what))
		return -1;
	if (v > UINT32_MAX) {
		PyErr_Format(PyExc_OverflowError, "%s must be in 0 .. 2**32-1", what);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int client_check(Client *c)
{
	if (!c || !c->c) {
		raise_closed("the client");
		return -1;
	}
	return 0;
}

/* A region: a Region of an open client, or its id as an int. */
static int region_id(PyObject *o, uint32_t *out)
{
	if (PyObject_TypeCheck(o, region_type)) {
		Region *r = (Region *)o;

		if (!r->client) {
			raise_closed("the region");
			return -1;
		}
		*out = (uint32_t)r->id;
		return 0;
	}
	return get_u32(o, out, "region");
}

static int segment_handle(PyObject *o, uint32_t *out)
{
	if (PyObject_TypeCheck(o, segment_type)) {
		Segment *s = (Segment *)o;

		if (!s->client) {
			raise_closed("the segment");
			return -1;
		}
		*out = (uint32_t)s->handle;
		return 0;
	}
	return get_u32(o, out, "segment");
}

/* An opcode: OP_WRITE / OP_READ / OP_NOP, or "write" / "read" / "nop". */
static int get_opcode(PyObject *o, uint8_t *out)
{
	if (PyUnicode_Check(o)) {
		if (!PyUnicode_CompareWithASCIIString(o, "write"))
			*out = DP_OP_WRITE;
		else if (!PyUnicode_CompareWithASCIIString(o, "read"))
			*out = DP_OP_READ;
		else if (!PyUnicode_CompareWithASCIIString(o, "nop"))
			*out = DP_OP_NOP;
		else
			goto bad;
		return 0;
	}
	if (PyLong_Check(o)) {
		long v = PyLong_AsLong(o);

		if (v == DP_OP_WRITE || v == DP_OP_READ || v == DP_OP_NOP) {
			*out = (uint8_t)v;
			return 0;
		}
		PyErr_Clear();
	}
bad:
	PyErr_SetString(PyExc_ValueError, "op must be OP_WRITE, OP_READ, OP_NOP or "
					  "'write', 'read', 'nop'");
	return -1;
}

/* An access mode: ACCESS_* ints or "r", "w", "rw". */
static int get_access(PyObject *o, unsigned *out)
{
	if (!o) {
		*out = DP_ACCESS_RW;
		return 0;
	}
	if (PyUnicode_Check(o)) {
		if (!PyUnicode_CompareWithASCIIString(o, "r"))
			*out = DP_ACCESS_READ;
		else if (!PyUnicode_CompareWithASCIIString(o, "w"))
			*out = DP_ACCESS_WRITE;
		else if (!PyUnicode_CompareWithASCIIString(o, "rw"))
			*out = DP_ACCESS_RW;
		else {
			PyErr_SetString(PyExc_ValueError,
					"access must be 'r', 'w', 'rw' or ACCESS_*");
			return -1;
		}
		return 0;
	}
	/* Ints pass through: libclient and the service judge them (EINVAL). */
	return get_u32(o, (uint32_t *)out, "access");
}

/* ---- Completion (a struct sequence) ---- */

static PyStructSequence_Field completion_fields[] = {
	{"user_data", "the descriptor's user_data"},
	{"status", "0, or the transfer's -errno (docs/api.md, \"Errors of a descriptor\")"},
	{"flags", "which engine moved it: F_LOCAL, F_FABRIC, F_GPU, F_FILE, F_SAME_HOST"},
	{"bytes", "bytes moved (0 for a failed transfer)"},
	{NULL, NULL}};

static PyStructSequence_Desc completion_desc = {
	"dataplane.Completion",
	"One completion: (user_data, status, flags, bytes). status is 0 or a negative errno.",
	completion_fields, 4};

static PyObject *completion_new(const struct dp_cqe *e)
{
	PyObject *o = PyStructSequence_New(completion_type), *v;

	if (!o)
		return NULL;
	if (!(v = PyLong_FromUnsignedLongLong(e->user_data)))
		goto err;
	PyStructSequence_SetItem(o, 0, v);
	if (!(v = PyLong_FromLong(e->status)))
		goto err;
	PyStructSequence_SetItem(o, 1, v);
	if (!(v = PyLong_FromUnsignedLong(e->flags)))
		goto err;
	PyStructSequence_SetItem(o, 2, v);
	if (!(v = PyLong_FromUnsignedLongLong(e->bytes)))
		goto err;
	PyStructSequence_SetItem(o, 3, v);
	return o;
err:
	Py_DECREF(o);
	return NULL;
}

static PyObject *completion_list(const struct dp_cqe *e, int n)
{
	PyObject *l = PyList_New(n);

	if (!l)
		return NULL;
	for (int i = 0; i < n; i++) {
		PyObject *o = completion_new(&e[i]);

		if (!o) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SetItem(l, i, o);
	}
	return l;
}

/* TransferError for @n failed completions (n > 0) out of @total. */
static PyObject *raise_transfer(const struct dp_cqe *failed, Py_ssize_t n, Py_ssize_t total)
{
	char text[256];
	PyObject *l, *exc;

	snprintf(text, sizeof(text), "%zd of %zd transfers failed; the first (user_data %llu): %s",
		 n, total, (unsigned long long)failed[0].user_data, dp_strerror(failed[0].status));
	l = completion_list(failed, (int)n);
	if (!l)
		return NULL;
	exc = PyObject_CallFunction(transfer_error, "isO", -failed[0].status, text, l);
	Py_DECREF(l);
	if (exc) {
		PyErr_SetObject(transfer_error, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* ---- Region ---- */

static Region *region_make(Client *c, int id, int kind, void *addr, uint64_t size, PyObject *owner)
{
	Region *r = PyObject_New(Region, region_type);

	if (!r)
		return NULL;
	r->client = c;
	Py_INCREF((PyObject *)c);
	r->id = id;
	r->kind = kind;
	r->addr = addr;
	r->size = size;
	r->exports = 0;
	r->map = NULL;
	r->map_len = 0;
	r->owner = owner;
	Py_XINCREF(owner);
	r->weaklist = NULL;
	link_add(&c->regions, &r->link);
	return r;
}

/* Forgets the region (its client closed, or it was freed). */
static void region_detach(Region *r)
{
	link_del(&r->link);
	Py_CLEAR(r->client);
	Py_CLEAR(r->owner);
	r->addr = NULL;
}

static void region_dealloc(PyObject *self)
{
	Region *r = (Region *)self;

	if (r->weaklist)
		PyObject_ClearWeakRefs(self);
	/* No view can be alive here: each holds a reference. */
	if (r->client && r->client->c)
		dp_free(r->client->c, r->id);
	region_detach(r);
	if (r->map)
		munmap(r->map, r->map_len);
	free_self(self);
}

static int region_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
	Region *r = (Region *)self;

	if (!r->client) {
		PyErr_SetString(PyExc_BufferError, "the region is closed");
		return -1;
	}
	if (r->kind != REGION_HOST) {
		PyErr_Format(PyExc_BufferError, "a %s region has no host memory to view",
			     kind_names[r->kind]);
		return -1;
	}
	if (r->size > (uint64_t)PY_SSIZE_T_MAX) {
		PyErr_SetString(PyExc_BufferError, "region too large for a buffer");
		return -1;
	}
	if (PyBuffer_FillInfo(view, self, r->addr, (Py_ssize_t)r->size, 0, flags))
		return -1;
	r->exports++;
	return 0;
}

static void region_releasebuffer(PyObject *self, Py_buffer *view)
{
	(void)view;
	((Region *)self)->exports--;
}

static PyObject *region_close(PyObject *self, PyObject *unused)
{
	Region *r = (Region *)self;
	Client *c = r->client;
	int rc;

	(void)unused;
	if (!c)
		Py_RETURN_NONE;
	if (r->exports) {
		char t[160];

		snprintf(
			t, sizeof(t),
			"region %d has %zd buffer view(s) alive (numpy/torch arrays, memoryviews): "
			"release them before closing it",
			r->id, r->exports);
		return raise_text(in_use_error, -EBUSY, t);
	}
	rc = c->c ? dp_free(c->c, r->id) : 0;
	region_detach(r);
	if (rc < 0 && rc != -ECONNRESET)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

static PyObject *region_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *region_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return region_close(self, NULL);
}

static PyObject *region_get_id(PyObject *self, void *p)
{
	(void)p;
	return PyLong_FromLong(((Region *)self)->id);
}

static PyObject *region_get_address(PyObject *self, void *p)
{
	Region *r = (Region *)self;

	(void)p;
	if (!r->client)
		return raise_closed("the region");
	return PyLong_FromVoidPtr(r->addr);
}

static PyObject *region_get_size(PyObject *self, void *p)
{
	(void)p;
	return PyLong_FromUnsignedLongLong(((Region *)self)->size);
}

static PyObject *region_get_kind(PyObject *self, void *p)
{
	(void)p;
	return PyUnicode_FromString(kind_names[((Region *)self)->kind]);
}

static PyObject *region_get_closed(PyObject *self, void *p)
{
	(void)p;
	return PyBool_FromLong(!((Region *)self)->client);
}

static PyObject *region_get_views(PyObject *self, void *p)
{
	(void)p;
	return PyLong_FromSsize_t(((Region *)self)->exports);
}

static PyObject *region_get_client(PyObject *self, void *p)
{
	Region *r = (Region *)self;

	(void)p;
	if (!r->client)
		Py_RETURN_NONE;
	Py_INCREF((PyObject *)r->client);
	return (PyObject *)r->client;
}

static Py_ssize_t region_len(PyObject *self)
{
	Region *r = (Region *)self;

	if (r->size > (uint64_t)PY_SSIZE_T_MAX) {
		PyErr_SetString(PyExc_OverflowError, "region larger than sys.maxsize");
		return -1;
	}
	return (Py_ssize_t)r->size;
}

static PyObject *region_repr(PyObject *self)
{
	Region *r = (Region *)self;

	if (!r->client)
		return PyUnicode_FromFormat("<dataplane.Region %d (%s), closed>", r->id,
					    kind_names[r->kind]);
	return PyUnicode_FromFormat("<dataplane.Region %d (%s), %llu bytes at %p>", r->id,
				    kind_names[r->kind], (unsigned long long)r->size, r->addr);
}

static PyMethodDef region_methods[] = {
	{"close", region_close, METH_NOARGS,
	 "close($self)\n--\n\nDeregisters the region (dp_free); memory from Client.alloc is "
	 "unmapped. "
	 "Raises RegionInUseError while buffer views of it are alive. Closing twice is a no-op."},
	{"free", region_close, METH_NOARGS, "free($self)\n--\n\nThe same as close()."},
	{"__enter__", region_enter, METH_NOARGS, NULL},
	{"__exit__", region_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL}};

static PyGetSetDef region_getset[] = {
	{"id", region_get_id, NULL, "the region id, as descriptors name it", NULL},
	{"address", region_get_address, NULL,
	 "the start address (host memory, or the CUDA device pointer)", NULL},
	{"size", region_get_size, NULL, "length in bytes", NULL},
	{"kind", region_get_kind, NULL, "'host', 'cuda', 'fd' or 'file'", NULL},
	{"closed", region_get_closed, NULL, "whether close() ran (or the client closed)", NULL},
	{"views", region_get_views, NULL, "buffer views of it alive now", NULL},
	{"client", region_get_client, NULL, "the Client (None once closed)", NULL},
	{NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef region_members[] = {
	{"__weaklistoffset__", T_PYSSIZET, offsetof(Region, weaklist), READONLY, NULL},
	{NULL, 0, 0, 0, NULL}};

static PyType_Slot region_slots[] = {
	{Py_tp_doc, "A registered region: memory the service may read and write.\n\n"
		    "Made by Client.alloc (host memory shared with the service; exposes the "
		    "buffer protocol, so memoryview(r), numpy.frombuffer(r, ...) and "
		    "torch.frombuffer(r, ...) are zero-copy views), Client.register_cuda, "
		    "register_fd, register_file and open_file. A region with views alive "
		    "refuses to close (RegionInUseError): no view can outlive its memory."},
	{Py_tp_dealloc, region_dealloc},
	{Py_tp_methods, region_methods},
	{Py_tp_getset, region_getset},
	{Py_tp_members, region_members},
	{Py_tp_repr, region_repr},
	{Py_bf_getbuffer, region_getbuffer},
	{Py_bf_releasebuffer, region_releasebuffer},
	{Py_sq_length, region_len},
	{0, NULL}};

static PyType_Spec region_spec = {"dataplane.Region", sizeof(Region), 0, Py_TPFLAGS_DEFAULT,
				  region_slots};

/* ---- Segment ---- */

static void segment_detach(Segment *s)
{
	link_del(&s->link);
	Py_CLEAR(s->client);
}

static void segment_dealloc(PyObject *self)
{
	Segment *s = (Segment *)self;

	if (s->weaklist)
		PyObject_ClearWeakRefs(self);
	if (s->client && s->client->c)
		dp_segment_close(s->client->c, s->handle);
	segment_detach(s);
	Py_CLEAR(s->name);
	Py_CLEAR(s->peer);
	free_self(self);
}

static PyObject *segment_close(PyObject *self, PyObject *unused)
{
	Segment *s = (Segment *)self;
	int rc = 0;

	(void)unused;
	if (!s->client)
		Py_RETURN_NONE;
	if (s->client->c)
		rc = dp_segment_close(s->client->c, s->handle);
	segment_detach(s);
	if (rc < 0 && rc != -ECONNRESET)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

static PyObject *segment_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return segment_close(self, NULL);
}

static PyObject *segment_get_handle(PyObject *self, void *p)
{
	(void)p;
	return PyLong_FromLong(((Segment *)self)->handle);
}

static PyObject *segment_get_closed(PyObject *self, void *p)
{
	(void)p;
	return PyBool_FromLong(!((Segment *)self)->client);
}

static PyObject *segment_repr(PyObject *self)
{
	Segment *s = (Segment *)self;

	return PyUnicode_FromFormat("<dataplane.Segment %R on %R, handle %d%s>", s->name, s->peer,
				    s->handle, s->client ? "" : ", closed");
}

static PyMethodDef segment_methods[] = {
	{"close", segment_close, METH_NOARGS,
	 "close($self)\n--\n\nCloses the handle (dp_segment_close); twice is a no-op."},
	{"__enter__", region_enter, METH_NOARGS, NULL},
	{"__exit__", segment_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL}};

static PyGetSetDef segment_getset[] = {
	{"handle", segment_get_handle, NULL, "the handle descriptors name it by", NULL},
	{"closed", segment_get_closed, NULL, "whether close() ran (or the client closed)", NULL},
	{NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef segment_members[] = {
	{"name", T_OBJECT, offsetof(Segment, name), READONLY, "the segment's name"},
	{"peer", T_OBJECT, offsetof(Segment, peer), READONLY,
	 "the peer service (\"host:port\"), or None for this service"},
	{"__weaklistoffset__", T_PYSSIZET, offsetof(Segment, weaklist), READONLY, NULL},
	{NULL, 0, 0, 0, NULL}};

static PyType_Slot segment_slots[] = {
	{Py_tp_doc, "An open segment handle (Client.open): the target of descriptors."},
	{Py_tp_dealloc, segment_dealloc},
	{Py_tp_methods, segment_methods},
	{Py_tp_getset, segment_getset},
	{Py_tp_members, segment_members},
	{Py_tp_repr, segment_repr},
	{0, NULL}};

static PyType_Spec segment_spec = {"dataplane.Segment", sizeof(Segment), 0, Py_TPFLAGS_DEFAULT,
				   segment_slots};

/* ---- Batch ---- */

/* One column of Batch(): a scalar, a 1-D buffer of 4- or 8-byte integers
 * (numpy int32/uint32/int64/uint64 arrays), or a sequence of ints. */
struct column {
	/* seq: the column as a list */
	const char *name;
	PyObject *obj;
	uint64_t scalar;
	bool is_scalar, have_buf, is_signed;
	Py_buffer buf;
	Py_ssize_t len, itemsize;
	PyObject *seq;
};

static int column_open(struct column *col, PyObject *o, const char *name)
{
	memset(col, 0, sizeof(*col));
	col->name = name;
	col->obj = o;
	col->len = -1;
	if (PyLong_Check(o)) {
		col->is_scalar = true;
		if (!strcmp(name, "op")) {
			uint8_t op;

			if (get_opcode(o, &op))
				return -1;
			col->scalar = op;
			return 0;
		}
		return get_u64(o, &col->scalar, name);
	}
	if (PyUnicode_Check(o) || PyObject_TypeCheck(o, region_type) ||
	    PyObject_TypeCheck(o, segment_type)) {
		uint8_t op;
		uint32_t v;

		col->is_scalar = true;
		if (!strcmp(name, "op")) {
			if (get_opcode(o, &op))
				return -1;
			col->scalar = op;
			return 0;
		}
		if (!strcmp(name, "region") ? region_id(o, &v)
		    : !strcmp(name, "segment")
			    ? segment_handle(o, &v)
			    : (PyErr_Format(PyExc_TypeError, "%s: bad type", name), -1))
			return -1;
		col->scalar = v;
		return 0;
	}
	if (PyObject_CheckBuffer(o)) {
		const char *f;

		if (PyObject_GetBuffer(o, &col->buf, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS))
			return -1;
		col->have_buf = true;
		f = col->buf.format ? col->buf.format : "B";
		if (*f == '@' || *f == '=' || *f == '<')
			f++;
		if (col->buf.ndim > 1 || strlen(f) != 1 || !strchr("bBhHiIlLqQ", *f) ||
		    (col->buf.itemsize != 4 && col->buf.itemsize != 8)) {
			PyErr_Format(PyExc_TypeError,
				     "%s: an array of 32- or 64-bit integers is needed (got format "
				     "'%s', item size %zd)",
				     name, col->buf.format ? col->buf.format : "B",
				     col->buf.itemsize);
			return -1;
		}
		col->is_signed = !!strchr("bhilq", *f);
		col->itemsize = col->buf.itemsize;
		col->len = col->buf.len / col->itemsize;
		return 0;
	}
	col->seq = PySequence_List(o);
	if (!col->seq) {
		PyErr_Format(PyExc_TypeError, "%s must be an int, an integer array or a sequence",
			     name);
		return -1;
	}
	col->len = PyList_Size(col->seq);
	return 0;
}

static void column_close(struct column *col)
{
	if (col->have_buf)
		PyBuffer_Release(&col->buf);
	Py_CLEAR(col->seq);
}

static int column_get(struct column *col, Py_ssize_t i, uint64_t *out)
{
	if (col->is_scalar) {
		*out = col->scalar;
		return 0;
	}
	if (col->have_buf) {
		const char *p = (const char *)col->buf.buf + i * col->itemsize;
		int64_t s;

		if (col->itemsize == 8) {
			memcpy(out, p, 8);
			s = (int64_t)*out;
		} else {
			int32_t v32;
			uint32_t u32;

			memcpy(&u32, p, 4);
			v32 = (int32_t)u32;
			s = v32;
			*out = col->is_signed ? (uint64_t)s : u32;
		}
		if (col->is_signed && s < 0) {
			PyErr_Format(PyExc_OverflowError, "%s[%zd] is negative", col->name, i);
			return -1;
		}
		return 0;
	}
	{
		PyObject *o = PyList_GetItem(col->seq, i);
		uint32_t v;
		uint8_t op;

		if (!strcmp(col->name, "op") && !PyLong_Check(o)) {
			if (get_opcode(o, &op))
				return -1;
			*out = op;
			return 0;
		}
		if (PyObject_TypeCheck(o, region_type) || PyObject_TypeCheck(o, segment_type)) {
			if (PyObject_TypeCheck(o, region_type) ? region_id(o, &v)
							       : segment_handle(o, &v))
				return -1;
			*out = v;
			return 0;
		}
		return get_u64(o, out, col->name);
	}
}

static Batch *batch_alloc(Py_ssize_t n)
{
	Batch *b = PyObject_New(Batch, batch_type);

	if (!b)
		return NULL;
	b->n = n;
	b->d = calloc(n ? (size_t)n : 1, sizeof(struct dp_desc));
	if (!b->d) {
		Py_DECREF(b);
		PyErr_NoMemory();
		return NULL;
	}
	return b;
}

/* A batch from a sequence of (region, local_off, segment, target_off,
 * length[, user_data]) tuples; user_data defaults to the index. */
static Batch *batch_from_list(PyObject *ops, uint8_t op)
{
	PyObject *seq = PyList_Check(ops) ? Py_NewRef(ops) : PySequence_List(ops);
	Py_ssize_t n;
	Batch *b;

	if (!seq)
		return NULL;
	n = PyList_Size(seq);
	b = batch_alloc(n);
	if (!b)
		goto out;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t = PyList_GetItem(seq, i);
		struct dp_desc *d = &b->d[i];
		uint32_t region, segment;
		uint64_t v[3], ud = (uint64_t)i;
		Py_ssize_t k;

		if (!PyTuple_Check(t) || (k = PyTuple_Size(t)) < 5 || k > 6) {
			PyErr_Format(PyExc_TypeError,
				     "ops[%zd]: want a tuple (region, local_off, segment, "
				     "target_off, length[, user_data])",
				     i);
			goto err;
		}
		if (region_id(PyTuple_GetItem(t, 0), &region) ||
		    get_u64(PyTuple_GetItem(t, 1), &v[0], "local_off") ||
		    segment_handle(PyTuple_GetItem(t, 2), &segment) ||
		    get_u64(PyTuple_GetItem(t, 3), &v[1], "target_off") ||
		    get_u64(PyTuple_GetItem(t, 4), &v[2], "length") ||
		    (k == 6 && get_u64(PyTuple_GetItem(t, 5), &ud, "user_data")))
			goto err;
		dp_prep_write(d, (int)region, v[0], (int)segment, v[1], v[2], ud);
		d->opcode = op;
	}
	goto out;
err:
	Py_CLEAR(b);
out:
	Py_DECREF(seq);
	return b;
}

static Batch *batch_from_columns(PyObject *cols[7])
{
	static const char *const names[7] = {"op",	   "region", "local_off", "segment",
					     "target_off", "length", "user_data"};
	struct column col[7];
	Py_ssize_t n = -1;
	Batch *b = NULL;

	memset(col, 0, sizeof(col));
	for (int k = 0; k < 7; k++) {
		if (!cols[k]) {
			memset(&col[k], 0, sizeof(col[k]));
			col[k].name = names[k];
			col[k].is_scalar = true;
			col[k].len = -1;
			if (k == 0)
				col[k].scalar = DP_OP_WRITE;
			continue;
		}
		if (column_open(&col[k], cols[k], names[k]))
			goto out;
		if (col[k].len >= 0) {
			if (n >= 0 && col[k].len != n) {
				PyErr_Format(PyExc_ValueError,
					     "%s has %zd entries, earlier columns %zd", names[k],
					     col[k].len, n);
				goto out;
			}
			n = col[k].len;
		}
	}
	if (n < 0)
		n = 1;
	b = batch_alloc(n);
	if (!b)
		goto out;
	for (Py_ssize_t i = 0; i < n; i++) {
		uint64_t v[7];

		for (int k = 0; k < 7; k++)
			if (column_get(&col[k], i, &v[k]))
				goto err;
		if (!cols[6])
			v[6] = (uint64_t)i;
		if (v[1] > UINT32_MAX || v[3] > UINT32_MAX) {
			PyErr_Format(PyExc_OverflowError,
				     "entry %zd: region or segment above 2**32-1", i);
			goto err;
		}
		if (v[0] != DP_OP_WRITE && v[0] != DP_OP_READ && v[0] != DP_OP_NOP) {
			PyErr_Format(PyExc_ValueError, "entry %zd: bad opcode %llu", i,
				     (unsigned long long)v[0]);
			goto err;
		}
		dp_prep_write(&b->d[i], (int)v[1], v[2], (int)v[3], v[4], v[5], v[6]);
		b->d[i].opcode = (uint8_t)v[0];
	}
	goto out;
err:
	Py_CLEAR(b);
out:
	for (int k = 0; k < 7; k++)
		column_close(&col[k]);
	return b;
}

static PyObject *batch_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"ops",	       "op",	 "region",    "local_off", "segment",
				 "target_off", "length", "user_data", NULL};
	PyObject *ops = NULL, *cols[7] = {NULL};

	(void)tp;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOOOOOO:Batch", kwlist, &ops, &cols[0],
					 &cols[1], &cols[2], &cols[3], &cols[4], &cols[5],
					 &cols[6]))
		return NULL;
	if (ops && ops != Py_None) {
		uint8_t op = DP_OP_WRITE;

		for (int k = 1; k < 7; k++)
			if (cols[k]) {
				PyErr_SetString(
					PyExc_TypeError,
					"Batch: give ops (a list of tuples) or the columns, "
					"not both");
				return NULL;
			}
		if (cols[0] && get_opcode(cols[0], &op))
			return NULL;
		return (PyObject *)batch_from_list(ops, op);
	}
	for (int k = 1; k < 6; k++)
		if (!cols[k]) {
			PyErr_SetString(PyExc_TypeError, "Batch: region, local_off, segment, "
							 "target_off and length are needed");
			return NULL;
		}
	return (PyObject *)batch_from_columns(cols);
}

static void batch_dealloc(PyObject *self)
{
	free(((Batch *)self)->d);
	free_self(self);
}

static Py_ssize_t batch_len(PyObject *self)
{
	return ((Batch *)self)->n;
}

static PyObject *batch_item(PyObject *self, Py_ssize_t i)
{
	Batch *b = (Batch *)self;
	const struct dp_desc *d;

	if (i < 0 || i >= b->n) {
		PyErr_SetString(PyExc_IndexError, "batch index out of range");
		return NULL;
	}
	d = &b->d[i];
	return Py_BuildValue("(iIKIKKK)", d->opcode, d->region, (unsigned long long)d->local_off,
			     d->segment, (unsigned long long)d->target_off,
			     (unsigned long long)d->len, (unsigned long long)d->user_data);
}

static int batch_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
	Batch *b = (Batch *)self;

	return PyBuffer_FillInfo(view, self, b->d, b->n * (Py_ssize_t)sizeof(struct dp_desc), 1,
				 flags);
}

static PyType_Slot batch_slots[] = {
	{Py_tp_doc,
	 "Batch(ops=None, *, op='write', region, local_off, segment, target_off, length, "
	 "user_data=None)\n--\n\n"
	 "Descriptors prepared once, in C, for Queue.submit and Queue.run.\n\n"
	 "Either ops, a list of (region, local_off, segment, target_off, length[, user_data]) "
	 "tuples (op applies to all), or columns by keyword: each a scalar, a 1-D "
	 "array of 32- or 64-bit integers (numpy), or a sequence; scalars are broadcast. "
	 "op may be a column too. user_data defaults to the descriptor's index. "
	 "len(b) descriptors; b[i] is (op, region, local_off, segment, target_off, "
	 "length, user_data); the buffer protocol gives the raw 64-byte descriptors."},
	{Py_tp_new, batch_new},
	{Py_tp_dealloc, batch_dealloc},
	{Py_sq_length, batch_len},
	{Py_sq_item, batch_item},
	{Py_bf_getbuffer, batch_getbuffer},
	{0, NULL}};

static PyType_Spec batch_spec = {"dataplane.Batch", sizeof(Batch), 0, Py_TPFLAGS_DEFAULT,
				 batch_slots};

/* ---- Queue ---- */

static int queue_check(Queue *q)
{
	if (!q->q || !q->client) {
		raise_closed("the queue");
		return -1;
	}
	if (q->busy) {
		raise_text(busy_error, -EBUSY,
			   "the queue is in use by another thread (a queue is used by one thread "
			   "at a time)");
		return -1;
	}
	return 0;
}

static void queue_disarm(Queue *q)
{
	if (q->armed) {
		dp_ring_finish_sleep(&q->pair->cq);
		dp_doorbell_drain(q->cq_fd);
		q->armed = false;
	}
}

/* Frees the queue's C side (its client closes it, or it is closed). */
static int queue_detach(Queue *q, bool destroy)
{
	int rc = 0;

	if (q->q && destroy)
		rc = dp_queue_destroy(q->q);
	q->q = NULL;
	q->pair = NULL;
	link_del(&q->link);
	Py_CLEAR(q->client);
	free(q->cqes);
	q->cqes = NULL;
	return rc;
}

static void queue_dealloc(PyObject *self)
{
	Queue *q = (Queue *)self;

	if (q->weaklist)
		PyObject_ClearWeakRefs(self);
	queue_detach(q, q->client && q->client->c);
	free_self(self);
}

static PyObject *queue_close(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;
	int rc;

	(void)unused;
	if (!q->q)
		Py_RETURN_NONE;
	if (q->busy)
		return raise_text(busy_error, -EBUSY, "the queue is in a call of another thread");
	rc = queue_detach(q, q->client && q->client->c);
	if (rc < 0 && rc != -ECONNRESET)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

static PyObject *queue_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return queue_close(self, NULL);
}

/* One descriptor from (region, local_off, segment, target_off, length,
 * user_data=0, notify=None): a WRITE with an int notify carries that
 * 64-bit value to the target's owner (DP_DESC_F_NOTIFY); a WRITE or READ
 * with a bytes-like notify carries those bytes and the sender's name
 * (DP_DESC_F_NOTIFY_MSG; dp_submit copies them). */
static PyObject *queue_one(Queue *q, uint8_t op, PyObject *const *args, Py_ssize_t nargs,
			   PyObject *kwnames)
{
	static const char *const names[] = {"region", "local_off", "segment", "target_off",
					    "length", "user_data", "notify"};
	PyObject *a[7] = {NULL};
	Py_buffer msg = {.obj = NULL};
	struct dp_desc d;
	uint32_t region, segment;
	uint64_t v[4] = {0}, nv = 0;
	int rc;

	if (nargs > 6) {
		PyErr_SetString(PyExc_TypeError, "at most 6 positional arguments");
		return NULL;
	}
	for (Py_ssize_t i = 0; i < nargs; i++)
		a[i] = args[i];
	if (kwnames) {
		Py_ssize_t nk = PyTuple_Size(kwnames);

		for (Py_ssize_t k = 0; k < nk; k++) {
			PyObject *key = PyTuple_GetItem(kwnames, k);
			int j = 0;

			while (j < 7 && PyUnicode_CompareWithASCIIString(key, names[j]))
				j++;
			if (j == 7 || a[j]) {
				PyErr_Format(PyExc_TypeError, "unexpected or repeated argument %R",
					     key);
				return NULL;
			}
			a[j] = args[nargs + k];
		}
	}
	for (int i = 0; i < 5; i++)
		if (!a[i]) {
			PyErr_Format(PyExc_TypeError, "missing argument '%s'", names[i]);
			return NULL;
		}
	if (queue_check(q) || region_id(a[0], &region) || get_u64(a[1], &v[0], "local_off") ||
	    segment_handle(a[2], &segment) || get_u64(a[3], &v[1], "target_off") ||
	    get_u64(a[4], &v[2], "length") || (a[5] && get_u64(a[5], &v[3], "user_data")))
		return NULL;
	dp_prep_write(&d, (int)region, v[0], (int)segment, v[1], v[2], v[3]);
	d.opcode = op;
	if (a[6] && a[6] != Py_None && PyObject_CheckBuffer(a[6])) {
		if (PyObject_GetBuffer(a[6], &msg, PyBUF_SIMPLE))
			return NULL;
		if (op == DP_OP_WRITE)
			dp_prep_write_msg(&d, (int)region, v[0], (int)segment, v[1], v[2], v[3],
					  msg.buf, (size_t)msg.len);
		else
			dp_prep_read_msg(&d, (int)region, v[0], (int)segment, v[1], v[2], v[3],
					 msg.buf, (size_t)msg.len);
	} else if (a[6] && a[6] != Py_None) {
		if (op != DP_OP_WRITE) {
			PyErr_SetString(PyExc_ValueError,
					"an int notify goes with write() only (bytes go with "
					"read() too)");
			return NULL;
		}
		if (get_u64(a[6], &nv, "notify"))
			return NULL;
		d.flags = DP_DESC_F_NOTIFY;
		d.notify = nv;
	}
	rc = dp_submit(q->q, &d, 1);
	if (msg.obj)
		PyBuffer_Release(&msg);
	if (rc < 0)
		return raise_dp(rc);
	if (rc == 0)
		return raise_text(error_class(EAGAIN), -EAGAIN,
				  "the queue is full (depth descriptors in flight, or the ring): "
				  "reap completions first");
	Py_RETURN_NONE;
}

static PyObject *queue_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
			     PyObject *kwnames)
{
	return queue_one((Queue *)self, DP_OP_WRITE, args, nargs, kwnames);
}

static PyObject *queue_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
			    PyObject *kwnames)
{
	return queue_one((Queue *)self, DP_OP_READ, args, nargs, kwnames);
}

/* A Batch for @ops: itself, or a new one from a list (a new reference). */
static Batch *as_batch(PyObject *ops, uint8_t op)
{
	if (PyObject_TypeCheck(ops, batch_type)) {
		Py_INCREF(ops);
		return (Batch *)ops;
	}
	return batch_from_list(ops, op);
}

static PyObject *queue_submit(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"ops", "start", "op", NULL};
	Queue *q = (Queue *)self;
	PyObject *ops, *opo = NULL;
	Py_ssize_t start = 0;
	uint8_t op = DP_OP_WRITE;
	Batch *b;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|n$O:submit", kwlist, &ops, &start, &opo))
		return NULL;
	if (queue_check(q) || (opo && get_opcode(opo, &op)))
		return NULL;
	if (!(b = as_batch(ops, op)))
		return NULL;
	if (start < 0 || start > b->n) {
		Py_DECREF(b);
		PyErr_SetString(PyExc_IndexError, "start outside the batch");
		return NULL;
	}
	rc = b->n - start > (Py_ssize_t)UINT_MAX
		     ? dp_submit(q->q, b->d + start, UINT_MAX)
		     : dp_submit(q->q, b->d + start, (unsigned)(b->n - start));
	Py_DECREF(b);
	if (rc < 0)
		return raise_dp(rc);
	return PyLong_FromLong(rc);
}

static unsigned max_arg(Queue *q, PyObject *o, bool *bad)
{
	long v;

	*bad = false;
	if (!o || o == Py_None)
		return q->depth;
	v = PyLong_AsLong(o);
	if (v == -1 && PyErr_Occurred()) {
		*bad = true;
		return 0;
	}
	if (v < 1) {
		PyErr_SetString(PyExc_ValueError, "max must be at least 1");
		*bad = true;
		return 0;
	}
	return v > (long)q->depth ? q->depth : (unsigned)v;
}

static PyObject *queue_poll(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	Queue *q = (Queue *)self;
	unsigned max;
	bool bad;
	int k;

	if (nargs > 1) {
		PyErr_SetString(PyExc_TypeError, "poll(max=None)");
		return NULL;
	}
	if (queue_check(q))
		return NULL;
	max = max_arg(q, nargs ? args[0] : NULL, &bad);
	if (bad)
		return NULL;
	queue_disarm(q);
	k = dp_poll(q->q, q->cqes, max);
	if (k < 0)
		return raise_dp(k);
	return completion_list(q->cqes, k);
}

static PyObject *queue_poll_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	Queue *q = (Queue *)self;
	Py_buffer buf;
	Py_ssize_t cap;
	int k;

	if (nargs != 1) {
		PyErr_SetString(PyExc_TypeError, "poll_into(buffer)");
		return NULL;
	}
	if (queue_check(q) ||
	    PyObject_GetBuffer(args[0], &buf, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS))
		return NULL;
	cap = buf.len / (Py_ssize_t)sizeof(struct dp_cqe);
	if (cap > (Py_ssize_t)q->depth)
		cap = q->depth;
	if (cap < 1) {
		PyBuffer_Release(&buf);
		PyErr_SetString(PyExc_ValueError, "the buffer holds no 32-byte completion");
		return NULL;
	}
	queue_disarm(q);
	if (((uintptr_t)buf.buf & 7) == 0) {
		k = dp_poll(q->q, buf.buf, (unsigned)cap);
	} else {
		k = dp_poll(q->q, q->cqes, (unsigned)cap);
		if (k > 0)
			memcpy(buf.buf, q->cqes, (size_t)k * sizeof(struct dp_cqe));
	}
	PyBuffer_Release(&buf);
	if (k < 0)
		return raise_dp(k);
	return PyLong_FromLong(k);
}

static int timeout_ms(PyObject *o, int64_t *ms)
{
	double t;

	if (!o || o == Py_None) {
		*ms = -1;
		return 0;
	}
	t = PyFloat_AsDouble(o);
	if (t == -1.0 && PyErr_Occurred())
		return -1;
	if (t < 0) {
		PyErr_SetString(PyExc_ValueError, "timeout must be >= 0 or None");
		return -1;
	}
	*ms = t * 1000.0 > 1e15 ? -1 : (int64_t)(t * 1000.0 + 0.999);
	return 0;
}

static void busy_begin(Queue *q)
{
	q->busy = true;
	q->client->busy++;
}

static void busy_end(Queue *q)
{
	q->busy = false;
	q->client->busy--;
}

static PyObject *queue_wait(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout", "max", NULL};
	Queue *q = (Queue *)self;
	PyObject *to = NULL, *maxo = NULL;
	int64_t ms;
	uint64_t deadline;
	PyThreadState *ts;
	unsigned max;
	bool bad;
	int k;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:wait", kwlist, &to, &maxo))
		return NULL;
	if (queue_check(q) || timeout_ms(to, &ms))
		return NULL;
	max = max_arg(q, maxo, &bad);
	if (bad)
		return NULL;
	queue_disarm(q);
	deadline = ms < 0 ? UINT64_MAX : dp_now_ms() + (uint64_t)ms;
	for (;;) {
		uint64_t now = dp_now_ms();
		int slice = SLICE_MS;

		if (deadline != UINT64_MAX)
			slice = deadline <= now		    ? 0
				: deadline - now < SLICE_MS ? (int)(deadline - now)
							    : SLICE_MS;
		busy_begin(q);
		ts = PyEval_SaveThread();
		k = dp_wait(q->q, q->cqes, max, slice);
		PyEval_RestoreThread(ts);
		busy_end(q);
		if (k < 0)
			return raise_dp(k);
		if (k > 0 || dp_now_ms() >= deadline)
			break;
		if (PyErr_CheckSignals())
			return NULL;
	}
	return completion_list(q->cqes, k);
}

/*
 * Queue.run(): every descriptor of the batch submitted and completed, the
 * GIL released meanwhile; spins on the CQ for spin_us after each step, then
 * sleeps on the doorbell. Needs the queue idle (nothing in flight) so that
 * every completion it reaps is its own.
 */
static PyObject *queue_run(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"ops", "timeout", "op", "spin_us", NULL};
	Queue *q = (Queue *)self;
	PyObject *ops, *to = NULL, *opo = NULL;
	struct dp_queue_stats st;
	struct dp_cqe *failed = NULL;
	Py_ssize_t sent = 0, done = 0, nfailed = 0;
	double spin_us = 50;
	uint8_t op = DP_OP_WRITE;
	PyThreadState *ts;
	uint64_t deadline;
	int64_t ms;
	Batch *b;
	int rc = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$Od:run", kwlist, &ops, &to, &opo, &spin_us))
		return NULL;
	if (queue_check(q) || timeout_ms(to, &ms) || (opo && get_opcode(opo, &op)))
		return NULL;
	dp_queue_stats(q->q, &st);
	if (st.in_flight)
		return raise_text(
			busy_error, -EBUSY,
			"run() needs an idle queue: reap the descriptors in flight first");
	if (!(b = as_batch(ops, op)))
		return NULL;
	queue_disarm(q);
	deadline = ms < 0 ? UINT64_MAX : dp_now_ms() + (uint64_t)ms;
	busy_begin(q);
	ts = PyEval_SaveThread();
	while (done < b->n) {
		uint64_t t0, slice_end;
		int k;

		if (sent < b->n) {
			unsigned want = b->n - sent > (Py_ssize_t)q->depth
						? q->depth
						: (unsigned)(b->n - sent);

			k = dp_submit(q->q, b->d + sent, want);
			if (k < 0) {
				rc = k;
				break;
			}
			sent += k;
		}
		t0 = dp_now_ns();
		for (;;) {
			k = dp_poll(q->q, q->cqes, q->depth);
			if (k)
				break;
			if ((double)(dp_now_ns() - t0) >= spin_us * 1e3)
				break;
		}
		if (k == 0) {
			uint64_t now = dp_now_ms();

			if (now >= deadline) {
				rc = -ETIMEDOUT;
				break;
			}
			slice_end = deadline - now < SLICE_MS ? deadline - now : SLICE_MS;
			k = dp_wait(q->q, q->cqes, q->depth, (int)slice_end);
			if (k == 0) {
				/* A slice passed: let Python see signals. */
				int sig;

				PyEval_RestoreThread(ts);
				sig = PyErr_CheckSignals();
				ts = PyEval_SaveThread();
				if (sig) {
					rc = 1; /* exception set */
					break;
				}
				continue;
			}
		}
		if (k < 0) {
			rc = k;
			break;
		}
		for (int i = 0; i < k; i++)
			if (q->cqes[i].status) {
				if (!failed)
					failed = malloc(sizeof(*failed) * (size_t)b->n);
				if (failed)
					failed[nfailed] = q->cqes[i];
				nfailed++;
			}
		done += k;
	}
	PyEval_RestoreThread(ts);
	busy_end(q);
	Py_DECREF(b);
	if (rc == 1) {
		free(failed);
		return NULL;
	}
	if (rc == -ETIMEDOUT) {
		char t[200];

		free(failed);
		snprintf(
			t, sizeof(t),
			"run: %zd of %zd descriptors not complete within the timeout (they stay in "
			"flight: reap them with poll/wait)",
			(Py_ssize_t)(sent - done), sent);
		return raise_text(NULL, rc, t);
	}
	if (rc < 0) {
		free(failed);
		return raise_dp(rc);
	}
	if (nfailed) {
		PyObject *r = failed ? raise_transfer(failed, nfailed, done) : PyErr_NoMemory();

		free(failed);
		return r;
	}
	return PyLong_FromSsize_t(done);
}

static PyObject *queue_fileno(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;

	(void)unused;
	if (!q->q || !q->client)
		return raise_closed("the queue");
	return PyLong_FromLong(q->cq_fd);
}

static PyObject *queue_arm(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;

	(void)unused;
	if (queue_check(q))
		return NULL;
	if (!q->armed) {
		if (!dp_ring_prepare_sleep(&q->pair->cq))
			Py_RETURN_FALSE;
		q->armed = true;
	}
	Py_RETURN_TRUE;
}

static PyObject *queue_stats(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;
	struct dp_queue_stats st;
	int rc;

	(void)unused;
	/* Its counters move under a thread in wait() or run(). */
	if (queue_check(q))
		return NULL;
	rc = dp_queue_stats(q->q, &st);
	if (rc < 0)
		return raise_dp(rc);
	return Py_BuildValue("{sKsKsKsKsIsI}", "submitted", (unsigned long long)st.submitted,
			     "completed", (unsigned long long)st.completed, "failed",
			     (unsigned long long)st.failed, "bytes", (unsigned long long)st.bytes,
			     "in_flight", st.in_flight, "depth", st.depth);
}

static PyObject *queue_get_depth(PyObject *self, void *p)
{
	(void)p;
	return PyLong_FromUnsignedLong(((Queue *)self)->depth);
}

static PyObject *queue_get_in_flight(PyObject *self, void *p)
{
	Queue *q = (Queue *)self;
	struct dp_queue_stats st;

	(void)p;
	if (!q->q)
		return PyLong_FromLong(0);
	dp_queue_stats(q->q, &st);
	return PyLong_FromUnsignedLong(st.in_flight);
}

static PyObject *queue_get_closed(PyObject *self, void *p)
{
	(void)p;
	return PyBool_FromLong(!((Queue *)self)->q);
}

static PyObject *queue_repr(PyObject *self)
{
	Queue *q = (Queue *)self;

	return PyUnicode_FromFormat("<dataplane.Queue depth %u%s>", q->depth,
				    q->q ? "" : ", closed");
}

static PyMethodDef queue_methods[] = {
	{"write", (PyCFunction)(void (*)(void))queue_write, METH_FASTCALL | METH_KEYWORDS,
	 "write($self, region, local_off, segment, target_off, length, user_data=0)\n--\n\n"
	 "Submits one WRITE (local region -> segment). region and segment are Region / "
	 "Segment objects or their ids. Returns None; the completion carries user_data. "
	 "Raises BusyError (EAGAIN) when the queue has no room: reap first."},
	{"read", (PyCFunction)(void (*)(void))queue_read, METH_FASTCALL | METH_KEYWORDS,
	 "read($self, region, local_off, segment, target_off, length, user_data=0)\n--\n\n"
	 "Submits one READ (segment -> local region); as write()."},
	{"submit", (PyCFunction)(void (*)(void))queue_submit, METH_VARARGS | METH_KEYWORDS,
	 "submit($self, ops, start=0, *, op='write')\n--\n\n"
	 "Submits descriptors start.. of ops (a Batch, or a list of (region, local_off, "
	 "segment, target_off, length[, user_data]) tuples) in one dp_submit call. Returns how "
	 "many were accepted: fewer than asked when the queue's credit or ring is short "
	 "(submit the rest with start= after reaping)."},
	{"poll", (PyCFunction)(void (*)(void))queue_poll, METH_FASTCALL,
	 "poll($self, max=None)\n--\n\n"
	 "Reaps up to max (default: depth) completions without blocking: a list of "
	 "Completion, possibly empty. Raises ConnectionLostError when the service died with "
	 "descriptors in flight."},
	{"poll_into", (PyCFunction)(void (*)(void))queue_poll_into, METH_FASTCALL,
	 "poll_into($self, buffer)\n--\n\n"
	 "Reaps completions into a writable buffer of 32-byte struct dp_cqe entries (e.g. "
	 "numpy.zeros(n, dataplane.COMPLETION_DTYPE)) and returns how many: no Python object "
	 "per completion."},
	{"wait", (PyCFunction)(void (*)(void))queue_wait, METH_VARARGS | METH_KEYWORDS,
	 "wait($self, timeout=None, max=None)\n--\n\n"
	 "Reaps at least one completion, sleeping on the queue's doorbell up to timeout "
	 "seconds (None: until one comes) with the GIL released. Returns a list of "
	 "Completion; empty on timeout. Ctrl-C interrupts it."},
	{"run", (PyCFunction)(void (*)(void))queue_run, METH_VARARGS | METH_KEYWORDS,
	 "run($self, ops, timeout=None, *, op='write', spin_us=50)\n--\n\n"
	 "Submits every descriptor of ops (a Batch or a list, as submit()) and waits until "
	 "all completed, as many at a time as the queue takes, with the GIL released. Returns "
	 "the count. Raises TransferError (its .completions: the failed ones) when any "
	 "failed, DataplaneTimeoutError when not done within timeout. Needs the queue idle "
	 "(BusyError otherwise)."},
	{"fileno", queue_fileno, METH_NOARGS,
	 "fileno($self)\n--\n\nThe queue's completion doorbell fd, for selectors and "
	 "loop.add_reader: readable when completions came while the queue was armed "
	 "(arm())."},
	{"arm", queue_arm, METH_NOARGS,
	 "arm($self)\n--\n\n"
	 "Asks the service to ring the doorbell (fileno()) on the next completion. Returns "
	 "False when completions are already waiting (poll now instead of sleeping). The "
	 "next poll()/wait() disarms. Queue.wait_async() does this for asyncio."},
	{"stats", queue_stats, METH_NOARGS,
	 "stats($self)\n--\n\nThe library's figures (dp_queue_stats): submitted, completed, "
	 "failed, bytes, in_flight, depth."},
	{"close", queue_close, METH_NOARGS,
	 "close($self)\n--\n\nCloses the queue (dp_queue_destroy); completions not reaped are "
	 "lost. Twice is a no-op."},
	{"__enter__", region_enter, METH_NOARGS, NULL},
	{"__exit__", queue_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL}};

static PyGetSetDef queue_getset[] = {
	{"depth", queue_get_depth, NULL, "queue depth: at most this many in flight", NULL},
	{"in_flight", queue_get_in_flight, NULL, "descriptors submitted and not yet reaped", NULL},
	{"closed", queue_get_closed, NULL, "whether close() ran (or the client closed)", NULL},
	{NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef queue_members[] = {
	{"__weaklistoffset__", T_PYSSIZET, offsetof(Queue, weaklist), READONLY, NULL},
	{NULL, 0, 0, 0, NULL}};

static PyType_Slot queue_slots[] = {
	{Py_tp_doc, "A queue pair (Client.queue): submission ring, completion ring, doorbell.\n\n"
		    "One thread uses a queue at a time (another thread's call raises "
		    "BusyError); make one per thread."},
	{Py_tp_dealloc, queue_dealloc},
	{Py_tp_methods, queue_methods},
	{Py_tp_getset, queue_getset},
	{Py_tp_members, queue_members},
	{Py_tp_repr, queue_repr},
	{0, NULL}};

static PyType_Spec queue_spec = {"dataplane.Queue", sizeof(Queue), 0, Py_TPFLAGS_DEFAULT,
				 queue_slots};

/* ---- Client ---- */

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

static PyObject *client_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket", "name", NULL};
	PyObject *sock = Py_None, *sockb = NULL;
	const char *name = "python", *path = NULL;
	struct dp_client *dc = NULL;
	PyThreadState *ts;
	Client *c;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|Os:Client", kwlist, &sock, &name))
		return NULL;
	if (sock != Py_None) {
		if (!PyUnicode_FSConverter(sock, &sockb))
			return NULL;
		path = PyBytes_AsString(sockb);
	}
	ts = PyEval_SaveThread();
	rc = dp_connect(path, name, &dc);
	PyEval_RestoreThread(ts);
	Py_XDECREF(sockb);
	if (rc < 0)
		return raise_dp(rc);
	c = (Client *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0);
	if (!c) {
		dp_close(dc);
		return NULL;
	}
	c->c = dc;
	c->busy = 0;
	link_init(&c->regions);
	link_init(&c->queues);
	link_init(&c->segments);
	return (PyObject *)c;
}

/* Closes the connection; everything of it is marked closed. */
static void client_shut(Client *c)
{
	struct link *l;

	while ((l = c->queues.next) != &c->queues)
		queue_detach(CONTAINER(l, Queue, link), false);
	while ((l = c->segments.next) != &c->segments)
		segment_detach(CONTAINER(l, Segment, link));
	while ((l = c->regions.next) != &c->regions)
		region_detach(CONTAINER(l, Region, link));
	dp_close(c->c);
	c->c = NULL;
}

static void client_dealloc(PyObject *self)
{
	Client *c = (Client *)self;

	if (c->weaklist)
		PyObject_ClearWeakRefs(self);
	/* Regions, queues and segments hold references: none is left. */
	if (c->c) {
		dp_close(c->c);
		c->c = NULL;
	}
	free_self(self);
}

static PyObject *client_close(PyObject *self, PyObject *unused)
{
	Client *c = (Client *)self;
	Py_ssize_t views = 0, n = 0;

	(void)unused;
	if (!c->c)
		Py_RETURN_NONE;
	if (c->busy)
		return raise_text(busy_error, -EBUSY,
				  "the client has calls in progress in other threads (wait, run or "
				  "a control call)");
	for (struct link *l = c->regions.next; l != &c->regions; l = l->next) {
		Region *r = CONTAINER(l, Region, link);

		if (r->exports) {
			views += r->exports;
			n++;
		}
	}
	if (views) {
		char t[200];

		snprintf(t, sizeof(t),
			 "%zd region(s) of the client have %zd buffer view(s) alive (numpy/torch "
			 "arrays, memoryviews): release them before closing the client",
			 n, views);
		return raise_text(in_use_error, -EBUSY, t);
	}
	client_shut(c);
	Py_RETURN_NONE;
}

static PyObject *client_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return client_close(self, NULL);
}

static PyObject *client_queue(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"depth", NULL};
	Client *c = (Client *)self;
	unsigned depth = 0;
	struct dp_queue *dq = NULL;
	struct dp_queue_stats st;
	int sq_fd, rc;
	Queue *q;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|I:queue", kwlist, &depth) || client_check(c))
		return NULL;
	rc = CONTROL(c, dp_queue_create(c->c, depth, &dq));
	if (rc < 0)
		return raise_dp(rc);
	q = PyObject_New(Queue, queue_type);
	if (!q) {
		dp_queue_destroy(dq);
		return NULL;
	}
	dp_queue_stats(dq, &st);
	q->q = dq;
	q->client = c;
	Py_INCREF((PyObject *)c);
	q->depth = st.depth;
	q->busy = q->armed = false;
	q->weaklist = NULL;
	q->cq_fd = dp__queue_cq_doorbell(dq);
	dp__queue_ring(dq, &q->pair, &sq_fd);
	q->cqes = calloc(st.depth, sizeof(struct dp_cqe));
	link_add(&c->queues, &q->link);
	if (!q->cqes) {
		Py_DECREF(q);
		return PyErr_NoMemory();
	}
	return (PyObject *)q;
}

static PyObject *client_alloc(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"size", "huge", NULL};
	Client *c = (Client *)self;
	unsigned long long size;
	int huge = 0, id;
	void *addr = NULL;
	Region *r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|$p:alloc", kwlist, u64_conv, &size, &huge) ||
	    client_check(c))
		return NULL;
	if ((long long)size < 0)
		return PyErr_Format(PyExc_OverflowError, "size must be in 0 .. 2**63-1");
	id = CONTROL(c, dp_alloc(c->c, (size_t)size, huge ? DP_ALLOC_HUGE : 0, &addr));
	if (id < 0)
		return raise_dp(id);
	r = region_make(c, id, REGION_HOST, addr, size, NULL);
	if (!r) {
		dp_free(c->c, id);
		return NULL;
	}
	/* The mapping is the Region's from now on (see Region.map). */
	if (dp__alloc_detach(c->c, id, &r->map, &r->map_len))
		r->map = NULL;
	return (PyObject *)r;
}

/* (ptr, length, owner=None) registered by `reg` as a region of `kind`;
 * `owner` is kept alive with the region. */
static PyObject *register_ptr(PyObject *self, PyObject *args, PyObject *kw, const char *fmt,
			      int (*reg)(struct dp_client *, void *, size_t), int kind)
{
	static char *kwlist[] = {"ptr", "length", "owner", NULL};
	Client *c = (Client *)self;
	PyObject *ptro, *owner = Py_None;
	unsigned long long len;
	void *ptr;
	Region *r;
	int id;

	if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &ptro, u64_conv, &len, &owner) ||
	    client_check(c))
		return NULL;
	ptr = PyLong_AsVoidPtr(ptro);
	if (!ptr && PyErr_Occurred())
		return NULL;
	id = CONTROL(c, reg(c->c, ptr, (size_t)len));
	if (id < 0)
		return raise_dp(id);
	r = region_make(c, id, kind, ptr, len, owner == Py_None ? NULL : owner);
	if (!r)
		dp_free(c->c, id);
	return (PyObject *)r;
}

/* GPU memory (dp_register_cuda): `owner` is the tensor, if any. */
static PyObject *client_register_cuda(PyObject *self, PyObject *args, PyObject *kw)
{
	return register_ptr(self, args, kw, "OO&|O:_register_cuda", dp_register_cuda, REGION_CUDA);
}

/* Memory this process already has (dp_register_mem): `owner` (the buffer's
 * exporter, a memoryview holding it) is kept with the region, so the memory
 * can neither go nor move while the service may touch it. */
static PyObject *client_register_mem(PyObject *self, PyObject *args, PyObject *kw)
{
	return register_ptr(self, args, kw, "OO&|O:_register_mem", dp_register_mem, REGION_MEM);
}

static PyObject *client_register_fd(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"fd", "length", "offset", NULL};
	Client *c = (Client *)self;
	unsigned long long off = 0, len;
	Region *r;
	int fd, id;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "iO&|O&:register_fd", kwlist, &fd, u64_conv,
					 &len, u64_conv, &off) ||
	    client_check(c))
		return NULL;
	id = CONTROL(c, dp_register_fd(c->c, fd, off, len));
	if (id < 0)
		return raise_dp(id);
	r = region_make(c, id, REGION_FD, NULL, len, NULL);
	if (!r)
		dp_free(c->c, id);
	return (PyObject *)r;
}

static int file_flags(PyObject *acc, int buffered, unsigned *flags)
{
	unsigned a = DP_ACCESS_READ;

	if (acc && get_access(acc, &a))
		return -1;
	*flags = a | (buffered ? DP_FILE_BUFFERED : 0);
	return 0;
}

static PyObject *client_register_file(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"fd", "offset", "length", "access", "buffered", NULL};
	Client *c = (Client *)self;
	unsigned long long off = 0, len = 0;
	uint64_t rlen = 0;
	PyObject *acc = NULL;
	int fd, buffered = 0, id;
	unsigned flags;
	Region *r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "i|O&O&$Op:register_file", kwlist, &fd, u64_conv,
					 &off, u64_conv, &len, &acc, &buffered) ||
	    client_check(c) || file_flags(acc, buffered, &flags))
		return NULL;
	/* The length the service resolved: a length of 0 is to the end of
	 * the file, and the Region's size says how far that is. */
	id = CONTROL(c, dp__register_file(c->c, fd, off, len, flags, &rlen));
	if (id < 0)
		return raise_dp(id);
	r = region_make(c, id, REGION_FILE, NULL, rlen, NULL);
	if (!r)
		dp_free(c->c, id);
	return (PyObject *)r;
}

static PyObject *client_open_file(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"path", "offset", "length", "access", "buffered", NULL};
	Client *c = (Client *)self;
	unsigned long long off = 0, len = 0;
	uint64_t rlen = 0;
	PyObject *acc = NULL, *pathb = NULL;
	int buffered = 0, id;
	unsigned flags;
	Region *r;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O&O&$Op:open_file", kwlist,
					 PyUnicode_FSConverter, &pathb, u64_conv, &off, u64_conv,
					 &len, &acc, &buffered))
		return NULL;
	if (client_check(c) || file_flags(acc, buffered, &flags)) {
		Py_DECREF(pathb);
		return NULL;
	}
	id = CONTROL(c, dp__open_file(c->c, PyBytes_AsString(pathb), off, len, flags, &rlen));
	Py_DECREF(pathb);
	if (id < 0)
		return raise_dp(id);
	r = region_make(c, id, REGION_FILE, NULL, rlen, NULL);
	if (!r)
		dp_free(c->c, id);
	return (PyObject *)r;
}

static PyObject *client_export(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"region", "name", "access", NULL};
	Client *c = (Client *)self;
	PyObject *ro, *acc = NULL;
	const char *name;
	uint32_t region;
	unsigned a;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|O:export", kwlist, &ro, &name, &acc) ||
	    client_check(c) || region_id(ro, &region) || get_access(acc, &a))
		return NULL;
	if (region > INT_MAX)
		return PyErr_Format(PyExc_OverflowError, "region id above 2**31-1");
	rc = CONTROL(c, dp_segment_export(c->c, (int)region, name, a));
	if (rc < 0)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

static PyObject *client_unexport(PyObject *self, PyObject *args)
{
	Client *c = (Client *)self;
	const char *name;
	int rc;

	if (!PyArg_ParseTuple(args, "s:unexport", &name) || client_check(c))
		return NULL;
	rc = CONTROL(c, dp_segment_unexport(c->c, name));
	if (rc < 0)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

/* A Segment for handle h of client c, named `namo` on `peero`. */
static PyObject *segment_wrap(Client *c, int h, PyObject *namo, PyObject *peero)
{
	Segment *s = PyObject_New(Segment, segment_type);

	if (!s) {
		dp_segment_close(c->c, h);
		return NULL;
	}
	s->client = c;
	Py_INCREF((PyObject *)c);
	s->handle = h;
	s->name = namo;
	Py_INCREF(namo);
	s->peer = peero;
	Py_INCREF(peero);
	s->weaklist = NULL;
	link_add(&c->segments, &s->link);
	return (PyObject *)s;
}

static PyObject *client_open(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "peer", "access", NULL};
	Client *c = (Client *)self;
	PyObject *namo, *peero = Py_None, *acc = NULL;
	const char *name, *peer = NULL;
	unsigned a;
	int h;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "U|OO:open", kwlist, &namo, &peero, &acc) ||
	    client_check(c) || get_access(acc, &a))
		return NULL;
	name = PyUnicode_AsUTF8AndSize(namo, NULL);
	if (!name)
		return NULL;
	if (peero != Py_None) {
		if (!PyUnicode_Check(peero))
			return PyErr_Format(PyExc_TypeError, "peer must be a str or None");
		if (!(peer = PyUnicode_AsUTF8AndSize(peero, NULL)))
			return NULL;
	}
	h = CONTROL(c, dp_segment_open(c->c, peer, name, a));
	if (h < 0)
		return raise_dp(h);
	return segment_wrap(c, h, namo, peero);
}

static PyObject *client_session_create(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"port", NULL};
	Client *c = (Client *)self;
	unsigned port = 0;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|I:session_create", kwlist, &port) ||
	    client_check(c))
		return NULL;
	rc = CONTROL(c, dp_session_create(c->c, port));
	if (rc < 0)
		return raise_dp(rc);
	return PyLong_FromLong(rc);
}

static PyObject *client_open_session(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"session", "access", NULL};
	Client *c = (Client *)self;
	PyObject *namo, *acc = NULL;
	const char *name;
	unsigned a;
	int h;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O:open_session", kwlist, &namo, &acc) ||
	    client_check(c) || get_access(acc, &a))
		return NULL;
	name = PyUnicode_AsUTF8AndSize(namo, NULL);
	if (!name)
		return NULL;
	h = CONTROL(c, dp_session_open(c->c, name, a));
	if (h < 0)
		return raise_dp(h);
	return segment_wrap(c, h, namo, namo);
}

static PyObject *client_get_session_name(PyObject *self, void *p)
{
	Client *c = (Client *)self;

	(void)p;
	if (client_check(c))
		return NULL;
	return PyUnicode_FromString(dp_session_name(c->c));
}

static PyObject *client_get_server_name(PyObject *self, void *p)
{
	Client *c = (Client *)self;

	(void)p;
	if (client_check(c))
		return NULL;
	return PyUnicode_FromString(dp_server_name(c->c));
}

static PyObject *client_get_closed(PyObject *self, void *p)
{
	(void)p;
	return PyBool_FromLong(!((Client *)self)->c);
}

static PyObject *client_regions(PyObject *self, PyObject *unused)
{
	Client *c = (Client *)self;
	PyObject *l;

	(void)unused;
	if (client_check(c) || !(l = PyList_New(0)))
		return NULL;
	for (struct link *x = c->regions.prev; x != &c->regions; x = x->prev)
		if (PyList_Append(l, (PyObject *)CONTAINER(x, Region, link))) {
			Py_DECREF(l);
			return NULL;
		}
	return l;
}

static PyObject *client_repr(PyObject *self)
{
	Client *c = (Client *)self;

	if (!c->c)
		return PyUnicode_FromString("<dataplane.Client, closed>");
	return PyUnicode_FromFormat("<dataplane.Client of %s>", dp_server_name(c->c));
}

/* ---- notifications (docs/api.md "Notifications") ---- */

static PyObject *client_notify_open(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"entries", NULL};
	Client *c = (Client *)self;
	unsigned entries = 0;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|I:notify_open", kwlist, &entries) ||
	    client_check(c))
		return NULL;
	rc = CONTROL(c, dp_notify_open(c->c, entries));
	if (rc < 0)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

/* Up to max notifications as tuples (value, offset, len, flags, dropped,
 * sender, segment); timeout_ms < 0: poll, else wait (the GIL released). */
static PyObject *client_notify_take(PyObject *self, PyObject *args)
{
	Client *c = (Client *)self;
	struct dp_notification nb[64];
	unsigned max = 64;
	int timeout_ms = -1, n;
	PyObject *list;

	if (!PyArg_ParseTuple(args, "|Ii:_notify_take", &max, &timeout_ms) || client_check(c))
		return NULL;
	if (!max || max > 64)
		max = 64;
	if (timeout_ms < 0) {
		n = dp_notify_poll(c->c, nb, max);
	} else {
		PyThreadState *ts = PyEval_SaveThread();

		n = dp_notify_wait(c->c, nb, max, timeout_ms);
		PyEval_RestoreThread(ts);
	}
	if (n < 0)
		return raise_dp(n);
	list = PyList_New(n);
	for (int i = 0; list && i < n; i++) {
		PyObject *t = Py_BuildValue("(KKKIIIs)", (unsigned long long)nb[i].value,
					    (unsigned long long)nb[i].offset,
					    (unsigned long long)nb[i].len, nb[i].flags,
					    nb[i].dropped, nb[i].sender, nb[i].segment);

		if (!t) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SetItem(list, i, t);
	}
	return list;
}

/* _notify_recv(max, timeout_ms): up to max notifications of either form
 * (dp_notify_recv), the first waited for up to timeout_ms (the GIL
 * released), as raw tuples (sender, bytes, value, offset, len, flags,
 * dropped, sender id, segment). */
static PyObject *client_notify_recv(PyObject *self, PyObject *args)
{
	Client *c = (Client *)self;
	unsigned max = 64;
	int timeout_ms = 0;
	unsigned got = 0;
	PyObject *list;
	uint8_t *buf;

	if (!PyArg_ParseTuple(args, "|Ii:_notify_recv", &max, &timeout_ms) || client_check(c))
		return NULL;
	/* The call's own: the first wait releases the GIL, and another
	 * client's call may run meanwhile. */
	buf = PyMem_Malloc(DP_NOTIFY_MSG_MAX);
	if (!buf)
		return PyErr_NoMemory();
	list = PyList_New(0);
	for (; list && got < max; got++) {
		char sender[DP_NOTIFY_SENDER_MAX];
		struct dp_notification n;
		PyObject *t;
		int k;

		if (timeout_ms && !got) {
			PyThreadState *ts = PyEval_SaveThread();

			k = dp_notify_recv(c->c, &n, sender, buf, DP_NOTIFY_MSG_MAX, timeout_ms);
			PyEval_RestoreThread(ts);
		} else {
			k = dp_notify_recv(c->c, &n, sender, buf, DP_NOTIFY_MSG_MAX, 0);
		}
		if (k < 0) {
			Py_DECREF(list);
			PyMem_Free(buf);
			return raise_dp(k);
		}
		if (!k)
			break;
		t = Py_BuildValue("(sy#KKKIIIs)", sender, (const char *)buf, (Py_ssize_t)n.msg_len,
				  (unsigned long long)n.value, (unsigned long long)n.offset,
				  (unsigned long long)n.len, n.flags, n.dropped, n.sender,
				  n.segment);
		if (!t || PyList_Append(list, t)) {
			Py_XDECREF(t);
			Py_DECREF(list);
			PyMem_Free(buf);
			return NULL;
		}
		Py_DECREF(t);
	}
	PyMem_Free(buf);
	return list;
}

/* notify_send(segment, msg): bytes alone to the segment's owner. */
static PyObject *client_notify_send(PyObject *self, PyObject *args)
{
	Client *c = (Client *)self;
	PyObject *so;
	Py_buffer msg;
	uint32_t seg;
	int rc;

	if (!PyArg_ParseTuple(args, "Oy*:notify_send", &so, &msg))
		return NULL;
	if (client_check(c) || segment_handle(so, &seg)) {
		PyBuffer_Release(&msg);
		return NULL;
	}
	rc = CONTROL(c, dp_notify_send(c->c, (int)seg, msg.buf, (size_t)msg.len));
	PyBuffer_Release(&msg);
	if (rc < 0)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

static PyObject *client_notify_fileno(PyObject *self, PyObject *unused)
{
	Client *c = (Client *)self;
	int fd;

	(void)unused;
	if (client_check(c))
		return NULL;
	fd = dp_notify_fd(c->c);
	if (fd < 0)
		return raise_dp(fd);
	return PyLong_FromLong(fd);
}

static PyMethodDef client_methods[] = {
	{"notify_open", (PyCFunction)(void (*)(void))client_notify_open,
	 METH_VARARGS | METH_KEYWORDS,
	 "notify_open($self, entries=0)\n--\n\nOpens this client's notification ring "
	 "(dp_notify_open; entries: a power of two, 0 for the default). Open it before "
	 "exporting, so that nothing is missed."},
	{"_notify_recv", client_notify_recv, METH_VARARGS,
	 "_notify_recv($self, max=64, timeout_ms=0)\n--\n\nRaw tuples; use notify_recv()."},
	{"notify_send", client_notify_send, METH_VARARGS,
	 "notify_send($self, segment, msg)\n--\n\nSends msg (bytes-like, at most "
	 "NOTIFY_MSG_MAX bytes) alone to the owner of segment (dp_notify_send); it arrives "
	 "after this client's notifications whose transfers completed before."},
	{"_notify_take", client_notify_take, METH_VARARGS,
	 "_notify_take($self, max=64, timeout_ms=-1)\n--\n\nRaw tuples; use "
	 "notify_poll()/notify_wait()."},
	{"notify_fileno", client_notify_fileno, METH_NOARGS,
	 "notify_fileno($self)\n--\n\nThe notification doorbell (dp_notify_fd), for "
	 "loop.add_reader: readable when notifications may have arrived; then call "
	 "notify_poll() until it returns []. Never read or close it."},
	{"queue", (PyCFunction)(void (*)(void))client_queue, METH_VARARGS | METH_KEYWORDS,
	 "queue($self, depth=0)\n--\n\nOpens a queue pair (dp_queue_create); depth a power of two, "
	 "0 "
	 "for the service's default. One per thread."},
	{"alloc", (PyCFunction)(void (*)(void))client_alloc, METH_VARARGS | METH_KEYWORDS,
	 "alloc($self, size, *, huge=False)\n--\n\nAllocates size bytes shared with the service "
	 "and "
	 "registers them (dp_alloc): a host Region, viewable through the buffer protocol."},
	{"_register_cuda", (PyCFunction)(void (*)(void))client_register_cuda,
	 METH_VARARGS | METH_KEYWORDS,
	 "_register_cuda($self, ptr, length, owner=None)\n--\n\nRegisters GPU memory at device "
	 "pointer ptr (dp_register_cuda); owner is kept alive with the region. "
	 "Client.register_cuda() takes tensors."},
	{"_register_mem", (PyCFunction)(void (*)(void))client_register_mem,
	 METH_VARARGS | METH_KEYWORDS,
	 "_register_mem($self, ptr, length, owner=None)\n--\n\nRegisters memory of this process "
	 "at ptr (dp_register_mem); owner is kept alive with the region. Client.register() takes "
	 "buffers."},
	{"register_fd", (PyCFunction)(void (*)(void))client_register_fd,
	 METH_VARARGS | METH_KEYWORDS,
	 "register_fd($self, fd, length, offset=0)\n--\n\nRegisters bytes [offset, offset+length) "
	 "of "
	 "a memfd made with MFD_ALLOW_SEALING (dp_register_fd). The Region has no buffer: map "
	 "the memfd yourself."},
	{"register_file", (PyCFunction)(void (*)(void))client_register_file,
	 METH_VARARGS | METH_KEYWORDS,
	 "register_file($self, fd, offset=0, length=0, *, access='r', buffered=False)\n--\n\n"
	 "Registers a range of an open file as a file region (dp_register_file; "
	 "docs/files.md). length 0: to the end of the file."},
	{"open_file", (PyCFunction)(void (*)(void))client_open_file, METH_VARARGS | METH_KEYWORDS,
	 "open_file($self, path, offset=0, length=0, *, access='r', buffered=False)\n--\n\n"
	 "As register_file, for a path the service opens beneath its --file-root "
	 "(dp_open_file)."},
	{"export", (PyCFunction)(void (*)(void))client_export, METH_VARARGS | METH_KEYWORDS,
	 "export($self, region, name, access='rw')\n--\n\nPublishes a region as the named segment "
	 "(dp_segment_export); access 'r' or 'rw'."},
	{"unexport", client_unexport, METH_VARARGS,
	 "unexport($self, name)\n--\n\nWithdraws an export of this client (dp_segment_unexport)."},
	{"open", (PyCFunction)(void (*)(void))client_open, METH_VARARGS | METH_KEYWORDS,
	 "open($self, name, peer=None, access='rw')\n--\n\nOpens segment name on peer "
	 "(\"host:port\"; "
	 "None: this service, or the cluster directory) for access 'r', 'w' or 'rw' "
	 "(dp_segment_open): a Segment."},
	{"session_create", (PyCFunction)(void (*)(void))client_session_create,
	 METH_VARARGS | METH_KEYWORDS,
	 "session_create($self, port=0)\n--\n\nMakes this client an engine session "
	 "(dp_session_create): the service listens on TCP port (0: any) for peers asking about "
	 "this client's registered memory, which they address by this process's addresses. "
	 "Returns the port; session_name is \"host:port\"."},
	{"open_session", (PyCFunction)(void (*)(void))client_open_session,
	 METH_VARARGS | METH_KEYWORDS,
	 "open_session($self, session, access='rw')\n--\n\nOpens engine session \"host:port\" "
	 "(dp_session_open): a Segment whose target offsets are addresses of the session's "
	 "process."},
	{"regions", client_regions, METH_NOARGS,
	 "regions($self)\n--\n\nThe client's open regions, oldest first."},
	{"close", client_close, METH_NOARGS,
	 "close($self)\n--\n\nCloses the connection (dp_close): the service frees everything of "
	 "the client, and its queues, regions and segments read as closed. Raises "
	 "RegionInUseError while any region has buffer views alive (the client stays open), "
	 "BusyError while another thread is in one of its calls. Twice is a no-op."},
	{"__enter__", region_enter, METH_NOARGS, NULL},
	{"__exit__", client_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL}};

static PyGetSetDef client_getset[] = {
	{"server_name", client_get_server_name, NULL,
	 "the service's identity, \"host:rpc-port\" (what other services' clients pass as "
	 "peer)",
	 NULL},
	{"closed", client_get_closed, NULL, "whether close() ran", NULL},
	{"session_name", client_get_session_name, NULL,
	 "the client's engine session, \"host:port\" (\"\" before session_create())", NULL},
	{NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef client_members[] = {
	{"__weaklistoffset__", T_PYSSIZET, offsetof(Client, weaklist), READONLY, NULL},
	{NULL, 0, 0, 0, NULL}};

static PyType_Slot client_slots[] = {
	{Py_tp_doc,
	 "Client(socket=None, name='python')\n--\n\n"
	 "A connection to dataplaned (dp_connect). socket None: $DP_SOCKET, else "
	 "$XDG_RUNTIME_DIR/dataplane/dataplane.sock, else /run/dataplane/dataplane.sock. "
	 "A context manager: `with Client() as c:` closes it at the end."},
	{Py_tp_new, client_new},
	{Py_tp_dealloc, client_dealloc},
	{Py_tp_methods, client_methods},
	{Py_tp_getset, client_getset},
	{Py_tp_members, client_members},
	{Py_tp_repr, client_repr},
	{0, NULL}};

static PyType_Spec client_spec = {"dataplane.Client", sizeof(Client), 0, Py_TPFLAGS_DEFAULT,
				  client_slots};

/* ---- module functions ---- */

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
	long e = PyLong_AsLong(arg);

	(void)m;
	if (e == -1 && PyErr_Occurred())
		return NULL;
	if (e > 0)
		e = -e;
	return PyUnicode_FromString(dp_strerror((int)e));
}

static PyObject *mod_last_error(PyObject *m, PyObject *unused)
{
	(void)m;
	(void)unused;
	return PyUnicode_FromString(dp_last_error());
}

static PyObject *mod_init_errors(PyObject *m, PyObject *args)
{
	PyObject *map, *base, *closed, *in_use, *busy, *transfer;

	(void)m;
	if (!PyArg_ParseTuple(args, "O!OOOOO", &PyDict_Type, &map, &base, &closed, &in_use, &busy,
			      &transfer))
		return NULL;
	PyObject **slots[] = {&errno_map,    &base_error, &closed_error,
			      &in_use_error, &busy_error, &transfer_error};
	PyObject *vals[] = {map, base, closed, in_use, busy, transfer};

	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		PyObject *old = *slots[i];

		*slots[i] = Py_NewRef(vals[i]);
		Py_XDECREF(old);
	}
	Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
	{"strerror", mod_strerror, METH_O,
	 "strerror($module, err)\n--\n\nlibclient's text for an errno (dp_strerror), either sign."},
	{"last_error", mod_last_error, METH_NOARGS,
	 "last_error($module)\n--\n\nWhat the last failed libclient call of this thread was and "
	 "what "
	 "its errno meant for it (dp_last_error)."},
	{"_init_errors", mod_init_errors, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT,
				    "dataplane._dataplane",
				    "The C extension under the dataplane package (see "
				    "help(dataplane)).",
				    -1,
				    mod_methods,
				    NULL,
				    NULL,
				    NULL,
				    NULL};

static int add_int(PyObject *m, const char *name, long v)
{
	return PyModule_AddIntConstant(m, name, v);
}

PyMODINIT_FUNC PyInit__dataplane(void)
{
	PyObject *m = PyModule_Create(&moddef);

	if (!m)
		return NULL;
	completion_type = PyStructSequence_NewType(&completion_desc);
	client_type = (PyTypeObject *)PyType_FromSpec(&client_spec);
	region_type = (PyTypeObject *)PyType_FromSpec(&region_spec);
	segment_type = (PyTypeObject *)PyType_FromSpec(&segment_spec);
	queue_type = (PyTypeObject *)PyType_FromSpec(&queue_spec);
	batch_type = (PyTypeObject *)PyType_FromSpec(&batch_spec);
	if (!completion_type || !client_type || !region_type || !segment_type || !queue_type ||
	    !batch_type)
		goto err;
	if (PyModule_AddObjectRef(m, "Completion", (PyObject *)completion_type) ||
	    PyModule_AddObjectRef(m, "Client", (PyObject *)client_type) ||
	    PyModule_AddObjectRef(m, "Region", (PyObject *)region_type) ||
	    PyModule_AddObjectRef(m, "Segment", (PyObject *)segment_type) ||
	    PyModule_AddObjectRef(m, "Queue", (PyObject *)queue_type) ||
	    PyModule_AddObjectRef(m, "Batch", (PyObject *)batch_type))
		goto err;
	if (add_int(m, "OP_WRITE", DP_OP_WRITE) || add_int(m, "OP_READ", DP_OP_READ) ||
	    add_int(m, "OP_NOP", DP_OP_NOP) || add_int(m, "ACCESS_READ", DP_ACCESS_READ) ||
	    add_int(m, "ACCESS_WRITE", DP_ACCESS_WRITE) || add_int(m, "ACCESS_RW", DP_ACCESS_RW) ||
	    add_int(m, "F_LOCAL", DP_CQE_F_LOCAL) || add_int(m, "F_FABRIC", DP_CQE_F_FABRIC) ||
	    add_int(m, "F_GPU", DP_CQE_F_GPU) || add_int(m, "F_FILE", DP_CQE_F_FILE) ||
	    add_int(m, "F_SAME_HOST", DP_CQE_F_SAME_HOST) ||
	    add_int(m, "F_GPU_STAGED", DP_CQE_F_GPU_STAGED) ||
	    PyModule_AddStringConstant(m, "VERSION", DP_VERSION_STRING) ||
	    add_int(m, "ABI_VERSION", DP_ABI_VERSION) ||
	    add_int(m, "SEGMENT_NAME_MAX", DP_SEGMENT_NAME_MAX) ||
	    add_int(m, "DESC_SIZE", sizeof(struct dp_desc)) ||
	    add_int(m, "COMPLETION_SIZE", sizeof(struct dp_cqe)))
		goto err;
	return m;
err:
	Py_DECREF(m);
	return NULL;
}
