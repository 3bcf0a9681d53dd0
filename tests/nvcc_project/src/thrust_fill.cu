// A fill with Thrust over device memory.
#include <thrust/device_ptr.h>
#include <thrust/fill.h>

#include "project/common.h"

void thrust_fill_bias(float* data, int n) {
  thrust::device_ptr<float> p(data);
  thrust::fill(p, p + n, k_common_bias);
}
