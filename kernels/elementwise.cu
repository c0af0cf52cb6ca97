// Element-wise operations, bias broadcasts and their reductions, dropout, and the sum of
// squares behind gradient-norm clipping. Semantics: src/backend/cpu/elementwise.rs.

extern "C" __global__ void fill_f32(float* buf, float value, unsigned long long n) {
    GRID_STRIDE(i, n) buf[i] = value;
}

extern "C" __global__ void add_f32(float* out, const float* a, const float* b, unsigned long long n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

extern "C" __global__ void scale_f32(float* buf, float factor, unsigned long long n) {
    GRID_STRIDE(i, n) buf[i] *= factor;
}

extern "C" __global__ void relu_forward(float* out, const float* inp, unsigned long long n) {
    GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

// From the forward's output: dinp = dout where out > 0.
extern "C" __global__ void relu_backward(float* dinp, const float* dout, const float* out,
                                         unsigned long long n) {
    GRID_STRIDE(i, n) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

// out[r * cols + c] += bias[c] (a linear layer's rows).
extern "C" __global__ void bias_add_rows(float* out, const float* bias, unsigned long long rows,
                                         unsigned long long cols) {
    GRID_STRIDE(i, rows * cols) out[i] += bias[i % cols];
}

// out[(n * C + c) * plane + p] += bias[c] (a convolution's NCHW output).
extern "C" __global__ void bias_add_planes(float* out, const float* bias, unsigned long long batch,
                                           unsigned long long channels, unsigned long long plane) {
    GRID_STRIDE(i, batch * channels * plane) out[i] += bias[(i / plane) % channels];
}

// dbias[c] += sum over rows of dout[r * cols + c]: one block per column, summed in f64.
extern "C" __global__ void bias_grad_rows(float* dbias, const float* dout, unsigned long long rows,
                                          unsigned long long cols) {
    __shared__ double shared[BLOCK];
    unsigned long long c = blockIdx.x;
    if (c >= cols) return;
    double s = 0.0;
    for (unsigned long long r = threadIdx.x; r < rows; r += blockDim.x) s += dout[r * cols + c];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) dbias[c] += (float)s;
}

// dbias[c] += sum over images and pixels of channel c: one block per channel.
extern "C" __global__ void bias_grad_planes(float* dbias, const float* dout, unsigned long long batch,
                                            unsigned long long channels, unsigned long long plane) {
    __shared__ double shared[BLOCK];
    unsigned long long c = blockIdx.x;
    if (c >= channels) return;
    double s = 0.0;
    for (unsigned long long j = threadIdx.x; j < batch * plane; j += blockDim.x) {
        unsigned long long img = j / plane, p = j % plane;
        s += dout[(img * channels + c) * plane + p];
    }
    s = block_sum(s, shared);
    if (threadIdx.x == 0) dbias[c] += (float)s;
}

// The CPU's mask_uniform: SplitMix64's finaliser over (seed, index), top 24 bits.
__device__ float mask_uniform(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed ^ (i * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

// Inverted dropout over values first..first+n of the buffers, each drawn from its index in
// the whole buffer (so a sequence dropped a step at a time gets the mask it would at once).
extern "C" __global__ void dropout_forward(float* out, float* mask, const float* inp, float p,
                                           unsigned long long seed, unsigned long long first,
                                           unsigned long long n) {
    float keep = 1.0f / (1.0f - p);
    GRID_STRIDE(j, n) {
        unsigned long long i = first + j;
        float m = mask_uniform(seed, i) < p ? 0.0f : keep;
        mask[i] = m;
        out[i] = inp[i] * m;
    }
}

extern "C" __global__ void dropout_backward(float* dinp, const float* dout, const float* mask,
                                            unsigned long long n) {
    GRID_STRIDE(i, n) dinp[i] = dout[i] * mask[i];
}

// *total += sum of buf[i]^2 in f64 (each block adds its partial sum once).
extern "C" __global__ void sum_squares(double* total, const float* buf, unsigned long long n) {
    __shared__ double shared[BLOCK];
    double s = 0.0;
    GRID_STRIDE(i, n) s += (double)buf[i] * (double)buf[i];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) atomicAdd(total, s);
}
