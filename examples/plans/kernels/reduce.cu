// Sum of n floats into *out (atomically, one add per warp).
#include "common.cuh"

extern "C" __global__ void reduce_sum(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(out, v);
  }
}
