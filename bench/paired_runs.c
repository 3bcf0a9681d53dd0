/* Paired whole-process runs for the benchmark scripts (scripts/bench-process-start.sh).
 *
 * Usage: paired_runs ROUNDS [--warmup=N] SPEC... where each SPEC is
 *          [--prep=SHELL-COMMAND] [VAR=VALUE]... PROGRAM [ARG]... ;
 *        (a lone `;` argument ends a SPEC).
 * Each round runs every SPEC once, in an order rotated by one each round (so
 * no command always goes first), after its --prep command (run with /bin/sh,
 * not timed). It prints one line per round:
 *          wall_us_1 cpu_us_1 wall_us_2 cpu_us_2 ...
 * in the order of the SPECs on the command line, where wall is the time from
 * fork to the reaped exit (CLOCK_MONOTONIC) and cpu is the child's user +
 * system time (wait4's rusage: every thread of the child, and its waited-for
 * children). Standard output and error of the commands go to /dev/null.
 * --warmup=N runs N rounds first that are not printed (the first processes
 * over a new source directory fill the per-user memos and are slower).
 * Exit status: 0, or 1 when a command fails or cannot be run (it says which).
 * Plain C with libc only, so the scripts build it with `cc` in a second. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SPECS 16

struct spec {
  const char* prep;
  char** assignments;
  int n_assignments;
  char** argv; /* NULL-terminated in place of the `;` */
};

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static int run_prep(const char* prep) {
  if (prep == NULL) {
    return 0;
  }
  const int status = system(prep);
  if (status != 0) {
    fprintf(stderr, "paired_runs: the prep command failed (status %d): %s\n", status, prep);
    return -1;
  }
  return 0;
}

/* Runs one SPEC; 0 with *wall_us and *cpu_us set, -1 when it fails. */
static int run_one(const struct spec* s, long long* wall_us, long long* cpu_us) {
  const long long start = now_us();
  const pid_t pid = fork();
  if (pid < 0) {
    perror("paired_runs: fork");
    return -1;
  }
  if (pid == 0) {
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
      dup2(null_fd, STDOUT_FILENO);
      dup2(null_fd, STDERR_FILENO);
    }
    for (int i = 0; i < s->n_assignments; ++i) {
      putenv(s->assignments[i]);
    }
    execvp(s->argv[0], s->argv);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid) {
    perror("paired_runs: wait4");
    return -1;
  }
  *wall_us = now_us() - start;
  *cpu_us = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL + ru.ru_utime.tv_usec +
            ru.ru_stime.tv_usec;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "paired_runs: %s exited with status %d\n", s->argv[0], status);
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: paired_runs ROUNDS [--prep=CMD] [VAR=VALUE]... PROGRAM [ARG]... ; ...\n");
    return 2;
  }
  const int rounds = atoi(argv[1]);
  int warmup = 0;
  int first = 2;
  if (strncmp(argv[2], "--warmup=", 9) == 0) {
    warmup = atoi(argv[2] + 9);
    first = 3;
  }
  struct spec specs[MAX_SPECS];
  int n = 0;
  for (int i = first; i < argc && n < MAX_SPECS;) {
    struct spec* s = &specs[n];
    memset(s, 0, sizeof *s);
    if (strncmp(argv[i], "--prep=", 7) == 0) {
      s->prep = argv[i] + 7;
      ++i;
    }
    s->assignments = &argv[i];
    while (i < argc && strchr(argv[i], '=') != NULL && argv[i][0] != '/') {
      ++s->n_assignments;
      ++i;
    }
    s->argv = &argv[i];
    while (i < argc && strcmp(argv[i], ";") != 0) {
      ++i;
    }
    if (i < argc) {
      argv[i] = NULL; /* the `;` ends this command's argv */
      ++i;
    }
    if (s->argv[0] == NULL) {
      fprintf(stderr, "paired_runs: a SPEC without a program\n");
      return 2;
    }
    ++n;
  }
  if (rounds <= 0 || n == 0) {
    fprintf(stderr, "paired_runs: need ROUNDS > 0 and at least one SPEC\n");
    return 2;
  }
  long long wall[MAX_SPECS];
  long long cpu[MAX_SPECS];
  for (int r = -warmup; r < rounds; ++r) {
    for (int k = 0; k < n; ++k) {
      const int j = ((r % n + n) + k) % n;
      if (run_prep(specs[j].prep) != 0 || run_one(&specs[j], &wall[j], &cpu[j]) != 0) {
        return 1;
      }
    }
    if (r < 0) {
      continue;
    }
    for (int j = 0; j < n; ++j) {
      printf(j == 0 ? "%lld %lld" : " %lld %lld", wall[j], cpu[j]);
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}
