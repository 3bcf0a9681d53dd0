#include "store/remote/remote_spec.hpp"

#include <charconv>
#include <vector>

#include <fmt/format.h>

#include "kcache/config.hpp"

namespace kcache::remote {

namespace {

constexpr std::string_view k_attrs =
    "read_only=BOOL, connect_timeout_ms=N, timeout_ms=N, max_entry_size=SIZE, ttl_s=N; for http(s) also "
    "bearer_token_file=PATH, bearer_token_env=VAR, basic_auth_file=PATH, basic_auth_env=VAR; for https also "
    "ca_file=PATH (also rediss, rediss+cluster, s3); for s3 also endpoint=URL, region=NAME, "
    "addressing=path|virtual, profile=NAME, anonymous=BOOL, multipart_size=SIZE";

bool parse_bool(const std::string& value, bool& out) {
  out = value == "true" || value == "1" || value.empty();
  return value == "true" || value == "1" || value == "false" || value == "0" || value.empty();
}

std::string percent_decode(std::string_view s, bool* ok) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    unsigned v = 0;
    if (i + 2 >= s.size()) {
      *ok = false;
      return {};
    }
    const auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
    if (ec != std::errc() || end != s.data() + i + 3) {
      *ok = false;
      return {};
    }
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

// Hides the password in a raw URL for error messages: scheme://user:***@rest.
std::string mask_raw(std::string_view url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return url.find('@') == std::string_view::npos ? std::string(url) : std::string("(URL hidden: it holds an '@')");
  }
  const auto at = url.find('@', scheme_end + 3);
  if (at == std::string_view::npos) {
    return std::string(url);
  }
  const std::string_view userinfo = url.substr(scheme_end + 3, at - scheme_end - 3);
  const auto colon = userinfo.find(':');
  return std::string(url.substr(0, scheme_end + 3)) + std::string(userinfo.substr(0, colon)) +
         (colon == std::string_view::npos ? "" : ":***") + std::string(url.substr(at));
}

template <class T>
bool parse_uint(std::string_view v, T& out) {
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return !v.empty() && ec == std::errc() && end == v.data() + v.size();
}

}  // namespace

std::string RemoteSpec::masked() const {
  std::string out;
  switch (scheme) {
    case Scheme::redis: out = tls ? "rediss://" : "redis://"; break;
    case Scheme::redis_unix: out = "redis+unix://"; break;
    case Scheme::redis_cluster: out = tls ? "rediss+cluster://" : "redis+cluster://"; break;
    case Scheme::http: out = "http://"; break;
    case Scheme::https: out = "https://"; break;
    case Scheme::s3: out = "s3://"; break;
  }
  if (!user.empty() || !password.empty()) {
    out += user;
    if (!password.empty()) {
      out += ":***";
    }
    out += '@';
  }
  std::vector<std::string> attrs;
  if (scheme == Scheme::redis_unix) {
    out += path;
    if (db != 0) {
      attrs.push_back(fmt::format("db={}", db));
    }
  } else {
    out += host;
    if (port != 0 && scheme != Scheme::redis_cluster) {
      out += fmt::format(":{}", port);
    }
    if (scheme == Scheme::redis && db != 0) {
      out += fmt::format("/{}", db);
    }
    if (scheme == Scheme::http || scheme == Scheme::https || scheme == Scheme::s3) {
      out += path;
    }
  }
  const RemoteSpec d;
  if (read_only) {
    attrs.emplace_back("read_only=true");
  }
  if (connect_timeout_ms != d.connect_timeout_ms) {
    attrs.push_back(fmt::format("connect_timeout_ms={}", connect_timeout_ms));
  }
  if (timeout_ms != d.timeout_ms) {
    attrs.push_back(fmt::format("timeout_ms={}", timeout_ms));
  }
  if (max_entry_size != d.max_entry_size) {
    attrs.push_back(fmt::format("max_entry_size={}", max_entry_size));
  }
  if (ttl_s != d.ttl_s) {
    attrs.push_back(fmt::format("ttl_s={}", ttl_s));
  }
  // Where a credential comes from is not secret; the credential is never here.
  if (!bearer_token_file.empty()) {
    attrs.push_back("bearer_token_file=" + bearer_token_file);
  }
  if (!bearer_token_env.empty()) {
    attrs.push_back("bearer_token_env=" + bearer_token_env);
  }
  if (!basic_auth_file.empty()) {
    attrs.push_back("basic_auth_file=" + basic_auth_file);
  }
  if (!basic_auth_env.empty()) {
    attrs.push_back("basic_auth_env=" + basic_auth_env);
  }
  if (!ca_file.empty()) {
    attrs.push_back("ca_file=" + ca_file);
  }
  if (!endpoint.empty()) {
    attrs.push_back("endpoint=" + endpoint);
  }
  if (!region.empty()) {
    attrs.push_back("region=" + region);
  }
  if (addressing != S3Addressing::automatic) {
    attrs.push_back(addressing == S3Addressing::path ? "addressing=path" : "addressing=virtual");
  }
  if (!profile.empty()) {
    attrs.push_back("profile=" + profile);
  }
  if (anonymous) {
    attrs.emplace_back("anonymous=true");
  }
  if (multipart_size != d.multipart_size) {
    attrs.push_back(fmt::format("multipart_size={}", multipart_size));
  }
  for (std::size_t i = 0; i < attrs.size(); ++i) {
    out += (i == 0 ? '?' : '&') + attrs[i];
  }
  return out;
}

