// python/src/shared_bytes.cpp: SharedBytes.
#include "shared_bytes.hpp"

#include <utility>

namespace nb = nanobind;

namespace kcache::python {

SharedBytes& SharedBytes::instance() {
  static auto* one = new SharedBytes();  // never freed: see the header
  return *one;
}

nb::bytes SharedBytes::bytes_of(const Payload& payload) {
  if (payload.size() < k_min_bytes) {
    return nb::bytes(payload.data(), payload.size());
  }
  for (const Entry& e : m_entries) {
    if (e.buffer.shares_with(payload)) {
      return nb::borrow<nb::bytes>(e.bytes);
    }
  }
  nb::bytes made(payload.data(), payload.size());
  if (payload.size() > k_max_bytes / 4) {
    return made;  // too large to keep beside the tier's own copy
  }
  while (!m_entries.empty() && (m_entries.size() >= k_max_entries || m_bytes + payload.size() > k_max_bytes)) {
    m_bytes -= m_entries.front().buffer.size();
    m_entries.pop_front();
  }
  m_entries.push_back(Entry{payload, made});
  m_bytes += payload.size();
  return made;
}

}  // namespace kcache::python
