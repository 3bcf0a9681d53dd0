// RequestStats: the request counters of a cache directory and of a
// `kcache run` (kcache/request_stats.hpp, store/file/request_file.hpp).
#include "kcache/request_stats.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "store/file/request_file.hpp"
#include "store/file/shared_file.hpp"
#include "util/hex.hpp"
#include "util/random_bytes.hpp"

namespace kcache {

namespace {

constexpr std::size_t k_row_words = 16;
constexpr std::size_t k_name_words = 2;  // route[16]
constexpr std::size_t k_first_counter = 1 + k_name_words;
constexpr std::size_t k_header_words = 8;
constexpr std::size_t k_id_word = 2;  // after magic, version and rows
constexpr unsigned k_other_row = RequestStats::k_rows - 1;
constexpr std::uint64_t k_tag_bit = std::uint64_t{1} << 63;
constexpr std::array<char, 8> k_magic{'K', 'C', 'R', 'E', 'Q', '0', '0', '1'};
constexpr store::SharedFileFormat k_format{"requests", k_magic, 1, RequestStats::k_rows, RequestStats::k_file_size};
static_assert(k_header_words * 8 + RequestStats::k_rows * k_row_words * 8 <= RequestStats::k_file_size);

// Counter words of a row, after its tag and name.
namespace word {
constexpr unsigned served_first = 0;  // one per Tier
constexpr unsigned compiled = k_tier_count;
constexpr unsigned uncached = compiled + 1;
constexpr unsigned failed = uncached + 1;
constexpr unsigned compile_us_saved = failed + 1;
constexpr unsigned compile_us = compile_us_saved + 1;
constexpr unsigned served_failed = compile_us + 1;  // a reserved word (0) in files of older kcaches
constexpr unsigned count = served_failed + 1;
}  // namespace word
static_assert(word::count <= k_row_words - k_first_counter);

constexpr std::array<std::string_view, k_request_outcome_count> k_outcome_names{"served", "compiled", "uncached",
                                                                                 "failed", "served_failure"};

std::uint64_t tag_of(std::string_view route) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (const char c : route) {
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  return h | k_tag_bit;
}

std::uint64_t load(const std::uint64_t* w) noexcept {
  // atomic_ref needs a non-const object; the word is only read.
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(w)).load(std::memory_order_relaxed);
}

bool header_ok(const void* data, std::uint64_t id) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint32_t version = 0;
  std::uint32_t rows = 0;
  std::uint64_t file_id = 0;
  std::memcpy(&version, bytes + 8, 4);
  std::memcpy(&rows, bytes + 12, 4);
  std::memcpy(&file_id, bytes + k_id_word * 8, 8);
  return std::memcmp(bytes, k_magic.data(), 8) == 0 && version == k_format.version && rows == k_format.count &&
         file_id == id;
}

}  // namespace

// Makes RequestStats objects over a mapping (or none).
struct RequestStatsAccess {
  static std::unique_ptr<RequestStats> over(void* mapped) {
    std::unique_ptr<RequestStats> r(new RequestStats());
    r->m_mapped = mapped;
    if (mapped == nullptr) {
      r->m_local = std::make_unique<std::uint64_t[]>(RequestStats::k_file_size / 8);
    }
    return r;
  }
};

std::string_view to_string(RequestOutcome outcome) noexcept {
  const auto i = static_cast<unsigned>(outcome);
  return i < k_request_outcome_count ? k_outcome_names[i] : std::string_view("?");
}

std::optional<RequestOutcome> parse_request_outcome(std::string_view name) noexcept {
  for (unsigned i = 0; i < k_request_outcome_count; ++i) {
    if (k_outcome_names[i] == name) {
      return static_cast<RequestOutcome>(i);
    }
  }
  return std::nullopt;
}

std::uint64_t RequestCounts::served_total() const noexcept {
  std::uint64_t n = 0;
  for (const std::uint64_t s : served) {
    n += s;
  }
  return n;
}

std::uint64_t RequestCounts::total() const noexcept { return served_total() + compiled + uncached + failed; }

RequestCounts& RequestCounts::operator+=(const RequestCounts& o) noexcept {
  for (unsigned t = 0; t < k_tier_count; ++t) {
    served[t] += o.served[t];
  }
  compiled += o.compiled;
  uncached += o.uncached;
  failed += o.failed;
  compile_us_saved += o.compile_us_saved;
  compile_us += o.compile_us;
  served_failed += o.served_failed;
  return *this;
}

