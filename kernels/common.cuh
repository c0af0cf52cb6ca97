// Shared by every kernel file (NVRTC compiles each file with this one prepended, so no
// include path is needed). Kernels use grid-stride loops: any launch size covers `n`.
#define GRID_STRIDE(i, n) \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         i < (unsigned long long)(n); i += (unsigned long long)blockDim.x * gridDim.x)

// Threads per block that the block-wide reductions below assume (a power of two).
#define BLOCK 256

// Sum of `v` over the block (every thread passes one value; the result is valid in thread
// 0). `shared` holds BLOCK doubles.
__device__ double block_sum(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    double r = shared[0];
    __syncthreads();
    return r;
}

// Maximum of `v` over the block, valid in every thread. `shared` holds BLOCK floats.
__device__ float block_max(float v, float* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}
