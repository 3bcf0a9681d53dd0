// Worker protocol frames: grammar in worker_protocol.hpp and docs/worker-protocol.md.
#include "worker/worker_protocol.hpp"

#include "kcache/artifact_io.hpp"
#include "util/wire_codec.hpp"

namespace kcache::worker {

namespace {

constexpr std::string_view k_magic{"KCWP", 4};

auto corrupt(const std::string& why) { return make_error(ErrorCode::corrupt, "bad worker frame: " + why); }

void put_strs(wire::Writer& w, const std::vector<std::string>& v) {
  w.u32(static_cast<std::uint32_t>(v.size()));
  for (const auto& s : v) {
    w.bytes(s);
  }
}

void put_named(wire::Writer& w, const std::vector<NamedBytes>& v) {
  w.u32(static_cast<std::uint32_t>(v.size()));
  for (const auto& n : v) {
    w.bytes(n.name);
    w.bytes(n.kind);
    w.bytes(n.bytes);
  }
}

// A list's count is bounded before anything is allocated for it: by the
// protocol's cap and by what the rest of the frame can hold (each string
// costs its 8-byte length at least).
bool get_strs(wire::Reader& r, std::vector<std::string>& v) {
  std::uint32_t n = 0;
  if (!r.u32(n) || n > k_max_list_entries || n > r.remaining() / 8) {
    return false;
  }
  v.resize(n);
  for (auto& s : v) {
    if (!r.bytes(s, k_worker_max_frame_bytes)) {
      return false;
    }
  }
  return true;
}

bool get_named(wire::Reader& r, std::vector<NamedBytes>& v) {
  std::uint32_t n = 0;
  if (!r.u32(n) || n > k_max_list_entries || n > r.remaining() / 24) {
    return false;
  }
  v.resize(n);
  for (auto& e : v) {
    if (!r.bytes(e.name, k_worker_max_frame_bytes) || !r.bytes(e.kind, k_worker_max_frame_bytes) ||
        !r.bytes(e.bytes, k_worker_max_frame_bytes)) {
      return false;
    }
  }
  return true;
}

bool get_request(wire::Reader& r, CompileRequest& q) {
  constexpr auto cap = k_worker_max_frame_bytes;
  return r.bytes(q.backend, cap) && r.bytes(q.name, cap) && r.bytes(q.source, cap) &&
         r.bytes(q.target_kind, cap) && get_strs(r, q.options) && get_named(r, q.headers) &&
         get_strs(r, q.name_expressions) && get_named(r, q.inputs) && r.bytes(q.extra_digest, cap) &&
         r.bytes(q.source_path, cap);
}

void put_request(wire::Writer& w, const CompileRequest& q) {
  w.bytes(q.backend);
  w.bytes(q.name);
  w.bytes(q.source);
  w.bytes(q.target_kind);
  put_strs(w, q.options);
  put_named(w, q.headers);
  put_strs(w, q.name_expressions);
  put_named(w, q.inputs);
  w.bytes(q.extra_digest);
  w.bytes(q.source_path);
}

}  // namespace

std::string encode_frame(FrameType type, std::string_view body) {
  wire::Writer w;
  w.out().reserve(k_frame_header_bytes + body.size());
  w.raw(k_magic);
  w.u16(k_protocol_version);
  w.u16(static_cast<std::uint16_t>(type));
  w.u64(body.size());
  w.raw(body);
  return w.take();
}

Result<FrameHeader> parse_frame_header(std::string_view h) {
  if (h.size() != k_frame_header_bytes) {
    return corrupt("short header");
  }
  if (h.substr(0, 4) != k_magic) {
    return corrupt("wrong magic (the worker wrote something that is not a frame)");
  }
  const auto version = static_cast<std::uint16_t>(wire::load_le(h.data() + 4, 2));
  if (version != k_protocol_version) {
    return corrupt("protocol version " + std::to_string(version) + " (expected " +
                   std::to_string(k_protocol_version) + ")");
  }
  const auto type = static_cast<std::uint16_t>(wire::load_le(h.data() + 6, 2));
  if (type < 1 || type > 5) {
    return corrupt("unknown frame type " + std::to_string(type));
  }
  FrameHeader out{static_cast<FrameType>(type), wire::load_le(h.data() + 8, 8)};
  if (out.body_len > k_worker_max_frame_bytes) {
    return corrupt("frame length " + std::to_string(out.body_len) + " over the cap");
  }
  return out;
}

std::string encode_request(const CompileRequest& request) {
  wire::Writer w;
  put_request(w, request);
  return w.take();
}

Result<CompileRequest> decode_request(std::string_view bytes) {
  wire::Reader r(bytes);
  CompileRequest q;
  if (!get_request(r, q) || !r.at_end()) {
    return corrupt("malformed compile request");
  }
  return q;
}

std::string encode_hello(const Hello& hello) {
  wire::Writer w;
  w.u32(hello.protocol);
  w.u32(hello.pid);
  w.bytes(hello.version);
  return w.take();
}

Result<Hello> decode_hello(std::string_view body) {
  wire::Reader r(body);
  Hello h;
  if (!r.u32(h.protocol) || !r.u32(h.pid) || !r.bytes(h.version, 256) || !r.at_end()) {
    return corrupt("malformed hello");
  }
  if (h.protocol != k_protocol_version) {
    return corrupt("worker speaks protocol " + std::to_string(h.protocol));
  }
  return h;
}

std::string encode_compile(std::uint64_t id, std::string_view working_dir, const CompileRequest& request) {
  wire::Writer w;
  w.u64(id);
  w.bytes(working_dir);
  put_request(w, request);
  return w.take();
}

Result<CompileFrame> decode_compile(std::string_view body) {
  wire::Reader r(body);
  CompileFrame f;
  if (!r.u64(f.id) || !r.bytes(f.working_dir, k_worker_max_frame_bytes) || !get_request(r, f.request) ||
      !r.at_end()) {
    return corrupt("malformed compile request");
  }
  return f;
}

std::string encode_result(std::uint64_t id, const CompileOutput& output) {
  wire::Writer w;
  w.u64(id);
  w.u8(output.cacheable ? 1 : 0);
  w.raw(encode_artifact(output.artifact));
  return w.take();
}

std::string encode_error(std::uint64_t id, const Error& error) {
  wire::Writer w;
  w.u64(id);
  w.u32(static_cast<std::uint32_t>(error.code));
  w.bytes(error.message);
  w.bytes(error.log);
  return w.take();
}

Result<Result<CompileOutput>> decode_reply(FrameType type, std::string_view body, std::uint64_t expected_id) {
  wire::Reader r(body);
  std::uint64_t id = 0;
  if (!r.u64(id)) {
    return corrupt("reply too short");
  }
  if (id != expected_id) {
    return corrupt("reply for request " + std::to_string(id) + ", expected " + std::to_string(expected_id));
  }
  if (type == FrameType::result) {
    std::uint8_t cacheable = 0;
    std::string_view rest;
    if (!r.u8(cacheable) || cacheable > 1 || !r.raw(rest, r.remaining())) {
      return corrupt("malformed result");
    }
    auto artifact = decode_artifact(rest);
    if (!artifact) {
      return corrupt(artifact.error().message);
    }
    return Result<CompileOutput>(CompileOutput{std::move(*artifact), cacheable == 1});
  }
  if (type == FrameType::error) {
    std::uint32_t code = 0;
    Error e;
    if (!r.u32(code) || !r.bytes(e.message, 16 << 20) || !r.bytes(e.log, 64 << 20) || !r.at_end()) {
      return corrupt("malformed error");
    }
    if (code < 1 || code > static_cast<std::uint32_t>(ErrorCode::internal)) {
      return corrupt("unknown error code " + std::to_string(code));
    }
    e.code = static_cast<ErrorCode>(code);
    return Result<CompileOutput>(tl::unexpected(std::move(e)));
  }
  return corrupt("unexpected frame type " + std::to_string(static_cast<int>(type)));
}

Result<void> write_frame(int fd, FrameType type, std::string_view body) {
  return wire::write_all(fd, encode_frame(type, body));
}

Result<Frame> read_frame(int fd) {
  char head[k_frame_header_bytes];
  auto got = wire::read_full(fd, head, sizeof head);
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (*got == 0) {
    return make_error(ErrorCode::not_found, "end of stream");
  }
  if (*got < sizeof head) {
    return corrupt("truncated header");
  }
  auto h = parse_frame_header(std::string_view(head, sizeof head));
  if (!h) {
    return tl::unexpected(h.error());
  }
  Frame f{h->type, {}};
  constexpr std::size_t k_chunk = std::size_t{16} << 20;
  while (f.body.size() < h->body_len) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(k_chunk, h->body_len - f.body.size()));
    const std::size_t old = f.body.size();
    f.body.resize(old + want);
    got = wire::read_full(fd, f.body.data() + old, want);
    if (!got) {
      return tl::unexpected(got.error());
    }
    if (*got < want) {
      return corrupt("truncated body");
    }
  }
  return f;
}

}  // namespace kcache::worker
