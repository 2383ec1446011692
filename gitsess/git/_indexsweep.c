/* git's index entries (`.git/index`, versions 2 to 4) read, and checked against a worktree's
 * `lstat` as git checks them, in C (see gitsess/git/indexfile.py, gitsess/overlay/index_view.py):
 * gitsess reads entries nowhere else.
 *
 * The view's daemon sweeps the real index before a session's first `git status`: 5,000 entries
 * read and `lstat`-ed in Python took 10 ms and 20-40 ms of the daemon's GIL, on git's path while
 * git's own requests waited for that GIL. Here the GIL is released for all but the conversion
 * of the arguments and of the answer, and the `lstat`s are spread over threads. What is dirty
 * is what `index_view`'s former Python sweep found (tests/git/test_indexsweep.py checks it). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ENTRY_FIXED 62 /* ten 32-bit fields, the object id, the flags */
#define EXTENDED 0x4000
#define STAGE 0x3000
#define GITLINK 0160000
#define MAX_THREADS 64

struct entry {
    uint32_t c_s, c_ns, m_s, m_ns, ino, mode, uid, gid, size, flags;
    size_t path; /* offset of its NUL-terminated path in `entries.paths` */
    size_t len;
    int dirty;
};

struct entries {
    struct entry *e;
    size_t n;
    char *paths;
};

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* git's offset varint (`decode_varint`); 0 when it runs past `end`. */
static int varint(const unsigned char **at, const unsigned char *end, size_t *value) {
    const unsigned char *p = *at;
    if (p >= end)
        return 0;
    unsigned char byte = *p++;
    size_t v = byte & 0x7f;
    while (byte & 0x80) {
        if (p >= end || v > (SIZE_MAX >> 8))
            return 0;
        byte = *p++;
        v = ((v + 1) << 7) | (byte & 0x7f);
    }
    *value = v;
    *at = p;
    return 1;
}

/* The entries of index `data` (`size` bytes, its checksum included), as indexfile.parse walks
 * them; with `out` NULL only walked. Where they end, or 0 when they cannot be read (-1 when
 * out of memory). */
static Py_ssize_t walk(const unsigned char *data, size_t size, struct entries *out) {
    if (size < 12 + 20 || memcmp(data, "DIRC", 4))
        return 0;
    uint32_t version = be32(data + 4), count = be32(data + 8);
    if (version < 2 || version > 4 || count > size / ENTRY_FIXED)
        return 0;
    const unsigned char *end = data + size, *at = data + 12;
    size_t last = 0, last_len = 0, used = 0;
    if (out) {
        /* Each path at most as long as the file, each with its NUL: v4 paths can be longer
         * than their bytes in the file, so the arena grows as needed. */
        out->e = calloc(count ? count : 1, sizeof *out->e);
        out->paths = malloc(size + 1);
        out->n = 0;
        if (!out->e || !out->paths)
            return -1;
    }
    size_t cap = size + 1;
    for (uint32_t i = 0; i < count; i++) {
        if ((size_t)(end - at) < ENTRY_FIXED)
            return 0;
        const unsigned char *fields = at;
        uint32_t flags = (uint32_t)fields[60] << 8 | fields[61];
        const unsigned char *name = at + ENTRY_FIXED + (flags & EXTENDED ? 2 : 0);
        if (name > end)
            return 0;
        size_t strip = 0, prefix = 0, len;
        if (version == 4) {
            if (!varint(&name, end, &strip) || strip > last_len)
                return 0;
            const unsigned char *nul = memchr(name, 0, end - name);
            if (!nul)
                return 0;
            prefix = last_len - strip;
            len = prefix + (nul - name);
            at = nul + 1;
        } else {
            size_t namelen = flags & 0xfff;
            const unsigned char *stop;
            if (namelen < 0xfff) {
                stop = name + namelen;
                if (stop > end)
                    return 0;
            } else {
                stop = memchr(name, 0, end - name);
                if (!stop)
                    return 0;
            }
            len = stop - name;
            /* (the entry padded with NULs to a multiple of 8, one at least) */
            size_t entry = stop - at;
            at += (entry + 8) & ~(size_t)7;
            if (at > end)
                return 0;
        }
        if (out) {
            if (used + len + 1 > cap) {
                size_t grown = cap * 2 > used + len + 1 ? cap * 2 : used + len + 1;
                char *p = realloc(out->paths, grown);
                if (!p)
                    return -1;
                out->paths = p;
                cap = grown;
            }
            char *dst = out->paths + used;
            memmove(dst, out->paths + last, prefix);
            if (version == 4)
                memcpy(dst + prefix, name, len - prefix);
            else
                memcpy(dst, name, len);
            dst[len] = 0;
            struct entry *e = &out->e[out->n++];
            e->c_s = be32(fields);
            e->c_ns = be32(fields + 4);
            e->m_s = be32(fields + 8);
            e->m_ns = be32(fields + 12);
            e->ino = be32(fields + 20);
            e->mode = be32(fields + 24);
            e->uid = be32(fields + 28);
            e->gid = be32(fields + 32);
            e->size = be32(fields + 36);
            e->flags = flags;
            e->path = used;
            e->len = len;
            last = used;
            used += len + 1;
        }
        last_len = len;
    }
    return at - data;
}

