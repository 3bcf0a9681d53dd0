// cache/remote_tiers.hpp: the remote stores a Config describes.
//
// Thread-safety: free function; the stores it returns are thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kcache/config.hpp"
#include "store/remote/remote_store.hpp"

namespace kcache {

// The codec settings of every remote `config` describes: compression, the
// signing key (remote_key_file) and the keys accepted on read
// (remote_read_key_files), loaded from their files. Failure: the first key
// file that cannot be used (the message names it and says what to do).
Result<remote::CodecOptions> remote_codec_options(const Config& config);

// Parses one remote URL of `config` and applies the settings that hold for
// every remote: `remote_ca_file` for a TLS remote (https, rediss) whose URL
// names no ca_file. Failure: as remote::parse_remote_url.
Result<remote::RemoteSpec> configured_remote_spec(const Config& config, const std::string& url);

// Opens one RemoteStore per URL in `config.remote`, in order, with the team
// keys, compression and breaker settings. Never fails as a whole: a URL or
// key file that cannot be used is reported through `warn` (one line) and left
// out (a bad key file leaves every remote out). No network traffic.
// `local`, when given, is where large objects are streamed by get()
// (RemoteStoreOptions::local; it must outlive the stores).
std::vector<std::unique_ptr<remote::RemoteStore>> open_remote_stores(
    const Config& config, const std::function<void(const std::string&)>& warn, FileStore* local = nullptr);

}  // namespace kcache
