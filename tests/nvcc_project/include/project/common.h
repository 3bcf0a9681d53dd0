// Constants shared by k21-k30 and thrust_fill.cu.
#pragma once

constexpr int k_common_block = 128;
constexpr float k_common_bias = 0.25f;
