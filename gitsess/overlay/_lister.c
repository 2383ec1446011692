/* Threads that list directories, outside Python (see gitsess/overlay/listahead.py): what they
 * read is thrown away, the kernel's caches they fill are the point. They never take the GIL, so
 * the daemon's thread serving FUSE requests in Python does not compete with them for it. One
 * set per process: `stop` is for good. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LISTER_SLOTS 1024

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work;
    char *queue[LISTER_SLOTS];
    int head;
    int queued;
    int busy; /* listings in flight */
    int stopped;
    int threads;
} lister = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER};

/* What getdents64 fills its buffer with. */
struct lister_dirent {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

#define READ_AHEAD_FILE (128 * 1024)
#define READ_AHEAD_DIR (8 * 1024 * 1024)

/* Start the disk on the start of file `name` of directory `dirfd`: how many bytes were asked. */
static long lister_read_ahead(int dirfd, const char *name) {
    struct stat st;
    long asked = 0;
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        asked = st.st_size < READ_AHEAD_FILE ? st.st_size : READ_AHEAD_FILE;
        posix_fadvise(fd, 0, asked, POSIX_FADV_WILLNEED);
    }
    close(fd);
    return asked;
}

/* A queued item is its path after one byte: 'l' to list the directory, 's' to lstat every
 * entry too, 'r' to start reading its files (READ_AHEAD_FILE of each, READ_AHEAD_DIR in all). */
static void lister_list(const char *item) {
    char buf[16384];
    struct stat st;
    long n, budget = READ_AHEAD_DIR;
    int fd = open(item + 1, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        if (item[0] == 'l')
            continue;
        for (long at = 0; at < n;) {
            struct lister_dirent *d = (struct lister_dirent *)(buf + at);
            at += d->d_reclen;
            if (item[0] == 'r') {
                if (d->d_type == DT_REG && budget > 0)
                    budget -= lister_read_ahead(fd, d->d_name);
            } else if (strcmp(d->d_name, ".") && strcmp(d->d_name, ".."))
                fstatat(fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW);
        }
    }
    /* A listing marks the directory's atime stale in the kernel (fuse_invalidate_atime), so
     * the next stat of it, glibc's opendir() for one, would be a GETATTR on the client's path:
     * it is asked here instead. */
    if (item[0] == 'l')
        fstat(fd, &st);
    close(fd);
}

static void *lister_run(void *unused) {
    (void)unused;
    pthread_mutex_lock(&lister.lock);
    for (;;) {
        while (!lister.queued && !lister.stopped)
            pthread_cond_wait(&lister.work, &lister.lock);
        if (lister.stopped)
            break;
        char *path = lister.queue[lister.head];
        lister.head = (lister.head + 1) % LISTER_SLOTS;
        lister.queued--;
        lister.busy++;
        pthread_mutex_unlock(&lister.lock);
        lister_list(path);
        free(path);
        pthread_mutex_lock(&lister.lock);
        lister.busy--;
    }
    lister.threads--;
    pthread_mutex_unlock(&lister.lock);
    return NULL;
}

/* Queue `path` with its `mode` (see lister_list), starting threads first until `threads` run;
 * 0 when it was not queued (stopped, queue full, no memory, no thread). */
static int lister_add(const char *path, char mode, int threads) {
    int added = 0;
    pthread_mutex_lock(&lister.lock);
    while (!lister.stopped && lister.threads < threads) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        int failed = pthread_create(&t, &attr, lister_run, NULL);
        pthread_attr_destroy(&attr);
        if (failed)
            break;
        lister.threads++;
    }
    if (!lister.stopped && lister.threads && lister.queued < LISTER_SLOTS) {
        size_t len = strlen(path);
        char *copy = malloc(len + 2);
        if (copy) {
            copy[0] = mode;
            memcpy(copy + 1, path, len + 1);
            lister.queue[(lister.head + lister.queued) % LISTER_SLOTS] = copy;
            lister.queued++;
            pthread_cond_signal(&lister.work);
            added = 1;
        }
    }
    pthread_mutex_unlock(&lister.lock);
    return added;
}

/* The Python entry points: (path: bytes, threads: int) -> bool for each mode. */
static PyObject *queue(PyObject *const *args, Py_ssize_t nargs, char mode) {
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "expected (path: bytes, threads: int)");
        return NULL;
    }
    long threads = PyLong_AsLong(args[1]);
    if (threads == -1 && PyErr_Occurred())
        return NULL;
    if (threads < 0 || threads > 1024) {
        PyErr_SetString(PyExc_ValueError, "threads out of range");
        return NULL;
    }
    const char *path = PyBytes_AS_STRING(args[0]);
    if (strlen(path) != (size_t)PyBytes_GET_SIZE(args[0])) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return NULL;
    }
    int added;
    Py_BEGIN_ALLOW_THREADS
    added = lister_add(path, mode, (int)threads);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(added);
}

static PyObject *list_ahead(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return queue(args, nargs, 'l');
}

static PyObject *stat_ahead(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return queue(args, nargs, 's');
}

static PyObject *read_ahead(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return queue(args, nargs, 'r');
}

static PyObject *stop(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&lister.lock);
    lister.stopped = 1;
    while (lister.queued) {
        free(lister.queue[lister.head]);
        lister.head = (lister.head + 1) % LISTER_SLOTS;
        lister.queued--;
    }
    pthread_cond_broadcast(&lister.work);
    pthread_mutex_unlock(&lister.lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *pending(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    int n;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&lister.lock);
    n = lister.queued + lister.busy;
    pthread_mutex_unlock(&lister.lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(n);
}

static PyMethodDef methods[] = {
    {"list_ahead", (PyCFunction)(void (*)(void))list_ahead, METH_FASTCALL,
     "Queue directory `path` to be listed by one of up to `threads` threads; False when not"
     " queued (after `stop`, or the queue is full)."},
    {"stat_ahead", (PyCFunction)(void (*)(void))stat_ahead, METH_FASTCALL,
     "Like `list_ahead`, and lstat every entry too."},
    {"read_ahead", (PyCFunction)(void (*)(void))read_ahead, METH_FASTCALL,
     "Like `list_ahead`, and start the disk on the first 128 KiB of each file (8 MiB in all)."},
    {"stop", stop, METH_NOARGS,
     "Queue nothing from now on and drop what is queued; listings in flight go on."},
    {"pending", pending, METH_NOARGS, "Listings queued or in flight."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gitsess.overlay._lister",
    .m_doc = "Directory listings ahead, in threads of C that never take the GIL.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__lister(void) { return PyModule_Create(&module); }
