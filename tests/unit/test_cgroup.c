/* cgroup: the memory limit from fake /proc/self/cgroup, mountinfo and cgroup
 * trees built under a temporary directory. */
#include "harness.h"

#include "feedfs/cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB (1ULL << 20)

static char tmp[64];

/* Write text to tmp/rel, creating the directories on the way. */
static void put(const char *rel, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	for (char *p = path + strlen(tmp) + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			mkdir(path, 0755);
			*p = '/';
		}
	}
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void fresh(void)
{
	char cmd[128];

	if (tmp[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
		CHECK_EQ_INT(system(cmd), 0);
	}
	snprintf(tmp, sizeof(tmp), "/tmp/feedfs-cgtest-XXXXXX");
	CHECK(mkdtemp(tmp) != NULL);
}

/* The limit as this tree and these two files give it (-1: none, else -errno or bytes). */
static long long limit_of(const char *proc_cgroup, const char *mountinfo)
{
	char pc[128], mi[128];
	uint64_t lim = 0;
	int e;

	put("proc/cgroup", proc_cgroup);
	put("proc/mountinfo", mountinfo);
	snprintf(pc, sizeof(pc), "%s/proc/cgroup", tmp);
	snprintf(mi, sizeof(mi), "%s/proc/mountinfo", tmp);
	e = cgroup_memory_limit_at(pc, mi, tmp, &lim);
	return e < 0 ? e : e == 0 ? -1 : (long long)lim;
}

static const char mi_v2[] =
	"24 30 0:22 / /sys rw,nosuid - sysfs sysfs rw\n"
	"31 24 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
	"rw,nsdelegate,memory_recursiveprot\n";

static void t_v2_ancestor_limit(void)
{
	fresh();
	put("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
	put("sys/fs/cgroup/kubepods/memory.max", "max\n");
	put("sys/fs/cgroup/kubepods/pod1/memory.max", "1073741824\n");
	put("sys/fs/cgroup/kubepods/pod1/memory.high", "max\n");
	put("sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
	CHECK_EQ_INT(limit_of("0::/kubepods/pod1/ctr\n", mi_v2), 1073741824);
	/* memory.high below memory.max: the kernel throttles there. */
	put("sys/fs/cgroup/kubepods/pod1/ctr/memory.high", "805306368\n");
	CHECK_EQ_INT(limit_of("0::/kubepods/pod1/ctr\n", mi_v2), 805306368);
	/* Nothing set anywhere. */
	fresh();
	put("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
	put("sys/fs/cgroup/a/memory.max", "max\n");
	CHECK_EQ_INT(limit_of("0::/a\n", mi_v2), -1);
	/* The root cgroup (a cgroup namespace: "0::/") with a limit file. */
	put("sys/fs/cgroup/memory.max", "268435456\n");
	CHECK_EQ_INT(limit_of("0::/\n", mi_v2), 268435456);
	/* Malformed. */
	put("sys/fs/cgroup/a/memory.max", "lots\n");
	CHECK_EQ_INT(limit_of("0::/a\n", mi_v2), -EINVAL);
}

static void t_v2_without_memory_controller(void)
{
	fresh();
	put("sys/fs/cgroup/cgroup.controllers", "cpu pids\n");
	put("sys/fs/cgroup/a/memory.max", "1048576\n");  /* not enforced: not ours */
	CHECK_EQ_INT(limit_of("0::/a\n", mi_v2), -1);
}

/* A container without a cgroup namespace: the mount shows the container's
 * own cgroup (root /docker/abc) while /proc/self/cgroup names the full path. */
static void t_v2_container_view(void)
{
	static const char mi[] =
		"700 690 0:27 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n";

	fresh();
	put("sys/fs/cgroup/cgroup.controllers", "memory\n");
	put("sys/fs/cgroup/memory.max", "2147483648\n");
	put("sys/fs/cgroup/init/memory.max", "max\n");
	CHECK_EQ_INT(limit_of("0::/docker/abc/init\n", mi), 2147483648LL);
	/* A path the mount does not show: its root is what we can read. */
	CHECK_EQ_INT(limit_of("0::/elsewhere\n", mi), 2147483648LL);
}

/* Hybrid hosts: cgroup2 mounted with no controllers, memory on v1. */
static void t_v1_hybrid(void)
{
	static const char mi[] =
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
		"36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
	static const char pc[] =
		"9:name=systemd:/\n4:memory:/process_api/x\n3:cpu,cpuacct:/\n0::/\n";

	fresh();
	put("sys/fs/cgroup/unified/cgroup.controllers", "\n");
	put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
	put("sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", "9223372036854771712\n");
	put("sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes", "9223372036854771712\n");
	CHECK_EQ_INT(limit_of(pc, mi), -1);
	put("sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", "536870912\n");
	CHECK_EQ_INT(limit_of(pc, mi), 536870912);
	/* No files at all: no limit, no error. */
	fresh();
	CHECK_EQ_INT(limit_of(pc, mi), -1);
	CHECK_EQ_INT(limit_of("", ""), -1);
}

static void t_budget(void)
{
	static const struct { uint64_t limit, budget; } cases[] = {
		{ 8192 * MIB, 4032 * MIB }, { 2048 * MIB, 960 * MIB }, { 512 * MIB, 192 * MIB },
		{ 194 * MIB, 33 * MIB }, { 192 * MIB, 32 * MIB }, { 100 * MIB, 32 * MIB },
		{ 0, 32 * MIB },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		CHECK_EQ_INT(cgroup_memory_budget(cases[i].limit), cases[i].budget);
}

static void t_cleanup(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	CHECK_EQ_INT(system(cmd), 0);
}

static const struct test tests[] = {
	TEST(t_v2_ancestor_limit), TEST(t_v2_without_memory_controller), TEST(t_v2_container_view),
	TEST(t_v1_hybrid), TEST(t_budget), TEST(t_cleanup), { 0 },
};

int main(void)
{
	return harness_run("cgroup", tests);
}
