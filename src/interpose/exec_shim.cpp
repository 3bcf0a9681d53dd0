// interpose/exec_shim.cpp: the stand-in's exec family, which sends nvcc
// through the cache under `kcache run` (docs/nvcc.md, "Programs that run
// nvcc themselves").
//
// `kcache run` puts the kcache executable's path in KCACHE_RUN_NVCC. A
// process of the program that executes a file named `nvcc` — by path or by a
// name looked up on PATH, with execve, execv, execvp, execvpe, posix_spawn or
// posix_spawnp (what ninja, make, Python's subprocess, ccache and shells
// call) — runs `<kcache> <that nvcc> ARGS...` instead: the compiler launcher
// (cli/cmd_nvcc.hpp), which removes KCACHE_RUN_NVCC from its own environment,
// so the nvcc it runs is the real one. The variable is looked for in the
// environment the new program gets, so a program that runs nvcc with an
// environment of its own (without it) runs nvcc itself. Everything else goes
// to the real function unchanged.
//
// A child of fork() in a threaded program may call execve, so nothing here
// allocates: the new argument list lives on the stack, and a command longer
// than it (4096 arguments) is run without the cache.
#include <dlfcn.h>
#include <spawn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

extern char** environ;

namespace {

constexpr std::size_t k_max_arguments = 4096;
constexpr std::size_t k_max_path = 4096;
constexpr char k_variable[] = "KCACHE_RUN_NVCC=";

using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using SpawnFn = int (*)(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*,
                        char* const[], char* const[]);

template <class Fn>
Fn next_symbol(std::atomic<Fn>& cache, const char* name) {
  Fn fn = cache.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
    cache.store(fn, std::memory_order_release);
  }
  return fn;
}

using ExecvpeFn = int (*)(const char*, char* const[], char* const[]);

std::atomic<ExecveFn> g_execve{nullptr};
std::atomic<ExecvpeFn> g_execvpe{nullptr};
std::atomic<SpawnFn> g_spawn{nullptr};
std::atomic<SpawnFn> g_spawnp{nullptr};

ExecveFn real_execve() { return next_symbol(g_execve, "execve"); }

// The launcher named by `envp`'s KCACHE_RUN_NVCC; null when none.
const char* launcher_in(char* const envp[]) {
  if (envp == nullptr) {
    return nullptr;
  }
  for (char* const* e = envp; *e != nullptr; ++e) {
    if (std::strncmp(*e, k_variable, sizeof k_variable - 1) == 0 && (*e)[sizeof k_variable - 1] == '/') {
      return *e + sizeof k_variable - 1;
    }
  }
  return nullptr;
}

bool names_nvcc(const char* path) {
  if (path == nullptr) {
    return false;
  }
  const char* slash = std::strrchr(path, '/');
  return std::strcmp(slash == nullptr ? path : slash + 1, "nvcc") == 0;
}

// `file` found on PATH as execvp would, into `out`; false when not found.
bool find_on_path(const char* file, char (&out)[k_max_path]) {
  const char* path = ::getenv("PATH");
  if (path == nullptr || *path == '\0') {
    path = "/usr/local/bin:/usr/bin:/bin";
  }
  const std::size_t file_len = std::strlen(file);
  const char* start = path;
  for (;;) {
    const char* end = std::strchr(start, ':');
    const std::size_t len = end == nullptr ? std::strlen(start) : static_cast<std::size_t>(end - start);
    const char* dir = len == 0 ? "." : start;
    const std::size_t dir_len = len == 0 ? 1 : len;
    if (dir_len + 1 + file_len < k_max_path) {
      std::memcpy(out, dir, dir_len);
      out[dir_len] = '/';
      std::memcpy(out + dir_len + 1, file, file_len + 1);
      if (::access(out, X_OK) == 0) {
        return true;
      }
    }
    if (end == nullptr) {
      return false;
    }
    start = end + 1;
  }
}

// Fills `out` with [launcher, nvcc, argv[1]...]; false when it does not fit.
bool launcher_arguments(const char* launcher, const char* nvcc, char* const argv[],
                        char* (&out)[k_max_arguments + 2]) {
  std::size_t n = 0;
  out[n++] = const_cast<char*>(launcher);
  out[n++] = const_cast<char*>(nvcc);
  if (argv != nullptr && argv[0] != nullptr) {
    for (char* const* a = argv + 1; *a != nullptr; ++a) {
      if (n >= k_max_arguments + 1) {
        return false;
      }
      out[n++] = *a;
    }
  }
  out[n] = nullptr;
  return true;
}

// Resolved when the stand-in is loaded: dlsym takes the loader's lock, which
// a fork() child must not wait for.
__attribute__((constructor)) void resolve_exec_functions() {
  (void)real_execve();
  (void)next_symbol(g_execvpe, "execvpe");
  (void)next_symbol(g_spawn, "posix_spawn");
  (void)next_symbol(g_spawnp, "posix_spawnp");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int execve(const char* path, char* const argv[],
                                                              char* const envp[]) {
  ExecveFn real = real_execve();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  const char* launcher = names_nvcc(path) ? launcher_in(envp) : nullptr;
  char* routed[k_max_arguments + 2];
  if (launcher != nullptr && launcher_arguments(launcher, path, argv, routed)) {
    return real(launcher, routed, envp);
  }
  return real(path, argv, envp);
}

extern "C" __attribute__((visibility("default"))) int execv(const char* path, char* const argv[]) {
  return execve(path, argv, environ);
}

extern "C" __attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[],
                                                               char* const envp[]) {
  if (std::strchr(file, '/') == nullptr && names_nvcc(file) && launcher_in(envp) != nullptr) {
    char found[k_max_path];
    if (find_on_path(file, found)) {
      return execve(found, argv, envp);
    }
  }
  // Not nvcc (or no nvcc on PATH): the real lookup, with its errors.
  ExecvpeFn real = next_symbol(g_execvpe, "execvpe");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(file, argv, envp);
}

extern "C" __attribute__((visibility("default"))) int execvp(const char* file, char* const argv[]) {
  return execvpe(file, argv, environ);
}

extern "C" __attribute__((visibility("default"))) int posix_spawn(pid_t* pid, const char* path,
                                                                   const posix_spawn_file_actions_t* actions,
                                                                   const posix_spawnattr_t* attr, char* const argv[],
                                                                   char* const envp[]) {
  SpawnFn real = next_symbol(g_spawn, "posix_spawn");
  if (real == nullptr) {
    return ENOSYS;
  }
  const char* launcher = names_nvcc(path) ? launcher_in(envp) : nullptr;
  char* routed[k_max_arguments + 2];
  if (launcher != nullptr && launcher_arguments(launcher, path, argv, routed)) {
    return real(pid, launcher, actions, attr, routed, envp);
  }
  return real(pid, path, actions, attr, argv, envp);
}

extern "C" __attribute__((visibility("default"))) int posix_spawnp(pid_t* pid, const char* file,
                                                                    const posix_spawn_file_actions_t* actions,
                                                                    const posix_spawnattr_t* attr, char* const argv[],
                                                                    char* const envp[]) {
  if (std::strchr(file, '/') == nullptr && names_nvcc(file) && launcher_in(envp) != nullptr) {
    char found[k_max_path];
    if (find_on_path(file, found)) {
      return posix_spawn(pid, found, actions, attr, argv, envp);
    }
  }
  SpawnFn real = next_symbol(g_spawnp, "posix_spawnp");
  if (real == nullptr) {
    return ENOSYS;
  }
  return real(pid, file, actions, attr, argv, envp);
}
