/*
 * cksum — checksums private to the cache: CRC32C (Castagnoli) for block data
 * and index records, and a 128-bit non-cryptographic hash for block identity.
 */
#ifndef FEEDFS_CACHE_CKSUM_I_H
#define FEEDFS_CACHE_CKSUM_I_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of p[0..n), continuing from crc (start with 0). Uses the SSE4.2
 * instruction when the CPU has it, a slicing-by-8 table otherwise. */
uint32_t cksum_crc32c(uint32_t crc, const void *p, size_t n);
/* The table implementation, always (for tests). */
uint32_t cksum_crc32c_sw(uint32_t crc, const void *p, size_t n);

/* Combining CRCs: crc(A || B) from crc(A) and crc(B) when len(B) is fixed.
 * The shift is the linear map that feeding len(B) zero bytes applies to the
 * CRC register (GF(2), 32x32 bits: column i is the image of bit i). Made once
 * per length, each combine is then 32 conditional xors. */
struct cksum_shift { uint32_t col[32]; };
void cksum_crc32c_shift_init(struct cksum_shift *s, size_t len_b);
uint32_t cksum_crc32c_combine(const struct cksum_shift *s, uint32_t crc_a, uint32_t crc_b);

struct cksum_h128 { uint64_t lo, hi; };

/* Incremental 128-bit hash; feed fields with their lengths so that
 * ("ab","c") and ("a","bc") differ. */
struct cksum_h128_state { uint64_t a, b; };
void cksum_h128_init(struct cksum_h128_state *s);
void cksum_h128_field(struct cksum_h128_state *s, const void *p, size_t n);
struct cksum_h128 cksum_h128_final(const struct cksum_h128_state *s);
/* Identity of block `blk` of an object whose identity is obj. Never {0,0}. */
struct cksum_h128 cksum_h128_block(struct cksum_h128 obj, uint64_t blk);

#endif
