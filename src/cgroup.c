/*
 * cgroup — the process's memory limit (include/feedfs/cgroup.h).
 *
 * DESIGN
 * Which directory holds the process's cgroup: /proc/self/cgroup names the
 * path within each hierarchy ("0::/a/b" for v2, "4:memory:/a/b" for v1), and
 * /proc/self/mountinfo says where that hierarchy is mounted and which of its
 * directories the mount shows (field 4: "/" normally, "/docker/ID" in a
 * container without a cgroup namespace, whose own cgroup is then the mount's
 * root). The directory is the mount point plus the path below that root.
 * From there up to the mount point, each directory's limit files are read and
 * the smallest limit wins. v1 is looked at only when no v2 hierarchy has the
 * memory controller (hybrid hosts keep memory on v1).
 *
 * Everything is read once, at option parsing; a limit changed later is not
 * followed.
 */
#include "feedfs/cgroup.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1ULL << 20)
/* v1 writes "unlimited" as LONG_MAX rounded down to a page: anything this
 * large is no limit. */
#define CG_UNLIMITED (1ULL << 62)

/* The first line of path as an unsigned number; "max" (v2) -> UINT64_MAX.
 * Returns 1, 0 when the file is absent, -EINVAL when malformed. */
static int read_limit(const char *path, uint64_t *out)
{
	char buf[64], *end;
	FILE *f = fopen(path, "re");
	unsigned long long v;

	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -EINVAL;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	if (strcmp(buf, "max") == 0) {
		*out = UINT64_MAX;
		return 1;
	}
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno || end == buf || *end || buf[0] == '-')
		return -EINVAL;
	*out = v >= CG_UNLIMITED ? UINT64_MAX : v;
	return 1;
}

/* Where the hierarchy (v2: fstype cgroup2; v1: cgroup with "memory" in its
 * super options) is mounted: mount point and root into mnt/root. 1 found. */
static int find_mount(const char *mountinfo, int v2, char *mnt, size_t mnt_len, char *root,
		      size_t root_len)
{
	char line[4096];
	FILE *f = fopen(mountinfo, "re");
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char r[PATH_MAX], m[PATH_MAX], fstype[64], super[1024];
		const char *sep = strstr(line, " - ");

		/* id parent maj:min root mountpoint opts [optional...] - fstype src super */
		if (!sep || sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2 ||
		    sscanf(sep + 3, "%63s %*s %1023s", fstype, super) != 2)
			continue;
		if (strcmp(fstype, v2 ? "cgroup2" : "cgroup") != 0)
			continue;
		if (!v2) {
			/* "memory" as one comma-separated word, not "memory_recursiveprot" */
			char *tok, *save = NULL;
			int mem = 0;

			for (tok = strtok_r(super, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
				mem |= strcmp(tok, "memory") == 0;
			if (!mem)
				continue;
		}
		snprintf(mnt, mnt_len, "%s", m);
		snprintf(root, root_len, "%s", r);
		found = 1;
	}
	fclose(f);
	return found;
}

/* The path within the hierarchy from /proc/self/cgroup: v2's "0::PATH" line,
 * or the v1 line whose controller list holds "memory". 1 found. */
static int find_path(const char *proc_cgroup, int v2, char *out, size_t out_len)
{
	char line[4096];
	FILE *f = fopen(proc_cgroup, "re");
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		*c2 = '\0';
		c2[1 + strcspn(c2 + 1, "\n")] = '\0';
		if (v2) {
			found = strncmp(line, "0:", 2) == 0 && c1[1] == '\0';
		} else {
			char *tok, *save = NULL;

			for (tok = strtok_r(c1 + 1, ",", &save); tok && !found;
			     tok = strtok_r(NULL, ",", &save))
				found = strcmp(tok, "memory") == 0;
		}
		if (found)
			snprintf(out, out_len, "%s", c2 + 1);
	}
	fclose(f);
	return found;
}

