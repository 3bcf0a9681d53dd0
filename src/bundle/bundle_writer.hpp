// bundle/bundle_writer.hpp: writing a bundle to an output of the caller's
// choosing (create_bundle in kcache/bundle.hpp writes to a path; `kcache
// bundle create -o -` writes to standard output).
#pragma once

#include "kcache/bundle.hpp"

#include <functional>
#include <string_view>
#include <vector>

namespace kcache::bundle {

// Writes the bytes of a bundle to a descriptor; errors name the output.
using BundleBytes = std::function<Result<void>(int fd)>;

// Checks and lays out `artifacts` as create_bundle does (the signing key is
// read and every artifact verified before `output` is called), then calls
// `output` once with the writer of the bundle's bytes; `output` opens the
// destination and calls the writer (util::write_output_file_with, or the
// writer on a descriptor it holds). `out_name` names the destination in
// write errors ("cannot write OUT: No space left on device"). Returns what was
// written, or the first error (of the checks, of `output`, of the writer).
Result<BundleSummary> write_bundle(std::vector<Artifact> artifacts, const BundleCreateOptions& options,
                                   std::string_view out_name,
                                   const std::function<Result<void>(const BundleBytes& bytes)>& output);

// write_bundle() to the open descriptor `fd` (standard output, a pipe).
Result<BundleSummary> write_bundle_to(int fd, std::string_view out_name, std::vector<Artifact> artifacts,
                                      const BundleCreateOptions& options);

} // namespace kcache::bundle
