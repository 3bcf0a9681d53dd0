// `kcache worker`: a hidden command that serves the worker protocol on
// stdin/stdout (docs/worker-protocol.md). Started by WorkerPool, not by people.
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "cli/command.hpp"
#include "kcache/cache.hpp"
#include "kcache/compiler.hpp"
#include "kcache/toolkit.hpp"
#include "worker/worker_process.hpp"

namespace kcache::cli {

namespace {

struct WorkerArgs {
  std::string memo_dir;
  bool no_memo = false;
  bool no_cache = false;
};

// The compile of a worker whose parent has no cache: the backend alone.
Result<CompileOutput> compile_only(const CompileRequest& request) {
  auto a = compile_without_cache(request);
  if (!a) {
    return tl::unexpected(a.error());
  }
  return CompileOutput{std::move(*a), false};
}

void register_worker(CLI::App& app, Context& /*ctx*/, std::function<int()>& run) {
  auto args = std::make_shared<WorkerArgs>();
  auto* cmd = app.add_subcommand("worker", "Serve compile requests on stdin/stdout (internal)");
  cmd->group("");  // hidden from --help
  // The parent's toolkit memo directory, so a worker writes where its parent
  // would (and nothing when the parent's cache is disabled or unusable).
  // Neither: the default of Toolkit::memo_dir().
  cmd->add_option("--memo-dir", args->memo_dir, "Keep toolkit and header memos here");
  cmd->add_flag("--no-memo", args->no_memo, "Keep no memos");
  // The parent has no cache (--no-cache, disabled, unusable): compile each
  // request alone, with no key derived (compile_without_cache).
  cmd->add_flag("--no-cache", args->no_cache, "Compile without deriving keys");
  cmd->callback([&run, args] {
    run = [args] {
      if (args->no_memo) {
        Toolkit::instance().set_memo_dir({});
      } else if (!args->memo_dir.empty()) {
        Toolkit::instance().set_memo_dir(args->memo_dir);
      }
      // Replies go to a private copy of fd 1; fd 1 itself then points at
      // stderr, so a library that prints cannot corrupt a frame.
      const int out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
      if (out < 0 || ::dup2(2, 1) < 0) {
        return 1;
      }
      return worker::serve(0, out, args->no_cache ? CompileFunction(compile_only) : CompileFunction(compile_in_process));
    };
  });
}

}  // namespace

KCACHE_COMMAND(worker, register_worker);

}  // namespace kcache::cli
