// Translation unit 02 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>
#include "project/device_math.cuh"

__global__ void kernel_02(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = dm_clamp(dm_scale(in[i], 2 * PROJECT_SCALE), 0.0f, 1000.0f);
  }
}

int describe_02() {
  std::vector<int> parts{2, 7, 2};
  int total = 0;
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_02(float* out, const float* in, int n) {
  kernel_02<<<(n + 256 - 1) / 256, 256>>>(out, in, n);
}
