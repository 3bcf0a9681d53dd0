// Heavy kernel: CUB block-level primitives (NVRTC needs -I <cuda>/include/cccl;
// the device-wide cub/cub.cuh does not compile under NVRTC).
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_radix_sort.cuh>

template <int Threads, int Items>
__global__ void block_sort_scan_reduce(const int* in, int* sorted, int* scanned, int* sums) {
  using Load = cub::BlockLoad<int, Threads, Items, cub::BLOCK_LOAD_TRANSPOSE>;
  using Sort = cub::BlockRadixSort<int, Threads, Items>;
  using Scan = cub::BlockScan<int, Threads>;
  using Reduce = cub::BlockReduce<int, Threads>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } temp;
  int items[Items];
  const int offset = blockIdx.x * Threads * Items;
  Load(temp.load).Load(in + offset, items);
  __syncthreads();
  Sort(temp.sort).SortBlockedToStriped(items);
  for (int i = 0; i < Items; ++i) {
    sorted[offset + i * Threads + threadIdx.x] = items[i];
  }
  __syncthreads();
  int prefix[Items];
  Scan(temp.scan).InclusiveSum(items, prefix);
  for (int i = 0; i < Items; ++i) {
    scanned[offset + threadIdx.x * Items + i] = prefix[i];
  }
  __syncthreads();
  const int total = Reduce(temp.reduce).Sum(items);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = total;
  }
}

template __global__ void block_sort_scan_reduce<128, 4>(const int*, int*, int*, int*);