Result<RemoteSpec> parse_remote_url(std::string_view url) {
  auto fail = [&](std::string_view why) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("remote \"{}\": {}", mask_raw(url), why));
  };
  RemoteSpec spec;
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return fail("not a URL; use redis://host:port, redis+unix:///path or redis+cluster://host:port,...");
  }
  const std::string_view scheme = url.substr(0, scheme_end);
  if (scheme == "redis") {
    spec.scheme = Scheme::redis;
  } else if (scheme == "rediss") {
    spec.scheme = Scheme::redis;
    spec.tls = true;
  } else if (scheme == "rediss+cluster") {
    spec.scheme = Scheme::redis_cluster;
    spec.tls = true;
  } else if (scheme == "redis+unix" || scheme == "unix") {
    spec.scheme = Scheme::redis_unix;
  } else if (scheme == "redis+cluster") {
    spec.scheme = Scheme::redis_cluster;
  } else if (scheme == "http") {
    spec.scheme = Scheme::http;
  } else if (scheme == "https") {
    spec.scheme = Scheme::https;
  } else if (scheme == "s3") {
    spec.scheme = Scheme::s3;
  } else {
    return fail("unknown scheme '" + std::string(scheme) +
                "'; use redis, rediss, redis+unix, redis+cluster, rediss+cluster, http, https or s3");
  }
  std::string_view rest = url.substr(scheme_end + 3);
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (spec.scheme == Scheme::s3 && rest.find('@') != std::string_view::npos) {
    return fail("an s3:// URL holds no credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
                "(or ?profile=NAME) with ~/.aws/credentials, as for the AWS tools");
  }
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    bool ok = true;
    spec.user = percent_decode(userinfo.substr(0, colon), &ok);
    if (colon != std::string_view::npos) {
      spec.password = percent_decode(userinfo.substr(colon + 1), &ok);
    }
    if (!ok) {
      return fail("bad percent-encoding in the user or password");
    }
  }
  if (spec.scheme == Scheme::redis_unix) {
    if (rest.empty() || rest.front() != '/') {
      return fail("redis+unix needs an absolute socket path: redis+unix:///path/to/socket");
    }
    spec.path = std::string(rest);
  } else {
    std::string_view hostport = rest;
    std::string_view path;
    if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
      hostport = rest.substr(0, slash);
      path = rest.substr(slash);
    }
    if (hostport.empty()) {
      return fail("no host");
    }
    if (spec.scheme == Scheme::s3) {
      // The bucket: 3 to 63 of a-z 0-9 . - (S3's rule), so it is safe in a host name and a path.
      spec.host = std::string(hostport);
      if (spec.host.size() < 3 || spec.host.size() > 63 ||
          spec.host.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos) {
        return fail("bad bucket name '" + spec.host + "'; a bucket is 3 to 63 characters of a-z, 0-9, '.' and '-'");
      }
      while (path.size() > 1 && path.back() == '/') {
        path.remove_suffix(1);
      }
      spec.path = path == "/" ? std::string() : std::string(path);
    } else if (spec.scheme == Scheme::redis_cluster) {
      spec.host = std::string(hostport);
      if (!path.empty() && path != "/") {
        return fail("a cluster URL has no database or path (Redis Cluster has only database 0)");
      }
    } else {
      std::string_view host = hostport;
      if (const auto colon = hostport.rfind(':'); colon != std::string_view::npos && hostport.front() != '[') {
        host = hostport.substr(0, colon);
        if (!parse_uint(hostport.substr(colon + 1), spec.port) || spec.port <= 0 || spec.port > 65535) {
          return fail("bad port '" + std::string(hostport.substr(colon + 1)) + "'");
        }
      }
      if (host.empty()) {
        return fail("no host");
      }
      spec.host = std::string(host);
      if (spec.port == 0) {
        spec.port = spec.scheme == Scheme::redis ? 6379 : spec.scheme == Scheme::http ? 80 : 443;
      }
      if (spec.scheme == Scheme::redis) {
        if (!path.empty() && path != "/" &&
            (!parse_uint(path.substr(1), spec.db) || spec.db < 0 || spec.db > 1000000)) {
          return fail("bad database number '" + std::string(path.substr(1)) + "'; use redis://host:port/N");
        }
      } else {
        spec.path = std::string(path);
      }
    }
  }
  const bool is_http = spec.scheme == Scheme::http || spec.scheme == Scheme::https;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = item.find('=');
    const std::string_view name = item.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1));
    bool ok = true;
    if (name == "read_only") {
      ok = parse_bool(value, spec.read_only);
    } else if (name == "connect_timeout_ms") {
      ok = parse_uint(value, spec.connect_timeout_ms) && spec.connect_timeout_ms > 0;
    } else if (name == "timeout_ms") {
      ok = parse_uint(value, spec.timeout_ms) && spec.timeout_ms > 0;
    } else if (name == "max_entry_size") {
      auto size = parse_size(value);
      ok = size.has_value() && *size > 0;
      spec.max_entry_size = size.value_or(0);
    } else if (name == "ttl_s") {
      ok = parse_uint(value, spec.ttl_s);
    } else if (name == "db" && spec.scheme == Scheme::redis_unix) {
      ok = parse_uint(value, spec.db);
    } else if (is_http && name == "bearer_token_file") {
      spec.bearer_token_file = value;
      ok = !value.empty();
    } else if (is_http && name == "bearer_token_env") {
      spec.bearer_token_env = value;
      ok = !value.empty();
    } else if (is_http && name == "basic_auth_file") {
      spec.basic_auth_file = value;
      ok = !value.empty();
    } else if (is_http && name == "basic_auth_env") {
      spec.basic_auth_env = value;
      ok = !value.empty();
    } else if ((spec.scheme == Scheme::https || spec.tls || spec.scheme == Scheme::s3) && name == "ca_file") {
      spec.ca_file = value;
      ok = !value.empty();
    } else if (spec.scheme == Scheme::s3 && name == "endpoint") {
      // http(s)://host[:port], nothing after it (the bucket and prefix are the URL's).
      spec.endpoint = value;
      while (!spec.endpoint.empty() && spec.endpoint.back() == '/') {
        spec.endpoint.pop_back();
      }
      const auto after = spec.endpoint.find("://");
      ok = (spec.endpoint.rfind("http://", 0) == 0 || spec.endpoint.rfind("https://", 0) == 0) &&
           spec.endpoint.size() > after + 3 && spec.endpoint.find('/', after + 3) == std::string::npos &&
           spec.endpoint.find('@') == std::string::npos;
    } else if (spec.scheme == Scheme::s3 && name == "region") {
      spec.region = value;
      ok = !value.empty() && value.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
    } else if (spec.scheme == Scheme::s3 && name == "addressing") {
      ok = value == "path" || value == "virtual";
      spec.addressing = value == "path" ? S3Addressing::path : S3Addressing::virtual_host;
    } else if (spec.scheme == Scheme::s3 && name == "profile") {
      spec.profile = value;
      ok = !value.empty();
    } else if (spec.scheme == Scheme::s3 && name == "anonymous") {
      ok = parse_bool(value, spec.anonymous);
    } else if (spec.scheme == Scheme::s3 && name == "multipart_size") {
      auto size = parse_size(value);
      ok = size.has_value() && *size >= (std::uint64_t{5} << 20);
      spec.multipart_size = size.value_or(0);
    } else {
      return fail(fmt::format("unknown attribute '{}'; accepted: {}", name, k_attrs));
    }
    if (!ok) {
      return fail(fmt::format("bad value \"{}\" for attribute '{}'; accepted: {}", value, name, k_attrs));
    }
  }
  return spec;
}

}  // namespace kcache::remote
