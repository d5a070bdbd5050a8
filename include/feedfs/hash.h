/*
 * hash — the one non-cryptographic 64-bit hash every module uses for tables
 * and identities: FNV-1a over bytes, then a finaliser that spreads every input
 * bit over the whole word.
 *
 * Raw FNV-1a is cheap and stable (its value is fixed by the algorithm, so two
 * builds agree on it: use it where a value must match across processes, e.g. a
 * socket name), but its low bits mix poorly, so a table indexed by `h & mask`
 * must index by util_hash64 (or util_mix64 of the FNV value) instead.
 *
 * util_mix64 is the 64-bit finaliser of MurmurHash3 (fmix64). Its output is
 * part of the disk cache's block identities (src/cache/cksum.c), so changing it
 * changes the cache format.
 */
#ifndef FEEDFS_HASH_H
#define FEEDFS_HASH_H

#include <stddef.h>
#include <stdint.h>

#define UTIL_FNV1A64_INIT 0xcbf29ce484222325ULL

/* FNV-1a 64 of n bytes, continuing from h (UTIL_FNV1A64_INIT to start), so
 * several fields can be hashed in a row. */
uint64_t util_fnv1a64(uint64_t h, const void *p, size_t n);

/* Bijective finaliser: every output bit depends on every input bit; 0 -> 0. */
uint64_t util_mix64(uint64_t h);

/* util_mix64(util_fnv1a64(UTIL_FNV1A64_INIT ^ seed, p, n)): for table indexes
 * and in-memory identities; different seeds give unrelated hashes. */
uint64_t util_hash64(const void *p, size_t n, uint64_t seed);

#endif
