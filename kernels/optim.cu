// Optimizer steps over flat parameter buffers. Semantics: src/backend/cpu/elementwise.rs.

// g = scale * grad + wd * w; v = momentum * v + g; w -= lr * v.
extern "C" __global__ void sgd_step(float* params, float* velocity, const float* grads, float lr,
                                    float momentum, float weight_decay, float scale,
                                    unsigned long long n) {
    GRID_STRIDE(i, n) {
        float g = scale * grads[i] + weight_decay * params[i];
        float v = momentum * velocity[i] + g;
        velocity[i] = v;
        params[i] -= lr * v;
    }
}

// PyTorch's Adam with L2 weight decay: m += (1 - b1)(g - m); v += (1 - b2)(g^2 - v);
// w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
extern "C" __global__ void adam_step(float* params, float* m, float* v, const float* grads,
                                     float lr, float one_minus_beta1, float one_minus_beta2,
                                     float eps, float weight_decay, float scale,
                                     float bias_correction1, float bias_correction2,
                                     unsigned long long n) {
    float step_size = lr / bias_correction1;
    float sqrt_bc2 = sqrtf(bias_correction2);
    GRID_STRIDE(i, n) {
        float g = scale * grads[i] + weight_decay * params[i];
        float mi = m[i] + one_minus_beta1 * (g - m[i]);
        float vi = v[i] + one_minus_beta2 * (g * g - v[i]);
        m[i] = mi;
        v[i] = vi;
        params[i] -= step_size * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    }
}
