// Ed25519 key files: PEM with the fixed RFC 8410 prefixes (bundle_keys.hpp).
#include "bundle/bundle_keys.hpp"

#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/input_file.hpp"
#include "util/posix_io.hpp"
#include "util/random_bytes.hpp"
#include "util/sha256.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <fmt/format.h>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace kcache {

namespace bundle {

namespace {

constexpr std::size_t k_key_file_max_bytes = 4096;
constexpr std::string_view k_private_label = "PRIVATE KEY";
constexpr std::string_view k_public_label = "PUBLIC KEY";
constexpr std::array<std::uint8_t, 16> k_pkcs8_prefix{
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20};
constexpr std::array<std::uint8_t, 12> k_spki_prefix{0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                                     0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
constexpr std::string_view k_base64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string& bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t j = 0; j < 3; ++j) {
      v = (v << 8) | (j < n ? static_cast<std::uint8_t>(bytes[i + j]) : 0U);
    }
    for (std::size_t j = 0; j < 4; ++j) {
      out += j <= n ? k_base64[(v >> (18 - 6 * j)) & 63U] : '=';
    }
  }
  return out;
}

std::optional<std::string> unbase64(std::string_view text) {
  std::string out;
  std::uint32_t v = 0;
  int bits = 0;
  std::size_t pad = 0;
  for (char c : text) {
    if (c == '=') {
      ++pad;
      continue;
    }
    const std::size_t at = k_base64.find(c);
    if (at == std::string_view::npos || pad != 0) {
      return std::nullopt;
    }
    v = (v << 6) | static_cast<std::uint32_t>(at);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xffU);
    }
  }
  if (pad > 2 || (text.size() % 4) != 0) {
    return std::nullopt;
  }
  return out;
}

std::string pem(std::string_view label, const std::string& der) {
  return fmt::format("-----BEGIN {0}-----\n{1}\n-----END {0}-----\n", label, base64(der));
}

// The DER inside a PEM block labelled `label`, or nullopt.
std::optional<std::string> unpem(std::string_view text, std::string_view label) {
  const std::string begin = fmt::format("-----BEGIN {}-----", label);
  const std::string end = fmt::format("-----END {}-----", label);
  const std::size_t b = text.find(begin);
  const std::size_t e = text.find(end);
  if (b == std::string_view::npos || e == std::string_view::npos || e < b) {
    return std::nullopt;
  }
  std::string body;
  for (char c : text.substr(b + begin.size(), e - b - begin.size())) {
    if (c != '\n' && c != '\r' && c != ' ' && c != '\t') {
      body += c;
    }
  }
  return unbase64(body);
}

template <std::size_t N>
bool starts_with(const std::string& der, const std::array<std::uint8_t, N>& prefix) {
  return der.size() == N + 32 &&
         std::equal(prefix.begin(), prefix.end(), der.begin(),
                    [](std::uint8_t p, char c) { return p == static_cast<std::uint8_t>(c); });
}

// Reads a key file whole (util/input_file.hpp: a symlink is followed, a
// FIFO never blocks); `st` receives the status of the file read.
Result<std::string> read_key_file(const std::filesystem::path& path, std::string_view what,
                                  struct stat& st) {
  const std::string name = path.string();
  auto file = util::open_input_file(path, what);
  if (!file) {
    Error e = file.error();
    if (e.code == ErrorCode::not_found) {
      e.message += what == "bundle signing key" ? " (`kcache bundle keygen KEYFILE` writes one)"
                                                : " (`kcache bundle keygen` writes one beside its private key, KEYFILE.pub)";
    }
    return tl::unexpected(std::move(e));
  }
  st = file->st;
  if (st.st_size > static_cast<off_t>(k_key_file_max_bytes)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} {} is not a key file ({} bytes; a key file has at most {})", what,
                                  name, st.st_size, k_key_file_max_bytes));
  }
  std::string bytes;
  if (int e = util::io::read_bounded(file->fd.get(), k_key_file_max_bytes, bytes,
                                     static_cast<std::size_t>(st.st_size));
      e != 0) {
    return make_errno_error(e, fmt::format("read {} {}", what, name));
  }
  if (bytes.size() > k_key_file_max_bytes) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} {} is not a key file (it grew past {} bytes while it was read)",
                                  what, name, k_key_file_max_bytes));
  }
  return bytes;
}

// Creates `path` with `mode` (exactly), refusing to replace a file, and writes `text`.
Result<void> write_new_file(const std::filesystem::path& path, const std::string& text,
                            mode_t mode) {
  const std::string name = path.string();
  util::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) {
    const int err = errno;
    if (err == EEXIST) {
      return make_error(
          ErrorCode::invalid_argument,
          fmt::format("{} already exists; kcache never replaces a key file (remove it first, or "
                      "choose another name)",
                      name));
    }
    return make_errno_error(err, "create key file " + name);
  }
  // The umask may have cleared bits but never adds any; make the mode exact.
  if (::fchmod(fd.get(), mode) != 0 || util::io::write_all(fd.get(), text) != 0 ||
      ::fsync(fd.get()) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return make_errno_error(err, "write key file " + name);
  }
  return {};
}

} // namespace

