// A block reduction with CUB (device side) and the standard library (host side).
#include <cub/block/block_reduce.cuh>

#include <vector>

__global__ void cub_block_sum(const float* in, float* out) {
  using Reduce = cub::BlockReduce<float, 128>;
  __shared__ typename Reduce::TempStorage storage;
  const float sum = Reduce(storage).Sum(in[blockIdx.x * 128 + threadIdx.x] * PROJECT_SCALE);
  if (threadIdx.x == 0) {
    out[blockIdx.x] = sum;
  }
}

int cub_block_count(int n) {
  std::vector<int> blocks{(n + 127) / 128};
  return blocks.front();
}
