/* The floor: what a server can't go below on this machine.
 *
 * It answers every HTTP/1.1 request on a keep-alive connection with one file held in
 * memory, using one read and one write per request and nothing else: no parsing beyond
 * finding the end of each request head, no file check, no logging, no date. One process
 * per CPU, each with its own SO_REUSEPORT listener and epoll, like nginx's workers.
 * `FLOOR=1 bench/run.sh` benches it beside the real servers (static-1k and text-gzip
 * only), so a target ratio can be compared with what one read and one write cost here.
 *
 * usage: floor PORT FILE [CONTENT-ENCODING]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FDS 65536

/* Per connection: how much of "\r\n\r\n" the bytes read so far end with. */
static unsigned char matched[MAX_FDS];

static pid_t children[1024];
static int nchildren;

/* The first process, stopped by the bench, stops the others and waits for them, so that
 * none is left listening on the port when it is gone. */
static void stop(int sig) {
    (void)sig;
    for (int i = 0; i < nchildren; i++)
        kill(children[i], SIGTERM);
    for (int i = 0; i < nchildren; i++)
        waitpid(children[i], NULL, 0);
    _exit(0);
}

static char *response;
static size_t response_len;

static int load(const char *path, const char *encoding) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        perror(path);
        fclose(f);
        return -1;
    }
    char head[512];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
                     "%s%s%scontent-length: %lld\r\n\r\n",
                     encoding ? "content-encoding: " : "", encoding ? encoding : "",
                     encoding ? "\r\n" : "", (long long)st.st_size);
    response_len = (size_t)n + (size_t)st.st_size;
    response = malloc(response_len);
    if (!response) {
        fclose(f);
        return -1;
    }
    memcpy(response, head, (size_t)n);
    if (fread(response + n, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        perror(path);
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

/* Writes the whole answer. Connection sockets are blocking, reads use MSG_DONTWAIT: a
 * client that stops reading stalls its worker, which a bench's client never does. */
static int answer(int fd) {
    size_t off = 0;
    while (off < response_len) {
        ssize_t w = send(fd, response + off, response_len - off, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

static void serve(int port) {
    int one = 1;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 4096) != 0) {
        perror("bind");
        exit(1);
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event evs[256];
    char buf[16384];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, 0)) >= 0) {
                    if (c >= MAX_FDS) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    matched[c] = 0;
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
                }
                continue;
            }
            /* Level-triggered: one read per readiness; what is left comes back. */
            ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0) {
                close(fd);
                continue;
            }
            int heads = 0;
            unsigned char m = matched[fd];
            for (ssize_t j = 0; j < r; j++) {
                char want = (m % 2 == 0) ? '\r' : '\n';
                if (buf[j] == want)
                    m++;
                else
                    m = buf[j] == '\r' ? 1 : 0;
                if (m == 4) {
                    heads++;
                    m = 0;
                }
            }
            matched[fd] = m;
            for (int k = 0; k < heads; k++) {
                if (answer(fd) != 0) {
                    close(fd);
                    break;
                }
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: floor PORT FILE [CONTENT-ENCODING]\n");
        return 2;
    }
    if (load(argv[2], argc > 3 ? argv[3] : NULL) != 0)
        return 1;
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    pid_t first = getpid();
    for (long i = 1; i < cpus && nchildren < 1024; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            nchildren = 0;
            /* Should the first process die without stopping us, go with it. */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != first)
                return 0;
            break;
        }
        if (pid > 0)
            children[nchildren++] = pid;
    }
    if (getpid() == first) {
        signal(SIGTERM, stop);
        signal(SIGINT, stop);
    }
    serve(atoi(argv[1]));
    return 0;
}
