// The canonical plan file-name schema (see kcache/engine_name.hpp).
#include "kcache/engine_name.hpp"

#include <algorithm>
#include <vector>

namespace kcache {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z'); }
bool is_segment_char(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z') || c == '-'; }

bool all_digits(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_digit); }

bool is_lower_alnum_word(std::string_view s) {
  return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), is_lower_alnum);
}

// "87", "90a"
bool is_sm_value(std::string_view s) {
  if (s == "na") {
    return true;
  }
  if (s.empty()) {
    return false;
  }
  std::string_view digits = s;
  if (s.back() >= 'a' && s.back() <= 'z') {
    digits = s.substr(0, s.size() - 1);
  }
  return all_digits(digits);
}

bool is_version_value(std::string_view s) { return s == "na" || all_digits(s); }

// True when `segment` is one of the schema's own tags and would confuse parse().
bool is_schema_tag(std::string_view segment) {
  if (segment.starts_with("sm") && segment.size() > 2 && is_sm_value(segment.substr(2))) {
    return true;
  }
  if (segment.starts_with("jp") && is_version_value(segment.substr(2))) {
    return true;
  }
  if (segment.starts_with("trt") && is_version_value(segment.substr(3))) {
    return true;
  }
  return false;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

}  // namespace

Result<void> validate_model_name(std::string_view model) {
  if (model.empty()) {
    return make_error(ErrorCode::invalid_argument, "model name is empty; give each entry a name like \"resnet50\"");
  }
  if (model.size() > k_engine_model_max) {
    return make_error(ErrorCode::invalid_argument,
                      "model name '" + std::string(model) + "' is longer than 128 characters; shorten it");
  }
  for (const std::string_view segment : split(model, '_')) {
    if (segment.empty()) {
      return make_error(ErrorCode::invalid_argument,
                        "model name '" + std::string(model) +
                            "' has an empty segment (leading, trailing or doubled '_'); remove the extra '_'");
    }
    if (!std::all_of(segment.begin(), segment.end(), is_segment_char)) {
      return make_error(ErrorCode::invalid_argument,
                        "model name '" + std::string(model) +
                            "' may hold only letters, digits, '-' and '_' (no dots, slashes or spaces); rename it");
    }
    if (is_schema_tag(segment)) {
      return make_error(ErrorCode::invalid_argument,
                        "model name '" + std::string(model) + "' contains '" + std::string(segment) +
                            "', which collides with the file-name schema (sm<N>, jp<N>, trt<N>); rename it, e.g. '" +
                            std::string(model.substr(0, model.find(segment))) + "v" + std::string(segment) + "'");
    }
  }
  return {};
}

Result<std::string> EngineName::build() const {
  if (auto ok = validate_model_name(model); !ok) {
    return tl::unexpected(ok.error());
  }
  if (!is_sm_value(sm)) {
    return make_error(ErrorCode::invalid_argument, "SM '" + sm + "' must be digits with an optional letter (87, 90a) or 'na'");
  }
  if (!is_version_value(jp)) {
    return make_error(ErrorCode::invalid_argument, "JetPack tag '" + jp + "' must be digits without dots (62) or 'na'");
  }
  if (!is_version_value(trt)) {
    return make_error(ErrorCode::invalid_argument, "TensorRT tag '" + trt + "' must be digits without dots (103) or 'na'");
  }
  if (!is_lower_alnum_word(precision)) {
    return make_error(ErrorCode::invalid_argument, "precision '" + precision + "' must be lowercase letters and digits (fp16)");
  }
  if (!is_lower_alnum_word(ext)) {
    return make_error(ErrorCode::invalid_argument, "extension '" + ext + "' must be lowercase letters and digits (engine)");
  }
  return model + "_sm" + sm + "_jp" + jp + "_trt" + trt + "_" + precision + "." + ext;
}

Result<EngineName> EngineName::parse(std::string_view file) {
  auto bad = [&](std::string_view why) {
    return make_error(ErrorCode::invalid_argument,
                      "'" + std::string(file) + "' is not a plan file name ({model}_sm{sm}_jp{jp}_trt{trt}_{precision}.{ext}): " +
                          std::string(why));
  };
  const std::size_t dot = file.rfind('.');
  if (dot == std::string_view::npos) {
    return bad("no extension");
  }
  EngineName n;
  n.ext = std::string(file.substr(dot + 1));
  std::vector<std::string_view> parts = split(file.substr(0, dot), '_');
  if (parts.size() < 5) {
    return bad("too few '_' separated parts");
  }
  n.precision = std::string(parts.back());
  parts.pop_back();
  const std::string_view trt = parts.back();
  parts.pop_back();
  const std::string_view jp = parts.back();
  parts.pop_back();
  const std::string_view sm = parts.back();
  parts.pop_back();
  if (!trt.starts_with("trt") || !jp.starts_with("jp") || !sm.starts_with("sm")) {
    return bad("missing _sm, _jp or _trt part");
  }
  n.sm = std::string(sm.substr(2));
  n.jp = std::string(jp.substr(2));
  n.trt = std::string(trt.substr(3));
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      n.model += '_';
    }
    n.model += parts[i];
  }
  auto rebuilt = n.build();
  if (!rebuilt) {
    return bad(rebuilt.error().message);
  }
  if (*rebuilt != file) {
    return bad("it does not round-trip");
  }
  return n;
}

std::string version_tag(std::string_view version) {
  if (version.empty() || version == "na") {
    return "na";
  }
  std::vector<std::string_view> parts = split(version, '.');
  for (const auto p : parts) {
    if (!all_digits(p)) {
      return "na";
    }
  }
  std::string out(parts[0]);
  if (parts.size() > 1) {
    out += parts[1];
  }
  return out;
}

std::string extension_for_kind(std::string_view kind) {
  if (kind == "blob") {
    return "bin";
  }
  return std::string(kind);
}

}  // namespace kcache
