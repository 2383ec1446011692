/* git's core.fsmonitor hook (protocol version 2), compiled: `fsmonitor_hook.py` in C.

   git runs the hook for every `git status` inside a session; `python -S` took 15-23 ms of a
   50 ms first status to start, this takes about one. It speaks as the Python hook does: the
   daemon's abstract socket name is in the session dir's control file
   (`$GITSESS_DIR/sessions/$GITSESS_SESSION_ID/control`), the daemon must be of this user or
   root (SO_PEERCRED), one JSON line goes out ({"op": "fsmonitor", "token": ...}) and one
   comes back ({"ok": true, "token": ..., "paths": [...] or null}). Any failure (no daemon, a
   stranger's socket, a reply it cannot read, a token that is not plain ASCII) answers
   "everything may have changed": the token `gitsess:unknown` and the path "/". Built by the
   install when a C compiler is there (setup.py); without it the Python hook serves. */

#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>

#define UNKNOWN "gitsess:unknown"
#define TIMEOUT_S 5
#define MAX_REPLY (256u << 20)

struct buf {
    char *p;
    size_t len, cap;
};

static int put(struct buf *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static int putc1(struct buf *b, char c) { return put(b, &c, 1); }

/* ---------------------------------------------------------------- JSON, what the reply holds */

struct parser {
    const char *s, *end;
};

static void ws(struct parser *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int hex4(struct parser *p, unsigned *out)
{
    unsigned v = 0;
    if (p->end - p->s < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = *p->s++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static int utf8(struct buf *b, unsigned cp)
{
    char o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (char)(0xF0 | cp >> 18);
        o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return put(b, o, n);
}

/* A JSON string into `out` (NULL: skipped) as the bytes Python's `os.fsencode` gives: a lone
   surrogate U+DC80..U+DCFF is the byte the daemon's `os.fsdecode` read (surrogateescape). */
static int string(struct parser *p, struct buf *out)
{
    struct buf skip = {0};
    if (!out)
        out = &skip;
    if (p->s >= p->end || *p->s != '"')
        return -1;
    p->s++;
    int rc = -1;
    while (p->s < p->end) {
        char c = *p->s++;
        if (c == '"') {
            rc = 0;
            break;
        }
        if ((unsigned char)c < 0x20)
            break;
        if (c != '\\') {
            if (putc1(out, c))
                break;
            continue;
        }
        if (p->s >= p->end)
            break;
        c = *p->s++;
        const char *plain = strchr("\"\\/bfnrt", c);
        if (c && plain) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            if (putc1(out, to[plain - "\"\\/bfnrt"]))
                break;
            continue;
        }
        unsigned cp, low;
        if (c != 'u' || hex4(p, &cp))
            break;
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (p->end - p->s < 6 || p->s[0] != '\\' || p->s[1] != 'u')
                break;
            p->s += 2;
            if (hex4(p, &low) || low < 0xDC00 || low >= 0xE000)
                break;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            if (cp < 0xDC80 || cp > 0xDCFF || putc1(out, (char)(cp - 0xDC00)))
                break;
            continue;
        }
        if (cp == 0 || utf8(out, cp))
            break; /* (a NUL would end the path in git's reading) */
    }
    free(skip.p);
    return rc;
}

static int literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n))
        return -1;
    p->s += n;
    return 0;
}

static int skip(struct parser *p, int depth)
{
    ws(p);
    if (p->s >= p->end || depth > 64)
        return -1;
    char c = *p->s;
    if (c == '"')
        return string(p, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->s++;
        ws(p);
        if (p->s < p->end && *p->s == close) {
            p->s++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                ws(p);
                if (string(p, NULL))
                    return -1;
                ws(p);
                if (p->s >= p->end || *p->s++ != ':')
                    return -1;
            }
            if (skip(p, depth + 1))
                return -1;
            ws(p);
            if (p->s >= p->end)
                return -1;
            if (*p->s == ',') {
                p->s++;
                continue;
            }
            if (*p->s++ != close)
                return -1;
            return 0;
        }
    }
    if (!literal(p, "true") || !literal(p, "false") || !literal(p, "null"))
        return 0;
    const char *start = p->s;
    while (p->s < p->end && *p->s && strchr("+-.0123456789eE", *p->s))
        p->s++;
    return p->s > start ? 0 : -1;
}

struct reply {
    int ok, has_paths, paths_seen;
    struct buf token, paths; /* paths: each followed by a NUL */
};

static int paths(struct parser *p, struct reply *r)
{
    r->paths_seen = 1;
    ws(p);
    if (!literal(p, "null"))
        return 0;
    if (p->s >= p->end || *p->s++ != '[')
        return -1;
    r->has_paths = 1;
    ws(p);
    if (p->s < p->end && *p->s == ']') {
        p->s++;
        return 0;
    }
    for (;;) {
        ws(p);
        size_t at = r->paths.len;
        if (string(p, &r->paths) || putc1(&r->paths, 0))
            return -1;
        if (r->paths.len == at + 1)
            return -1; /* an empty path */
        ws(p);
        if (p->s >= p->end)
            return -1;
        char c = *p->s++;
        if (c == ']')
            return 0;
        if (c != ',')
            return -1;
    }
}

