// Translation unit 16 of the nvcc launcher's test project.
#include <algorithm>
#include <vector>


__global__ void kernel_16(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * 16.0f + 1.0f;
  }
}

int describe_16() {
  std::vector<int> parts{16, 7, 2};
  int total = 0;
  std::sort(parts.begin(), parts.end());
  for (const int p : parts) {
    total = total * 10 + p;
  }
  return total;
}

void launch_16(float* out, const float* in, int n) {
  kernel_16<<<(n + 256 - 1) / 256, 256>>>(out, in, n);
}
