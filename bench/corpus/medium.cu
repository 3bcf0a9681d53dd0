// Templated medium kernel: a tiled, unrolled matrix multiply instantiated for
// several types and tile sizes through name expressions.
template <typename T, int Tile>
__device__ T dot_tile(const T (&a)[Tile][Tile], const T (&b)[Tile][Tile], int row, int col) {
  T acc = T(0);
#pragma unroll
  for (int k = 0; k < Tile; ++k) {
    acc += a[row][k] * b[k][col];
  }
  return acc;
}

template <typename T, int Tile>
__global__ void matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int n) {
  __shared__ T sa[Tile][Tile];
  __shared__ T sb[Tile][Tile];
  const int row = blockIdx.y * Tile + threadIdx.y;
  const int col = blockIdx.x * Tile + threadIdx.x;
  T acc = T(0);
  for (int t = 0; t < (n + Tile - 1) / Tile; ++t) {
    const int ac = t * Tile + threadIdx.x;
    const int br = t * Tile + threadIdx.y;
    sa[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? a[row * n + ac] : T(0);
    sb[threadIdx.y][threadIdx.x] = (br < n && col < n) ? b[br * n + col] : T(0);
    __syncthreads();
    acc += dot_tile<T, Tile>(sa, sb, threadIdx.y, threadIdx.x);
    __syncthreads();
  }
  if (row < n && col < n) {
    c[row * n + col] = acc;
  }
}

template <typename T, int Items>
__global__ void saxpy_vec(T alpha, const T* __restrict__ x, T* __restrict__ y, int n) {
  const int base = (blockIdx.x * blockDim.x + threadIdx.x) * Items;
#pragma unroll
  for (int i = 0; i < Items; ++i) {
    if (base + i < n) {
      y[base + i] = alpha * x[base + i] + y[base + i];
    }
  }
}

template __global__ void matmul<float, 16>(const float*, const float*, float*, int);
template __global__ void matmul<float, 32>(const float*, const float*, float*, int);
template __global__ void matmul<double, 16>(const double*, const double*, double*, int);
template __global__ void saxpy_vec<float, 4>(float, const float*, float*, int);
template __global__ void saxpy_vec<double, 8>(double, const double*, double*, int);
