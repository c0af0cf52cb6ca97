// Softmax cross-entropy, one block per row: dlogits = weight * (softmax - onehot), the
// row's loss and whether its arg-max (the first maximum) is the label. Rows labelled
// `pad` (masked variant) get a zero gradient and no loss. The host sums the per-row
// results (it knows the labels, hence the weight: 1 / rows or 1 / tokens). Semantics:
// src/backend/cpu/elementwise.rs.

__device__ void xent_row(float* d, const float* row, unsigned long long classes,
                         unsigned label, float weight, float* row_loss, float* row_hit) {
    __shared__ float vmax[BLOCK];
    __shared__ unsigned long long vidx[BLOCK];
    __shared__ double sums[BLOCK];
    // Arg-max: each thread's first maximum over its strided columns, then the block's,
    // lower index on ties.
    float best = __int_as_float(0xff800000);
    unsigned long long arg = classes;
    for (unsigned long long c = threadIdx.x; c < classes; c += blockDim.x)
        if (arg == classes || row[c] > best) { best = row[c]; arg = c; }
    vmax[threadIdx.x] = best;
    vidx[threadIdx.x] = arg;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ov = vmax[threadIdx.x + s];
            unsigned long long oi = vidx[threadIdx.x + s];
            if (oi < classes && (vidx[threadIdx.x] == classes || ov > vmax[threadIdx.x] ||
                                 (ov == vmax[threadIdx.x] && oi < vidx[threadIdx.x]))) {
                vmax[threadIdx.x] = ov;
                vidx[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    float mx = vmax[0];
    unsigned long long am = vidx[0];
    __syncthreads();
    double sum = 0.0;
    for (unsigned long long c = threadIdx.x; c < classes; c += blockDim.x) {
        float e = expf(row[c] - mx);
        d[c] = e;
        sum += e;
    }
    float total = (float)block_sum(sum, sums);
    float inv = 1.0f / total;
    for (unsigned long long c = threadIdx.x; c < classes; c += blockDim.x)
        d[c] = d[c] * inv * weight - (c == label ? weight : 0.0f);
    if (threadIdx.x == 0) {
        *row_loss = logf(total) - (row[label] - mx);
        *row_hit = am == label ? 1.0f : 0.0f;
    }
}

extern "C" __global__ void softmax_xent(float* dlogits, float* row_loss, float* row_hit,
                                        const float* logits, const unsigned* labels,
                                        unsigned long long rows, unsigned long long classes,
                                        float weight) {
    unsigned long long r = blockIdx.x;
    if (r >= rows) return;
    xent_row(dlogits + r * classes, logits + r * classes, classes, labels[r], weight,
             row_loss + r, row_hit + r);
}

extern "C" __global__ void softmax_xent_masked(float* dlogits, float* row_loss, float* row_hit,
                                               const float* logits, const unsigned* labels,
                                               unsigned pad, unsigned long long rows,
                                               unsigned long long classes, float weight) {
    unsigned long long r = blockIdx.x;
    if (r >= rows) return;
    if (labels[r] == pad) {
        for (unsigned long long c = threadIdx.x; c < classes; c += blockDim.x)
            dlogits[r * classes + c] = 0.0f;
        if (threadIdx.x == 0) { row_loss[r] = 0.0f; row_hit[r] = 0.0f; }
        return;
    }
    xent_row(dlogits + r * classes, logits + r * classes, classes, labels[r], weight,
             row_loss + r, row_hit + r);
}
