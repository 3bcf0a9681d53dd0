// Translation unit 08 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>
#include "project/host_util.h"

__global__ void kernel_08(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * 8.0f + 1.0f;
  }
}

int describe_08() {
  std::vector<int> parts{8, 7, 2};
  int total = 0;
  total += host_util_checksum({8, 3, 1}) + host_util_version();
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_08(float* out, const float* in, int n) {
  kernel_08<<<(n + 256 - 1) / 256, 256>>>(out, in, n);
}
