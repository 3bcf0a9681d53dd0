// Translation unit 27 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>
#include "project/common.h"
#include <project_sys/sys_config.h>

__global__ void kernel_27(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * 27.0f + k_common_bias;
  }
}

int describe_27() {
  std::vector<int> parts{27, 7, 2};
  int total = 0;
  total += PROJECT_SYS_LEVEL;
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_27(float* out, const float* in, int n) {
  kernel_27<<<(n + k_common_block - 1) / k_common_block, k_common_block>>>(out, in, n);
}
