/* SPDX-License-Identifier: MIT */
/*
 * client.c - dataplane.Client: a connection to the service and its control
 * calls (queues, regions, exports, segments, sessions; the notification
 * calls are notify.c's), each releasing the GIL while libclient waits.
 * Closing the client closes what it made, unless a region has views alive.
 */
#include "_dataplane.h"

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
	{"__enter__", enter_self, METH_NOARGS, NULL},
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

PyType_Spec client_spec = {"dataplane.Client", sizeof(Client), 0, Py_TPFLAGS_DEFAULT, client_slots};
