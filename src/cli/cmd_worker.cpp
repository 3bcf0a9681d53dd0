// `kcache worker`: a hidden command that serves the worker protocol on
// stdin/stdout (docs/worker-protocol.md). Started by WorkerPool, not by people.
#include <fcntl.h>
#include <unistd.h>

#include "cli/command.hpp"
#include "worker/worker_process.hpp"

namespace kcache::cli {

namespace {

void register_worker(CLI::App& app, Context& /*ctx*/, std::function<int()>& run) {
  auto* cmd = app.add_subcommand("worker", "Serve compile requests on stdin/stdout (internal)");
  cmd->group("");  // hidden from --help
  cmd->callback([&run] {
    run = [] {
      // Replies go to a private copy of fd 1; fd 1 itself then points at
      // stderr, so a library that prints cannot corrupt a frame.
      const int out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
      if (out < 0 || ::dup2(2, 1) < 0) {
        return 1;
      }
      return worker::serve(0, out, compile_in_process);
    };
  });
}

}  // namespace

KCACHE_COMMAND(worker, register_worker);

}  // namespace kcache::cli
