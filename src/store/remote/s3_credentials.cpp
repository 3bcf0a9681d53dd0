#include "store/remote/s3_credentials.hpp"

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace kcache::remote {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) {
    return {};
  }
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// The "key = value" pairs of section `section` of the INI file `path`;
// std::nullopt when the file or the section is absent.
std::optional<std::map<std::string, std::string>> read_section(const std::string& path, const std::string& section) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::optional<std::map<std::string, std::string>> out;
  bool inside = false;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') {
      continue;
    }
    if (line.front() == '[' && line.back() == ']') {
      inside = trim(line.substr(1, line.size() - 2)) == section;
      if (inside && !out) {
        out.emplace();
      }
      continue;
    }
    const auto eq = line.find('=');
    if (inside && eq != std::string::npos) {
      (*out)[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
  }
  return out;
}

std::string home_file(const char* var, const char* under_home) {
  std::string path = env(var);
  if (path.empty()) {
    const std::string home = env("HOME");
    path = home.empty() ? std::string() : home + under_home;
  }
  return path;
}

}  // namespace

std::string S3Credentials::describe() const {
  if (anonymous()) {
    return "anonymous (unsigned requests)";
  }
  return fmt::format("access key {} from {}{}", access_key, source, session_token.empty() ? "" : " (session token ***)");
}

Result<S3Credentials> resolve_s3_credentials(const RemoteSpec& spec) {
  S3Credentials c;
  const std::string profile_env = env("AWS_PROFILE");
  const std::string profile = !spec.profile.empty() ? spec.profile : !profile_env.empty() ? profile_env : "default";
  const bool named = !spec.profile.empty() || !profile_env.empty();
  const std::string credentials_file = home_file("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials");
  const std::string config_file = home_file("AWS_CONFIG_FILE", "/.aws/config");
  const auto config = config_file.empty()
                          ? std::nullopt
                          : read_section(config_file, profile == "default" ? "default" : "profile " + profile);

  c.region = spec.region;
  for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (c.region.empty()) {
      c.region = env(var);
    }
  }
  if (c.region.empty() && config && config->count("region") != 0) {
    c.region = config->at("region");
  }
  if (c.region.empty()) {
    c.region = "us-east-1";
  }

  if (spec.anonymous) {
    c.source = "anonymous";
    return c;
  }
  if (!env("AWS_ACCESS_KEY_ID").empty() && !env("AWS_SECRET_ACCESS_KEY").empty() && spec.profile.empty()) {
    c.access_key = env("AWS_ACCESS_KEY_ID");
    c.secret_key = env("AWS_SECRET_ACCESS_KEY");
    c.session_token = env("AWS_SESSION_TOKEN");
    c.source = "the environment (AWS_ACCESS_KEY_ID)";
    return c;
  }
  for (const auto& [file, section] : {std::pair{credentials_file, profile},
                                      std::pair{config_file, profile == "default" ? profile : "profile " + profile}}) {
    if (file.empty()) {
      continue;
    }
    const auto values = read_section(file, section);
    if (!values) {
      continue;
    }
    const auto get = [&](const char* k) { return values->count(k) != 0 ? values->at(k) : std::string(); };
    c.access_key = get("aws_access_key_id");
    c.secret_key = get("aws_secret_access_key");
    c.session_token = get("aws_session_token");
    if (c.access_key.empty() != c.secret_key.empty()) {
      return make_error(ErrorCode::permission_denied,
                        fmt::format("profile '{}' in {} has only half of a key pair (give both aws_access_key_id "
                                    "and aws_secret_access_key)",
                                    profile, file));
    }
    if (!c.access_key.empty()) {
      c.source = fmt::format("profile '{}' in {}", profile, file);
      return c;
    }
  }
  if (named) {
    return make_error(ErrorCode::permission_denied,
                      fmt::format("AWS profile '{}' has no credentials in {} or {} (add aws_access_key_id and "
                                  "aws_secret_access_key under [{}], or set AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY)",
                                  profile, credentials_file.empty() ? "~/.aws/credentials" : credentials_file,
                                  config_file.empty() ? "~/.aws/config" : config_file, profile));
  }
  c = S3Credentials{{}, {}, {}, c.region, "anonymous"};
  return c;
}

}  // namespace kcache::remote
