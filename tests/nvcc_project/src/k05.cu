// Translation unit 05 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>
#include "project/device_math.cuh"
#include "project/host_util.h"

__global__ void kernel_05(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = dm_clamp(dm_scale(in[i], 5 * PROJECT_SCALE), 0.0f, 1000.0f);
  }
}

int describe_05() {
  std::vector<int> parts{5, 7, 2};
  int total = 0;
  total += host_util_checksum({5, 3, 1}) + host_util_version();
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_05(float* out, const float* in, int n) {
  kernel_05<<<(n + 256 - 1) / 256, 256>>>(out, in, n);
}
