/* ring_tsan_support.c - not a test: makes Criterion start, and fail on race reports, under GCC's TSan (DP_TSAN builds only). */
#ifdef DP_TSAN

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/*
 * Criterion's sandbox (BoxFort) maps its shared arena with MAP_FIXED at
 * 0x200000000000 + (rand_r() & 0x3fffff) * 16 MiB and gives up after ten
 * draws that land on mapped pages. Under TSan nearly all of that range is
 * TSan's reserved shadow memory; only the application window
 * [0x550000000000, 0x568000000000) is free, so most runs abort with "Could
 * not initialize inheritable arena" (upstream: Snaipe/Criterion#274).
 * For calls made from libcriterion only, fold the draw into that window.
 * Everyone else gets glibc's rand_r() unchanged.
 */
#define BOXFORT_BASE 0x200000000000ull
#define BOXFORT_SLOT_SHIFT 24
#define TSAN_APP_WINDOW_LO 0x550000000000ull
#define TSAN_APP_WINDOW_HI 0x568000000000ull

int rand_r(unsigned int *seed)
{
	static int (*libc_rand_r)(unsigned int *);
	const unsigned first = (TSAN_APP_WINDOW_LO - BOXFORT_BASE) >> BOXFORT_SLOT_SHIFT;
	/* One slot short: the arena (128 KiB and up) must end inside too. */
	const unsigned slots =
		((TSAN_APP_WINDOW_HI - TSAN_APP_WINDOW_LO) >> BOXFORT_SLOT_SHIFT) - 1;
	Dl_info caller;
	int r;

	if (!libc_rand_r)
		*(void **)&libc_rand_r = dlsym(RTLD_NEXT, "rand_r");
	r = libc_rand_r(seed);
	if (dladdr(__builtin_return_address(0), &caller) && caller.dli_fname &&
	    strstr(caller.dli_fname, "libcriterion"))
		return (int)(first + (unsigned)r % slots);
	return r;
}

/*
 * A race report must fail the test that caused it. By default TSan only
 * prints the report and sets the exit status of the process, and Criterion
 * runs each test in its own worker process whose status it does not check
 * once the test has finished: the run would pass. Halting on the first
 * report makes the test crash instead. TSAN_OPTIONS still overrides this.
 */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "halt_on_error=1";
}

#endif /* DP_TSAN */