std::string key_id(const Ed25519PublicKey& key) {
  const auto digest =
      util::sha256(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()));
  return util::to_hex(digest.data(), 8);
}

Result<PrivateKey> read_private_key(const std::filesystem::path& path) {
  struct stat st {};
  auto text = read_key_file(path, "bundle signing key", st);
  if (!text) {
    return tl::unexpected(text.error());
  }
  const std::string name = path.string();
  // A public key given where the private one belongs (`--sign KEY.pub`): say
  // so, rather than ask for a mode a public key need not have.
  if (!unpem(*text, k_private_label) && unpem(*text, k_public_label)) {
    std::string private_name = name;
    if (private_name.size() > 4 && private_name.compare(private_name.size() - 4, 4, ".pub") == 0) {
      private_name.resize(private_name.size() - 4);
    }
    return make_error(
        ErrorCode::invalid_argument,
        fmt::format("{} is a public key; signing needs the private key (the KEYFILE of `kcache bundle "
                    "keygen KEYFILE`, e.g. {})",
                    name, private_name));
  }
  if ((st.st_mode & 0077) != 0) {
    return make_error(
        ErrorCode::invalid_argument,
        fmt::format(
            "bundle signing key {} can be read by other users (mode {:o}); run `chmod 600 {}`",
            name, st.st_mode & 0777, name));
  }
  auto der = unpem(*text, k_private_label);
  if (!der || !starts_with(*der, k_pkcs8_prefix)) {
    return make_error(
        ErrorCode::invalid_argument,
        fmt::format(
            "{} is not an Ed25519 private key in PEM (write one with `kcache bundle keygen` "
            "or `openssl genpkey -algorithm ed25519`)",
            name));
  }
  PrivateKey key;
  std::copy(der->end() - 32, der->end(), key.seed.begin());
  auto pub = ed25519_public_key(key.seed);
  if (!pub) {
    return tl::unexpected(pub.error());
  }
  key.public_key.bytes = *pub;
  key.public_key.source = name;
  return key;
}

} // namespace bundle

std::string BundlePublicKey::id() const {
  return bundle::key_id(bytes);
}

Result<BundlePublicKey> read_bundle_public_key(const std::filesystem::path& path) {
  struct stat st {};
  auto text = bundle::read_key_file(path, "bundle public key", st);
  if (!text) {
    return tl::unexpected(text.error());
  }
  auto der = bundle::unpem(*text, bundle::k_public_label);
  if (!der || !bundle::starts_with(*der, bundle::k_spki_prefix)) {
    return make_error(
        ErrorCode::invalid_argument,
        fmt::format("{} is not an Ed25519 public key in PEM (`kcache bundle keygen` writes one; "
                    "`openssl pkey -in KEY -pubout` derives one from a private key)",
                    path.string()));
  }
  BundlePublicKey key;
  std::copy(der->end() - 32, der->end(), key.bytes.begin());
  key.source = path.string();
  return key;
}

Result<std::vector<BundlePublicKey>>
read_bundle_public_keys(const std::vector<std::filesystem::path>& paths) {
  std::vector<BundlePublicKey> keys;
  for (const auto& p : paths) {
    auto key = read_bundle_public_key(p);
    if (!key) {
      return tl::unexpected(key.error());
    }
    keys.push_back(std::move(*key));
  }
  return keys;
}

Result<BundlePublicKey> generate_bundle_keys(const std::filesystem::path& private_key_file,
                                             const std::filesystem::path& public_key_file) {
  if (std::error_code ec; std::filesystem::exists(public_key_file, ec)) {
    return make_error(
        ErrorCode::invalid_argument,
        fmt::format("{} already exists; kcache never replaces a key file (remove it first, or "
                    "choose another name)",
                    public_key_file.string()));
  }
  bundle::Ed25519Seed seed{};
  if (auto ok = util::random_bytes(seed.data(), seed.size(), "a new bundle key"); !ok) {
    return tl::unexpected(ok.error());
  }
  auto pub = bundle::ed25519_public_key(seed);
  if (!pub) {
    return tl::unexpected(pub.error());
  }
  std::string private_der(bundle::k_pkcs8_prefix.begin(), bundle::k_pkcs8_prefix.end());
  private_der.append(reinterpret_cast<const char*>(seed.data()), seed.size());
  std::string public_der(bundle::k_spki_prefix.begin(), bundle::k_spki_prefix.end());
  public_der.append(reinterpret_cast<const char*>(pub->data()), pub->size());
  if (auto w = bundle::write_new_file(private_key_file,
                                      bundle::pem(bundle::k_private_label, private_der), 0600);
      !w) {
    return tl::unexpected(w.error());
  }
  if (auto w = bundle::write_new_file(public_key_file,
                                      bundle::pem(bundle::k_public_label, public_der), 0644);
      !w) {
    ::unlink(private_key_file.c_str());
    return tl::unexpected(w.error());
  }
  BundlePublicKey key;
  key.bytes = *pub;
  key.source = public_key_file.string();
  return key;
}

} // namespace kcache