/* The smallest limit from dir up to top (top is a prefix of dir). */
static int walk_up(char *dir, size_t top_len, int v2, uint64_t *limit)
{
	static const char *const v2_files[] = { "memory.max", "memory.high", NULL };
	static const char *const v1_files[] = { "memory.limit_in_bytes", NULL };
	const char *const *files = v2 ? v2_files : v1_files;
	char path[PATH_MAX];
	uint64_t best = UINT64_MAX, v;
	int e, any = 0, n;

	for (;;) {
		for (size_t i = 0; files[i]; i++) {
			n = snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
			if (n < 0 || (size_t)n >= sizeof(path))
				return -ENAMETOOLONG;
			e = read_limit(path, &v);
			if (e < 0)
				return e;
			if (e > 0) {
				any = 1;
				if (v < best)
					best = v;
			}
		}
		char *slash = strrchr(dir, '/');

		if (strlen(dir) <= top_len || !slash || (size_t)(slash - dir) < top_len)
			break;
		*slash = '\0';
	}
	*limit = best;
	return any;
}

static int limit_in(const char *proc_cgroup, const char *mountinfo, const char *fs_prefix,
		    int v2, uint64_t *limit)
{
	char mnt[PATH_MAX], root[PATH_MAX], path[PATH_MAX], dir[PATH_MAX];
	const char *below;
	size_t rlen;
	int n, top;

	if (!find_mount(mountinfo, v2, mnt, sizeof(mnt), root, sizeof(root)) ||
	    !find_path(proc_cgroup, v2, path, sizeof(path)))
		return 0;
	if (v2) {
		/* v2 lists its controllers; no memory controller here: no limit. */
		char cpath[PATH_MAX], ctl[1024] = "";
		FILE *f;

		n = snprintf(cpath, sizeof(cpath), "%s%s/cgroup.controllers", fs_prefix, mnt);
		f = n > 0 && (size_t)n < sizeof(cpath) ? fopen(cpath, "re") : NULL;
		if (!f)
			return 0;
		if (!fgets(ctl, sizeof(ctl), f))
			ctl[0] = '\0';
		fclose(f);
		char *tok, *save = NULL;
		int mem = 0;

		for (tok = strtok_r(ctl, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
			mem |= strcmp(tok, "memory") == 0;
		if (!mem)
			return 0;
	}
	/* The part of path below the mount's root; outside it (a cgroup the
	 * mount does not show), the mount point itself. */
	rlen = strcmp(root, "/") == 0 ? 0 : strlen(root);
	below = strncmp(path, root, rlen) == 0 && (path[rlen] == '/' || path[rlen] == '\0')
		? path + rlen : "";
	top = snprintf(dir, sizeof(dir), "%s%s", fs_prefix, strcmp(mnt, "/") ? mnt : "");
	if (top < 0 || (size_t)top >= sizeof(dir))
		return -ENAMETOOLONG;
	n = snprintf(dir + top, sizeof(dir) - (size_t)top, "%s", strcmp(below, "/") ? below : "");
	if (n < 0 || (size_t)(top + n) >= sizeof(dir))
		return -ENAMETOOLONG;
	while (top + n > top && dir[top + n - 1] == '/')
		dir[top + --n] = '\0';
	return walk_up(dir, (size_t)top, v2, limit);
}

int cgroup_memory_limit_at(const char *proc_cgroup, const char *mountinfo,
			   const char *fs_prefix, uint64_t *limit_bytes)
{
	uint64_t lim = UINT64_MAX;
	int e = limit_in(proc_cgroup, mountinfo, fs_prefix, 1, &lim);

	if (e == 0)
		e = limit_in(proc_cgroup, mountinfo, fs_prefix, 0, &lim);
	if (e <= 0)
		return e;
	if (lim == UINT64_MAX)
		return 0;
	*limit_bytes = lim;
	return 1;
}

int cgroup_memory_limit(uint64_t *limit_bytes)
{
	return cgroup_memory_limit_at("/proc/self/cgroup", "/proc/self/mountinfo", "",
				      limit_bytes);
}

uint64_t cgroup_memory_budget(uint64_t limit_bytes)
{
	uint64_t half = limit_bytes / 2;

	return half > 96 * MIB ? half - 64 * MIB : 32 * MIB;
}
