// Puts a blob into an in-memory store and reads it back through the
// installed kcache library; prints the version the package says it is.
#include <kcache/blob.hpp>
#include <kcache/memory_store.hpp>

#include <cstdio>

int main() {
  auto a = kcache::make_blob("blob", "hello from an installed kcache");
  if (!a) {
    return 1;
  }
  kcache::MemoryStore store(1 << 20);
  if (!store.put(*a)) {
    return 2;
  }
  auto got = store.get(a->passport.key);
  if (!got || !*got || (*got)->payload != a->payload) {
    return 3;
  }
  std::printf("consumer ok %s\n", a->passport.key.hex().c_str());
  return 0;
}
