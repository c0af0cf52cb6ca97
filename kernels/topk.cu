// Exact top-k by magnitude on the device, with the CPU's result (src/compress/topk.rs):
// the k entries of largest |x|, ties at the threshold resolved to the lowest indices, the
// indices written in ascending order with their values. The values are `after[i]`, or
// `after[i] - before[i]` when `before` is given (a group's unsent change).
//
// 1. Radix select of the threshold key, 8 bits a pass from the top (4 passes over the
//    31 magnitude bits of the float): topk_histogram counts the digits of the keys that
//    match the prefix chosen so far, topk_pick (one thread) picks the digit where the
//    count from the top reaches the k still wanted. No host synchronisation in between.
// 2. topk_block_counts: per block of a contiguous segment, how many keys are above the
//    threshold and how many equal it; topk_scan_blocks turns those into offsets.
// 3. topk_write: each block scans its segment in order and writes the selected
//    (index, value) pairs at their final positions.

// state[0] = key prefix (the threshold after the last pass), state[1] = entries still
// wanted at or below the prefix (after the last pass: the ties to take), state[2] = k.
#define PREFIX 0
#define WANTED 1
#define K 2

__device__ float topk_value(const float* after, const float* before, unsigned long long i) {
    return before ? after[i] - before[i] : after[i];
}

__device__ unsigned topk_key(float x) { return __float_as_uint(x) & 0x7fffffffu; }

extern "C" __global__ void topk_init(unsigned* state, unsigned* hist, unsigned k) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        state[PREFIX] = 0;
        state[WANTED] = k;
        state[K] = k;
    }
    for (unsigned d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
}

// Counts digit (key >> shift) & 255 of the keys whose bits above shift + 8 equal the prefix.
extern "C" __global__ void topk_histogram(unsigned* hist, const unsigned* state,
                                          const float* after, const float* before,
                                          unsigned long long n, unsigned shift) {
    __shared__ unsigned local[256];
    for (unsigned d = threadIdx.x; d < 256; d += blockDim.x) local[d] = 0;
    __syncthreads();
    unsigned prefix = state[PREFIX];
    unsigned high = shift + 8;
    GRID_STRIDE(i, n) {
        unsigned key = topk_key(topk_value(after, before, i));
        if (high >= 32 || (key >> high) == (prefix >> high))
            atomicAdd(&local[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    for (unsigned d = threadIdx.x; d < 256; d += blockDim.x)
        if (local[d]) atomicAdd(&hist[d], local[d]);
}

// One thread: the digit where the count from the top reaches the wanted number; clears
// the histogram for the next pass.
extern "C" __global__ void topk_pick(unsigned* hist, unsigned* state, unsigned shift) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned wanted = state[WANTED], above = 0;
    int digit = 255;
    for (; digit > 0; digit--) {
        if (above + hist[digit] >= wanted) break;
        above += hist[digit];
    }
    state[PREFIX] |= (unsigned)digit << shift;
    state[WANTED] = wanted - above;
    for (unsigned d = 0; d < 256; d++) hist[d] = 0;
}

// counts[2b], counts[2b + 1]: keys above and equal to the threshold in block b's segment
// [b * seg, (b + 1) * seg).
extern "C" __global__ void topk_block_counts(unsigned* counts, const unsigned* state,
                                             const float* after, const float* before,
                                             unsigned long long n, unsigned long long seg) {
    __shared__ unsigned gt, eq;
    if (threadIdx.x == 0) { gt = 0; eq = 0; }
    __syncthreads();
    unsigned t = state[PREFIX];
    unsigned long long lo = blockIdx.x * seg, hi = lo + seg < n ? lo + seg : n;
    unsigned my_gt = 0, my_eq = 0;
    for (unsigned long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        unsigned key = topk_key(topk_value(after, before, i));
        my_gt += key > t;
        my_eq += key == t;
    }
    atomicAdd(&gt, my_gt);
    atomicAdd(&eq, my_eq);
    __syncthreads();
    if (threadIdx.x == 0) {
        counts[2 * blockIdx.x] = gt;
        counts[2 * blockIdx.x + 1] = eq;
    }
}

// One thread: exclusive prefix sums of both counts over the blocks, in place.
extern "C" __global__ void topk_scan_blocks(unsigned* counts, unsigned long long blocks) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned gt = 0, eq = 0;
    for (unsigned long long b = 0; b < blocks; b++) {
        unsigned g = counts[2 * b], e = counts[2 * b + 1];
        counts[2 * b] = gt;
        counts[2 * b + 1] = eq;
        gt += g;
        eq += e;
    }
}

// Inclusive scan of `v` over the block (BLOCK threads); `shared` holds BLOCK unsigned.
__device__ unsigned block_scan(unsigned v, unsigned* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s <<= 1) {
        unsigned add = threadIdx.x >= s ? shared[threadIdx.x - s] : 0;
        __syncthreads();
        shared[threadIdx.x] += add;
        __syncthreads();
    }
    unsigned r = shared[threadIdx.x];
    __syncthreads();
    return r;
}

// Writes the selected entries of block b's segment at position (keys above the threshold
// before it) + min(ties before it, ties wanted), in index order.
extern "C" __global__ void topk_write(unsigned* out_index, float* out_value, const unsigned* state,
                                      const unsigned* offsets, const float* after,
                                      const float* before, unsigned long long n,
                                      unsigned long long seg) {
    __shared__ unsigned scan_gt[BLOCK], scan_eq[BLOCK];
    __shared__ unsigned run_gt, run_eq;
    unsigned t = state[PREFIX], ties = state[WANTED];
    if (threadIdx.x == 0) {
        run_gt = offsets[2 * blockIdx.x];
        run_eq = offsets[2 * blockIdx.x + 1];
    }
    __syncthreads();
    unsigned long long lo = blockIdx.x * seg, hi = lo + seg < n ? lo + seg : n;
    for (unsigned long long base = lo; base < hi; base += blockDim.x) {
        unsigned long long i = base + threadIdx.x;
        float v = 0.0f;
        unsigned is_gt = 0, is_eq = 0;
        if (i < hi) {
            v = topk_value(after, before, i);
            unsigned key = topk_key(v);
            is_gt = key > t;
            is_eq = key == t;
        }
        unsigned inc_gt = block_scan(is_gt, scan_gt);
        unsigned inc_eq = block_scan(is_eq, scan_eq);
        unsigned gt_before = run_gt + inc_gt - is_gt;
        unsigned eq_before = run_eq + inc_eq - is_eq;
        if (is_gt || (is_eq && eq_before < ties)) {
            unsigned pos = gt_before + (eq_before < ties ? eq_before : ties);
            out_index[pos] = (unsigned)i;
            out_value[pos] = v;
        }
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1) {
            run_gt += inc_gt;
            run_eq += inc_eq;
        }
        __syncthreads();
    }
}
