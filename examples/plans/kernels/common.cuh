// Shared by the example kernels: a warp-level sum.
#pragma once

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}
