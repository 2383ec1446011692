/* gitsess-guard PARENT START FD: the guard of one daemon's view (see guard.py for why).

A program of its own, not a fork of the daemon's interpreter left running: a forked Python
guard kept some 1.7 MiB of private pages for as long as its view was mounted, most of what an
idle session cost beyond its daemon. This one keeps a few pages.

PARENT is the daemon's pid and START its start time (field 22 of /proc/PID/stat), which tell
it from a later process that has its number. FD is the pipe the daemon writes to: the view's
device and mount point ("major:minor\0/mount/point\n") once mounted, then "." when it ends on
its own. The guard waits for the daemon's death signal (SIGUSR1 through PR_SET_PDEATHSIG);
when the daemon died without standing it down and does not finish exiting within EXIT_MS, it
aborts the view's FUSE connection. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#define EXIT_MS 2000
#define POLL_MS 20
#define CONNECTIONS "/sys/fs/fuse/connections"
#define TOLD_MAX 8192
#define FUSECTL_SUPER_MAGIC 0x65735543

static ssize_t read_file(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < size) {
        ssize_t n = read(fd, buf + got, size - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return (ssize_t)got;
}

/* Gone, or a zombie of one thread (a zombie leader with threads left is the stuck case), or
   its pid another process's. */
static int exited(pid_t pid, unsigned long long since) {
    char path[64], stat[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (read_file(path, stat, sizeof stat) < 0)
        return 1;
    char *p = strrchr(stat, ')');
    if (p == NULL)
        return 1;
    char state = p[2];
    /* After the command's ")": state is field 3 and the start time field 22. */
    char *field = p + 2;
    for (int i = 3; i < 22 && field != NULL; i++) {
        field = strchr(field, ' ');
        if (field != NULL)
            field++;
    }
    if (field == NULL)
        return 1;
    unsigned long long start = strtoull(field, NULL, 10);
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *tasks = opendir(path);
    if (tasks == NULL)
        return 1;
    int threads = 0;
    struct dirent *e;
    while ((e = readdir(tasks)) != NULL)
        if (e->d_name[0] != '.')
            threads++;
    closedir(tasks);
    return (state == 'Z' && threads == 1) || start != since;
}

static int exits_in_time(pid_t pid, unsigned long long since) {
    struct timespec pause = {0, POLL_MS * 1000000L};
    for (int waited = 0; waited <= EXIT_MS; waited += POLL_MS) {
        if (exited(pid, since))
            return 1;
        nanosleep(&pause, NULL);
    }
    return 0;
}

/* A mountinfo field, its octal escapes (\040 for a space) undone in place. */
static void unescape(char *s) {
    char *out = s;
    while (*s) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 4;
        } else {
            *out++ = *s++;
        }
    }
    *out = '\0';
}

/* Whether the topmost mount at `point` is of `device` ("major:minor"). */
static int mounted_from(const char *point, const char *device) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return 0;
    char *line = NULL, found[64] = "";
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        char *save = NULL, *fields[5];
        int n = 0;
        for (char *t = strtok_r(line, " ", &save); t != NULL && n < 5;
             t = strtok_r(NULL, " ", &save))
            fields[n++] = t;
        if (n < 5)
            continue;
        unescape(fields[4]);
        if (strcmp(fields[4], point) == 0)
            snprintf(found, sizeof found, "%s", fields[2]);
    }
    free(line);
    fclose(f);
    return strcmp(found, device) == 0;
}

static int write_abort(const char *minor) {
    char control[128];
    snprintf(control, sizeof control, CONNECTIONS "/%s/abort", minor);
    int fd = open(control, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = write(fd, "1", 1);
    close(fd);
    return n == 1;
}

static void abort_connection(const char *device, const char *point) {
    const char *minor = strchr(device, ':');
    if (minor != NULL) {
        if (write_abort(minor + 1))
            return;
        /* Where nothing mounted the fusectl file system (no systemd), root mounts it at its
           place for the abort, and takes it away again: without it, a view detached by a lazy
           unmount before this moment could not be aborted at all, and its daemon would stay
           stuck for good. */
        struct statfs there;
        int mounted = statfs(CONNECTIONS, &there) == 0 && there.f_type == FUSECTL_SUPER_MAGIC;
        if (!mounted && geteuid() == 0 &&
            mount("fusectl", CONNECTIONS, "fusectl", 0, NULL) == 0) {
            int aborted = write_abort(minor + 1);
            umount2(CONNECTIONS, 0);
            if (aborted)
                return;
        }
    }
    /* Without fusectl: fuse's umount_begin aborts the connection; the unmount itself may then
       fail (busy). Only while the mount there is still the dead daemon's. */
    if (mounted_from(point, device))
        umount2(point, MNT_FORCE);
}

/* What the daemon wrote: the view once mounted, then "." when it stood the guard down. */
static size_t told(int fd, char *buf, size_t size) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

/* Every descriptor from 3 up but `keep` (close_range(2) where the kernel has it). */
static void close_all_but(int keep) {
    if ((keep <= 3 || close_range(3, (unsigned)keep - 1, 0) == 0) &&
        close_range((unsigned)keep + 1, ~0U, 0) == 0)
        return;
    long max = sysconf(_SC_OPEN_MAX);
    for (int i = 3; i < (max > 0 ? max : 1024); i++)
        if (i != keep)
            close(i);
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    pid_t parent = (pid_t)atoi(argv[1]);
    unsigned long long since = strtoull(argv[2], NULL, 10);
    int fd = atoi(argv[3]);
    sigset_t death;
    sigemptyset(&death);
    sigaddset(&death, SIGUSR1);
    sigprocmask(SIG_BLOCK, &death, NULL);
    /* A group's Ctrl-C or hangup ends the daemon: the guard is needed then most. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    /* Nothing of the daemon's stays open here (its log stays): its ready pipe, its lock. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null > 0)
        dup2(null, 0);
    close_all_but(fd);
    prctl(PR_SET_PDEATHSIG, SIGUSR1, 0, 0, 0);
    if (getppid() == parent) {
        int sig;
        sigwait(&death, &sig);
    }
    char buf[TOLD_MAX + 1];
    size_t n = told(fd, buf, TOLD_MAX);
    buf[n] = '\0';
    char *end = memchr(buf, '\n', n);
    char *nul = end != NULL ? memchr(buf, '\0', (size_t)(end - buf)) : NULL;
    if (nul == NULL || buf[n - 1] == '.')
        return 0;
    *end = '\0';
    if (!exits_in_time(parent, since))
        abort_connection(buf, nul + 1);
    return 0;
}
