/* SPDX-License-Identifier: MIT */
/*
 * helpers_json.c - a strict little JSON parser (RFC 8259, no extensions)
 * for what ring-stat --json prints, and lookups in what it parsed.
 */
#include "helpers.h"

static void skip_ws(const char **p)
{
	while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
		(*p)++;
}

/* The value of hex digit h, -1 when it is none. */
static int hex_digit(char h)
{
	if (h >= '0' && h <= '9')
		return h - '0';
	if (h >= 'a' && h <= 'f')
		return h - 'a' + 10;
	if (h >= 'A' && h <= 'F')
		return h - 'A' + 10;
	return -1;
}

/* The escape at *p (past its backslash) into *out, *p left on its last
 * character; false when JSON has no such escape. A \u escape beyond ASCII
 * becomes '?'. */
static bool parse_escape(const char **p, char *out)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *at = **p ? strchr(from, **p) : NULL;
	unsigned v = 0;

	if (at) {
		*out = to[at - from];
		return true;
	}
	if (**p != 'u')
		return false;
	for (int i = 1; i <= 4; i++) {
		int h = hex_digit((*p)[i]);

		if (h < 0)
			return false;
		v = v << 4 | (unsigned)h;
	}
	*p += 4;
	*out = v < 0x80 ? (char)v : '?';
	return true;
}

static char *parse_string(const char **p)
{
	size_t cap = 16, n = 0;
	char *s;

	if (**p != '"')
		return NULL;
	(*p)++;
	s = malloc(cap);
	while (s && **p != '"') {
		char c = **p;
		bool ok = c && (unsigned char)c >= 0x20;

		if (ok && c == '\\') {
			(*p)++;
			ok = parse_escape(p, &c);
		}
		if (!ok) {
			free(s);
			return NULL;
		}
		if (n + 2 > cap) {
			char *t = realloc(s, cap *= 2);

			if (!t) {
				free(s);
				return NULL;
			}
			s = t;
		}
		s[n++] = c;
		(*p)++;
	}
	if (!s)
		return NULL;
	s[n] = 0;
	(*p)++;
	return s;
}

static struct jv *parse_value(const char **p, int depth);

static bool push(struct jv *v, struct jv *item, char *key)
{
	struct jv **items = realloc(v->items, (v->n + 1) * sizeof(*items));
	char **keys;

	if (!items)
		return false;
	v->items = items;
	if (v->t == J_OBJ) {
		keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
		if (!keys)
			return false;
		v->keys = keys;
		v->keys[v->n] = key;
	}
	v->items[v->n++] = item;
	return true;
}

static struct jv *parse_container(const char **p, int depth, enum jtype t)
{
	struct jv *v = calloc(1, sizeof(*v));
	char close = t == J_OBJ ? '}' : ']';

	if (!v)
		return NULL;
	v->t = t;
	(*p)++;
	skip_ws(p);
	if (**p == close) {
		(*p)++;
		return v;
	}
	for (;;) {
		char *key = NULL;
		struct jv *item;

		skip_ws(p);
		if (t == J_OBJ) {
			key = parse_string(p);
			skip_ws(p);
			if (!key || **p != ':') {
				free(key);
				json_free(v);
				return NULL;
			}
			(*p)++;
		}
		item = parse_value(p, depth + 1);
		if (!item || !push(v, item, key)) {
			free(key);
			json_free(item);
			json_free(v);
			return NULL;
		}
		skip_ws(p);
		if (**p == ',') {
			(*p)++;
			continue;
		}
		if (**p == close) {
			(*p)++;
			return v;
		}
		json_free(v);
		return NULL;
	}
}

/* Past one or more digits at q; NULL when there is none. */
static const char *json_digits(const char *q)
{
	if (!(*q >= '0' && *q <= '9'))
		return NULL;
	while (*q >= '0' && *q <= '9')
		q++;
	return q;
}

/* The end of the number at s, NULL when there is none (RFC 8259: no
 * leading zero, no '+', digits after a '.'); *integer tells whether it is
 * a non-negative integer literal. */
static const char *number_end(const char *s, bool *integer)
{
	const char *q = s;

	*integer = *q != '-';
	if (*q == '-')
		q++;
	if (!(*q >= '0' && *q <= '9') || (*q == '0' && q[1] >= '0' && q[1] <= '9'))
		return NULL;
	q = json_digits(q);
	if (*q == '.') {
		*integer = false;
		q = json_digits(q + 1);
	}
	if (q && (*q == 'e' || *q == 'E')) {
		*integer = false;
		q++;
		if (*q == '+' || *q == '-')
			q++;
		q = json_digits(q);
	}
	return q;
}

/* true, false, null or a number at *p into v; false when there is none. */
static bool parse_scalar(const char **p, struct jv *v)
{
	const char *end;
	bool integer;

	if (!strncmp(*p, "true", 4) || !strncmp(*p, "false", 5)) {
		v->t = J_BOOL;
		v->b = **p == 't';
		*p += v->b ? 4 : 5;
		return true;
	}
	if (!strncmp(*p, "null", 4)) {
		*p += 4;
		return true;
	}
	end = number_end(*p, &integer);
	if (!end)
		return false;
	v->t = J_NUM;
	v->num = strtod(*p, NULL);
	if (integer) {
		v->u = strtoull(*p, NULL, 10);
		v->is_uint = true;
	}
	*p = end;
	return true;
}

static struct jv *parse_value(const char **p, int depth)
{
	struct jv *v;

	if (depth > 64)
		return NULL;
	skip_ws(p);
	if (**p == '{')
		return parse_container(p, depth, J_OBJ);
	if (**p == '[')
		return parse_container(p, depth, J_ARR);
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	if (**p == '"') {
		v->t = J_STR;
		v->str = parse_string(p);
		if (v->str)
			return v;
	} else if (parse_scalar(p, v)) {
		return v;
	}
	free(v);
	return NULL;
}

struct jv *json_parse(const char *text, const char **end)
{
	const char *p = text;
	struct jv *v = parse_value(&p, 0);

	skip_ws(&p);
	if (end)
		*end = p;
	return v;
}

void json_free(struct jv *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		json_free(v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	free(v);
}

const struct jv *json_get(const struct jv *o, const char *key)
{
	if (!o || o->t != J_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (!strcmp(o->keys[i], key))
			return o->items[i];
	return NULL;
}

const struct jv *json_path(const struct jv *o, const char *path)
{
	char key[128];

	while (o && *path) {
		size_t n = strcspn(path, ".");

		if (n >= sizeof(key))
			return NULL;
		memcpy(key, path, n);
		key[n] = 0;
		o = json_get(o, key);
		path += n + (path[n] == '.');
	}
	return o;
}

uint64_t json_u64(const struct jv *o, const char *path)
{
	const struct jv *v = json_path(o, path);

	cr_assert(v && v->t == J_NUM && v->is_uint, "JSON field '%s' missing or not an integer",
		  path);
	return v->u;
}
