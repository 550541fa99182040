#pragma once
#include <string>
#include <vector>

// Adds 1 to every element on device 0. Returns "" on success, else the failing CUDA call and its error
// string (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version").
std::string add_one_on_gpu(std::vector<float>& x);