static int git_mode(mode_t mode) {
    if (S_ISLNK(mode))
        return 0120000;
    if (S_ISREG(mode))
        return mode & 0100 ? 0100755 : 0100644;
    return -1;
}

static long long ns(long long s, long long n) { return s * 1000000000LL + n; }

/* Whether git would find the entry clean from its stat data alone: they match the file's, and
 * it is not racily clean (`racy_from`: the index's mtime, in seconds). */
static int clean(int root, const char *path, const struct entry *e, long long racy_from) {
    struct stat st;
    if (root < 0 || e->flags & STAGE || (long long)e->m_s >= racy_from)
        return 0;
    if (fstatat(root, path, &st, AT_SYMLINK_NOFOLLOW))
        return 0;
    return ns(st.st_mtim.tv_sec, st.st_mtim.tv_nsec) == ns(e->m_s, e->m_ns) &&
           ns(st.st_ctim.tv_sec, st.st_ctim.tv_nsec) == ns(e->c_s, e->c_ns) &&
           (uint32_t)st.st_ino == e->ino && st.st_uid == e->uid && st.st_gid == e->gid &&
           (uint32_t)st.st_size == e->size && (long long)git_mode(st.st_mode) == (long long)e->mode;
}

/* A directory of the untracked cache, with the stat data git last saw it with. */
struct dir {
    const char *path;
    long long c_s, c_ns, m_s, m_ns, ino, uid, gid, size;
    int dirty;
};

/* git's `match_stat_data_racy` of a directory. */
static int same_dir(int root, const struct dir *d, long long racy_from) {
    struct stat st;
    if (root < 0 || d->m_s >= racy_from || fstatat(root, d->path, &st, AT_SYMLINK_NOFOLLOW))
        return 0;
    return ns(st.st_mtim.tv_sec, st.st_mtim.tv_nsec) == ns(d->m_s, d->m_ns) &&
           ns(st.st_ctim.tv_sec, st.st_ctim.tv_nsec) == ns(d->c_s, d->c_ns) &&
           (long long)(st.st_ino & 0xffffffffu) == d->ino && (long long)st.st_uid == d->uid &&
           (long long)st.st_gid == d->gid && (long long)(st.st_size & 0xffffffffu) == d->size;
}

struct sweep {
    int root;
    long long racy_from;
    struct entries *entries;
    struct dir *dirs;
    size_t ndirs;
    int threads;
};

struct part {
    struct sweep *s;
    int nth;
};

