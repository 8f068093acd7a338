/* SPDX-License-Identifier: MIT */
/*
 * region.c - dataplane.Region: memory registered with the service, its
 * bytes handed out through the buffer protocol only; a region with views
 * alive refuses to close (RegionInUseError).
 */
#include "_dataplane.h"

static const char *const kind_names[] = {"host", "cuda", "fd", "file", "mem"};

Region *region_make(Client *c, int id, int kind, void *addr, uint64_t size, PyObject *owner)
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
void region_detach(Region *r)
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
	{"__enter__", enter_self, METH_NOARGS, NULL},
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

PyType_Spec region_spec = {"dataplane.Region", sizeof(Region), 0, Py_TPFLAGS_DEFAULT, region_slots};
