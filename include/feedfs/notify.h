/*
 * notify — the service manager's readiness protocol (sd_notify(3)) without
 * libsystemd: one datagram per call to the AF_UNIX socket named by
 * $NOTIFY_SOCKET ("/path" or "@abstract"), carrying "KEY=VALUE" lines.
 *
 * Every call is a no-op returning 0 when $NOTIFY_SOCKET is unset or empty, so
 * the daemon calls them unconditionally. They return 1 when a datagram was
 * sent, or -errno (the caller logs it once; the mount does not depend on it).
 * Each call opens its own socket: they are safe from any thread and cost one
 * syscall triple, which at one STATUS a second is nothing.
 *
 * With the keeper (the unit's main PID) forking the serving process, the
 * serving process sends READY and WATCHDOG itself; the unit therefore says
 * NotifyAccess=all (systemd/feedfs@.service).
 */
#ifndef FEEDFS_NOTIFY_H
#define FEEDFS_NOTIFY_H

#include <stdint.h>

/* "READY=1": the mount answers. */
int notify_ready(void);

/* "STATUS=<text>": one line shown by systemctl status; newlines in the text
 * are replaced by spaces (a newline would start a new assignment). */
int notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "WATCHDOG=1": ping the watchdog; send at least every notify_watchdog_usec()/2. */
int notify_watchdog(void);

/* "STOPPING=1": a clean stop has begun. */
int notify_stopping(void);

/* $WATCHDOG_USEC in microseconds, 0 when unset, malformed, or meant for an
 * unrelated process ($WATCHDOG_PID names neither this process nor its parent:
 * the parent is the keeper, the serving process pings for it). */
uint64_t notify_watchdog_usec(void);

/* Send text as it is (several "KEY=VALUE\n" lines); the building block of the
 * calls above. */
int notify_send(const char *text);

#endif
