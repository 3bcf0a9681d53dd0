/* The C interface of the kcache ONNX module (kcache_onnx.so).
 *
 * ONNX support needs libprotobuf and libonnx_proto. Linking them into the
 * kcache command costs every kcache process about 2 ms at start-up (dynamic
 * symbol binding and protobuf registering ONNX's descriptors), which is most
 * of a cache hit. So the command loads them with dlopen, through this module,
 * only in the commands that read or write ONNX models (stamp, inspect, plan
 * entries of kind onnx); docs/plans.md, "ONNX support".
 *
 * Only C types cross this boundary: the module and the command may be linked
 * against different copies of the C++ runtime. Every call returns a
 * NUL-terminated JSON document allocated by the module, which the caller
 * hands back to `release`:
 *   {"ok": true, "value": ...}        the call's result
 *   {"ok": false, "code": N, "message": "..."}   N is a kcache::ErrorCode
 */
#ifndef KCACHE_ONNX_MODULE_ABI_H
#define KCACHE_ONNX_MODULE_ABI_H

#include <stddef.h>
#include <stdint.h>

#define KCACHE_ONNX_MODULE_ABI 1
#define KCACHE_ONNX_MODULE_ENTRY "kcache_onnx_module_v1"

#ifdef __cplusplus
extern "C" {
#endif

struct kcache_onnx_module {
  uint32_t abi;          /* KCACHE_ONNX_MODULE_ABI */
  const char* version;   /* the kcache version the module was built from */
  /* value: "stamped" or "unchanged". labels_json: a JSON object of strings. */
  char* (*stamp)(const char* path, const char* key_hex, const char* labels_json);
  /* value: null (no stamp) or {"compiled","key","content","producer","labels"}. */
  char* (*read)(const char* path);
  /* key_hex may be NULL (any key). value: the stamp, as for read. */
  char* (*verify)(const char* path, const char* key_hex);
  /* value: the 64-hex content digest of the model bytes. */
  char* (*content_sha256)(const char* bytes, size_t size);
  void (*release)(char* document);
};

typedef const struct kcache_onnx_module* (*kcache_onnx_module_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_ONNX_MODULE_ABI_H */