bool RequestStats::valid_route(std::string_view route) noexcept {
  if (route.empty() || route.size() > k_max_route_bytes) {
    return false;
  }
  for (const char c : route) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

RequestStats::~RequestStats() { store::unmap_shared_file(m_mapped, k_format); }

std::uint64_t* RequestStats::row(unsigned index) const noexcept {
  auto* base = m_mapped != nullptr ? static_cast<std::uint64_t*>(m_mapped) : m_local.get();
  return base + k_header_words + std::size_t{index} * k_row_words;
}

unsigned RequestStats::row_of(std::string_view route) noexcept {
  if (!valid_route(route) || route == "other") {
    return k_other_row;
  }
  const std::uint64_t tag = tag_of(route);
  for (unsigned i = 0; i < k_other_row; ++i) {
    std::uint64_t* r = row(i);
    std::uint64_t seen = std::atomic_ref<std::uint64_t>(r[0]).load(std::memory_order_acquire);
    if (seen == 0 && std::atomic_ref<std::uint64_t>(r[0]).compare_exchange_strong(seen, tag)) {
      // Taken: the name follows (a reader that comes in between sees no name yet).
      std::array<std::uint64_t, k_name_words> name{};
      std::memcpy(name.data(), route.data(), route.size());
      for (std::size_t w = 0; w < k_name_words; ++w) {
        std::atomic_ref<std::uint64_t>(r[1 + w]).store(name[w], std::memory_order_release);
      }
      return i;
    }
    if (seen == tag) {
      return i;
    }
  }
  return k_other_row;
}

void RequestStats::record(std::string_view route, RequestOutcome outcome, std::optional<Tier> tier,
                          std::uint64_t compile_us) noexcept {
  std::uint64_t* counters = row(row_of(route)) + k_first_counter;
  const auto add = [&](unsigned word, std::uint64_t value) {
    std::atomic_ref<std::uint64_t>(counters[word]).fetch_add(value, std::memory_order_relaxed);
  };
  switch (outcome) {
    case RequestOutcome::served_failure:
      add(word::served_failed, 1);
      [[fallthrough]];
    case RequestOutcome::served: {
      const auto t = static_cast<unsigned>(tier.value_or(Tier::disk));
      add(word::served_first + (t < k_tier_count ? t : static_cast<unsigned>(Tier::disk)), 1);
      add(word::compile_us_saved, compile_us);
      return;
    }
    case RequestOutcome::compiled:
      add(word::compiled, 1);
      break;
    case RequestOutcome::uncached:
      add(word::uncached, 1);
      break;
    case RequestOutcome::failed:
      add(word::failed, 1);
      break;
  }
  add(word::compile_us, compile_us);
}

std::size_t RequestStats::read_rows(Row* out, std::size_t max) const noexcept {
  std::size_t n = 0;
  for (unsigned i = 0; i < k_rows && n < max; ++i) {
    const std::uint64_t* r = row(i);
    Row& rr = out[n];
    rr = Row{};
    if (i == k_other_row) {
      std::memcpy(rr.route.data(), "other", 6);
    } else {
      if (load(r) == 0) {
        continue;
      }
      for (std::size_t w = 0; w < k_name_words; ++w) {
        const std::uint64_t v =
            std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(r + 1 + w)).load(std::memory_order_acquire);
        std::memcpy(rr.route.data() + w * 8, &v, 8);
      }
      if (!valid_route(std::string_view(rr.route.data()))) {
        std::memcpy(rr.route.data(), "(unnamed)", 10);  // its maker is between taking the row and naming it
      }
    }
    const std::uint64_t* c = r + k_first_counter;
    for (unsigned t = 0; t < k_tier_count; ++t) {
      rr.counts.served[t] = load(c + word::served_first + t);
    }
    rr.counts.compiled = load(c + word::compiled);
    rr.counts.uncached = load(c + word::uncached);
    rr.counts.failed = load(c + word::failed);
    rr.counts.compile_us_saved = load(c + word::compile_us_saved);
    rr.counts.compile_us = load(c + word::compile_us);
    rr.counts.served_failed = load(c + word::served_failed);
    if (i == k_other_row && rr.counts.total() == 0) {
      continue;
    }
    ++n;
  }
  return n;
}

