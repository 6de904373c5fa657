/* The sandbox's forwarding client: a command that runs in a server.
 *
 * Built twice (sandbox/forwarding.py):
 * - jujuc, the hook tools client: as Juju's own jujuc, every hook tool
 *   (relation-get, status-set, ...) is this one small program under the
 *   tool's name; it hands its command line, environment and standard streams
 *   to the unit agent over a Unix socket ($JUJU_AGENT_SOCKET_ADDRESS) and
 *   exits with the code the agent answers (sandbox/juju/agent_socket.py).
 * - the machines' systemctl (-DSERVER_SOCKET=path -DFALLBACK=program): the
 *   same request to the machine's systemctl server (sandbox/systemctl.py
 *   serve()), a process that has systemctl3 loaded and forks for each call,
 *   as systemctl asks systemd over D-Bus; where the server cannot be reached
 *   (not started yet, or gone with a reboot) it execs FALLBACK, the Python
 *   systemctl itself, with its own arguments.
 *
 * Request: "JUJC", u32 length, then that many bytes: u32 argc, argc
 * NUL-terminated arguments, then NUL-terminated NAME=VALUE environment
 * entries; fds 0, 1 and 2 ride along (SCM_RIGHTS) with the first bytes.
 * Answer: an i32 exit code. Integers in the host's byte order (both ends
 * run on the same host).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

static int fail(const char *what, const char *detail) {
    fprintf(stderr, "ERROR %s: %s\n", what, detail);
    return 1;
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        /* an agent that hung up gives EPIPE, not a silent death by SIGPIPE */
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int append(char **buf, size_t *len, size_t *cap, const void *data, size_t n) {
    if (*len + n > *cap) {
        size_t want = (*cap ? *cap * 2 : 4096);
        while (want < *len + n)
            want *= 2;
        char *grown = realloc(*buf, want);
        if (!grown)
            return -1;
        *buf = grown;
        *cap = want;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    return 0;
}

/* Connect to a socket path of any length (sun_path holds 108 bytes): name
 * its directory through an open descriptor, /proc/self/fd/N/BASENAME. */
static int connect_agent(const char *address) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int dir = -1, rc = -1;
    char *copy_dir = strdup(address), *copy_base = strdup(address);
    if (!copy_dir || !copy_base)
        goto out;
    if (strlen(address) < sizeof sa.sun_path) {
        strcpy(sa.sun_path, address);
    } else {
        dir = open(dirname(copy_dir), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0)
            goto out;
        int n = snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/%s", dir,
                         basename(copy_base));
        if (n < 0 || (size_t)n >= sizeof sa.sun_path) {
            errno = ENAMETOOLONG;
            goto out;
        }
    }
    rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
out:;
    int saved = errno;
    if (dir >= 0)
        close(dir);
    free(copy_dir);
    free(copy_base);
    if (rc != 0) {
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

#ifdef FALLBACK
/* No server: run the command here. */
static int fall_back(char **argv) {
    execv(FALLBACK, argv);
    return fail("cannot run " FALLBACK, strerror(errno));
}
#endif

int main(int argc, char **argv) {
#ifdef SERVER_SOCKET
    const char *address = SERVER_SOCKET;
#else
    const char *address = getenv("JUJU_AGENT_SOCKET_ADDRESS");
    if (!address || !*address)
        return fail("JUJU_AGENT_SOCKET_ADDRESS is not set", "not running inside a sandbox hook");
#endif

    /* A closed standard stream cannot be passed: stand /dev/null in. */
    for (int i = 0; i < 3; i++)
        if (fcntl(i, F_GETFD) < 0 && open("/dev/null", i == 0 ? O_RDONLY : O_WRONLY) != i)
            return fail("cannot open /dev/null", strerror(errno));

    char *body = NULL;
    size_t len = 0, cap = 0;
    uint32_t count = (uint32_t)argc;
    if (append(&body, &len, &cap, &count, sizeof count) != 0)
        return fail("out of memory", "request");
    for (int i = 0; i < argc; i++)
        if (append(&body, &len, &cap, argv[i], strlen(argv[i]) + 1) != 0)
            return fail("out of memory", "request");
    for (char **e = environ; *e; e++)
        if (append(&body, &len, &cap, *e, strlen(*e) + 1) != 0)
            return fail("out of memory", "request");

    int sock = connect_agent(address);
#ifdef FALLBACK
    if (sock < 0)
        return fall_back(argv);
#endif
    if (sock < 0) {
        char what[4200];
        snprintf(what, sizeof what, "cannot reach the unit agent at %s", address);
        return fail(what, strerror(errno));
    }

    char header[8] = {'J', 'U', 'J', 'C'};
    uint32_t body_len = (uint32_t)len;
    memcpy(header + 4, &body_len, sizeof body_len);
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = header, .iov_len = sizeof header};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent;
    do
        sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent != (ssize_t)sizeof header || write_all(sock, body, len) != 0)
        return fail("cannot talk to the unit agent", strerror(errno));
    free(body);

    int32_t code;
    size_t got = 0;
    while (got < sizeof code) {
        ssize_t n = read(sock, (char *)&code + got, sizeof code - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fail("the unit agent closed the connection", n == 0 ? "no exit code" :
                        strerror(errno));
        got += (size_t)n;
    }
    close(sock);
    return (int)code;
}
