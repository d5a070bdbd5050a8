/*
 * hash — FNV-1a 64 and the 64-bit finaliser (see feedfs/hash.h).
 */
#include "feedfs/hash.h"

uint64_t util_fnv1a64(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	while (n--)
		h = (h ^ *c++) * 0x100000001b3ULL;
	return h;
}

uint64_t util_mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

uint64_t util_hash64(const void *p, size_t n, uint64_t seed)
{
	return util_mix64(util_fnv1a64(UTIL_FNV1A64_INIT ^ seed, p, n));
}
