// Translation unit 09 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>
#include "project/host_util.h"

__global__ void kernel_09(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * 9.0f + 1.0f;
  }
}

int describe_09() {
  std::vector<int> parts{9, 7, 2};
  int total = 0;
  total += host_util_checksum({9, 3, 1}) + host_util_version();
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_09(float* out, const float* in, int n) {
  kernel_09<<<(n + 256 - 1) / 256, 256>>>(out, in, n);
}
