/*
 * heap — the daemon's malloc heap: what it holds, and its free pages given
 * back to the kernel.
 *
 * DESIGN
 * process_setup (daemon.c) keeps read buffers in one glibc arena that is
 * never trimmed on free (M_TRIM_THRESHOLD high), so that a buffer freed and
 * taken again costs no page faults. The price was a resident size that only
 * ever rose: it kept every page the arena had touched at its busiest moment,
 * plus whatever fragmentation pinned below the top, and a 30-minute soak
 * grew from 67 to 132 MiB with nothing leaked. So the ctl ticker calls
 * heap_tick() once a second, and every HEAP_TRIM_EVERY_S seconds, when more
 * than HEAP_TRIM_MIN_FREE bytes of the arena are free, malloc_trim(0) hands
 * the free pages back (MADV_DONTNEED on whole free pages, anywhere in the
 * heap): the next buffer there faults its pages in again, a cost paid at
 * most once per period. Gauges: resident size, heap in use, heap free, and
 * the trims done (group "process").
 */
#ifndef FEEDFS_HEAP_H
#define FEEDFS_HEAP_H

#include <stdint.h>

#define HEAP_TRIM_EVERY_S 10
#define HEAP_TRIM_MIN_FREE (8u << 20)

struct heap_stats {
	uint64_t rss_bytes;             /* the process's resident size */
	uint64_t heap_in_use_bytes;     /* malloc: in use (arena and mmapped chunks) */
	uint64_t heap_free_bytes;       /* malloc: free in the arena, resident or not */
	uint64_t trims;                 /* malloc_trim calls made */
	uint64_t trimmed;               /* ... that gave pages back */
};

/* Once a second, from one thread (the ctl ticker). */
void heap_tick(void);
void heap_get_stats(struct heap_stats *out);

struct stats_group;
extern const struct stats_group process_stats_group;    /* obj: heap_stats_obj() */
void *heap_stats_obj(void);

#endif
