/* SPDX-License-Identifier: MIT */
/* stats_json.h - a strict little JSON parser for checking ring-stat --json. */
#ifndef DP_TEST_STATS_JSON_H
#define DP_TEST_STATS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype t;
	bool b;
	double num;
	uint64_t u; /* exact value of a non-negative integer literal */
	bool is_uint;
	char *str;
	size_t n; /* items of an array or object */
	struct jv **items;
	char **keys; /* an object's keys */
};

/* Parses one value; *end points past it (and trailing spaces). NULL on any
 * syntax error. */
struct jv *json_parse(const char *text, const char **end);
void json_free(struct jv *v);
/* Member of an object (NULL when absent or not an object). */
const struct jv *json_get(const struct jv *o, const char *key);
/* "a.b.c" through nested objects. */
const struct jv *json_path(const struct jv *o, const char *path);
/* The integer at path; fails the running Criterion test when it is absent
 * or not a non-negative integer. */
uint64_t json_u64(const struct jv *o, const char *path);

#endif
