#include "kcache/error.hpp"

#include <cerrno>
#include <cstring>
#include <string>

namespace kcache {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::corrupt: return "corrupt";
    case ErrorCode::io: return "io";
    case ErrorCode::no_space: return "no_space";
    case ErrorCode::permission_denied: return "permission_denied";
    case ErrorCode::read_only: return "read_only";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::compile_failed: return "compile_failed";
    case ErrorCode::toolkit_missing: return "toolkit_missing";
    case ErrorCode::worker_crashed: return "worker_crashed";
    case ErrorCode::busy: return "busy";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

std::string Error::describe() const {
  std::string out(to_string(code));
  out += ": ";
  out += message;
  return out;
}

ErrorCode error_code_from_errno(int err) noexcept {
  switch (err) {
    case ENOSPC:
    case EDQUOT: return ErrorCode::no_space;
    case EACCES:
    case EPERM: return ErrorCode::permission_denied;
    case EROFS: return ErrorCode::read_only;
    case ENOENT: return ErrorCode::not_found;
    case ETIMEDOUT: return ErrorCode::timeout;
    case EINVAL: return ErrorCode::invalid_argument;
    case EBUSY:
    case EWOULDBLOCK: return ErrorCode::busy;
    default: return ErrorCode::io;
  }
}

tl::unexpected<Error> make_errno_error(int err, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  return make_error(error_code_from_errno(err), std::move(msg));
}

}  // namespace kcache
