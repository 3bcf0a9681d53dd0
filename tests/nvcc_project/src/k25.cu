// Translation unit 25 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>
#include "project/common.h"
#include <project_sys/sys_config.h>

__global__ void kernel_25(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * 25.0f + k_common_bias;
  }
}

int describe_25() {
  std::vector<int> parts{25, 7, 2};
  int total = 0;
  total += PROJECT_SYS_LEVEL;
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_25(float* out, const float* in, int n) {
  kernel_25<<<(n + k_common_block - 1) / k_common_block, k_common_block>>>(out, in, n);
}