/* One thread's share: every `threads`-th entry and directory from its own. */
static void *sweep_part(void *arg) {
    struct part *p = arg;
    struct sweep *s = p->s;
    for (size_t i = p->nth; i < s->entries->n; i += s->threads) {
        struct entry *e = &s->entries->e[i];
        if ((e->mode & 0170000) != GITLINK)
            e->dirty = !clean(s->root, s->entries->paths + e->path, e, s->racy_from);
    }
    for (size_t i = p->nth; i < s->ndirs; i += s->threads)
        s->dirs[i].dirty = !same_dir(s->root, &s->dirs[i], s->racy_from);
    return NULL;
}

/* Runs the sweep on `threads` threads, this one among them (fewer if some cannot start). */
static void sweep_all(struct sweep *s) {
    pthread_t ts[MAX_THREADS];
    struct part parts[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < s->threads; t++) {
        parts[t] = (struct part){s, t};
        if (pthread_create(&ts[started], NULL, sweep_part, &parts[t]))
            break;
        started++;
    }
    if (started + 1 < s->threads) {
        /* (the threads that did not start: their shares, here) */
        for (int t = started + 1; t < s->threads; t++) {
            parts[t] = (struct part){s, t};
            sweep_part(&parts[t]);
        }
    }
    parts[0] = (struct part){s, 0};
    sweep_part(&parts[0]);
    for (int t = 0; t < started; t++)
        pthread_join(ts[t], NULL);
}

static PyObject *entries_end(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "expected bytes");
        return NULL;
    }
    Py_ssize_t end;
    Py_BEGIN_ALLOW_THREADS
    end = walk((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg), NULL);
    Py_END_ALLOW_THREADS
    if (end <= 0)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(end);
}

/* `list`: a tuple (see `sweep`), whose items' paths stay alive while the GIL is released. */
static PyObject *paths(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "expected bytes");
        return NULL;
    }
    struct entries entries = {0};
    Py_ssize_t end;
    Py_BEGIN_ALLOW_THREADS
    end = walk((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg), &entries);
    Py_END_ALLOW_THREADS
    PyObject *list = NULL;
    if (end < 0)
        PyErr_NoMemory();
    else if (end == 0)
        list = Py_NewRef(Py_None);
    else if ((list = PyList_New(0))) {
        for (size_t i = 0; i < entries.n; i++) {
            struct entry *e = &entries.e[i];
            if ((e->mode & 0170000) == GITLINK)
                continue;
            PyObject *p = PyBytes_FromStringAndSize(entries.paths + e->path, e->len);
            if (!p || PyList_Append(list, p)) {
                Py_XDECREF(p);
                Py_CLEAR(list);
                break;
            }
            Py_DECREF(p);
        }
    }
    free(entries.e);
    free(entries.paths);
    return list;
}

static int read_dirs(PyObject *list, struct dir **out, size_t *n) {
    *n = PyTuple_GET_SIZE(list);
    *out = calloc(*n ? *n : 1, sizeof **out);
    if (!*out) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < *n; i++) {
        PyObject *item = PyTuple_GET_ITEM(list, i), *path, *seen;
        long long v[9];
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBytes_Check(path = PyTuple_GET_ITEM(item, 0)) ||
            !PyTuple_Check(seen = PyTuple_GET_ITEM(item, 1)) || PyTuple_GET_SIZE(seen) != 9) {
            PyErr_SetString(PyExc_TypeError, "dirs: expected (path: bytes, stat: 9 ints)");
            return -1;
        }
        if (strlen(PyBytes_AS_STRING(path)) != (size_t)PyBytes_GET_SIZE(path)) {
            PyErr_SetString(PyExc_ValueError, "dirs: embedded null byte");
            return -1;
        }
        for (int k = 0; k < 9; k++) {
            v[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(seen, k));
            if (v[k] == -1 && PyErr_Occurred())
                return -1;
        }
        (*out)[i] = (struct dir){PyBytes_AS_STRING(path), v[0], v[1], v[2], v[3],
                                 v[5], v[6], v[7], v[8], 0};
    }
    return 0;
}

