/* SPDX-License-Identifier: MIT */
/*
 * batch.c - dataplane.Batch: descriptors prepared in C, from a list of
 * tuples or from columns (sequences or buffers of ints), ready for
 * Queue.submit and Queue.run without a Python object per descriptor.
 */
#include "_dataplane.h"

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
Batch *batch_from_list(PyObject *ops, uint8_t op)
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

PyType_Spec batch_spec = {"dataplane.Batch", sizeof(Batch), 0, Py_TPFLAGS_DEFAULT, batch_slots};
