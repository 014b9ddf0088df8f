/*
 * systemd's notification protocol (sd_notify(3)) without libsystemd: one
 * datagram with "READY=1", "WATCHDOG=1", "STOPPING=1", "STATUS=..." to the
 * AF_UNIX socket named by $NOTIFY_SOCKET ('@' = abstract namespace).
 */
#ifndef SDNOTIFY_H
#define SDNOTIFY_H

/* Returns 1 when sent, 0 when not run by systemd, or -errno. */
int sdnotify(const char *state);

/* The watchdog period asked by systemd in ms (WATCHDOG_USEC, for this PID
 * when WATCHDOG_PID is set), or 0 when there is none. */
long long sdnotify_watchdog_ms(void);

#endif
