// Max, average and global average pooling over planes, no padding. Semantics:
// src/backend/cpu/pool.rs (the first maximum wins, scanning the window row by row).

extern "C" __global__ void maxpool_forward(float* out, float* argmax, const float* inp,
                                           unsigned long long planes, unsigned long long h,
                                           unsigned long long w, unsigned long long k,
                                           unsigned long long s) {
    unsigned long long oh = (h - k) / s + 1, ow = (w - k) / s + 1;
    GRID_STRIDE(i, planes * oh * ow) {
        unsigned long long ox = i % ow, oy = i / ow % oh, pl = i / (ow * oh);
        const float* plane = inp + pl * h * w;
        unsigned long long first = oy * s * w + ox * s, best = first;
        for (unsigned long long ky = 0; ky < k; ky++)
            for (unsigned long long kx = 0; kx < k; kx++) {
                unsigned long long j = first + ky * w + kx;
                if (plane[j] > plane[best]) best = j;
            }
        out[i] = plane[best];
        argmax[i] = (float)best;
    }
}

// dinp (zeroed here, one thread per input value) gathers the gradients of the outputs
// whose recorded maximum it is: no atomics, deterministic.
extern "C" __global__ void maxpool_backward(float* dinp, const float* dout, const float* argmax,
                                            unsigned long long planes, unsigned long long h,
                                            unsigned long long w, unsigned long long k,
                                            unsigned long long s) {
    unsigned long long oh = (h - k) / s + 1, ow = (w - k) / s + 1;
    GRID_STRIDE(i, planes * h * w) {
        unsigned long long x = i % w, y = i / w % h, pl = i / (w * h), at = y * w + x;
        float sum = 0.0f;
        // Outputs whose window holds (y, x): oy in [ceil((y - k + 1) / s), y / s].
        unsigned long long oy_lo = y + 1 > k ? (y + 1 - k + s - 1) / s : 0;
        unsigned long long ox_lo = x + 1 > k ? (x + 1 - k + s - 1) / s : 0;
        for (unsigned long long oy = oy_lo; oy <= y / s && oy < oh; oy++)
            for (unsigned long long ox = ox_lo; ox <= x / s && ox < ow; ox++) {
                unsigned long long o = (pl * oh + oy) * ow + ox;
                if ((unsigned long long)argmax[o] == at) sum += dout[o];
            }
        dinp[i] = sum;
    }
}

extern "C" __global__ void avgpool_forward(float* out, const float* inp, unsigned long long planes,
                                           unsigned long long h, unsigned long long w,
                                           unsigned long long k, unsigned long long s) {
    unsigned long long oh = (h - k) / s + 1, ow = (w - k) / s + 1;
    float inv = 1.0f / (float)(k * k);
    GRID_STRIDE(i, planes * oh * ow) {
        unsigned long long ox = i % ow, oy = i / ow % oh, pl = i / (ow * oh);
        const float* plane = inp + pl * h * w;
        unsigned long long first = oy * s * w + ox * s;
        float sum = 0.0f;
        for (unsigned long long ky = 0; ky < k; ky++)
            for (unsigned long long kx = 0; kx < k; kx++) sum += plane[first + ky * w + kx];
        out[i] = sum * inv;
    }
}

extern "C" __global__ void avgpool_backward(float* dinp, const float* dout,
                                            unsigned long long planes, unsigned long long h,
                                            unsigned long long w, unsigned long long k,
                                            unsigned long long s) {
    unsigned long long oh = (h - k) / s + 1, ow = (w - k) / s + 1;
    float inv = 1.0f / (float)(k * k);
    GRID_STRIDE(i, planes * h * w) {
        unsigned long long x = i % w, y = i / w % h, pl = i / (w * h);
        float sum = 0.0f;
        unsigned long long oy_lo = y + 1 > k ? (y + 1 - k + s - 1) / s : 0;
        unsigned long long ox_lo = x + 1 > k ? (x + 1 - k + s - 1) / s : 0;
        for (unsigned long long oy = oy_lo; oy <= y / s && oy < oh; oy++)
            for (unsigned long long ox = ox_lo; ox <= x / s && ox < ow; ox++)
                sum += dout[(pl * oh + oy) * ow + ox];
        dinp[i] = sum * inv;
    }
}

// out[pl] = mean of plane pl: one block per plane.
extern "C" __global__ void global_avgpool_forward(float* out, const float* inp,
                                                  unsigned long long planes,
                                                  unsigned long long plane) {
    __shared__ double shared[BLOCK];
    unsigned long long pl = blockIdx.x;
    if (pl >= planes) return;
    double sum = 0.0;
    for (unsigned long long j = threadIdx.x; j < plane; j += blockDim.x) sum += inp[pl * plane + j];
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) out[pl] = (float)(sum / (double)plane);
}

extern "C" __global__ void global_avgpool_backward(float* dinp, const float* dout,
                                                   unsigned long long planes,
                                                   unsigned long long plane) {
    float inv = 1.0f / (float)plane;
    GRID_STRIDE(i, planes * plane) dinp[i] = dout[i / plane] * inv;
}