static int parse_reply(const char *s, size_t n, struct reply *r)
{
    struct parser p = {s, s + n};
    ws(&p);
    if (p.s >= p.end || *p.s++ != '{')
        return -1;
    int token = 0;
    for (;;) {
        ws(&p);
        struct buf key = {0};
        if (string(&p, &key)) {
            free(key.p);
            return -1;
        }
        ws(&p);
        int rc = p.s < p.end && *p.s++ == ':' ? 0 : -1;
        if (!rc && key.p && !strcmp(key.p, "ok")) {
            ws(&p);
            r->ok = !literal(&p, "true");
            rc = r->ok || !skip(&p, 0) ? 0 : -1;
        } else if (!rc && key.p && !strcmp(key.p, "token")) {
            ws(&p);
            rc = string(&p, &r->token);
            token = !rc;
        } else if (!rc && key.p && !strcmp(key.p, "paths")) {
            rc = paths(&p, r);
        } else if (!rc) {
            rc = skip(&p, 0);
        }
        free(key.p);
        if (rc)
            return -1;
        ws(&p);
        if (p.s >= p.end)
            return -1;
        char c = *p.s++;
        if (c == '}')
            break;
        if (c != ',')
            return -1;
    }
    return r->ok && token && r->paths_seen && r->token.len && !memchr(r->token.p, 0, r->token.len) ? 0 : -1;
}

/* ---------------------------------------------------------------- asking the daemon */

static int read_file(const char *path, struct buf *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char chunk[256];
    ssize_t n;
    int rc = 0;
    while ((n = read(fd, chunk, sizeof chunk)) > 0)
        if (put(out, chunk, (size_t)n)) {
            rc = -1;
            break;
        }
    close(fd);
    return n < 0 ? -1 : rc;
}

static int send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int ask(const char *session_dir, const char *token, struct reply *r)
{
    for (const char *t = token; *t; t++)
        if ((unsigned char)*t >= 0x80)
            return -1; /* (every token the daemon gives is ASCII) */
    struct buf path = {0}, name = {0}, req = {0}, in = {0};
    int fd = -1, rc = -1;
    if (put(&path, session_dir, strlen(session_dir)) || put(&path, "/control", 8) ||
        read_file(path.p, &name) || name.len == 0)
        goto out;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (name.len + 1 > sizeof addr.sun_path)
        goto out;
    memcpy(addr.sun_path + 1, name.p, name.len); /* abstract: a NUL, then the name */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto out;
    struct timeval tv = {.tv_sec = TIMEOUT_S};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) ||
        connect(fd, (struct sockaddr *)&addr,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name.len)))
        goto out;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) || len != sizeof cred ||
        (cred.uid != geteuid() && cred.uid != 0))
        goto out; /* someone else holds the name: not our daemon */
    if (put(&req, "{\"op\": \"fsmonitor\", \"token\": \"", 30))
        goto out;
    for (const char *t = token; *t; t++) {
        char esc[8];
        unsigned char c = (unsigned char)*t;
        if (c < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", c);
        else if (c == '"' || c == '\\')
            snprintf(esc, sizeof esc, "\\%c", c);
        else
            snprintf(esc, sizeof esc, "%c", c);
        if (put(&req, esc, strlen(esc)))
            goto out;
    }
    if (put(&req, "\"}\n", 3) || send_all(fd, req.p, req.len))
        goto out;
    char chunk[65536];
    while (in.len == 0 || in.p[in.len - 1] != '\n') {
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0 || in.len + (size_t)n > MAX_REPLY || put(&in, chunk, (size_t)n))
            goto out;
    }
    rc = parse_reply(in.p, in.len, r);
out:
    if (fd >= 0)
        close(fd);
    free(path.p);
    free(name.p);
    free(req.p);
    free(in.p);
    return rc;
}

static int write_all(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(1, s, n);
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "2"))
        return 1; /* git falls back to a full scan for other protocol versions */
    const char *dir = getenv("GITSESS_DIR"), *id = getenv("GITSESS_SESSION_ID");
    struct buf session_dir = {0};
    struct reply r = {0};
    int asked = -1;
    if (id && *id && !strchr(id, '/') &&
        !put(&session_dir, dir ? dir : "", dir ? strlen(dir) : 0) &&
        !put(&session_dir, dir && *dir ? "/sessions/" : "sessions/", dir && *dir ? 10 : 9) &&
        !put(&session_dir, id, strlen(id)))
        asked = ask(session_dir.p, argv[2], &r);
    if (asked == 0)
        write_all(r.token.p, r.token.len + 1); /* with its NUL */
    else
        write_all(UNKNOWN, sizeof UNKNOWN); /* (sizeof: with the NUL) */
    if (asked == 0 && r.has_paths)
        write_all(r.paths.p ? r.paths.p : "", r.paths.len);
    else
        write_all("/", 2);
    return 0;
}