std::vector<RouteRequests> RequestStats::routes() const {
  std::array<Row, k_rows> rows;
  const std::size_t n = read_rows(rows.data(), rows.size());
  std::vector<RouteRequests> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(RouteRequests{rows[i].route.data(), rows[i].counts});
  }
  return out;
}

RequestCounts RequestStats::total() const {
  RequestCounts sum;
  for (const auto& r : routes()) {
    sum += r.counts;
  }
  return sum;
}

std::unique_ptr<RequestStats> RequestStats::open_existing(const std::filesystem::path& cache_dir) {
  const std::filesystem::path stats = cache_dir / "v1" / "stats";
  struct stat st {};
  if (::lstat((stats / k_format.name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return nullptr;
  }
  const util::Fd dir(::open(stats.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    return nullptr;
  }
  void* mapped = store::map_shared_file(dir.get(), k_format, 0600).data;
  return mapped == nullptr ? nullptr : RequestStatsAccess::over(mapped);
}

// ---------------------------------------------------------------- the default route

namespace {

// The default route, read on every request without a lock or a copy: a
// NUL-terminated name that is never freed once published (it is set a few
// times in a process's life, at most).
std::atomic<const char*> g_default_route{"library"};

}  // namespace

void set_default_request_route(std::string_view route) noexcept {
  if (!RequestStats::valid_route(route)) {
    return;
  }
  auto* name = new (std::nothrow) char[route.size() + 1];
  if (name == nullptr) {
    return;
  }
  std::memcpy(name, route.data(), route.size());
  name[route.size()] = '\0';
  g_default_route.store(name, std::memory_order_release);  // the one before it is left: a reader may hold it
}

std::string default_request_route() { return g_default_route.load(std::memory_order_acquire); }

Tier served_tier(const Store& store) noexcept {
  if (const auto noted = Store::last_served_tier()) {
    return *noted;
  }
  return store.tier_kind().value_or(Tier::disk);
}

// ---------------------------------------------------------------- recording

namespace {

void record_in(RequestStats* stats, std::string_view route, RequestOutcome outcome, std::optional<Tier> tier,
               std::uint64_t compile_us) noexcept {
  if (stats == nullptr) {
    return;
  }
  stats->record(route.empty() ? std::string_view(g_default_route.load(std::memory_order_acquire)) : route, outcome,
                tier, compile_us);
}

// The counters of cache directories named by path, opened once each and
// kept for the life of the process (a few are ever used).
RequestStats* stats_of_directory(const std::filesystem::path& cache_dir) {
  static std::mutex mutex;
  static auto* opened = new std::map<std::string, std::unique_ptr<RequestStats>>();  // never freed: used at exit
  std::lock_guard lock(mutex);
  const std::string name = cache_dir.lexically_normal().string();
  if (const auto it = opened->find(name); it != opened->end()) {
    return it->second.get();
  }
  if (opened->size() >= 16) {
    return nullptr;
  }
  const std::filesystem::path stats = cache_dir / "v1" / "stats";
  const util::Fd dir(::open(stats.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    return nullptr;  // not a cache directory (yet): nothing to count in
  }
  struct stat st {};
  // A directory shared with a group (setgid, docs/configuration.md) gets a group-writable file.
  const mode_t mode = ::fstat(dir.get(), &st) == 0 && (st.st_mode & S_ISGID) != 0 ? 0660 : 0600;
  auto stats_file = store::open_request_stats(dir.get(), mode);
  RequestStats* raw = stats_file.get();
  opened->emplace(name, std::move(stats_file));
  return raw;
}

}  // namespace

void record_request(Store* store, std::string_view route, RequestOutcome outcome, std::optional<Tier> tier,
                    std::uint64_t compile_us) noexcept {
  record_in(store != nullptr ? store->request_stats() : nullptr, route, outcome, tier, compile_us);
  record_in(store::run_report(), route, outcome, tier, compile_us);
}

void record_request(const std::filesystem::path& cache_dir, std::string_view route, RequestOutcome outcome,
                    std::optional<Tier> tier, std::uint64_t compile_us) noexcept {
  RequestStats* stats = nullptr;
  try {
    stats = stats_of_directory(cache_dir);
  } catch (...) {
    stats = nullptr;
  }
  record_in(stats, route, outcome, tier, compile_us);
  record_in(store::run_report(), route, outcome, tier, compile_us);
}

// ---------------------------------------------------------------- files

namespace store {

std::unique_ptr<RequestStats> open_request_stats(int stats_dir_fd, mode_t mode) {
  void* mapped = stats_dir_fd >= 0 ? map_shared_file(stats_dir_fd, k_format, mode).data : nullptr;
  return RequestStatsAccess::over(mapped);
}

Result<RunReportFile> create_run_report() {
  util::Fd fd(::memfd_create("kcache-run-report", 0));
  if (!fd) {
    return make_error(ErrorCode::io, std::string("cannot make the run's report in memory (memfd_create): ") +
                                         std::strerror(errno));
  }
  std::uint64_t id = 0;
  if (auto r = util::random_bytes(&id, sizeof id, "the run's report id"); !r) {
    return tl::unexpected(r.error());
  }
  id |= 1;  // never 0, the id of a cache directory's file
  std::string image(RequestStats::k_file_size, '\0');
  std::memcpy(image.data(), k_magic.data(), 8);
  std::memcpy(image.data() + 8, &k_format.version, 4);
  std::memcpy(image.data() + 12, &k_format.count, 4);
  std::memcpy(image.data() + k_id_word * 8, &id, 8);
  if (::pwrite(fd.get(), image.data(), image.size(), 0) != static_cast<ssize_t>(image.size())) {
    return make_error(ErrorCode::io, std::string("cannot write the run's report: ") + std::strerror(errno));
  }
  // Out of the way of the low descriptors that scripts use for themselves (exec 3>file).
  if (const int high = ::fcntl(fd.get(), F_DUPFD, 200); high >= 0) {
    fd.reset(high);
  }
  RunReportFile out;
  out.env_value = std::to_string(::getpid()) + ":" + std::to_string(fd.get()) + ":" +
                  util::to_hex(reinterpret_cast<const std::uint8_t*>(&id), sizeof id);
  out.fd = std::move(fd);
  return out;
}

namespace {

struct RunReportState {
  std::unique_ptr<RequestStats> stats;
  pid_t top = 0;
};

// Parses KCACHE_RUN_REPORT and maps the report it names; empty when there is none.
RunReportState open_run_report() {
  RunReportState state;
  const char* value = std::getenv(k_run_report_env);
  if (value == nullptr || *value == '\0') {
    return state;
  }
  const std::string_view v(value);
  const auto first = v.find(':');
  const auto second = first == std::string_view::npos ? first : v.find(':', first + 1);
  if (second == std::string_view::npos || v.size() - second - 1 != 16) {
    return state;
  }
  long pid = 0;
  int fd_number = 0;
  std::uint64_t id = 0;
  const auto number = [](std::string_view text, auto& out, int base) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
    return ec == std::errc() && end == text.data() + text.size() && !text.empty();
  };
  if (!number(v.substr(0, first), pid, 10) || !number(v.substr(first + 1, second - first - 1), fd_number, 10) ||
      pid <= 0 || fd_number < 0) {
    return state;
  }
  // The id as create_run_report printed it: its bytes in memory order.
  const auto bytes = util::from_hex(v.substr(second + 1));
  if (!bytes || bytes->size() != sizeof id) {
    return state;
  }
  std::memcpy(&id, bytes->data(), sizeof id);
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd_number);
  const util::Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size != static_cast<off_t>(RequestStats::k_file_size)) {
    return state;
  }
  void* mapped = ::mmap(nullptr, RequestStats::k_file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (mapped == MAP_FAILED) {
    return state;
  }
  if (!header_ok(mapped, id)) {
    ::munmap(mapped, RequestStats::k_file_size);
    return state;
  }
  state.stats = RequestStatsAccess::over(mapped);
  state.top = static_cast<pid_t>(pid);
  return state;
}

const RunReportState& run_report_state() {
  static const RunReportState* state = [] {
    try {
      return new RunReportState(open_run_report());  // never freed: used at exit
    } catch (...) {
      return new RunReportState();
    }
  }();
  return *state;
}

}  // namespace

RequestStats* run_report() noexcept { return run_report_state().stats.get(); }

bool is_run_top() noexcept {
  const RunReportState& s = run_report_state();
  return s.stats != nullptr && s.top == ::getpid();
}

}  // namespace store

}  // namespace kcache
