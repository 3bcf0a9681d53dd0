// Device-side helpers (included by k01-k06).
#pragma once

__device__ __forceinline__ float dm_scale(float x, int unit) {
  return x * static_cast<float>(unit) + 0.5f;
}

__device__ __forceinline__ float dm_clamp(float x, float lo, float hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
