/* SPDX-License-Identifier: MIT */
/* engine.c - the engine table (engines.def) and the hooks run over all of
 * it. See engine.h. */
#include <string.h>

#include "engine.h"

#define ENGINE(name) [ENGINE_##name] = &name##_engine,
const struct engine *const engines[DP_ENGINES] = {
#include "engines.def"
};
#undef ENGINE

int engines_init(void)
{
	for (unsigned i = 0; i < DP_ENGINES; i++) {
		int rc = engines[i]->init ? engines[i]->init() : 0;

		if (rc) {
			log_err("%s engine: %s", engines[i]->name, strerror(-rc));
			while (i--)
				if (engines[i]->fini)
					engines[i]->fini();
			return rc;
		}
	}
	return 0;
}

void engines_fini(void)
{
	for (unsigned i = DP_ENGINES; i--;)
		if (engines[i]->fini)
			engines[i]->fini();
}

/* On failure the caller drops the region: region_put() runs every
 * region_close, which copes with state that was never opened. */
int engines_region_open(struct region *r)
{
	for (unsigned i = 0; i < DP_ENGINES; i++) {
		int rc = engines[i]->region_open ? engines[i]->region_open(r) : 0;

		if (rc)
			return rc;
	}
	return 0;
}

const struct engine_region_msg *engines_region_msg(uint32_t type)
{
	for (unsigned i = 0; i < DP_ENGINES; i++)
		for (const struct engine_region_msg *m = engines[i]->region_msgs; m && m->type; m++)
			if (m->type == type)
				return m;
	return NULL;
}

void engines_region_close(struct region *r)
{
	for (unsigned i = DP_ENGINES; i--;)
		if (engines[i]->region_close)
			engines[i]->region_close(r);
}

int engines_segment_export(struct segment *s)
{
	for (unsigned i = 0; i < DP_ENGINES; i++) {
		int rc = engines[i]->segment_export ? engines[i]->segment_export(s) : 0;

		if (rc) {
			engines_segment_unexport(s);
			return rc;
		}
	}
	return 0;
}

void engines_segment_unexport(struct segment *s)
{
	for (unsigned i = DP_ENGINES; i--;)
		if (engines[i]->segment_unexport)
			engines[i]->segment_unexport(s);
}

void engines_segment_free(struct segment *s)
{
	for (unsigned i = DP_ENGINES; i--;)
		if (engines[i]->segment_free)
			engines[i]->segment_free(s);
}
