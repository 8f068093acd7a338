/* SPDX-License-Identifier: MIT */
/*
 * helpers_stats.c - what a running service tells of itself without a
 * test's asking it: its stats region (pollers, rails) and the port in its
 * server name; and a TCP port nobody listens on.
 */
#include "dp_stats.h"
#include "helpers.h"

const struct dp_stats_header *stats_map(const struct svc *s)
{
	char name[DP_STATS_NAME_MAX];
	const struct dp_stats_header *h;
	struct stat st;
	void *p;
	int fd;

	dp_stats_default_name(s->sock, name, sizeof(name));
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	cr_assert_geq(fd, 0, "stats region %s: %s", name, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_geq((size_t)st.st_size, sizeof(*h), "stats region %s: %lld bytes", name,
		      (long long)st.st_size);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert_neq(p, MAP_FAILED, "mmap %s: %s", name, strerror(errno));
	h = p;
	cr_assert_eq(__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE), DP_STATS_MAGIC,
		     "%s is not a stats region", name);
	cr_assert_eq(h->abi_version, DP_STATS_ABI_VERSION, "%s: stats ABI %u, want %u", name,
		     h->abi_version, DP_STATS_ABI_VERSION);
	cr_assert_eq(h->region_size, (uint64_t)st.st_size);
	return h;
}

void stats_unmap(const struct dp_stats_header *h)
{
	munmap((void *)h, (size_t)h->region_size);
}

static const struct dp_stats_rail_info *rail_info(const struct dp_stats_header *h, unsigned i)
{
	return (const void *)((const uint8_t *)h + h->rail_info_off +
			      (size_t)i * h->rail_info_size);
}

const struct dp_stats_poller *poller_block(const struct dp_stats_header *h, unsigned i)
{
	return (const void *)((const uint8_t *)h + h->pollers_off + (size_t)i * h->poller_size);
}

int fab_rpc_port(const struct svc *s)
{
	struct dp_client *c = connect_client(s, "rpc-port");
	const char *name = dp_server_name(c), *colon = strrchr(name, ':');
	int port = colon ? atoi(colon + 1) : -1;

	cr_assert_gt(port, 0, "no port in the server name '%s'", name);
	dp_close(c);
	return port;
}

/* The rail blocks are named at start-up, before the service accepts
 * clients: the ones named now are all it opened. */
unsigned svc_rails(const struct svc *s)
{
	const struct dp_stats_header *h = stats_map(s);
	unsigned n = 0;

	while (n < h->nrails && __atomic_load_n(&rail_info(h, n)->state, __ATOMIC_ACQUIRE) == 1)
		n++;
	stats_unmap(h);
	return n;
}

void svc_rail(const struct svc *s, unsigned i, char *provider, size_t plen, char *domain,
	      size_t dlen)
{
	const struct dp_stats_header *h = stats_map(s);
	const struct dp_stats_rail_info *r;

	cr_assert_lt(i, h->nrails, "rail %u of %u blocks", i, h->nrails);
	r = rail_info(h, i);
	cr_assert_eq(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), 1, "rail %u is not open", i);
	snprintf(provider, plen, "%.*s", (int)sizeof(r->provider), r->provider);
	snprintf(domain, dlen, "%.*s", (int)sizeof(r->domain), r->domain);
	stats_unmap(h);
}

int fab_free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}
