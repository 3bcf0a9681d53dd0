/* The floor of a hit over a large header tree: what the `stat`s a manifest
 * check makes cost on this machine, with nothing of kcache around them
 * (docs/performance.md, "Process start"; docs/history/performance-jit.md,
 * "What a header stat costs").
 *
 * Usage: stat_floor MANIFEST_OR_LIST [REPEATS=30] [MAX_THREADS=8]
 *   MANIFEST_OR_LIST: a header manifest (its `header ... N:path` lines are
 *   taken) or a file of absolute paths, one per line.
 * Prints, for the N paths, the best of REPEATS passes (µs, wall) of:
 *   null     N getppid() calls: a system call's own entry and exit
 *   abs      stat() of each whole path
 *   rel      fstatat() of each name relative to its directory, opened first
 *            (O_PATH; the opens are not timed): what kcache's check does
 *   rel+open the same with each directory opened and closed in the pass
 *   fd       fstatat(AT_EMPTY_PATH) on an O_PATH descriptor of each file: no
 *            lookup at all, only the attributes and their copy-out
 *   then `rel` split over 2, 4 ... MAX_THREADS threads (contiguous blocks,
 *   wall time of the whole pass, threads started before the clock): whether
 *   checking headers in parallel can pay on this machine.
 * Plain C with libc and pthreads: `cc -O2 -pthread -o stat_floor bench/stat_floor.c`. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_PATHS 100000

static char* g_path[MAX_PATHS];
static const char* g_base[MAX_PATHS]; /* name within its directory */
static int g_dir_fd[MAX_PATHS];       /* its directory, opened */
static int g_file_fd[MAX_PATHS];      /* the file itself, O_PATH */
static int g_n;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* A path from a manifest line `header <stamp> <digest> <len>:<path>`, or the
 * line itself when it starts with '/'. */
static char* path_of(char* line) {
  line[strcspn(line, "\n")] = 0;
  if (line[0] == '/') {
    return line;
  }
  if (strncmp(line, "header ", 7) != 0) {
    return NULL;
  }
  char* colon = strchr(strrchr(line, ' '), ':');
  return colon != NULL && colon[1] == '/' ? colon + 1 : NULL;
}

static void load(const char* file) {
  FILE* f = fopen(file, "r");
  if (f == NULL) {
    fprintf(stderr, "stat_floor: cannot read %s\n", file);
    exit(2);
  }
  static char line[1 << 16];
  char last_dir[4096] = "";
  int last_fd = -1;
  while (g_n < MAX_PATHS && fgets(line, sizeof line, f) != NULL) {
    char* p = path_of(line);
    if (p == NULL) {
      continue;
    }
    char* copy = strdup(p);
    char* slash = strrchr(copy, '/');
    *slash = 0;
    if (strcmp(copy, last_dir) != 0) {
      snprintf(last_dir, sizeof last_dir, "%s", copy);
      last_fd = open(copy[0] ? copy : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
    *slash = '/';
    if (last_fd < 0) {
      continue;
    }
    g_path[g_n] = copy;
    g_base[g_n] = slash + 1;
    g_dir_fd[g_n] = last_fd;
    g_file_fd[g_n] = open(copy, O_PATH | O_CLOEXEC);
    ++g_n;
  }
  fclose(f);
  if (g_n == 0) {
    fprintf(stderr, "stat_floor: no paths in %s (a manifest's header lines or absolute paths)\n", file);
    exit(2);
  }
}

static void rel_range(int from, int to) {
  struct stat st;
  for (int i = from; i < to; ++i) {
    fstatat(g_dir_fd[i], g_base[i], &st, 0);
  }
}

struct worker {
  pthread_t thread;
  int from, to;
  pthread_barrier_t* start;
  pthread_barrier_t* done;
  int passes;
};

static void* work(void* arg) {
  struct worker* w = arg;
  for (int r = 0; r < w->passes; ++r) {
    pthread_barrier_wait(w->start);
    rel_range(w->from, w->to);
    pthread_barrier_wait(w->done);
  }
  return NULL;
}

/* Best wall time of `passes` passes of `rel` over `threads` threads (the
 * calling thread takes the first block). */
static double threaded(int threads, int passes) {
  pthread_barrier_t start, done;
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  pthread_barrier_init(&done, NULL, (unsigned)threads);
  struct worker w[64];
  for (int t = 1; t < threads; ++t) {
    w[t] = (struct worker){.from = g_n * t / threads, .to = g_n * (t + 1) / threads, .start = &start, .done = &done,
                           .passes = passes};
    pthread_create(&w[t].thread, NULL, work, &w[t]);
  }
  double best = 1e18;
  for (int r = 0; r < passes; ++r) {
    const double t0 = now_us();
    pthread_barrier_wait(&start);
    rel_range(0, g_n / threads);
    pthread_barrier_wait(&done);
    const double t = now_us() - t0;
    best = t < best ? t : best;
  }
  for (int t = 1; t < threads; ++t) {
    pthread_join(w[t].thread, NULL);
  }
  pthread_barrier_destroy(&start);
  pthread_barrier_destroy(&done);
  return best;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: stat_floor MANIFEST_OR_LIST [REPEATS=30] [MAX_THREADS=8]\n");
    return 2;
  }
  load(argv[1]);
  const int repeats = argc > 2 ? atoi(argv[2]) : 30;
  const int max_threads = argc > 3 ? atoi(argv[3]) : 8;
  double best[5] = {1e18, 1e18, 1e18, 1e18, 1e18};
  struct stat st;
  for (int r = 0; r < repeats; ++r) {
    double t = now_us();
    for (int i = 0; i < g_n; ++i) {
      syscall(SYS_getppid);
    }
    t = now_us() - t;
    best[0] = t < best[0] ? t : best[0];
    t = now_us();
    for (int i = 0; i < g_n; ++i) {
      stat(g_path[i], &st);
    }
    t = now_us() - t;
    best[1] = t < best[1] ? t : best[1];
    t = now_us();
    rel_range(0, g_n);
    t = now_us() - t;
    best[2] = t < best[2] ? t : best[2];
    t = now_us();
    for (int i = 0; i < g_n;) {
      const int dir = g_dir_fd[i];
      char d[4096];
      const size_t len = (size_t)(g_base[i] - 1 - g_path[i]);
      memcpy(d, g_path[i], len);
      d[len] = 0;
      const int fd = open(len ? d : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
      for (; i < g_n && g_dir_fd[i] == dir; ++i) {
        fstatat(fd, g_base[i], &st, 0);
      }
      close(fd);
    }
    t = now_us() - t;
    best[3] = t < best[3] ? t : best[3];
    t = now_us();
    for (int i = 0; i < g_n; ++i) {
      fstatat(g_file_fd[i], "", &st, AT_EMPTY_PATH);
    }
    t = now_us() - t;
    best[4] = t < best[4] ? t : best[4];
  }
  printf("%d paths, best of %d passes (us): null %.0f (%.2f each) | abs %.0f (%.2f) | rel %.0f (%.2f) | "
         "rel+open %.0f (%.2f) | fd %.0f (%.2f)\n",
         g_n, repeats, best[0], best[0] / g_n, best[1], best[1] / g_n, best[2], best[2] / g_n, best[3],
         best[3] / g_n, best[4], best[4] / g_n);
  printf("rel on threads (wall, us):");
  for (int t = 1; t <= max_threads && t <= 64; t *= 2) {
    printf(" %d: %.0f", t, threaded(t, repeats));
  }
  printf("  (%ld CPUs online)\n", sysconf(_SC_NPROCESSORS_ONLN));
  return 0;
}
