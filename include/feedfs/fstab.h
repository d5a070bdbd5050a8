/*
 * fstab — mount(8)'s option string to feedfs's command line, for the
 * mount.feedfs helper (src/mount_helper.c): "-o endpoint_url=http://h:9000,
 * force_path_style,_netdev" becomes "--endpoint-url http://h:9000
 * --force-path-style".
 *
 * Each comma-separated option is, in this order:
 *  - one only mount(8) or systemd reads (_netdev, auto, noauto, user, users,
 *    nouser, nofail, defaults, x-*, comment=*), or "ro"/"rw": dropped. "rw"
 *    is dropped, not refused, because mount(8) adds it to every helper call
 *    that does not say "ro"; a feedfs mount is read-only whatever it says.
 *  - a feedfs option with '_' for '-' (options_lookup): "name=value" for one
 *    that takes a value, "name" for a flag;
 *  - anything else: an error naming it (with sloppy, mount -s: dropped).
 * The options that would keep feedfs from mounting or from returning
 * (help, version, dry-run, print-credentials-source, foreground, debug) are
 * refused. A value may be double-quoted to hold commas: cache_dir="/a,b".
 */
#ifndef FEEDFS_FSTAB_H
#define FEEDFS_FSTAB_H

#include <stddef.h>

struct fstab_args {
	char **argv;            /* "--name", "value", ...; owned, NULL-terminated */
	int argc;
	int dropped;            /* options dropped as mount(8)'s own or sloppy */
};

/* Append the feedfs arguments for opts to a (which starts zeroed). Returns 0,
 * -EINVAL with one line in msg (no prefix, no newline), or -ENOMEM. */
int fstab_parse_opts(const char *opts, int sloppy, struct fstab_args *a, char *msg,
		     size_t msg_len);

/* Free what fstab_parse_opts allocated; a is zeroed. */
void fstab_args_free(struct fstab_args *a);

#endif