/* Whatever the outcome, what `sweep` allocated goes. */
static void release(struct entries *entries, struct dir *dirs, int root) {
    free(entries->e);
    free(entries->paths);
    free(dirs);
    if (root >= 0)
        close(root);
}

static PyObject *sweep(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) ||
        !PyLong_Check(args[2]) || !PyLong_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "expected (index: bytes, worktree: bytes, racy_from: int, dirs: list,"
                        " threads: int)");
        return NULL;
    }
    const char *worktree = PyBytes_AS_STRING(args[1]);
    if (strlen(worktree) != (size_t)PyBytes_GET_SIZE(args[1])) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return NULL;
    }
    long long racy_from = PyLong_AsLongLong(args[2]);
    long threads = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_SetString(PyExc_ValueError, "threads out of range");
        return NULL;
    }
    struct entries entries = {0};
    struct dir *dirs = NULL;
    size_t ndirs = 0;
    int root = -1;
    if (!PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "dirs: expected a list");
        return NULL;
    }
    /* A tuple of the list's items: the list may change while the GIL is released. */
    PyObject *held = PySequence_Tuple(args[3]);
    if (!held)
        return NULL;
    if (read_dirs(held, &dirs, &ndirs)) {
        release(&entries, dirs, root);
        Py_DECREF(held);
        return NULL;
    }
    Py_ssize_t end;
    Py_BEGIN_ALLOW_THREADS
    end = walk((const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
               &entries);
    if (end > 0) {
        /* (no worktree: every `lstat` fails, everything is dirty) */
        root = open(worktree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct sweep s = {root, racy_from, &entries, dirs, ndirs, (int)threads};
        sweep_all(&s);
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(held);
    if (end < 0) {
        release(&entries, dirs, root);
        return PyErr_NoMemory();
    }
    if (end == 0) {
        release(&entries, dirs, root);
        Py_RETURN_NONE;
    }
    PyObject *paths = PyList_New(0), *stale = PyList_New(0), *result = NULL;
    if (!paths || !stale)
        goto done;
    for (size_t i = 0; i < entries.n; i++) {
        struct entry *e = &entries.e[i];
        if (!e->dirty)
            continue;
        PyObject *p = PyBytes_FromStringAndSize(entries.paths + e->path, e->len);
        if (!p || PyList_Append(paths, p)) {
            Py_XDECREF(p);
            goto done;
        }
        Py_DECREF(p);
    }
    for (size_t i = 0; i < ndirs; i++) {
        if (!dirs[i].dirty)
            continue;
        PyObject *k = PyLong_FromSize_t(i);
        if (!k || PyList_Append(stale, k)) {
            Py_XDECREF(k);
            goto done;
        }
        Py_DECREF(k);
    }
    result = PyTuple_Pack(2, paths, stale);
done:
    Py_XDECREF(paths);
    Py_XDECREF(stale);
    release(&entries, dirs, root);
    return result;
}

static PyMethodDef methods[] = {
    {"entries_end", entries_end, METH_O,
     "Where the entries of index `data` end (its extensions start); None when they cannot be"
     " read (not an index of version 2 to 4, cut short). The checksum is not checked."},
    {"paths", paths, METH_O,
     "The paths of the entries of index `data`, in its order, gitlinks left out; None when"
     " they cannot be read."},
    {"sweep", (PyCFunction)(void (*)(void))sweep, METH_FASTCALL,
     "The entries of index `data` whose file in `worktree` git would not find clean from its"
     " stat data (no file, other stat data, racily clean from `racy_from` seconds, a merge"
     " stage; gitlinks never), and the indexes into `dirs` ((path, the untracked cache's stat"
     " data)) of the directories not as git last saw them; `threads` threads `lstat`. None"
     " when the entries cannot be read."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gitsess.git._indexsweep",
    .m_doc = "git's index entries checked against a worktree's lstat, in C, without the GIL.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__indexsweep(void) { return PyModule_Create(&module); }
