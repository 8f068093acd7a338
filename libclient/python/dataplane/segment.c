/* SPDX-License-Identifier: MIT */
/*
 * segment.c - dataplane.Segment: a handle on an export, of this service or
 * of another, or on an engine session, the target of descriptors.
 */
#include "_dataplane.h"

/* A Segment for handle h of client c, named `namo` on `peero`. */
PyObject *segment_wrap(Client *c, int h, PyObject *namo, PyObject *peero)
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

void segment_detach(Segment *s)
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
	{"__enter__", enter_self, METH_NOARGS, NULL},
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

PyType_Spec segment_spec = {"dataplane.Segment", sizeof(Segment), 0, Py_TPFLAGS_DEFAULT,
			    segment_slots};
