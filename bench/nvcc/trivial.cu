// The trivial translation unit of bench/nvcc/bench_nvcc.py: one kernel, no host library.
__global__ void scale(float* out, const float* in, float s, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * s;
  }
}
