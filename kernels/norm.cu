// Batch normalisation over [n x C x plane]. Semantics: src/backend/cpu/norm.rs (biased
// variance for normalising, unbiased for the running average, PyTorch's momentum rule).
// One block per channel reduces in f64; a second kernel applies the affine map.

// Training: batch mean and 1/std into saved[c], saved[C + c]; running statistics updated
// (the running mean at stats[c], the variance at stats[var_at + c]).
extern "C" __global__ void batchnorm_stats(float* saved, float* stats, unsigned long long var_at,
                                           const float* inp, unsigned long long n,
                                           unsigned long long channels, unsigned long long plane,
                                           float eps, float momentum) {
    __shared__ double shared[BLOCK];
    float* run_mean = stats;
    float* run_var = stats + var_at;
    unsigned long long c = blockIdx.x;
    if (c >= channels) return;
    unsigned long long count = n * plane;
    double sum = 0.0;
    for (unsigned long long j = threadIdx.x; j < count; j += blockDim.x)
        sum += inp[((j / plane) * channels + c) * plane + j % plane];
    double mean = block_sum(sum, shared) / (double)count;
    float m32 = (float)mean;
    double sq = 0.0;
    for (unsigned long long j = threadIdx.x; j < count; j += blockDim.x) {
        float d = inp[((j / plane) * channels + c) * plane + j % plane] - m32;
        sq += (double)d * (double)d;
    }
    sq = block_sum(sq, shared);
    if (threadIdx.x == 0) {
        double var = sq / (double)count;
        double unbiased = count > 1 ? sq / (double)(count - 1) : var;
        double mo = momentum;
        run_mean[c] = (float)((1.0 - mo) * run_mean[c] + mo * mean);
        run_var[c] = (float)((1.0 - mo) * run_var[c] + mo * unbiased);
        saved[c] = (float)mean;
        saved[channels + c] = (float)(1.0 / sqrt(var + (double)eps));
    }
}

// Evaluation: out = gamma * (inp - running mean) / sqrt(running var + eps) + beta.
extern "C" __global__ void batchnorm_apply_eval(float* out, const float* inp, const float* run_mean,
                                                const float* run_var, const float* gamma,
                                                const float* beta, unsigned long long n,
                                                unsigned long long channels,
                                                unsigned long long plane, float eps) {
    GRID_STRIDE(i, n * channels * plane) {
        unsigned long long c = (i / plane) % channels;
        float scale = gamma[c] * (1.0f / sqrtf(run_var[c] + eps));
        out[i] = inp[i] * scale + (beta[c] - run_mean[c] * scale);
    }
}

// out = gamma * (inp - mean) * rstd + beta.
extern "C" __global__ void batchnorm_apply(float* out, const float* inp, const float* saved,
                                           const float* gamma, const float* beta,
                                           unsigned long long n, unsigned long long channels,
                                           unsigned long long plane) {
    GRID_STRIDE(i, n * channels * plane) {
        unsigned long long c = (i / plane) % channels;
        float scale = gamma[c] * saved[channels + c];
        out[i] = inp[i] * scale + (beta[c] - saved[c] * scale);
    }
}

// dbeta[c] += sum(dout), dgamma[c] += sum(dout * xhat), with dgamma at dparams and dbeta at
// dparams + beta_at; sums2[c], sums2[C + c] keep the two sums for batchnorm_backward_input.
extern "C" __global__ void batchnorm_backward_sums(float* sums2, float* dparams,
                                                   unsigned long long beta_at,
                                                   const float* dout, const float* inp,
                                                   const float* saved, unsigned long long n,
                                                   unsigned long long channels,
                                                   unsigned long long plane) {
    __shared__ double shared[BLOCK];
    float* dgamma = dparams;
    float* dbeta = dparams + beta_at;
    unsigned long long c = blockIdx.x;
    if (c >= channels) return;
    float mu = saved[c], r = saved[channels + c];
    double sd = 0.0, sdx = 0.0;
    for (unsigned long long j = threadIdx.x; j < n * plane; j += blockDim.x) {
        unsigned long long i = ((j / plane) * channels + c) * plane + j % plane;
        sd += dout[i];
        sdx += (double)dout[i] * (double)((inp[i] - mu) * r);
    }
    sd = block_sum(sd, shared);
    sdx = block_sum(sdx, shared);
    if (threadIdx.x == 0) {
        dbeta[c] += (float)sd;
        dgamma[c] += (float)sdx;
        sums2[c] = (float)sd;
        sums2[channels + c] = (float)sdx;
    }
}

// dinp = gamma * rstd * (dout - mean(dout) - xhat * mean(dout * xhat)).
extern "C" __global__ void batchnorm_backward_input(float* dinp, const float* dout,
                                                    const float* inp, const float* saved,
                                                    const float* sums2, const float* gamma,
                                                    unsigned long long n,
                                                    unsigned long long channels,
                                                    unsigned long long plane) {
    float m = (float)(n * plane);
    GRID_STRIDE(i, n * channels * plane) {
        unsigned long long c = (i / plane) % channels;
        float mu = saved[c], r = saved[channels + c];
        float mean_d = sums2[c] / m, mean_dx = sums2[channels + c] / m;
        dinp[i] = gamma[c] * r * (dout[i] - mean_d - (inp[i] - mu) * r * mean_dx);
    }
}
