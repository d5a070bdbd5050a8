/*
 * cgroup — the memory limit of the cgroup this process runs in, and the
 * --max-memory default that follows from it (src/options.c applies it when
 * --max-memory is not given).
 *
 * The limit is the smallest of memory.max and memory.high (cgroup v2) or of
 * memory.limit_in_bytes (v1, where the memory controller is still on v1) over
 * the process's cgroup and every ancestor this process can see: a container's
 * limit usually sits on the container's cgroup while the process runs in a
 * child of it.
 */
#ifndef FEEDFS_CGROUP_H
#define FEEDFS_CGROUP_H

#include <stdint.h>

/* The limit from the given files: proc_cgroup is /proc/self/cgroup's text
 * format, mountinfo /proc/self/mountinfo's, and fs_prefix is put before every
 * mount point found there ("" on a live system; a fake tree in tests).
 * Returns 1 with *limit_bytes set, 0 when no limit applies (none set, no
 * memory controller, or files missing), or -errno for a malformed file. */
int cgroup_memory_limit_at(const char *proc_cgroup, const char *mountinfo,
			   const char *fs_prefix, uint64_t *limit_bytes);

/* cgroup_memory_limit_at("/proc/self/cgroup", "/proc/self/mountinfo", ""). */
int cgroup_memory_limit(uint64_t *limit_bytes);

/* The --max-memory default under a limit: half the limit less 64 MiB, at
 * least 32 MiB. --max-memory bounds the read buffers only; the other half
 * is for what it does not count: the daemon's own heap (inode table, listing
 * cache, curl and TLS state, thread stacks, allocator slack) and the page
 * cache and kernel memory the kernel charges to this cgroup (the block cache
 * file's pages, socket buffers). 64 MiB more is the floor of that own use. */
uint64_t cgroup_memory_budget(uint64_t limit_bytes);

#endif
