// python/src/py_store.cpp: kcache.Config and kcache.Store (open_store).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "kcache/request_stats.hpp"
#include "kcache/tiered_store.hpp"
#include "kcache/toolkit.hpp"
#include "kcache/write_behind_store.hpp"

namespace kcache::python {

std::shared_ptr<StoreHandle> PyStore::handle() const {
  std::lock_guard lock(m_mutex);
  if (!m_handle) {
    raise(ErrorCode::invalid_argument, "this kcache store is closed; open another with kcache.open_store()");
  }
  return m_handle;
}

std::shared_ptr<StoreHandle> PyStore::take() {
  std::lock_guard lock(m_mutex);
  return std::move(m_handle);
}

namespace {

// Drops the lender's reference to a bytes object (from any thread). After the
// interpreter has gone the object is left as it is.
void release_bytes(PyObject* object) noexcept {
  if (nb::is_alive()) {
    nb::gil_scoped_acquire gil;
    Py_DECREF(object);
  }
}

}  // namespace

PayloadAllocator BytesLender::allocator() {
  return [this](std::size_t size) -> PayloadBuffer {
    nb::gil_scoped_acquire gil;
    PyObject* object = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
    if (object == nullptr) {
      PyErr_Clear();
      return {};  // no memory here: the store uses its own
    }
    std::shared_ptr<const void> owner(object, release_bytes);
    m_last = owner;
    return {std::move(owner), PyBytes_AS_STRING(object)};
  };
}

nb::object BytesLender::bytes_of(const Payload& payload) const {
  auto* object = static_cast<PyObject*>(const_cast<void*>(m_last.get()));
  if (object == nullptr || payload.empty() || payload.data() != PyBytes_AS_STRING(object) ||
      payload.size() != static_cast<std::size_t>(PyBytes_GET_SIZE(object))) {
    return {};
  }
  return nb::borrow(object);
}

namespace {

std::string setting_text_of(nb::handle value, const std::string& name);

// A setting's value as text; a NUL byte in it is refused, naming the setting.
std::string setting_text(nb::handle value, const std::string& name) {
  std::string text = setting_text_of(value, name);
  if (text.find('\0') != std::string::npos) {
    throw PyKcacheError{Error{ErrorCode::invalid_argument,
                              "setting '" + name + "' contains a NUL byte; pass the value without it", {}},
                        "config"};
  }
  return text;
}

std::string setting_text_of(nb::handle value, const std::string& name) {
  if (nb::isinstance<nb::bool_>(value)) {
    return nb::cast<bool>(value) ? "true" : "false";
  }
  if (nb::isinstance<nb::int_>(value) || nb::isinstance<nb::float_>(value)) {
    return nb::cast<std::string>(nb::str(value));
  }
  if (nb::isinstance<nb::str>(value)) {
    return nb::cast<std::string>(value);
  }
  if (nb::hasattr(value, "__fspath__")) {
    return nb::cast<std::string>(nb::module_::import_("os").attr("fspath")(value));
  }
  throw PyKcacheError{Error{ErrorCode::invalid_argument, "setting '" + name + "': expected str, int, bool or a path, not " +
                                         std::string(nb::type_name(value.type()).c_str()), {}}, "config"};
}

std::string value_of(const Config& c, const std::string& name) {
  for (const auto& row : c.rows()) {
    if (row.key == name) {
      return row.value;
    }
  }
  raise(ErrorCode::invalid_argument, "no setting named '" + name + "'; see kcache.setting_names()");
}

Config load_config(nb::kwargs overrides) {
  ConfigInputs inputs;
  for (auto [k, v] : overrides) {
    std::string name = nb::cast<std::string>(k);
    if (name == "config_file") {
      inputs.config_file = setting_text(v, name);
      continue;
    }
    inputs.command_line[name] = setting_text(v, name);
  }
  nb::gil_scoped_release release;
  auto config = Config::load_from(inputs);
  if (!config) {
    throw PyKcacheError{std::move(config.error()), "config"};
  }
  return std::move(*config);
}

void open_handle(StoreHandle& h, const Config& c);

nb::object open_store(std::optional<Config> config) {
  Config c;
  if (config) {
    c = *config;
  } else {
    c = load_config(nb::kwargs());
  }
  auto handle = std::make_shared<StoreHandle>();
  {
    nb::gil_scoped_release release;
    open_handle(*handle, c);
  }
  // PyStore holds a mutex (not movable): Python takes ownership of a new one.
  return nb::cast(new PyStore(std::move(handle), std::move(c)), nb::rv_policy::take_ownership);
}

// Opens the stores of `c` into `h` (without the GIL).
void open_handle(StoreHandle& h, const Config& c) {
  // As the kcache command does: the toolkit is looked for where the settings
  // say, and its version memo lives in the cache.
  if (!c.cuda_home.empty()) {
    ::setenv("KCACHE_CUDA_HOME", c.cuda_home.c_str(), 1);
  }
  // A disabled cache, or a read-only bundle image, has nothing written under its directory.
  if (c.disable || !c.cache_dir.empty()) {
    Toolkit::instance().set_memo_dir(memo_dir_for(c));
  }
  // Large payloads are read into memory of this process, never mapped: a
  // mapping would show what another process writes into the entry's file
  // after the check, and fault (SIGBUS, the end of the interpreter) where
  // the file was truncated (docs/python.md, "Zero-copy reads").
  Config copied = c;
  copied.large_reads = LargeReads::copied;
  h.store = unwrap(open_configured_store(copied));
  CacheOptions options;
  if (!c.disable && !c.cache_dir.empty()) {
    options.lock_dir = c.cache_dir / "v1" / "locks";
  }
  options.remote_lease = open_configured_lease(c);
  h.cache = std::make_unique<Cache>(*h.store, std::move(options));
}

// The layers of a store opened by open_configured_store: the write-behind
// queue (when puts are in the background) around the chain of tiers. A
// disabled store has neither.
struct Chain {
  WriteBehindStore* queue = nullptr;
  TieredStore* tiers = nullptr;
};

Chain chain_of(Store& store) {
  Chain c;
  Store* s = &store;
  if (auto* wb = dynamic_cast<WriteBehindStore*>(s)) {
    c.queue = wb;
    s = &wb->inner();
  }
  c.tiers = dynamic_cast<TieredStore*>(s);
  return c;
}

// A tier without the upload queue a writable remote tier has around it.
Store& unqueued(Store& tier) {
  if (auto* wb = dynamic_cast<WriteBehindStore*>(&tier)) {
    return wb->inner();
  }
  return tier;
}

bool is_remote(Store& tier) { return unqueued(tier).name() == "remote"; }

// Removes `key` from the tiers of this machine (memory, file), leaving the
// remote tiers alone; true when one of them held it. Errors only when every
// local tier failed.
Result<bool> remove_local(Store& store, const Key& key) {
  const Chain c = chain_of(store);
  if (c.tiers == nullptr) {
    return store.remove(key);
  }
  if (c.queue != nullptr) {
    (void)c.queue->flush();  // a queued put of the key must not land after the removal
  }
  bool removed = false;
  std::size_t asked = 0;
  std::size_t failed = 0;
  Error last;
  for (std::size_t i = 0; i < c.tiers->tier_count(); ++i) {
    Store& tier = c.tiers->tier(i);
    if (is_remote(tier)) {
      continue;
    }
    ++asked;
    auto r = tier.remove(key);
    if (!r) {
      ++failed;
      last = std::move(r.error());
      continue;
    }
    removed = removed || *r;
  }
  if (asked > 0 && failed == asked) {
    return tl::unexpected(std::move(last));
  }
  return removed;
}

// The file tier (the cache on disk) of a configured chain, or null (a
// disabled cache). Queued puts are published first, so that a pin finds an
// entry put just before it.
FileStore* file_tier(Store& store) {
  const Chain c = chain_of(store);
  if (c.queue != nullptr) {
    (void)c.queue->flush();
  }
  if (c.tiers == nullptr) {
    return dynamic_cast<FileStore*>(&unqueued(store));
  }
  for (std::size_t i = 0; i < c.tiers->tier_count(); ++i) {
    if (auto* f = dynamic_cast<FileStore*>(&unqueued(c.tiers->tier(i)))) {
      return f;
    }
  }
  return nullptr;
}

// Store.pin / unpin: the file tier's, or an unsupported error without one.
Result<bool> pin_in(Store& store, const Key& key, bool pin) {
  FileStore* f = file_tier(store);
  if (f == nullptr) {
    return make_error(ErrorCode::unsupported, "this store has no cache on disk to pin entries in (is it disabled?)");
  }
  return pin ? f->pin(key) : f->unpin(key);
}

// The counters Store.stats() reports: one row per dict key (add a row to
// report a new StoreStats member).
using Counter = std::pair<const char*, std::uint64_t StoreStats::*>;
constexpr Counter k_store_counters[] = {
    {"hits", &StoreStats::hits},
    {"misses", &StoreStats::misses},
    {"puts", &StoreStats::puts},
    {"puts_skipped", &StoreStats::puts_skipped},
    {"evictions", &StoreStats::evictions},
    {"corrupt", &StoreStats::corrupt},
    {"errors", &StoreStats::errors},
    {"bytes_read", &StoreStats::bytes_read},
    {"bytes_written", &StoreStats::bytes_written},
    {"entries", &StoreStats::entries},
    {"size_bytes", &StoreStats::size_bytes},
    {"max_size_bytes", &StoreStats::max_size_bytes},
    {"compile_us_saved", &StoreStats::compile_us_saved},
    {"metadata_bytes", &StoreStats::metadata_bytes},
    {"temp_files", &StoreStats::temp_files},
    {"temp_bytes", &StoreStats::temp_bytes},
    {"stale_temp_files", &StoreStats::stale_temp_files},
    {"stale_temp_bytes", &StoreStats::stale_temp_bytes},
    {"pinned_entries", &StoreStats::pinned_entries},
    {"pinned_bytes", &StoreStats::pinned_bytes},
};
// A remote tier's (RemoteStore::stats), named as in `kcache stats --json`.
constexpr Counter k_remote_counters[] = {
    {"hits", &StoreStats::hits},
    {"misses", &StoreStats::misses},
    {"errors", &StoreStats::errors},
    {"skipped", &StoreStats::puts_skipped},
    {"puts", &StoreStats::puts},
    {"rejected", &StoreStats::corrupt},
    {"bytes_in", &StoreStats::bytes_read},
    {"bytes_out", &StoreStats::bytes_written},
    {"compile_us_saved", &StoreStats::compile_us_saved},
};
// The counters of the tiers on disk that a chain's sum would mix with the
// memory tier's (a fill counted as a put) and the remote tiers'.
constexpr std::uint64_t StoreStats::*k_disk_counters[] = {
    &StoreStats::puts,    &StoreStats::puts_skipped, &StoreStats::evictions,
    &StoreStats::corrupt, &StoreStats::bytes_read,   &StoreStats::bytes_written,
};

template <std::size_t N>
nb::dict counters_dict(const StoreStats& s, const Counter (&table)[N]) {
  nb::dict d;
  for (const auto& [name, member] : table) {
    d[name] = s.*member;
  }
  return d;
}

// Store.stats(): the chain's hits and misses (this process), the other
// counters of the tiers on disk (shared by every process; a fill of the
// memory tier is no put), and under "remote" one dict per remote tier.
nb::dict store_stats(Store& store) {
  StoreStats all;
  std::vector<StoreStats> remotes;
  {
    nb::gil_scoped_release release;
    all = unwrap(store.stats());
    const Chain c = chain_of(store);
    if (c.tiers != nullptr) {
      for (auto member : k_disk_counters) {
        all.*member = 0;  // counted again below, from the tiers on disk only
      }
      for (std::size_t i = 0; i < c.tiers->tier_count(); ++i) {
        // (A remote tier's counters, asked past its upload queue: no wait for uploads.)
        Store& tier = unqueued(c.tiers->tier(i));
        if (tier.name() == "memory") {
          continue;
        }
        auto s = tier.stats();
        if (!s) {
          continue;  // counted in the chain's errors
        }
        if (s->remote || is_remote(tier)) {
          s->errors += c.tiers->tier_failures(i);
          all.errors -= std::min(all.errors, s->errors);  // reported with the remote
          remotes.push_back(*s);
          continue;
        }
        for (auto member : k_disk_counters) {
          all.*member += (*s).*member;
        }
      }
    }
  }
  nb::dict d = counters_dict(all, k_store_counters);
  d["pins_over_cap"] = all.pins_over_cap;
  nb::list remote;
  for (const auto& s : remotes) {
    remote.append(counters_dict(s, k_remote_counters));
  }
  d["remote"] = remote;
  d["requests"] = requests_dict(store);
  return d;
}

// Store.close(): ends the single-flight compiles Python left open on the
// store (their threads let go of it), then lets go of it: the last reference
// flushes queued puts, without the GIL.
void close_handle(std::shared_ptr<StoreHandle> h) {
  nb::gil_scoped_release release;
  if (h) {
    h->flights->abandon_all_and_wait();
  }
  h.reset();
}

const char* to_text(PutOutcome o) {
  switch (o) {
    case PutOutcome::stored:
      return "stored";
    case PutOutcome::already_present:
      return "already_present";
    case PutOutcome::queued:
      return "queued";
  }
  return "stored";
}

}  // namespace

void bind_store(nb::module_& m) {
  nb::class_<Config>(m, "Config",
                     "kcache's effective settings and where each came from.\n\n"
                     "Config.load(**overrides) reads defaults, the config file, KCACHE_* environment\n"
                     "variables, then `overrides` (setting name -> value, like `kcache --set`), e.g.\n"
                     "Config.load(cache_dir='/data/kc', max_size='10G'). `config_file=` names a TOML file.\n"
                     "Raises ConfigError naming the setting and the values it accepts.")
      .def_static("load", &load_config, "Loads the settings (see the class docstring).")
      .def_prop_ro("cache_dir", [](const Config& c) { return c.cache_dir.string(); })
      .def_prop_ro("max_size", [](const Config& c) { return c.max_size_bytes; }, "The cap in bytes.")
      .def_prop_ro("memory_size", [](const Config& c) { return c.memory_size_bytes; },
                   "The in-process memory tier in bytes (0: none).")
      .def_prop_ro("disable", [](const Config& c) { return c.disable; })
      .def_prop_ro("cuda_home", [](const Config& c) { return c.cuda_home; })
      .def_prop_ro("jobs", [](const Config& c) { return c.jobs; })
      .def_prop_ro("log_level", [](const Config& c) { return c.log_level; })
      .def_prop_ro("put", [](const Config& c) { return value_of(c, "put"); })
      .def_prop_ro("verify", [](const Config& c) { return value_of(c, "verify"); })
      .def_prop_ro("fsync", [](const Config& c) { return value_of(c, "fsync"); })
      .def_prop_ro("sharing", [](const Config& c) { return value_of(c, "sharing"); })
      .def_prop_ro("config_file",
                   [](const Config& c) -> std::optional<std::string> {
                     if (c.config_file.empty()) {
                       return std::nullopt;
                     }
                     return c.config_file.string();
                   })
      .def("__getitem__", &value_of, nb::arg("name"), "A setting's value as text (as `kcache config` prints it).")
      .def(
          "origin",
          [](const Config& c, const std::string& name) {
            for (const auto& row : c.rows()) {
              if (row.key == name) {
                return std::string(to_string(row.source));
              }
            }
            raise(ErrorCode::invalid_argument, "no setting named '" + name + "'");
          },
          nb::arg("name"), "Where a setting came from: \"default\", \"config file\", \"environment\", \"command line\".")
      .def(
          "as_dict",
          [](const Config& c) {
            std::map<std::string, std::string> out;
            for (const auto& row : c.rows()) {
              out[row.key] = row.value;
            }
            return out;
          },
          "Every setting's value as text.")
      .def("__repr__", [](const Config& c) {
        return "kcache.Config(cache_dir='" + c.cache_dir.string() + "', max_size=" + std::to_string(c.max_size_bytes) +
               ", disable=" + (c.disable ? "True" : "False") + ")";
      });
  m.def("setting_names", &setting_keys, "The name of every setting, in table order.");

  nb::class_<EntryInfo>(m, "Entry", "One entry of Store.list().")
      .def_prop_ro("key", [](const EntryInfo& e) { return e.key; })
      .def_ro("kind", &EntryInfo::kind)
      .def_ro("payload_size", &EntryInfo::payload_size)
      .def_ro("created_unix_ms", &EntryInfo::created_unix_ms)
      .def_ro("last_used_unix_ms", &EntryInfo::last_used_unix_ms)
      .def_ro("pinned", &EntryInfo::pinned)
      .def("__repr__", [](const EntryInfo& e) {
        return "kcache.Entry(key='" + e.key.hex() + "', kind='" + e.kind +
               "', payload_size=" + std::to_string(e.payload_size) + ")";
      });

  nb::class_<PyStore>(m, "Store", nb::is_weak_referenceable(),
                      "The stores the settings describe: memory in front of the on-disk cache.\n\n"
                      "Every method is thread-safe and releases the GIL while it works. Puts are published\n"
                      "by a background thread (setting `put`); close() or flush() waits for them. Use\n"
                      "`with kcache.open_store() as store:` or call close(); kcache also closes open\n"
                      "stores at interpreter exit.")
      .def(
          "get",
          [](const PyStore& s, nb::handle key, bool copy) -> std::optional<PyArtifact> {
            const Key k = key_from(key);
            auto h = s.handle();
            BytesLender lender;
            std::optional<Artifact> got;
            Tier tier = Tier::disk;
            {
              nb::gil_scoped_release release;
              Store::note_served_tier(std::nullopt);
              got = copy ? unwrap(h->store->get_into(k, lender.allocator())) : unwrap(h->store->get(k));
              tier = served_tier(*h->store);
            }
            if (!got) {
              return std::nullopt;
            }
            nb::object bytes = copy ? lender.bytes_of(got->payload) : nb::object();
            return PyArtifact{std::make_shared<const Artifact>(std::move(*got)), "hit", std::move(bytes), tier};
          },
          nb::arg("key"), nb::kw_only(), nb::arg("copy") = true,
          "The verified artifact of `key` (a Key or its hex str), or None on a miss.\n"
          "A damaged entry is a miss (counted, removed). Raises CacheError when the store cannot be read.\n"
          "copy=True (default): a large payload is read into the bytes object `.payload` returns\n"
          "and checked there. copy=False: it is read into memory the artifact owns and checked there,\n"
          "for `.view` without a second copy (`.payload` then makes one). Either way the bytes are\n"
          "this process's: what happens to the entry's file afterwards never changes them.")
      .def(
          "put",
          [](const PyStore& s, const PyArtifact& a) {
            auto h = s.handle();
            auto artifact = a.artifact;
            nb::gil_scoped_release release;
            return std::string(to_text(unwrap(h->store->put(*artifact))));
          },
          nb::arg("artifact"),
          "Stores `artifact`: returns \"stored\", \"already_present\" or \"queued\" (published by the\n"
          "background thread). Raises CorruptEntry when it does not verify, CacheError when it cannot be written.")
      .def(
          "remove",
          [](const PyStore& s, nb::handle key, bool remote) {
            const Key k = key_from(key);
            auto h = s.handle();
            nb::gil_scoped_release release;
            return unwrap(remote ? h->store->remove(k) : remove_local(*h->store, k));
          },
          nb::arg("key"), nb::kw_only(), nb::arg("remote") = false,
          "Removes the entry of `key` from this machine's tiers (memory, disk); True when one held it.\n"
          "remote=True also deletes the team's object on every remote tier (as `kcache clear` never does).")
      .def(
          "pin",
          [](const PyStore& s, nb::handle key) {
            const Key k = key_from(key);
            auto h = s.handle();
            nb::gil_scoped_release release;
            return unwrap(pin_in(*h->store, k, true));
          },
          nb::arg("key"),
          "Pins the entry of `key` in the cache on disk: the size cap never evicts it (`kcache pin`).\n"
          "True when pinned by this call, False when it was pinned already. Raises NotFound when the\n"
          "cache holds no entry for `key`, CacheError when the pin cannot be written.")
      .def(
          "unpin",
          [](const PyStore& s, nb::handle key) {
            const Key k = key_from(key);
            auto h = s.handle();
            nb::gil_scoped_release release;
            return unwrap(pin_in(*h->store, k, false));
          },
          nb::arg("key"),
          "Unpins the entry of `key` (`kcache unpin`): True when a pin was removed, False when it\n"
          "was not pinned.")
      .def(
          "list",
          [](const PyStore& s) {
            auto h = s.handle();
            nb::gil_scoped_release release;
            return unwrap(h->store->list());
          },
          "The entries held now (kcache.Entry), in no particular order.")
      .def(
          "stats",
          [](const PyStore& s) {
            auto h = s.handle();
            return store_stats(*h->store);
          },
          "Counters: hits and misses of this process's lookups; puts, corrupt, entries, size_bytes,\n"
          "max_size_bytes, ... of the cache on disk, shared by every process (a copy into the memory\n"
          "tier is no put); \"remote\": one dict per remote tier with this process's hits, misses,\n"
          "errors, skipped, puts, rejected, bytes_in, bytes_out, compile_us_saved; \"requests\": how the\n"
          "requests of every process of the cache directory ended (total, served by tier, compiled,\n"
          "uncached, failed, compile_us_saved, compile_us), also per route under \"routes\".")
      .def(
          "flush",
          [](const PyStore& s) {
            auto h = s.handle();
            nb::gil_scoped_release release;
            if (auto* wb = dynamic_cast<WriteBehindStore*>(h->store.get())) {
              unwrap(wb->flush());
            }
          },
          "Waits until every put so far is published; raises CacheError for the first that failed.")
      .def(
          "close",
          [](PyStore& s) { close_handle(s.take()); },
          "Publishes queued puts and releases the store. Idempotent.")
      .def(
          "_abandon",
          [](PyStore& s) {
            // In a child after fork(): the background thread of the parent's
            // store does not exist here, so the store must not be flushed or
            // destroyed. Its memory is left behind on purpose.
            auto h = s.take();
            if (h) {
              new std::shared_ptr<StoreHandle>(std::move(h));  // NOLINT: intentionally leaked
            }
          },
          "Forgets the store without closing it (used in a forked child).")
      .def_prop_ro("closed", [](PyStore& s) { return s.is_closed(); })
      .def_prop_ro("config", [](const PyStore& s) { return s.config(); }, "The settings it was opened with.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__",
          [](PyStore& s, nb::args) { close_handle(s.take()); })
      .def("__repr__", [](const PyStore& s) { return "kcache.Store(cache_dir='" + s.config().cache_dir.string() + "')"; });

  m.def("open_store", &open_store, nb::arg("config") = nb::none(),
        "Opens the stores `config` describes (default: Config.load()): a memory tier in front of the\n"
        "on-disk cache, with background puts. Raises ConfigError, CacheError.");
}

}  // namespace kcache::python
