// The worker side of the protocol; see worker_process.hpp.
#include "worker/worker_process.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "worker/worker_protocol.hpp"

#ifndef KCACHE_VERSION
#define KCACHE_VERSION "unknown"
#endif

namespace kcache::worker {

namespace {

enum class Fault { none, crash, abort, exit, hang, garbage, truncate, oom };

struct FaultPlan {
  Fault fault = Fault::none;
  std::string only_name;  // empty: every request
};

FaultPlan fault_from_env() {
  const char* v = std::getenv("KCACHE_WORKER_FAULT");
  if (v == nullptr || *v == '\0') {
    return {};
  }
  std::string s(v);
  FaultPlan plan;
  if (const auto at = s.find('@'); at != std::string::npos) {
    plan.only_name = s.substr(at + 1);
    s.resize(at);
  }
  static const std::pair<const char*, Fault> k_modes[] = {
      {"crash", Fault::crash}, {"abort", Fault::abort},       {"exit", Fault::exit}, {"hang", Fault::hang},
      {"garbage", Fault::garbage}, {"truncate", Fault::truncate}, {"oom", Fault::oom}};
  for (const auto& [name, f] : k_modes) {
    if (s == name) {
      plan.fault = f;
    }
  }
  return plan;
}

// Misbehaves as planned. Returns only for Fault::none and Fault::oom (with
// the error to report).
void misbehave(Fault fault, int out_fd) {
  switch (fault) {
    case Fault::crash: ::raise(SIGSEGV); break;
    case Fault::abort: std::abort();
    case Fault::exit: ::_exit(3);
    case Fault::hang:
      for (;;) {
        ::pause();
      }
    case Fault::garbage: {
      const std::string junk = "this is not a frame\n\x01\x02\x03 garbage garbage garbage";
      (void)!::write(out_fd, junk.data(), junk.size());
      for (;;) {
        ::pause();  // the parent must notice on its own and kill us
      }
    }
    case Fault::truncate: {
      std::string frame = encode_frame(FrameType::result, std::string(4096, 'x'));
      frame.resize(frame.size() / 2);
      (void)!::write(out_fd, frame.data(), frame.size());
      ::_exit(0);
    }
    case Fault::oom:
    case Fault::none: break;
  }
}

// Allocates under a small address-space limit until allocation fails.
[[noreturn]] void run_out_of_memory() {
  struct rlimit rl {};
  rl.rlim_cur = rl.rlim_max = std::size_t{256} << 20;
  ::setrlimit(RLIMIT_AS, &rl);
  std::vector<std::vector<char>> hog;
  for (;;) {
    hog.emplace_back(std::size_t{16} << 20, 'x');  // throws std::bad_alloc soon
  }
}

// Moves into the directory the parent compiles in (and sets $PWD to it, so
// that NVRTC names it as the parent would). Empty: stay.
Result<void> enter_working_dir(const std::string& dir) {
  static std::string entered;  // the directory the last request ran in
  if (dir.empty() || dir == entered) {
    return {};
  }
  if (::chdir(dir.c_str()) != 0) {
    entered.clear();
    return make_errno_error(errno, "cannot enter the compile's working directory " + dir +
                                       " in the worker process (was it removed?)");
  }
  ::setenv("PWD", dir.c_str(), 1);
  entered = dir;
  return {};
}

}  // namespace

int serve(int in_fd, int out_fd, const CompileFunction& compile) {
  const FaultPlan plan = fault_from_env();
  Hello hello;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  hello.version = KCACHE_VERSION;
  if (!write_frame(out_fd, FrameType::hello, encode_hello(hello))) {
    return 1;
  }
  for (;;) {
    auto frame = read_frame(in_fd);
    if (!frame) {
      return frame.error().code == ErrorCode::not_found ? 0 : 1;
    }
    if (frame->type == FrameType::shutdown) {
      return 0;
    }
    if (frame->type != FrameType::compile) {
      return 1;
    }
    auto req = decode_compile(frame->body);
    if (!req) {
      return 1;
    }
    const std::uint64_t id = req->id;
    const CompileRequest& request = req->request;
    const bool targeted = plan.fault != Fault::none && (plan.only_name.empty() || plan.only_name == request.name);
    std::string reply;
    FrameType type = FrameType::result;
    bool exit_after = false;
    try {
      if (targeted) {
        misbehave(plan.fault, out_fd);
        if (plan.fault == Fault::oom) {
          run_out_of_memory();
        }
      }
      auto entered = enter_working_dir(req->working_dir);
      auto out = entered ? compile(request) : decltype(compile(request))(tl::unexpected(entered.error()));
      if (out) {
        reply = encode_result(id, *out);
      } else {
        type = FrameType::error;
        reply = encode_error(id, out.error());
      }
    } catch (const std::bad_alloc&) {
      // A worker that ran out of memory is not trusted with another request.
      type = FrameType::error;
      reply = encode_error(id, Error{ErrorCode::worker_crashed,
                                     "worker ran out of memory while compiling '" + request.name + "'", {}});
      exit_after = true;
    }
    if (!write_frame(out_fd, type, reply)) {
      return 1;
    }
    if (exit_after) {
      return 2;
    }
  }
}

}  // namespace kcache::worker
