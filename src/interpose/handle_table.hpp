// interpose/handle_table.hpp: what the stand-in knows of each live handle
// (an nvrtcProgram, an nvJitLinkHandle, an nvvmProgram), by handle.
//
// `State` must have a `std::mutex mutex` and a `std::shared_ptr<const
// JitResult> served` member (set while the last compile of the handle was
// answered from the cache). The table stays usable in a child forked while
// another thread held its lock (pthread_atfork handlers).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <pthread.h>

#include <memory>
#include <new>
#include <mutex>
#include <shared_mutex>
#include <type_traits>
#include <unordered_map>

#include "interpose/jit_result.hpp"

namespace kcache::interpose {

template <class State>
class HandleTable {
 public:
  // The process's table for `State` (never destroyed: calls may come during exit).
  static HandleTable& instance() {
    static HandleTable* table = [] {
      auto* t = new HandleTable();  // NOLINT: intentional process-lifetime singleton
      // The child's one thread does not own the lock the parent's thread took:
      // it gets a fresh one (the table itself was copied whole under the lock).
      ::pthread_atfork([] { instance().m_mutex.lock(); }, [] { instance().m_mutex.unlock(); },
                       [] { new (&instance().m_mutex) std::shared_mutex(); });
      return t;
    }();
    return *table;
  }

  void insert(const void* handle, std::shared_ptr<State> state) {
    std::unique_lock lock(m_mutex);
    m_states[handle] = std::move(state);
  }

  // Forgets `*handle` (a destroy call's argument; nothing when either is null).
  template <class Handle>
  void forget(const Handle* handle) {
    if (handle != nullptr && *handle != nullptr) {
      std::unique_lock lock(m_mutex);
      m_states.erase(*handle);
    }
  }

  // The state of `handle`, or null for a handle the stand-in did not see made.
  std::shared_ptr<State> find(const void* handle) const {
    std::shared_lock lock(m_mutex);
    const auto it = m_states.find(handle);
    return it == m_states.end() ? nullptr : it->second;
  }

  // The recorded result when `handle`'s last compile was served from the cache.
  std::shared_ptr<const JitResult> served(const void* handle) const {
    auto state = find(handle);
    if (!state) {
      return nullptr;
    }
    std::lock_guard lock(state->mutex);
    return state->served;
  }

  // What a getter of `handle` answers. When its last compile was served from
  // the cache and `out` is not null: the recorded output `which`
  // (JitResult::recorded), its size for a size getter (`Out` is size_t), else
  // its bytes. Otherwise what the real getter `real` answers, or `missing`
  // when there is none.
  template <class Handle, class Out, class Fn>
  int replay_or_call(Handle handle, int which, Out* out, Fn real, int missing) const {
    if (auto r = served(handle); r && out != nullptr) {
      if constexpr (std::is_same_v<Out, std::size_t>) {
        return replay_size(r->recorded(which), out);
      } else {
        return replay_get(r->recorded(which), out);
      }
    }
    return real != nullptr ? real(handle, out) : missing;
  }

 private:
  HandleTable() = default;
  mutable std::shared_mutex m_mutex;
  std::unordered_map<const void*, std::shared_ptr<State>> m_states;
};

}  // namespace kcache::interpose
