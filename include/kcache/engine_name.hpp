// kcache/engine_name.hpp: the canonical file name of a plan artifact.
//
// Schema (version 1), one name per (model, host, precision, kind):
//
//   name      := model "_sm" sm "_jp" jp "_trt" trt "_" precision "." ext
//   model     := segment ("_" segment)*           at most 128 characters
//   segment   := [A-Za-z0-9-]+, and not one of the schema's own tags:
//                "sm" DIGIT+ [a-z]?, "jp" (DIGIT+ | "na"), "trt" (DIGIT+ | "na")
//   sm        := DIGIT+ [a-z]? | "na"             "87", "90a"; "na" when absent
//   jp, trt   := DIGIT+ | "na"                    versions without dots: 6.2 -> "62"
//   precision := [a-z0-9]+                        "fp16", "int8"
//   ext       := [a-z0-9]+                        from the artifact kind (engine, cubin, ...)
//
// Example: SM 8.7, JetPack 6.2, TensorRT 10.3, FP16, kind "engine" gives
// `dinov2_vpr_sm87_jp62_trt103_fp16.engine`.
//
// build() and parse() round-trip: parse(build(n)) == n for every name build()
// accepts, and build() rejects every name that would not round-trip (a model
// that contains a schema tag such as "_sm87", a dot, a slash, an empty segment).
// A different host gives a different name, so files built for another host are
// never consulted or touched.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache {

inline constexpr int k_engine_name_schema_version = 1;
inline constexpr std::size_t k_engine_model_max = 128;

struct EngineName {
  std::string model;      // "dinov2_vpr"
  std::string sm;         // "87", "90a", or "na"
  std::string jp;         // "62" or "na"
  std::string trt;        // "103" or "na"
  std::string precision;  // "fp16"
  std::string ext;        // "engine"

  // Returns the file name, or invalid_argument naming the part that would not
  // round-trip and how to fix it.
  Result<std::string> build() const;

  // Parses a file name (no directory). Returns invalid_argument when `file`
  // does not follow the schema.
  static Result<EngineName> parse(std::string_view file);

  friend bool operator==(const EngineName&, const EngineName&) = default;
};

// Checks a model name against the schema. Returns invalid_argument with the fix.
Result<void> validate_model_name(std::string_view model);

// Writes a version without dots, keeping major and minor: "6.2" -> "62",
// "10.3.0.26" -> "103", "13" -> "13", "" or "na" -> "na". Anything but digits
// and dots gives "na".
std::string version_tag(std::string_view version);

// The file extension of an artifact kind: "engine" -> "engine", "cubin" ->
// "cubin", "fatbin" -> "fatbin", "ptx" -> "ptx", "onnx" -> "onnx", "blob" ->
// "bin"; any other valid kind is its own extension.
std::string extension_for_kind(std::string_view kind);

}  // namespace kcache
