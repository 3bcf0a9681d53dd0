// Translation unit 28 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>
#include "project/common.h"

__global__ void kernel_28(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * 28.0f + k_common_bias;
  }
}

int describe_28() {
  std::vector<int> parts{28, 7, 2};
  int total = 0;
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_28(float* out, const float* in, int n) {
  kernel_28<<<(n + k_common_block - 1) / k_common_block, k_common_block>>>(out, in, n);
}
